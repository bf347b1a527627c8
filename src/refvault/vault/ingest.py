"""Turning caller data into sealed, hashed bytes.

``data`` may be ``bytes``-like, a binary file object or an iterable of
``bytes``. It is consumed once, in aligned 1 MiB chunks, so memory stays
bounded whatever the input size, and hashed once with SHA-256 (the content
hash). In the same pass each chunk's Merkle subtree hash is computed
(:mod:`refvault.proofs`: 4 KiB leaves, so a 1 MiB chunk is a complete subtree)
on a helper thread (hashlib releases the GIL for each leaf), and the root over
them is recorded with the blob: it is what inclusion proofs are checked
against, and it verifies each chunk a selective read loads.

Small inputs (at most ``inline_max`` bytes) stay in memory and are stored in
the catalog row itself. Larger ones stream into a private blob writer; past
the first two chunks a helper thread does the writing, so hashing and the
copy into the page cache overlap on two cores.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from refvault.blobs.base import BlobKey, BlobStore, BlobWriter
from refvault.catalog.base import CHUNK_SIZE, BlobRecord
from refvault.errors import InvalidArgument, StorageError
from refvault.proofs import LEAF_SIZE, chunk_root, root_of_chunks

__all__ = ["Ingested", "ingest"]


@dataclass(slots=True)
class Ingested:
    """The result of consuming the input: digest, size, and where the bytes are."""

    digest: str
    size: int
    inline: bytes | None
    writer: BlobWriter | None
    chunk_roots: bytes | None = None

    def record(self, namespace: str) -> BlobRecord:
        roots = self.chunk_roots
        return BlobRecord(
            key=BlobKey(namespace, self.digest),
            size=self.size,
            chunk_size=CHUNK_SIZE,
            chunk_digests=b"",
            inline=self.inline,
            merkle_root=None if roots is None else root_of_chunks(self.size, roots),
            chunk_roots=roots,
        )


assert CHUNK_SIZE % LEAF_SIZE == 0  # every chunk is a complete Merkle subtree
MERKLE = True
"""Whether capture computes Merkle roots (a benchmark turns it off to measure what they cost)."""


class _Hasher:
    """Computes chunk roots on a helper thread, in order, at most a few chunks behind."""

    def __init__(self) -> None:
        self._queue: queue.Queue[memoryview | None] = queue.Queue(maxsize=8)
        self._roots = bytearray()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="refvault-hasher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (chunk := self._queue.get()) is not None:
            if self._error is not None:
                continue
            try:
                self._roots += chunk_root(chunk)
            except BaseException as exc:  # handed to the caller in finish()
                self._error = exc

    def add(self, chunk: memoryview) -> None:
        self._queue.put(chunk)

    def finish(self) -> bytes:
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error
        return bytes(self._roots)

    def stop(self) -> None:
        """Wait until the helper has exited, even through further interrupts (an error is propagating)."""
        while self._thread.is_alive():
            with contextlib.suppress(BaseException):
                with contextlib.suppress(queue.Full):
                    self._queue.put(None, timeout=0.1)
                self._thread.join(timeout=0.1)


def _owned(piece: bytes | bytearray | memoryview) -> memoryview:
    """A view the source cannot change under us (a reader may reuse its buffer)."""
    return memoryview(piece if isinstance(piece, bytes) else bytes(piece)).cast("B")


def _pieces(data: object) -> Iterator[memoryview]:
    if isinstance(data, str):
        raise InvalidArgument("data must be bytes, a binary file or an iterable of bytes; encode text first")
    if isinstance(data, bytes | bytearray | memoryview):
        view = memoryview(data)
        if not view.c_contiguous:
            raise InvalidArgument("a memoryview given as data must be C-contiguous")
        view = view.cast("B")
        # Each chunk is hashed and then written: unless the memory is immutable
        # (a bytes object), it is copied chunk by chunk so the bytes written are the
        # bytes hashed. A read-only view over a bytearray can still change underneath.
        mutable = not isinstance(view.obj, bytes)
        for start in range(0, len(view), CHUNK_SIZE):
            piece = view[start : start + CHUNK_SIZE]
            yield memoryview(bytes(piece)) if mutable else piece
        return
    read = getattr(data, "read", None)
    if callable(read):
        while True:
            piece = read(CHUNK_SIZE)
            if piece is None:
                raise InvalidArgument("the file is in non-blocking mode and had no data ready; pass a blocking file")
            if not isinstance(piece, bytes | bytearray | memoryview):
                raise InvalidArgument("the file must be opened in binary mode ('rb')")
            if not piece:
                return
            yield _owned(piece)
    if isinstance(data, Iterable):
        for piece in data:
            if not isinstance(piece, bytes | bytearray | memoryview):
                raise InvalidArgument("an iterable given as data must yield bytes")
            yield _owned(piece)
        return
    raise InvalidArgument("data must be bytes, a binary file or an iterable of bytes")


def aligned_chunks(data: object) -> Iterator[memoryview]:
    """Yield the input as full ``CHUNK_SIZE`` chunks (the last may be short, or none if empty)."""
    pending = bytearray()
    for piece in _pieces(data):
        if not pending and len(piece) == CHUNK_SIZE:
            yield piece
            continue
        pending += piece
        while len(pending) >= CHUNK_SIZE:
            yield memoryview(bytes(pending[:CHUNK_SIZE]))
            del pending[:CHUNK_SIZE]
    if pending:
        yield memoryview(bytes(pending))


class _BackgroundWriter:
    """Writes chunks on a helper thread, in order, at most a few chunks behind."""

    def __init__(self, writer: BlobWriter) -> None:
        self._writer = writer
        self._queue: queue.Queue[memoryview | None] = queue.Queue(maxsize=4)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="refvault-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (chunk := self._queue.get()) is not None:
            if self._error is not None:
                continue
            try:
                self._writer.write(chunk)
            except BaseException as exc:  # handed to the caller in finish()
                self._error = exc

    def write(self, chunk: memoryview) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(chunk)

    def finish(self) -> None:
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        """Wait until the helper has exited, even through further interrupts.

        Called while an error is already propagating (that error is the one the
        caller sees), so anything raised while waiting is dropped.
        """
        self._error = self._error or InvalidArgument("capture abandoned")  # the helper skips what is left
        while self._thread.is_alive():
            with contextlib.suppress(BaseException):
                with contextlib.suppress(queue.Full):
                    self._queue.put(None, timeout=0.1)
                self._thread.join(timeout=0.1)


class _StoreErrors:
    """A blob writer whose I/O errors are :class:`StorageError` even where its store let an ``OSError`` through.

    Only the store's calls are wrapped: an ``OSError`` raised by the caller's input (a source that went
    away) reaches the caller as it is.
    """

    __slots__ = ("_writer",)

    def __init__(self, writer: BlobWriter) -> None:
        self._writer = writer

    def write(self, data: bytes | memoryview) -> None:
        try:
            self._writer.write(data)
        except StorageError:
            raise
        except OSError as exc:
            raise _store_error(exc) from None

    def seal(self, key: BlobKey) -> None:
        try:
            self._writer.seal(key)
        except StorageError:
            raise
        except OSError as exc:
            raise _store_error(exc) from None

    def publish(self, key: BlobKey) -> None:
        self._writer.publish(key)

    def abort(self) -> None:
        self._writer.abort()


def _store_error(exc: OSError) -> StorageError:
    return StorageError(exc.errno or errno.EIO, f"writing a blob failed: {exc.strerror or 'I/O error'}")


def ingest(data: object, blobs: BlobStore, *, namespace: str, inline_max: int) -> Ingested:
    """Consume ``data`` once; return its digests and a writer sealed for ``namespace`` (or the inline bytes)."""
    chunks = aligned_chunks(data)
    full = hashlib.sha256()
    first = next(chunks, None)
    second = next(chunks, None) if first is not None else None
    if second is None and (first is None or len(first) <= inline_max):  # small: keep inline
        inline = b"" if first is None else bytes(first)
        full.update(inline)
        roots = (chunk_root(inline) if inline else b"") if MERKLE else None
        return Ingested(full.hexdigest(), len(inline), inline, None, roots)

    writer = _StoreErrors(blobs.writer())
    background: _BackgroundWriter | None = None
    hasher = _Hasher() if MERKLE else None
    size = 0
    try:
        heads = [chunk for chunk in (first, second) if chunk is not None]
        for index, chunk in enumerate(itertools.chain(heads, chunks)):
            if index == 2 and background is None:
                background = _BackgroundWriter(writer)
            if hasher is not None:
                hasher.add(chunk)
            if background is not None:
                background.write(chunk)
            else:
                writer.write(chunk)
            full.update(chunk)
            size += len(chunk)
        roots = None if hasher is None else hasher.finish()
        hasher = None
        if background is not None:
            background.finish()
            background = None
        writer.seal(BlobKey(namespace, full.hexdigest()))
    except BaseException:
        if hasher is not None:
            hasher.stop()
        if background is not None:
            background.stop()  # the helper must be gone before the writer's file is closed
        writer.abort()
        raise
    return Ingested(full.hexdigest(), size, None, writer, roots)
