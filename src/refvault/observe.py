"""Operational events: what the storage, vault and guard layers report for metrics, and who receives it.

The layers below the server call :func:`event` and :func:`timing` at the moments an operator counts
(an integrity failure, a guard stop, a policy denial, a budget refusal, an audit append, a blob-store
error); nothing happens unless an :class:`Observer` is installed (``refvault serve`` installs the
Prometheus one, :mod:`refvault.server.metrics`), so the cost without one is one global read.

**An event never carries an identifier, a scope value or content.** Its name is one of :data:`EVENTS`
and its reason one of that event's fixed words (:func:`reason_word` maps anything else to
``"other"``): artifact ids, tenants, users, sessions, key ids and bytes have no argument to travel in.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Protocol

__all__ = [
    "EVENTS",
    "TIMINGS",
    "Observer",
    "event",
    "guard_stopped",
    "install",
    "installed",
    "reason_word",
    "timed",
    "timing",
]

# Each event and the reasons it may carry ("other" stands for any reason not listed).
EVENTS: dict[str, frozenset[str]] = {
    # IntegrityError.kind: the stored bytes are missing, corrupt, or the manifest row fails its MAC
    "integrity_failure": frozenset({"missing", "corrupt", "manifest"}),
    # the guard's arms (refvault.guard.findings.Finding.arm), or "policy" when a disclosure rule denied it
    "guard_stop": frozenset({"content", "pieces", "size", "policy"}),
    # which check refused: a policy rule, or a redact-only rule on a read that cannot be redacted
    "policy_denial": frozenset({"rule", "redact"}),
    # the budget dimension that ran out (refvault.budgets.Budget's fields)
    "budget_refusal": frozenset(
        {
            "acquired_bytes",
            "retained_bytes",
            "read_calls",
            "scanned_records",
            "scanned_bytes",
            "returned_tokens",
            "recomputations",
            "seconds",
        }
    ),
    # a catalog connection taken from its pool, or given back
    "catalog_connection": frozenset({"checkout", "checkin"}),
    # the blob-store operation that failed (after the store's own retries)
    "blob_error": frozenset({"put", "get", "head", "delete", "list", "copy"}),
    # retries the blob store made before a request failed (reported with the failure)
    "blob_retry": frozenset({"put", "get", "head", "delete", "list", "copy"}),
}
TIMINGS = frozenset({"audit_append"})  # operations whose duration is reported


class Observer(Protocol):
    """What receives events; must be thread-safe and never raise (it runs inside storage calls)."""

    def event(self, name: str, reason: str, amount: float) -> None: ...

    def timing(self, name: str, seconds: float) -> None: ...


_observer: Observer | None = None


def install(observer: Observer | None) -> Observer | None:
    """Make ``observer`` the process's receiver of events (None: none); returns the one it replaces."""
    global _observer
    previous, _observer = _observer, observer
    return previous


def installed() -> Observer | None:
    """The process's observer, if one is installed."""
    return _observer


def reason_word(name: str, reason: str) -> str:
    """``reason`` if it is one of ``name``'s fixed words, else ``"other"`` (never the value itself)."""
    return reason if reason in EVENTS.get(name, frozenset()) else "other"


def event(name: str, reason: str = "", amount: float = 1) -> None:
    """Report ``amount`` occurrences of event ``name`` (one of :data:`EVENTS`) for ``reason`` (a fixed word)."""
    observer = _observer
    if observer is not None:
        with suppress(Exception):  # metrics never break the operation they count
            observer.event(name, reason_word(name, reason), amount)


def guard_stopped(findings: Sequence[object]) -> None:
    """Report one request the guard refused: reason ``policy`` if a disclosure rule denied any finding, else the
    first finding's arm (``content``, ``pieces``, ``size``)."""
    if _observer is None or not findings:
        return
    if any(getattr(finding, "rule_id", None) for finding in findings):
        event("guard_stop", "policy")
    else:
        event("guard_stop", str(getattr(findings[0], "arm", "")))


def timing(name: str, seconds: float) -> None:
    """Report that one ``name`` operation (one of :data:`TIMINGS`) took ``seconds``."""
    observer = _observer
    if observer is not None and name in TIMINGS:
        with suppress(Exception):  # metrics never break the operation they time
            observer.timing(name, seconds)


@contextmanager
def timed(name: str) -> Iterator[None]:
    """Report the block's duration as one ``name`` operation (only when an observer is installed)."""
    if _observer is None:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        timing(name, time.perf_counter() - start)
