"""HMAC key rings a store's processes share: the cursor keys of record queries, the keys of capability links.

One implementation for both (:class:`SharedRing`, named by what it signs):

* An embedded store (``vault.location``) keeps the ring in ``<name>.json`` (0600), re-read whenever the
  file's mtime changes.
* Any other store (PostgreSQL, memory) keeps it in the catalog setting ``<name>``: created with
  ``swap_setting(expected=None)`` so concurrent creators agree on one ring, rotated by compare-and-set
  (retried on a race), and re-read when the stored text changed, checked at most every ``recheck``
  seconds and at once when a token names an unknown key (``refresh=True``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from refvault.catalog.base import Catalog
from refvault.errors import InvalidArgument, StorageError
from refvault.keyring import KeyRing

__all__ = ["RingHost", "SharedRing"]


class RingHost(Protocol):
    """What a shared ring needs of a vault: where its store is, its catalog and its clock."""

    @property
    def location(self) -> Path | None: ...
    @property
    def catalog(self) -> Catalog: ...
    @property
    def clock(self) -> Callable[[], dt.datetime]: ...


class SharedRing:
    """A key ring every process of a vault's store shares (see the module docstring).

    ``name`` is the file stem and catalog setting (``cursor-keys``, ``link-keys``); ``what`` names the
    keys in error messages; ``grace`` is how long a retired key keeps verifying (``timedelta(0)``: a
    rotation kills every token signed before it).
    """

    recheck = 1.0  # seconds between checks of the catalog for a ring rotated elsewhere

    def __init__(self, vault: RingHost, name: str, *, what: str, grace: dt.timedelta = dt.timedelta(hours=24)) -> None:
        self.setting = name
        self.what = what
        self.grace = grace
        self._lock = threading.Lock()
        self._path = None if vault.location is None else vault.location / f"{name}.json"
        self._catalog = vault.catalog
        self._seen: int | None = None  # mtime of the file read last
        self._text: str | None = None  # the catalog setting read last
        self._checked = 0.0  # time.monotonic() of the last look at the catalog
        now = vault.clock()
        self._ring = self._load(now) if self._path is not None else self._load_shared(now)

    def _load(self, now: dt.datetime) -> KeyRing:
        assert self._path is not None
        ring = KeyRing.load_or_create(self._path, now=now, grace=self.grace, what=self.what)
        self._seen = self._path.stat().st_mtime_ns
        return ring

    def _load_shared(self, now: dt.datetime) -> KeyRing:
        for _ in range(5):
            text = self._catalog.get_setting(self.setting)
            if text is None:
                text = KeyRing.generate(now=now, grace=self.grace).to_json()
                if not self._catalog.swap_setting(self.setting, None, text):
                    continue  # another process created it first: read theirs
            return self._adopt(text)
        raise StorageError(f"the {self.what} ring keeps changing while it is created")

    def _adopt(self, text: str) -> KeyRing:
        try:
            ring = KeyRing.from_json(text)
        except InvalidArgument:
            raise StorageError(f"the {self.what} ring stored in the catalog is malformed") from None
        self._text = text
        self._checked = time.monotonic()
        return ring

    def ring(self, now: dt.datetime, *, refresh: bool = False) -> KeyRing:
        """The current ring; ``refresh`` looks for a rotation elsewhere now rather than within ``recheck`` s."""
        with self._lock:
            if self._path is not None:
                with contextlib.suppress(OSError):
                    if self._path.stat().st_mtime_ns != self._seen:  # rotated by another process
                        self._ring = self._load(now)
            elif refresh or time.monotonic() - self._checked >= self.recheck:
                text = self._catalog.get_setting(self.setting)
                self._checked = time.monotonic()
                if text is None:  # never created, or removed behind our back: start a ring everyone shares
                    self._ring = self._load_shared(now)
                elif text != self._text:
                    self._ring = self._adopt(text)
            return self._ring

    def rotate(self, now: dt.datetime) -> None:
        """Sign with a fresh key from now on; keys retired longer ago than ``grace`` are dropped."""
        with self._lock:
            if self._path is not None:
                self._ring = self._ring.rotate(now=now)
                self._ring.save(self._path, what=self.what)
                self._seen = self._path.stat().st_mtime_ns
                return
            for _ in range(20):
                current = self._catalog.get_setting(self.setting)
                if current is None:
                    self._load_shared(now)
                    continue
                rotated = self._adopt(current).rotate(now=now).to_json()
                if self._catalog.swap_setting(self.setting, current, rotated):
                    self._ring = self._adopt(rotated)
                    return
                # another process rotated meanwhile: rotate what it stored
            raise StorageError(f"the {self.what} ring keeps changing while it is rotated")
