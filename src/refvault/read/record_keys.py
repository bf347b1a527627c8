"""The cursor key ring of a vault's record queries, shared by every process of its store.

Part of :mod:`refvault.read.records`; cursors themselves are :mod:`refvault.read.cursors`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from refvault.errors import InvalidArgument, InvalidCursor, StorageError
from refvault.read import cursors

if TYPE_CHECKING:
    from refvault.vault.core import Vault

__all__ = ["Keys", "checked_cursor", "keys_of", "ring_of", "rotate_cursor_keys"]


class Keys:
    """A vault's cursor key ring, shared by every process of its store; re-read when another process rotates it.

    * An embedded store (``vault.location``) keeps the ring in ``cursor-keys.json``,
      re-read whenever the file's mtime changes.
    * Any other store (PostgreSQL, memory) keeps it in the catalog setting
      ``cursor-keys``: created with ``swap_setting(expected=None)`` so concurrent
      creators agree on one ring, rotated by compare-and-set (retried on a race),
      and re-read when the stored text changed, checked at most every
      ``recheck`` seconds and at once when a cursor names an unknown key.
    """

    SETTING = "cursor-keys"
    recheck = 1.0  # seconds between checks of the catalog for a ring rotated elsewhere

    def __init__(self, vault: Vault) -> None:
        self._lock = threading.Lock()
        self._path = None if vault.location is None else vault.location / "cursor-keys.json"
        self._catalog = vault.catalog
        self._seen: int | None = None  # mtime of the file read last
        self._text: str | None = None  # the catalog setting read last
        self._checked = 0.0  # time.monotonic() of the last look at the catalog
        now = vault.clock()
        self._ring = self._load(now) if self._path is not None else self._load_shared(now)

    def _load(self, now: dt.datetime) -> cursors.KeyRing:
        assert self._path is not None
        ring = cursors.KeyRing.load_or_create(self._path, now=now)
        self._seen = self._path.stat().st_mtime_ns
        return ring

    def _load_shared(self, now: dt.datetime) -> cursors.KeyRing:
        for _ in range(5):
            text = self._catalog.get_setting(self.SETTING)
            if text is None:
                text = cursors.KeyRing.generate(now=now).to_json()
                if not self._catalog.swap_setting(self.SETTING, None, text):
                    continue  # another process created it first: read theirs
            return self._adopt(text)
        raise StorageError("the cursor key ring keeps changing while it is created")

    def _adopt(self, text: str) -> cursors.KeyRing:
        try:
            ring = cursors.KeyRing.from_json(text)
        except InvalidArgument:
            raise StorageError("the cursor key ring stored in the catalog is malformed") from None
        self._text = text
        self._checked = time.monotonic()
        return ring

    def ring(self, now: dt.datetime, *, refresh: bool = False) -> cursors.KeyRing:
        """The current ring; ``refresh`` looks for a rotation elsewhere now rather than within ``recheck`` s."""
        with self._lock:
            if self._path is not None:
                with contextlib.suppress(OSError):
                    if self._path.stat().st_mtime_ns != self._seen:  # rotated by another process
                        self._ring = self._load(now)
            elif refresh or time.monotonic() - self._checked >= self.recheck:
                text = self._catalog.get_setting(self.SETTING)
                self._checked = time.monotonic()
                if text is None:  # never created, or removed behind our back: start a ring everyone shares
                    self._ring = self._load_shared(now)
                elif text != self._text:
                    self._ring = self._adopt(text)
            return self._ring

    def rotate(self, now: dt.datetime) -> None:
        with self._lock:
            if self._path is not None:
                self._ring = self._ring.rotate(now=now)
                self._ring.save(self._path)
                self._seen = self._path.stat().st_mtime_ns
                return
            for _ in range(20):
                current = self._catalog.get_setting(self.SETTING)
                if current is None:
                    self._load_shared(now)
                    continue
                rotated = self._adopt(current).rotate(now=now).to_json()
                if self._catalog.swap_setting(self.SETTING, current, rotated):
                    self._ring = self._adopt(rotated)
                    return
                # another process rotated meanwhile: rotate what it stored
            raise StorageError("the cursor key ring keeps changing while it is rotated")


def keys_of(vault: Vault) -> Keys:
    return vault.attachment("refvault.read.cursor_keys", lambda: Keys(vault))


def ring_of(vault: Vault) -> cursors.KeyRing:
    return keys_of(vault).ring(vault.clock())


def checked_cursor(vault: Vault, cursor: object, binding: Mapping[str, str]) -> dict[str, Any]:
    """The position a cursor carries; a key unknown here is looked for once more in the shared ring."""
    try:
        return cursors.check(ring_of(vault), cursor, now=vault.clock(), binding=binding)
    except InvalidCursor as exc:
        if exc.reason != "unknown_key":
            raise
    ring = keys_of(vault).ring(vault.clock(), refresh=True)  # signed after a rotation this process has not seen
    return cursors.check(ring, cursor, now=vault.clock(), binding=binding)


def rotate_cursor_keys(vault: Vault) -> None:
    """Start signing cursors with a fresh key; cursors signed with the old one keep working for the grace period.

    The new ring replaces ``cursor-keys.json`` of an embedded store, or the
    catalog's ``cursor-keys`` setting otherwise; other processes pick it up on
    their next query (within about a second, at once for a cursor it signed).
    """
    keys_of(vault).rotate(vault.clock())
