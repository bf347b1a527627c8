"""Database failures as :class:`~refvault.errors.StorageError`: the error class, never the SQL or its parameters."""

from __future__ import annotations

import errno
import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast

import sqlalchemy as sa

from refvault.errors import InvalidArgument, StorageError

F = TypeVar("F", bound=Callable[..., Any])


def translated(method: F) -> F:
    """Turn database failures into :class:`StorageError` (no SQL, no parameters: see :func:`describe`)."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except UnicodeEncodeError:  # the driver's message would quote the offending character
            raise InvalidArgument("text stored in the catalog must be valid Unicode (no lone surrogates)") from None
        except Exception as exc:
            if not isinstance(exc, sa.exc.SQLAlchemyError) and not _driver_error(exc):
                raise
            if _disk_full(exc):
                full = f"the catalog failed: no space left on device ({describe(exc)})"
                raise StorageError(errno.ENOSPC, full) from None
            raise StorageError(f"the catalog failed: {describe(exc)}") from None

    return cast(F, wrapper)


# PostgreSQL error classes whose first message line names only the failure, never a value:
# connection problems, constraint names, transaction rollbacks, resources, locks, shutdowns.
_PLAIN_SQLSTATE_CLASSES = frozenset({"08", "23", "40", "53", "54", "55", "57", "58"})


_SQLITE_FULL = 13  # SQLITE_FULL: "database or disk is full"
_DISK_FULL_SQLSTATE = "53100"  # PostgreSQL's disk_full


def _driver_error(exc: Exception) -> bool:
    """Whether ``exc`` is a database driver's own error that reached us unwrapped (e.g. opening a pooled connection)."""
    import sqlite3

    if isinstance(exc, sqlite3.Error):
        return True
    psycopg = sys.modules.get("psycopg")  # imported only where a PostgreSQL catalog is in use
    return psycopg is not None and isinstance(exc, psycopg.Error)


def _disk_full(exc: Exception) -> bool:
    """Whether the database refused a write for want of space (SQLite's SQLITE_FULL, PostgreSQL's disk_full)."""
    reason = getattr(exc, "orig", None) or exc
    if getattr(reason, "sqlite_errorcode", None) == _SQLITE_FULL:
        return True
    return getattr(reason, "sqlstate", None) == _DISK_FULL_SQLSTATE


def describe(exc: BaseException) -> str:
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
