"""The bytes stored are the bytes hashed, whatever the caller does to its buffer during and after put."""

from __future__ import annotations

import hashlib
import threading
import time
from datetime import UTC

import pytest

from refvault import Scope, Vault
from refvault.blobs.base import BlobKey
from refvault.blobs.memory import MemoryBlobStore, _MemoryWriter
from refvault.catalog.base import CHUNK_SIZE
from refvault.catalog.memory import MemoryCatalog
from tests.conftest import payload

SCOPE = Scope("acme", "ana", "s1")


def test_mutating_the_input_buffer_after_put_changes_nothing(vault: Vault) -> None:
    data = bytearray(payload(3 * CHUNK_SIZE))
    d = vault.put(SCOPE, data)
    original = bytes(data)
    data[:] = b"\x00" * len(data)
    assert vault.read_bytes(SCOPE, d.artifact_id) == original
    assert d.created_at.tzinfo == UTC


class _ChangingSource(MemoryBlobStore):
    """A blob store whose background writes change the caller's buffer first: a chunk the
    capture has already hashed is then written after the memory under it changed."""

    def __init__(self, source: bytearray) -> None:
        super().__init__()
        self.source = source

    def writer(self) -> _MemoryWriter:
        store = self
        inner = super().writer()

        class Writer:
            def write(self, data: bytes | memoryview) -> None:
                if threading.current_thread().name == "refvault-writer":
                    time.sleep(0.05)  # let the capture hash this chunk first
                    store.source[:] = b"\x00" * len(store.source)
                inner.write(data)

            def seal(self, key: BlobKey) -> None:
                inner.seal(key)

            def publish(self, key: BlobKey) -> None:
                inner.publish(key)

            def abort(self) -> None:
                inner.abort()

        return Writer()  # type: ignore[return-value]


@pytest.mark.parametrize("wrap", [lambda b: b, lambda b: memoryview(b).toreadonly()], ids=["bytearray", "readonly"])
def test_bytes_written_are_the_bytes_hashed_even_if_the_buffer_changes(wrap: object) -> None:
    source = bytearray(payload(3 * CHUNK_SIZE, seed=21))
    vault = Vault(_ChangingSource(source), MemoryCatalog())
    d = vault.put(SCOPE, wrap(source))  # type: ignore[operator]
    # Which bytes a caller racing its own put gets stored is undefined; that they match
    # the content hash is not: without the per-chunk copy this read fails verification.
    stored = vault.read_bytes(SCOPE, d.artifact_id)
    assert d.content_hash == "sha256:" + hashlib.sha256(stored).hexdigest()
    assert vault.verify().ok
