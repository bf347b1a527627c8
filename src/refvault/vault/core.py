"""The vault: capture and publish, resolve and disclose, retention and checking.

Invariants, and where each is enforced and tested:

* **Publish after durable.** ``put`` consumes the input into a private temporary while hashing, ``fsync``s it, then
  in one catalog transaction renames it into place, ``fsync``s the directory and commits the manifest; only then
  does it return a descriptor. Small blobs live in the catalog row and commit atomically with it. No published
  reference ever points at missing or partial bytes (``tests/security/test_crash.py`` kills writers at random).
* **Opaque, fresh ids.** Every capture gets a new ``art_`` id with 128 random bits; an ``idempotency_key`` (unique
  per scope) makes a retried put return the same id, and reusing it for a different capture (other bytes or
  metadata) is an :class:`~refvault.errors.IdempotencyConflict`.
* **Tenant-only dedup.** Blobs are addressed by (tenant namespace, SHA-256), so identical bytes are stored once per
  tenant and never shared across tenants: no dedupe or timing oracle between tenants.
* **Scope is the read key.** Every read matches id and (tenant, user, session) in one lookup; any mismatch is the
  same :class:`NotFound` as an absent id. ``expires_at`` is checked on every read and gives :class:`Expired`, which
  only the owner can ever see.
* **Verified reads.** See :mod:`refvault.vault.verified`: every byte returned was checked against digests held in
  the catalog; damage raises :class:`IntegrityError` and returns nothing bad.
* **Authentic manifests.** Every manifest the vault acts on comes from the catalog, which checks each row's MAC
  under a key kept outside it (:mod:`refvault.catalog.macs`): an edited, moved or forged row is an
  :class:`IntegrityError` on every read, and ``verify`` reports every such row and every artifact whose blob is not
  in its own tenant's namespace (``tests/security/test_manifest_integrity.py``).
* **Bad input loses nothing.** All metadata is validated before the first byte is read; a failed put leaves at
  worst a temporary that ``gc`` removes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from refvault import tracing
from refvault.blobs.base import BlobStore
from refvault.catalog.audit_log import AuditAppender
from refvault.catalog.base import Catalog, Derivation, Manifest, Publication
from refvault.catalog.macs import ManifestKeys
from refvault.errors import (
    Expired,
    IntegrityError,
    InvalidArgument,
    InvalidMetadata,
    NotFound,
    RefvaultError,
    StorageError,
    shown_id,
)
from refvault.ids import check_artifact_id, is_artifact_id, namespace_of, new_artifact_id
from refvault.model import Descriptor, Scope, checked_expiry, checked_json, format_time
from refvault.operations import CaptureMetadata, CaptureOptions, Selection, check_byte_span
from refvault.policy import DEFAULT_PURPOSE, DEFAULT_RECIPIENT
from refvault.vault.audit_trail import (
    SYNCHRONOUS_ACTIONS,
    WRITTEN,
    AuditTrail,
    LedgerStream,
    appender_of,
    entry_of,
    raw_entry,
)
from refvault.vault.authority import (
    PolicyMethods,
    authorize,
    checked_reader,
    permitted,
    rechecker,
)
from refvault.vault.budgeting import Budgets
from refvault.vault.commit import GroupCommit, Pending
from refvault.vault.copies import Copies
from refvault.vault.grants import Sharing, shared_manifests
from refvault.vault.ingest import ingest
from refvault.vault.labels import DECLASSIFY_DETAIL, checked_removal
from refvault.vault.links import Linking
from refvault.vault.location import check_store_location, store_location
from refvault.vault.maintenance import Maintenance, check_grace
from refvault.vault.proving import Proving, with_integrity
from refvault.vault.reports import AuditRecord, GcReport, KeyRotation, Problem, VerifyReport
from refvault.vault.runs import Runs
from refvault.vault.verified import ArtifactStream, VerifiedBlob

__all__ = ["DEFAULT_GRACE", "AuditRecord", "GcReport", "KeyRotation", "Problem", "Vault", "VerifyReport"]

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_GRACE = 3600.0
_RECORDED_FACTS = (  # the facts an AuditRecord carries besides ids (see refvault.vault.reports)
    "purpose",
    "recipient",
    "grant_id",
    "rule_id",
    "selection",
    "bytes",
    "records",
    "excerpt_hash",
    "detail",
)
DEFAULT_INLINE_MAX = 32 * 1024


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Vault(Sharing, AuditTrail, Linking, Maintenance, PolicyMethods, Copies, Budgets, Runs, Proving):
    """Stores artifacts once and serves verified, scoped reads of them.

    Thread-safe: one vault may serve many threads; concurrent puts share
    catalog transactions (group commit). Several processes may open the same
    embedded store.
    """

    def __init__(
        self,
        blobs: BlobStore,
        catalog: Catalog,
        *,
        clock: Callable[[], datetime] = _utcnow,
        inline_max: int = DEFAULT_INLINE_MAX,
        grace: float = DEFAULT_GRACE,
        audit: bool = True,
    ) -> None:
        """``audit=False`` keeps no persistent audit log (audit sinks still run); a read-only catalog keeps none."""
        check_grace(grace)
        self.blobs = blobs
        self.catalog = catalog
        self.clock = clock
        self.inline_max = inline_max
        self.grace = grace
        self._committer = GroupCommit(catalog)
        self._audit_sinks: list[Callable[[AuditRecord], None]] = []
        # The persistent audit log (refvault.catalog.audit_log): reads are appended in batches.
        persistent = audit and not getattr(catalog, "read_only", False)
        self._audit_log = AuditAppender(appender_of(catalog)) if persistent else None
        self._closed = False
        self.location: Path | None = None  # the embedded store's root directory, when there is one
        self._attachments: dict[str, Any] = {}
        self._attach_lock = threading.Lock()

    def embedded_vault(self) -> Vault:
        """This vault (an :class:`~refvault.vault.aio.AsyncVault` answers with the vault it runs)."""
        return self

    def attachment(self, name: str, factory: Callable[[], T]) -> T:
        """A per-vault object owned by a layer above the vault (e.g. the record query engine), made once.

        Upper layers keep their caches here rather than in module globals; an
        attachment with a ``close()`` method is closed when the vault closes,
        and one with ``after_gc(vault)`` is called after every ``gc``.
        """
        with self._attach_lock:
            if self._closed:
                raise StorageError("this vault is closed")
            if name not in self._attachments:
                self._attachments[name] = factory()
            value: T = self._attachments[name]
            return value

    def add_audit_sink(self, sink: Callable[[AuditRecord], None]) -> None:
        """Call ``sink`` with an :class:`AuditRecord` after every put, read, describe, list and delete.

        Sinks run synchronously in the caller's thread, after the operation; an
        exception from a sink propagates (audit fails closed). For a put that
        means the caller sees the sink's error although the artifact is stored:
        use an idempotency key so the retry returns it.
        """
        self._audit_sinks.append(sink)

    def audited(
        self, action: str, scope: Scope, artifact_id: str | None = None
    ) -> AbstractContextManager[dict[str, Any]]:
        """Run one operation an upper layer performs on this vault and audit it like the vault's own (see
        :meth:`add_audit_sink`): the block fills the yielded facts (ids, counts, hashes; never content)."""
        return self._audited(action, scope, artifact_id)

    def audit_event(self, action: str, scope: Scope, artifact_id: str | None, *, outcome: str, **facts: Any) -> None:
        """Append one entry for an event an upper layer saw happen (a guard stopping a request: ``guard_stop``).

        ``facts`` are entry fields (``recipient``, ``purpose``, ``rule_id``, ``bytes``, ``detail``, ...):
        names, counts and hashes only, each clipped to its column, never content. ``outcome`` is a word
        or an error class name (``"ContextLeak"``).
        """
        self._emit(action, _checked_scope(scope), artifact_id, outcome, dict(facts))

    @tracing.audited  # a contextmanager, and a span (op, else refvault.<action>) when tracing is on
    def _audited(self, action: str, scope: object, artifact_id: object = None, op: str = "") -> Iterator[tracing.Facts]:
        """Run one operation and audit its outcome; also refuses to run on a closed vault."""
        if self._closed:
            raise StorageError("this vault is closed")
        facts: dict[str, Any] = {}
        try:
            yield facts
        except RefvaultError as exc:  # a storage failure is reported as itself, not as the failure to audit it
            with contextlib.suppress(StorageError) if isinstance(exc, StorageError) else contextlib.nullcontext():
                self._emit(action, scope, artifact_id, type(exc).__name__, facts)
            raise
        except Exception as exc:
            self._emit(action, scope, artifact_id, f"error:{type(exc).__name__}", facts)
            raise
        self._emit(action, scope, artifact_id, "ok", facts)

    def _emit(self, action: str, scope: object, artifact_id: object, outcome: str, facts: dict[str, Any]) -> None:
        if self._audit_log is not None and not facts.get(WRITTEN):
            if action in SYNCHRONOUS_ACTIONS:
                entry = entry_of(self.clock(), action, scope, artifact_id, outcome, facts)
                if entry is not None:
                    self._audit_log.flush()  # the chain keeps this process's order
                    self.catalog.append_audit([entry])
            else:
                self._audit_log.add(raw_entry(self.clock(), action, scope, artifact_id, outcome, facts))
        if not self._audit_sinks:
            return
        owner = scope if isinstance(scope, Scope) else None
        record = AuditRecord(
            at=self.clock(),
            action=action,
            outcome=outcome,
            tenant=owner.tenant if owner else None,
            user=owner.user if owner else None,
            session=owner.session if owner else None,
            artifact_id=facts.get("artifact_id", artifact_id if is_artifact_id(artifact_id) else None),
            content_hash=facts.get("content_hash"),
            byte_range=facts.get("byte_range"),
            **{name: facts.get(name) for name in _RECORDED_FACTS},
        )
        for sink in self._audit_sinks:
            sink(record)

    # -- opening -----------------------------------------------------------------

    @classmethod
    def open(
        cls,
        location: str | os.PathLike[str] | None = None,
        *,
        blobs: str | os.PathLike[str] | None = None,
        s3_endpoint: str | None = None,
        s3_region: str | None = None,
        manifest_keys: ManifestKeys | None = None,
        create: bool = True,
        read_only: bool = False,
        **options: Any,
    ) -> Vault:
        """Open a store, embedded or scaled out.

        * A directory path opens the embedded store (filesystem blobs + SQLite
          catalog), creating it if needed; with ``create=False`` a location that
          holds no store is a :class:`StorageError` (``no refvault store at ...``)
          and nothing is created. A path that is a file is an
          :class:`InvalidArgument` (``... is a file, not a directory``), and so is
          a non-empty directory that holds no store (``... is a non-empty directory
          that holds no refvault store ...``): a store is never created among other files.
        * ``"memory://"`` opens a throwaway in-memory store.
        * A ``postgresql://`` URL opens a PostgreSQL catalog; ``blobs`` then says
          where the bytes live: ``s3://bucket/prefix`` (any S3-compatible service;
          ``s3_endpoint``/``s3_region`` or ``$REFVAULT_S3_ENDPOINT``/``$AWS_REGION``,
          credentials from the usual AWS environment) or a shared directory. Its
          manifest key ring comes from ``$REFVAULT_MANIFEST_KEY_FILE`` or
          ``$REFVAULT_MANIFEST_KEY`` and must be the same in every process of the
          store (:mod:`refvault.catalog.macs`); without one the store is refused.
          An embedded store keeps its own in ``manifest-keys.json``.

        With no ``location``: ``$REFVAULT_CATALOG`` (with ``$REFVAULT_BLOBS``), else
        ``$REFVAULT_STORE``, else ``./.refvault``. ``manifest_keys`` overrides where the
        manifest key ring comes from (e.g. ``ManifestKeys.from_file(path)``); ``options``
        go to the :class:`Vault` constructor.

        ``read_only=True`` (implies ``create=False``) opens the store without changing its content, on
        media that may be read-only (on writable media SQLite may still manage its ``-wal``/``-shm``
        companions): no migration (a catalog of another schema version is refused),
        no key file, no directory, no temporary; reads, ``list``, ``verify`` and ``gc(dry_run=True)``
        work, every write raises :class:`StorageError`. Caches a read would record (chunk digests)
        are skipped; a record query needs its derivative built already. It applies to embedded and
        ``postgresql://`` stores; a ``memory://`` store is always writable.
        """
        where = store_location(location)
        if where == "memory://":
            from refvault.blobs.memory import MemoryBlobStore
            from refvault.catalog.memory import MemoryCatalog

            return cls(MemoryBlobStore(), MemoryCatalog(manifest_keys=manifest_keys), **options)
        if where.startswith(("postgresql://", "postgresql+psycopg://", "postgres://")):
            return cls._open_scaled(where, blobs, s3_endpoint, s3_region, manifest_keys, read_only, options)
        if "://" in where:
            raise InvalidArgument(
                "unsupported store location: give a directory path, 'memory://' or a postgresql:// URL"
            )
        if blobs is not None or s3_endpoint is not None:
            raise InvalidArgument(
                "an embedded store keeps its blobs in its own directory: blobs= needs a postgresql:// catalog"
            )
        from refvault.blobs.filesystem import FilesystemBlobStore
        from refvault.catalog.sql import SqlCatalog

        root = Path(where)
        check_store_location(root, must_exist=read_only or not create)
        store = FilesystemBlobStore(root, read_only=read_only)
        try:
            catalog = SqlCatalog.for_file(
                root.resolve() / "catalog.db", manifest_keys=manifest_keys, read_only=read_only
            )
        except BaseException:
            store.close()
            raise
        vault = cls(store, catalog, **options)
        vault.location = root.resolve()
        return vault

    @classmethod
    def _open_scaled(
        cls,
        catalog_url: str,
        blobs: str | os.PathLike[str] | None,
        s3_endpoint: str | None,
        s3_region: str | None,
        manifest_keys: ManifestKeys | None,
        read_only: bool,
        options: dict[str, Any],
    ) -> Vault:
        from refvault.catalog.sql import SqlCatalog

        where = os.fspath(blobs) if blobs is not None else os.environ.get("REFVAULT_BLOBS")
        if not where:
            raise InvalidArgument("a postgresql:// catalog needs blobs='s3://bucket/prefix' (or $REFVAULT_BLOBS)")
        store: BlobStore
        if where.startswith("s3://"):
            from refvault.blobs.s3 import S3BlobStore

            store = S3BlobStore.from_url(
                where,
                endpoint=s3_endpoint or os.environ.get("REFVAULT_S3_ENDPOINT"),
                region=s3_region,
            )
        elif "://" in where:
            raise InvalidArgument("unsupported blob location: give s3://bucket/prefix or a shared directory")
        else:
            from refvault.blobs.filesystem import FilesystemBlobStore

            store = FilesystemBlobStore(Path(where), read_only=read_only)
        try:
            catalog = SqlCatalog(catalog_url, manifest_keys=manifest_keys, read_only=read_only)
        except BaseException:
            store.close()
            raise
        return cls(store, catalog, **options)

    def close(self) -> None:
        """Release files and connections. Every later call raises :class:`StorageError`."""
        with self._attach_lock:
            if self._closed:
                return
            self._closed = True
            attachments = list(self._attachments.values())
            self._attachments.clear()
        try:
            for attachment in attachments:
                close = getattr(attachment, "close", None)
                if callable(close):
                    with contextlib.suppress(Exception):  # one attachment must not keep the store open
                        close()
        finally:
            if self._audit_log is not None:
                with contextlib.suppress(Exception):  # what is queued is written before the catalog closes
                    self._audit_log.close()
            self.catalog.close()
            self.blobs.close()

    def __enter__(self) -> Vault:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- capture -----------------------------------------------------------------

    def put(self, scope: Scope, data: object, **metadata: Unpack[CaptureOptions]) -> Descriptor:
        """Capture ``data`` in ``scope`` and return its descriptor once it is durable.

        ``data`` is ``bytes``, a binary file object or an iterable of ``bytes``;
        it is streamed, never held whole. Metadata is validated before the
        first byte is read. With ``idempotency_key``, a retry in the same scope
        returns the first capture's descriptor. ``created_at`` (default: now)
        lets the parts of one result share one moment; it may not be in the future.
        ``derived_from`` records its origin (sources and their content hashes: :meth:`receipt`); ``supersedes``
        marks that artifact of ``scope`` superseded once this one is stored. Over the tenant's byte quota:
        :class:`~refvault.errors.QuotaExceeded`, nothing stored.
        """
        with self._audited("put", scope) as facts:
            owner = _checked_scope(scope)
            checked = CaptureMetadata.of(metadata)
            if checked.supersedes is not None:
                self._manifest(owner, checked.supersedes)  # the replaced artifact is the caller's own: before any byte
            descriptor = self._capture(owner, data, checked, None, facts)
        if checked.supersedes is not None:
            self.supersede(owner, checked.supersedes, descriptor.artifact_id, reason="put(supersedes=...)")
        return descriptor

    def _capture(
        self,
        owner: Scope,
        data: object,
        checked: CaptureMetadata,
        origin: dict[str, Any] | None,
        facts: dict[str, Any],
        payer: Scope | None = None,
    ) -> Descriptor:
        """Store ``data`` in ``owner`` with ``checked`` metadata (``origin``: a copy's), charged to ``payer``'s run."""
        moment = now = self.clock()
        created_at = checked.created_at
        if created_at is not None:
            if not isinstance(created_at, datetime) or created_at.tzinfo is None:
                raise InvalidMetadata("created_at must be a timezone-aware datetime")
            if created_at > now:
                raise InvalidMetadata("created_at may not be in the future")
            moment = created_at.astimezone(UTC)
        made = origin is not None
        if origin is None and checked.derived_from:
            origin = self._tool_origin(owner, checked.recorded_derived_from(), checked)
        draft = Manifest(
            artifact_id=new_artifact_id(),
            scope=owner,
            digest="0" * 64,
            size=0,
            media_type=checked.media_type,
            disclosure=checked.disclosure,
            created_at=moment,
            expires_at=checked_expiry(checked.expires_at, now),
            filename=checked.filename,
            tool_call_id=checked.tool_call_id,
            run_id=checked.run_id,
            schema_version=checked.schema_version,
            source_version=checked.recorded_source_version(),
            completeness=checked.recorded_completeness(),
            idempotency_key=checked.idempotency_key,
            labels=checked.recorded_labels(),
            derived_from=checked.recorded_derived_from(),
            origin=origin,
        )
        namespace = namespace_of(draft.scope.tenant)
        got = ingest(data, self.blobs, namespace=namespace, inline_max=self.inline_max)
        self._check_quota(owner, got.size, got.writer, checked.idempotency_key)
        manifest = replace(draft, digest=got.digest, size=got.size)
        record = got.record(namespace)
        # the put's audit entry commits with its manifest (a replayed put is audited after, as usual)
        entry = None
        if self._audit_log is not None:
            self._audit_log.flush()  # the chain keeps this process's order
            put_facts = {"content_hash": "sha256:" + got.digest}
            entry = entry_of(now, "put", owner, manifest.artifact_id, "ok", put_facts)
        requires = checked.recorded_derived_from() if made else ()  # a copy the vault makes needs its sources
        with self._put_charged(payer or owner, got.size, got.writer, checked.idempotency_key):  # the run's budget
            stored = self._committer.submit(Pending(Publication(manifest, record, entry, requires), got.writer))
        descriptor = with_integrity(stored.descriptor() if stored.origin is None else self.with_status(stored), record)
        facts.update(artifact_id=descriptor.artifact_id, content_hash=descriptor.content_hash, size=descriptor.size)
        facts[WRITTEN] = entry is not None and stored.artifact_id == manifest.artifact_id
        return descriptor

    # -- reads -------------------------------------------------------------------

    def _manifest(self, scope: Scope, artifact_id: str) -> Manifest:
        manifest = self.catalog.find(_checked_scope(scope), check_artifact_id(artifact_id))
        if manifest is None:
            raise NotFound(artifact_id)
        if manifest.expires_at is not None and self.clock() >= manifest.expires_at:
            raise Expired(manifest.artifact_id, format_time(manifest.expires_at))
        return manifest

    def _authorized(
        self, scope: Scope, artifact_id: str, purpose: str, recipient: str, facts: dict[str, Any] | None = None
    ) -> Manifest:
        """The manifest of a read, from the one door every read goes through (:mod:`refvault.vault.authority`)."""
        return authorize(self, scope, artifact_id, purpose=purpose, recipient=recipient, facts=facts)

    def _open(
        self, scope: Scope, artifact_id: str, purpose: str, recipient: str, facts: dict[str, Any] | None
    ) -> tuple[Manifest, VerifiedBlob]:
        manifest = self._authorized(scope, artifact_id, purpose, recipient, facts)
        try:
            blob = VerifiedBlob(manifest.artifact_id, manifest.key, manifest.size, self.catalog, self.blobs)
        except IntegrityError as exc:
            # Deleted and collected between the lookup and the open: that is absence, not damage.
            if exc.kind == "missing" and self.catalog.find(manifest.scope, manifest.artifact_id) is None:
                raise NotFound(artifact_id) from None
            raise
        return manifest, blob

    def describe(
        self, scope: Scope, artifact_id: str, *, purpose: str = DEFAULT_PURPOSE, recipient: str = DEFAULT_RECIPIENT
    ) -> Descriptor:
        """The descriptor of an artifact ``scope`` may read for ``purpose``, to ``recipient`` (see every read's
        checks in :mod:`refvault.vault.authority`: owner or grant, expiry, the tenant's policy)."""
        with self._audited("describe", scope, artifact_id) as facts:
            manifest = self._authorized(scope, artifact_id, purpose, recipient, facts)
            facts["content_hash"] = "sha256:" + manifest.digest
        return self.with_status(manifest)

    def read_bytes(
        self, scope: Scope, artifact_id: str, *, purpose: str = DEFAULT_PURPOSE, recipient: str = DEFAULT_RECIPIENT
    ) -> bytes:
        """Every byte of the artifact, verified before it is returned."""
        return self.read_range(scope, artifact_id, 0, None, purpose=purpose, recipient=recipient)

    def read_range(
        self,
        scope: Scope,
        artifact_id: str,
        offset: int,
        length: int | None,
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> bytes:
        """Verified bytes ``[offset, offset + length)`` (``None``: to the end); only the chunks touched are read."""
        with self._audited("read", scope, artifact_id, "refvault.read_range") as facts:
            check_byte_span(offset, length)
            _, blob = self._open(scope, artifact_id, purpose, recipient, facts)
            try:
                if offset == 0 and (length is None or length >= blob.size):
                    data = blob.read_all()
                else:
                    data = blob.read_range(offset, blob.size if length is None else length)
            finally:
                blob.close()
            self._charge_read(scope, data)  # the run's budget: before any byte is returned
            facts.update(content_hash="sha256:" + blob.record.key.digest, byte_range=(offset, offset + len(data)))
            if self._audit_log is not None:  # the disclosure ledger: the SHA-256 of exactly the bytes returned
                whole = len(data) == blob.size  # all of them: that is the content hash, verified as they were read
                excerpt = blob.record.key.digest if whole else hashlib.sha256(data).hexdigest()
                facts.update(bytes=len(data), excerpt_hash=excerpt)
        return data

    def stream(
        self, scope: Scope, artifact_id: str, *, purpose: str = DEFAULT_PURPOSE, recipient: str = DEFAULT_RECIPIENT
    ) -> ArtifactStream:
        """A seekable binary stream, verified chunk by chunk, in bounded memory.

        The read is authorised again each time the stream moves to a new chunk
        (expiry, the tenant's policy, a grantee's grant: :func:`authority.rechecker
        <refvault.vault.authority.rechecker>`). Like an open file, an owner's stream
        keeps reading the version it opened if the artifact is deleted meanwhile.
        """
        return self._stream(scope, artifact_id, purpose, recipient)[1]

    def open_artifact(
        self, scope: Scope, artifact_id: str, *, purpose: str = DEFAULT_PURPOSE, recipient: str = DEFAULT_RECIPIENT
    ) -> tuple[Descriptor, ArtifactStream]:
        """The descriptor and a verified stream (as :meth:`stream`) of an artifact, from one lookup.

        The same as :meth:`describe` then :meth:`stream`, without looking the
        artifact up twice; the descriptor is of exactly the version the stream
        reads. Audited once, as a ``read``. The caller closes the stream.
        """
        manifest, stream = self._stream(scope, artifact_id, purpose, recipient)
        return with_integrity(manifest.descriptor(), stream.record), stream

    def verify_artifact(
        self, scope: Scope, artifact_id: str, *, purpose: str = DEFAULT_PURPOSE, recipient: str = DEFAULT_RECIPIENT
    ) -> dict[str, Any]:
        """Re-read and hash every byte of one artifact: ``{"artifact_id", "ok", "content_hash", "size"}``.

        Raises :class:`IntegrityError` if the bytes do not match the content
        hash recorded at capture (the same read path as every other read, so
        it proves what a reader would get). :class:`refvault.client.Client`
        has the same method, run by the server.
        """
        descriptor, stream = self.open_artifact(scope, artifact_id, purpose=purpose, recipient=recipient)
        digest = hashlib.sha256()
        size = 0
        with stream:
            for piece in stream.iter_chunks():
                digest.update(piece)
                size += len(piece)
        if "sha256:" + digest.hexdigest() != descriptor.content_hash or size != descriptor.size:
            raise IntegrityError(f"artifact {descriptor.artifact_id} failed verification: its bytes do not match")
        return {
            "artifact_id": descriptor.artifact_id,
            "ok": True,
            "content_hash": descriptor.content_hash,
            "size": size,
        }

    def _stream(self, scope: Scope, artifact_id: str, purpose: str, recipient: str) -> tuple[Manifest, ArtifactStream]:
        blob: VerifiedBlob | None = None
        try:
            with self._audited("read", scope, artifact_id, "refvault.stream") as facts:
                manifest, blob = self._open(scope, artifact_id, purpose, recipient, facts)
                self._charge_stream(scope, blob.size)  # the run's budget
                facts.update(content_hash="sha256:" + manifest.digest, byte_range=(0, blob.size))
                facts["selection"] = f"stream opened on bytes 0-{blob.size}"  # what it returns is recorded at close
                opened = dict(facts)
        except BaseException:
            if blob is not None:
                blob.close()
            raise
        again = rechecker(self, scope, manifest, purpose=purpose, recipient=recipient)
        log = self._audit_log
        if log is None:
            return manifest, ArtifactStream(blob, guard=again)

        def disclosed(summary: dict[str, Any]) -> None:  # the ledger: exactly what the stream returned
            log.add(raw_entry(self.clock(), "stream", scope, manifest.artifact_id, "ok", {**opened, **summary}))

        return manifest, LedgerStream(blob, again, disclosed)

    def list(
        self, scope: Scope, *, purpose: str = DEFAULT_PURPOSE, recipient: str = DEFAULT_RECIPIENT
    ) -> list[Descriptor]:
        """Unexpired artifacts of ``scope``, newest first (ties: latest published first), without those the
        tenant's policy refuses for ``purpose`` and ``recipient``. Artifacts shared with ``scope`` by a live
        grant that covers ``purpose`` and ``recipient`` are included, marked ``scope["shared"]`` and
        ``scope["grant_id"]`` in their descriptor (:mod:`refvault.vault.grants`)."""
        with self._audited("list", scope) as facts:
            owner = _checked_scope(scope)
            purpose, recipient = checked_reader(purpose, recipient)
            facts.update(purpose=purpose, recipient=recipient)
            shared = shared_manifests(self.catalog, owner, self.clock(), purpose=purpose, recipient=recipient)
            found = sorted([*self.catalog.in_scope(owner), *shared], key=lambda m: m.created_at, reverse=True)
            readable = [m for m in found if permitted(self, owner, m, purpose=purpose, recipient=recipient)]
            return [with_integrity(m.descriptor(), self.catalog.blob(m.key)) for m in readable]

    def declassify(self, scope: Scope, artifact_id: str, *, remove: Iterable[str], reason: str) -> Descriptor:
        """Remove labels from an artifact: the one way a label goes (the model and tools cannot); its new descriptor.

        Only the owner may: ``scope`` must be the artifact's own (any other scope, a grantee's too, gets
        the same :class:`NotFound` as an absent id; an expired artifact is :class:`Expired`). ``remove``
        names at least one label the artifact carries (else :class:`InvalidArgument`); ``reason``
        (1-1024 characters) says why. The row is re-MAC'd with its new labels in one write. Audited as
        ``declassify``: the removed names and the reason's SHA-256 only (:mod:`refvault.vault.labels`).
        Two concurrent declassifications of one artifact may lose one removal (the label stays), never
        the other way.
        """
        with self._audited("declassify", scope, artifact_id) as facts:
            facts["detail"] = DECLASSIFY_DETAIL
            owner = _checked_scope(scope)
            manifest = self._manifest(owner, artifact_id)  # absent, not the owner's, expired: before any argument
            kept, facts["selection"] = checked_removal(manifest, remove, reason)
            facts["content_hash"] = "sha256:" + manifest.digest
            entry = None  # the declassification's audit entry commits with the new labels
            if self._audit_log is not None:
                self._audit_log.flush()  # the chain keeps this process's order
                entry = entry_of(self.clock(), "declassify", owner, manifest.artifact_id, "ok", facts)
            updated = self.catalog.set_labels(owner, manifest.artifact_id, kept, audit=entry)
            facts[WRITTEN] = updated is not None and entry is not None
            if updated is None:  # deleted meanwhile
                raise NotFound(artifact_id)
        return updated.descriptor()

    def read_selection(self, scope: Scope, artifact_id: str, request: Selection[R], local: Callable[[Any], R]) -> R:
        """Run a selective read here: ``local(self)``, the read engine :mod:`refvault.read` hands in.

        The vault contract's one door for windows, grep, record queries and
        record sets (:class:`refvault.contract.VaultContract`); a
        :class:`~refvault.client.Client` sends ``request`` to its server instead.
        """
        return local(self)

    def audit_read(
        self,
        action: str,
        scope: Scope,
        descriptor: Descriptor,
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
        selection: str | None = None,
        excerpt_hash: str | None = None,
        bytes: int | None = None,
        records: int | None = None,
    ) -> None:
        """Audit a read an upper layer served from verified bytes (e.g. a record query); by id only.

        ``selection`` is a short summary the engine builds itself (``"chars 0-4000"``, ``"rows 0-50"``), never
        caller text; ``excerpt_hash`` the hex SHA-256 of exactly the text it returned, which makes the read a
        disclosure in the ledger; ``bytes``/``records`` what it returned.
        """
        with self._audited(action, scope, descriptor.artifact_id, tracing.UNTRACED) as facts:  # the read's own span
            facts.update(content_hash=descriptor.content_hash, purpose=purpose, recipient=recipient)
            facts.update(selection=selection, excerpt_hash=excerpt_hash, bytes=bytes, records=records)

    # -- derivatives -------------------------------------------------------------

    def derived(
        self,
        scope: Scope,
        artifact_id: str,
        kind: str,
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> Derivation | None:
        """The derivative of ``kind`` recorded for an artifact ``scope`` may read, for ``purpose``, to ``recipient``."""
        manifest = self._authorized(scope, artifact_id, purpose, recipient)
        with _naming(manifest.artifact_id):
            return self.catalog.derivation(manifest.key, kind)

    def put_derived(
        self,
        scope: Scope,
        artifact_id: str,
        kind: str,
        data: object,
        info: dict[str, Any],
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> Derivation:
        """Store bytes derived from an artifact's bytes, linked to its blob; return the derivation kept.

        Derivatives are shared by every artifact with the same bytes in the
        tenant and live as long as that blob. If another writer recorded one
        first, theirs is returned and these bytes are discarded.
        """
        manifest = self._authorized(scope, artifact_id, purpose, recipient)
        got = ingest(data, self.blobs, namespace=manifest.key.namespace, inline_max=self.inline_max)
        record = got.record(manifest.key.namespace)
        draft = Derivation(manifest.key, kind, got.digest, got.size, checked_json("info", info, limit=1 << 20))
        visible = False

        def make_visible() -> None:
            nonlocal visible
            if got.writer is not None:
                got.writer.publish(record.key)
            visible = True

        try:
            with _naming(manifest.artifact_id):
                kept = self.catalog.publish_derivation(draft, record, make_visible)
        finally:
            if not visible and got.writer is not None:
                got.writer.abort()
        if kept is None:  # the source was deleted and collected meanwhile
            raise NotFound(artifact_id)
        return kept

    def open_derived(
        self,
        scope: Scope,
        artifact_id: str,
        kind: str,
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> tuple[Derivation, ArtifactStream]:
        """A verified stream of an artifact's derivative (:class:`NotFound` if none was recorded)."""
        derivation = self.derived(scope, artifact_id, kind, purpose=purpose, recipient=recipient)
        if derivation is None:
            raise NotFound(artifact_id)
        blob = VerifiedBlob(artifact_id, derivation.key, derivation.size, self.catalog, self.blobs)
        return derivation, ArtifactStream(blob)


@contextmanager
def _naming(artifact_id: str) -> Iterator[None]:
    """Name the artifact in the error of a derivation record that fails its MAC (the catalog cannot)."""
    try:
        yield
    except IntegrityError as exc:
        if exc.kind != "manifest":
            raise
        raise IntegrityError(
            f"artifact {shown_id(artifact_id)} failed verification: its derived-data record fails its MAC",
            kind="manifest",
        ) from None


def _checked_scope(scope: object) -> Scope:
    if not isinstance(scope, Scope):
        raise InvalidArgument("scope must be a refvault.Scope(tenant=..., user=..., session=...)")
    return scope


if TYPE_CHECKING:  # mypy checks here that the embedded vault satisfies the vault contract
    from refvault.contract import EmbeddedHandle, LocalVault, VaultContract

    def _satisfies_contract(vault: Vault) -> VaultContract:
        return vault

    def _is_local(vault: Vault) -> LocalVault:
        return vault

    def _is_handle(vault: Vault) -> EmbeddedHandle:
        return vault
