"""What the read engines charge to a run's budget (:mod:`refvault.budgets`), once per call.

A read engine (a window, grep, a record query, a derivative build) reads through the vault inside
:func:`~refvault.vault.audit_trail.engine_read`, where the vault's own reads charge nothing: the engine
charges the call itself, here. A window is a read call: over budget it raises
:class:`~refvault.errors.BudgetExceeded` before its text is returned. A scan (grep, a query) is capped
by what the run has left (:class:`ScanMeter`): it stops there and says so (``scan_complete: false``,
``stopped_by: "budget"``), like a scan its own time budget stops; it is never cut silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from refvault.model import Scope

if TYPE_CHECKING:
    from refvault.vault.core import Vault
    from refvault.vault.verified import ArtifactStream

__all__ = ["ScanMeter", "TokenMeter", "charge"]


def charge(
    vault: Vault,
    scope: Scope,
    *,
    read_calls: int = 0,
    scanned_bytes: int = 0,
    scanned_records: int = 0,
    returned_tokens: str | bytes | int = 0,
    recomputations: int = 0,
) -> None:
    """Charge one engine call to ``scope``'s run, all or nothing (``returned_tokens``: a count, or the text
    returned, counted by the vault's token counter). A run without a budget costs one cached look."""
    if not vault.budgeted(scope):
        return
    tokens = returned_tokens if isinstance(returned_tokens, int) else vault.count_tokens(returned_tokens)
    vault.charge(
        scope,
        read_calls=read_calls,
        scanned_bytes=scanned_bytes,
        scanned_records=scanned_records,
        returned_tokens=tokens,
        recomputations=recomputations,
    )


@dataclass
class TokenMeter:
    """The tokens a scan may still return (``left`` None: unlimited), and what it returned so far."""

    vault: Vault
    scope: Scope
    left: int | None
    used: int = 0

    def take(self, text: str) -> bool:
        """Count ``text`` as returned if it fits (reserving more of the run's budget if need be); False
        (nothing counted) if the run has no room left for it."""
        tokens = self.vault.count_tokens(text)
        if self.left is not None and self.used + tokens > self.left:
            more = self.vault.budget_allowance(self.scope, "returned_tokens", self.used + tokens)
            self.left = None if more is None else max(self.left, more)
            if self.left is not None and self.used + tokens > self.left:
                return False
        self.used += tokens
        return True


class _Capped:
    """A verified stream that hands out at most ``cap`` bytes in all; ``cut``: it withheld some."""

    def __init__(self, stream: ArtifactStream, cap: int | None) -> None:
        self._stream = stream
        self.left = cap
        self.used = 0
        self.cut = False

    def read(self, size: int = -1) -> bytes:
        wanted = self._stream.size - self._stream.tell() if size < 0 else size
        allowed = wanted if self.left is None else min(wanted, self.left)
        data = self._stream.read(allowed) if allowed > 0 else b""
        self.used += len(data)
        if self.left is not None:
            self.left -= len(data)
            if len(data) < wanted and self._stream.tell() < self._stream.size:
                self.cut = True
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._stream.seek(offset, whence)

    def tell(self) -> int:
        return self._stream.tell()


@dataclass
class ScanMeter:
    """One scan's share of the run's budget: how far it may scan, for how long, how many tokens it may return.

    :meth:`start` charges the read call (raising :class:`~refvault.errors.BudgetExceeded` before anything is
    scanned if there is none left) and reserves what the scan may use; :meth:`settle` charges what it used.
    """

    vault: Vault
    scope: Scope
    budgeted: bool
    seconds: float
    limit: int | None = None  # what the scan may scan in its dimension (None: unlimited)
    tokens: TokenMeter | None = None
    _capped: list[_Capped] = field(default_factory=list)

    @classmethod
    def start(
        cls, vault: Vault, scope: Scope, wanted: int, seconds: float, *, dimension: str = "scanned_bytes", tokens: int
    ) -> ScanMeter:
        """Charge the call, reserve up to ``wanted`` of ``dimension`` and ``tokens`` tokens, cap ``seconds``."""
        if not vault.budgeted(scope):
            return cls(vault, scope, False, seconds)
        vault.charge(scope, read_calls=1)
        left_seconds = vault.budget_seconds_left(scope)
        meter = cls(vault, scope, True, seconds if left_seconds is None else min(seconds, left_seconds))
        meter.limit = vault.budget_allowance(scope, dimension, wanted)
        meter.tokens = TokenMeter(vault, scope, vault.budget_allowance(scope, "returned_tokens", tokens))
        return meter

    def wrap(self, stream: ArtifactStream) -> ArtifactStream:
        """``stream``, capped at what the run may still scan (counted either way)."""
        capped = _Capped(stream, self.limit if self.budgeted else None)
        self._capped.append(capped)
        return cast("ArtifactStream", capped)

    @property
    def cut(self) -> bool:
        """Whether the run's budget stopped the scan's bytes."""
        return any(capped.cut for capped in self._capped)

    @property
    def scanned(self) -> int:
        """Bytes the scan read."""
        return sum(capped.used for capped in self._capped)

    def settle(self, *, records: int = 0) -> None:
        """Charge what the scan used (within what :meth:`start` reserved)."""
        if not self.budgeted:
            return
        used = self.tokens.used if self.tokens is not None else 0
        self.vault.charge(self.scope, scanned_bytes=self.scanned, scanned_records=records, returned_tokens=used)
