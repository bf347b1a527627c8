"""SQL catalog over SQLAlchemy Core: SQLite now, PostgreSQL on the same schema.

SQLite runs in WAL mode with ``synchronous=FULL`` (a commit is durable when it
returns) and a 30 s busy timeout, so several processes can share one store.
Write transactions start with ``BEGIN IMMEDIATE``: they take the database's
write lock up front, which is the lock ``publish`` and ``collect`` rely on.
Reads use deferred transactions and never block on writers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from refvault.blobs.base import BlobKey
from refvault.catalog.base import BlobRecord, Manifest, Publication, replay_or_conflict
from refvault.catalog.schema import MIGRATIONS, artifacts, blobs, migrations
from refvault.errors import RefvaultError, StorageError
from refvault.model import Scope

__all__ = ["SqlCatalog"]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _us(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


def _from_us(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


def _now_us() -> int:
    return time.time_ns() // 1000


def _manifest(row: sa.Row[Any]) -> Manifest:
    return Manifest(
        artifact_id=row.artifact_id,
        scope=Scope(row.tenant, row.user_name, row.session),
        digest=row.digest,
        size=row.size,
        media_type=row.media_type,
        disclosure="sealed" if row.disclosure == "sealed" else "model",
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


def _scope_match(scope: Scope) -> sa.ColumnElement[bool]:
    return sa.and_(
        artifacts.c.tenant == scope.tenant,
        artifacts.c.user_name == scope.user,
        artifacts.c.session == scope.session,
    )


def _references(key: BlobKey) -> sa.Exists:
    return sa.exists().where(artifacts.c.namespace == key.namespace, artifacts.c.digest == key.digest)


class SqlCatalog:
    """A :class:`~refvault.catalog.Catalog` in a SQL database reached by a SQLAlchemy URL."""

    def __init__(self, url: str) -> None:
        self._engine = sa.create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        if self._engine.dialect.name != "sqlite":
            raise StorageError("SqlCatalog supports SQLite URLs in this release")
        sa.event.listen(self._engine, "connect", _sqlite_connect)
        sa.event.listen(self._engine, "begin", _sqlite_begin)
        try:
            self._migrate()
        except sa.exc.SQLAlchemyError as exc:
            raise StorageError(f"cannot open the catalog: {type(exc).__name__}") from None

    # -- plumbing ----------------------------------------------------------------

    def _write(self) -> sa.Connection:
        return self._engine.connect().execution_options(refvault_write=True)

    def _read(self) -> sa.Connection:
        return self._engine.connect()

    def _migrate(self) -> None:
        with self._write() as conn, conn.begin():
            migrations.create(conn, checkfirst=True)
            applied = set(conn.scalars(sa.select(migrations.c.version)))
            newest = max(version for version, _ in MIGRATIONS)
            if applied and max(applied) > newest:
                raise StorageError("the catalog was written by a newer refvault; upgrade refvault to open it")
            for version, migrate in MIGRATIONS:
                if version not in applied:
                    migrate(conn)
                    conn.execute(migrations.insert().values(version=version, applied_us=_now_us()))

    # -- writing -----------------------------------------------------------------

    def publish(self, items: Sequence[Publication], make_visible: Callable[[], None]) -> list[Manifest | RefvaultError]:
        results: list[Manifest | RefvaultError] = []
        with self._write() as conn, conn.begin():
            make_visible()
            now = _now_us()
            for item in items:
                try:
                    results.append(self._publish_one(conn, item, now))
                except RefvaultError as exc:
                    results.append(exc)
        return results

    def _publish_one(self, conn: sa.Connection, item: Publication, now: int) -> Manifest:
        m = item.manifest
        if m.idempotency_key is not None:
            row = conn.execute(
                sa.select(artifacts).where(_scope_match(m.scope), artifacts.c.idempotency_key == m.idempotency_key)
            ).first()
            if row is not None:
                return replay_or_conflict(_manifest(row), m)
        blob = item.blob
        values = {
            "namespace": blob.key.namespace,
            "digest": blob.key.digest,
            "size": blob.size,
            "chunk_size": blob.chunk_size,
            "chunk_digests": blob.chunk_digests,
            "inline_data": blob.inline,
            "touched_us": now,
        }
        upsert = sqlite.insert(blobs).values(**values)
        conn.execute(
            upsert.on_conflict_do_update(
                index_elements=[blobs.c.namespace, blobs.c.digest],
                set_={k: upsert.excluded[k] for k in values if k not in ("namespace", "digest")},
            )
        )
        conn.execute(
            artifacts.insert().values(
                artifact_id=m.artifact_id,
                tenant=m.scope.tenant,
                user_name=m.scope.user,
                session=m.scope.session,
                namespace=blob.key.namespace,
                digest=m.digest,
                size=m.size,
                media_type=m.media_type,
                disclosure=m.disclosure,
                filename=m.filename,
                tool_call_id=m.tool_call_id,
                run_id=m.run_id,
                schema_version=m.schema_version,
                created_us=_us(m.created_at),
                expires_us=None if m.expires_at is None else _us(m.expires_at),
                source_version=json.dumps(m.source_version, sort_keys=True, separators=(",", ":")),
                completeness=json.dumps(m.completeness, sort_keys=True, separators=(",", ":")),
                idempotency_key=m.idempotency_key,
            )
        )
        return m

    def delete(self, scope: Scope, artifact_id: str) -> bool:
        with self._write() as conn, conn.begin():
            result = conn.execute(artifacts.delete().where(artifacts.c.artifact_id == artifact_id, _scope_match(scope)))
            return bool(result.rowcount)

    def delete_expired(self, now: datetime) -> list[str]:
        with self._write() as conn, conn.begin():
            ids = list(conn.scalars(sa.select(artifacts.c.artifact_id).where(artifacts.c.expires_us <= _us(now))))
            if ids:
                conn.execute(artifacts.delete().where(artifacts.c.artifact_id.in_(ids)))
            return ids

    def collect(self, key: BlobKey, older_than: float, remove: Callable[[], bool]) -> bool:
        cutoff = _now_us() - int(older_than * 1_000_000)
        where = sa.and_(blobs.c.namespace == key.namespace, blobs.c.digest == key.digest)
        with self._write() as conn, conn.begin():
            if conn.execute(sa.select(_references(key))).scalar():
                return False
            touched = conn.execute(sa.select(blobs.c.touched_us).where(where)).scalar()
            if touched is not None and touched >= cutoff:
                return False
            if not remove():
                return False
            conn.execute(blobs.delete().where(where))
            return True

    # -- reading -----------------------------------------------------------------

    def find(self, scope: Scope, artifact_id: str) -> Manifest | None:
        with self._read() as conn:
            row = conn.execute(
                sa.select(artifacts).where(artifacts.c.artifact_id == artifact_id, _scope_match(scope))
            ).first()
        return None if row is None else _manifest(row)

    def blob(self, key: BlobKey) -> BlobRecord | None:
        with self._read() as conn:
            row = conn.execute(
                sa.select(blobs).where(blobs.c.namespace == key.namespace, blobs.c.digest == key.digest)
            ).first()
        return None if row is None else _blob_record(row)

    def has_blob(self, key: BlobKey) -> bool:
        return self.blob(key) is not None

    def in_scope(self, scope: Scope) -> list[Manifest]:
        with self._read() as conn:
            rows = conn.execute(
                sa.select(artifacts)
                .where(_scope_match(scope))
                .order_by(artifacts.c.created_us.desc(), artifacts.c.seq.desc())
            ).all()
        return [_manifest(row) for row in rows]

    def manifests(self) -> Iterator[Manifest]:
        with self._read() as conn:
            rows = conn.execute(sa.select(artifacts).order_by(artifacts.c.seq)).all()
        return iter([_manifest(row) for row in rows])

    def blob_records(self) -> Iterator[BlobRecord]:
        with self._read() as conn:
            rows = conn.execute(sa.select(blobs).order_by(blobs.c.namespace, blobs.c.digest)).all()
        return iter([_blob_record(row) for row in rows])

    def unreferenced(self, older_than: float) -> list[BlobKey]:
        cutoff = _now_us() - int(older_than * 1_000_000)
        referenced = sa.exists().where(artifacts.c.namespace == blobs.c.namespace, artifacts.c.digest == blobs.c.digest)
        with self._read() as conn:
            rows = conn.execute(
                sa.select(blobs.c.namespace, blobs.c.digest).where(blobs.c.touched_us < cutoff, ~referenced)
            ).all()
        return [BlobKey(row.namespace, row.digest) for row in rows]

    def close(self) -> None:
        self._engine.dispose()


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
    mode = "IMMEDIATE" if conn.get_execution_options().get("refvault_write") else "DEFERRED"
    conn.exec_driver_sql(f"BEGIN {mode}")
