"""The vault: capture and publish, resolve and disclose, retention and checking.

Invariants, and where each is enforced and tested:

* **Publish after durable.** ``put`` consumes the input into a private
  temporary while hashing, ``fsync``s it, then in one catalog transaction
  renames it into place, ``fsync``s the directory and commits the manifest;
  only then does it return a descriptor. Small blobs live in the catalog row
  and commit atomically with it. No published reference ever points at
  missing or partial bytes (``tests/security/test_crash.py`` kills writers at random).
* **Opaque, fresh ids.** Every capture gets a new ``art_`` id with 128 random
  bits; an ``idempotency_key`` (unique per scope) makes a retried put return
  the same id, and reusing it for a different capture (other bytes or
  metadata) is an :class:`~refvault.errors.IdempotencyConflict`.
* **Tenant-only dedup.** Blobs are addressed by (tenant namespace, SHA-256),
  so identical bytes are stored once per tenant and never shared across
  tenants: no dedupe or timing oracle between tenants.
* **Scope is the read key.** Every read matches id and (tenant, user,
  session) in one lookup; any mismatch is the same :class:`NotFound` as an
  absent id. ``expires_at`` is checked on every read and gives
  :class:`Expired`, which only the owner can ever see.
* **Verified reads.** See :mod:`refvault.vault.verified`: every byte returned
  was checked against digests held in the catalog; damage raises
  :class:`IntegrityError` and returns nothing bad.
* **Authentic manifests.** Every manifest the vault acts on comes from the
  catalog, which checks each row's MAC under a key kept outside it
  (:mod:`refvault.catalog.macs`): an edited, moved or forged row is an
  :class:`IntegrityError` on every read, and ``verify`` reports every such row
  and every artifact whose blob is not in its own tenant's namespace
  (``tests/security/test_manifest_integrity.py``).
* **Bad input loses nothing.** All metadata is validated before the first
  byte is read; a failed put leaves at worst a temporary that ``gc`` removes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from refvault.blobs.base import BlobKey, BlobStore
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
from refvault.vault.commit import GroupCommit, Pending
from refvault.vault.ingest import ingest
from refvault.vault.location import check_store_location, store_location
from refvault.vault.reports import AuditRecord, GcReport, KeyRotation, Problem, VerifyReport
from refvault.vault.verified import ArtifactStream, VerifiedBlob

__all__ = ["DEFAULT_GRACE", "AuditRecord", "GcReport", "KeyRotation", "Problem", "Vault", "VerifyReport"]

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_GRACE = 3600.0
DEFAULT_INLINE_MAX = 32 * 1024


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Vault:
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
    ) -> None:
        _check_grace(grace)
        self.blobs = blobs
        self.catalog = catalog
        self.clock = clock
        self.inline_max = inline_max
        self.grace = grace
        self._committer = GroupCommit(catalog)
        self._audit_sinks: list[Callable[[AuditRecord], None]] = []
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

    @contextmanager
    def _audited(self, action: str, scope: object, artifact_id: object = None) -> Iterator[dict[str, Any]]:
        """Run one operation and audit its outcome; also refuses to run on a closed vault."""
        if self._closed:
            raise StorageError("this vault is closed")
        facts: dict[str, Any] = {}
        try:
            yield facts
        except RefvaultError as exc:
            self._emit(action, scope, artifact_id, type(exc).__name__, facts)
            raise
        except Exception as exc:
            self._emit(action, scope, artifact_id, f"error:{type(exc).__name__}", facts)
            raise
        self._emit(action, scope, artifact_id, "ok", facts)

    def _emit(self, action: str, scope: object, artifact_id: object, outcome: str, facts: dict[str, Any]) -> None:
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
        """
        with self._audited("put", scope) as facts:
            now = self.clock()
            moment = now
            created_at = metadata.get("created_at")
            if created_at is not None:
                if not isinstance(created_at, datetime) or created_at.tzinfo is None:
                    raise InvalidMetadata("created_at must be a timezone-aware datetime")
                if created_at > now:
                    raise InvalidMetadata("created_at may not be in the future")
                moment = created_at.astimezone(UTC)
            owner = _checked_scope(scope)
            checked = CaptureMetadata.of(metadata)
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
            )
            namespace = namespace_of(draft.scope.tenant)
            got = ingest(data, self.blobs, namespace=namespace, inline_max=self.inline_max)
            manifest = replace(draft, digest=got.digest, size=got.size)
            record = got.record(namespace)
            descriptor = self._committer.submit(Pending(Publication(manifest, record), got.writer)).descriptor()
            facts.update(artifact_id=descriptor.artifact_id, content_hash=descriptor.content_hash)
        return descriptor

    # -- reads -------------------------------------------------------------------

    def _manifest(self, scope: Scope, artifact_id: str) -> Manifest:
        manifest = self.catalog.find(_checked_scope(scope), check_artifact_id(artifact_id))
        if manifest is None:
            raise NotFound(artifact_id)
        self._check_expiry(manifest)
        return manifest

    def _open(self, scope: Scope, artifact_id: str) -> tuple[Manifest, VerifiedBlob]:
        manifest = self._manifest(scope, artifact_id)
        try:
            blob = VerifiedBlob(manifest.artifact_id, manifest.key, manifest.size, self.catalog, self.blobs)
        except IntegrityError as exc:
            # Deleted and collected between the lookup and the open: that is absence, not damage.
            if exc.kind == "missing" and self.catalog.find(scope, artifact_id) is None:
                raise NotFound(artifact_id) from None
            raise
        return manifest, blob

    def _check_expiry(self, manifest: Manifest) -> None:
        if manifest.expires_at is not None and self.clock() >= manifest.expires_at:
            raise Expired(manifest.artifact_id, format_time(manifest.expires_at))

    def describe(self, scope: Scope, artifact_id: str) -> Descriptor:
        """The descriptor of an artifact visible in ``scope``."""
        with self._audited("describe", scope, artifact_id) as facts:
            manifest = self._manifest(scope, artifact_id)
            facts["content_hash"] = "sha256:" + manifest.digest
        return manifest.descriptor()

    def read_bytes(self, scope: Scope, artifact_id: str) -> bytes:
        """Every byte of the artifact, verified before it is returned."""
        return self.read_range(scope, artifact_id, 0, None)

    def read_range(self, scope: Scope, artifact_id: str, offset: int, length: int | None) -> bytes:
        """Verified bytes ``[offset, offset + length)`` (``None``: to the end); only the chunks touched are read."""
        with self._audited("read", scope, artifact_id) as facts:
            check_byte_span(offset, length)
            _, blob = self._open(scope, artifact_id)
            try:
                if offset == 0 and (length is None or length >= blob.size):
                    data = blob.read_all()
                else:
                    data = blob.read_range(offset, blob.size if length is None else length)
            finally:
                blob.close()
            facts.update(content_hash="sha256:" + blob.record.key.digest, byte_range=(offset, offset + len(data)))
        return data

    def stream(self, scope: Scope, artifact_id: str) -> ArtifactStream:
        """A seekable binary stream, verified chunk by chunk, in bounded memory.

        Expiry is re-checked each time the stream moves to a new chunk. Like an
        open file, a stream keeps reading the version it opened if the artifact
        is deleted meanwhile.
        """
        return self._stream(scope, artifact_id)[1]

    def open_artifact(self, scope: Scope, artifact_id: str) -> tuple[Descriptor, ArtifactStream]:
        """The descriptor and a verified stream (as :meth:`stream`) of an artifact, from one lookup.

        The same as :meth:`describe` then :meth:`stream`, without looking the
        artifact up twice; the descriptor is of exactly the version the stream
        reads. Audited once, as a ``read``. The caller closes the stream.
        """
        manifest, stream = self._stream(scope, artifact_id)
        return manifest.descriptor(), stream

    def verify_artifact(self, scope: Scope, artifact_id: str) -> dict[str, Any]:
        """Re-read and hash every byte of one artifact: ``{"artifact_id", "ok", "content_hash", "size"}``.

        Raises :class:`IntegrityError` if the bytes do not match the content
        hash recorded at capture (the same read path as every other read, so
        it proves what a reader would get). :class:`refvault.client.Client`
        has the same method, run by the server.
        """
        descriptor, stream = self.open_artifact(scope, artifact_id)
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

    def _stream(self, scope: Scope, artifact_id: str) -> tuple[Manifest, ArtifactStream]:
        blob: VerifiedBlob | None = None
        try:
            with self._audited("read", scope, artifact_id) as facts:
                manifest, blob = self._open(scope, artifact_id)
                facts.update(content_hash="sha256:" + manifest.digest, byte_range=(0, blob.size))
        except BaseException:
            if blob is not None:
                blob.close()
            raise
        return manifest, ArtifactStream(blob, guard=lambda: self._check_expiry(manifest))

    def list(self, scope: Scope) -> list[Descriptor]:
        """Unexpired artifacts of ``scope``, newest first (ties: latest published first)."""
        with self._audited("list", scope):
            now = self.clock()
            return [
                m.descriptor()
                for m in self.catalog.in_scope(_checked_scope(scope))
                if m.expires_at is None or now < m.expires_at
            ]

    def delete(self, scope: Scope, artifact_id: str) -> None:
        """Remove the artifact's manifest; its bytes go at the next ``gc`` if unreferenced."""
        with self._audited("delete", scope, artifact_id):
            if not self.catalog.delete(_checked_scope(scope), check_artifact_id(artifact_id)):
                raise NotFound(artifact_id)

    def read_selection(self, scope: Scope, artifact_id: str, request: Selection[R], local: Callable[[Any], R]) -> R:
        """Run a selective read here: ``local(self)``, the read engine :mod:`refvault.read` hands in.

        The vault contract's one door for windows, grep, record queries and
        record sets (:class:`refvault.contract.VaultContract`); a
        :class:`~refvault.client.Client` sends ``request`` to its server instead.
        """
        return local(self)

    def audit_read(self, action: str, scope: Scope, descriptor: Descriptor) -> None:
        """Audit a read an upper layer served from verified bytes (e.g. a record query); by id only."""
        with self._audited(action, scope, descriptor.artifact_id) as facts:
            facts["content_hash"] = descriptor.content_hash

    # -- derivatives -------------------------------------------------------------

    def derived(self, scope: Scope, artifact_id: str, kind: str) -> Derivation | None:
        """The derivative of ``kind`` recorded for an artifact visible in ``scope``, if any."""
        manifest = self._manifest(scope, artifact_id)
        with _naming(manifest.artifact_id):
            return self.catalog.derivation(manifest.key, kind)

    def put_derived(self, scope: Scope, artifact_id: str, kind: str, data: object, info: dict[str, Any]) -> Derivation:
        """Store bytes derived from an artifact's bytes, linked to its blob; return the derivation kept.

        Derivatives are shared by every artifact with the same bytes in the
        tenant and live as long as that blob. If another writer recorded one
        first, theirs is returned and these bytes are discarded.
        """
        manifest = self._manifest(scope, artifact_id)
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

    def open_derived(self, scope: Scope, artifact_id: str, kind: str) -> tuple[Derivation, ArtifactStream]:
        """A verified stream of an artifact's derivative (:class:`NotFound` if none was recorded)."""
        derivation = self.derived(scope, artifact_id, kind)
        if derivation is None:
            raise NotFound(artifact_id)
        blob = VerifiedBlob(artifact_id, derivation.key, derivation.size, self.catalog, self.blobs)
        return derivation, ArtifactStream(blob)

    # -- maintenance -------------------------------------------------------------

    def verify(self, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
        """Check every manifest row's MAC, then re-read and re-hash every blob; report problems with artifact ids.

        Every row is checked: one that fails its MAC is a ``manifest`` problem, one
        whose blob key is outside its tenant's namespace a ``misplaced`` one, and the
        blob of every row that can be decoded is looked for in the row's own tenant's
        namespace (``missing``/``corrupt``), whatever the row's namespace column says.
        ``progress(done_bytes, total_bytes)`` is called as blobs are checked. A
        blob that goes missing because its artifacts were deleted and collected
        while ``verify`` ran is not a problem and is not reported.
        """
        if self._closed:
            raise StorageError("this vault is closed")
        by_key: dict[BlobKey, list[str]] = {}
        sizes: dict[BlobKey, int] = {}
        owners: dict[BlobKey, list[tuple[Scope, str]]] = {}
        report = VerifyReport()
        for row in self.catalog.audit():
            report.artifacts += 1
            shown = shown_id(row.artifact_id)
            digest = row.digest if _is_digest(row.digest) else ""
            if row.fault is not None:
                detail = f"artifact {shown} failed verification: {row.fault}"
                report.problems.append(Problem("manifest", digest, detail, (shown,)))
            m = row.manifest
            if m is None or not digest:
                continue
            if row.namespace != m.key.namespace:
                detail = f"artifact {shown} failed verification: its blob key is in another tenant's namespace"
                report.problems.append(Problem("misplaced", digest, detail, (shown,)))
            by_key.setdefault(m.key, []).append(shown)
            owners.setdefault(m.key, []).append((m.scope, m.artifact_id))
            sizes[m.key] = m.size
        for d, source, fault in self.catalog.audit_derivations():  # named by the artifacts of its source
            names = by_key.get(source, []) if source is not None else []
            if fault is not None:
                detail = f"a derivation failed verification: {fault}"
                digest = source.digest if source is not None else ""
                report.problems.append(Problem("manifest", digest, detail, tuple(sorted(set(names))) or ("(derived)",)))
            if d is not None:
                by_key.setdefault(d.key, []).extend(names)
                sizes[d.key] = d.size
        total = sum(sizes.values())
        for key in sorted(by_key):
            ids = tuple(sorted(set(by_key[key])))
            problem = self._check_blob(key, sizes[key], ids or ("(derived)",))
            if problem is not None and (problem.kind != "missing" or self._still_named(key, owners.get(key, []))):
                report.problems.append(problem)
            report.blobs_checked += 1
            report.bytes_checked += sizes[key]
            if progress is not None:
                progress(report.bytes_checked, total)
        report.grace = self.grace
        _, old = self._unreferenced(self.grace)
        wait = 0.0
        for key in iter(self.blobs.keys()):
            if key in by_key:
                continue
            report.unreferenced += 1
            age = self.blobs.age(key)
            if key not in old or (age is not None and age < self.grace):  # what gc keeps (see _unreferenced)
                report.unreferenced_in_grace += 1
                wait = max(wait, self.grace - (age or 0.0))
        if report.unreferenced_in_grace:
            report.collectable_after = self.clock() + timedelta(seconds=wait)
        return report

    def _unreferenced(self, grace: float) -> tuple[set[BlobKey], set[BlobKey]]:
        """gc's rule, which ``verify`` reports by: (every unreferenced blob, those unreferenced for ``grace``).

        A blob is unreferenced when no artifact or derivation names it (a file without a catalog
        record too); gc removes one whose record is older than ``grace`` and whose stored bytes are too.
        """
        orphans = {key for key in iter(self.blobs.keys()) if not self.catalog.has_blob(key)}
        return set(self.catalog.unreferenced(0)) | orphans, set(self.catalog.unreferenced(grace)) | orphans

    def _still_named(self, key: BlobKey, owners: Sequence[tuple[Scope, str]]) -> bool:
        """Whether a missing blob is still named by a row or a derivation (not deleted and collected meanwhile).

        Asked of the rows themselves, not only of the catalog's blob references, which
        follow the rows' namespace column: a row moved to another tenant still counts.
        """
        if self.catalog.is_referenced(key):
            return True
        for scope, artifact_id in owners:
            try:
                if self.catalog.find(scope, artifact_id) is not None:
                    return True
            except IntegrityError:
                return True  # the row is still there (and reported as a manifest problem)
        return False

    def _check_blob(self, key: BlobKey, size: int, ids: tuple[str, ...]) -> Problem | None:
        try:
            blob = VerifiedBlob(ids[0], key, size, self.catalog, self.blobs)
        except IntegrityError as exc:
            return Problem(exc.kind, key.digest, str(exc), ids)
        try:
            blob.check()
        except IntegrityError as exc:
            return Problem(exc.kind, key.digest, str(exc), ids)
        finally:
            blob.close()
        return None

    def rotate_manifest_key(self, *, drop_retired: bool = False) -> KeyRotation:
        """Make a fresh manifest key current, then MAC every authentic row again with it.

        Rows MAC'd with the old key keep verifying throughout (the old key stays in the
        ring, retired). Rows that fail their MAC are left as they are: a rotation never
        launders an edit. With ``drop_retired``, the retired keys are then removed if no
        authentic row still uses one: from then on a row MAC'd with one fails. The ring
        is rewritten where it is kept (``manifest-keys.json``, ``$REFVAULT_MANIFEST_KEY_FILE``);
        a ring given in ``$REFVAULT_MANIFEST_KEY`` cannot be rotated here (:class:`StorageError`).
        """
        if self._closed:
            raise StorageError("this vault is closed")
        key_id = self.catalog.rotate_manifest_key()
        remacd, failing = self.catalog.remac()
        dropped: tuple[str, ...] | None = ()
        if drop_retired:
            gone = self.catalog.drop_retired_manifest_keys()
            dropped = None if gone is None else tuple(gone)
        return KeyRotation(key_id, remacd, failing, dropped)

    def gc(self, *, grace: float | None = None, dry_run: bool = False) -> GcReport:
        """Remove expired artifacts, then blobs and temporaries unreferenced for ``grace`` seconds.

        Collection runs under the catalog's write lock, so it never removes a
        blob a concurrent put is publishing.
        """
        if self._closed:
            raise StorageError("this vault is closed")
        grace = self.grace if grace is None else grace
        _check_grace(grace)
        report = GcReport(dry_run=dry_run, grace=grace)
        now = self.clock()
        if dry_run:  # what delete_expired would remove: rows by their expiry, authentic or not
            report.expired = [
                row.artifact_id
                for row in self.catalog.audit()
                if row.manifest is not None and row.manifest.expires_at is not None and row.manifest.expires_at <= now
            ]
        else:
            report.expired = self.catalog.delete_expired(now)
        unreferenced, candidates = self._unreferenced(grace)
        gone = self._collect(sorted(candidates), grace, dry_run, report)
        if report.blobs_removed and not dry_run:
            # Collecting a source drops its derivations: collect the derivatives it orphaned now.
            self._collect(sorted(self.catalog.unreferenced(grace)), grace, dry_run, report)
        report.blobs_kept = len(unreferenced - gone)
        report.temporaries_removed = self.blobs.sweep_temp(grace, dry_run=dry_run)
        if not dry_run:
            with self._attach_lock:
                attachments = list(self._attachments.values())
            for attachment in attachments:  # e.g. local copies of collected derivatives
                after_gc = getattr(attachment, "after_gc", None)
                if callable(after_gc):
                    after_gc(self)
        return report

    def _collect(self, candidates: Sequence[BlobKey], grace: float, dry_run: bool, report: GcReport) -> set[BlobKey]:
        """Collect (or, dry, count) the candidates old enough; return those removed, would be, or failed."""
        gone: set[BlobKey] = set()
        for key in candidates:
            if dry_run:
                age = self.blobs.age(key)
                if age is None or age >= grace:
                    report.blobs_removed += 1
                    gone.add(key)
                continue
            try:
                if self.catalog.collect(key, grace, self._remover(key, grace)):
                    report.blobs_removed += 1
                    gone.add(key)
            except StorageError:
                report.failures += 1  # one unremovable blob must not stop collection of the rest
                gone.add(key)
        return gone

    def _remover(self, key: BlobKey, grace: float) -> Callable[[], bool]:
        def remove() -> bool:
            age = self.blobs.age(key)
            if age is not None and age < grace:
                return False
            self.blobs.delete(key)
            return True

        return remove


MAX_GRACE = 100 * 365 * 86400.0


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


def _check_grace(grace: object) -> None:
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 <= grace <= MAX_GRACE:
        raise InvalidArgument("grace must be a number of seconds between 0 and 100 years")


def _is_digest(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


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
