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
with its proof forwards those neighbouring bytes too.
"""

from __future__ import annotations

import hashlib
import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from refvault.catalog.base import CHUNK_SIZE
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


def _proved(blob: VerifiedBlob, offset: int, length: int) -> ProvedRange:
    """Read ``[offset, offset + length)`` (clipped) from ``blob`` with what proving its sub-ranges needs."""
    root, chunk_roots = blob.merkle()
    step = CHUNK_SIZE if blob.record.inline is not None else blob.chunk_size  # an inline blob is one chunk
    end = min(blob.size, offset + length)
    offset = min(offset, end)
    lo = offset // LEAF_SIZE * LEAF_SIZE
    hi = min(blob.size, -(-end // LEAF_SIZE) * LEAF_SIZE)
    aligned = blob.read_range(lo, hi - lo) if hi > lo else b""
    leaves: dict[int, list[bytes]] = {}
    if hi > lo:
        for index in range(lo // step, (hi - 1) // step + 1):
            leaves[index] = blob.chunk_leaves(index)
    data = aligned[offset - lo : end - lo]
    return ProvedRange(data, offset, blob.size, root, step, chunk_roots, leaves, aligned, lo)


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
        :meth:`~refvault.Vault.read_range`: scope, expiry, the tenant's policy, each chunk against its root."""
        with self._audited("read", scope, artifact_id) as facts:
            check_byte_span(offset, length)
            _, blob = self._open(scope, artifact_id, purpose, recipient, facts)
            try:
                proved = _proved(blob, offset, blob.size if length is None else length)
            finally:
                blob.close()
            data = proved.data
            span = (proved.offset, proved.offset + len(data))
            facts.update(content_hash="sha256:" + blob.record.key.digest, byte_range=span)
            if self._audit_log is not None:
                whole = len(data) == blob.size
                excerpt = blob.record.key.digest if whole else hashlib.sha256(data).hexdigest()
                facts.update(bytes=len(data), excerpt_hash=excerpt)
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
        :func:`refvault.verify_excerpt` against the artifact's ``retrieval.integrity.merkle_root``."""
        return self.read_proved(scope, artifact_id, offset, length, purpose=purpose, recipient=recipient).prove()
