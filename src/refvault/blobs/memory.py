"""In-memory blob store: the same contract as the filesystem store, without durability.

``objects`` is the live mapping of published blobs; tests corrupt it on
purpose to prove that the vault's verification catches every kind of damage.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from refvault.blobs.base import BlobKey

__all__ = ["MemoryBlobStore"]


class _MemoryReader:
    __slots__ = ("_data", "size")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self.size = len(data)

    def read(self, offset: int, length: int) -> bytes:
        return self._data[offset : offset + length]

    def close(self) -> None:
        pass


class _MemoryWriter:
    __slots__ = ("_buffer", "_store")

    def __init__(self, store: MemoryBlobStore) -> None:
        self._store = store
        self._buffer = bytearray()

    def write(self, data: bytes | memoryview) -> None:
        self._buffer += data

    def seal(self, key: BlobKey) -> None:
        pass

    def publish(self, key: BlobKey) -> None:
        with self._store._lock:
            self._store.objects[key] = bytes(self._buffer)
            self._store.published[key] = time.time()

    def abort(self) -> None:
        self._buffer = bytearray()


class MemoryBlobStore:
    """Blobs in a dict; lost when the process exits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.objects: dict[BlobKey, bytes] = {}
        self.published: dict[BlobKey, float] = {}

    def writer(self) -> _MemoryWriter:
        return _MemoryWriter(self)

    def open(self, key: BlobKey) -> _MemoryReader | None:
        data = self.objects.get(key)
        return None if data is None else _MemoryReader(data)

    def exists(self, key: BlobKey) -> bool:
        return key in self.objects

    def age(self, key: BlobKey) -> float | None:
        published = self.published.get(key)
        return None if published is None or key not in self.objects else time.time() - published

    def delete(self, key: BlobKey) -> None:
        with self._lock:
            self.objects.pop(key, None)
            self.published.pop(key, None)

    def keys(self) -> Iterator[BlobKey]:
        return iter(sorted(self.objects))

    def sweep_temp(self, older_than: float, *, dry_run: bool = False) -> int:
        return 0

    def close(self) -> None:
        pass
