"""Verified access to stored bytes: nothing unverified ever leaves this module.

What is verified, and when:

* Opening checks that the blob record exists, that the stored object exists
  and that its size equals the recorded size (a truncated or appended blob
  fails here, before any byte is read).
* Inline blobs (small ones kept in the catalog) are hashed whole against the
  content hash at open.
* A whole read of a stored blob reads it once through one handle and hashes
  it once against the content hash before returning anything.
* Selective reads (streams, ranges) verify 1 MiB chunks against per-chunk
  SHA-256 digests before returning any byte of them. Capture hashes each byte
  only once, so chunk digests are derived on the first selective read: one
  pass over the blob computes the content hash and every chunk digest from the
  same bytes; only if the content hash matches are the chunk digests recorded
  in the catalog (trusted state from then on). Later windows cost only the
  chunks they touch. ``verify`` re-checks both.
* Where the blob record carries Merkle chunk roots (:mod:`refvault.proofs`; every
  capture since they exist), a chunk is verified by recomputing its leaf hashes
  and their subtree hash against its recorded chunk root instead: one hash pass,
  whose leaf hashes then serve the chunk's inclusion proofs. An older blob gains
  its roots from the next pass that re-hashes all of it (``read_all``, ``check``,
  or the first proof asked of it), recorded only if the content hash matched in
  that same pass. Roots derived so are also remembered in this process (keyed by
  the blob's content digest and chunk size, at most :data:`DERIVED_ROOTS` blobs),
  so a catalog that cannot record them (read-only, busy) costs one such pass per
  process, not one per read.
* Every read opens the object once and reads only through that handle, so
  verification and selection bind to the same object version.

Any mismatch raises :class:`~refvault.errors.IntegrityError` naming the
artifact id and the kind of damage, never the bytes.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace

from refvault import observe
from refvault.blobs.base import BlobKey, BlobReader, BlobStore
from refvault.catalog.base import BlobRecord, Catalog
from refvault.errors import IntegrityError, InvalidArgument, StorageError
from refvault.proofs import LEAF_SIZE, leaf_hashes, root_of, root_of_chunks, tree_hash

__all__ = ["DERIVED_ROOTS", "ArtifactStream", "VerifiedBlob"]

DERIVED_ROOTS = 256
"""How many blobs' derived Merkle roots a process remembers (32 bytes per chunk each; oldest forgotten first)."""

_derived: dict[tuple[str, int], tuple[bytes, bytes]] = {}  # (digest, chunk size) -> (root, chunk roots)
_derived_lock = threading.Lock()


def _remember(key: tuple[str, int], root: bytes, roots: bytes) -> None:
    with _derived_lock:
        if key not in _derived and len(_derived) >= DERIVED_ROOTS:
            _derived.pop(next(iter(_derived)))
        _derived[key] = (root, roots)


def _why(exc: OSError) -> str:
    """The system's words for an I/O error (``strerror``: "Input/output error"), never a path."""
    return exc.strerror or (errno.errorcode.get(exc.errno or 0) or type(exc).__name__)


class VerifiedBlob:
    """One artifact's bytes, opened once, handed out only after verification."""

    def __init__(self, artifact_id: str, key: BlobKey, size: int, catalog: Catalog, blobs: BlobStore) -> None:
        self.artifact_id = artifact_id
        self._catalog = catalog
        record = catalog.blob(key)
        if record is None:
            raise self._damage("its blob record is missing", kind="missing")
        if record.size != size:
            raise self._damage("its blob record disagrees with the manifest")
        self.record: BlobRecord = record
        self.size = record.size
        self._reader: BlobReader | None = None
        self._leaves: dict[int, list[bytes]] = {}  # the leaf hashes of the chunks verified last
        if record.inline is not None:
            if len(record.inline) != record.size or hashlib.sha256(record.inline).hexdigest() != record.key.digest:
                raise self._damage("its inline bytes do not match the content hash")
            self.chunk_size = max(record.size, 1)
            return
        self.chunk_size = record.chunk_size
        try:
            reader = blobs.open(record.key)
        except StorageError:
            raise
        except OSError as exc:
            raise StorageError(exc.errno or errno.EIO, f"opening artifact {artifact_id} failed: {_why(exc)}") from None
        if reader is None:
            raise self._damage("its stored bytes are missing", kind="missing")
        if reader.size != record.size:
            reader.close()
            kind = "truncated" if reader.size < record.size else "longer than recorded (appended)"
            raise self._damage(f"its stored bytes are {kind}")
        if record.chunk_digests and record.chunks != -(-record.size // record.chunk_size):
            reader.close()
            raise self._damage("its chunk digests are incomplete")
        if record.chunk_roots is not None and len(record.chunk_roots) != 32 * self.chunks:
            reader.close()
            raise self._damage("its chunk roots are incomplete")
        self._reader = reader

    def _damage(self, what: str, *, kind: str = "corrupt") -> IntegrityError:
        self.detail = what
        observe.event("integrity_failure", kind)
        return IntegrityError(f"artifact {self.artifact_id} failed verification: {what}", kind=kind)

    @property
    def chunks(self) -> int:
        return -(-self.size // self.chunk_size) if self.size else 0

    def chunk(self, index: int) -> bytes:
        """The verified bytes of chunk ``index``."""
        if self.record.inline is not None:
            return self.record.inline
        if self.record.chunk_roots is not None:  # the Merkle subtree of the chunk: one pass, leaves kept for proofs
            data = self._raw_chunk(index)
            leaves = leaf_hashes(data)
            if tree_hash(leaves) != self.record.chunk_root(index):
                raise self._damage(f"chunk {index} does not match its Merkle chunk root")
            if len(self._leaves) >= 4:
                self._leaves.pop(next(iter(self._leaves)))
            self._leaves[index] = leaves
            return data
        if not self.record.chunk_digests:
            self.derive_chunk_digests()  # Merkle roots are gained in that pass too
            return self.chunk(index)
        data = self._raw_chunk(index)
        if hashlib.sha256(data).digest() != self.record.chunk_digest(index):
            raise self._damage(f"chunk {index} does not match its digest")
        return data

    def chunk_leaves(self, index: int) -> list[bytes]:
        """The leaf hashes of chunk ``index``, from verified bytes (for proofs; see :mod:`refvault.proofs`)."""
        if self.record.inline is not None:
            return leaf_hashes(self.record.inline)
        if self.record.chunk_roots is None:
            self.merkle()
        if index not in self._leaves:
            self.chunk(index)
        return self._leaves[index]

    def merkle(self) -> tuple[bytes, list[bytes]]:
        """The verified Merkle root and chunk roots (each ``chunk_size`` bytes; an inline blob is one chunk),
        deriving them first for a blob captured before roots existed."""
        if self.record.inline is not None:
            if self.record.merkle_root is not None and self.record.chunk_roots is not None:
                return self.record.merkle_root, [self.record.chunk_roots] if self.size else []
            own = [tree_hash(leaf_hashes(self.record.inline))] if self.size else []
            return root_of(self.size, tree_hash(own)), own
        if self.record.chunk_roots is None or self.record.merkle_root is None:
            known = _derived.get((self.record.key.digest, self.chunk_size))
            if known is not None:  # derived from verified bytes earlier in this process: record them (best effort)
                self._gained(None, known[1])
            else:
                self.derive_merkle()
        assert self.record.chunk_roots is not None
        assert self.record.merkle_root is not None
        roots = self.record.chunk_roots
        return self.record.merkle_root, [roots[i : i + 32] for i in range(0, len(roots), 32)]

    def derive_merkle(self) -> None:
        """Check the content hash over every byte and, in the same pass, compute and record the Merkle roots."""
        content_hash, digests, roots = self._scan()
        if content_hash != self.record.key.digest:
            raise self._damage("its bytes do not match the content hash")
        self._gained(digests, roots)

    def _raw_chunk(self, index: int) -> bytes:
        assert self._reader is not None
        start = index * self.chunk_size
        length = min(self.chunk_size, self.size - start)
        data = self._read(start, length)
        if len(data) != length:
            raise self._damage(f"chunk {index} is truncated")
        return data

    def _read(self, offset: int, length: int) -> bytes:
        """Raw bytes from the store; an I/O error any store lets through (EIO from a disk) is a StorageError."""
        assert self._reader is not None
        try:
            return self._reader.read(offset, length)
        except StorageError:
            raise
        except OSError as exc:
            raise StorageError(
                exc.errno or errno.EIO, f"reading artifact {self.artifact_id} failed: {_why(exc)}"
            ) from None

    def _scan(self) -> tuple[str, bytes, bytes]:
        """One pass: the content hash, every chunk digest and every Merkle chunk root, from the same bytes."""
        full = hashlib.sha256()
        digests = bytearray()
        roots = bytearray()
        for index in range(self.chunks):
            data = self._raw_chunk(index)
            full.update(data)
            digests += hashlib.sha256(data).digest()
            roots += tree_hash(leaf_hashes(data))
        return full.hexdigest(), bytes(digests), bytes(roots)

    def _gained(self, digests: bytes | None, roots: bytes | None) -> None:
        """Record chunk digests and Merkle roots computed in a pass whose content hash matched (best effort:
        a later reader derives them again)."""
        if digests is not None and not self.record.chunk_digests and self.record.chunk_roots is None:
            self.record = replace(self.record, chunk_digests=digests)
            with contextlib.suppress(StorageError):
                self._catalog.record_chunks(self.record.key, self.chunk_size, digests)
        if roots is not None and self.record.merkle_root is None and self.chunk_size % LEAF_SIZE == 0:
            root = root_of_chunks(self.size, roots)
            self.record = replace(self.record, merkle_root=root, chunk_roots=roots)
            _remember((self.record.key.digest, self.chunk_size), root, roots)
            with contextlib.suppress(StorageError):
                self._catalog.record_merkle(self.record.key, self.chunk_size, roots, root)

    def derive_chunk_digests(self) -> None:
        """Compute and record chunk digests (and Merkle roots), after checking the content hash over the same bytes."""
        content_hash, digests, roots = self._scan()
        if content_hash != self.record.key.digest:
            raise self._damage("its bytes do not match the content hash")
        self._gained(digests, roots)

    def read_all(self) -> bytes:
        """Every byte, verified against the content hash; one read and one hash pass."""
        if self.record.inline is not None:
            return self.record.inline
        data = self._read(0, self.size)
        if len(data) != self.size:
            raise self._damage("it is shorter than recorded")
        if hashlib.sha256(data).hexdigest() != self.record.key.digest:
            raise self._damage("its bytes do not match the content hash")
        if self.record.merkle_root is None:  # an older blob gains its roots from this verified pass
            view, step = memoryview(data), self.chunk_size
            self._gained(None, b"".join(tree_hash(leaf_hashes(view[i : i + step])) for i in range(0, self.size, step)))
        return data

    def read_range(self, offset: int, length: int) -> bytes:
        """Verified bytes ``[offset, offset + length)``, clipped to the artifact."""
        end = min(self.size, offset + length)
        if offset >= end:
            return b""
        first, last = offset // self.chunk_size, (end - 1) // self.chunk_size
        joined = b"".join(self.chunk(i) for i in range(first, last + 1))
        base = first * self.chunk_size
        return joined[offset - base : end - base]

    def check(self) -> None:
        """Re-hash every byte: content hash and, where recorded, chunk digests (for ``verify``)."""
        if self.record.inline is not None:
            return  # verified whole at open
        content_hash, digests, roots = self._scan()
        if content_hash != self.record.key.digest:
            raise self._damage("its bytes do not match the content hash")
        if self.record.chunk_digests and digests != self.record.chunk_digests:
            raise self._damage("its recorded chunk digests do not match its bytes")
        if self.record.chunk_roots is not None and roots != self.record.chunk_roots:
            raise self._damage("its recorded Merkle chunk roots do not match its bytes")
        if self.record.merkle_root is not None and root_of_chunks(self.size, roots) != self.record.merkle_root:
            raise self._damage("its recorded Merkle root does not match its bytes")
        self._gained(digests, roots)  # whatever was not recorded yet

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


class ArtifactStream(io.RawIOBase):
    """A read-only, seekable binary stream over one artifact, verified chunk by chunk.

    Memory use is one chunk (1 MiB). A damaged chunk raises
    :class:`~refvault.errors.IntegrityError` from ``read`` before any of its
    bytes are returned. Use as a context manager, or call ``close``.
    """

    def __init__(self, blob: VerifiedBlob, guard: Callable[[], None] | None = None) -> None:
        super().__init__()
        self._blob = blob
        self._guard = guard
        self._pos = 0
        self._chunk_index = -1
        self._chunk = b""
        self._observer: Callable[[int, bytes], None] | None = None

    def on_chunk(self, observer: Callable[[int, bytes], None]) -> None:
        """Call ``observer(offset, chunk)`` with each verified chunk as it is loaded (e.g. to protect it)."""
        self._observer = observer

    @property
    def size(self) -> int:
        return self._blob.size

    @property
    def record(self) -> BlobRecord:
        """The blob record the stream verifies against (its Merkle root among it)."""
        return self._blob.record

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        bases = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._blob.size}
        if whence not in bases:
            raise InvalidArgument(f"invalid whence ({whence}); use 0, 1 or 2")
        base = bases[whence]
        if base + offset < 0:
            raise InvalidArgument("negative seek position")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        """Fill ``buffer`` as far as the artifact allows (short only at the end)."""
        if self.closed:
            raise InvalidArgument("I/O operation on closed stream")
        target = memoryview(buffer).cast("B")
        filled = 0
        while filled < len(target) and self._pos < self._blob.size:
            index = self._pos // self._blob.chunk_size
            if index != self._chunk_index:
                if self._guard is not None:
                    self._guard()  # e.g. the artifact expired while the stream was open
                self._chunk = self._blob.chunk(index)
                self._chunk_index = index
                if self._observer is not None:
                    self._observer(index * self._blob.chunk_size, self._chunk)
            start = self._pos - index * self._blob.chunk_size
            piece = self._chunk[start : start + len(target) - filled]
            target[filled : filled + len(piece)] = piece
            filled += len(piece)
            self._pos += len(piece)
        return filled

    def iter_chunks(self) -> Iterator[bytes]:
        """Yield the rest of the artifact in verified chunks."""
        while chunk := self.read(self._blob.chunk_size):
            yield chunk

    def close(self) -> None:
        if not self.closed:
            self._blob.close()
            self._chunk = b""
        super().close()
