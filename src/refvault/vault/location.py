"""Where a store is: the location ``Vault.open`` is given (or finds in the environment), and whether an
embedded store can be, or already is, there. Checked before anything is created.

Invariant: an open that may create a store never creates one among someone's files. A location is
usable when it is absent, an empty directory, or a directory that holds a store (``catalog.db``) or
only what a store being created puts there (:data:`STORE_ENTRIES`, e.g. after an interrupted first open).
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from refvault.errors import InvalidArgument, StorageError

__all__ = ["STORE_ENTRIES", "check_store_location", "store_location"]

STORE_ENTRIES = frozenset(
    {
        "blobs",
        "tmp",
        "catalog.db",
        "catalog.db-wal",
        "catalog.db-shm",
        "catalog.db-journal",
        "manifest-keys.json",
        "cursor-keys.json",
    }
)
"""The names an embedded store creates in its directory (besides the key files' temporaries)."""
_KEY_TEMPORARY = re.compile(r"\.(?:manifest|cursor)-keys\.json\.[0-9a-f]+\.tmp")


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
    without a ``catalog.db`` is a :class:`StorageError` (``ENOENT``, ``no refvault store at PATH``);
    without it, an existing directory that holds no ``catalog.db`` but other files is an
    :class:`InvalidArgument` (``... is a non-empty directory that holds no refvault store ...``).
    The messages name the location as given, never anything read from it.
    """
    if os.path.lexists(root) and not root.is_dir():
        what = "a file, not a directory" if root.is_file() else "not a directory"
        raise InvalidArgument(f"the store location {root} is {what}")
    if (root / "catalog.db").is_file():
        return
    if must_exist:
        raise StorageError(errno.ENOENT, f"no refvault store at {root}")
    if root.is_dir() and not _only_store_entries(root):
        raise InvalidArgument(
            f"the store location {root} is a non-empty directory that holds no refvault store;"
            " choose an empty or new directory"
        )


def _only_store_entries(root: Path) -> bool:
    """Whether every entry of the directory ``root`` is one a store creates (true when it is empty)."""
    try:
        with os.scandir(root) as entries:
            return all(e.name in STORE_ENTRIES or _KEY_TEMPORARY.fullmatch(e.name) for e in entries)
    except OSError as exc:
        raise StorageError(exc.errno or 0, f"cannot list the store location {root}: {exc.strerror}") from None
