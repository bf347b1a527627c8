"""refvault.proofs: the Merkle root, range proofs, and ``verify_excerpt`` on its own."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refvault import verify_excerpt
from refvault.proofs import EMPTY_TREE, LEAF_SIZE, chunk_root, leaf_hashes, merkle_root, prove_range, root_of
from tests.conftest import payload

MiB = 1 << 20


def prove(data: bytes, offset: int, length: int, chunk_size: int = MiB) -> dict[str, Any]:
    """A proof built the way the vault builds it: recorded chunk roots plus the touched chunks' leaves."""
    chunks = [data[i : i + chunk_size] for i in range(0, len(data), chunk_size)]
    return prove_range(
        size=len(data),
        offset=offset,
        length=length,
        chunk_size=chunk_size,
        chunk_roots=[chunk_root(c) for c in chunks],
        chunk_leaves=lambda index: leaf_hashes(chunks[index]),
        read=lambda at, n: data[at : at + n],
    )


def reference_tree(hashes: Sequence[bytes]) -> bytes:
    """RFC 6962's MTH written out recursively: split at the largest power of two below n."""
    if not hashes:
        return hashlib.sha256(b"").digest()
    if len(hashes) == 1:
        return hashes[0]
    k = 1
    while k * 2 < len(hashes):
        k *= 2
    return hashlib.sha256(b"\x01" + reference_tree(hashes[:k]) + reference_tree(hashes[k:])).digest()


def reference_root(data: bytes) -> bytes:
    leaves = [hashlib.sha256(b"\x00" + data[i : i + LEAF_SIZE]).digest() for i in range(0, len(data), LEAF_SIZE)]
    tree = reference_tree(leaves)
    return hashlib.sha256(b"\x02" + len(data).to_bytes(8, "big") + tree).digest()


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 3 * 4096 + 5, MiB, MiB + 1, 3 * MiB + 12_345])
def test_the_root_is_the_rfc6962_shaped_tree_bound_to_the_size(size: int) -> None:
    data = payload(size, seed=size)
    assert merkle_root(data) == reference_root(data)


def test_the_empty_object_has_a_defined_root() -> None:
    assert merkle_root(b"") == root_of(0, EMPTY_TREE) == hashlib.sha256(b"\x02" + bytes(8) + EMPTY_TREE).digest()
    proof = prove(b"", 0, 0)
    assert proof["hashes"] == []
    assert proof["size"] == 0
    assert verify_excerpt(b"", offset=0, proof=proof, root=merkle_root(b"").hex())


def test_a_one_byte_object_proves_its_byte() -> None:
    proof = prove(b"x", 0, 1)
    assert (proof["head"], proof["tail"], proof["hashes"]) == ("", "", [])
    assert verify_excerpt(b"x", offset=0, proof=proof, root=merkle_root(b"x").hex())
    assert not verify_excerpt(b"y", offset=0, proof=proof, root=merkle_root(b"x").hex())


SIZE = 2 * MiB + 3 * LEAF_SIZE + 17  # three chunks, the last short and not a whole number of leaves
CASES = {
    "first byte": (0, 1),
    "first leaf": (0, LEAF_SIZE),
    "last byte": (SIZE - 1, 1),
    "last leaf, short": (SIZE - 17, 17),
    "across a leaf boundary": (LEAF_SIZE - 10, 20),
    "across a chunk boundary": (MiB - 100, 200),
    "across two chunk boundaries": (MiB - 5, MiB + 10),
    "the whole object": (0, SIZE),
    "empty, inside": (12_345, 0),
    "empty, at the end": (SIZE, 0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_proof_verifies_exactly_its_range(case: str) -> None:
    data = payload(SIZE, seed=3)
    root = merkle_root(data).hex()
    offset, length = CASES[case]
    proof = prove(data, offset, length)
    assert proof["root"] == root
    assert (proof["offset"], proof["length"], proof["size"]) == (offset, length, SIZE)
    assert verify_excerpt(data[offset : offset + length], offset=offset, proof=proof, root=root)
    assert len(json.dumps(proof)) < 3 * 4 * LEAF_SIZE  # compact: two partial leaves in base64 plus ~20 hashes
    if length:
        shifted = data[offset + 1 : offset + length + 1]
        assert shifted == data[offset : offset + length] or not verify_excerpt(
            shifted, offset=offset, proof=proof, root=root
        )


def test_head_and_tail_are_the_rest_of_the_first_and_last_covered_leaf() -> None:
    data = payload(5 * LEAF_SIZE, seed=4)
    proof = prove(data, LEAF_SIZE + 100, 2 * LEAF_SIZE)
    import base64

    assert base64.b64decode(proof["head"]) == data[LEAF_SIZE : LEAF_SIZE + 100]
    assert base64.b64decode(proof["tail"]) == data[3 * LEAF_SIZE + 100 : 4 * LEAF_SIZE]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 9 * LEAF_SIZE + 3), st.data())
def test_every_range_of_any_object_round_trips(size: int, draw: st.DataObject) -> None:
    data = payload(size, seed=size)
    offset = draw.draw(st.integers(0, size))
    length = draw.draw(st.integers(0, size - offset))
    chunk_size = draw.draw(st.sampled_from([LEAF_SIZE, 2 * LEAF_SIZE, 4 * LEAF_SIZE, MiB]))
    proof = prove(data, offset, length, chunk_size)
    assert proof["root"] == merkle_root(data).hex()
    assert verify_excerpt(data[offset : offset + length], offset=offset, proof=proof, root=proof["root"])


def test_a_range_outside_the_object_or_odd_chunks_are_refused_by_the_prover() -> None:
    with pytest.raises(ValueError):
        prove(b"abc", 2, 5)
    with pytest.raises(ValueError):
        prove(b"abc", 0, 1, chunk_size=1000)


VERIFY_ALONE = """
import json, sys, base64
from refvault.proofs import verify_excerpt
result = json.load(sys.stdin)
excerpt = base64.b64decode(result["excerpt"])
print(verify_excerpt(excerpt, offset=result["proof"]["offset"], proof=result["proof"], root=result["root"]))
"""


def test_the_verifier_runs_in_another_process_given_only_json() -> None:
    data = payload(MiB + 5000, seed=5)
    offset, length = MiB - 7, 77
    import base64

    message = {
        "excerpt": base64.b64encode(data[offset : offset + length]).decode(),
        "proof": prove(data, offset, length),
        "root": merkle_root(data).hex(),
    }
    for excerpt, expected in ((message["excerpt"], "True"), (base64.b64encode(b"x" * length).decode(), "False")):
        sent = json.dumps({**message, "excerpt": excerpt})
        run = subprocess.run(
            [sys.executable, "-c", VERIFY_ALONE], input=sent, capture_output=True, text=True, check=False
        )
        assert (run.returncode, run.stdout.strip()) == (0, expected), run.stderr[-2000:]
