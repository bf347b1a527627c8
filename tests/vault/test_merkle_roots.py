"""Merkle roots at capture, in the descriptor, on proved reads, and gained by older artifacts on full verification."""

from __future__ import annotations

import pytest

from refvault import Scope, Vault, verify_excerpt
from refvault.blobs.base import BlobKey
from refvault.errors import IntegrityError
from refvault.model import DESCRIPTOR_FIELDS
from refvault.proofs import ALG, LEAF_SIZE, merkle_root
from refvault.vault.proving import COMPONENT
from tests.conftest import Tamper, payload

MiB = 1 << 20


def clear_roots(vault: Vault, key: BlobKey) -> None:
    """Make a blob look captured before Merkle roots existed."""
    Tamper(vault).forget_merkle(key)


def key_of(vault: Vault, scope: Scope, artifact_id: str) -> BlobKey:
    manifest = vault.catalog.find(scope, artifact_id)
    assert manifest is not None
    return manifest.key


@pytest.mark.parametrize("size", [0, 1, 5000, 2 * MiB + 17])
def test_capture_records_the_root_an_independent_recomputation_gives(vault: Vault, scope: Scope, size: int) -> None:
    data = payload(size, seed=21)
    descriptor = vault.put(scope, data)
    integrity = descriptor.retrieval["integrity"]
    assert dict(integrity) == {"alg": ALG, "merkle_root": merkle_root(data).hex(), "leaf_size": LEAF_SIZE}
    assert vault.describe(scope, descriptor.artifact_id).retrieval["integrity"] == integrity
    record = vault.catalog.blob(key_of(vault, scope, descriptor.artifact_id))
    assert record is not None
    assert record.merkle_root == merkle_root(data)
    assert set(descriptor.to_dict()) == set(DESCRIPTOR_FIELDS)  # nested: the ten top-level fields stay


@pytest.mark.parametrize(
    ("offset", "length"), [(0, 10), (LEAF_SIZE - 3, 6), (MiB - 2, 4), (2 * MiB, 17), (123, 0), (3 * MiB, 5)]
)
def test_a_proved_read_verifies_against_the_descriptor_root(
    vault: Vault, scope: Scope, offset: int, length: int
) -> None:
    data = payload(2 * MiB + 17, seed=22)
    descriptor = vault.put(scope, data)
    proved = vault.read_proved(scope, descriptor.artifact_id, offset, length)
    assert (
        proved.data == data[offset : offset + length] == vault.read_range(scope, descriptor.artifact_id, offset, length)
    )
    root = descriptor.retrieval["integrity"]["merkle_root"]
    assert verify_excerpt(proved.data, offset=proved.offset, proof=proved.prove(), root=root)
    if len(proved.data) > 2:  # any sub-range of what was read can be proved too
        sub = proved.prove(proved.offset + 1, len(proved.data) - 2)
        assert verify_excerpt(proved.data[1:-1], offset=proved.offset + 1, proof=sub, root=root)


def test_an_inline_artifact_is_proved_like_any_other(vault: Vault, scope: Scope) -> None:
    descriptor = vault.put(scope, b"small enough to live in the catalog")
    proof = vault.prove_range(scope, descriptor.artifact_id, 6, 6)
    assert verify_excerpt(b"enough", offset=6, proof=proof, root=descriptor.retrieval["integrity"]["merkle_root"])


def test_an_old_artifact_gains_its_root_on_full_verification(vault: Vault, scope: Scope) -> None:
    data = payload(2 * MiB + 99, seed=23)
    descriptor = vault.put(scope, data)
    key = key_of(vault, scope, descriptor.artifact_id)
    clear_roots(vault, key)
    assert "integrity" not in vault.describe(scope, descriptor.artifact_id).retrieval
    report = vault.verify()
    assert report.ok
    record = vault.catalog.blob(key)
    assert record is not None
    assert record.merkle_root == merkle_root(data)
    assert (
        vault.describe(scope, descriptor.artifact_id).retrieval["integrity"]["merkle_root"] == merkle_root(data).hex()
    )


def test_an_old_artifact_gains_its_root_on_a_whole_read(vault: Vault, scope: Scope) -> None:
    data = payload(MiB + 3, seed=24)
    descriptor = vault.put(scope, data)
    key = key_of(vault, scope, descriptor.artifact_id)
    clear_roots(vault, key)
    assert vault.read_bytes(scope, descriptor.artifact_id) == data
    record = vault.catalog.blob(key)
    assert record is not None
    assert record.merkle_root == merkle_root(data)


def test_an_old_artifact_gains_its_root_on_its_first_proof(vault: Vault, scope: Scope) -> None:
    data = payload(MiB + 3, seed=25)
    descriptor = vault.put(scope, data)
    key = key_of(vault, scope, descriptor.artifact_id)
    clear_roots(vault, key)
    proof = vault.prove_range(scope, descriptor.artifact_id, MiB - 1, 4)
    assert proof["root"] == merkle_root(data).hex()
    assert verify_excerpt(data[MiB - 1 : MiB + 3], offset=MiB - 1, proof=proof, root=merkle_root(data).hex())


def test_damaged_bytes_never_gain_a_root(embedded_vault: Vault, scope: Scope) -> None:
    vault = embedded_vault
    data = payload(2 * MiB, seed=26)
    descriptor = vault.put(scope, data)
    key = key_of(vault, scope, descriptor.artifact_id)
    clear_roots(vault, key)
    damaged = bytearray(data)
    damaged[-1] ^= 0x40
    Tamper(vault).set_bytes(key, bytes(damaged))
    assert not vault.verify().ok
    with pytest.raises(IntegrityError):
        vault.read_bytes(scope, descriptor.artifact_id)
    with pytest.raises(IntegrityError):
        vault.prove_range(scope, descriptor.artifact_id, 0, 10)
    record = vault.catalog.blob(key)
    assert record is not None
    assert record.merkle_root is None
    assert record.chunk_roots is None


def test_a_chunk_that_no_longer_matches_its_chunk_root_fails_the_read(embedded_vault: Vault, scope: Scope) -> None:
    vault = embedded_vault
    data = payload(2 * MiB, seed=27)
    descriptor = vault.put(scope, data)
    key = key_of(vault, scope, descriptor.artifact_id)
    damaged = bytearray(data)
    damaged[MiB + LEAF_SIZE] ^= 1
    Tamper(vault).set_bytes(key, bytes(damaged))
    assert vault.read_range(scope, descriptor.artifact_id, 0, 10) == data[:10]  # chunk 0 is intact
    with pytest.raises(IntegrityError, match="Merkle chunk root"):
        vault.read_range(scope, descriptor.artifact_id, MiB, 10)


def test_a_recapture_of_the_same_bytes_gives_an_old_blob_its_root(vault: Vault, scope: Scope) -> None:
    data = payload(MiB + 1, seed=28)
    first = vault.put(scope, data)
    key = key_of(vault, scope, first.artifact_id)
    clear_roots(vault, key)
    second = vault.put(scope, data)
    assert second.retrieval["integrity"]["merkle_root"] == merkle_root(data).hex()
    record = vault.catalog.blob(key)
    assert record is not None
    assert record.merkle_root == merkle_root(data)


def test_verified_by_names_the_component(vault: Vault, scope: Scope) -> None:
    from refvault import __version__
    from refvault.vault.proving import verified_by

    assert verified_by("stored bytes") == {
        "component": COMPONENT,
        "version": __version__,
        "representation": "stored bytes",
    }


def test_the_async_facade_proves_ranges_too(tmp_path: object) -> None:
    import asyncio
    from pathlib import Path

    from refvault import AsyncVault

    async def main() -> None:
        async with await AsyncVault.open(str(Path(str(tmp_path)) / "store")) as vault:
            scope = Scope("acme", "ana", "s1")
            data = payload(MiB + 9, seed=29)
            d = await vault.put(scope, data)
            proof = await vault.prove_range(scope, d.artifact_id, MiB - 4, 8)
            root = d.retrieval["integrity"]["merkle_root"]
            assert verify_excerpt(data[MiB - 4 : MiB + 4], offset=MiB - 4, proof=proof, root=root)

    asyncio.run(main())


def test_roots_a_catalog_cannot_record_are_derived_once_per_process(
    embedded_vault: Vault, scope: Scope, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older blob on a read-only or busy catalog: its roots are derived by one full pass, then remembered by
    the process (by content digest), not re-derived by every proof, grep or query of it."""
    import refvault.vault.verified as verified
    from refvault import read
    from refvault.errors import StorageError

    vault = embedded_vault
    data = b"".join(b"line %d hello\n" % i for i in range(150_000))  # about 2 MiB
    descriptor = vault.put(scope, data, media_type="text/plain")
    clear_roots(vault, key_of(vault, scope, descriptor.artifact_id))

    def busy(*args: object) -> None:
        raise StorageError("the catalog is busy")

    monkeypatch.setattr(vault.catalog, "record_merkle", busy)
    monkeypatch.setattr(verified, "_derived", {}, raising=False)  # a fresh process
    scans: list[int] = []
    original = verified.VerifiedBlob._scan

    def counted(self: verified.VerifiedBlob) -> tuple[str, bytes, bytes]:
        scans.append(1)
        return original(self)

    monkeypatch.setattr(verified.VerifiedBlob, "_scan", counted)
    for _ in range(3):
        found = read.grep(vault, scope, descriptor.artifact_id, "9999 hello")
        assert found["proof"]["root"] == merkle_root(data).hex()
        proof = vault.prove_range(scope, descriptor.artifact_id, MiB - 3, 9)
        assert verify_excerpt(data[MiB - 3 : MiB + 6], offset=MiB - 3, proof=proof, root=merkle_root(data).hex())
    assert len(scans) == 1
    record = vault.catalog.blob(key_of(vault, scope, descriptor.artifact_id))
    assert record is not None
    assert record.merkle_root is None  # never recorded: the catalog refused every time
