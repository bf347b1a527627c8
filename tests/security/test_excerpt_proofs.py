"""Adversarial excerpt proofs: any flipped bit in the excerpt, the offset or any field of the proof fails
verification, a forged size cannot move an excerpt, and malformed proofs give False without raising."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refvault import Scope, Vault, verify_excerpt
from refvault.proofs import LEAF_SIZE, chunk_root, leaf_hashes, merkle_root, prove_range, root_of, tree_hash
from tests.conftest import payload

MiB = 1 << 20
SIZE = MiB + 5 * LEAF_SIZE + 333
DATA = payload(SIZE, seed=11)
ROOT = merkle_root(DATA).hex()


def prove(data: bytes, offset: int, length: int) -> dict[str, Any]:
    chunks = [data[i : i + MiB] for i in range(0, len(data), MiB)]
    return prove_range(
        size=len(data),
        offset=offset,
        length=length,
        chunk_size=MiB,
        chunk_roots=[chunk_root(c) for c in chunks],
        chunk_leaves=lambda index: leaf_hashes(chunks[index]),
        read=lambda at, n: data[at : at + n],
    )


def flip_bit(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def flip_base64_text(text: str, bit: int) -> str:
    """``text`` with one of the six bits of one of its base64 characters flipped (padding left alone)."""
    body = text.rstrip("=")
    at = (bit // 6) % len(body)
    if bit % 3 == 0:  # often the last character, whose low bits a lenient decoder ignores
        at = len(body) - 1
    flipped = B64[B64.index(body[at]) ^ (1 << (bit % 6))]
    return body[:at] + flipped + body[at + 1 :] + text[len(body) :]


def test_a_non_canonical_base64_edge_fails() -> None:
    """Unused low bits of the last base64 character are part of the proof too: setting one fails it."""
    offset, length = 4, 10  # head: 4 bytes, ``AAECAw==``-like, whose last character carries 4 unused bits
    proof = prove(DATA, offset, length)
    excerpt = DATA[offset : offset + length]
    head = proof["head"]
    last = len(head.rstrip("=")) - 1
    for bit in range(6):
        mutant = {**proof, "head": head[:last] + B64[B64.index(head[last]) ^ (1 << bit)] + head[last + 1 :]}
        assert not verify_excerpt(excerpt, offset=offset, proof=mutant, root=ROOT), bit


def flip_hex(text: str, bit: int) -> str:
    return flip_bit(bytes.fromhex(text), bit % (len(text) * 4)).hex()


RANGES = [(MiB - 50, 100), (LEAF_SIZE + 7, 3 * LEAF_SIZE), (SIZE - 10, 10), (0, 1), (MiB + 2 * LEAF_SIZE, 1)]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(RANGES), st.integers(0, 1 << 30))
def test_any_flipped_bit_of_the_excerpt_fails(span: tuple[int, int], bit: int) -> None:
    offset, length = span
    proof = prove(DATA, offset, length)
    excerpt = DATA[offset : offset + length]
    assert verify_excerpt(excerpt, offset=offset, proof=proof, root=ROOT)
    assert not verify_excerpt(flip_bit(excerpt, bit % (8 * length)), offset=offset, proof=proof, root=ROOT)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(RANGES), st.integers(0, 62))
def test_any_flipped_bit_of_the_offset_fails(span: tuple[int, int], bit: int) -> None:
    offset, length = span
    proof = prove(DATA, offset, length)
    excerpt = DATA[offset : offset + length]
    assert not verify_excerpt(excerpt, offset=offset ^ (1 << bit), proof=proof, root=ROOT)
    moved = {**proof, "offset": offset ^ (1 << bit)}  # moving the proof's offset along does not help either
    assert not verify_excerpt(excerpt, offset=offset ^ (1 << bit), proof=moved, root=ROOT)


def _mutants(proof: dict[str, Any], bit: int) -> list[tuple[str, dict[str, Any]]]:
    """The proof with one bit flipped in each field in turn (a base64 field: a bit of its decoded bytes, or a
    byte added when it is empty; a hash list: a bit of one hash, or one hash dropped or added)."""
    out: list[tuple[str, dict[str, Any]]] = []
    for name in ("size", "offset", "length", "leaf_size"):
        out.append((name, {**proof, name: proof[name] ^ (1 << (bit % 40))}))
    for name in ("head", "tail"):
        raw = base64.b64decode(proof[name])
        changed = flip_bit(raw, bit % (8 * len(raw))) if raw else b"\x00"
        out.append((name, {**proof, name: base64.b64encode(changed).decode()}))
        if proof[name]:  # a bit of the text itself: any character's six bits, the unused low ones of the last too
            out.append((f"{name} text", {**proof, name: flip_base64_text(proof[name], bit)}))
    out.append(("root", {**proof, "root": flip_hex(proof["root"], bit)}))
    out.append(("alg", {**proof, "alg": proof["alg"][:-1] + chr(ord(proof["alg"][-1]) ^ 1)}))
    hashes = proof["hashes"]
    if hashes:
        index = bit % len(hashes)
        flipped = [*hashes[:index], flip_hex(hashes[index], bit), *hashes[index + 1 :]]
        out.append(("hashes", {**proof, "hashes": flipped}))
        out.append(("hashes dropped", {**proof, "hashes": hashes[:-1]}))
    out.append(("hashes added", {**proof, "hashes": [*hashes, "00" * 32]}))
    return out


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(RANGES), st.integers(0, 1 << 30))
def test_any_flipped_bit_of_any_proof_field_fails(span: tuple[int, int], bit: int) -> None:
    offset, length = span
    proof = prove(DATA, offset, length)
    excerpt = DATA[offset : offset + length]
    for name, mutant in _mutants(proof, bit):
        assert not verify_excerpt(excerpt, offset=offset, proof=mutant, root=ROOT), name
        if name == "root":  # nor against the root it now names
            assert not verify_excerpt(excerpt, offset=offset, proof=mutant, root=mutant["root"])


def test_a_flipped_bit_of_the_trusted_root_fails() -> None:
    proof = prove(DATA, 100, 100)
    assert not verify_excerpt(DATA[100:200], offset=100, proof=proof, root=flip_hex(ROOT, 77))


def test_a_forged_size_cannot_move_an_excerpt_to_another_leaf() -> None:
    """Without the size in the root, leaf 2 of a 3-leaf tree has the same path hashes as leaf 4 of a 5-leaf one."""
    data = payload(3 * LEAF_SIZE, seed=12)
    proof = prove(data, 2 * LEAF_SIZE, LEAF_SIZE)
    leaves = leaf_hashes(data)
    assert proof["hashes"] == [tree_hash(leaves[:2]).hex()]
    forged = {**proof, "size": 5 * LEAF_SIZE, "offset": 4 * LEAF_SIZE}
    excerpt = data[2 * LEAF_SIZE :]
    assert not verify_excerpt(excerpt, offset=4 * LEAF_SIZE, proof=forged, root=proof["root"])
    # the tree hashes alone would have matched: the size bound into the root is what refuses it
    assert root_of(3 * LEAF_SIZE, tree_hash(leaves)).hex() == proof["root"]


def test_a_proof_of_the_whole_object_cannot_pass_for_a_part_of_it() -> None:
    small = payload(2 * LEAF_SIZE, seed=13)
    proof = prove(small, 0, len(small))
    part = {**proof, "size": LEAF_SIZE, "length": LEAF_SIZE}
    assert not verify_excerpt(small[:LEAF_SIZE], offset=0, proof=part, root=proof["root"])


MALFORMED: list[Any] = [
    None,
    {},
    [],
    "proof",
    {"alg": None},
    {"hashes": "not a list"},
    {"hashes": [1, 2]},
    {"hashes": ["zz" * 32]},
    {"hashes": ["AB" * 32]},  # upper-case hex is not the canonical form
    {"head": 5},
    {"head": "!!!notbase64"},
    {"tail": "é"},
    {"size": -1},
    {"size": True},
    {"size": 1.5},
    {"size": 1 << 80},
    {"offset": "0"},
    {"length": None},
    {"leaf_size": 0},
    {"root": None},
    {"root": "00"},
]


@pytest.mark.parametrize("change", range(len(MALFORMED)))
def test_a_malformed_proof_is_false_never_an_exception(change: int) -> None:
    proof = prove(DATA, MiB - 50, 100)
    value = MALFORMED[change]
    mangled: Any = {**proof, **value} if isinstance(value, dict) and value else value
    assert verify_excerpt(DATA[MiB - 50 : MiB + 50], offset=MiB - 50, proof=mangled, root=ROOT) is False


@pytest.mark.parametrize(
    "arguments",
    [
        {"excerpt": "text, not bytes", "offset": 0},
        {"excerpt": b"x", "offset": -1},
        {"excerpt": b"x", "offset": None},
        {"excerpt": b"x", "offset": 0, "root": 12},
        {"excerpt": b"x", "offset": 0, "root": "not hex at all, but sixty-four characters long for the check!!"},
    ],
)
def test_bad_arguments_are_false_never_an_exception(arguments: dict[str, Any]) -> None:
    proof = prove(b"x", 0, 1)
    call: dict[str, Any] = {"proof": proof, "root": proof["root"], **arguments}
    assert verify_excerpt(**call) is False


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=80),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
        max_leaves=20,
    ),
    st.sampled_from(["size", "offset", "length", "head", "tail", "hashes", "root", "alg", "leaf_size"]),
)
def test_fuzzed_fields_never_raise(value: Any, name: str) -> None:
    proof = copy.deepcopy(prove(DATA, 10, 10))
    proof[name] = value
    assert verify_excerpt(DATA[10:20], offset=10, proof=proof, root=ROOT) in (True, False)


def test_a_proof_served_for_tampered_bytes_cannot_be_produced(tmp_path: Any) -> None:
    """The vault never proves bytes that do not match the recorded root: a damaged chunk fails the read."""
    from refvault.errors import IntegrityError
    from tests.conftest import Tamper

    vault = Vault.open(tmp_path / "store")
    scope = Scope("acme", "ana", "s1")
    data = payload(2 * MiB + 10, seed=14)
    descriptor = vault.put(scope, data)
    tamper = Tamper(vault)
    manifest = vault.catalog.find(scope, descriptor.artifact_id)
    assert manifest is not None
    damaged = bytearray(data)
    damaged[MiB + 5] ^= 1
    tamper.set_bytes(manifest.key, bytes(damaged))
    with pytest.raises(IntegrityError):
        vault.prove_range(scope, descriptor.artifact_id, MiB, 100)
    assert (
        vault.prove_range(scope, descriptor.artifact_id, 0, 100)["root"] == merkle_root(data).hex()
    )  # chunk 0 is intact
    vault.close()
