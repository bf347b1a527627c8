"""A proof's edges are disclosed bytes: a proof (``prove_range``, ``read_proved``, ``GET /proof``, a window's)
carries up to ``leaf_size - 1`` stored bytes on each side of its excerpt, so a run pays for them like any read
(over budget: BudgetExceeded before anything is returned) and the disclosure ledger records that they left.
Without that a run with a zero budget could rebuild a whole artifact from proofs of single bytes."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from refvault import Budget, BudgetExceeded, Scope, Vault, read, verify_excerpt
from refvault.budgets import bytes_per_token
from refvault.proofs import LEAF_SIZE, merkle_root
from tests.conftest import Clock, payload

RUN = Scope("acme", "ana", "proofs")
SECRET = bytes(range(256)) * 40  # 10240 bytes: three leaves
TEXT = b"".join(b"secret line %05d\n" % i for i in range(1000))


@pytest.fixture(params=["memory", "embedded"])
def vault(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Vault]:
    location = "memory://" if request.param == "memory" else str(tmp_path / "store")
    with Vault.open(location, clock=Clock()) as opened:
        yield opened


def _edges(proof: dict[str, Any]) -> bytes:
    return base64.b64decode(proof["head"]) + base64.b64decode(proof["tail"])


def _spent(vault: Vault) -> dict[str, Any]:
    return {name: value for name, value in vault.usage(RUN).spent.items() if value and name != "seconds"}


def _rebuild(vault: Vault, artifact_id: str, size: int) -> bytes:
    """The attack: each leaf from two one-byte proofs (the head of its last byte, the tail of its first)."""
    got = bytearray()
    for leaf in range(0, size, LEAF_SIZE):
        n = min(LEAF_SIZE, size - leaf)
        head = base64.b64decode(vault.prove_range(RUN, artifact_id, leaf + n - 1, 1)["head"])
        tail = base64.b64decode(vault.prove_range(RUN, artifact_id, leaf, 1)["tail"])
        got += head + tail[-1:]
    return bytes(got)


def test_a_run_with_a_zero_budget_cannot_rebuild_an_artifact_from_proofs(vault: Vault) -> None:
    artifact_id = vault.put(RUN, SECRET).artifact_id
    assert _rebuild(vault, artifact_id, len(SECRET)) == SECRET  # the attack, without a budget
    vault.set_budget(RUN, Budget(read_calls=0, scanned_bytes=0, returned_tokens=0))
    with pytest.raises(BudgetExceeded):
        _rebuild(vault, artifact_id, len(SECRET))
    with pytest.raises(BudgetExceeded):
        vault.prove_range(RUN, artifact_id, 0, 1)
    with pytest.raises(BudgetExceeded):
        vault.read_proved(RUN, artifact_id, 5, 1)
    assert _spent(vault) == {}


@pytest.mark.parametrize("dimension", ["read_calls", "scanned_bytes", "returned_tokens"])
def test_each_dimension_refuses_a_proof_whose_edges_do_not_fit(vault: Vault, dimension: str) -> None:
    artifact_id = vault.put(RUN, SECRET).artifact_id
    limit = {"read_calls": 0, "scanned_bytes": LEAF_SIZE - 2, "returned_tokens": 10}[dimension]
    vault.set_budget(RUN, Budget(**{dimension: limit}))
    with pytest.raises(BudgetExceeded) as refused:
        vault.prove_range(RUN, artifact_id, LEAF_SIZE - 1, 1)  # its head: 4095 stored bytes
    assert refused.value.dimension == dimension
    assert _spent(vault) == {}


def test_a_proof_is_charged_for_the_bytes_it_hands_back(vault: Vault) -> None:
    artifact_id = vault.put(RUN, SECRET).artifact_id
    vault.set_budget(RUN, Budget(read_calls=100))
    proof = vault.prove_range(RUN, artifact_id, LEAF_SIZE + 10, 20)
    edges = _edges(proof)
    assert len(edges) == LEAF_SIZE - 20
    assert _spent(vault) == {"read_calls": 1, "scanned_bytes": len(edges), "returned_tokens": bytes_per_token(edges)}


def test_a_proved_read_is_charged_for_its_bytes_and_its_edges(vault: Vault) -> None:
    artifact_id = vault.put(RUN, SECRET).artifact_id
    vault.set_budget(RUN, Budget(read_calls=100))
    proved = vault.read_proved(RUN, artifact_id, LEAF_SIZE + 10, 20)
    handed = proved.data + _edges(proved.prove())
    assert len(handed) == LEAF_SIZE
    assert _spent(vault) == {"read_calls": 1, "scanned_bytes": LEAF_SIZE, "returned_tokens": bytes_per_token(handed)}


def test_a_window_is_charged_for_its_proofs_edges(vault: Vault) -> None:
    artifact_id = vault.put(RUN, TEXT, media_type="text/plain").artifact_id
    vault.set_budget(RUN, Budget(returned_tokens=10, scanned_bytes=10))
    with pytest.raises(BudgetExceeded):  # one character of text, 4095 bytes of head
        read.window(vault, RUN, artifact_id, byte_range=[2 * LEAF_SIZE - 1, 1])
    assert _spent(vault) == {}
    vault.set_budget(RUN, Budget(read_calls=10), restart=True)
    window = read.window(vault, RUN, artifact_id, byte_range=[2 * LEAF_SIZE - 1, 1])
    edges = _edges(window["proof"])
    assert len(edges) == LEAF_SIZE - 1
    assert _spent(vault)["scanned_bytes"] == 1 + len(edges)


def test_the_ledger_records_the_edges_a_proof_carries(vault: Vault) -> None:
    artifact_id = vault.put(RUN, TEXT, media_type="text/plain").artifact_id
    proof = vault.prove_range(RUN, artifact_id, LEAF_SIZE + 10, 20)
    proved = vault.read_proved(RUN, artifact_id, LEAF_SIZE + 10, 20)
    window = read.window(vault, RUN, artifact_id, byte_range=[LEAF_SIZE + 10, 20])
    entries = vault.disclosures(RUN, artifact_id)
    assert len(entries) == 3
    of_proof, of_read, of_window = entries
    edges = _edges(proof)
    assert of_proof.bytes == len(edges) == LEAF_SIZE - 20  # what left: head and tail, nothing else
    assert of_proof.excerpt_hash == hashlib.sha256(edges).hexdigest()
    assert of_read.bytes == LEAF_SIZE  # the data and the edges its proofs carry
    assert of_read.excerpt_hash == hashlib.sha256(proved.data).hexdigest()  # of the data alone
    assert of_window.bytes == len(window["text"]) + len(_edges(window["proof"]))
    assert of_window.excerpt_hash == hashlib.sha256(window["text"].encode()).hexdigest()  # of the text alone
    assert "edges" in (of_window.selection or "")
    details = [entry.detail for entry in vault.audit(RUN, artifact_id=artifact_id) if entry.action == "read"]
    assert f"proof edges: head 10 tail {LEAF_SIZE - 30} bytes" in details


def test_a_proof_without_edges_discloses_nothing(vault: Vault) -> None:
    artifact_id = vault.put(RUN, SECRET).artifact_id
    proof = vault.prove_range(RUN, artifact_id, LEAF_SIZE, LEAF_SIZE)
    assert _edges(proof) == b""
    assert verify_excerpt(SECRET[LEAF_SIZE : 2 * LEAF_SIZE], offset=LEAF_SIZE, proof=proof, root=proof["root"])
    assert vault.disclosures(RUN, artifact_id) == []
    assert [entry.action for entry in vault.audit(RUN, artifact_id=artifact_id)][-1] == "read"  # still audited


def test_a_proof_of_a_large_span_reads_at_most_the_two_chunks_it_cuts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Proving a span never reads the span: only the chunks holding its head and tail (memory: about a chunk
    each), however long; a span of whole chunks reads none. The proof still checks out."""
    import refvault.vault.verified as verified

    chunk = 1 << 20
    data = payload(6 * chunk + 777, seed=32)
    root = merkle_root(data).hex()
    with Vault.open(tmp_path / "store") as vault:
        artifact_id = vault.put(RUN, data).artifact_id
        reads: list[int] = []
        original = verified.VerifiedBlob._raw_chunk

        def counted(self: verified.VerifiedBlob, index: int) -> bytes:
            reads.append(index)
            return original(self, index)

        monkeypatch.setattr(verified.VerifiedBlob, "_raw_chunk", counted)
        for offset, length, most in [(0, None, 0), (chunk, 3 * chunk, 0), (100, 6 * chunk, 2), (chunk + 5, 10, 1)]:
            reads.clear()
            proof = vault.prove_range(RUN, artifact_id, offset, length)
            end = len(data) if length is None else offset + length
            assert verify_excerpt(data[offset:end], offset=offset, proof=proof, root=root)
            assert len(reads) <= most, (offset, length, reads)
