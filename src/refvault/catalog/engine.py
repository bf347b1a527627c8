"""Opening the catalog's database: URLs, default key rings, SQLite's connection setup, compiled statements."""

from __future__ import annotations

import os
import random
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from refvault import observe
from refvault.catalog.macs import KEY_FILE, ManifestKeys
from refvault.errors import InvalidArgument, StorageError


@dataclass(frozen=True, slots=True)
class Compiled:
    """A statement compiled for one dialect, for :meth:`SqlCatalog._one`."""

    sql: str
    positional: bool  # parameters by position (``names`` gives the order) or by name
    names: tuple[str, ...]
    row: Callable[..., Any]  # makes a row with attribute access from the driver's tuple


def default_keys(target: sa.engine.URL, *, create: bool = True) -> ManifestKeys:
    """The manifest key ring a catalog at ``target`` uses by default; unless ``create``, none is written."""
    if target.get_backend_name() != "sqlite":
        return ManifestKeys.from_environment()
    if not target.database or target.database == ":memory:":
        return ManifestKeys.ephemeral()
    database = Path(target.database)
    return ManifestKeys.for_store(database.parent / KEY_FILE, create=create, signed=lambda: signed_rows(database))


def signed_rows(database: Path) -> tuple[int, int]:
    """How many artifact and derivation rows of the SQLite catalog ``database`` carry a MAC; writes nothing.

    ``(0, 0)`` for an empty file or a catalog written before manifest MACs (no ``mac`` column). Opened
    as a read-only catalog is (:func:`sqlite_read_only_uri`, else ``query_only``). Asked only when the
    key file is missing, to refuse replacing a lost key (:meth:`ManifestKeys.for_store`).
    """
    import sqlite3

    from refvault.catalog.schema import artifacts, derivations

    uri = sqlite_read_only_uri(database)
    counts = []
    try:
        conn = sqlite3.connect(uri, uri=True) if uri is not None else sqlite3.connect(database)
        try:
            conn.execute("PRAGMA query_only=ON")
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            for table in (artifacts.name, derivations.name):
                columns = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")} if table in tables else ()
                query = f"SELECT count(*) FROM {table} WHERE mac IS NOT NULL AND mac <> ''"
                counts.append(conn.execute(query).fetchone()[0] if "mac" in columns else 0)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read the catalog to check its signed rows: {type(exc).__name__}") from None
    return counts[0], counts[1]


def checked_url(url: str | sa.engine.URL) -> sa.engine.URL:
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


def sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # refvault issues BEGIN itself (see sqlite_begin)
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def sqlite_engine(target: sa.engine.URL, *, read_only: bool, pool_size: int, overflow: int) -> sa.Engine:
    """The engine of a SQLite catalog: WAL, ``synchronous=FULL``, a 30 s busy timeout, writes begun IMMEDIATE."""
    options: dict[str, Any] = {}
    uri = sqlite_read_only_uri(Path(target.database or "")) if read_only and target.database else None
    if uri is not None:
        options["creator"] = lambda: sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=30)
    engine = sa.create_engine(
        target,
        pool_size=pool_size,
        max_overflow=overflow,
        connect_args={"check_same_thread": False, "timeout": 30},
        **options,
    )
    sa.event.listen(engine, "connect", sqlite_connect_read_only if read_only else sqlite_connect)
    sa.event.listen(engine, "begin", sqlite_begin)
    return engine


def while_locked(open_once: Callable[[], None], *, sqlite: bool, patience: float = 60.0) -> None:
    """Run ``open_once`` (a catalog's first connection and migration); on SQLite, again while the file is locked.

    SQLite's busy timeout does not cover every contended open: where waiting could deadlock (two
    connections upgrading to write at once, such as two processes turning a fresh file to WAL) or while
    another process recovers the WAL of a writer that was killed, it answers "database is locked" at once.
    Such an open is retried, with a growing jittered pause, for up to ``patience`` seconds; any other
    error, and every PostgreSQL error, propagates at once.
    """
    deadline = time.monotonic() + patience
    pause = 0.005
    while True:
        try:
            open_once()
            return
        except sa.exc.OperationalError as exc:
            code = getattr(exc.orig, "sqlite_errorcode", None)
            busy = code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
            if not sqlite or not busy or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause * random.uniform(0.5, 1.5))
        pause = min(pause * 2, 0.5)


def sqlite_read_only_uri(path: Path) -> str | None:
    """The URI a read-only catalog opens its SQLite file with (None: open it as usual, with ``query_only``).

    Where the directory can be written, a plain read-only open (``mode=ro``) may still create SQLite's
    ``-wal``/``-shm`` companions, so there the catalog opens the file as usual and refuses every write
    itself (``PRAGMA query_only``, :func:`sqlite_connect_read_only`); this returns None. Where it cannot be
    written it is ``mode=ro``, which still sees a writer's changes (through the writer's ``-shm``). Only on a
    read-only file system with no ``-wal`` file is it also ``immutable=1`` (SQLite then needs no ``-shm`` and
    reads the file as a fixed snapshot): no writer has the database open, and none on this side of the mount
    can. A directory merely not writable by this user is never opened immutable: its owner may be writing.
    """
    if os.access(path.parent, os.W_OK):
        return None
    frozen = _read_only_file_system(path.parent) and not os.path.lexists(f"{path}-wal")
    return f"{path.absolute().as_uri()}?mode=ro{'&immutable=1' if frozen else ''}"


def _read_only_file_system(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def sqlite_connect_read_only(dbapi_connection: Any, _record: Any) -> None:
    """A read-only catalog's connection: SQLite itself refuses every write (``query_only``)."""
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA query_only=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def sqlite_begin(conn: sa.Connection) -> None:
    # Writes take the write lock up front. Reads are single statements, each of which
    # SQLite runs against one consistent snapshot, so they need no BEGIN of their own.
    if conn.get_execution_options().get("refvault_write"):
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def count_pool_use(engine: sa.Engine) -> None:
    """Report each connection taken from and given back to ``engine``'s pool (:mod:`refvault.observe`: a gauge)."""
    sa.event.listen(engine, "checkout", _checked_out)
    sa.event.listen(engine, "checkin", _checked_in)


def _checked_out(*_: Any) -> None:
    observe.event("catalog_connection", "checkout")


def _checked_in(*_: Any) -> None:
    observe.event("catalog_connection", "checkin")
