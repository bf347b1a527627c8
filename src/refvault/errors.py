"""The one exception hierarchy of refvault.

Every error refvault raises on purpose is a :class:`RefvaultError`. Messages
help the caller fix the call; they never contain artifact content, they name
an artifact only by a well-formed id (:func:`shown_id`: anything else a caller
or model sent is never repeated), and a message about an artifact another
caller owns is identical to the message about an artifact that does not exist.

::

    RefvaultError
    ├── InvalidArgument (ValueError)     bad input; nothing was written
    │   ├── InvalidScope                 tenant/user/session malformed
    │   ├── InvalidId                    not a well-formed artifact id
    │   ├── InvalidMetadata              media type, disclosure, expiry, JSON fields, filename
    │   ├── BadRef                       a Ref argument names no artifact readable in this scope
    │   ├── InvalidQuery                 a record query names an unknown field or op, or a wrong value type
    │   ├── InvalidCursor                a cursor is forged, altered, expired, or reused for another query
    │   └── UnsupportedRead              this read does not apply to this artifact (e.g. a window of a PNG)
    ├── InvalidType (TypeError)          a value of the wrong kind: a Ref from a non-string, an unpicklable guard
    ├── NotFound (LookupError)           absent, deleted, or not yours (indistinguishable)
    │   ├── MisCopiedId (also InvalidId)  an id with a character changed, dropped, doubled or swapped (suggestion)
    │   ├── GrantNotFound                no live sharing grant of yours has this id (unknown, another's, revoked)
    │   ├── LinkRefused                  a capability link that opens nothing (one message for every reason)
    │   └── UnknownHandle                a kernel snapshot handle this kernel did not make as given (one message)
    ├── Expired                          past expires_at (only the owner ever sees this)
    ├── IdempotencyConflict              key reused in the same scope for different bytes
    ├── SealedArtifact                   a model-facing read of a sealed artifact (usable by reference only)
    ├── ContextLeak                      an outgoing LLM request carries protected content (findings: ids, sites)
    ├── MaterializationError             binary tool content could not be stored (permanent: do not re-call)
    │   ├── InvalidResult                not a tool result, bad base64, or a bad media type
    │   ├── EmptyPart                    a binary part with no bytes
    │   └── TooLarge                     a part or the whole result is over its limit (refused, not truncated)
    ├── IntegrityError                   stored bytes disagree with the manifest; no bad byte returned
    ├── StorageError (OSError)           the backend failed (I/O, fsync, unsafe store layout)
    ├── UnresolvedRef                    a Ref was read outside the tool call that received it
    ├── Unauthenticated                  no valid API key (missing, malformed, unknown, revoked: one message)
    ├── Forbidden                        the key is valid but may not act in the requested tenant/user/session
    │   └── PolicyDenied                 the tenant's policy refuses the owner this read (names the rule id)
    ├── QuotaExceeded                    a put would go over the tenant's or session's byte quota; nothing stored
    ├── BudgetExceeded                   a put or read call would go over the run's budget; nothing stored or shown
    ├── StaleHandle                      a kernel snapshot handle of an older generation (the kernel was reset)
    ├── Held                             the artifact is under a hold: release it before deleting it
    ├── TooManyRequests                  the key or its tenant already has as many uploads in progress as allowed
    └── RequestTimeout                   the client stopped sending its request body; nothing was stored
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "Expired",
    "IdempotencyConflict",
    "IntegrityError",
    "InvalidArgument",
    "InvalidType",
    "InvalidId",
    "InvalidMetadata",
    "InvalidScope",
    "InvalidQuery",
    "InvalidCursor",
    "UnsupportedRead",
    "SealedArtifact",
    "ContextLeak",
    "MaterializationError",
    "InvalidResult",
    "EmptyPart",
    "TooLarge",
    "NotFound",
    "GrantNotFound",
    "MisCopiedId",
    "LinkRefused",
    "UnknownHandle",
    "RefvaultError",
    "StorageError",
    "BadRef",
    "UnresolvedRef",
    "Unauthenticated",
    "Forbidden",
    "PolicyDenied",
    "QuotaExceeded",
    "BudgetExceeded",
    "StaleHandle",
    "Held",
    "TooManyRequests",
    "RequestTimeout",
]


NOT_AN_ID = "(not an artifact id)"
"""What an error message shows in place of a value that is not a well-formed artifact id."""


def shown_id(value: object) -> str:
    """``value`` if it is a well-formed artifact id, else :data:`NOT_AN_ID`: the one way an id enters a message.

    An id is 30 or 32 characters from ``a-z 2-7 _`` (:func:`refvault.ids.is_artifact_id`), so it cannot carry a
    newline, an instruction or a look-alike of ``art_``; anything else a caller or a model sent (it may be
    content, or an injection) is never repeated. :class:`BadRef`, :class:`NotFound`, :class:`Expired` and
    :class:`SealedArtifact` build their messages through it (``tests/security/test_bad_ref_echo.py``).
    """
    from refvault.ids import is_artifact_id  # refvault.ids imports this module

    return value if is_artifact_id(value) else NOT_AN_ID


class RefvaultError(Exception):
    """Root of every error refvault raises on purpose."""


class InvalidArgument(RefvaultError, ValueError):
    """The call was malformed. Nothing was written."""


class InvalidScope(InvalidArgument):
    """A tenant, user or session name is empty, too long or uses a forbidden character."""


class InvalidId(InvalidArgument):
    """A string that cannot be an artifact id (wrong prefix, length or alphabet)."""


class InvalidMetadata(InvalidArgument):
    """Capture metadata (media type, disclosure, expiry, JSON fields, filename) is invalid."""


class BadRef(InvalidArgument):
    """A ``Ref`` argument cannot be resolved: empty, malformed, unknown, expired or another scope's.

    Model-recoverable. A well-formed id is named, with one message for unknown,
    expired and another scope's (no existence oracle); anything else the model
    sent is never repeated: the message then says, in fixed words, that the value
    is not an artifact id (:func:`shown_id`; ``tests/security/test_bad_ref_echo.py``).
    ``artifact_id`` keeps the value as given, for the caller's code, not for display.
    """

    def __init__(self, artifact_id: str) -> None:
        self.artifact_id = artifact_id
        if shown_id(artifact_id) == NOT_AN_ID:
            super().__init__(
                "the value given is not an artifact id (art_ followed by 28 characters a-z, 2-7); "
                "pass an artifact id from this session"
            )
        else:
            super().__init__(f"no artifact {artifact_id!r} can be read here; pass an artifact id from this session")


class InvalidQuery(InvalidArgument):
    """A record query is malformed: unknown field or op, a value of the wrong type, a bad order or range."""


CURSOR_REASONS = frozenset(
    ("malformed", "signature", "unknown_key", "key_retired", "expired", "artifact", "query", "caller")
)
"""Every ``InvalidCursor.reason``."""


class InvalidCursor(InvalidArgument):
    """A cursor was refused. ``reason`` is one of ``malformed``, ``signature``, ``unknown_key``,
    ``key_retired``, ``expired``, ``artifact``, ``query``, ``caller`` (:data:`CURSOR_REASONS`);
    a cursor never authorises anything.
    """

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(f"invalid cursor ({reason}): {message}")


class UnsupportedRead(InvalidArgument):
    """The read does not apply to this artifact (a text window of an image, a record query of plain text)."""


class NotFound(RefvaultError, LookupError):
    """No artifact with this id is visible in this scope.

    Raised identically whether the artifact never existed, was deleted, or
    belongs to another tenant, user or session.
    """

    def __init__(self, artifact_id: str) -> None:
        self.artifact_id = artifact_id
        super().__init__(f"artifact {shown_id(artifact_id)} not found in this scope")


class GrantNotFound(NotFound):
    """No live sharing grant with this id belongs to the caller's scope: unknown, another scope's, or already
    revoked (one message for each). Only a well-formed grant id (``grt_`` and 26 of a-z, 2-7) is named."""

    def __init__(self, grant_id: str) -> None:
        import re

        self.artifact_id = ""
        self.grant_id = grant_id
        well_formed = isinstance(grant_id, str) and re.fullmatch(r"grt_[a-z2-7]{26}", grant_id) is not None
        shown = grant_id if well_formed else "(not a grant id)"
        RefvaultError.__init__(self, f"grant {shown} not found in this scope")


MISCOPIED = "this id looks mis-copied (a character changed, dropped, doubled or swapped)"
"""The fixed words every :class:`MisCopiedId` message starts with."""


class MisCopiedId(NotFound, InvalidId):
    """An artifact id that looks mis-copied: a character changed, dropped, doubled or swapped.

    Raised for a string :func:`refvault.ids.id_check` calls ``"miscopied"`` (a new id whose check characters
    disagree, or a near miss of an id's shape), and for a legacy-length id that names nothing the caller can
    read while an id the caller can read is within edit distance 2 of it. It is both a :class:`NotFound` (it
    names nothing) and an :class:`InvalidId` (as given, it is not a usable id), so a handler of either treats
    it as before.

    ``suggestion`` is the one id the caller may read (its own or shared with it; unexpired, allowed by the
    tenant's policy, not sealed) within edit distance 2, among the most recent
    :data:`refvault.vault.miscopy.SUGGESTION_WINDOW`; None when there is none, or more than one
    (``ambiguous``). The search looks only at the caller's own scope, so an id of another scope is never
    suggested and an absent id and another scope's get the same answer. The message never repeats the
    rejected string (it may be content); ``artifact_id`` keeps it as given, for the caller's code, not for
    display.
    """

    def __init__(self, artifact_id: str, suggestion: str | None = None, *, ambiguous: bool = False) -> None:
        from refvault.ids import is_artifact_id  # refvault.ids imports this module

        self.artifact_id = artifact_id
        self.suggestion = suggestion if is_artifact_id(suggestion) else None
        self.ambiguous = ambiguous and self.suggestion is None
        if self.suggestion is not None:
            message = f"{MISCOPIED}; did you mean {self.suggestion}? Pass that id if it is the one you meant"
        elif self.ambiguous:
            message = f"{MISCOPIED}; more than one id you can read is that close to it: copy it again exactly"
        else:
            message = f"{MISCOPIED}; no id you can read is close to it: copy it again exactly as it was given"
        RefvaultError.__init__(self, message)


class LinkRefused(NotFound):
    """A capability link that opens nothing: malformed, tampered, expired, signed with a rotated key, revoked,
    out of range, or for an artifact its issuer may no longer read. One message for every reason."""

    def __init__(self) -> None:
        self.artifact_id = ""
        RefvaultError.__init__(self, "no such link: it is malformed, expired or revoked, or names nothing readable")


class UnknownHandle(NotFound):
    """A kernel snapshot handle the kernel cannot resolve: another kernel's or another scope's, edited or forged,
    or naming a snapshot deleted meanwhile. One message for every reason; nothing of the handle is repeated."""

    def __init__(self) -> None:
        self.artifact_id = ""
        RefvaultError.__init__(
            self,
            "this kernel made no such snapshot: the handle is another kernel's or another scope's, "
            "was edited, or its snapshot was deleted",
        )


class Expired(RefvaultError):
    """The artifact is past its retention deadline (``expires_at``).

    Only the owning scope can see this error; anyone else gets :class:`NotFound`.
    """

    def __init__(self, artifact_id: str, expires_at: str) -> None:
        self.artifact_id = artifact_id
        self.expires_at = expires_at
        super().__init__(f"artifact {shown_id(artifact_id)} expired at {expires_at}")


class IdempotencyConflict(RefvaultError):
    """An idempotency key was reused in the same scope for different content."""


class SealedArtifact(RefvaultError):
    """A model-facing read was asked for a ``sealed`` artifact: it is usable by reference only."""

    def __init__(self, artifact_id: str) -> None:
        self.artifact_id = artifact_id
        super().__init__(
            f"artifact {shown_id(artifact_id)} is sealed: its content is never shown to the model; "
            "pass its id to a tool that takes a Ref parameter instead"
        )


class ContextLeak(RefvaultError):
    """An outgoing LLM request (or log line, or span) carries protected content; it was not sent.

    ``findings`` name the site, artifact id, matched length and arm of each
    hit (and the disclosure-policy rule that denies it to the recipient, if one
    does), never the content itself; so does the message.
    """

    def __init__(self, findings: Sequence[Any]) -> None:
        self.findings = tuple(findings)
        shown = "; ".join(
            (
                f"{getattr(f, 'site', '?')}: {getattr(f, 'arm', '?')} {getattr(f, 'artifact_id', None) or ''}".rstrip()
                + (f" (policy rule {f.rule_id})" if getattr(f, "rule_id", None) else "")
            )
            for f in self.findings[:10]
        )
        more = f" (+{len(self.findings) - 10} more)" if len(self.findings) > 10 else ""
        super().__init__(f"the request carries protected content and was not sent: {shown}{more}")


class MaterializationError(RefvaultError):
    """Binary tool content could not be materialised into the vault.

    ``permanent`` is always True: the remote tool call already happened, so
    the caller must not re-issue it (a retry of the *materialisation* with the
    same ``tool_call_id`` deduplicates what was stored). ``content_index`` names
    the part that failed, when one did.
    """

    permanent = True

    def __init__(self, message: str, *, content_index: int | None = None) -> None:
        self.content_index = content_index
        super().__init__(message)


class InvalidResult(MaterializationError):
    """The value is not a tool result, a part's base64 is invalid, or its media type is."""


class EmptyPart(MaterializationError):
    """A binary part holds no bytes."""


class TooLarge(MaterializationError):
    """A part, or the whole result, is over its limit; refused, never truncated."""


class IntegrityError(RefvaultError):
    """Stored bytes do not match the manifest (flipped, truncated, appended, replaced or missing),
    or the manifest row itself fails its MAC (edited, moved or forged in the catalog).

    Raised before any byte of the failing chunk is returned. ``kind`` is
    ``"missing"`` when the stored bytes are gone, ``"manifest"`` when the row
    fails its MAC (nothing of it is served), and ``"corrupt"`` otherwise.
    """

    def __init__(self, message: str, *, kind: str = "corrupt") -> None:
        self.kind = kind
        super().__init__(message)


class StorageError(RefvaultError, OSError):
    """The storage backend failed: an I/O or fsync error, or an unsafe store layout."""


class UnresolvedRef(RefvaultError):
    """A ``Ref`` was read outside the tool call that received it.

    Resolved bytes live only for the duration of one dispatch; after it, in
    another task or another run, the ``Ref`` is just an id.
    """


class Unauthenticated(RefvaultError):
    """The request carries no valid API key.

    One message for every cause (missing, malformed, unknown, revoked or a
    wrong secret), so a caller learns nothing about which keys exist.
    """


class Forbidden(RefvaultError):
    """The API key is valid, but it may not act in the tenant, user or session the request names."""


class PolicyDenied(Forbidden):
    """The tenant's policy refuses this read of the caller's own artifact, for this purpose and recipient.

    Only the owner sees it (anyone else gets :class:`NotFound`, as for an absent artifact). It names
    the artifact and the id of the rule that decided (``rule_id``), never content.
    """

    def __init__(self, artifact_id: str, rule_id: str) -> None:
        self.artifact_id = artifact_id
        self.rule_id = rule_id
        super().__init__(
            f"artifact {shown_id(artifact_id)} may not be read for this purpose and recipient: "
            f"policy rule {rule_id!r} denies it"
        )


class QuotaExceeded(RefvaultError):
    """A put would take its tenant or session over the byte quota of the tenant's policy; nothing was stored."""


class BudgetExceeded(RefvaultError):
    """An acquisition or a read call would take the run (a scope's session) over its budget.

    Nothing was stored or disclosed. ``dimension`` names the budget dimension that ran out
    (``"acquired_bytes"``, ``"read_calls"``, ...).
    """

    def __init__(self, message: str, *, dimension: str = "") -> None:
        self.dimension = dimension
        super().__init__(message)


class StaleHandle(RefvaultError):
    """A kernel snapshot handle from an older generation: the kernel was reset after the snapshot was taken.

    Snapshots taken with ``persist=True`` never raise this; they resolve to their durable artifact.
    """


class Held(RefvaultError):
    """The artifact is under a hold (``Vault.hold``): it cannot be deleted or expire until every hold is released."""


class TooManyRequests(RefvaultError):
    """The API key, or its tenant, already has as many uploads in progress as the server allows at once.

    Refused before any byte of the body was read; nothing was stored. ``retry_after`` is how many
    seconds to wait before trying again (the server sends it as ``Retry-After``).
    """

    def __init__(self, message: str, *, retry_after: int = 1) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class RequestTimeout(RefvaultError):
    """The client stopped sending its request body for longer than the server waits; nothing was stored."""


class InvalidType(RefvaultError, TypeError):
    """A value of the wrong kind where Python raises ``TypeError``: a ``Ref`` made from a non-string, a tool
    signature with ``*args``, a tool result holding bytes or a generator, a ``LeakGuard`` pickled. Nothing was written.
    """
