"""Verified reads that carry an inclusion proof (:mod:`refvault.proofs`) a recipient can check alone.

``read_proved`` is ``read_range`` plus what proving any sub-range of the bytes it returned needs: the
verified leaf hashes of the chunks it touched (computed by the same pass that verified them against their
recorded chunk roots) and the recorded roots of every other chunk. A blob captured before Merkle roots
existed gains them on this first proved read (one pass over all of it, recorded only if the content hash
matched in that pass). Proving never reads or hashes the whole blob otherwise.

What a proof promises: the excerpt is exactly the stored bytes at ``offset`` of the object whose root is
``root`` (and whose length is ``size``). It says nothing about what those bytes mean, who wrote them, or
whether the root is the right one: the recipient must have the root from a source it trusts (a descriptor
the vault returned, ``retrieval.integrity.merkle_root``). A proof discloses up to ``leaf_size - 1`` bytes on
each side of the excerpt (``head``/``tail``): the reader may read the whole artifact, but evidence forwarded
with its proof forwards those neighbouring bytes too. They are handed-back bytes: ``read_proved`` and
``prove_range`` charge them to the run's budget and record them in the disclosure ledger (docs/proofs.md).
"""

from __future__ import annotations

import base64
import hashlib
import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from refvault.catalog.base import CHUNK_SIZE
from refvault.errors import IntegrityError
from refvault.operations import check_byte_span
from refvault.policy import DEFAULT_PURPOSE, DEFAULT_RECIPIENT
from refvault.proofs import ALG, LEAF_SIZE, prove_range

if TYPE_CHECKING:
    from refvault.catalog.base import BlobRecord, Manifest
    from refvault.model import Descriptor, Scope
    from refvault.vault.verified import VerifiedBlob

__all__ = ["ProvedRange", "Proving", "verified_by", "whole_proof", "with_integrity"]

COMPONENT = "refvault.vault.verified"


def verified_by(representation: str) -> dict[str, str]:
    """Who verified a read result, at which version, and which representation of the artifact it checked."""
    version = str(sys.modules["refvault"].__version__)  # the package is imported before any module of it
    return {"component": COMPONENT, "version": version, "representation": representation}


@dataclass(frozen=True, slots=True)
class ProvedRange:
    """Verified bytes ``[offset, offset + len(data))`` of an artifact, and what proving any sub-range needs."""

    data: bytes
    offset: int
    size: int
    root: bytes
    _chunk_size: int = field(repr=False)
    _chunk_roots: list[bytes] = field(repr=False)
    _leaves: dict[int, list[bytes]] = field(repr=False)
    _aligned: bytes = field(repr=False)
    _aligned_at: int = field(repr=False)

    def prove(self, offset: int | None = None, length: int | None = None) -> dict[str, Any]:
        """The proof for bytes ``[offset, offset + length)`` (default: all of :attr:`data`), which must lie inside
        the range read."""
        offset = self.offset if offset is None else offset
        length = self.offset + len(self.data) - offset if length is None else length
        if not self.offset <= offset <= offset + length <= self.offset + len(self.data):
            raise ValueError("a proof covers a sub-range of the bytes read")
        base = self._aligned_at
        return prove_range(
            size=self.size,
            offset=offset,
            length=length,
            chunk_size=self._chunk_size,
            chunk_roots=self._chunk_roots,
            chunk_leaves=self._leaves.__getitem__,
            read=lambda at, n: self._aligned[at - base : at - base + n],
        )


def whole_proof(size: int, root: str) -> dict[str, Any]:
    """A proof that covers every byte of the object (no hashes, nothing beyond it): what a result computed from the
    whole stored object (parsed records, a query, grep's matches) can offer. Check it with the whole artifact."""
    return {
        "alg": ALG,
        "leaf_size": LEAF_SIZE,
        "size": size,
        "offset": 0,
        "length": size,
        "head": "",
        "tail": "",
        "hashes": [],
        "root": root,
    }


def with_integrity(descriptor: Descriptor, record: BlobRecord | None) -> Descriptor:
    """``descriptor`` with ``retrieval.integrity`` (``alg``, ``merkle_root`` hex, ``leaf_size``) when ``record`` is
    its blob's and carries a Merkle root (a blob captured before roots existed has none until its next full
    verification); otherwise unchanged. The ten top-level fields stay as they are: the root is nested."""
    if (
        record is None
        or record.merkle_root is None
        or "integrity" in descriptor.retrieval
        or descriptor.content_hash != "sha256:" + record.key.digest
    ):
        return descriptor
    integrity = {"alg": ALG, "merkle_root": record.merkle_root.hex(), "leaf_size": LEAF_SIZE}
    return replace(descriptor, retrieval={**descriptor.retrieval, "integrity": integrity})


class ProvingHost:
    """What proved reads use of the vault (declared for the type checker only)."""

    if TYPE_CHECKING:

        def _audited(
            self, action: str, scope: object, artifact_id: object = None
        ) -> AbstractContextManager[dict[str, Any]]: ...
        def _open(
            self, scope: Scope, artifact_id: str, purpose: str, recipient: str, facts: dict[str, Any] | None
        ) -> tuple[Manifest, VerifiedBlob]: ...
        @property
        def _audit_log(self) -> object: ...
        def _charge_read(self, scope: Scope, data: bytes) -> None: ...


def _span(blob: VerifiedBlob, offset: int, length: int) -> tuple[int, int, int]:
    """``[offset, end)`` clipped to ``blob``, and the chunk size its proofs use (an inline blob is one chunk)."""
    end = min(blob.size, offset + length)
    step = CHUNK_SIZE if blob.record.inline is not None else blob.chunk_size
    return min(offset, end), end, step


def _proved(blob: VerifiedBlob, offset: int, length: int) -> ProvedRange:
    """Read ``[offset, offset + length)`` (clipped) from ``blob`` with what proving its sub-ranges needs: the bytes
    of the leaves it touches and the leaf hashes of the chunks it touches, each chunk read and verified once."""
    root, chunk_roots = blob.merkle()
    offset, end, step = _span(blob, offset, length)
    if end > offset:
        lo, hi = offset // LEAF_SIZE * LEAF_SIZE, min(blob.size, -(-end // LEAF_SIZE) * LEAF_SIZE)
        touched = range(lo // step, (hi - 1) // step + 1)
    else:  # nothing to read: only the leaf hashes around the boundary a proof of nothing is taken at
        lo = hi = offset
        touched = range(max(0, offset - 1) // step, min(offset, blob.size - 1) // step + 1) if blob.size else range(0)
    leaves: dict[int, list[bytes]] = {}
    parts: list[bytes] = []
    for index in touched:
        chunk = blob.chunk(index)  # verified against its chunk root; its leaf hashes come from the same pass
        leaves[index] = blob.chunk_leaves(index)
        base = index * step
        if hi > max(lo, base):
            parts.append(chunk[max(lo, base) - base : min(hi, base + len(chunk)) - base])
    aligned = parts[0] if len(parts) == 1 else b"".join(parts)
    data = aligned if (lo, hi) == (offset, end) else aligned[offset - lo : end - lo]
    return ProvedRange(data, offset, blob.size, root, step, chunk_roots, leaves, aligned, lo)


def _proof_of(blob: VerifiedBlob, offset: int, length: int) -> dict[str, Any]:
    """The proof of ``[offset, offset + length)`` (clipped), without reading the range: a proof needs only the
    leaf hashes of the (at most two) chunks the range covers in part, and the head and tail bytes inside them;
    every chunk it covers whole is its recorded chunk root. Memory: those chunks, whatever the span."""
    root, chunk_roots = blob.merkle()
    offset, end, step = _span(blob, offset, length)
    held: dict[int, bytes] = {}

    def verified(index: int) -> bytes:
        if index not in held:
            held[index] = blob.chunk(index)
        return held[index]

    def chunk_leaves(index: int) -> list[bytes]:
        verified(index)  # read and checked against its chunk root once; its leaf hashes computed in that pass
        return blob.chunk_leaves(index)

    def read(at: int, n: int) -> bytes:  # a head or a tail: inside one leaf, hence one chunk
        if n == 0:
            return b""
        index = at // step
        return verified(index)[at - index * step : at - index * step + n]

    proof = prove_range(
        size=blob.size,
        offset=offset,
        length=end - offset,
        chunk_size=step,
        chunk_roots=chunk_roots,
        chunk_leaves=chunk_leaves,
        read=read,
    )
    if proof["root"] != root.hex():  # cannot happen for verified chunks: refuse rather than hand out a bad proof
        raise IntegrityError(f"artifact {blob.artifact_id} failed verification: its proof misses its Merkle root")
    return proof


def _edges(proof: dict[str, Any]) -> bytes:
    """The stored bytes a proof discloses besides its excerpt: its head, then its tail."""
    return base64.b64decode(proof["head"]) + base64.b64decode(proof["tail"])


def _edge_detail(head: int, tail: int) -> str:
    return f"proof edges: head {head} tail {tail} bytes"


class Proving(ProvingHost):
    """The proved-read methods of :class:`refvault.Vault` (mixed in)."""

    def read_proved(
        self,
        scope: Scope,
        artifact_id: str,
        offset: int,
        length: int | None,
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> ProvedRange:
        """Verified bytes ``[offset, offset + length)`` (``None``: to the end, clipped to the artifact) with their
        inclusion proof (``.prove()``, or ``.prove(o, n)`` for a sub-range). Checked and audited like
        :meth:`~refvault.Vault.read_range`: scope, expiry, the tenant's policy, each chunk against its root.

        Its proofs disclose the rest of the first and last leaf the bytes touch (``head``/``tail``, up to
        ``leaf_size - 1`` bytes each side), so it is charged to the run's budget (before anything is returned:
        :class:`~refvault.errors.BudgetExceeded`) and recorded in the disclosure ledger as a read of the bytes
        and those edges: one read call, ``scanned_bytes`` and ``returned_tokens`` of data and edges; the entry's
        ``bytes`` counts both (its ``detail`` names the edges), its ``excerpt_hash`` is of the data alone."""
        with self._audited("read", scope, artifact_id) as facts:
            check_byte_span(offset, length)
            _, blob = self._open(scope, artifact_id, purpose, recipient, facts)
            try:
                proved = _proved(blob, offset, blob.size if length is None else length)
            finally:
                blob.close()
            data = proved.data
            disclosed = proved._aligned if data else b""  # what it and its proofs hand out: the data and the edges
            self._charge_read(scope, disclosed)  # the run's budget: before any byte is returned
            span = (proved.offset, proved.offset + len(data))
            facts.update(content_hash="sha256:" + blob.record.key.digest, byte_range=span, bytes=len(disclosed))
            if len(disclosed) > len(data):
                head = proved.offset - proved._aligned_at
                facts["detail"] = _edge_detail(head, len(disclosed) - len(data) - head)
            if self._audit_log is not None:
                whole = len(data) == blob.size
                excerpt = blob.record.key.digest if whole else hashlib.sha256(data).hexdigest()
                facts.update(excerpt_hash=excerpt)
        return proved

    def prove_range(
        self,
        scope: Scope,
        artifact_id: str,
        offset: int,
        length: int | None,
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> dict[str, Any]:
        """The inclusion proof of bytes ``[offset, offset + length)`` (clipped to the artifact), checkable with
        :func:`refvault.verify_excerpt` against the artifact's ``retrieval.integrity.merkle_root``.

        Reads only what the proof needs (at most the two chunks the range covers in part; never the range
        itself), so memory stays about two chunks whatever the span. The bytes it hands back are the proof's
        ``head`` and ``tail``: charged like a read of them (one read call, their ``scanned_bytes`` and
        ``returned_tokens``; :class:`~refvault.errors.BudgetExceeded` before anything is returned) and audited
        as a read (selection ``proof bytes a-b``) whose ``bytes`` and ``excerpt_hash`` are of head then tail."""
        with self._audited("read", scope, artifact_id) as facts:
            check_byte_span(offset, length)
            _, blob = self._open(scope, artifact_id, purpose, recipient, facts)
            try:
                proof = _proof_of(blob, offset, blob.size if length is None else length)
            finally:
                blob.close()
            edges = _edges(proof)
            self._charge_read(scope, edges)  # the run's budget: before any byte is returned
            start, end = proof["offset"], proof["offset"] + proof["length"]
            facts.update(content_hash="sha256:" + blob.record.key.digest, byte_range=(start, end), bytes=len(edges))
            facts["selection"] = f"proof bytes {start}-{end}"
            if edges:
                head = len(base64.b64decode(proof["head"]))
                facts["detail"] = _edge_detail(head, len(edges) - head)
                if self._audit_log is not None:  # what left: the edge bytes (the proved bytes did not)
                    facts["excerpt_hash"] = hashlib.sha256(edges).hexdigest()
        return proof
