"""The catalog protocol and the records it keeps.

Contract (checked for every backend by ``tests/vault/test_conformance.py``):

* ``publish`` runs one write transaction for a batch. Inside it, holding the
  catalog's write lock, it first calls ``make_visible`` (the blob store's
  rename + directory fsync), then records blobs and artifacts, then commits.
  ``collect`` takes the same lock, so garbage collection never interleaves
  with a publication: a blob is never collected between becoming visible and
  being referenced.
* An idempotency key is unique per (tenant, user, session). Publishing an
  existing key replays or conflicts as :func:`replay_or_conflict` decides;
  an expired holder releases the key in the same transaction.
* A :class:`Derivation` links a derived blob to its source blob (same tenant
  namespace). A blob is *referenced* while an artifact points at it or a
  derivation derives it; collecting a source blob drops its derivations in the
  same transaction, so a derivative never outlives its source for long and a
  derivation never points at a missing source.
* ``find`` matches the artifact id and all three scope components in one
  lookup, so an artifact of another scope and an absent one look the same.
* Every artifact row and every derivation carries a MAC under the store's
  manifest key (:mod:`refvault.catalog.macs`), made when the row is written and
  checked wherever a row becomes a :class:`Manifest` (``find``, ``in_scope``,
  ``manifests``, an idempotent replay) or a :class:`Derivation`
  (``derivation``, ``derivations``, ``publish_derivation``): a row that fails is
  an :class:`~refvault.errors.IntegrityError`, never a record. Only ``audit``
  and ``audit_derivations`` hand out rows that fail, marked as such, for ``verify``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from refvault.blobs.base import BlobKey
from refvault.budgets import Budget, BudgetRow
from refvault.catalog.audit_log import AuditEntry
from refvault.errors import IdempotencyConflict, RefvaultError
from refvault.ids import namespace_of
from refvault.model import RESOLVER, Descriptor, Disclosure, Grant, Scope, selectors_for

if TYPE_CHECKING:
    from refvault.catalog.macs import ManifestKeys
    from refvault.copies import Hold, LineageRow, Mark
    from refvault.runs import EvidenceRecord

__all__ = [
    "ApiKey",
    "BlobRecord",
    "Catalog",
    "Derivation",
    "Grant",
    "Manifest",
    "ManifestCheck",
    "Publication",
    "replay_or_conflict",
]

CHUNK_SIZE = 1 << 20


@dataclass(frozen=True, slots=True)
class BlobRecord:
    """Trusted facts about one stored blob.

    ``chunk_digests`` is the concatenated SHA-256 of each ``chunk_size`` slice
    of the bytes (the last may be short), or empty until the first selective
    read derives them from bytes that matched the content hash. ``inline`` holds the bytes of small blobs, which
    live in the catalog itself and commit atomically with their manifest.

    ``merkle_root`` is the blob's :mod:`refvault.proofs` root and ``chunk_roots`` the concatenated 32-byte
    subtree hash of each ``chunk_size`` chunk (a chunk is a whole number of leaves, so a complete subtree):
    computed at capture in the content hash's pass, or on the first full verification of an older blob
    (recorded only if the content hash matched in that pass); both None until then, or both set.
    """

    key: BlobKey
    size: int
    chunk_size: int
    chunk_digests: bytes
    inline: bytes | None = None
    merkle_root: bytes | None = None
    chunk_roots: bytes | None = None

    def chunk_root(self, index: int) -> bytes | None:
        """The recorded subtree hash of chunk ``index`` (None when no roots are recorded)."""
        return None if self.chunk_roots is None else self.chunk_roots[index * 32 : (index + 1) * 32]

    def chunk_digest(self, index: int) -> bytes:
        return self.chunk_digests[index * 32 : (index + 1) * 32]

    @property
    def chunks(self) -> int:
        return len(self.chunk_digests) // 32


@dataclass(frozen=True, slots=True)
class Manifest:
    """The catalog row of one artifact: everything a descriptor says, plus the idempotency key."""

    artifact_id: str
    scope: Scope
    digest: str
    size: int
    media_type: str
    disclosure: Disclosure
    created_at: datetime
    expires_at: datetime | None = None
    filename: str | None = None
    tool_call_id: str | None = None
    run_id: str | None = None
    schema_version: str | None = None
    source_version: dict[str, Any] = field(default_factory=dict)
    completeness: dict[str, Any] = field(default_factory=dict)
    idempotency_key: str | None = None
    labels: frozenset[str] = frozenset()
    derived_from: tuple[str, ...] = ()
    origin: Mapping[str, Any] | None = None
    """How a derived artifact was made (:mod:`refvault.copies`): kind, transformation and version, its
    sources' ids and content hashes, and what the transformation changed. Under the row's MAC; None for
    an artifact captured directly."""
    grant_id: str | None = None
    """Set only on the view a grantee reads through (:mod:`refvault.vault.grants`); never stored, never MAC'd."""

    @property
    def key(self) -> BlobKey:
        return BlobKey(namespace_of(self.scope.tenant), self.digest)

    def descriptor(self) -> Descriptor:
        """The descriptor: ``retrieval`` shows ``labels`` (a sorted list) and ``derived_from`` when it is non-empty."""
        retrieval: dict[str, Any] = {
            "resolver": RESOLVER,
            "consistency": "pinned_snapshot",
            "media_type": self.media_type,
            "size": self.size,
            "filename": self.filename,
            "disclosure": self.disclosure,
            "selectors": selectors_for(self.media_type),
            "labels": sorted(self.labels),
        }
        if self.derived_from:
            retrieval["derived_from"] = list(self.derived_from)
        if self.origin is not None:
            retrieval["lineage"] = {
                "kind": str(self.origin.get("kind", "derived")),
                "transformation": self.origin.get("transformation"),
                # ids only: a source's content hash is in the owner's receipt, never in what a reader is shown
                "sources": [str(s.get("artifact_id")) for s in self.origin.get("sources", ())],
                "byte_identical_to_source": False,
            }
        return Descriptor(
            artifact_id=self.artifact_id,
            content_hash="sha256:" + self.digest,
            tool_call_id=self.tool_call_id,
            schema_version=self.schema_version,
            created_at=self.created_at,
            source_version=self.source_version,
            completeness=self.completeness,
            scope={
                "tenant": self.scope.tenant,
                "user": self.scope.user,
                "session": self.scope.session,
                "run_id": self.run_id,
                **({"shared": True, "grant_id": self.grant_id} if self.grant_id is not None else {}),
            },
            expires_at=self.expires_at,
            retrieval=retrieval,
        )


@dataclass(frozen=True, slots=True)
class ManifestCheck:
    """One artifact row as ``verify`` sees it, authentic or not: trust nothing here unless ``fault`` is None.

    ``artifact_id``, ``tenant``, ``digest`` and ``namespace`` are the row's columns as
    stored (the memory catalog stores no namespace: there it is the tenant's);
    ``manifest`` is the decoded row (None if it cannot be decoded); ``fault`` is why
    the row fails authentication (:meth:`~refvault.catalog.macs.ManifestKeys.fault`),
    None if its MAC is valid.
    """

    artifact_id: str
    tenant: str
    digest: str
    namespace: str
    manifest: Manifest | None
    fault: str | None


@dataclass(frozen=True, slots=True)
class Publication:
    """One artifact to publish: its manifest and the record of the blob it points at.

    ``audit`` is the draft audit entry of the put; the catalog appends it (with the stored
    manifest's id) in the publishing transaction when the item publishes a new artifact.
    ``requires`` names artifacts of the same tenant that must still exist when it commits (the
    sources of a copy the vault makes): if one is gone, the item is :class:`NotFound` and nothing
    of it is published, so a copy never outlives a source deleted while it was being made.
    """

    manifest: Manifest
    blob: BlobRecord
    audit: AuditEntry | None = None
    requires: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Derivation:
    """A blob derived from another (e.g. the Parquet form of JSON Lines), and what the deriver recorded.

    ``info`` is the deriver's JSON object (schema, record count); trusted state
    like a manifest, written only by refvault.
    """

    source: BlobKey
    kind: str
    digest: str
    size: int
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> BlobKey:
        return BlobKey(self.source.namespace, self.digest)


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One API key of the HTTP service. The token itself is never stored, only its SHA-256.

    Tokens carry 256 random bits, so a fast hash is enough: there is nothing
    to brute-force. ``sessions=None`` lets the key act in every session of its
    user. A revoked key stays on record (``revoked_at``) and never authenticates again.
    """

    key_id: str
    secret_hash: str
    tenant: str
    user: str
    sessions: frozenset[str] | None
    created_at: datetime
    revoked_at: datetime | None = None
    label: str | None = None
    admin: bool = False
    """The key may also administer its tenant over HTTP (set the disclosure policy); never another tenant."""


_REPLAYED_FIELDS = (
    "digest",
    "media_type",
    "disclosure",
    "filename",
    "tool_call_id",
    "run_id",
    "schema_version",
    "source_version",
    "completeness",
    "labels",
    "derived_from",
    "origin",
)


def replay_or_conflict(existing: Manifest, new: Manifest) -> Manifest | None:
    """Resolve a reused idempotency key.

    The same capture again (same bytes and metadata) replays: the stored
    manifest is returned. Anything different is an :class:`IdempotencyConflict`
    naming the fields that differ (never their values). ``expires_at`` is not
    compared: a retry that computes its deadline afresh still replays, and the
    first capture's deadline holds. If the stored artifact has expired, the key
    is free again: None tells the catalog to release it and capture afresh.
    """
    if existing.expires_at is not None and existing.expires_at <= new.created_at:
        return None
    differing = [name for name in _REPLAYED_FIELDS if getattr(existing, name) != getattr(new, name)]
    if differing:
        raise IdempotencyConflict(
            "idempotency key already used in this scope for a different capture "
            f"(differs in: {', '.join(differing)}); use a new key"
        )
    return existing


class Catalog(Protocol):
    """Trusted manifest storage shared by every process that opens the store."""

    manifest_keys: ManifestKeys
    """The key ring every artifact row is MAC'd with (kept outside the catalog)."""

    def publish(self, items: Sequence[Publication], make_visible: Callable[[], None]) -> list[Manifest | RefvaultError]:
        """Publish a batch in one transaction; per item, the stored manifest or the error."""

    def find(self, scope: Scope, artifact_id: str) -> Manifest | None: ...

    def find_by_key(self, scope: Scope, idempotency_key: str) -> Manifest | None:
        """The artifact of ``scope`` holding ``idempotency_key``, if any (expired ones too: a put releases it)."""

    def blob(self, key: BlobKey) -> BlobRecord | None: ...

    def in_scope(self, scope: Scope) -> list[Manifest]:
        """Artifacts of ``scope``, newest first; ties broken by publication order, newest first."""

    def recent_ids(self, scope: Scope, limit: int) -> list[str]:
        """The ids of at most ``limit`` artifacts of ``scope``, in :meth:`in_scope`'s order, without reading or
        authenticating their rows: candidates only (:mod:`refvault.vault.miscopy` looks each one it uses up
        again with :meth:`find`)."""

    def set_labels(
        self, scope: Scope, artifact_id: str, labels: frozenset[str], *, audit: AuditEntry | None = None
    ) -> Manifest | None:
        """Replace the labels of ``scope``'s artifact and re-MAC its row, in one write (with ``audit``
        appended in it, if given); the new manifest.

        None if ``scope`` holds no such artifact; :class:`IntegrityError` if its row fails its MAC
        (an edited row is never re-signed). Only ``Vault.declassify`` calls it.
        """

    def delete_expired(self, now: datetime) -> list[str]:
        """Remove every artifact whose ``expires_at`` is at or before ``now``; return their ids."""

    def manifests(self) -> Iterator[Manifest]:
        """Every artifact of every scope, each authenticated (:class:`IntegrityError` at the first that is not)."""

    def audit(self) -> Iterator[ManifestCheck]:
        """Every artifact row as stored, in publication order, each with its authentication result (for ``verify``)."""

    def rotate_manifest_key(self) -> str:
        """Under the write lock, make a fresh manifest key current (the old one keeps verifying); return its id."""

    def remac(self) -> tuple[int, int]:
        """Re-MAC every authentic row not signed with the current key: (rows re-MAC'd, rows left as they fail)."""

    def drop_retired_manifest_keys(self) -> list[str] | None:
        """Under the write lock, drop the retired manifest keys if no authentic row uses one.

        Returns the ids dropped, or None (nothing dropped) if some authentic row is still MAC'd with one.
        """

    def blob_records(self) -> Iterator[BlobRecord]:
        """Every blob record, without inline bytes loaded eagerly where avoidable."""

    def unreferenced(self, older_than: float) -> list[BlobKey]:
        """Blob records no artifact references, last published more than ``older_than`` s ago."""

    def collect(self, key: BlobKey, older_than: float, remove: Callable[[], bool]) -> bool:
        """Under the write lock, collect one blob if nothing references it.

        If no artifact references ``key`` and its record (if any) was last
        published more than ``older_than`` seconds ago, call ``remove`` (which
        deletes the stored bytes and returns False if they are too young to
        go); when it returns True, drop the record. Return whether it was collected.
        """

    def has_blob(self, key: BlobKey) -> bool: ...

    def is_referenced(self, key: BlobKey) -> bool:
        """True if some artifact (of any scope) points at ``key``, or a derivation derives it."""

    def derivation(self, source: BlobKey, kind: str) -> Derivation | None: ...

    def derivations(self) -> Iterator[Derivation]:
        """Every derivation, each authenticated (:class:`IntegrityError` at the first that is not)."""

    def audit_derivations(self) -> Iterator[tuple[Derivation | None, BlobKey | None, str | None]]:
        """Every derivation row as stored (for ``verify``): the record (None if unreadable), its source
        blob key as stored (None if not a key), and why it fails its MAC (None if it does not)."""

    def publish_derivation(
        self, derivation: Derivation, blob: BlobRecord, make_visible: Callable[[], None]
    ) -> Derivation | None:
        """Record a derived blob under the write lock; return the stored derivation.

        If one of this kind already exists for the source, it is returned and
        ``make_visible`` is not called (the caller discards its copy). If no
        artifact references the source any more, nothing is recorded and None is returned.
        """

    def record_chunks(self, key: BlobKey, chunk_size: int, digests: bytes) -> None:
        """Record chunk digests derived (and checked against the content hash) by a reader."""

    def record_merkle(self, key: BlobKey, chunk_size: int, chunk_roots: bytes, root: bytes) -> None:
        """Record a Merkle root and chunk roots computed (and checked against the content hash, in the same pass)
        by a full verification; best effort, and never over roots already recorded."""

    # -- the service's own small records -------------------------------------------

    def add_api_key(self, key: ApiKey) -> None:
        """Store a new key; its ``key_id`` must be unused (else :class:`~refvault.errors.StorageError`)."""

    def find_api_key(self, key_id: str) -> ApiKey | None: ...

    def revoke_api_key(self, key_id: str, at: datetime) -> bool:
        """Mark the key revoked at ``at``; False if it is unknown or already revoked."""

    def api_keys(self, tenant: str | None = None) -> list[ApiKey]:
        """Every key (of ``tenant``), oldest first."""

    # -- sharing grants (refvault.vault.grants) ------------------------------------
    # Every grant row carries a MAC like a manifest row; each method below that returns a
    # grant authenticates it first (IntegrityError, kind="manifest", if it fails).

    def add_grant(self, grant: Grant) -> None:
        """Store a new grant (signed); its ``grant_id`` must be unused (else :class:`StorageError`)."""

    def grants_for_artifact(self, owner: Scope, artifact_id: str) -> list[Grant]:
        """Every grant ``owner`` gave on ``artifact_id``, revoked and expired ones included, oldest first."""

    def find_grant(self, grantee: Scope, artifact_id: str, now: datetime) -> list[Grant]:
        """The grants on ``artifact_id`` that ``grantee`` holds and that are active at ``now``, oldest first."""

    def revoke_grant(self, owner: Scope, grant_id: str, at: datetime) -> Grant | None:
        """Mark ``owner``'s grant revoked at ``at`` (re-signed); the revoked grant, or None if none such is live."""

    def shared_with(self, grantee: Scope, now: datetime) -> list[Grant]:
        """Every grant ``grantee`` holds that is active at ``now``, newest first."""

    def audit_grants(self) -> Iterator[tuple[str, str | None]]:
        """Every grant row as stored (for ``verify``): the artifact id it names (as stored, untrusted) and why
        it fails its MAC (None if it does not)."""

    def get_setting(self, name: str) -> str | None:
        """A small named value shared by every process of the store (e.g. the cursor key ring)."""

    def swap_setting(self, name: str, expected: str | None, value: str) -> bool:
        """Atomically set ``name`` to ``value`` if it currently holds ``expected`` (None: absent)."""

    # -- the audit log (refvault.catalog.audit_log) -------------------------------------

    def append_audit(self, entries: Sequence[AuditEntry]) -> list[AuditEntry]:
        """Append draft entries to their tenants' chains in one transaction; return them as stored.

        Each tenant's head row is locked for the append (tenants in sorted order), so concurrent
        appenders, in any process, extend one chain without gaps or forks.
        """

    def audit_entries(
        self, tenant: str, *, after: int = 0, upto: int | None = None, artifact_id: str | None = None
    ) -> Iterator[AuditEntry]:
        """The tenant's entries with ``after < seq <= upto`` (of one artifact if given), in ``seq`` order, streamed."""

    def audit_head(self, tenant: str) -> tuple[int, str]:
        """The tenant's head row: (seq, hash) of its last entry; ``(0, GENESIS)`` before the first."""

    def audit_tenants(self) -> list[str]:
        """Every tenant with an audit chain (a head row or an entry), sorted."""

    # -- derived copies (refvault.copies, refvault.vault.copies) ---------------------------

    def by_ids(self, tenant: str, ids: Sequence[str]) -> dict[str, Manifest]:
        """The authenticated manifests of those of ``ids`` that exist in ``tenant``, whatever their scope."""

    def derived_ids(self, tenant: str, sources: Sequence[str]) -> list[tuple[str, str]]:
        """``(source, derived)`` for every artifact ever published with one of ``sources`` in its ``derived_from``
        (kept after either is deleted), sorted."""

    def marks(self, tenant: str, ids: Sequence[str]) -> dict[str, Mark]:
        """The marks of those of ``ids`` that have one."""

    def set_mark(self, mark: Mark, *, audit: AuditEntry | None = None) -> Mark:
        """Store ``mark`` unless the artifact's mark is more final (:data:`refvault.copies.MARK_STATES`); return
        the mark in place. With ``audit`` appended in the same transaction."""

    def holds(self, tenant: str, ids: Sequence[str]) -> list[Hold]:
        """The holds on ``ids``, oldest first."""

    def add_hold(self, hold: Hold, *, audit: AuditEntry | None = None) -> None: ...

    def release_hold(self, tenant: str, artifact_id: str, hold_id: str, *, audit: AuditEntry | None = None) -> bool:
        """Remove one hold; False if there is no such hold."""

    def remove(
        self, removals: Sequence[tuple[Scope, str]], states: Sequence[Mark], audit: Sequence[AuditEntry]
    ) -> list[str]:
        """In one transaction: delete each ``(owner, id)`` without a hold, store its mark from ``states``, and append
        the ``audit`` entries about the ids deleted (and those about no artifact); return the ids deleted."""

    def live_grants(self, tenant: str, ids: Sequence[str]) -> list[str]:
        """The ids of the unrevoked grants on ``ids``."""

    def derivations_of_many(self, sources: Sequence[BlobKey]) -> dict[BlobKey, list[Derivation]]:
        """Every derivation of each blob of ``sources`` (its internal copies: record indexes, query caches), by
        kind; a blob without any is absent. Batched: a lineage walk of 100,000 nodes makes a few hundred reads."""

    def lineage_rows(self, tenant: str, ids: Sequence[str]) -> dict[str, LineageRow]:
        """What a lineage walk needs of each of ``ids`` that exists in ``tenant`` (rows not re-authenticated)."""

    def is_referenced_by_artifact(self, key: BlobKey) -> bool:
        """True if some artifact (of any scope) still points at ``key``."""

    def stored_bytes(self, tenant: str, user: str | None = None, session: str | None = None) -> int:
        """The bytes of the tenant's artifacts (of one user, of one of its sessions), counting each artifact."""

    def sessions(self, tenant: str, user: str, *, limit: int) -> list[str]:
        """The sessions in which ``user`` of ``tenant`` holds artifacts (expired ones too), most recently used
        first, at most ``limit``: names only, read without authenticating rows (a caller reads each artifact
        through the vault's door)."""

    def add_evidence(self, record: EvidenceRecord, *, audit: AuditEntry | None = None) -> EvidenceRecord:
        """Append ``record`` (its ``seq`` is assigned here; the stored record is returned), with ``audit``
        appended to the tenant's chain in the same transaction."""

    def evidence_records(self, tenant: str, user: str, session: str, *, limit: int) -> list[EvidenceRecord]:
        """The evidence records of one run (``tenant``/``user``/``session``), oldest first, at most ``limit``."""

    def budget(self, scope: Scope) -> BudgetRow | None:
        """The run budget of ``scope`` (limits, what servers reserved, when it started), or None."""

    def set_budget(self, scope: Scope, budget: Budget, now: datetime, *, restart: bool = False) -> BudgetRow:
        """Set the limits of ``scope``'s run; a new run (or ``restart``) starts at ``now`` with nothing spent and
        a generation never used before for the run (:func:`refvault.budgets.new_generation`); otherwise the
        run keeps its generation and what it spent."""

    def clear_budget(self, scope: Scope) -> bool:
        """Remove ``scope``'s budget and what it counted; False if it had none."""

    def charge_budget(self, scope: Scope, generation: int, amounts: Mapping[str, int]) -> bool:
        """Add ``amounts`` to the run's spent counters, all or none, in one atomic conditional write.

        False (nothing changed) if a positive amount would take a counter past its limit, or the run has
        no budget or another generation. A negative amount (a release) is unconditional, floored at 0.
        """

    def close(self) -> None: ...
