"""Refvault errors as HTTP problem documents (RFC 9457) and back: the one table both directions read.

The server (:mod:`refvault.server.problems`) answers an error with the status, type and title of
its entry in :data:`PROBLEM_TYPES`; the client (:mod:`refvault.client`) raises, for a problem it
receives, the class that entry names (:func:`error_from_problem`). Neither writes the mapping again.
This module imports no HTTP library: it sits with :mod:`refvault.errors` at the bottom layer.

A problem document is ``{"type": PROBLEM_PREFIX + slug, "title", "status", "detail", "error"}``,
plus ``reason`` for an :class:`~refvault.errors.InvalidCursor` and ``suggestion`` for a
:class:`~refvault.errors.MisCopiedId` that has one; ``error`` is the name of the
:mod:`refvault.errors` class the error is (or derives from: :func:`public_name`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from refvault import errors
from refvault.errors import CURSOR_REASONS, RefvaultError
from refvault.model import parse_time

__all__ = [
    "PROBLEM_MEDIA_TYPE",
    "PROBLEM_PREFIX",
    "PROBLEM_TYPES",
    "ProblemType",
    "error_from_problem",
    "problem_type",
    "public_name",
]

PROBLEM_MEDIA_TYPE = "application/problem+json"
PROBLEM_PREFIX = "urn:refvault:problem:"


@dataclass(frozen=True, slots=True)
class ProblemType:
    """How one error class travels over HTTP.

    ``fallback``: the class a client raises for a problem with this ``status`` whose ``error``
    names no class it knows (one per status at most).
    """

    error: type[RefvaultError]
    status: int
    slug: str
    title: str
    fallback: bool = False


# Most specific first: the first class an error is an instance of decides.
PROBLEM_TYPES: tuple[ProblemType, ...] = (
    ProblemType(errors.Unauthenticated, 401, "unauthenticated", "Unauthenticated", fallback=True),
    ProblemType(errors.PolicyDenied, 403, "policy-denied", "Denied by policy"),
    ProblemType(errors.Forbidden, 403, "scope-not-allowed", "Scope not allowed", fallback=True),
    ProblemType(errors.MisCopiedId, 404, "mis-copied-id", "Mis-copied id"),
    ProblemType(errors.UnsupportedRead, 422, "unsupported-read", "Unsupported read", fallback=True),
    ProblemType(errors.InvalidCursor, 400, "invalid-cursor", "Invalid cursor"),
    ProblemType(errors.InvalidQuery, 400, "invalid-query", "Invalid query"),
    ProblemType(errors.InvalidMetadata, 400, "invalid-metadata", "Invalid metadata"),
    ProblemType(errors.InvalidScope, 400, "invalid-scope", "Invalid scope"),
    ProblemType(errors.InvalidId, 400, "invalid-id", "Invalid id"),
    ProblemType(errors.InvalidArgument, 400, "invalid-argument", "Invalid argument", fallback=True),
    ProblemType(errors.NotFound, 404, "not-found", "Not found"),
    ProblemType(errors.Expired, 410, "expired", "Expired"),
    ProblemType(errors.SealedArtifact, 403, "sealed", "Sealed artifact"),
    ProblemType(errors.IdempotencyConflict, 409, "idempotency-conflict", "Idempotency conflict", fallback=True),
    ProblemType(errors.TooLarge, 413, "too-large", "Too large", fallback=True),
    ProblemType(errors.QuotaExceeded, 413, "quota-exceeded", "Quota exceeded"),
    ProblemType(errors.Held, 409, "held", "Held"),
    ProblemType(errors.BudgetExceeded, 429, "budget-exceeded", "Budget exceeded"),
    ProblemType(errors.StaleHandle, 409, "stale-handle", "Stale handle"),
    ProblemType(errors.TooManyRequests, 429, "too-many-requests", "Too many requests"),
    ProblemType(errors.RequestTimeout, 408, "request-timeout", "Request timeout", fallback=True),
    ProblemType(errors.IntegrityError, 500, "integrity-error", "Integrity error"),
    ProblemType(errors.StorageError, 503, "storage-unavailable", "Storage unavailable"),
)

_BY_SLUG: dict[str, ProblemType] = {entry.slug: entry for entry in PROBLEM_TYPES}
_FALLBACK: dict[int, type[RefvaultError]] = {entry.status: entry.error for entry in PROBLEM_TYPES if entry.fallback}
# Classes rebuilt from the problem alone (their constructor takes the detail as the message); the
# others (an artifact id, a cursor's reason, a wait) are rebuilt by error_from_problem itself.
_SPECIAL: tuple[type[RefvaultError], ...] = (
    errors.NotFound,
    errors.Expired,
    errors.SealedArtifact,
    errors.PolicyDenied,
    errors.InvalidCursor,
    errors.IntegrityError,
    errors.TooManyRequests,
    errors.BudgetExceeded,
)
_KNOWN: tuple[type[RefvaultError], ...] = (RefvaultError, *(entry.error for entry in PROBLEM_TYPES))
_PLAIN: dict[str, type[RefvaultError]] = {cls.__name__: cls for cls in _KNOWN if not issubclass(cls, _SPECIAL)}


def problem_type(exc: RefvaultError) -> ProblemType | None:
    """The entry of the first class in :data:`PROBLEM_TYPES` that ``exc`` is; None (a 500) for an unlisted class."""
    return next((entry for entry in PROBLEM_TYPES if isinstance(exc, entry.error)), None)


def public_name(exc: RefvaultError) -> str:
    """The name of the :mod:`refvault.errors` class ``exc`` is (or derives from): a problem's ``error``."""
    cls = next(c for c in type(exc).__mro__ if c.__module__ == RefvaultError.__module__)
    return cls.__name__


def error_from_problem(
    status: int,
    slug: str,
    name: str,
    detail: str,
    *,
    artifact_id: str,
    reason: object = None,
    retry_after: int = 1,
    suggestion: object = None,
) -> RefvaultError:
    """The error a refvault problem stands for: the class its ``error`` names, else its type's, else its status's.

    ``detail`` is the problem's own (already checked fit to show), ``artifact_id`` the id the caller
    asked about (the classes that name an artifact take it from the caller, never from the answer),
    ``reason`` the problem's ``reason`` (kept only if it is a cursor reason), ``retry_after`` the
    seconds of its ``Retry-After`` and ``suggestion`` its ``suggestion`` (kept only if it is a well-formed
    id). A problem that names nothing known is a :class:`~refvault.errors.StorageError` that shows its status.
    """
    if name == "GrantNotFound":  # ``artifact_id`` is then the grant id the caller asked about
        return errors.GrantNotFound(artifact_id)
    if name == "MisCopiedId" or (slug == "mis-copied-id" and not name):
        ambiguous = "more than one" in detail
        return errors.MisCopiedId(artifact_id, suggestion if isinstance(suggestion, str) else None, ambiguous=ambiguous)
    if name == "NotFound" or (status == 404 and not name):
        return errors.NotFound(artifact_id)
    if name == "Expired" or (status == 410 and not name):
        return errors.Expired(artifact_id, _moment_in(detail) or "an earlier time")
    special = _BY_SLUG.get(slug)
    if name == "SealedArtifact" or (special is not None and special.error is errors.SealedArtifact):
        return errors.SealedArtifact(artifact_id)
    if name == "PolicyDenied" or (special is not None and special.error is errors.PolicyDenied):
        rule = re.search(r"policy rule '([A-Za-z0-9][A-Za-z0-9._:-]{0,63})' denies it$", detail)
        return errors.PolicyDenied(artifact_id, rule.group(1) if rule else "(unknown)")
    if name == "InvalidCursor" or (special is not None and special.error is errors.InvalidCursor):
        message = re.sub(r"^invalid cursor \([^)]*\): ", "", detail)
        known = reason if isinstance(reason, str) and reason in CURSOR_REASONS else "malformed"
        return errors.InvalidCursor(known, message)
    if name == "IntegrityError" or (special is not None and special.error is errors.IntegrityError):
        return errors.IntegrityError(detail)
    if name == "BudgetExceeded" or (special is not None and special.error is errors.BudgetExceeded):
        named = re.match(r"this run's ([a-z_]{1,32}) budget", detail)
        return errors.BudgetExceeded(detail, dimension=named.group(1) if named else "")
    if name == "TooManyRequests" or status == 429:
        return errors.TooManyRequests(detail, retry_after=retry_after)
    if name in _PLAIN:
        return _PLAIN[name](detail)
    if special is not None and special.error is errors.TooLarge:  # a server's own subclass (a body over max_body)
        return errors.TooLarge(detail)
    if status in _FALLBACK:
        return _FALLBACK[status](detail)
    return errors.StorageError(detail if status >= 500 else f"the refvault server answered HTTP {status}: {detail}")


def _moment_in(detail: str) -> str | None:
    """The expiry moment at the end of an ``Expired`` detail, if it is one."""
    found = re.search(r"expired at (\S{1,40})$", detail)
    if found is None:
        return None
    try:
        parse_time(found.group(1))
    except (ValueError, OverflowError, TypeError):
        return None
    return found.group(1)
