"""The blob store protocol: a small surface every backend implements.

Contract (checked for every backend by ``tests/vault/test_conformance.py``):

* ``writer()`` returns a private writer; nothing it writes is referenced until
  ``publish(key)``. ``seal(key)`` makes the bytes durable (``fsync``) and
  runs outside any lock; ``publish(key)`` atomically makes them visible under
  ``key`` and makes that durable too. The vault calls ``publish`` inside the
  catalog's publish transaction, under its write lock, so garbage collection
  (which takes the same lock) never sees a visible blob whose manifest is
  still being committed. A crash at any point leaves at worst an unpublished
  temporary (removed by ``sweep_temp``) or an unreferenced blob (removed by
  ``gc`` after its grace period).
* ``publish`` replaces any object already at ``key``: the bytes hash to the
  same digest, so this heals a damaged copy and refreshes the object's age.
* ``open(key)`` returns a reader pinned to one immutable object version (or None
  if absent). Readers return raw bytes; the vault verifies them.
* Keys are hex digests only, so no caller string ever reaches a path.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from refvault.errors import InvalidArgument

__all__ = ["BlobKey", "BlobReader", "BlobStore", "BlobWriter"]

_HEX32 = re.compile(r"[0-9a-f]{32}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True, order=True)
class BlobKey:
    """Where a blob lives: the tenant's namespace (32 hex) and the SHA-256 of its bytes (64 hex)."""

    namespace: str
    digest: str

    def __post_init__(self) -> None:
        if _HEX32.fullmatch(self.namespace) is None or _HEX64.fullmatch(self.digest) is None:
            raise InvalidArgument("a blob key is 32 + 64 lowercase hex characters")


class BlobWriter(Protocol):
    """A private, not yet visible object being written."""

    def write(self, data: bytes | memoryview) -> None: ...

    def seal(self, key: BlobKey) -> None:
        """Make the written bytes durable while still unreferenced; ``key`` is where they will be published.

        A store may already write them under ``key`` here (the S3 store does, so
        large uploads happen outside the catalog transaction): until the
        catalog commits a reference, garbage collection spares the object for
        its grace period, and ``publish`` re-confirms it under the catalog lock.
        """

    def publish(self, key: BlobKey) -> None:
        """Atomically make the sealed bytes visible under ``key``, durably.

        Calling it again (a retried transaction) must confirm the object is
        still present, and raise :class:`~refvault.errors.StorageError` if not.
        """

    def abort(self) -> None:
        """Discard the bytes. Safe to call after ``publish`` or twice."""


class BlobReader(Protocol):
    """One immutable object version, opened once."""

    @property
    def size(self) -> int: ...

    def read(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes from ``offset`` (short only at the end of the object)."""

    def close(self) -> None: ...


class BlobStore(Protocol):
    """Durable, content-addressed byte storage."""

    def writer(self) -> BlobWriter: ...

    def open(self, key: BlobKey) -> BlobReader | None: ...

    def exists(self, key: BlobKey) -> bool: ...

    def age(self, key: BlobKey) -> float | None:
        """Seconds since the object was last published, or None if absent."""

    def delete(self, key: BlobKey) -> None:
        """Remove the object if present."""

    def keys(self) -> Iterator[BlobKey]:
        """Every published object."""

    def sweep_temp(self, older_than: float, *, dry_run: bool = False) -> int:
        """Remove unpublished temporaries older than ``older_than`` seconds; return how many."""

    def close(self) -> None: ...
