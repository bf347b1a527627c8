"""What the rest of refvault needs of a leak guard, and the one way a hook finds its guard.

:class:`~refvault.guard.LeakGuard` is the implementation; the Toolbox, the framework adapters
(:mod:`refvault.integrations`) and the hooks of :mod:`refvault.guard.hooks` depend on these
protocols only. This module imports no third-party library (no numpy, no numba), so the layers
above may import it at load time and the guard's kernels are compiled only when a guard is made.

Every guard hook takes its guard the same way: as its first argument ``guard``, a
:class:`RequestChecker` (a ``LeakGuard``) or anything that holds one as ``.guard`` (a
``Toolbox``, whose guard learns every value its tools read by reference). :func:`resolve_guard`
turns that argument into the checker, with one set of errors for every hook; :func:`refuse_leaks`
is the check of a hook that cannot send a redacted copy instead of the request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from refvault.errors import ContextLeak, InvalidArgument
from refvault.observe import guard_stopped

if TYPE_CHECKING:
    from refvault.contract import VaultContract
    from refvault.guard.guard import Finding, Policy
    from refvault.model import Scope

__all__ = ["Guard", "GuardHolder", "Redactor", "RequestChecker", "refuse_leaks", "resolve_guard", "resolve_redactor"]


@runtime_checkable
class Redactor(Protocol):
    """What the log and span hooks need: redact a text."""

    def redact_text(self, text: str) -> tuple[str, list[Finding]]: ...


@runtime_checkable
class RequestChecker(Redactor, Protocol):
    """What the transport and the framework hooks need: check or scan an outgoing request, under a policy."""

    policy: Policy

    def scan(self, request: object) -> list[Finding]: ...

    def check(self, request: object) -> object: ...


@runtime_checkable
class Guard(RequestChecker, Protocol):
    """A checker that also learns what to protect: what a Toolbox holds as ``box.guard``.

    The Toolbox calls :meth:`protect` with every value a tool reads by reference and
    :meth:`exempt_payload` with each image ``load_artifacts`` hands the model; its users call the rest.
    If the guard also has ``exempt_disclosed(text, artifact_ids)`` (``LeakGuard`` does), the Toolbox tells it
    each text it shows the model of model-disclosed artifacts; a guard without it is simply not told.
    """

    def protect(self, artifact_id: str, data: bytes | str) -> None: ...

    def protect_scope(self, vault: VaultContract, scope: Scope) -> int: ...

    def exempt_payload(self, payload: str) -> None: ...

    def new_run(self) -> None: ...

    def stats(self) -> dict[str, int]: ...


class GuardHolder(Protocol):
    """Anything that holds the guard to use as ``.guard`` (a ``Toolbox``; None when made with ``guard=None``)."""

    @property
    def guard(self) -> Guard | None: ...


_NO_GUARD = "no leak guard to check with (was the Toolbox made with guard=None?): pass a LeakGuard"
_NO_TOOLBOX_GUARD = "this Toolbox has no leak guard (it was made with guard=None): pass a LeakGuard"
_NOT_A_GUARD = "guard must be a refvault LeakGuard, or a Toolbox whose guard to use"


def _held(guard: object, needs: type) -> object:
    """``guard``, or the guard it holds; the errors every hook shares."""
    if guard is None:
        raise InvalidArgument(_NO_GUARD)
    if isinstance(guard, needs) or not hasattr(guard, "guard"):
        return guard
    held = guard.guard
    if held is None:
        raise InvalidArgument(_NO_TOOLBOX_GUARD)
    return held


def resolve_guard(guard: object, *, raise_policy_for: str | None = None) -> RequestChecker:
    """The checker a hook uses: ``guard`` itself, or the guard a Toolbox (a :class:`GuardHolder`) holds.

    Raises :class:`~refvault.errors.InvalidArgument` for None, a Toolbox made with ``guard=None``
    and anything else that is not a :class:`RequestChecker`. ``raise_policy_for`` names a hook
    that can only refuse a request (it cannot rewrite one): a guard with policy ``"redact"`` is
    then refused too.
    """
    checker = _held(guard, RequestChecker)
    if not isinstance(checker, RequestChecker) or not callable(checker.check) or not callable(checker.scan):
        raise InvalidArgument(_NOT_A_GUARD)
    if raise_policy_for is not None and checker.policy != "raise":
        raise InvalidArgument(f"{raise_policy_for} needs a guard with policy 'raise': its requests are not rewritten")
    return checker


def resolve_redactor(guard: object) -> Redactor:
    """:func:`resolve_guard` for the log and span hooks, which only redact text."""
    redactor = _held(guard, Redactor)
    if not isinstance(redactor, Redactor):
        raise InvalidArgument(_NOT_A_GUARD)
    return redactor


def refuse_leaks(checker: RequestChecker, request: object) -> None:
    """Check ``request``; a hit raises :class:`~refvault.errors.ContextLeak` under either policy.

    For hooks that cannot send a redacted copy in place of the request (callbacks, wrapped models):
    under policy ``"redact"`` the copy :meth:`~refvault.guard.LeakGuard.check` hands back is refused.
    """
    if checker.check(request) is not request:
        findings = checker.scan(request)
        guard_stopped(findings)
        raise ContextLeak(findings)
