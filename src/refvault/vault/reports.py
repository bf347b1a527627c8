"""What the vault's operations report: audit records, and what ``verify``, ``gc`` and a key rotation found.

Plain values, re-exported by :mod:`refvault.vault.core` (and :mod:`refvault`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

__all__ = ["AuditRecord", "GcReport", "KeyRotation", "Problem", "VerifyReport"]


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One vault operation, by id only: never content, never caller-supplied metadata.

    ``outcome`` is ``"ok"`` or the name of the :class:`~refvault.errors.RefvaultError`
    raised. ``byte_range`` is ``(start, end)`` of what a read returned (a stream
    records the whole artifact it may return). The other fields are those the persistent
    audit log keeps (:class:`~refvault.catalog.audit_log.AuditEntry`): the read's ``purpose``
    and ``recipient``, the ``grant_id``/``rule_id`` that decided it, a ``selection`` summary,
    ``bytes``/``records`` returned, the ``excerpt_hash`` (hex SHA-256 of exactly the bytes
    disclosed) and a fixed ``detail``.
    """

    at: datetime
    action: str  # "put" | "describe" | "read" | "window" | "grep" | "query" | "list" | "delete" | ...
    outcome: str
    tenant: str | None
    user: str | None
    session: str | None
    artifact_id: str | None = None
    content_hash: str | None = None
    byte_range: tuple[int, int] | None = None
    purpose: str | None = None
    recipient: str | None = None
    grant_id: str | None = None
    rule_id: str | None = None
    selection: str | None = None
    bytes: int | None = None
    records: int | None = None
    excerpt_hash: str | None = None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class Problem:
    """Something ``verify`` found wrong, and the artifacts it concerns.

    ``kind`` is ``"missing"`` or ``"corrupt"`` for a blob (``digest``) and every
    artifact that points at it, ``"manifest"`` for one artifact row that fails its
    MAC (altered, forged, moved or blanked), ``"misplaced"`` for one row whose blob
    key is in another tenant's namespace. ``digest`` is the one the row names
    (empty if it is not a digest).
    """

    kind: str  # "missing" | "corrupt" | "manifest" | "misplaced"
    digest: str
    detail: str
    artifact_ids: tuple[str, ...]


@dataclass(slots=True)
class VerifyReport:
    """What ``verify`` re-read: counts, problems (with artifact ids) and unreferenced blobs.

    ``unreferenced`` counts stored blobs no artifact or derivation names (a deleted artifact's bytes, say);
    ``unreferenced_in_grace`` of them are younger than ``grace`` seconds (the vault's gc grace period), so a
    ``gc`` keeps them until ``collectable_after`` (when the youngest is old enough; None if there is none).
    Unreferenced blobs are not problems: gc removes them.
    """

    blobs_checked: int = 0
    bytes_checked: int = 0
    artifacts: int = 0
    problems: list[Problem] = field(default_factory=list)
    unreferenced: int = 0
    unreferenced_in_grace: int = 0
    grace: float = 0.0
    collectable_after: datetime | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True, slots=True)
class KeyRotation:
    """What :meth:`Vault.rotate_manifest_key` did.

    ``remacd`` rows were MAC'd again with the new key ``key_id``; ``failing`` rows
    fail their MAC and were left as they are (``verify`` lists them). ``dropped``
    lists the retired keys removed when asked to, or is None if one was still in use.
    """

    key_id: str
    remacd: int
    failing: int
    dropped: tuple[str, ...] | None = ()


@dataclass(slots=True)
class GcReport:
    """What ``gc`` removed (or, with ``dry_run``, would remove).

    ``blobs_kept`` counts unreferenced blobs left in place because they are younger than ``grace`` seconds
    (a later gc removes them); ``failures`` those that could not be removed.
    """

    dry_run: bool
    expired: list[str] = field(default_factory=list)
    blobs_removed: int = 0
    temporaries_removed: int = 0
    failures: int = 0
    blobs_kept: int = 0
    grace: float = 0.0
