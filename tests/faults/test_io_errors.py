"""I/O errors on read and write, injected around the real filesystem and S3 blob stores.

The kernel's device-mapper ``error`` target is not available everywhere the suite runs, so the faults
come from :class:`FaultyBlobStore`, a wrapper that raises ``OSError(EIO)`` (what a failing disk gives
``pread``/``write``/``fsync``) from chosen calls of the real store it wraps, or hands back damaged
bytes. Whatever fails: the caller gets a :class:`StorageError` (or :class:`IntegrityError` for damaged
bytes), never wrong bytes; a failed put publishes nothing; and the same vault works again once the
fault is gone.
"""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from refvault import Scope, Vault
from refvault.blobs.base import BlobKey, BlobReader, BlobStore, BlobWriter
from refvault.blobs.filesystem import FilesystemBlobStore
from refvault.catalog.sql import SqlCatalog
from refvault.errors import IntegrityError, StorageError

SCOPE = Scope("acme", "ana", "s1")
MIB = 1 << 20


@dataclass
class Faults:
    """Which calls fail: a set of names among write, seal, publish, open, read, and ``flip`` to damage reads."""

    failing: set[str] = field(default_factory=set)
    flip: bool = False
    hits: int = 0

    def check(self, name: str) -> None:
        if name in self.failing:
            self.hits += 1
            raise OSError(errno.EIO, os.strerror(errno.EIO))


class _Writer:
    def __init__(self, inner: BlobWriter, faults: Faults) -> None:
        self._inner, self._faults = inner, faults

    def write(self, data: bytes | memoryview) -> None:
        self._faults.check("write")
        self._inner.write(data)

    def seal(self, key: BlobKey) -> None:
        self._faults.check("seal")
        self._inner.seal(key)

    def publish(self, key: BlobKey) -> None:
        self._faults.check("publish")
        self._inner.publish(key)

    def abort(self) -> None:
        self._inner.abort()


class _Reader:
    def __init__(self, inner: BlobReader, faults: Faults) -> None:
        self._inner, self._faults = inner, faults

    @property
    def size(self) -> int:
        return self._inner.size

    def read(self, offset: int, length: int) -> bytes:
        self._faults.check("read")
        data = self._inner.read(offset, length)
        if self._faults.flip and data:
            self._faults.hits += 1
            return bytes([data[0] ^ 1]) + data[1:]
        return data

    def close(self) -> None:
        self._inner.close()


class FaultyBlobStore:
    """A real blob store, with the calls named in ``faults`` failing as a disk would."""

    def __init__(self, inner: BlobStore, faults: Faults) -> None:
        self.inner, self.faults = inner, faults

    def writer(self) -> BlobWriter:
        return _Writer(self.inner.writer(), self.faults)

    def open(self, key: BlobKey) -> BlobReader | None:
        self.faults.check("open")
        reader = self.inner.open(key)
        return None if reader is None else _Reader(reader, self.faults)

    def exists(self, key: BlobKey) -> bool:
        return self.inner.exists(key)

    def age(self, key: BlobKey) -> float | None:
        return self.inner.age(key)

    def delete(self, key: BlobKey) -> None:
        self.inner.delete(key)

    def keys(self) -> Iterator[BlobKey]:
        return self.inner.keys()

    def sweep_temp(self, older_than: float, *, dry_run: bool = False) -> int:
        return self.inner.sweep_temp(older_than, dry_run=dry_run)

    def close(self) -> None:
        self.inner.close()


@pytest.fixture(params=["filesystem", "s3"])
def faulty(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Vault, Faults]]:
    faults = Faults()
    inner: BlobStore
    if request.param == "filesystem":
        inner = FilesystemBlobStore(tmp_path / "blobs")
    else:
        from refvault.blobs.s3 import S3BlobStore

        s3 = request.getfixturevalue("s3_server")
        inner = S3BlobStore(s3.bucket, f"t-{secrets.token_hex(6)}", endpoint=s3.url)
    with Vault(FaultyBlobStore(inner, faults), SqlCatalog(f"sqlite:///{tmp_path / 'catalog.db'}")) as vault:
        yield vault, faults


def _check(vault: Vault, acknowledged: dict[str, bytes]) -> None:
    report = vault.verify()
    assert report.problems == []
    assert report.artifacts == len(acknowledged)
    assert {d.artifact_id for d in vault.list(SCOPE)} == set(acknowledged)
    for artifact_id, data in acknowledged.items():
        assert vault.read_bytes(SCOPE, artifact_id) == data


@pytest.mark.parametrize("failing", ["write", "seal", "publish"])
def test_an_io_error_while_writing_fails_the_put_and_publishes_nothing(
    faulty: tuple[Vault, Faults], failing: str
) -> None:
    vault, faults = faulty
    kept = os.urandom(200_000)
    acknowledged = {vault.put(SCOPE, kept).artifact_id: kept}
    faults.failing = {failing}
    for size in (200_000, 3 * MIB):  # a small blob, and one written by the background writer
        with pytest.raises(StorageError) as caught:
            vault.put(SCOPE, os.urandom(size))
        assert "Input/output error" in str(caught.value), str(caught.value)
    assert faults.hits >= 2
    faults.failing = set()
    _check(vault, acknowledged)
    again = os.urandom(300_000)
    acknowledged[vault.put(SCOPE, again).artifact_id] = again  # the fault gone, puts land again
    _check(vault, acknowledged)


@pytest.mark.parametrize("failing", ["open", "read"])
def test_an_io_error_while_reading_is_a_storage_error_never_bytes(faulty: tuple[Vault, Faults], failing: str) -> None:
    vault, faults = faulty
    data = os.urandom(3 * MIB)
    artifact_id = vault.put(SCOPE, data).artifact_id
    faults.failing = {failing}
    reads = [
        lambda: vault.read_bytes(SCOPE, artifact_id),
        lambda: vault.read_range(SCOPE, artifact_id, MIB - 10, 20),
        lambda: b"".join(vault.stream(SCOPE, artifact_id)),
    ]
    for read in reads:
        with pytest.raises(StorageError) as caught:
            read()
        assert "Input/output error" in str(caught.value), str(caught.value)
    faults.failing = set()
    assert vault.read_bytes(SCOPE, artifact_id) == data  # nothing was damaged or marked damaged


def test_damaged_bytes_from_the_store_are_an_integrity_error_never_returned(faulty: tuple[Vault, Faults]) -> None:
    vault, faults = faulty
    data = os.urandom(3 * MIB)
    artifact_id = vault.put(SCOPE, data).artifact_id
    faults.flip = True
    for read in (
        lambda: vault.read_bytes(SCOPE, artifact_id),
        lambda: vault.read_range(SCOPE, artifact_id, 5, 20),
        lambda: b"".join(vault.stream(SCOPE, artifact_id)),
    ):
        with pytest.raises(IntegrityError):
            read()
    assert faults.hits >= 3
    faults.flip = False
    assert vault.read_bytes(SCOPE, artifact_id) == data
