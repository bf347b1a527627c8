"""Filesystem blob store: the embedded default.

Layout under the store root (every name below ``blobs/`` is hex)::

    blobs/<namespace:32 hex>/<digest[:2]>/<digest:64 hex>    read-only published objects
    tmp/<random hex>.tmp                                   private temporaries

Writing bytes safely: temporary file, written by
the caller while it hashes, ``fsync`` of the file, ``rename`` into place,
``fsync`` of the destination directory (and of any directory just created).
The temporary lives in ``tmp/`` on the same filesystem rather than in the
destination directory because the destination is named by a digest that is
only known once the last byte is written; ``rename`` is atomic either way and
the directory that gains the entry is the one made durable. Any ``fsync``
error fails the write.

Every path is opened relative to directory descriptors held from the store
root down, with ``O_NOFOLLOW`` at each step: a symlink or special file planted
inside the store is never followed; on read it counts as a missing blob
(which the vault reports as an integrity failure), on write as a
:class:`~refvault.errors.StorageError`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import secrets
import stat
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

from refvault.blobs.base import BlobKey
from refvault.errors import StorageError

__all__ = ["FilesystemBlobStore"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_UNSAFE = (errno.ELOOP, errno.ENOTDIR)


def _storage_error(action: str, exc: OSError) -> StorageError:
    return StorageError(exc.errno or errno.EIO, f"{action} failed: {exc.strerror or exc}")


def _open_dir(name: str, parent_fd: int, *, create: bool) -> tuple[int, bool]:
    """Open directory ``name`` under ``parent_fd`` without following links; maybe create it.

    Returns the descriptor and whether this call created the directory.
    """
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd), False
    except FileNotFoundError:
        if not create:
            raise
    created = False
    try:
        os.mkdir(name, 0o750, dir_fd=parent_fd)
        created = True
    except FileExistsError:
        pass  # another writer made it first
    return os.open(name, _DIR_FLAGS, dir_fd=parent_fd), created


_WRITEBACK_EVERY = 8 << 20
_SYNC_FILE_RANGE_WRITE = 2


@functools.cache
def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's ``sync_file_range`` (Linux), or None where it is unavailable."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (AttributeError, OSError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return cast(Callable[[int, int, int, int], int], function)


def _fsync(fd: int, what: str) -> None:
    try:
        os.fsync(fd)
    except OSError as exc:
        raise _storage_error(f"fsync of {what}", exc) from None


class _FileReader:
    __slots__ = ("_fd", "size")

    def __init__(self, fd: int, size: int) -> None:
        self._fd = fd
        self.size = size

    def read(self, offset: int, length: int) -> bytes:
        try:
            data = os.pread(self._fd, length, offset)
            if len(data) in (0, length):
                return data
            parts = [data]  # a short read before the end: keep reading
            got = len(data)
            while got < length:
                more = os.pread(self._fd, length - got, offset + got)
                if not more:
                    break
                parts.append(more)
                got += len(more)
        except OSError as exc:  # EIO from the disk: a storage failure, never fewer or other bytes
            raise _storage_error("reading a blob", exc) from None
        return b"".join(parts)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class _FileWriter:
    __slots__ = ("_fd", "_kicked", "_name", "_published", "_store", "_written")

    def __init__(self, store: FilesystemBlobStore) -> None:
        self._store = store
        self._published: BlobKey | None = None
        self._written = 0
        self._kicked = 0
        self._fd = -1
        for _ in range(3):
            self._name = secrets.token_hex(16) + ".tmp"
            try:
                self._fd = os.open(
                    self._name,
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                    0o600,
                    dir_fd=store._tmp_fd,
                )
            except OSError as exc:
                raise _storage_error("creating a temporary file", exc) from None
            # The lock is held until the bytes are published or discarded, so gc's sweep
            # never removes a temporary in use. A sweep can win the race between create
            # and lock (the file looks old with grace 0): then start again with a new name.
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.fstat(self._fd).st_nlink > 0:
                    return
            except BlockingIOError:
                pass
            self.abort()
        raise StorageError(errno.EAGAIN, "could not create a temporary file: gc kept removing it; retry")

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            self.abort()
            raise _storage_error("writing a temporary file", exc) from None
        self._written += len(data)
        if self._written - self._kicked >= _WRITEBACK_EVERY:
            self._start_writeback()

    def _start_writeback(self) -> None:
        """Ask the kernel to start writing what we wrote so far, without waiting.

        The final fsync then finds little left to do, so disk I/O overlaps the
        hashing of later chunks. Advisory only: errors surface at fsync.
        """
        start = _sync_file_range()
        if start is not None:
            start(self._fd, self._kicked, self._written - self._kicked, _SYNC_FILE_RANGE_WRITE)
        self._kicked = self._written

    def seal(self, key: BlobKey) -> None:
        try:
            os.fchmod(self._fd, 0o440)
            _fsync(self._fd, "a blob")
        except BaseException:
            self.abort()
            raise

    def publish(self, key: BlobKey) -> None:
        if self._published is not None:
            # A retry after a failed transaction: the rename already happened, outside
            # the lock that failed; the bytes must still be there to be referenced.
            if self._published != key or not self._store.exists(key):
                raise StorageError(errno.ENOENT, "the blob vanished before its manifest committed; retry the put")
            return
        try:
            os.utime(self._fd)  # the object's age counts from publication (gc's grace)
            self._store._publish(self._name, key)  # still open and locked: safe from the sweep
            self._published = key
            os.close(self._fd)
            self._fd = -1
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        with contextlib.suppress(OSError):
            os.unlink(self._name, dir_fd=self._store._tmp_fd)


class FilesystemBlobStore:
    """Blobs as read-only files under ``root`` (see the module docstring for the layout).

    ``read_only``: the store is opened as it is, on media that may be read-only: nothing is created,
    synced or written (no directory, no temporary), and :meth:`writer` and :meth:`delete` raise
    :class:`StorageError`. ``blobs/`` must exist; a missing ``tmp/`` holds no temporaries.
    """

    def __init__(self, root: str | os.PathLike[str], *, read_only: bool = False) -> None:
        self.root = Path(root)
        self.read_only = read_only
        self._tmp_fd = -1
        try:
            if not read_only:
                self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            self._blobs_fd, _ = _open_dir("blobs", self._root_fd, create=not read_only)
            if not read_only:
                self._tmp_fd, _ = _open_dir("tmp", self._root_fd, create=True)
                _fsync(self._root_fd, "the store root")
            else:
                with contextlib.suppress(FileNotFoundError):
                    self._tmp_fd, _ = _open_dir("tmp", self._root_fd, create=False)
        except OSError as exc:
            self.close()
            raise _storage_error("opening the blob store", exc) from None
        # Namespaces whose directory entries this process has made durable itself.
        self._durable: set[str] = set()

    def _writable(self, action: str) -> None:
        if self.read_only:
            raise StorageError(errno.EROFS, f"{action} failed: the store was opened read-only")

    # -- writing ---------------------------------------------------------------

    def writer(self) -> _FileWriter:
        self._writable("creating a temporary file")
        return _FileWriter(self)

    def _namespace(self, namespace: str) -> int:
        """Open a namespace directory, creating it with all 256 shard directories if needed.

        Each process fsyncs a namespace directory and its parent once before
        its first publication there, rather than trusting that whoever created
        them did: that creator may have been killed before its fsync. Because
        shards are created up front, this one fsync makes all their entries
        durable.
        """
        ns_fd, _ = _open_dir(namespace, self._blobs_fd, create=True)
        try:
            if namespace not in self._durable:
                # Whoever created the namespace may have died part way: complete it, then
                # one fsync makes every shard entry durable for this process's publications.
                for shard in range(256):
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(f"{shard:02x}", 0o750, dir_fd=ns_fd)
                _fsync(ns_fd, "a blob directory")
                _fsync(self._blobs_fd, "the blob root")
                self._durable.add(namespace)
        except BaseException:
            os.close(ns_fd)
            raise
        return ns_fd

    def _publish(self, temp_name: str, key: BlobKey) -> None:
        fds: list[int] = []
        try:
            ns_fd = self._namespace(key.namespace)
            fds.append(ns_fd)
            shard_fd, created = _open_dir(key.digest[:2], ns_fd, create=True)
            fds.append(shard_fd)
            if created:  # a shard missing from its namespace (its creator was interrupted)
                _fsync(ns_fd, "a blob directory")
            os.replace(temp_name, key.digest, src_dir_fd=self._tmp_fd, dst_dir_fd=shard_fd)
            _fsync(shard_fd, "a blob directory")
        except StorageError:
            raise
        except OSError as exc:
            if exc.errno in _UNSAFE:
                raise StorageError(
                    exc.errno, "unsafe store layout: a symlink or file where a directory belongs"
                ) from None
            raise _storage_error("publishing a blob", exc) from None
        finally:
            for fd in fds:
                os.close(fd)

    # -- reading ---------------------------------------------------------------

    def _shard(self, key: BlobKey) -> int | None:
        """Descriptor of the key's shard directory, or None if absent or unsafe."""
        try:
            ns_fd, _ = _open_dir(key.namespace, self._blobs_fd, create=False)
        except OSError:
            return None
        try:
            shard_fd, _ = _open_dir(key.digest[:2], ns_fd, create=False)
            return shard_fd
        except OSError:
            return None
        finally:
            os.close(ns_fd)

    def _lstat(self, key: BlobKey) -> os.stat_result | None:
        shard_fd = self._shard(key)
        if shard_fd is None:
            return None
        try:
            st = os.stat(key.digest, dir_fd=shard_fd, follow_symlinks=False)
        except OSError:
            return None
        finally:
            os.close(shard_fd)
        return st if stat.S_ISREG(st.st_mode) else None

    def open(self, key: BlobKey) -> _FileReader | None:
        shard_fd = self._shard(key)
        if shard_fd is None:
            return None
        try:
            # O_NONBLOCK: a FIFO planted in the store must not hang the reader.
            fd = os.open(key.digest, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=shard_fd)
        except OSError:
            return None
        finally:
            os.close(shard_fd)
        try:
            st = os.fstat(fd)
        except OSError as exc:
            os.close(fd)
            raise _storage_error("opening a blob", exc) from None
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            return None
        return _FileReader(fd, st.st_size)

    def exists(self, key: BlobKey) -> bool:
        return self._lstat(key) is not None

    def age(self, key: BlobKey) -> float | None:
        st = self._lstat(key)
        return None if st is None else time.time() - st.st_mtime

    def delete(self, key: BlobKey) -> None:
        self._writable("deleting a blob")
        shard_fd = self._shard(key)
        if shard_fd is None:
            return
        try:
            os.unlink(key.digest, dir_fd=shard_fd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise _storage_error("deleting a blob", exc) from None
        finally:
            os.close(shard_fd)

    def keys(self) -> Iterator[BlobKey]:
        for ns in sorted(_hex_names(self._blobs_fd, 32, directories=True)):
            ns_fd, _ = _open_dir(ns, self._blobs_fd, create=False)
            try:
                for shard in sorted(_hex_names(ns_fd, 2, directories=True)):
                    shard_fd, _ = _open_dir(shard, ns_fd, create=False)
                    try:
                        for digest in sorted(_hex_names(shard_fd, 64, directories=False)):
                            if digest.startswith(shard):
                                yield BlobKey(ns, digest)
                    finally:
                        os.close(shard_fd)
            finally:
                os.close(ns_fd)

    def sweep_temp(self, older_than: float, *, dry_run: bool = False) -> int:
        """Remove old temporaries no live writer holds (each writer keeps an flock on its own)."""
        cutoff = time.time() - older_than
        removed = 0
        if self._tmp_fd < 0:  # a read-only store without tmp/
            return 0
        if not dry_run:
            self._writable("removing a temporary")
        with os.scandir(self._tmp_fd) as entries:
            names = [e.name for e in entries if e.is_file(follow_symlinks=False)]
        for name in names:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self._tmp_fd)
            except OSError:
                continue  # gone already, or not ours to open
            try:
                if os.fstat(fd).st_mtime >= cutoff:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a writer is still using it
                if not dry_run:
                    os.unlink(name, dir_fd=self._tmp_fd)
                removed += 1
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise _storage_error("removing a temporary", exc) from None
            finally:
                os.close(fd)
        return removed

    def close(self) -> None:
        for name in ("_tmp_fd", "_blobs_fd", "_root_fd"):
            fd = getattr(self, name, -1)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)


def _hex_names(dir_fd: int, length: int, *, directories: bool) -> list[str]:
    """Names of ``length`` hex characters that are real directories (or regular files)."""
    allowed = set("0123456789abcdef")
    with os.scandir(dir_fd) as entries:
        return [
            e.name
            for e in entries
            if len(e.name) == length
            and set(e.name) <= allowed
            and (e.is_dir(follow_symlinks=False) if directories else e.is_file(follow_symlinks=False))
        ]
