"""Opening the catalog's database: URLs, default key rings, SQLite's connection setup, compiled statements."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from refvault.catalog.macs import KEY_FILE, ManifestKeys
from refvault.errors import InvalidArgument


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
    return ManifestKeys.for_store(Path(target.database).parent / KEY_FILE, create=create)


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


def sqlite_read_only_uri(path: Path) -> str | None:
    """The URI a read-only catalog opens its SQLite file with: nothing is ever written or created.

    Where the directory can be written, a plain read-only open (``mode=ro``) may still create SQLite's
    ``-wal``/``-shm`` companions, so there the catalog opens the file as usual and refuses every write
    itself (``PRAGMA query_only``, :func:`sqlite_connect_read_only`); this returns None. On read-only
    media it is ``mode=ro``, and ``immutable=1`` when there is no ``-wal`` file (no writer has the
    database open and none can, so SQLite needs no ``-shm`` to read it).
    """
    if os.access(path.parent, os.W_OK):
        return None
    immutable = "" if os.path.lexists(f"{path}-wal") else "&immutable=1"
    return f"{path.absolute().as_uri()}?mode=ro{immutable}"


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
