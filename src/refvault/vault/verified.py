"""Verified access to stored bytes: nothing unverified ever leaves this module.

What is verified, and when:

* Opening checks that the blob record exists, that the stored object exists
  and that its size equals the recorded size (a truncated or appended blob
  fails here, before any byte is read).
* Inline blobs (small ones kept in the catalog) are hashed whole against the
  content hash at open.
* Blobs in a blob store are read in 1 MiB chunks, and each chunk is hashed
  against its recorded SHA-256 before any byte of it is returned. Chunk
  digests were computed at capture from the same bytes as the content hash,
  and are trusted catalog state. So a full read costs one SHA-256 pass, and a
  window costs only the chunks it touches, without weakening the guarantee.
* Every read opens the object once and reads only through that handle, so
  verification and selection bind to the same object version.

Any mismatch raises :class:`~refvault.errors.IntegrityError` naming the
artifact id and the kind of damage, never the bytes.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator

from refvault.blobs.base import BlobKey, BlobReader, BlobStore
from refvault.catalog.base import BlobRecord, Catalog
from refvault.errors import IntegrityError

__all__ = ["ArtifactStream", "VerifiedBlob"]


class VerifiedBlob:
    """One artifact's bytes, opened once, handed out only after verification."""

    def __init__(self, artifact_id: str, key: BlobKey, size: int, catalog: Catalog, blobs: BlobStore) -> None:
        self.artifact_id = artifact_id
        record = catalog.blob(key)
        if record is None:
            raise self._damage("its blob record is missing", kind="missing")
        if record.size != size:
            raise self._damage("its blob record disagrees with the manifest")
        self.record: BlobRecord = record
        self.size = record.size
        self._reader: BlobReader | None = None
        if record.inline is not None:
            if len(record.inline) != record.size or hashlib.sha256(record.inline).hexdigest() != record.key.digest:
                raise self._damage("its inline bytes do not match the content hash")
            self.chunk_size = max(record.size, 1)
            return
        self.chunk_size = record.chunk_size
        reader = blobs.open(record.key)
        if reader is None:
            raise self._damage("its stored bytes are missing", kind="missing")
        if reader.size != record.size:
            reader.close()
            kind = "truncated" if reader.size < record.size else "longer than recorded (appended)"
            raise self._damage(f"its stored bytes are {kind}")
        if record.chunks != -(-record.size // record.chunk_size):
            reader.close()
            raise self._damage("its chunk digests are incomplete")
        self._reader = reader

    def _damage(self, what: str, *, kind: str = "corrupt") -> IntegrityError:
        self.detail = what
        return IntegrityError(f"artifact {self.artifact_id} failed verification: {what}", kind=kind)

    @property
    def chunks(self) -> int:
        return -(-self.size // self.chunk_size) if self.size else 0

    def chunk(self, index: int) -> bytes:
        """The verified bytes of chunk ``index``."""
        if self.record.inline is not None:
            return self.record.inline
        assert self._reader is not None
        start = index * self.chunk_size
        length = min(self.chunk_size, self.size - start)
        data = self._reader.read(start, length)
        if len(data) != length:
            raise self._damage(f"chunk {index} is truncated")
        if hashlib.sha256(data).digest() != self.record.chunk_digest(index):
            raise self._damage(f"chunk {index} does not match its digest")
        return data

    def read_all(self) -> bytes:
        """Every byte, verified; one read and one hash pass."""
        if self.record.inline is not None:
            return self.record.inline
        assert self._reader is not None
        data = self._reader.read(0, self.size)
        if len(data) != self.size:
            raise self._damage("it is shorter than recorded")
        view = memoryview(data)
        for index in range(self.chunks):
            piece = view[index * self.chunk_size : (index + 1) * self.chunk_size]
            if hashlib.sha256(piece).digest() != self.record.chunk_digest(index):
                raise self._damage(f"chunk {index} does not match its digest")
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

    def full_digest(self) -> str:
        """Re-hash every byte with SHA-256 (what ``verify`` compares with the content hash)."""
        full = hashlib.sha256()
        for index in range(self.chunks):
            full.update(self.chunk(index))
        return full.hexdigest()

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

    def __init__(self, blob: VerifiedBlob) -> None:
        super().__init__()
        self._blob = blob
        self._pos = 0
        self._chunk_index = -1
        self._chunk = b""

    @property
    def size(self) -> int:
        return self._blob.size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._blob.size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        """Fill ``buffer`` as far as the artifact allows (short only at the end)."""
        if self.closed:
            raise ValueError("I/O operation on closed stream")
        target = memoryview(buffer).cast("B")
        filled = 0
        while filled < len(target) and self._pos < self._blob.size:
            index = self._pos // self._blob.chunk_size
            if index != self._chunk_index:
                self._chunk = self._blob.chunk(index)
                self._chunk_index = index
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
