"""Every kind of damage to stored bytes is caught before a bad byte is returned."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from refvault import Scope, Vault
from refvault.catalog.base import CHUNK_SIZE
from refvault.errors import IntegrityError, StorageError
from refvault.ids import namespace_of
from tests.conftest import Tamper, payload

BIG = 2 * CHUNK_SIZE + 4321  # three chunks, file-backed
SMALL = 1000  # inline in the catalog


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "flipped": lambda d: flip(d, len(d) - 7),
    "truncated": lambda d: d[:-1],
    "appended": lambda d: d + b"\x00",
    "replaced": lambda d: payload(len(d), seed=999),
    "emptied": lambda d: b"",
}


def all_reads(vault: Vault, scope: Scope, artifact_id: str) -> list[Callable[[], object]]:
    return [
        lambda: vault.read_bytes(scope, artifact_id),
        lambda: vault.stream(scope, artifact_id).read(),
        lambda: vault.read_range(scope, artifact_id, 0, 10**9),
    ]


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_damaged_blob_raises_integrity_error_on_every_read(
    vault: Vault, tamper: Tamper, scope: Scope, kind: str
) -> None:
    data = payload(BIG, seed=1)
    d = vault.put(scope, data)
    twin = vault.put(scope, data)
    key = vault.catalog.find(scope, d.artifact_id).key  # type: ignore[union-attr]
    tamper.set_bytes(key, DAMAGE[kind](data))
    for read in all_reads(vault, scope, d.artifact_id):
        with pytest.raises(IntegrityError) as err:
            read()
        assert d.artifact_id in str(err.value)
        assert data[:16].hex() not in str(err.value)
    report = vault.verify()
    assert not report.ok
    [problem] = report.problems
    assert problem.kind == "corrupt"
    assert problem.artifact_ids == tuple(sorted([d.artifact_id, twin.artifact_id]))


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_damaged_inline_blob_raises_integrity_error(vault: Vault, tamper: Tamper, scope: Scope, kind: str) -> None:
    data = payload(SMALL, seed=2)
    d = vault.put(scope, data)
    key = vault.catalog.find(scope, d.artifact_id).key  # type: ignore[union-attr]
    tamper.set_inline(key, DAMAGE[kind](data))
    for read in all_reads(vault, scope, d.artifact_id):
        with pytest.raises(IntegrityError):
            read()
    assert not vault.verify().ok


def test_missing_blob_is_an_integrity_error_of_kind_missing(vault: Vault, tamper: Tamper, scope: Scope) -> None:
    d = vault.put(scope, payload(BIG, seed=3))
    key = vault.catalog.find(scope, d.artifact_id).key  # type: ignore[union-attr]
    tamper.remove(key)
    with pytest.raises(IntegrityError, match="missing") as err:
        vault.read_bytes(scope, d.artifact_id)
    assert err.value.kind == "missing"
    assert [p.kind for p in vault.verify().problems] == ["missing"]


def test_damage_in_one_chunk_spares_the_others_and_the_stream_stops_before_it(
    vault: Vault, tamper: Tamper, scope: Scope
) -> None:
    data = payload(BIG, seed=4)
    d = vault.put(scope, data)
    key = vault.catalog.find(scope, d.artifact_id).key  # type: ignore[union-attr]
    assert vault.read_range(scope, d.artifact_id, 0, 1) == data[:1]
    assert len(vault.catalog.blob(key).chunk_roots or b"") == 3 * 32  # type: ignore[union-attr]  # from capture
    tamper.set_bytes(key, flip(data, 2 * CHUNK_SIZE + 5))
    assert vault.read_range(scope, d.artifact_id, 0, 2 * CHUNK_SIZE) == data[: 2 * CHUNK_SIZE]
    with pytest.raises(IntegrityError, match="chunk 2"):
        vault.read_range(scope, d.artifact_id, 2 * CHUNK_SIZE, 10)
    returned = bytearray()
    with vault.stream(scope, d.artifact_id) as stream, pytest.raises(IntegrityError):
        while piece := stream.read(64 * 1024):
            returned += piece
    assert bytes(returned) == data[: 2 * CHUNK_SIZE]  # nothing from the damaged chunk


def test_damage_before_chunk_digests_exist_fails_the_first_selective_read_whole(
    vault: Vault, tamper: Tamper, scope: Scope
) -> None:
    """A blob captured before Merkle roots existed (simulated): nothing per chunk is trusted yet."""
    data = payload(BIG, seed=11)
    d = vault.put(scope, data)
    key = vault.catalog.find(scope, d.artifact_id).key  # type: ignore[union-attr]
    tamper.forget_merkle(key)
    assert vault.catalog.blob(key).chunk_digests == b""  # type: ignore[union-attr]
    tamper.set_bytes(key, flip(data, 2 * CHUNK_SIZE + 5))
    with pytest.raises(IntegrityError, match="content hash"):
        vault.read_range(scope, d.artifact_id, 0, 10)  # chunk 0 is intact, but nothing is trusted yet
    record = vault.catalog.blob(key)
    assert record is not None
    assert (record.chunk_digests, record.merkle_root, record.chunk_roots) == (b"", None, None)  # nothing recorded


def test_chunk_roots_recorded_at_capture_are_trusted_from_the_first_read(
    vault: Vault, tamper: Tamper, scope: Scope
) -> None:
    data = payload(BIG, seed=12)
    d = vault.put(scope, data)
    key = vault.catalog.find(scope, d.artifact_id).key  # type: ignore[union-attr]
    tamper.set_bytes(key, flip(data, 2 * CHUNK_SIZE + 5))
    assert vault.read_range(scope, d.artifact_id, 0, 10) == data[:10]  # chunk 0 verified by its own root
    with pytest.raises(IntegrityError, match="chunk 2"):
        vault.read_range(scope, d.artifact_id, 2 * CHUNK_SIZE, 10)


def test_a_fresh_capture_of_the_same_bytes_heals_a_damaged_blob(vault: Vault, tamper: Tamper, scope: Scope) -> None:
    data = payload(BIG, seed=5)
    d = vault.put(scope, data)
    key = vault.catalog.find(scope, d.artifact_id).key  # type: ignore[union-attr]
    tamper.set_bytes(key, flip(data, 10))
    with pytest.raises(IntegrityError):
        vault.read_bytes(scope, d.artifact_id)
    vault.put(scope, data)
    assert vault.read_bytes(scope, d.artifact_id) == data
    assert vault.verify().ok


# -- the filesystem layout: links and special files planted in the store ------------


@pytest.fixture
def embedded(tmp_path: Path) -> Vault:
    vault = Vault.open(tmp_path / "store")
    yield vault  # type: ignore[misc]
    vault.close()


def test_a_symlink_in_place_of_a_blob_is_not_followed(embedded: Vault, tmp_path: Path, scope: Scope) -> None:
    data = payload(BIG, seed=6)
    d = embedded.put(scope, data)
    path = Tamper(embedded).path(embedded.catalog.find(scope, d.artifact_id).key)  # type: ignore[union-attr]
    outside = tmp_path / "outside.bin"
    outside.write_bytes(data)  # even the right bytes, behind a link, are refused
    path.unlink()
    path.symlink_to(outside)
    with pytest.raises(IntegrityError, match="missing"):
        embedded.read_bytes(scope, d.artifact_id)


def test_a_fifo_in_place_of_a_blob_does_not_hang_the_reader(embedded: Vault, scope: Scope) -> None:
    d = embedded.put(scope, payload(BIG, seed=7))
    path = Tamper(embedded).path(embedded.catalog.find(scope, d.artifact_id).key)  # type: ignore[union-attr]
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(IntegrityError):
        embedded.read_bytes(scope, d.artifact_id)


def test_a_symlinked_namespace_directory_never_lets_writes_escape(
    embedded: Vault, tmp_path: Path, scope: Scope
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    ns_dir = tmp_path / "store" / "blobs" / namespace_of(scope.tenant)
    ns_dir.symlink_to(outside, target_is_directory=True)
    with pytest.raises(StorageError, match="unsafe"):
        embedded.put(scope, payload(BIG, seed=8))
    assert list(outside.iterdir()) == []
    assert embedded.list(scope) == []
    small = embedded.put(scope, b"inline bytes never touch the blob tree")
    assert embedded.read_bytes(scope, small.artifact_id) == b"inline bytes never touch the blob tree"
