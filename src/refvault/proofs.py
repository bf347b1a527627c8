"""Merkle roots and inclusion proofs: excerpts a recipient can verify with nothing but hashlib.

The tree (``refvault.merkle.v1``):

* The object's bytes are cut into leaves of :data:`LEAF_SIZE` (4 KiB) bytes; the last leaf may be short.
* ``leaf = SHA-256(0x00 || leaf bytes)``, ``node = SHA-256(0x01 || left || right)`` (domain-separated, so a
  leaf can never pass for a node). For a leaf count that is not a power of two the tree has the RFC 6962
  shape: a node over ``n > 1`` leaves splits at the largest power of two below ``n``.
* The tree hash of no leaves (the empty object) is ``SHA-256("")``.
* The **root** binds the object's length: ``root = SHA-256(0x02 || size as 8 bytes big-endian || tree hash)``.
  Without it a proof for leaf 2 of a 3-leaf tree would also pass as leaf 4 of a 5-leaf tree (the
  sibling hashes line up); with it the size, hence the tree shape and every leaf's position, is fixed.

Because a 1 MiB storage chunk is 256 whole leaves, every chunk is a complete subtree: the catalog keeps
each chunk's subtree hash (its *chunk root*), so a proof needs only the leaves of the chunks the excerpt
touches plus the recorded chunk roots of the rest.

A proof (:func:`prove_range`) is a JSON-able dict: ``alg``, ``leaf_size``, ``size``, ``offset``, ``length``,
``head`` / ``tail`` (base64 of the bytes of the first / last covered leaf before / after the excerpt),
``hashes`` (hex, the roots of the subtrees outside the covered leaves, in a left-to-right walk) and ``root``.
It discloses up to ``leaf_size - 1`` neighbouring bytes on each side of the excerpt (``head``/``tail``).

Prover and verifier walk the same tree with one function (:func:`_walk`): a node wholly outside the covered
leaves takes the next hash (the prover computes it, the verifier reads it from the proof), a leaf inside is
hashed from the bytes, anything else recurses.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "ALG",
    "EMPTY_TREE",
    "LEAF_SIZE",
    "chunk_root",
    "leaf_hashes",
    "merkle_root",
    "prove_range",
    "root_of",
    "root_of_chunks",
    "tree_hash",
    "verify_excerpt",
]

ALG = "refvault.merkle.v1"
LEAF_SIZE = 4096
EMPTY_TREE = hashlib.sha256(b"").digest()
_LEAF = hashlib.sha256(b"\x00")
_MAX_SIZE = 1 << 62


def leaf_hashes(data: bytes | bytearray | memoryview) -> list[bytes]:
    """The hash of each :data:`LEAF_SIZE` leaf of ``data`` (hashlib releases the GIL for each 4 KiB update)."""
    view = memoryview(data).cast("B")
    out = []
    for start in range(0, len(view), LEAF_SIZE):
        h = _LEAF.copy()
        h.update(view[start : start + LEAF_SIZE])
        out.append(h.digest())
    return out


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def tree_hash(hashes: Sequence[bytes]) -> bytes:
    """The RFC 6962-shaped tree hash over ``hashes`` (leaf hashes, or the roots of complete, equal, aligned
    subtrees such as chunk roots); :data:`EMPTY_TREE` for none. Pairing bottom-up and carrying an odd last
    node up a level gives exactly the split-at-the-largest-power-of-two shape."""
    level = list(hashes)
    if not level:
        return EMPTY_TREE
    while len(level) > 1:
        paired = [_node(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def chunk_root(data: bytes | bytearray | memoryview) -> bytes:
    """The subtree hash of one chunk's leaves (a chunk is a whole number of leaves, the last one may be short)."""
    return tree_hash(leaf_hashes(data))


def root_of(size: int, tree: bytes) -> bytes:
    """The root: the tree hash bound to the object's length."""
    return hashlib.sha256(b"\x02" + size.to_bytes(8, "big") + tree).digest()


def root_of_chunks(size: int, chunk_roots: bytes) -> bytes:
    """The root of an object of ``size`` bytes from its concatenated 32-byte chunk roots."""
    return root_of(size, tree_hash([chunk_roots[i : i + 32] for i in range(0, len(chunk_roots), 32)]))


def merkle_root(data: bytes | bytearray | memoryview) -> bytes:
    """The root of ``data`` computed from scratch (an independent recomputation, e.g. for tests)."""
    return root_of(len(memoryview(data).cast("B")), tree_hash(leaf_hashes(data)))


def _split(n: int) -> int:
    """The largest power of two strictly below ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


def _walk(
    lo: int,
    hi: int,
    first: int,
    last: int,
    inside: Callable[[int], bytes],
    outside: Callable[[int, int], bytes],
    known: Callable[[int, int], bytes | None] | None = None,
) -> bytes:
    """The hash of the node over leaves ``[lo, hi)`` when leaves ``[first, last)`` are covered. ``known`` (the
    prover's only) may give the hash of a node wholly inside the covered leaves without hashing them (None: it
    does not know it); such a node adds nothing to the proof either way."""
    if hi <= first or lo >= last:
        return outside(lo, hi)
    if known is not None and first <= lo and hi <= last and (value := known(lo, hi)) is not None:
        return value
    if hi - lo == 1:
        return inside(lo)
    k = lo + _split(hi - lo)
    left = _walk(lo, k, first, last, inside, outside, known)
    return _node(left, _walk(k, hi, first, last, inside, outside, known))


def _covered(size: int, offset: int, length: int) -> tuple[int, int, int]:
    """Leaf count, first covered leaf and one past the last covered leaf (none covered for an empty range)."""
    leaves = -(-size // LEAF_SIZE)
    first = offset // LEAF_SIZE
    last = -(-(offset + length) // LEAF_SIZE) if length else first
    return leaves, first, last


def prove_range(
    *,
    size: int,
    offset: int,
    length: int,
    chunk_size: int,
    chunk_roots: Sequence[bytes],
    chunk_leaves: Callable[[int], Sequence[bytes]],
    read: Callable[[int, int], bytes],
) -> dict[str, Any]:
    """The proof that bytes ``[offset, offset + length)`` of an object of ``size`` bytes are in its root.

    ``chunk_roots`` are the verified subtree hashes of every ``chunk_size`` chunk (a multiple of
    :data:`LEAF_SIZE`); ``chunk_leaves(i)`` the leaf hashes of chunk ``i`` (called only for the at most two
    chunks the range covers in part: a chunk it covers whole is its recorded root, so a proof of any span
    reads at most two chunks); ``read(offset, length)`` verified bytes (called only for the head and tail
    leaves). The range must lie inside the object.
    """
    if chunk_size % LEAF_SIZE or not 0 <= offset <= offset + length <= size:
        raise ValueError("a proof covers a range inside the object, with chunks a whole number of leaves")
    per_chunk = chunk_size // LEAF_SIZE
    leaves, first, last = _covered(size, offset, length)
    cache: dict[int, Sequence[bytes]] = {}

    def leaf(index: int) -> bytes:
        chunk = index // per_chunk
        if chunk not in cache:
            cache[chunk] = chunk_leaves(chunk)
        return cache[chunk][index % per_chunk]

    hashes: list[bytes] = []

    def whole(lo: int, hi: int) -> bytes | None:
        if lo % per_chunk == 0 and (hi % per_chunk == 0 or hi == leaves):  # whole chunks: their recorded roots
            return tree_hash(chunk_roots[lo // per_chunk : -(-hi // per_chunk)])
        return None

    def outside(lo: int, hi: int) -> bytes:
        value = whole(lo, hi)
        if value is None:  # inside one chunk the range touches: its leaves
            value = tree_hash([leaf(i) for i in range(lo, hi)])
        hashes.append(value)
        return value

    tree = EMPTY_TREE if leaves == 0 else _walk(0, leaves, first, last, leaf, outside, whole)
    head = read(first * LEAF_SIZE, offset - first * LEAF_SIZE) if length else b""
    end = offset + length
    tail = read(end, min(last * LEAF_SIZE, size) - end) if length else b""
    return {
        "alg": ALG,
        "leaf_size": LEAF_SIZE,
        "size": size,
        "offset": offset,
        "length": length,
        "head": base64.b64encode(head).decode("ascii"),
        "tail": base64.b64encode(tail).decode("ascii"),
        "hashes": [h.hex() for h in hashes],
        "root": root_of(size, tree).hex(),
    }


def _int(value: object) -> int:
    if type(value) is not int or not 0 <= value <= _MAX_SIZE:
        raise ValueError("not a non-negative integer")
    return value


def _b64(value: object) -> bytes:
    """The bytes of canonical base64 text: one text per byte string, so no bit of it goes unchecked (unused low
    bits of the last character set, which a lenient decoder ignores, are refused)."""
    if not isinstance(value, str):
        raise ValueError("not base64 text")
    raw = base64.b64decode(value.encode("ascii"), validate=True)
    if base64.b64encode(raw).decode("ascii") != value:
        raise ValueError("not canonical base64")
    return raw


def _digest(value: object) -> bytes:
    if not isinstance(value, str) or len(value) != 64 or value != value.lower():
        raise ValueError("not a lower-case hex SHA-256 digest")
    return bytes.fromhex(value)


def _check(excerpt: bytes, offset: int, proof: Mapping[str, Any], root: str) -> bool:
    if proof.get("alg") != ALG or _int(proof.get("leaf_size")) != LEAF_SIZE:
        return False
    size, length = _int(proof.get("size")), len(excerpt)
    if _int(proof.get("offset")) != offset or _int(proof.get("length")) != length or offset + length > size:
        return False
    if _digest(root) != _digest(proof.get("root")):
        return False
    raw = proof.get("hashes")
    if not isinstance(raw, list):
        return False
    hashes = [_digest(h) for h in raw]
    head, tail = _b64(proof.get("head")), _b64(proof.get("tail"))
    leaves, first, last = _covered(size, offset, length)
    span = min(last * LEAF_SIZE, size) - first * LEAF_SIZE if length else 0
    if len(head) != (offset - first * LEAF_SIZE if length else 0) or len(head) + length + len(tail) != span:
        return False
    covered = head + excerpt + tail
    taken = iter(hashes)

    def inside(index: int) -> bytes:
        start = (index - first) * LEAF_SIZE
        h = _LEAF.copy()
        h.update(covered[start : start + LEAF_SIZE])
        return h.digest()

    def outside(lo: int, hi: int) -> bytes:
        return next(taken)  # StopIteration: too few hashes (caught below)

    tree = EMPTY_TREE if leaves == 0 else _walk(0, leaves, first, last, inside, outside)
    if next(taken, None) is not None:  # too many hashes
        return False
    return root_of(size, tree) == _digest(root)


def verify_excerpt(excerpt: bytes, *, offset: int, proof: Mapping[str, Any], root: str) -> bool:
    """True iff ``excerpt`` is exactly the bytes at ``offset`` of the object whose Merkle root is ``root``.

    Needs nothing but its arguments: no vault, no network, only hashlib. ``root`` is the lower-case hex root the
    recipient trusts (e.g. ``retrieval.integrity.merkle_root`` of a descriptor it has from the vault);
    ``proof`` is the ``proof`` object of a read result. Any malformed proof (a missing or mistyped field,
    bad base64 or hex, too few or too many hashes) gives False; this never raises.
    """
    data: object = excerpt  # checked at run time too: callers may pass anything
    fields: object = proof
    try:
        if not isinstance(data, bytes | bytearray | memoryview) or not isinstance(fields, Mapping):
            return False
        return _check(bytes(data), _int(offset), fields, root)
    except (ValueError, TypeError, StopIteration, binascii.Error, UnicodeError, OverflowError, RecursionError):
        return False
