"""Where a store is: the location ``Vault.open`` is given (or finds in the environment), and whether an
embedded store can be, or already is, there. Checked before anything is created."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from refvault.errors import InvalidArgument, StorageError

__all__ = ["check_store_location", "store_location"]


def store_location(location: str | os.PathLike[str] | None) -> str:
    """``location``, else ``$REFVAULT_CATALOG``, else ``$REFVAULT_STORE``, else ``.refvault``; never empty."""
    if location is not None:
        where = os.fspath(location)
    else:
        where = os.environ.get("REFVAULT_CATALOG") or os.environ.get("REFVAULT_STORE") or ".refvault"
    if not where or "\x00" in where:
        raise InvalidArgument("the store location must be a non-empty path or URL without NUL characters")
    return where


def check_store_location(root: Path, *, must_exist: bool) -> None:
    """Refuse a location that cannot hold an embedded store, before anything is created there.

    A file (or anything else that is not a directory) is an :class:`InvalidArgument`
    (``the store location PATH is a file, not a directory``); with ``must_exist``, a location
    without a ``catalog.db`` is a :class:`StorageError` (``ENOENT``, ``no refvault store at PATH``).
    The messages name the location as given, never anything read from it.
    """
    if os.path.lexists(root) and not root.is_dir():
        what = "a file, not a directory" if root.is_file() else "not a directory"
        raise InvalidArgument(f"the store location {root} is {what}")
    if must_exist and not (root / "catalog.db").is_file():
        raise StorageError(errno.ENOENT, f"no refvault store at {root}")
