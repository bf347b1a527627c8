"""Run budgets on the vault: set, read and charge what a run (a scope's session) may spend.

The values are in :mod:`refvault.budgets`; the rows in the catalog (one per run, shared by every server
of the store). This module is the vault's :class:`Budgets` mixin and the per-process :class:`Ledger`
that charges operations against the catalog's rows without a catalog write per operation.

Invariants (tested in ``tests/vault/test_budgets.py`` and ``tests/catalog/test_budget_concurrency.py``):

* **All or nothing, before anything leaves.** A charge covers every dimension of one operation at once;
  if any would go over its limit it raises :class:`~refvault.errors.BudgetExceeded` and charges
  nothing. A put charges after its bytes are hashed and before its manifest is published (nothing is
  stored); a read charges after its bytes are verified and before they are returned (nothing is disclosed).
* **Leases, never past a limit.** A server reserves part of what a run has left from the catalog in one
  atomic conditional write (``spent + x <= limit``) and charges operations against that reservation in
  memory; the catalog is written once per reservation, not per operation. The catalog therefore never
  counts a run past a limit, and no server uses more than it reserved: the sum of what all servers
  spend stays within every counted limit. Only ``seconds`` (wall time, checked as an operation starts)
  can be overrun, by the one operation running when it ran out. What a server reserved and did not use
  is returned when :meth:`Vault.usage` is asked or the vault closes (a server that dies keeps it counted).
* **A budget changed elsewhere binds reservations made before it.** A restart, or a budget cleared and
  set again, has a generation never used before for the run: older reservations are dropped, not spent.
  Limits lowered without restart keep the generation and what was spent; a server that then reads a
  row counting a dimension past its new limit returns its reservation of it before it charges again.
  Either way, once every server has read the change (within :data:`REFRESH` seconds), the run spends
  past its new limits by at most the one operation running then.
* **No budget costs one cached look.** A run without a budget is recognised from what this process read
  of the catalog at most :data:`REFRESH` seconds ago; a budget set on another server therefore applies
  here within :data:`REFRESH` seconds (at once on the server that set it). A run's limits and restarts
  are re-read as often.
* **Read-only stores** (``Vault.open(read_only=True)``, the CLI's reading commands) record nothing: a run's
  limits are enforced there against what it had spent, within the process.
* **Dimensions without a limit** of a run that has a budget are counted in memory and added to the
  catalog with the next reservation or look (at most :data:`REFRESH` seconds late), for :meth:`usage`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from refvault import observe
from refvault.budgets import COUNTED, DIMENSIONS, Budget, BudgetRow, TokenCounter, Usage, bytes_per_token
from refvault.errors import BudgetExceeded, InvalidArgument
from refvault.model import Scope
from refvault.vault.audit_trail import in_engine_read

if TYPE_CHECKING:
    from collections.abc import Callable

    from refvault.blobs.base import BlobWriter
    from refvault.catalog.base import Catalog

__all__ = ["LEASE_SHARE", "REFRESH", "Budgets", "Ledger", "uncharged"]

REFRESH = 1.0
"""Seconds a server trusts what it last read of a run's budget (a new budget reaches it within this)."""

LEASE_SHARE = 8
"""A reservation takes what the operation needs plus 1/LEASE_SHARE of what the run has left besides."""

_UNCHARGED: ContextVar[bool] = ContextVar("refvault_uncharged", default=False)
_MAX_RUNS = 4096  # runs remembered without a budget before the oldest such are forgotten


@contextmanager
def uncharged() -> Iterator[None]:
    """Mark vault reads the caller charges itself otherwise (a record index build: one recomputation)."""
    token = _UNCHARGED.set(True)
    try:
        yield
    finally:
        _UNCHARGED.reset(token)


class _Run:
    """One run as this process knows it: its row (None: no budget), when it was read, what is reserved."""

    __slots__ = ("budget", "lease", "limited", "looked", "pending", "row")

    def __init__(self) -> None:
        self.row: BudgetRow | None = None
        self.budget: Budget | None = None  # the budget ``limited`` was made for
        self.limited: dict[str, bool] = {}  # per counted dimension: has a limit
        self.looked = float("-inf")
        self.lease: dict[str, int] = {}  # reserved in the catalog by this process and not used yet
        self.pending: dict[str, int] = {}  # used in dimensions without a limit, not yet added to the catalog


def _exceeded(name: str, limit: int | float, needed: int | float) -> BudgetExceeded:
    observe.event("budget_refusal", name)
    return BudgetExceeded(
        f"this run's {name} budget ({limit:g}) has less left than the operation needs ({needed:g}); "
        "nothing was stored or returned (vault.usage(scope) shows what was spent)",
        dimension=name,
    )


class Ledger:
    """Charges operations against run budgets, for one vault (see the module docstring)."""

    def __init__(self, catalog: Catalog, clock: Callable[[], datetime]) -> None:
        self._catalog = catalog
        self._clock = clock
        self._runs: dict[Scope, _Run] = {}
        self._lock = threading.RLock()
        self.counter: TokenCounter = bytes_per_token

    # -- what this process knows -----------------------------------------------------------

    def run(self, scope: Scope) -> _Run | None:
        """The run's state if it has a budget; None if it has none (as read at most REFRESH seconds ago)."""
        state = self._runs.get(scope)
        if state is not None and time.monotonic() - state.looked < REFRESH:
            return state if state.row is not None else None
        return self._look(scope)

    def _look(self, scope: Scope) -> _Run | None:
        with self._lock:
            state = self._runs.get(scope)
            if state is None:
                if len(self._runs) >= _MAX_RUNS:
                    self._forget()
                state = self._runs[scope] = _Run()
            self._push_pending(scope, state)
            self._adopt(state, self._catalog.budget(scope))
            return state if state.row is not None else None

    def _adopt(self, state: _Run, row: BudgetRow | None) -> None:
        """Take ``row`` as the run's current row (read from the catalog just now).

        A reservation of another generation (or of a run that has no budget now) is dropped, not returned:
        the row it was counted in is gone. Of the same generation, limits lowered since it was made: a
        dimension the row counts past its new limit has reservations beyond it, so this process returns
        its own (every server does on its next look) and the run goes on only from what it really used.
        """
        if row is None or state.row is None or row.generation != state.row.generation:
            state.lease.clear()
            state.pending.clear()
        else:
            over = {
                name: -amount
                for name, amount in state.lease.items()
                if amount > 0 and (limit := getattr(row.budget, name)) is not None and row.spent[name] > limit
            }
            if over:
                for name in over:
                    del state.lease[name]
                self._record(row.scope, row, over)
                row = replace(row, spent={**row.spent, **{n: max(0, row.spent[n] + a) for n, a in over.items()}})
        state.row, state.looked = row, time.monotonic()

    def _forget(self) -> None:
        for scope in [scope for scope, state in self._runs.items() if state.row is None][: _MAX_RUNS // 2]:
            del self._runs[scope]

    # -- charging ---------------------------------------------------------------------------

    def charge(self, scope: Scope, amounts: Mapping[str, int]) -> None:
        """Charge one operation's ``amounts`` (dimension -> amount) to ``scope``'s run, all or nothing.

        :class:`BudgetExceeded` (nothing charged) if a dimension would go over its limit, or the run's
        ``seconds`` are spent. A run without a budget is not charged. The common case (what this process
        reserved covers it) touches only memory.
        """
        state = self._runs.get(scope)
        if state is None or time.monotonic() - state.looked >= REFRESH:
            if self._look(scope) is None:
                return
        elif state.row is None:
            return
        with self._lock:
            state = self._runs.get(scope)
            if state is None or state.row is None:
                return
            budget = state.row.budget
            if state.budget is not budget:
                state.budget = budget
                state.limited = {name: getattr(budget, name) is not None for name in COUNTED}
            if budget.seconds is not None:
                self._check_seconds(state.row)
            lease, limited = state.lease, state.limited
            for name, amount in amounts.items():
                if limited[name] and lease.get(name, 0) < amount:
                    break
            else:  # covered by what this process reserved: memory only
                pending = state.pending
                for name, amount in amounts.items():
                    if amount <= 0:
                        continue
                    if limited[name]:
                        lease[name] -= amount
                    else:
                        pending[name] = pending.get(name, 0) + amount
                return
            budget = state.row.budget
            need = {
                name: amount
                for name, amount in amounts.items()
                if amount > 0 and getattr(budget, name) is not None and amount > state.lease.get(name, 0)
            }
            if need and not self._reserve(scope, state, need):
                return  # the run has no budget any more
            current = state.row.budget if state.row is not None else budget
            for name, amount in amounts.items():
                if amount <= 0:
                    continue
                if getattr(current, name) is None:
                    state.pending[name] = state.pending.get(name, 0) + amount
                else:
                    state.lease[name] = state.lease.get(name, 0) - amount

    def charge_read(self, scope: Scope, data: bytes) -> None:
        """:meth:`charge` a vault read returning ``data`` (one read call, its bytes, its tokens), on the read
        path: a run without a budget costs one cached look, a run whose reservation covers the read one
        lock and three counters. A read engine's own reads are not charged (the engine charges its call)."""
        state = self._runs.get(scope)
        if state is not None and time.monotonic() - state.looked < REFRESH:
            row = state.row
            if row is None:
                return
            if in_engine_read() or _UNCHARGED.get():
                return
            size, tokens = len(data), self.counter(data)
            budget = row.budget
            if budget.seconds is None and state.budget is budget:
                limited, lease = state.limited, state.lease
                with self._lock:
                    if (
                        state.row is row
                        and (not limited["read_calls"] or lease.get("read_calls", 0) >= 1)
                        and (not limited["scanned_bytes"] or lease.get("scanned_bytes", 0) >= size)
                        and (not limited["returned_tokens"] or lease.get("returned_tokens", 0) >= tokens)
                    ):
                        for name, amount in (("read_calls", 1), ("scanned_bytes", size), ("returned_tokens", tokens)):
                            if limited[name]:
                                lease[name] -= amount
                            elif amount:
                                state.pending[name] = state.pending.get(name, 0) + amount
                        return
        elif in_engine_read() or _UNCHARGED.get():
            return
        else:
            size, tokens = len(data), self.counter(data)
        self.charge(scope, {"read_calls": 1, "scanned_bytes": size, "returned_tokens": tokens})

    def _reserve(self, scope: Scope, state: _Run, amounts: dict[str, int]) -> bool:
        """Reserve what the lease lacks of ``amounts`` (plus a share of what is left, on a first try).

        False if the run lost its budget meanwhile (nothing to charge then); :class:`BudgetExceeded` if a
        fresh read of the row shows a dimension cannot be covered.
        """
        for attempt in range(4):
            row = state.row
            assert row is not None
            ask = {}
            for name, amount in amounts.items():
                limit = getattr(row.budget, name)
                short = amount - state.lease.get(name, 0)
                if limit is None or short <= 0:
                    continue
                if attempt and row.spent[name] + short > limit:  # known from the row just read
                    raise _exceeded(name, limit, short)
                ask[name] = short + (max(0, (limit - row.spent[name] - short) // LEASE_SHARE) if not attempt else 0)
            if not ask:
                return True
            if self._record(scope, row, ask):
                for name, amount in ask.items():
                    state.lease[name] = state.lease.get(name, 0) + amount
                state.row = replace(row, spent={**row.spent, **{n: row.spent[n] + a for n, a in ask.items()}})
                return True
            self._adopt(state, self._catalog.budget(scope))
            if state.row is None:
                return False
            self._check_seconds(state.row)
        name = next(iter(amounts))
        raise _exceeded(name, 0 if state.row is None else getattr(state.row.budget, name) or 0, amounts[name])

    def _record(self, scope: Scope, row: BudgetRow, amounts: Mapping[str, int]) -> bool:
        """Reserve (or return) ``amounts`` in the catalog. A catalog opened read-only records nothing: the
        run's limits are then enforced against what it had spent when read, within this process only."""
        if not getattr(self._catalog, "read_only", False):
            return self._catalog.charge_budget(scope, row.generation, amounts)
        return all(
            amount <= 0 or (limit := getattr(row.budget, name)) is None or row.spent[name] + amount <= limit
            for name, amount in amounts.items()
        )

    def _check_seconds(self, row: BudgetRow) -> None:
        limit = row.budget.seconds
        if limit is not None and (self._clock() - row.started_at).total_seconds() >= limit:
            raise _exceeded("seconds", limit, 0)

    def allowance(self, scope: Scope, name: str, wanted: int) -> int | None:
        """Reserve up to ``wanted`` of ``name`` for a scan and say how much it may use (None: unlimited).

        What the scan then uses is charged with :meth:`charge` (within what this returned, it cannot fail
        for ``name``); what it leaves stays reserved by this process for the run's next operations.
        """
        if self.run(scope) is None:
            return None
        with self._lock:
            state = self._runs.get(scope)
            if state is None or state.row is None or getattr(state.row.budget, name) is None:
                return None
            have = state.lease.get(name, 0)
            for _ in range(2):
                row = state.row
                if have >= wanted or row is None:
                    break
                limit = getattr(row.budget, name)
                if limit is None:
                    return None
                ask = min(wanted - have, limit - row.spent[name])
                if ask > 0 and self._record(scope, row, {name: ask}):
                    state.lease[name] = have = have + ask
                    state.row = replace(row, spent={**row.spent, name: row.spent[name] + ask})
                    break
                self._adopt(state, self._catalog.budget(scope))
                have = state.lease.get(name, 0)
            return min(have, wanted)

    def seconds_left(self, scope: Scope) -> float | None:
        """Seconds left of the run's ``seconds`` (None: unlimited or no budget; never negative)."""
        state = self.run(scope)
        if state is None or state.row is None or state.row.budget.seconds is None:
            return None
        elapsed = (self._clock() - state.row.started_at).total_seconds()
        return max(0.0, state.row.budget.seconds - elapsed)

    # -- returning what was reserved ---------------------------------------------------------

    def _push_pending(self, scope: Scope, state: _Run) -> None:
        if state.row is not None and state.pending:
            pending, state.pending = state.pending, {}
            self._record(scope, state.row, pending)  # unlimited: cannot fail on a limit

    def flush(self, scope: Scope | None = None) -> None:
        """Return what this process reserved and did not use, and add what it counted without a limit."""
        with self._lock:
            for key, state in list(self._runs.items()):
                if scope is not None and key != scope:
                    continue
                if state.row is not None:
                    release = {name: -amount for name, amount in state.lease.items() if amount > 0}
                    state.lease.clear()
                    if release:
                        self._record(key, state.row, release)
                    self._push_pending(key, state)
                state.looked = float("-inf")  # read again on next use

    def refund(self, scope: Scope, amounts: Mapping[str, int]) -> None:
        """Give back a charge whose operation failed (to this process's reservation: no catalog write)."""
        with self._lock:
            state = self._runs.get(scope)
            if state is None or state.row is None:
                return
            for name, amount in amounts.items():
                if getattr(state.row.budget, name) is None:
                    state.pending[name] = max(0, state.pending.get(name, 0) - amount)
                else:
                    state.lease[name] = state.lease.get(name, 0) + amount

    def close(self) -> None:
        """Flush every run (the vault is closing)."""
        self.flush()

    def forget(self, scope: Scope, row: BudgetRow | None) -> None:
        """This process changed the run's budget: drop what it held and take ``row`` at once."""
        with self._lock:
            state = self._runs.setdefault(scope, _Run())
            state.lease.clear()
            state.pending.clear()
            state.row, state.looked = row, time.monotonic()


class Budgets:
    """The vault's budget methods (mixed into :class:`~refvault.Vault`)."""

    if TYPE_CHECKING:
        catalog: Catalog
        _closed: bool

        def clock(self) -> datetime: ...
        def attachment(self, name: str, factory: Callable[[], Any]) -> Any: ...

    def _budget_ledger(self) -> Ledger:
        ledger: Ledger | None = self.__dict__.get("_ledger")
        if ledger is None:
            ledger = self.attachment("budgets", lambda: Ledger(self.catalog, self.clock))
            self.__dict__["_ledger"] = ledger
        return ledger

    def set_budget(self, scope: Scope, budget: Budget, *, restart: bool = False) -> Usage:
        """Set what ``scope``'s run (its session) may spend; its :class:`Usage` after.

        A run that had no budget starts now with nothing spent; one that had keeps what it spent under
        its new limits unless ``restart`` (then it starts again, now, with nothing spent). Other servers
        of the store apply it within :data:`REFRESH` seconds.
        """
        owner = _checked(scope)
        if not isinstance(budget, Budget):
            raise InvalidArgument("budget must be a refvault.Budget(...)")
        ledger = self._budget_ledger()
        ledger.flush(owner)
        ledger.forget(owner, self.catalog.set_budget(owner, budget, self.clock(), restart=restart))
        return self.usage(owner)

    def clear_budget(self, scope: Scope) -> bool:
        """Remove ``scope``'s budget and what it counted (its run is unlimited again); False if it had none."""
        owner = _checked(scope)
        ledger = self._budget_ledger()
        ledger.flush(owner)
        removed = self.catalog.clear_budget(owner)
        ledger.forget(owner, None)
        return removed

    def usage(self, scope: Scope) -> Usage:
        """What ``scope``'s run spent and has left, per dimension (every server's use, see the module docstring)."""
        owner = _checked(scope)
        self._budget_ledger().flush(owner)
        row = self.catalog.budget(owner)
        if row is None:
            return Usage(owner, None, dict.fromkeys(DIMENSIONS, 0), dict.fromkeys(DIMENSIONS), None)
        elapsed = max(0.0, (self.clock() - row.started_at).total_seconds())
        spent: dict[str, int | float] = {name: row.spent[name] for name in COUNTED}
        spent["seconds"] = elapsed
        left: dict[str, int | float | None] = {}
        for name in DIMENSIONS:
            limit = getattr(row.budget, name)
            left[name] = None if limit is None else max(0, limit - spent[name])
        return Usage(owner, row.budget, spent, left, row.started_at)

    def set_token_counter(self, counter: TokenCounter) -> None:
        """Count returned tokens with ``counter`` (bytes -> tokens), not :func:`~refvault.budgets.bytes_per_token`."""
        if not callable(counter):
            raise InvalidArgument("a token counter must be a callable taking bytes and returning an int")
        self._budget_ledger().counter = counter

    def count_tokens(self, data: bytes | str) -> int:
        """The tokens ``data`` costs, by this vault's token counter."""
        raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
        return int(self._budget_ledger().counter(raw))

    def charge(self, scope: Scope, **amounts: int) -> None:
        """Charge one operation an upper layer performs to ``scope``'s run (see :meth:`Ledger.charge`):
        ``amounts`` are non-negative integers by counted dimension (``read_calls=1, scanned_bytes=...``)."""
        for name, amount in amounts.items():
            if name not in COUNTED or isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
                raise InvalidArgument(f"charge takes non-negative integers of {', '.join(COUNTED)}")
        self._budget_ledger().charge(scope, amounts)

    def budget_allowance(self, scope: Scope, dimension: str, wanted: int) -> int | None:
        """How much of ``dimension`` a scan may use, up to ``wanted`` (None: unlimited): :meth:`Ledger.allowance`."""
        return self._budget_ledger().allowance(scope, dimension, wanted)

    def budget_seconds_left(self, scope: Scope) -> float | None:
        """Seconds left of the run's ``seconds`` budget (None: unlimited)."""
        return self._budget_ledger().seconds_left(scope)

    def budgeted(self, scope: Scope) -> bool:
        """Whether ``scope``'s run has a budget (cached: see :data:`REFRESH`)."""
        return self._budget_ledger().run(scope) is not None

    # -- the vault's own reads and puts --------------------------------------------------------

    def _charge_read(self, scope: Scope, data: bytes) -> None:
        """A read returning ``data``: one read call, its bytes scanned, its tokens; a read engine charges itself."""
        ledger = self.__dict__.get("_ledger") or self._budget_ledger()
        ledger.charge_read(scope, data)

    def _charge_stream(self, scope: Scope, size: int) -> None:
        """A stream opened on ``size`` bytes: one read call and every byte it may scan (tokens: where text returns)."""
        ledger = self._budget_ledger()
        if ledger.run(scope) is None or in_engine_read() or _UNCHARGED.get():
            return
        ledger.charge(scope, {"read_calls": 1, "scanned_bytes": size})

    @contextmanager
    def _put_charged(
        self, scope: Scope, size: int, writer: BlobWriter | None, idempotency_key: str | None
    ) -> Iterator[None]:
        """Charge a capture of ``size`` bytes before the block publishes it; give it back if publishing fails.

        Over budget: ``writer`` is aborted (nothing stored) and :class:`BudgetExceeded` raised. A retried
        put whose idempotency key already holds an artifact stores nothing new and is not charged.
        """
        ledger = self._budget_ledger()
        amounts = {"acquired_bytes": size, "retained_bytes": size}
        if ledger.run(scope) is None or (
            idempotency_key is not None and self.catalog.find_by_key(scope, idempotency_key) is not None
        ):
            yield
            return
        try:
            ledger.charge(scope, amounts)
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        try:
            yield
        except BaseException:
            ledger.refund(scope, amounts)
            raise


def _checked(scope: object) -> Scope:
    if not isinstance(scope, Scope):
        raise InvalidArgument("scope must be a refvault.Scope(tenant=..., user=..., session=...)")
    return scope
