"""What the derived-copy mixins of :class:`refvault.Vault` share: the host they are mixed into, and small checks."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from refvault.copies import LineageStatus, Mark, status_of
from refvault.errors import InvalidArgument
from refvault.model import Scope

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from refvault.blobs.base import BlobKey, BlobStore
    from refvault.catalog.audit_log import AuditAppender, DisclosureEntry
    from refvault.catalog.base import Catalog, Manifest
    from refvault.model import Descriptor
    from refvault.operations import CaptureMetadata
    from refvault.policy import Policy
    from refvault.vault.audit_trail import RawEntry

__all__ = [
    "MAX_DEPTH",
    "MAX_REASON",
    "REDACTION",
    "CopiesHost",
    "checked_fields",
    "checked_scope",
    "copy_id",
    "kind_of",
    "parents_of",
    "reason_hash",
    "redactor_for",
    "statuses",
]

REDACTION = "redaction"
MAX_REASON = 1024
MAX_DEPTH = 64
"""The most levels an ancestor walk climbs (each level is one tool call or redaction)."""


class CopiesHost:
    """What the derived-copy mixins use of the vault and of each other (declared for the type checker only)."""

    if TYPE_CHECKING:
        catalog: Catalog
        blobs: BlobStore
        _audit_log: AuditAppender[RawEntry] | None
        inline_max: int

        @property
        def clock(self) -> Any: ...
        def _audited(
            self, action: str, scope: object, artifact_id: object = None
        ) -> AbstractContextManager[dict[str, Any]]: ...
        def _manifest(self, scope: Scope, artifact_id: str) -> Manifest: ...
        def _authorized(
            self, scope: Scope, artifact_id: str, purpose: str, recipient: str, facts: dict[str, Any] | None = None
        ) -> Manifest: ...
        def _capture(
            self,
            owner: Scope,
            data: object,
            checked: CaptureMetadata,
            origin: dict[str, Any] | None,
            facts: dict[str, Any],
            payer: Scope | None = None,
        ) -> Descriptor: ...
        def policy(self, tenant: str) -> Policy | None: ...
        def charge(self, scope: Scope, **amounts: int) -> None: ...
        def disclosures(self, scope: Scope, artifact_id: str) -> list[DisclosureEntry]: ...
        def _status(self, manifest: Manifest) -> tuple[LineageStatus, Mark | None]: ...
        def _policy_version(self, tenant: str) -> str | None: ...
        def _internal_copies(self, keys: Iterable[BlobKey]) -> dict[BlobKey, list[tuple[str, str, int]]]: ...


def redactor_for(labels: Iterable[str], named: str | None) -> str:
    """The redactor a ``redact`` rule uses: its own, else ``secrets.v1`` for a ``secret`` artifact, else ``pii.v1``."""
    if named is not None:
        return named
    return "secrets.v1" if "secret" in set(labels) else "pii.v1"


def checked_scope(scope: object) -> Scope:
    if not isinstance(scope, Scope):
        raise InvalidArgument("scope must be a refvault.Scope(tenant=..., user=..., session=...)")
    return scope


def reason_hash(reason: object) -> str:
    """The SHA-256 of a checked reason: 1-1024 characters of valid Unicode text without NUL (what every catalog
    stores alike: a hold keeps its reason), else :class:`InvalidArgument` (the reason is not repeated)."""
    if not isinstance(reason, str) or not 1 <= len(reason) <= MAX_REASON or "\x00" in reason:
        raise InvalidArgument(f"reason is 1-{MAX_REASON} characters of text (no NUL) saying why")
    try:
        encoded = reason.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument("reason must be valid Unicode text (no lone surrogates)") from None
    return hashlib.sha256(encoded).hexdigest()


def checked_fields(fields: object) -> tuple[str, ...] | None:
    if fields is None:
        return None
    if isinstance(fields, str | bytes) or not isinstance(fields, Iterable):
        raise InvalidArgument('fields must be a list of dotted JSON paths, e.g. ["user.email"]')
    paths = tuple(dict.fromkeys(fields))
    if not paths or not all(isinstance(p, str) for p in paths):
        raise InvalidArgument('fields must name at least one dotted JSON path, e.g. ["user.email"]')
    return paths


def copy_id(kind: str, digest: str) -> str:
    """The lineage node id of an internal copy (an index, a cache) of some bytes."""
    return f"copy:{kind}:{digest[:16]}"


class Derived(Protocol):
    """A manifest or a lineage row: what says how an artifact was made."""

    @property
    def derived_from(self) -> tuple[str, ...]: ...
    @property
    def origin(self) -> Mapping[str, Any] | None: ...


def parents_of(row: Derived | None) -> list[str]:
    return [] if row is None else list(row.derived_from)


def kind_of(row: Derived | None) -> str:
    """``artifact`` (captured directly), the origin's kind (``redaction``, ``tool_output``), or ``derived``."""
    if row is None:
        return "artifact"
    if row.origin is not None:
        return str(row.origin.get("kind", "derived"))
    return "derived" if row.derived_from else "artifact"


def statuses(ids: list[str], rows: Mapping[str, Derived], marks: dict[str, Mark]) -> dict[str, LineageStatus]:
    """The status of every node, from the marks of its ancestors among ``rows`` (those the walk read)."""
    memo: dict[str, LineageStatus] = {}

    def status(node: str, depth: int) -> LineageStatus:
        if node in memo:
            return memo[node]
        mark = marks.get(node)
        m = rows.get(node)
        own: list[str | None] = [None if mark is None else mark.state]
        if m is None and mark is None:
            own = ["deleted"]
        result = status_of(own)
        if result != "revoked" and m is not None and depth < MAX_DEPTH:
            for parent in m.derived_from:
                above = status(parent, depth + 1)
                if above == "revoked":
                    result = "revoked"
                    break
                if above == "stale":
                    result = "stale"
        memo[node] = result
        return result

    return {node: status(node, 0) for node in ids}
