"""Run budgets, as values: what a run (a scope's session) may spend, and what it has spent.

A :class:`Budget` limits each cost of a run separately, because a small prompt can hide an expensive
scan: bytes acquired and retained by puts, read calls, records and bytes scanned, tokens returned,
recomputations (rebuilt record indexes, redaction derivatives) and wall-clock seconds. ``None`` means
unlimited. :class:`Usage` is what :meth:`Vault.usage <refvault.Vault.usage>` answers: per dimension,
what was spent and what is left, and when the run's budget started.

Tokens are counted by a :data:`TokenCounter`: by default :func:`bytes_per_token` (4 bytes a token,
rounded up: free to compute, and known before the bytes are read); :func:`estimated_tokens` uses the
character-class estimate of :mod:`refvault.read.previews.tokens`'s kind without a tokenizer. See
``docs/budgets.md`` for what charges what.

This module sits in the bottom layer: it imports only :mod:`refvault.errors` and :mod:`refvault.model`.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from refvault.errors import InvalidArgument
from refvault.model import Scope, format_time, parse_time

__all__ = [
    "COUNTED",
    "DIMENSIONS",
    "MAX_LIMIT",
    "MAX_SECONDS",
    "Budget",
    "BudgetRow",
    "TokenCounter",
    "Usage",
    "bytes_per_token",
    "new_generation",
]

DIMENSIONS = (
    "acquired_bytes",
    "retained_bytes",
    "read_calls",
    "scanned_records",
    "scanned_bytes",
    "returned_tokens",
    "recomputations",
    "seconds",
)
"""Every dimension of a budget, in the order :class:`Usage` reports them."""

COUNTED = DIMENSIONS[:-1]
"""The dimensions the catalog counts (``seconds`` is wall time since the run's budget started)."""

MAX_LIMIT = (1 << 62) - 1
"""The largest limit of a counted dimension (it fits a signed 64-bit column with room to add)."""

MAX_SECONDS = 1e12
"""The largest ``seconds`` limit (about 31,700 years): its microseconds fit a signed 64-bit column."""

TokenCounter = Callable[[bytes], int]
"""Counts the tokens of returned bytes (UTF-8 text, or raw bytes); must be cheap and never negative."""


def bytes_per_token(data: bytes, *, ratio: int = 4) -> int:
    """The default token counter: ``ceil(len(data) / 4)``, a documented estimate for English text and code.

    It is known from a length alone, so it costs nothing on the read path and is the same on every server.
    """
    return -(-len(data) // ratio)


def _limit(name: str, value: object) -> int | float | None:
    if value is None:
        return None
    if name == "seconds":
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_SECONDS:
            raise InvalidArgument(f"budget seconds must be a number from 0 to {MAX_SECONDS:,.0f} (or None: unlimited)")
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LIMIT:
        raise InvalidArgument(f"budget {name} must be an integer from 0 to {MAX_LIMIT} (or None: unlimited)")
    return value


@dataclass(frozen=True, slots=True)
class Budget:
    """What one run (a scope's session) may spend, per dimension; ``None`` (the default) is unlimited.

    Invariants: every counted limit is an integer from 0 to :data:`MAX_LIMIT`; ``seconds`` is a number
    from 0 to :data:`MAX_SECONDS`. A limit of 0 refuses every operation that costs that dimension anything.
    """

    acquired_bytes: int | None = None
    retained_bytes: int | None = None
    read_calls: int | None = None
    scanned_records: int | None = None
    scanned_bytes: int | None = None
    returned_tokens: int | None = None
    recomputations: int | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        for name in DIMENSIONS:
            object.__setattr__(self, name, _limit(name, getattr(self, name)))

    def limits(self) -> dict[str, int | float | None]:
        """Every dimension's limit (None: unlimited), in :data:`DIMENSIONS` order."""
        return {name: getattr(self, name) for name in DIMENSIONS}

    def to_json(self) -> dict[str, Any]:
        """The limits that are set, as JSON (what ``PUT /v1/budget`` takes and answers with)."""
        return {name: value for name, value in self.limits().items() if value is not None}

    @classmethod
    def from_json(cls, value: object) -> Budget:
        """A budget from its JSON (an object of dimension names): an unknown name is an :class:`InvalidArgument`."""
        if not isinstance(value, Mapping):
            raise InvalidArgument('a budget must be a JSON object of limits, e.g. {"read_calls": 100}')
        unknown = sorted(str(name) for name in value if name not in {f.name for f in fields(cls)})
        if unknown:
            raise InvalidArgument(
                f"unknown budget dimension {unknown[0][:64]!r}; dimensions are: {', '.join(DIMENSIONS)}"
            )
        return cls(**{str(name): limit for name, limit in value.items()})


def new_generation(previous: int | None = None) -> int:
    """A generation for a run's budget that starts now: random, 62 bits, never 0 nor ``previous``.

    Random rather than counted, so a budget cleared (its row deleted) and set again does not start
    over at a generation an older reservation still holds (a collision: one chance in 2^62).
    """
    while True:
        generation = secrets.randbits(62)
        if generation not in (0, previous):
            return generation


@dataclass(frozen=True, slots=True)
class BudgetRow:
    """A run's budget as the catalog keeps it: the limits, what was spent (or reserved), when it started.

    ``spent`` counts what every server reserved for the run, used or not yet used; ``generation`` is
    drawn afresh (:func:`new_generation`) whenever the run's budget starts (a new row, a restart): a
    reservation made under an older budget of the run, even one cleared and set again, never matches.
    """

    scope: Scope
    budget: Budget
    spent: Mapping[str, int]
    started_at: datetime
    generation: int


@dataclass(frozen=True, slots=True)
class Usage:
    """What a run spent and has left, per dimension, and when its budget started.

    ``spent`` has every dimension (``seconds``: wall time since ``started_at``); ``left`` is None for an
    unlimited dimension and never negative. ``budget`` is None when the run has no budget (then nothing
    is counted: ``spent`` is all zeros and ``started_at`` None).
    """

    scope: Scope
    budget: Budget | None
    spent: Mapping[str, int | float]
    left: Mapping[str, int | float | None]
    started_at: datetime | None

    @property
    def exhausted(self) -> tuple[str, ...]:
        """The dimensions with nothing left."""
        return tuple(name for name in DIMENSIONS if self.left.get(name) == 0)

    @classmethod
    def from_json(cls, scope: Scope, value: object) -> Usage:
        """A usage from its JSON (``GET /v1/usage``) for ``scope``; :class:`InvalidArgument` if malformed."""
        try:
            assert isinstance(value, Mapping)
            budget = None if value["budget"] is None else Budget.from_json(value["budget"])
            spent = {name: value["spent"][name] for name in DIMENSIONS}
            left = {name: value["left"].get(name) for name in DIMENSIONS}
            started = value["started_at"]
            moment = None if started is None else parse_time(started)
        except (AssertionError, KeyError, TypeError, AttributeError, ValueError, InvalidArgument):
            raise InvalidArgument("a malformed usage") from None
        return cls(scope, budget, spent, left, moment)

    def to_json(self) -> dict[str, Any]:
        """As ``GET /v1/usage`` answers it."""
        return {
            "scope": {"tenant": self.scope.tenant, "user": self.scope.user, "session": self.scope.session},
            "budget": None if self.budget is None else self.budget.to_json(),
            "spent": dict(self.spent),
            "left": dict(self.left),
            "exhausted": list(self.exhausted),
            "started_at": None if self.started_at is None else format_time(self.started_at),
        }
