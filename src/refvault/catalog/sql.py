"""SQL catalog over SQLAlchemy Core: SQLite (embedded) and PostgreSQL (scale-out), one schema.

**SQLite** runs in WAL mode with ``synchronous=FULL`` (a commit is durable when it
returns) and a 30 s busy timeout, so several processes can share one store.
Write transactions start with ``BEGIN IMMEDIATE``: they take the database's
write lock up front, which is the lock ``publish`` and ``collect`` rely on.

**PostgreSQL** (psycopg 3, a connection pool recycled hourly, READ COMMITTED) has no
single write lock, so the capture protocol's ordering (blob durable, then
manifest committed, then reference published) is kept with transaction-scoped
advisory locks, always taken in ascending order so that writers never deadlock:

* ``publish`` locks every blob key of its batch and every (scope, idempotency
  key) of its batch *before* it calls ``make_visible`` and before it looks up
  idempotency keys;
* ``collect`` and ``publish_derivation`` lock the blob key(s) they touch.

A lock is released only after its transaction's commit is visible, and under
READ COMMITTED every statement after the lock sees that commit: so a ``collect``
racing a ``publish`` of the same blob either runs first (and the publisher's
``make_visible`` re-confirms the bytes) or sees the new reference and keeps the
blob; and of concurrent captures with one idempotency key exactly one inserts,
the others replay it. Migrations take a fixed advisory lock, so several
processes may open a fresh database at once.

Reads are single statements (each sees one snapshot) and never block on writers; the one write
a reader may attempt (recording derived chunk digests) gives up after 250 ms. The hot
one-row reads (``find``, ``blob``, ``find_api_key``, ``derivation``) go straight to the
driver on a pooled connection (:meth:`SqlCatalog._one`): a statement compiled once, no
transaction (PostgreSQL autocommit: no BEGIN/ROLLBACK round trips), retried once on a
fresh connection if the pooled one turns out to be dead (connections are not pinged
before use; a write on a dead one fails once, with :class:`StorageError`, and the pool
replaces every connection of that age).
Database failures surface as :class:`~refvault.errors.StorageError` naming the
error class, never the SQL or its parameters.

**Read-only** (``read_only=True``, what the CLI's reading commands use): the store's content is never
changed. On writable media SQLite may still create and remove its ``-wal``/``-shm`` companions, and fold a
crashed writer's journal into ``catalog.db`` (the same content); on a read-only file system nothing is
written at all. No migration runs (a catalog of another schema version is refused), no key file is created, every
method that writes raises :class:`~refvault.errors.StorageError` before touching the database, and
SQLite itself refuses writes (``PRAGMA query_only``; on read-only media the file is opened
``mode=ro``, ``immutable`` only on a read-only file system with no ``-wal``:
:func:`~refvault.catalog.engine.sqlite_read_only_uri`).
Best-effort caches (chunk digests) are simply not recorded (``tests/catalog/test_read_only_catalog.py``,
``tests/cli/test_read_only_store.py``).

**Manifest MACs** (:mod:`refvault.catalog.macs`). Every artifact row is written with
its MAC (:func:`~refvault.catalog.rows.artifact_row`) and checked where it is decoded (:meth:`SqlCatalog._manifest`,
the one place rows become manifests), together with its blob namespace (the tenant's).
The key ring is found when the catalog opens: beside a SQLite file
(``manifest-keys.json``, created if absent), from the environment for PostgreSQL
(refused if absent). Migration 4 adds the ``mac`` column; the open that adds it MACs
every existing row in the same transaction (trust on upgrade). Only an open that adds
the column does so: a row whose MAC is later blanked, or a migration record later
removed while the column stays, is never re-adopted.

The pieces: :mod:`~refvault.catalog.engine` (opening the database), :mod:`~refvault.catalog.migration`
(migrations and trust on upgrade), :mod:`~refvault.catalog.statements` (statements and advisory lock ids),
:mod:`~refvault.catalog.rows` (rows to records and back), :mod:`~refvault.catalog.failures` (database
failures as ``StorageError``); this module is the :class:`SqlCatalog` that uses them.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections import namedtuple
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from refvault.blobs.base import BlobKey
from refvault.catalog import audit_rows, grant_rows
from refvault.catalog.audit_log import AuditEntry
from refvault.catalog.base import (
    ApiKey,
    BlobRecord,
    Derivation,
    Manifest,
    ManifestCheck,
    Publication,
    replay_or_conflict,
)
from refvault.catalog.engine import (
    Compiled,
    checked_url,
    count_pool_use,
    default_keys,
    sqlite_engine,
    while_locked,
)
from refvault.catalog.failures import describe, translated
from refvault.catalog.macs import ManifestKeys, derivation_error, manifest_error, micros
from refvault.catalog.migration import check_current, migrate
from refvault.catalog.rows import (
    UNREADABLE,
    api_key_of,
    api_key_row,
    artifact_row,
    blob_record,
    blob_row,
    decode_derivation,
    decode_manifest,
    derivation_pk,
    labels_column,
    now_us,
    to_json,
)
from refvault.catalog.schema import api_keys, artifacts, blobs, derivations, holds, lineage, settings
from refvault.catalog.sql_authority import SqlAuthority
from refvault.catalog.sql_budgets import SqlBudgets
from refvault.catalog.sql_lineage import SqlLineage, lineage_rows
from refvault.catalog.sql_runs import SqlRuns
from refvault.catalog.statements import (
    BLOB,
    DERIVATION,
    FIND,
    FIND_API_KEY,
    FIND_KEY,
    INSERT_ARTIFACT,
    LOCK_KEYS,
    MANIFEST_KEYS_LOCK,
    MIGRATION_LOCK,
    RECORD_CHUNKS,
    RECORD_MERKLE,
    RELEASE_KEY,
    REMAC_BATCH,
    SET_DERIVATION_MAC,
    SET_MAC,
    blob_lock,
    dialect_insert,
    idempotency_lock,
    references,
    scope_match,
    scope_params,
    upsert_blob,
)
from refvault.copies import expired_mark
from refvault.errors import IntegrityError, NotFound, RefvaultError, StorageError
from refvault.ids import namespace_of
from refvault.model import Scope

__all__ = ["POOL_OVERFLOW", "POOL_SIZE", "SqlCatalog"]

# Connections kept per process, and opened beyond that for one use each. Opening one
# costs far more than a query (PRAGMAs on SQLite, a new backend on PostgreSQL), so the
# pool covers the threads that use the catalog at once; connections open lazily.
POOL_SIZE = 24
POOL_OVERFLOW = 24


class SqlCatalog(SqlAuthority, SqlLineage, SqlBudgets, SqlRuns):
    """A :class:`~refvault.catalog.Catalog` in a SQL database reached by a SQLAlchemy URL."""

    @classmethod
    def for_file(cls, path: Path, *, manifest_keys: ManifestKeys | None = None, read_only: bool = False) -> SqlCatalog:
        """The embedded catalog: a SQLite file, created private (0600), never through a symlink.

        Its manifest key ring is ``manifest-keys.json`` in the same directory unless ``manifest_keys`` is given.
        ``read_only``: the file must exist, and nothing is created or written (see ``read_only`` of the
        constructor and :func:`~refvault.catalog.engine.sqlite_read_only_uri`).
        """
        flags = os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT
        try:
            fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StorageError(exc.errno or 0, f"cannot open the catalog file: {exc.strerror}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise StorageError("the catalog path is not a regular file")
        finally:
            os.close(fd)
        url = sa.engine.URL.create("sqlite", database=str(path))
        return cls(url, manifest_keys=manifest_keys, read_only=read_only)

    def __init__(
        self,
        url: str | sa.engine.URL,
        *,
        pool_size: int = POOL_SIZE,
        max_overflow: int = POOL_OVERFLOW,
        manifest_keys: ManifestKeys | None = None,
        read_only: bool = False,
    ) -> None:
        """Open (and migrate) the catalog at ``url``: ``sqlite:///path`` or ``postgresql://...``.

        ``postgresql://`` and ``postgres://`` mean psycopg 3 (``postgresql+psycopg://``).
        ``pool_size``/``max_overflow`` size the connection pool per process: up to
        ``pool_size`` connections are kept open (opened as needed, never up front);
        the overflow ones are closed after each use, so ``pool_size`` should cover
        the number of threads that read at once (``refvault serve`` caps its reads
        at :data:`refvault.server.app.READ_THREADS`, below ``POOL_SIZE``).

        ``manifest_keys`` is the ring artifact rows are MAC'd with; by default a SQLite
        file's is ``manifest-keys.json`` beside it (created if absent), an in-memory
        SQLite database's is made afresh, and PostgreSQL's comes from
        ``$REFVAULT_MANIFEST_KEY_FILE`` or ``$REFVAULT_MANIFEST_KEY``
        (:meth:`ManifestKeys.from_environment`: :class:`StorageError` if neither is set).

        ``read_only``: the content is never changed (on writable media SQLite may still manage its
        ``-wal``/``-shm`` companions; see the module docstring). No migration runs (a catalog whose schema is not this
        version's is refused, :func:`~refvault.catalog.migration.check_current`), no key file is
        created, every method that writes raises :class:`StorageError`, and a SQLite database is
        opened so that the database refuses writes too (read-only media included).
        """
        self._closed = False
        self.read_only = read_only
        target = checked_url(url)
        self.manifest_keys = manifest_keys if manifest_keys is not None else default_keys(target, create=not read_only)
        try:
            if target.get_backend_name() == "sqlite":
                self._engine = sqlite_engine(target, read_only=read_only, pool_size=pool_size, overflow=max_overflow)
            else:
                self._engine = sa.create_engine(
                    target,
                    pool_size=pool_size,
                    max_overflow=max_overflow,
                    pool_recycle=3600,
                    pool_timeout=30,
                    connect_args={"connect_timeout": 10, "application_name": "refvault"},
                )
        except (ImportError, sa.exc.NoSuchModuleError):
            raise StorageError("a postgresql:// catalog needs psycopg 3: install refvault[postgres]") from None
        except sa.exc.SQLAlchemyError as exc:
            raise StorageError(f"cannot open the catalog: {type(exc).__name__}") from None
        count_pool_use(self._engine)
        self._postgres = self._engine.dialect.name == "postgresql"
        self._upsert_blob = upsert_blob(self._engine.dialect.name)
        self._insert_lineage = dialect_insert(self._engine.dialect.name)(lineage).on_conflict_do_nothing()
        self._audit_insert = audit_rows.insert_sql(self._engine.dialect.name)
        self._compiled: dict[int, Compiled] = {}
        self._compile_lock = threading.Lock()
        try:
            if read_only:
                with self._read() as conn:
                    check_current(conn)
            else:
                self._migrate()
        except sa.exc.SQLAlchemyError as exc:
            self._engine.dispose()
            raise StorageError(f"cannot open the catalog: {describe(exc)}") from None
        except BaseException:
            self._engine.dispose()
            raise

    # -- plumbing ----------------------------------------------------------------

    def _write(self) -> sa.Connection:
        if self.read_only:
            raise StorageError(errno.EROFS, "the catalog was opened read-only")
        return self._read().execution_options(refvault_write=True)

    def _read(self) -> sa.Connection:
        if self._closed:
            raise StorageError("the catalog is closed")
        return self._engine.connect()

    def _one(self, statement: sa.Select[Any], params: dict[str, Any]) -> Any:
        """The first row of a one-statement read (attribute access by column name), or None.

        Straight through the driver on a pooled connection: the statement is
        compiled once per catalog, no transaction is opened (PostgreSQL runs it
        in autocommit, so there is no BEGIN and no ROLLBACK), and a connection
        found dead is dropped and the read retried once on a fresh one.
        Statements here select plain columns (no type conversion on the way in or out).
        """
        compiled = self._compile(statement)
        arguments: Any = tuple(params[name] for name in compiled.names) if compiled.positional else params
        dialect = self._engine.dialect
        for attempt in (1, 2):
            if self._closed:
                raise StorageError("the catalog is closed")
            try:
                connection = self._engine.raw_connection()
            except dialect.loaded_dbapi.Error as exc:  # the database is down or refusing connections
                raise StorageError(f"the catalog failed: {describe(exc)}") from None
            try:
                raw: Any = connection.dbapi_connection
                if self._postgres:
                    raw.autocommit = True
                try:
                    cursor = raw.cursor()
                    try:
                        cursor.execute(compiled.sql, arguments)
                        row = cursor.fetchone()
                    finally:
                        cursor.close()
                finally:
                    if self._postgres and not raw.closed:
                        raw.autocommit = False
            except dialect.loaded_dbapi.Error as exc:
                if dialect.is_disconnect(exc, connection, None):
                    connection.invalidate(exc)
                    if attempt == 1:
                        continue
                raise StorageError(f"the catalog failed: {describe(exc)}") from None
            finally:
                connection.close()
            return None if row is None else compiled.row(*row)
        raise AssertionError("unreachable")  # pragma: no cover

    def _compile(self, statement: sa.Select[Any]) -> Compiled:
        compiled = self._compiled.get(id(statement))
        if compiled is None:
            with self._compile_lock:
                form = statement.compile(dialect=self._engine.dialect)
                names = tuple(form.positiontup or ()) if form.positional else ()
                row = namedtuple("Row", list(statement.selected_columns.keys()))  # type: ignore[misc]
                compiled = Compiled(str(form), form.positional, names, row)
                self._compiled[id(statement)] = compiled
        return compiled

    def _lock(self, conn: sa.Connection, keys: set[int]) -> None:
        """PostgreSQL: take the advisory locks ``keys`` until the transaction ends, in ascending order.

        SQLite needs nothing here: its write transactions already hold the one write lock.
        """
        if self._postgres and keys:
            conn.execute(LOCK_KEYS, {"keys": sorted(keys)})

    def _migrate(self) -> None:
        def once() -> None:
            with self._write() as conn, conn.begin():
                self._lock(conn, {MIGRATION_LOCK})  # concurrent openers of a fresh database queue here
                migrate(conn, self.manifest_keys)

        while_locked(once, sqlite=not self._postgres)

    def _manifest(self, row: Any) -> Manifest:
        """The authenticated manifest of a row: :class:`IntegrityError` (``kind="manifest"``) if it fails.

        Every manifest this catalog returns comes through here (see the module docstring).
        """
        manifest, fault = self._authenticated(row)
        if fault is None and manifest is not None and row.namespace != namespace_of(manifest.scope.tenant):
            fault = "its blob key is in another tenant's namespace"
        if fault is not None or manifest is None:
            raise manifest_error(row.artifact_id, fault or "its manifest row cannot be read")
        return manifest

    def _derivation(self, row: Any) -> Derivation:
        """The authenticated derivation of a row: :class:`IntegrityError` (``kind="manifest"``) if it fails."""
        derivation, _, fault = self._authenticated_derivation(row)
        if fault is not None or derivation is None:
            raise derivation_error(fault or "its derived-data record cannot be read")
        return derivation

    def _authenticated_derivation(self, row: Any) -> tuple[Derivation | None, BlobKey | None, str | None]:
        """The derivation a row states (None if unreadable), its source key as stored, and why its MAC fails it."""
        try:
            derivation = decode_derivation(row)
        except UNREADABLE:
            return None, None, "its derived-data record cannot be read"
        return derivation, derivation.source, self.manifest_keys.fault(derivation, row.mac)

    def _authenticated(self, row: Any) -> tuple[Manifest | None, str | None]:
        """The manifest a row states (None if it cannot be decoded) and why its MAC fails it (None if it does not)."""
        try:
            manifest = decode_manifest(row)
        except UNREADABLE:
            return None, "its manifest row cannot be read"
        return manifest, self.manifest_keys.fault(manifest, row.mac)

    # -- writing -----------------------------------------------------------------

    @translated
    def publish(self, items: Sequence[Publication], make_visible: Callable[[], None]) -> list[Manifest | RefvaultError]:
        results: list[Manifest | RefvaultError] = []
        audited: list[AuditEntry] = []
        blob_rows: list[dict[str, Any]] = []
        artifact_rows: list[dict[str, Any]] = []
        with self._write() as conn, conn.begin():
            self._lock(
                conn,
                {blob_lock(item.blob.key) for item in items}
                | {
                    idempotency_lock(item.manifest.scope, item.manifest.idempotency_key)
                    for item in items
                    if item.manifest.idempotency_key is not None
                },
            )
            make_visible()
            now = now_us()
            claimed: dict[tuple[Scope, str], Manifest] = {}  # idempotency keys taken by this batch
            for item in items:
                m = item.manifest
                if item.requires and not self._present(conn, m.scope.tenant, item.requires):
                    results.append(NotFound(item.requires[0]))
                    continue
                if m.idempotency_key is not None:
                    existing = claimed.get((m.scope, m.idempotency_key))
                    if existing is None:
                        row = conn.execute(
                            FIND_KEY, {**scope_params(m.scope), "idempotency_key": m.idempotency_key}
                        ).first()
                        existing = None if row is None else self._manifest(row)
                    if existing is not None:
                        try:
                            replayed = replay_or_conflict(existing, m)
                        except RefvaultError as exc:
                            results.append(exc)
                            continue
                        if replayed is not None:
                            results.append(replayed)
                            continue
                        released = replace(existing, idempotency_key=None)  # expired: the key is free
                        conn.execute(
                            RELEASE_KEY,
                            {"holder": existing.artifact_id, "new_mac": self.manifest_keys.sign(released)},
                        )
                    claimed[(m.scope, m.idempotency_key)] = m
                blob_rows.append(blob_row(item.blob, now))
                artifact_rows.append(artifact_row(m, self.manifest_keys.sign(m)))
                results.append(m)
                if item.audit is not None:
                    audited.append(item.audit._replace(artifact_id=m.artifact_id))
            if blob_rows:
                conn.execute(self._upsert_blob, blob_rows)
                conn.execute(INSERT_ARTIFACT, artifact_rows)
                edges = lineage_rows([r for r in results if isinstance(r, Manifest) and r.derived_from])
                if edges:  # the reverse index of derived_from commits with the derived artifact
                    conn.execute(self._insert_lineage, edges)
            if audited:  # the put's audit entry commits with its manifest
                self._append_audit(conn, audited)
        return results

    def _present(self, conn: sa.Connection, tenant: str, ids: Sequence[str]) -> bool:
        """Whether every one of ``ids`` is an artifact of ``tenant`` now; on PostgreSQL their rows stay locked until
        the transaction ends, so a concurrent delete waits for it (or it for the delete)."""
        query = sa.select(artifacts.c.artifact_id).where(artifacts.c.tenant == tenant, artifacts.c.artifact_id.in_(ids))
        found = set(conn.scalars(query.with_for_update() if self._postgres else query))
        return found >= set(ids)

    @translated
    def record_chunks(self, key: BlobKey, chunk_size: int, digests: bytes) -> None:
        """Best effort, and bounded: wait at most 250 ms for the write lock, then give up.

        A reader that derived chunk digests must not stall behind writers; if the
        lock is busy the digests are simply derived again by a later reader.
        """
        self._best_effort(
            RECORD_CHUNKS, {"ns": key.namespace, "dg": key.digest, "chunk_size": chunk_size, "chunk_digests": digests}
        )

    @translated
    def record_merkle(self, key: BlobKey, chunk_size: int, chunk_roots: bytes, root: bytes) -> None:
        """Best effort and bounded like :meth:`record_chunks`; roots already recorded are kept."""
        params = {"ns": key.namespace, "dg": key.digest, "size_of_chunks": chunk_size}
        self._best_effort(RECORD_MERKLE, {**params, "chunk_roots": chunk_roots, "merkle_root": root})

    def _best_effort(self, statement: sa.Executable, params: dict[str, Any]) -> None:
        """Run one small update, waiting at most 250 ms for the write lock."""
        if self._postgres:
            with self._write() as conn, conn.begin():
                conn.exec_driver_sql("SET LOCAL lock_timeout = '250ms'")
                conn.execute(statement, params)
            return
        with self._write() as conn:
            raw = conn.connection.dbapi_connection
            assert raw is not None
            raw.execute("PRAGMA busy_timeout=250")
            try:
                with conn.begin():
                    conn.execute(statement, params)
            finally:
                raw.execute("PRAGMA busy_timeout=30000")

    @translated
    def set_labels(
        self, scope: Scope, artifact_id: str, labels: frozenset[str], *, audit: AuditEntry | None = None
    ) -> Manifest | None:
        """In one write transaction (the row locked on PostgreSQL): authenticate the row, re-sign it with
        ``labels``, and append ``audit`` (if given)."""
        with self._write() as conn, conn.begin():
            row = conn.execute(
                FIND.with_for_update() if self._postgres else FIND, {**scope_params(scope), "artifact_id": artifact_id}
            ).first()
            if row is None:
                return None
            relabelled = replace(self._manifest(row), labels=frozenset(labels))
            conn.execute(
                artifacts.update()
                .where(artifacts.c.seq == row.seq)
                .values(labels=labels_column(relabelled.labels), mac=self.manifest_keys.sign(relabelled))
            )
            if audit is not None:
                self._append_audit(conn, [audit])
            return relabelled

    @translated
    def delete_expired(self, now: datetime) -> list[str]:
        held = sa.exists().where(holds.c.tenant == artifacts.c.tenant, holds.c.artifact_id == artifacts.c.artifact_id)
        due = sa.and_(artifacts.c.expires_us <= micros(now), ~held)
        with self._write() as conn, conn.begin():
            columns = (artifacts.c.artifact_id, artifacts.c.tenant, artifacts.c.user_name, artifacts.c.session)
            rows = conn.execute(sa.select(*columns, artifacts.c.digest, artifacts.c.size).where(due)).all()
            ids = [row.artifact_id for row in rows]
            if ids:
                conn.execute(artifacts.delete().where(artifacts.c.artifact_id.in_(ids)))
                for row in rows:
                    owner = Scope(row.tenant, row.user_name, row.session)
                    self._put_mark(conn, expired_mark(owner, row.artifact_id, now, row.digest, row.size))
            return ids

    @translated
    def collect(self, key: BlobKey, older_than: float, remove: Callable[[], bool]) -> bool:
        cutoff = now_us() - int(older_than * 1_000_000)
        where = sa.and_(blobs.c.namespace == key.namespace, blobs.c.digest == key.digest)
        with self._write() as conn, conn.begin():
            self._lock(conn, {blob_lock(key)})  # after this, a concurrent publish of the key is visible
            if conn.execute(sa.select(references(key))).scalar():
                return False
            touched = conn.execute(sa.select(blobs.c.touched_us).where(where)).scalar()
            if touched is not None and touched >= cutoff:
                return False
            if not remove():
                return False
            conn.execute(blobs.delete().where(where))
            conn.execute(
                derivations.delete().where(
                    derivations.c.namespace == key.namespace, derivations.c.source_digest == key.digest
                )
            )
            return True

    @translated
    def publish_derivation(
        self, derivation: Derivation, blob: BlobRecord, make_visible: Callable[[], None]
    ) -> Derivation | None:
        source = derivation.source
        params = {"ns": source.namespace, "dg": source.digest, "kind": derivation.kind}
        referenced = sa.exists().where(artifacts.c.namespace == source.namespace, artifacts.c.digest == source.digest)
        with self._write() as conn, conn.begin():
            self._lock(conn, {blob_lock(source), blob_lock(blob.key)})
            row = conn.execute(DERIVATION, params).first()
            if row is not None:
                return self._derivation(row)
            if not conn.execute(sa.select(referenced)).scalar():
                return None
            make_visible()
            now = now_us()
            conn.execute(self._upsert_blob, [blob_row(blob, now)])
            conn.execute(
                derivations.insert().values(
                    namespace=source.namespace,
                    source_digest=source.digest,
                    kind=derivation.kind,
                    derived_digest=derivation.digest,
                    derived_size=derivation.size,
                    info=to_json(derivation.info),
                    created_us=now,
                    mac=self.manifest_keys.sign(derivation),
                )
            )
        return derivation

    # -- reading -----------------------------------------------------------------

    @translated
    def find(self, scope: Scope, artifact_id: str) -> Manifest | None:
        row = self._one(FIND, {**scope_params(scope), "artifact_id": artifact_id})
        return None if row is None else self._manifest(row)

    @translated
    def find_by_key(self, scope: Scope, idempotency_key: str) -> Manifest | None:
        row = self._one(FIND_KEY, {**scope_params(scope), "idempotency_key": idempotency_key})
        return None if row is None else self._manifest(row)

    @translated
    def blob(self, key: BlobKey) -> BlobRecord | None:
        row = self._one(BLOB, {"ns": key.namespace, "dg": key.digest})
        return None if row is None else blob_record(row)

    @translated
    def is_referenced(self, key: BlobKey) -> bool:
        with self._read() as conn:
            return bool(conn.execute(sa.select(references(key))).scalar())

    def has_blob(self, key: BlobKey) -> bool:
        return self.blob(key) is not None

    @translated
    def derivation(self, source: BlobKey, kind: str) -> Derivation | None:
        row = self._one(DERIVATION, {"ns": source.namespace, "dg": source.digest, "kind": kind})
        return None if row is None else self._derivation(row)

    @translated
    def derivations(self) -> Iterator[Derivation]:
        with self._read() as conn:
            rows = conn.execute(
                sa.select(derivations).order_by(derivations.c.namespace, derivations.c.source_digest)
            ).all()
        return iter([self._derivation(row) for row in rows])

    @translated
    def audit_derivations(self) -> Iterator[tuple[Derivation | None, BlobKey | None, str | None]]:
        with self._read() as conn:
            rows = conn.execute(
                sa.select(derivations).order_by(derivations.c.namespace, derivations.c.source_digest)
            ).all()
        return iter([self._authenticated_derivation(row) for row in rows])

    @translated
    def in_scope(self, scope: Scope) -> list[Manifest]:
        with self._read() as conn:
            rows = conn.execute(
                sa.select(artifacts)
                .where(scope_match(scope))
                .order_by(artifacts.c.created_us.desc(), artifacts.c.seq.desc())
            ).all()
        return [self._manifest(row) for row in rows]

    @translated
    def manifests(self) -> Iterator[Manifest]:
        with self._read() as conn:
            rows = conn.execute(sa.select(artifacts).order_by(artifacts.c.seq)).all()
        return iter([self._manifest(row) for row in rows])

    @translated
    def audit(self) -> Iterator[ManifestCheck]:
        with self._read() as conn:
            rows = conn.execute(sa.select(artifacts).order_by(artifacts.c.seq)).all()
        return iter(
            [
                ManifestCheck(row.artifact_id, row.tenant, row.digest, row.namespace, *self._authenticated(row))
                for row in rows
            ]
        )

    # -- the manifest key ----------------------------------------------------------

    @translated
    def rotate_manifest_key(self) -> str:
        """Rotate under the write lock: a SQLite writer that commits after this signs with the new key.

        (Writers re-read a changed key file inside their own write transaction. On PostgreSQL,
        publications take no global lock: a process that has not yet seen the new file signs
        with the old key, which still verifies.)
        """
        with self._write() as conn, conn.begin():
            self._lock(conn, {MANIFEST_KEYS_LOCK})
            return self.manifest_keys.rotate()

    @translated
    def remac(self) -> tuple[int, int]:
        """Batches of rows, each in its own write transaction; a row changed meanwhile is left for the next run."""
        keys = self.manifest_keys
        keys.refresh()
        current = keys.current_id
        redone = failing = 0
        with self._write() as conn, conn.begin():  # derivations: one per record artifact's blob, few
            updates = []
            for row in conn.execute(sa.select(derivations)).all():
                derivation, _, fault = self._authenticated_derivation(row)
                if fault is not None or derivation is None:
                    failing += 1
                elif keys.key_id(row.mac) != current:
                    updates.append({**derivation_pk(row), "old_mac": row.mac, "new_mac": keys.sign(derivation)})
            if updates:
                conn.execute(SET_DERIVATION_MAC, updates)
                redone += len(updates)
            grants_redone, grants_failing = grant_rows.remac(conn, keys, current)
            redone, failing = redone + grants_redone, failing + grants_failing
        after = 0
        while True:
            with self._write() as conn, conn.begin():
                rows = conn.execute(
                    sa.select(artifacts).where(artifacts.c.seq > after).order_by(artifacts.c.seq).limit(REMAC_BATCH)
                ).all()
                if not rows:
                    return redone, failing
                after = rows[-1].seq
                updates = []
                for row in rows:
                    try:
                        manifest = self._manifest(row)
                    except IntegrityError:
                        failing += 1
                        continue
                    if keys.key_id(row.mac) != current:
                        updates.append({"row_seq": row.seq, "old_mac": row.mac, "new_mac": keys.sign(manifest)})
                if updates:
                    conn.execute(SET_MAC, updates)
                    redone += len(updates)

    @translated
    def drop_retired_manifest_keys(self) -> list[str] | None:
        keys = self.manifest_keys
        with self._write() as conn, conn.begin():
            self._lock(conn, {MANIFEST_KEYS_LOCK})
            keys.refresh()
            current = keys.current_id
            for table in (artifacts, derivations):
                stale = conn.execute(
                    sa.select(table).where(sa.not_(table.c.mac.startswith(f"v1:{current}:", autoescape=True)))
                )
                for row in stale:
                    check = self._authenticated if table is artifacts else self._authenticated_derivation
                    if check(row)[-1] is None:  # an authentic row still MAC'd with a retired key
                        return None
            if grant_rows.use_retired(conn, keys, current):
                return None
            return keys.drop_retired()

    @translated
    def blob_records(self) -> Iterator[BlobRecord]:
        with self._read() as conn:
            rows = conn.execute(sa.select(blobs).order_by(blobs.c.namespace, blobs.c.digest)).all()
        return iter([blob_record(row) for row in rows])

    @translated
    def unreferenced(self, older_than: float) -> list[BlobKey]:
        cutoff = now_us() - int(older_than * 1_000_000)
        referenced = sa.exists().where(artifacts.c.namespace == blobs.c.namespace, artifacts.c.digest == blobs.c.digest)
        derived = sa.exists().where(
            derivations.c.namespace == blobs.c.namespace, derivations.c.derived_digest == blobs.c.digest
        )
        with self._read() as conn:
            rows = conn.execute(
                sa.select(blobs.c.namespace, blobs.c.digest).where(blobs.c.touched_us < cutoff, ~referenced, ~derived)
            ).all()
        return [BlobKey(row.namespace, row.digest) for row in rows]

    # -- the service's own small records -------------------------------------------

    @translated
    def add_api_key(self, key: ApiKey) -> None:
        with self._write() as conn, conn.begin():
            conn.execute(api_keys.insert().values(**api_key_row(key)))

    @translated
    def find_api_key(self, key_id: str) -> ApiKey | None:
        row = self._one(FIND_API_KEY, {"key_id": key_id})
        return None if row is None else api_key_of(row)

    @translated
    def revoke_api_key(self, key_id: str, at: datetime) -> bool:
        with self._write() as conn, conn.begin():
            result = conn.execute(
                api_keys.update()
                .where(api_keys.c.key_id == key_id, api_keys.c.revoked_us.is_(None))
                .values(revoked_us=micros(at))
            )
            return bool(result.rowcount)

    @translated
    def api_keys(self, tenant: str | None = None) -> list[ApiKey]:
        query = sa.select(api_keys).order_by(api_keys.c.created_us, api_keys.c.key_id)
        if tenant is not None:
            query = query.where(api_keys.c.tenant == tenant)
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [api_key_of(row) for row in rows]

    @translated
    def get_setting(self, name: str) -> str | None:
        with self._read() as conn:
            value: str | None = conn.execute(sa.select(settings.c.value).where(settings.c.name == name)).scalar()
        return value

    @translated
    def swap_setting(self, name: str, expected: str | None, value: str) -> bool:
        """Compare-and-set in one statement: an UPDATE guarded by the old value, or an INSERT that yields."""
        row = {"name": name, "value": value, "updated_us": now_us()}
        with self._write() as conn, conn.begin():
            if expected is None:
                insert = dialect_insert(self._engine.dialect.name)
                # RETURNING, not rowcount: psycopg reports no row count for an INSERT through SQLAlchemy.
                created = insert(settings).values(**row).on_conflict_do_nothing().returning(settings.c.name)
                return conn.execute(created).first() is not None
            result = conn.execute(
                settings.update()
                .where(settings.c.name == name, settings.c.value == expected)
                .values(value=value, updated_us=row["updated_us"])
            )
            return bool(result.rowcount == 1)

    def close(self) -> None:
        self._closed = True
        self._engine.dispose()
