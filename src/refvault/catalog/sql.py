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

**Manifest MACs** (:mod:`refvault.catalog.macs`). Every artifact row is written with
its MAC (``_artifact_row``) and checked where it is decoded (:meth:`SqlCatalog._manifest`,
the one place rows become manifests), together with its blob namespace (the tenant's).
The key ring is found when the catalog opens: beside a SQLite file
(``manifest-keys.json``, created if absent), from the environment for PostgreSQL
(refused if absent). Migration 4 adds the ``mac`` column; the open that adds it MACs
every existing row in the same transaction (trust on upgrade). Only an open that adds
the column does so: a row whose MAC is later blanked, or a migration record later
removed while the column stays, is never re-adopted.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import threading
import time
from collections import namedtuple
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from refvault.blobs.base import BlobKey
from refvault.catalog.base import (
    ApiKey,
    BlobRecord,
    Derivation,
    Manifest,
    ManifestCheck,
    Publication,
    replay_or_conflict,
)
from refvault.catalog.macs import KEY_FILE, ManifestKeys, derivation_error, manifest_error, micros
from refvault.catalog.schema import (
    MAC_MIGRATION,
    MIGRATIONS,
    api_keys,
    artifacts,
    blobs,
    derivations,
    migrations,
    settings,
)
from refvault.errors import IntegrityError, InvalidArgument, RefvaultError, StorageError
from refvault.ids import namespace_of
from refvault.model import Scope

__all__ = ["POOL_OVERFLOW", "POOL_SIZE", "SqlCatalog"]

# Connections kept per process, and opened beyond that for one use each. Opening one
# costs far more than a query (PRAGMAs on SQLite, a new backend on PostgreSQL), so the
# pool covers the threads that use the catalog at once; connections open lazily.
POOL_SIZE = 24
POOL_OVERFLOW = 24


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_us = micros


def _from_us(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


def _now_us() -> int:
    return time.time_ns() // 1000


def _decode(row: Any) -> Manifest:
    """The manifest a row states (not yet authenticated: see :meth:`SqlCatalog._manifest`)."""
    return Manifest(
        artifact_id=row.artifact_id,
        scope=Scope(row.tenant, row.user_name, row.session),
        digest=row.digest,
        size=row.size,
        media_type=row.media_type,
        disclosure="model" if row.disclosure == "model" else "sealed",  # anything unexpected fails closed
        created_at=_from_us(row.created_us),
        expires_at=None if row.expires_us is None else _from_us(row.expires_us),
        filename=row.filename,
        tool_call_id=row.tool_call_id,
        run_id=row.run_id,
        schema_version=row.schema_version,
        source_version=json.loads(row.source_version),
        completeness=json.loads(row.completeness),
        idempotency_key=row.idempotency_key,
    )


# Statements are built once: SQLAlchemy then reuses their compiled form, which keeps
# the write lock's hold time per put to the database work itself.
_IN_SCOPE = sa.and_(
    artifacts.c.tenant == sa.bindparam("tenant"),
    artifacts.c.user_name == sa.bindparam("user_name"),
    artifacts.c.session == sa.bindparam("session"),
)
_FIND = sa.select(artifacts).where(artifacts.c.artifact_id == sa.bindparam("artifact_id"), _IN_SCOPE)
_FIND_KEY = sa.select(artifacts).where(_IN_SCOPE, artifacts.c.idempotency_key == sa.bindparam("idempotency_key"))
_BLOB = sa.select(blobs).where(blobs.c.namespace == sa.bindparam("ns"), blobs.c.digest == sa.bindparam("dg"))
_FIND_API_KEY = sa.select(api_keys).where(api_keys.c.key_id == sa.bindparam("key_id"))


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A statement compiled for one dialect, for :meth:`SqlCatalog._one`."""

    sql: str
    positional: bool  # parameters by position (``names`` gives the order) or by name
    names: tuple[str, ...]
    row: Callable[..., Any]  # makes a row with attribute access from the driver's tuple


def _upsert_blob(insert: Any) -> sa.Executable:
    """A re-published blob has the same bytes: refresh its age, heal inline bytes, keep derived chunk digests."""
    statement = insert(blobs)
    upsert: sa.Executable = statement.on_conflict_do_update(
        index_elements=[blobs.c.namespace, blobs.c.digest],
        set_={"touched_us": statement.excluded.touched_us, "inline_data": statement.excluded.inline_data},
    )
    return upsert


_UPSERT_BLOB = {"sqlite": _upsert_blob(sqlite.insert), "postgresql": _upsert_blob(postgresql.insert)}
_INSERT_ARTIFACT = artifacts.insert()
_RELEASE_KEY = (
    artifacts.update()
    .where(artifacts.c.artifact_id == sa.bindparam("holder"))
    .values(idempotency_key=None, mac=sa.bindparam("new_mac"))
)
_SET_MAC = (
    artifacts.update()
    .where(artifacts.c.seq == sa.bindparam("row_seq"), artifacts.c.mac == sa.bindparam("old_mac"))
    .values(mac=sa.bindparam("new_mac"))
)
_ADOPT = artifacts.update().where(artifacts.c.seq == sa.bindparam("row_seq")).values(mac=sa.bindparam("new_mac"))
_DERIVATION_ROW = sa.and_(
    derivations.c.namespace == sa.bindparam("pk_ns"),
    derivations.c.source_digest == sa.bindparam("pk_dg"),
    derivations.c.kind == sa.bindparam("pk_kind"),
)
_ADOPT_DERIVATION = (
    derivations.update().where(_DERIVATION_ROW, derivations.c.mac.is_(None)).values(mac=sa.bindparam("new_mac"))
)
_SET_DERIVATION_MAC = (
    derivations.update()
    .where(_DERIVATION_ROW, derivations.c.mac == sa.bindparam("old_mac"))
    .values(mac=sa.bindparam("new_mac"))
)
# The fixed advisory lock of manifest key changes (rotation, dropping retired keys) on PostgreSQL.
_MANIFEST_KEYS_LOCK = 0x7266766D6B657973  # "rfvmkeys"
_REMAC_BATCH = 500
_RECORD_CHUNKS = (
    blobs.update()
    .where(blobs.c.namespace == sa.bindparam("ns"), blobs.c.digest == sa.bindparam("dg"))
    .values(chunk_size=sa.bindparam("chunk_size"), chunk_digests=sa.bindparam("chunk_digests"))
)


def _scope_params(scope: Scope) -> dict[str, str]:
    return {"tenant": scope.tenant, "user_name": scope.user, "session": scope.session}


def _scope_match(scope: Scope) -> sa.ColumnElement[bool]:
    return sa.and_(
        artifacts.c.tenant == scope.tenant,
        artifacts.c.user_name == scope.user,
        artifacts.c.session == scope.session,
    )


def _references(key: BlobKey) -> sa.ColumnElement[bool]:
    by_artifact = sa.exists().where(artifacts.c.namespace == key.namespace, artifacts.c.digest == key.digest)
    by_derivation = sa.exists().where(
        derivations.c.namespace == key.namespace, derivations.c.derived_digest == key.digest
    )
    return sa.or_(by_artifact, by_derivation)


_DERIVATION = sa.select(derivations).where(
    derivations.c.namespace == sa.bindparam("ns"),
    derivations.c.source_digest == sa.bindparam("dg"),
    derivations.c.kind == sa.bindparam("kind"),
)


def _decode_derivation(row: Any) -> Derivation:
    """The derivation a row states (not yet authenticated: see :meth:`SqlCatalog._derivation`)."""
    return Derivation(
        source=BlobKey(row.namespace, row.source_digest),
        kind=row.kind,
        digest=row.derived_digest,
        size=row.derived_size,
        info=json.loads(row.info),
    )


F = TypeVar("F", bound=Callable[..., Any])


def _translated(method: F) -> F:
    """Turn database failures into :class:`StorageError` (no SQL, no parameters: see :func:`_describe`)."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except sa.exc.SQLAlchemyError as exc:
            raise StorageError(f"the catalog failed: {_describe(exc)}") from None
        except UnicodeEncodeError:  # the driver's message would quote the offending character
            raise InvalidArgument("text stored in the catalog must be valid Unicode (no lone surrogates)") from None

    return cast(F, wrapper)


# PostgreSQL error classes whose first message line names only the failure, never a value:
# connection problems, constraint names, transaction rollbacks, resources, locks, shutdowns.
_PLAIN_SQLSTATE_CLASSES = frozenset({"08", "23", "40", "53", "54", "55", "57", "58"})


def _describe(exc: BaseException) -> str:
    """The error class and, where it cannot carry a value, the first line of its message."""
    reason = getattr(exc, "orig", None) or exc
    name = type(reason).__name__
    sqlstate = getattr(reason, "sqlstate", None)
    if isinstance(sqlstate, str):  # PostgreSQL: some messages quote values ("invalid input syntax ...: \"x\"")
        if sqlstate[:2] not in _PLAIN_SQLSTATE_CLASSES:
            return f"{name} (SQLSTATE {sqlstate})"
        return f"{name} (SQLSTATE {sqlstate}): {_first_line(reason)}"
    if type(reason).__module__.startswith("psycopg") and name not in {"OperationalError", "InterfaceError"}:
        return name  # raised by the driver itself (e.g. adapting a value): its text may quote the value
    return f"{name}: {_first_line(reason)}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).splitlines()
    return text[0][:200] if text else ""


# -- PostgreSQL advisory locks ---------------------------------------------------------

# The fixed key of the migration lock (an arbitrary constant; "refvault" in ASCII).
_MIGRATION_LOCK = 0x7265667661756C74
_LOCK_KEYS = sa.text("SELECT pg_advisory_xact_lock(k) FROM unnest(CAST(:keys AS bigint[])) AS k")


def _lock_id(*parts: str) -> int:
    """A signed 64-bit advisory lock id for a tuple of strings (a collision only serialises two writers)."""
    raw = hashlib.sha256(json.dumps(parts).encode("ascii")).digest()  # json.dumps escapes to ASCII
    return int.from_bytes(raw[:8], "big", signed=True)


def _blob_lock(key: BlobKey) -> int:
    return _lock_id("blob", key.namespace, key.digest)


def _idempotency_lock(scope: Scope, key: str) -> int:
    return _lock_id("idempotency", scope.tenant, scope.user, scope.session, key)


class SqlCatalog:
    """A :class:`~refvault.catalog.Catalog` in a SQL database reached by a SQLAlchemy URL."""

    @classmethod
    def for_file(cls, path: Path, *, manifest_keys: ManifestKeys | None = None) -> SqlCatalog:
        """The embedded catalog: a SQLite file, created private (0600), never through a symlink.

        Its manifest key ring is ``manifest-keys.json`` in the same directory unless ``manifest_keys`` is given.
        """
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StorageError(exc.errno or 0, f"cannot open the catalog file: {exc.strerror}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise StorageError("the catalog path is not a regular file")
        finally:
            os.close(fd)
        return cls(sa.engine.URL.create("sqlite", database=str(path)), manifest_keys=manifest_keys)

    def __init__(
        self,
        url: str | sa.engine.URL,
        *,
        pool_size: int = POOL_SIZE,
        max_overflow: int = POOL_OVERFLOW,
        manifest_keys: ManifestKeys | None = None,
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
        """
        self._closed = False
        target = _checked_url(url)
        self.manifest_keys = manifest_keys if manifest_keys is not None else _default_keys(target)
        try:
            if target.get_backend_name() == "sqlite":
                self._engine = sa.create_engine(
                    target,
                    pool_size=pool_size,
                    max_overflow=max_overflow,
                    connect_args={"check_same_thread": False, "timeout": 30},
                )
                sa.event.listen(self._engine, "connect", _sqlite_connect)
                sa.event.listen(self._engine, "begin", _sqlite_begin)
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
        self._postgres = self._engine.dialect.name == "postgresql"
        self._upsert_blob = _UPSERT_BLOB[self._engine.dialect.name]
        self._compiled: dict[int, _Compiled] = {}
        self._compile_lock = threading.Lock()
        try:
            self._migrate()
        except sa.exc.SQLAlchemyError as exc:
            self._engine.dispose()
            raise StorageError(f"cannot open the catalog: {_describe(exc)}") from None
        except BaseException:
            self._engine.dispose()
            raise

    # -- plumbing ----------------------------------------------------------------

    def _write(self) -> sa.Connection:
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
            connection = self._engine.raw_connection()
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
                raise StorageError(f"the catalog failed: {_describe(exc)}") from None
            finally:
                connection.close()
            return None if row is None else compiled.row(*row)
        raise AssertionError("unreachable")  # pragma: no cover

    def _compile(self, statement: sa.Select[Any]) -> _Compiled:
        compiled = self._compiled.get(id(statement))
        if compiled is None:
            with self._compile_lock:
                form = statement.compile(dialect=self._engine.dialect)
                names = tuple(form.positiontup or ()) if form.positional else ()
                row = namedtuple("Row", list(statement.selected_columns.keys()))  # type: ignore[misc]
                compiled = _Compiled(str(form), form.positional, names, row)
                self._compiled[id(statement)] = compiled
        return compiled

    def _lock(self, conn: sa.Connection, keys: set[int]) -> None:
        """PostgreSQL: take the advisory locks ``keys`` until the transaction ends, in ascending order.

        SQLite needs nothing here: its write transactions already hold the one write lock.
        """
        if self._postgres and keys:
            conn.execute(_LOCK_KEYS, {"keys": sorted(keys)})

    def _migrate(self) -> None:
        with self._write() as conn, conn.begin():
            self._lock(conn, {_MIGRATION_LOCK})  # concurrent openers of a fresh database queue here
            migrations.create(conn, checkfirst=True)
            applied = set(conn.scalars(sa.select(migrations.c.version)))
            newest = max(version for version, _ in MIGRATIONS)
            if applied and max(applied) > newest:
                raise StorageError("the catalog was written by a newer refvault; upgrade refvault to open it")
            # Trust on upgrade: rows are adopted only by the open that adds the MAC columns.
            adopt = set() if MAC_MIGRATION in applied else _without_mac_column(conn)
            for version, migrate in MIGRATIONS:
                if version not in applied:
                    migrate(conn)
                    conn.execute(migrations.insert().values(version=version, applied_us=_now_us()))
            if artifacts.name in adopt:
                self._adopt(conn)
            if derivations.name in adopt:
                self._adopt_derivations(conn)

    def _adopt(self, conn: sa.Connection) -> None:
        """MAC every row of a catalog written before manifest MACs, as it stands (in the migration transaction).

        A row that cannot be decoded, or whose blob namespace is not its tenant's, is left without a MAC (it fails).
        """
        after = 0
        while True:
            rows = conn.execute(
                sa.select(artifacts).where(artifacts.c.seq > after).order_by(artifacts.c.seq).limit(_REMAC_BATCH)
            ).all()
            if not rows:
                return
            after = rows[-1].seq
            updates = []
            for row in rows:
                try:
                    manifest = _decode(row)
                except _UNREADABLE:
                    continue
                if row.namespace == manifest.key.namespace:
                    updates.append({"row_seq": row.seq, "new_mac": self.manifest_keys.sign(manifest)})
            if updates:
                conn.execute(_ADOPT, updates)

    def _adopt_derivations(self, conn: sa.Connection) -> None:
        """MAC every derivation of a catalog written before MACs (one per record artifact's blob: few)."""
        updates = []
        for row in conn.execute(sa.select(derivations)).all():
            try:
                derivation = _decode_derivation(row)
            except _UNREADABLE:
                continue
            updates.append({**_derivation_pk(row), "new_mac": self.manifest_keys.sign(derivation)})
        if updates:
            conn.execute(_ADOPT_DERIVATION, updates)

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
            derivation = _decode_derivation(row)
        except _UNREADABLE:
            return None, None, "its derived-data record cannot be read"
        return derivation, derivation.source, self.manifest_keys.fault(derivation, row.mac)

    def _authenticated(self, row: Any) -> tuple[Manifest | None, str | None]:
        """The manifest a row states (None if it cannot be decoded) and why its MAC fails it (None if it does not)."""
        try:
            manifest = _decode(row)
        except _UNREADABLE:
            return None, "its manifest row cannot be read"
        return manifest, self.manifest_keys.fault(manifest, row.mac)

    # -- writing -----------------------------------------------------------------

    @_translated
    def publish(self, items: Sequence[Publication], make_visible: Callable[[], None]) -> list[Manifest | RefvaultError]:
        results: list[Manifest | RefvaultError] = []
        blob_rows: list[dict[str, Any]] = []
        artifact_rows: list[dict[str, Any]] = []
        with self._write() as conn, conn.begin():
            self._lock(
                conn,
                {_blob_lock(item.blob.key) for item in items}
                | {
                    _idempotency_lock(item.manifest.scope, item.manifest.idempotency_key)
                    for item in items
                    if item.manifest.idempotency_key is not None
                },
            )
            make_visible()
            now = _now_us()
            claimed: dict[tuple[Scope, str], Manifest] = {}  # idempotency keys taken by this batch
            for item in items:
                m = item.manifest
                if m.idempotency_key is not None:
                    existing = claimed.get((m.scope, m.idempotency_key))
                    if existing is None:
                        row = conn.execute(
                            _FIND_KEY, {**_scope_params(m.scope), "idempotency_key": m.idempotency_key}
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
                            _RELEASE_KEY,
                            {"holder": existing.artifact_id, "new_mac": self.manifest_keys.sign(released)},
                        )
                    claimed[(m.scope, m.idempotency_key)] = m
                blob_rows.append(_blob_row(item.blob, now))
                artifact_rows.append(_artifact_row(m, self.manifest_keys.sign(m)))
                results.append(m)
            if blob_rows:
                conn.execute(self._upsert_blob, blob_rows)
                conn.execute(_INSERT_ARTIFACT, artifact_rows)
        return results

    @_translated
    def record_chunks(self, key: BlobKey, chunk_size: int, digests: bytes) -> None:
        """Best effort, and bounded: wait at most 250 ms for the write lock, then give up.

        A reader that derived chunk digests must not stall behind writers; if the
        lock is busy the digests are simply derived again by a later reader.
        """
        params = {"ns": key.namespace, "dg": key.digest, "chunk_size": chunk_size, "chunk_digests": digests}
        if self._postgres:
            with self._write() as conn, conn.begin():
                conn.exec_driver_sql("SET LOCAL lock_timeout = '250ms'")
                conn.execute(_RECORD_CHUNKS, params)
            return
        with self._write() as conn:
            raw = conn.connection.dbapi_connection
            assert raw is not None
            raw.execute("PRAGMA busy_timeout=250")
            try:
                with conn.begin():
                    conn.execute(_RECORD_CHUNKS, params)
            finally:
                raw.execute("PRAGMA busy_timeout=30000")

    @_translated
    def delete(self, scope: Scope, artifact_id: str) -> bool:
        with self._write() as conn, conn.begin():
            result = conn.execute(artifacts.delete().where(artifacts.c.artifact_id == artifact_id, _scope_match(scope)))
            return bool(result.rowcount)

    @_translated
    def delete_expired(self, now: datetime) -> list[str]:
        with self._write() as conn, conn.begin():
            ids = list(conn.scalars(sa.select(artifacts.c.artifact_id).where(artifacts.c.expires_us <= _us(now))))
            if ids:
                conn.execute(artifacts.delete().where(artifacts.c.artifact_id.in_(ids)))
            return ids

    @_translated
    def collect(self, key: BlobKey, older_than: float, remove: Callable[[], bool]) -> bool:
        cutoff = _now_us() - int(older_than * 1_000_000)
        where = sa.and_(blobs.c.namespace == key.namespace, blobs.c.digest == key.digest)
        with self._write() as conn, conn.begin():
            self._lock(conn, {_blob_lock(key)})  # after this, a concurrent publish of the key is visible
            if conn.execute(sa.select(_references(key))).scalar():
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

    @_translated
    def publish_derivation(
        self, derivation: Derivation, blob: BlobRecord, make_visible: Callable[[], None]
    ) -> Derivation | None:
        source = derivation.source
        params = {"ns": source.namespace, "dg": source.digest, "kind": derivation.kind}
        referenced = sa.exists().where(artifacts.c.namespace == source.namespace, artifacts.c.digest == source.digest)
        with self._write() as conn, conn.begin():
            self._lock(conn, {_blob_lock(source), _blob_lock(blob.key)})
            row = conn.execute(_DERIVATION, params).first()
            if row is not None:
                return self._derivation(row)
            if not conn.execute(sa.select(referenced)).scalar():
                return None
            make_visible()
            now = _now_us()
            conn.execute(self._upsert_blob, [_blob_row(blob, now)])
            conn.execute(
                derivations.insert().values(
                    namespace=source.namespace,
                    source_digest=source.digest,
                    kind=derivation.kind,
                    derived_digest=derivation.digest,
                    derived_size=derivation.size,
                    info=_json(derivation.info),
                    created_us=now,
                    mac=self.manifest_keys.sign(derivation),
                )
            )
        return derivation

    # -- reading -----------------------------------------------------------------

    @_translated
    def find(self, scope: Scope, artifact_id: str) -> Manifest | None:
        row = self._one(_FIND, {**_scope_params(scope), "artifact_id": artifact_id})
        return None if row is None else self._manifest(row)

    @_translated
    def blob(self, key: BlobKey) -> BlobRecord | None:
        row = self._one(_BLOB, {"ns": key.namespace, "dg": key.digest})
        return None if row is None else _blob_record(row)

    @_translated
    def is_referenced(self, key: BlobKey) -> bool:
        with self._read() as conn:
            return bool(conn.execute(sa.select(_references(key))).scalar())

    def has_blob(self, key: BlobKey) -> bool:
        return self.blob(key) is not None

    @_translated
    def derivation(self, source: BlobKey, kind: str) -> Derivation | None:
        row = self._one(_DERIVATION, {"ns": source.namespace, "dg": source.digest, "kind": kind})
        return None if row is None else self._derivation(row)

    @_translated
    def derivations(self) -> Iterator[Derivation]:
        with self._read() as conn:
            rows = conn.execute(
                sa.select(derivations).order_by(derivations.c.namespace, derivations.c.source_digest)
            ).all()
        return iter([self._derivation(row) for row in rows])

    @_translated
    def audit_derivations(self) -> Iterator[tuple[Derivation | None, BlobKey | None, str | None]]:
        with self._read() as conn:
            rows = conn.execute(
                sa.select(derivations).order_by(derivations.c.namespace, derivations.c.source_digest)
            ).all()
        return iter([self._authenticated_derivation(row) for row in rows])

    @_translated
    def in_scope(self, scope: Scope) -> list[Manifest]:
        with self._read() as conn:
            rows = conn.execute(
                sa.select(artifacts)
                .where(_scope_match(scope))
                .order_by(artifacts.c.created_us.desc(), artifacts.c.seq.desc())
            ).all()
        return [self._manifest(row) for row in rows]

    @_translated
    def manifests(self) -> Iterator[Manifest]:
        with self._read() as conn:
            rows = conn.execute(sa.select(artifacts).order_by(artifacts.c.seq)).all()
        return iter([self._manifest(row) for row in rows])

    @_translated
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

    @_translated
    def rotate_manifest_key(self) -> str:
        """Rotate under the write lock: a SQLite writer that commits after this signs with the new key.

        (Writers re-read a changed key file inside their own write transaction. On PostgreSQL,
        publications take no global lock: a process that has not yet seen the new file signs
        with the old key, which still verifies.)
        """
        with self._write() as conn, conn.begin():
            self._lock(conn, {_MANIFEST_KEYS_LOCK})
            return self.manifest_keys.rotate()

    @_translated
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
                    updates.append({**_derivation_pk(row), "old_mac": row.mac, "new_mac": keys.sign(derivation)})
            if updates:
                conn.execute(_SET_DERIVATION_MAC, updates)
                redone += len(updates)
        after = 0
        while True:
            with self._write() as conn, conn.begin():
                rows = conn.execute(
                    sa.select(artifacts).where(artifacts.c.seq > after).order_by(artifacts.c.seq).limit(_REMAC_BATCH)
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
                    conn.execute(_SET_MAC, updates)
                    redone += len(updates)

    @_translated
    def drop_retired_manifest_keys(self) -> list[str] | None:
        keys = self.manifest_keys
        with self._write() as conn, conn.begin():
            self._lock(conn, {_MANIFEST_KEYS_LOCK})
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
            return keys.drop_retired()

    @_translated
    def blob_records(self) -> Iterator[BlobRecord]:
        with self._read() as conn:
            rows = conn.execute(sa.select(blobs).order_by(blobs.c.namespace, blobs.c.digest)).all()
        return iter([_blob_record(row) for row in rows])

    @_translated
    def unreferenced(self, older_than: float) -> list[BlobKey]:
        cutoff = _now_us() - int(older_than * 1_000_000)
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

    @_translated
    def add_api_key(self, key: ApiKey) -> None:
        with self._write() as conn, conn.begin():
            conn.execute(api_keys.insert().values(**_api_key_row(key)))

    @_translated
    def find_api_key(self, key_id: str) -> ApiKey | None:
        row = self._one(_FIND_API_KEY, {"key_id": key_id})
        return None if row is None else _api_key(row)

    @_translated
    def revoke_api_key(self, key_id: str, at: datetime) -> bool:
        with self._write() as conn, conn.begin():
            result = conn.execute(
                api_keys.update()
                .where(api_keys.c.key_id == key_id, api_keys.c.revoked_us.is_(None))
                .values(revoked_us=_us(at))
            )
            return bool(result.rowcount)

    @_translated
    def api_keys(self, tenant: str | None = None) -> list[ApiKey]:
        query = sa.select(api_keys).order_by(api_keys.c.created_us, api_keys.c.key_id)
        if tenant is not None:
            query = query.where(api_keys.c.tenant == tenant)
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [_api_key(row) for row in rows]

    @_translated
    def get_setting(self, name: str) -> str | None:
        with self._read() as conn:
            value: str | None = conn.execute(sa.select(settings.c.value).where(settings.c.name == name)).scalar()
        return value

    @_translated
    def swap_setting(self, name: str, expected: str | None, value: str) -> bool:
        """Compare-and-set in one statement: an UPDATE guarded by the old value, or an INSERT that yields."""
        row = {"name": name, "value": value, "updated_us": _now_us()}
        with self._write() as conn, conn.begin():
            if expected is None:
                dialect: Any = postgresql if self._postgres else sqlite
                # RETURNING, not rowcount: psycopg reports no row count for an INSERT through SQLAlchemy.
                created = dialect.insert(settings).values(**row).on_conflict_do_nothing().returning(settings.c.name)
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


# What decoding a row edited behind refvault's back may raise (bad JSON, bad names, absurd times).
_UNREADABLE = (ValueError, TypeError, OverflowError, RecursionError, KeyError)


def _without_mac_column(conn: sa.Connection) -> set[str]:
    """The tables (of artifacts and derivations) that exist and have no ``mac`` column yet."""
    inspector = sa.inspect(conn)
    missing = set()
    for table in (artifacts, derivations):
        # a fresh catalog: its tables are created with the column, and hold no rows to adopt
        columns = inspector.get_columns(table.name) if inspector.has_table(table.name) else [{"name": "mac"}]
        if not any(column["name"] == "mac" for column in columns):
            missing.add(table.name)
    return missing


def _derivation_pk(row: Any) -> dict[str, Any]:
    return {"pk_ns": row.namespace, "pk_dg": row.source_digest, "pk_kind": row.kind}


def _default_keys(target: sa.engine.URL) -> ManifestKeys:
    if target.get_backend_name() != "sqlite":
        return ManifestKeys.from_environment()
    if not target.database or target.database == ":memory:":
        return ManifestKeys.ephemeral()
    return ManifestKeys.for_store(Path(target.database).parent / KEY_FILE)


def _checked_url(url: str | sa.engine.URL) -> sa.engine.URL:
    """A SQLite or PostgreSQL URL; bare ``postgresql://``/``postgres://`` means psycopg 3."""
    try:
        target = sa.make_url(url)
    except (sa.exc.ArgumentError, ValueError, TypeError):
        raise InvalidArgument("the catalog URL is not a valid database URL") from None
    if target.drivername in ("postgresql", "postgres"):
        target = target.set(drivername="postgresql+psycopg")
    if target.drivername not in ("sqlite", "sqlite+pysqlite", "postgresql+psycopg"):
        raise InvalidArgument("SqlCatalog supports sqlite:/// and postgresql:// (psycopg 3) URLs")
    return target


def _api_key_row(key: ApiKey) -> dict[str, Any]:
    return {
        "key_id": key.key_id,
        "secret_hash": key.secret_hash,
        "tenant": key.tenant,
        "user_name": key.user,
        "sessions": None if key.sessions is None else _json(sorted(key.sessions)),
        "created_us": _us(key.created_at),
        "revoked_us": None if key.revoked_at is None else _us(key.revoked_at),
        "label": key.label,
    }


def _api_key(row: sa.Row[Any]) -> ApiKey:
    return ApiKey(
        key_id=row.key_id,
        secret_hash=row.secret_hash,
        tenant=row.tenant,
        user=row.user_name,
        sessions=None if row.sessions is None else frozenset(json.loads(row.sessions)),
        created_at=_from_us(row.created_us),
        revoked_at=None if row.revoked_us is None else _from_us(row.revoked_us),
        label=row.label,
    )


def _blob_row(blob: BlobRecord, now: int) -> dict[str, Any]:
    return {
        "namespace": blob.key.namespace,
        "digest": blob.key.digest,
        "size": blob.size,
        "chunk_size": blob.chunk_size,
        "chunk_digests": blob.chunk_digests,
        "inline_data": blob.inline,
        "touched_us": now,
    }


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _artifact_row(m: Manifest, mac: str) -> dict[str, Any]:
    return {
        "mac": mac,
        "artifact_id": m.artifact_id,
        "tenant": m.scope.tenant,
        "user_name": m.scope.user,
        "session": m.scope.session,
        "namespace": m.key.namespace,
        "digest": m.digest,
        "size": m.size,
        "media_type": m.media_type,
        "disclosure": m.disclosure,
        "filename": m.filename,
        "tool_call_id": m.tool_call_id,
        "run_id": m.run_id,
        "schema_version": m.schema_version,
        "created_us": _us(m.created_at),
        "expires_us": None if m.expires_at is None else _us(m.expires_at),
        "source_version": _json(m.source_version),
        "completeness": _json(m.completeness),
        "idempotency_key": m.idempotency_key,
    }


def _blob_record(row: sa.Row[Any]) -> BlobRecord:
    return BlobRecord(
        key=BlobKey(row.namespace, row.digest),
        size=row.size,
        chunk_size=row.chunk_size,
        chunk_digests=bytes(row.chunk_digests),
        inline=None if row.inline_data is None else bytes(row.inline_data),
    )


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # refvault issues BEGIN itself (see _sqlite_begin)
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def _sqlite_begin(conn: sa.Connection) -> None:
    # Writes take the write lock up front. Reads are single statements, each of which
    # SQLite runs against one consistent snapshot, so they need no BEGIN of their own.
    if conn.get_execution_options().get("refvault_write"):
        conn.exec_driver_sql("BEGIN IMMEDIATE")
