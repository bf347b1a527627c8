"""S3-compatible blob store: the scale-out backend (AWS S3, SeaweedFS, MinIO, R2, ...).

Client: obstore, the Python binding of Rust's ``object_store``, is one small
native wheel with no Python dependencies that releases the GIL during I/O,
streams multipart uploads from a file with bounded memory, and retries 5xx
answers (503 SlowDown included) with exponential backoff on its own. That
makes it faster and lighter to keep up to date than boto3, whose botocore and
s3transfer stack does all of this in Python and moves with every AWS release.

Layout (every name below ``blobs/`` is hex; nothing else is ever listed as a blob)::

    <prefix>/blobs/<namespace:32 hex>/<digest[:2]>/<digest:64 hex>

Writing (the capture protocol of :mod:`refvault.blobs.base`, across two systems):

* ``write`` spools the bytes privately: in memory up to the part size (8 MiB
  by default), beyond that in an anonymous temporary file (mode 0600, in the
  system temporary directory or ``spool_dir``). Memory stays bounded for any
  size, and a crashed process leaves no spool file behind (the file has no
  name, or loses it at once).
* ``seal(key)`` uploads to the final object name, outside any lock. A spool
  that fits in one part goes up in one PUT with ``If-None-Match: *``
  (create-only); a larger one streams up as a multipart upload from the spool
  file, ``max_concurrency`` parts in flight. A multipart upload cannot be
  create-only, so it uses a safe equivalent: HEAD first and skip the upload
  when the object is already there with these bytes; if two writers race, the
  later upload overwrites identical bytes (the name is their SHA-256), which
  no reader can tell apart. An object already present counts as success once
  its ETag shows it holds these bytes (ETags of single and multipart uploads
  are MD5-based on S3 and SeaweedFS, computed by the service from the bytes it
  stored). A present object with other bytes (damage, or a planted object) is
  overwritten: that heals it. Where ETags are not MD5-based (SSE-KMS, SSE-C),
  an existing object is simply uploaded again.
* ``publish(key)`` runs inside the catalog transaction, under its lock. It
  HEADs the object: present with the ETag seal saw (or other bytes proven
  equal) means done; absent (collected between seal and publish, since the
  object was unreferenced) or different means upload again from the spool,
  overwriting. The spool is released after publish; a retried publish can
  only confirm the object is still there, and raises
  :class:`~refvault.errors.StorageError` if it is not.
* ``abort`` drops the spool. It never deletes the object at the final name,
  which may be shared with other artifacts; an uploaded object that is never
  referenced is collected by ``gc`` after its grace period.

An object's age is the time since its last upload (``Last-Modified``); an
object found already present is not re-uploaded, so its age is not refreshed.
That is safe: ``gc`` collects a referenced blob never, an unreferenced one only
under the catalog lock, and ``publish`` re-checks presence under that lock.

Reading: ``open`` HEADs once to pin the size and ETag; every ``read`` is a
ranged GET with ``If-Match`` on that ETag. If the object was replaced
meanwhile the reader re-pins to the new version and goes on: the vault checks
every byte against its digests, so a different version is caught there.

Incomplete multipart uploads: an upload that fails, or whose process dies,
part way can leave its parts behind, and obstore exposes no way to list or
abort uploads. ``sweep_temp`` therefore has nothing to remove (spool
files are anonymous too) and returns 0: configure the bucket's lifecycle rule
``AbortIncompleteMultipartUpload`` (a day is plenty) where the service has it.

Errors: every failure of the service or the network becomes a
:class:`~refvault.errors.StorageError` naming the operation, the error type and
the HTTP status and S3 error code when there is one; never credentials, object
names or content.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import ipaddress
import os
import re
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import IO, TYPE_CHECKING, Any

import obstore
from obstore.exceptions import AlreadyExistsError, NotFoundError, PreconditionError
from obstore.store import S3Store

from refvault import observe
from refvault.blobs.base import BlobKey
from refvault.errors import InvalidArgument, RefvaultError, StorageError

if TYPE_CHECKING:
    from obstore import ObjectMeta
    from obstore.store import ClientConfig, RetryConfig, S3Config

__all__ = ["S3BlobStore"]

MIB = 1 << 20
DEFAULT_PART_SIZE = 8 * MIB
_MIN_PART, _MAX_PART = 5 * MIB, 512 * MIB  # S3's minimum part; a cap on the memory a part may take
_MAX_PARTS = 10_000  # S3's limit on parts per upload

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_SEGMENT = re.compile(r"[A-Za-z0-9._-]{1,255}")
_NAME = re.compile(r"([0-9a-f]{32})/([0-9a-f]{2})/([0-9a-f]{64})")
_STATUS = re.compile(r"status code: (\d{3})")
_CODE = re.compile(r"<Code>([A-Za-z]{1,64})</Code>")
_HTTP_KIND = re.compile(r"HttpError \{\s*kind: ([A-Za-z]{1,32})")
_RETRIES = re.compile(r"retries: (\d{1,4}),")


def _failure(operation: str, exc: BaseException) -> StorageError:
    """A StorageError naming the operation and the error type (and HTTP status / S3 code if any), nothing else."""
    text = str(exc)
    detail = type(exc).__name__
    status = _STATUS.search(text)
    if status:
        detail += f", HTTP {status.group(1)}"
    code = _CODE.search(text)
    if code:
        detail += f" {code.group(1)}"
    kind = _HTTP_KIND.search(text)
    if kind and not status:
        detail += f", {kind.group(1).lower()} error"
    retries = _RETRIES.search(text)
    word = operation.split(" ", 1)[0].lower()  # a fixed word: put, get, head, delete, list, copy
    observe.event("blob_error", word)
    if retries and retries.group(1) != "0":
        detail += f", after {retries.group(1)} retries"
        observe.event("blob_retry", word, int(retries.group(1)))
    return StorageError(errno.EIO, f"S3 {operation} failed ({detail})")


def _absent(exc: BaseException) -> bool:
    return isinstance(exc, NotFoundError | FileNotFoundError)


def _same_etag(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and a.strip('"').lower() == b.strip('"').lower()


def part_size_for(size: int, part_size: int) -> int:
    """The part size a multipart upload of ``size`` bytes uses: ``part_size``, grown to stay within 10,000 parts."""
    needed = -(-size // _MAX_PARTS)
    return max(part_size, -(-needed // MIB) * MIB)


class _Spool:
    """The bytes written so far: in memory up to ``limit`` bytes, then in an anonymous temporary file."""

    __slots__ = ("_dir", "_limit", "buffer", "file", "size")

    def __init__(self, limit: int, spool_dir: str | None) -> None:
        self._limit = limit
        self._dir = spool_dir
        self.buffer: bytearray | None = bytearray()
        self.file: IO[bytes] | None = None
        self.size = 0

    def write(self, data: bytes | memoryview) -> None:
        if self.buffer is not None and self.size + len(data) <= self._limit:
            self.buffer += data
        else:
            if self.file is None:
                # No name survives the process (O_TMPFILE, or unlinked at once): a crash leaves nothing.
                self.file = tempfile.TemporaryFile(dir=self._dir, prefix="refvault-s3-")  # noqa: SIM115
                if self.buffer:
                    self.file.write(self.buffer)
                self.buffer = None
            self.file.write(data)
        self.size += len(data)

    def source(self) -> bytes | bytearray | IO[bytes]:
        """What to upload: the buffer, or the file rewound to its start."""
        if self.file is not None:
            self.file.flush()
            self.file.seek(0)
            return self.file
        assert self.buffer is not None
        return self.buffer

    def etag_matches(self, etag: str | None, part_size: int) -> bool:
        """Whether an S3 ETag is the one these bytes get (single PUT: MD5; multipart: MD5 of part MD5s, ``-N``)."""
        if etag is None:
            return False
        tag = etag.strip('"').lower()
        whole, _, parts = tag.partition("-")
        if self.file is None:
            assert self.buffer is not None
            return not parts and hashlib.md5(self.buffer, usedforsecurity=False).hexdigest() == whole
        step = part_size_for(self.size, part_size) if parts else 8 * MIB
        if parts and parts != str(-(-self.size // step)):
            return False
        total = hashlib.md5(usedforsecurity=False)
        digests = bytearray()
        self.file.flush()
        self.file.seek(0)
        while piece := self.file.read(step):
            if parts:
                digests += hashlib.md5(piece, usedforsecurity=False).digest()
            else:
                total.update(piece)
        if parts:
            return hashlib.md5(digests, usedforsecurity=False).hexdigest() == whole
        return total.hexdigest() == whole

    def close(self) -> None:
        self.buffer = None
        if self.file is not None:
            self.file.close()
            self.file = None


class _S3Reader:
    """One object version (size and ETag pinned at open), read by ranged GETs."""

    __slots__ = ("_etag", "_name", "_store", "size")

    def __init__(self, store: S3BlobStore, name: str, meta: ObjectMeta) -> None:
        self._store = store
        self._name = name
        self.size: int = meta["size"]
        self._etag = meta["e_tag"]

    def read(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise InvalidArgument("a read needs a non-negative offset and length")
        end = min(offset + length, self.size)
        for _ in range(3):
            if offset >= end:
                return b""
            options: dict[str, Any] = {"range": (offset, end)}
            if self._etag is not None:
                options["if_match"] = self._etag
            try:
                got = self._store._call("GET of a blob range", obstore.get, self._name, options=options)
                return bytes(got.bytes())[: end - offset]
            except _Changed:
                meta = self._store._head(self._name)
                if meta is None:
                    return b""  # gone: the vault reports the short read
                self._etag = meta["e_tag"]  # replaced (healed or damaged): the vault's digests judge it
                end = min(end, meta["size"])
            except _Gone:
                return b""
        raise StorageError(errno.EAGAIN, "S3 GET of a blob range failed: the object kept changing; retry")

    def close(self) -> None:
        pass


class _Changed(Exception):
    """A precondition (If-Match / If-None-Match) failed: the object exists in another version."""


class _Gone(Exception):
    """The object does not exist."""


class _S3Writer:
    """Spools privately, uploads to the final name at seal, confirms under the catalog lock at publish."""

    __slots__ = ("_etag", "_published", "_published_size", "_sealed", "_spool", "_store")

    def __init__(self, store: S3BlobStore) -> None:
        self._store = store
        self._spool: _Spool | None = _Spool(store.part_size, store.spool_dir)
        self._sealed: BlobKey | None = None
        self._etag: str | None = None  # the ETag of the object known to hold exactly these bytes at _sealed
        self._published: BlobKey | None = None
        self._published_size = -1

    def _live_spool(self) -> _Spool:
        if self._spool is None:
            raise StorageError(errno.EBADF, "this blob writer was already published or aborted")
        return self._spool

    def write(self, data: bytes | memoryview) -> None:
        spool = self._live_spool()
        try:
            spool.write(data)
        except OSError as exc:
            self.abort()
            raise StorageError(exc.errno or errno.EIO, f"spooling a blob failed: {exc.strerror or exc}") from None

    def seal(self, key: BlobKey) -> None:
        """Upload to the final name now (outside any lock): create-only, or proven equal, or healed."""
        spool = self._live_spool()
        name = self._store.object_name(key)
        self._sealed = key
        self._etag = None
        meta: ObjectMeta | None = None
        if spool.file is None:
            try:
                self._etag = self._store._put(name, spool, create=True)
                return
            except _Changed:
                meta = self._store._head(name)  # already there: from an earlier capture, or a racing one
        else:
            meta = self._store._head(name)
        if meta is not None and self._holds(meta, spool):
            self._etag = meta["e_tag"]
            return
        self._etag = self._store._put(name, spool, create=False)

    def _holds(self, meta: ObjectMeta, spool: _Spool) -> bool:
        if meta["size"] != spool.size:
            return False
        try:
            return spool.etag_matches(meta["e_tag"], self._store.part_size)
        except OSError as exc:
            raise StorageError(exc.errno or errno.EIO, f"re-reading a blob's spool failed: {exc.strerror}") from None

    def publish(self, key: BlobKey) -> None:
        """Confirm the object under the catalog lock; upload it again if it vanished or differs."""
        name = self._store.object_name(key)
        if self._published is not None:
            # A retried transaction: the spool is gone; the bytes must still be where they were published.
            meta = self._store._head(name)
            if self._published != key or meta is None or meta["size"] != self._published_size:
                raise StorageError(errno.ENOENT, "the blob vanished before its manifest committed; retry the put")
            return
        spool = self._live_spool()
        meta = self._store._head(name)
        confirmed = meta is not None and (
            (key == self._sealed and meta["size"] == spool.size and _same_etag(meta["e_tag"], self._etag))
            or self._holds(meta, spool)
        )
        if not confirmed:
            self._store._put(name, spool, create=False)  # collected since seal, or damaged: this heals it
        self._published = key
        self._published_size = spool.size
        spool.close()
        self._spool = None

    def abort(self) -> None:
        """Drop the spool. The object at the final name (if seal uploaded it) is left for ``gc``: it may be shared."""
        if self._spool is not None:
            self._spool.close()
            self._spool = None


class S3BlobStore:
    """Blobs as objects in an S3 bucket under ``prefix`` (see the module docstring for the protocol)."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint: str | None = None,
        region: str | None = None,
        part_size: int = DEFAULT_PART_SIZE,
        max_concurrency: int = 4,
        spool_dir: str | os.PathLike[str] | None = None,
        max_retries: int = 10,
        retry_timeout: float = 180.0,
        initial_backoff: float = 0.1,
        max_backoff: float = 15.0,
        timeout: float = 120.0,
        connect_timeout: float = 10.0,
    ) -> None:
        self.bucket = check_bucket(bucket)
        self.prefix = normalise_prefix(prefix)
        self._root = f"{self.prefix}/blobs/" if self.prefix else "blobs/"
        if isinstance(part_size, bool) or not isinstance(part_size, int) or not _MIN_PART <= part_size <= _MAX_PART:
            raise InvalidArgument("part_size must be a whole number of bytes from 5 MiB to 512 MiB")
        if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or not 1 <= max_concurrency <= 64:
            raise InvalidArgument("max_concurrency must be a whole number from 1 to 64")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or not 0 <= max_retries <= 100:
            raise InvalidArgument("max_retries must be a whole number from 0 to 100")
        for label, value in (
            ("retry_timeout", retry_timeout),
            ("initial_backoff", initial_backoff),
            ("max_backoff", max_backoff),
            ("timeout", timeout),
            ("connect_timeout", connect_timeout),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 86400:
                raise InvalidArgument(f"{label} must be a number of seconds above 0 and at most a day")
        self.part_size = part_size
        self.max_concurrency = max_concurrency
        self.spool_dir = os.fspath(spool_dir) if spool_dir is not None else None
        if self.spool_dir is not None and not os.path.isdir(self.spool_dir):
            raise InvalidArgument("spool_dir must be an existing directory")
        self._closed = False

        config: S3Config = {}
        client: ClientConfig = {
            "timeout": timedelta(seconds=timeout),
            "connect_timeout": timedelta(seconds=connect_timeout),
        }
        if endpoint is not None:
            config["endpoint"] = check_endpoint(endpoint)
            config["virtual_hosted_style_request"] = False  # path-style: what custom endpoints understand
            client["allow_http"] = endpoint.lower().startswith("http://")
        region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region is not None:
            if not re.fullmatch(r"[a-z0-9-]{1,64}", region):
                raise InvalidArgument("the S3 region must be a name like 'us-east-1'")
            config["region"] = region
        retry: RetryConfig = {
            "max_retries": max_retries,
            "retry_timeout": timedelta(seconds=retry_timeout),
            "backoff": {
                "init_backoff": timedelta(seconds=initial_backoff),
                "max_backoff": timedelta(seconds=max(max_backoff, initial_backoff)),
                "base": 2,
            },
        }
        try:
            # Credentials come from the usual environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
            # AWS_SESSION_TOKEN, web identity, instance metadata), read by obstore itself.
            self._s3 = S3Store(self.bucket, config=config, client_options=client, retry_config=retry)
        except Exception as exc:
            raise InvalidArgument(f"cannot configure the S3 client ({type(exc).__name__})") from None

    @classmethod
    def from_url(
        cls, url: str, *, endpoint: str | None = None, region: str | None = None, **options: Any
    ) -> S3BlobStore:
        """Open ``s3://bucket/prefix``; ``endpoint`` for any S3-compatible service (path-style addressing)."""
        if not isinstance(url, str) or not url.startswith("s3://"):
            raise InvalidArgument("an S3 blob location looks like s3://bucket/prefix")
        rest = url[len("s3://") :]
        if any(c in rest for c in "?#@\\") or any(ord(c) < 0x21 or ord(c) == 0x7F for c in rest):
            raise InvalidArgument(
                "an S3 blob location is s3://bucket/prefix with no credentials, query or fragment "
                "(credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"
            )
        bucket, _, prefix = rest.partition("/")
        return cls(bucket, prefix, endpoint=endpoint, region=region, **options)

    # -- naming ------------------------------------------------------------------

    def object_name(self, key: BlobKey) -> str:
        """The object's name in the bucket: ``<prefix>/blobs/<namespace>/<digest[:2]>/<digest>``."""
        return f"{self._root}{key.namespace}/{key.digest[:2]}/{key.digest}"

    @property
    def client(self) -> S3Store:
        """The underlying obstore client (tests use it to damage objects behind the store's back)."""
        return self._s3

    # -- calls -------------------------------------------------------------------

    def _call(self, operation: str, function: Any, *args: Any, **kwargs: Any) -> Any:
        """Run one obstore call; translate its failures (absence and precondition stay distinguishable)."""
        if self._closed:
            raise StorageError(errno.EBADF, "this S3 blob store is closed")
        try:
            return function(self._s3, *args, **kwargs)
        except (AlreadyExistsError, PreconditionError):
            raise _Changed from None
        except RefvaultError:
            raise
        except Exception as exc:
            if _absent(exc):
                raise _Gone from None
            raise _failure(operation, exc) from None

    def _head(self, name: str) -> ObjectMeta | None:
        try:
            meta: ObjectMeta = self._call("HEAD of a blob", obstore.head, name)
        except _Gone:
            return None
        except _Changed:
            raise StorageError(errno.EIO, "S3 HEAD of a blob failed (unexpected precondition failure)") from None
        return meta

    def _put(self, name: str, spool: _Spool, *, create: bool) -> str | None:
        """Upload the spool to ``name``; return the new ETag. ``create`` raises _Changed if the object exists."""
        source = spool.source()
        try:
            if spool.file is None:
                result = self._call(
                    "PUT of a blob", obstore.put, name, source, mode="create" if create else None, use_multipart=False
                )
            else:
                assert not create, "a multipart upload cannot be create-only"
                result = self._call(
                    "multipart upload of a blob",
                    obstore.put,
                    name,
                    source,
                    use_multipart=True,
                    chunk_size=part_size_for(spool.size, self.part_size),
                    max_concurrency=self.max_concurrency,
                )
        except _Gone:
            raise StorageError(errno.ENOENT, "S3 PUT of a blob failed (the bucket does not exist)") from None
        etag: str | None = result["e_tag"]
        return etag

    # -- the BlobStore protocol ------------------------------------------------------

    def writer(self) -> _S3Writer:
        if self._closed:
            raise StorageError(errno.EBADF, "this S3 blob store is closed")
        return _S3Writer(self)

    def open(self, key: BlobKey) -> _S3Reader | None:
        name = self.object_name(key)
        meta = self._head(name)
        return None if meta is None else _S3Reader(self, name, meta)

    def exists(self, key: BlobKey) -> bool:
        return self._head(self.object_name(key)) is not None

    def age(self, key: BlobKey) -> float | None:
        """Seconds since the object was last uploaded (the service's clock), or None if absent."""
        meta = self._head(self.object_name(key))
        return None if meta is None else time.time() - meta["last_modified"].timestamp()

    def delete(self, key: BlobKey) -> None:
        with contextlib.suppress(_Gone, _Changed):  # absent already: deleting is idempotent
            self._call("DELETE of a blob", obstore.delete, self.object_name(key))

    def keys(self) -> Iterator[BlobKey]:
        """Every object named like a blob under ``<prefix>/blobs/``, in name order; anything else is skipped."""
        try:
            stream = self._call("LIST of blobs", obstore.list, self._root, chunk_size=1000)
        except (_Gone, _Changed):
            return
        while True:
            try:
                batch = next(stream)
            except StopIteration:
                return
            except RefvaultError:
                raise
            except Exception as exc:
                if _absent(exc):
                    return
                raise _failure("LIST of blobs", exc) from None
            for meta in batch:
                path: str = meta["path"]
                if not path.startswith(self._root):
                    continue
                match = _NAME.fullmatch(path[len(self._root) :])
                if match is not None and match.group(3).startswith(match.group(2)):
                    yield BlobKey(match.group(1), match.group(3))

    def sweep_temp(self, older_than: float, *, dry_run: bool = False) -> int:
        """Nothing to sweep: spool files are anonymous, and obstore cannot list incomplete multipart uploads.

        Abandoned multipart uploads (a process killed mid-upload) are the
        bucket's lifecycle rule's job (``AbortIncompleteMultipartUpload``).
        """
        if isinstance(older_than, bool) or not isinstance(older_than, int | float) or older_than < 0:
            raise InvalidArgument("older_than must be a non-negative number of seconds")
        return 0

    def close(self) -> None:
        self._closed = True


def check_bucket(bucket: str) -> str:
    """A valid S3 bucket name (3-63 characters: lowercase letters, digits, dots, hyphens), else InvalidArgument."""
    if (
        not isinstance(bucket, str)
        or _BUCKET.fullmatch(bucket) is None
        or ".." in bucket
        or ".-" in bucket
        or "-." in bucket
        or bucket.startswith("xn--")
        or bucket.endswith("-s3alias")
        or _is_ip(bucket)
    ):
        raise InvalidArgument(
            "invalid S3 bucket name: use 3-63 lowercase letters, digits, dots or hyphens, "
            "starting and ending with a letter or digit (s3://bucket/prefix)"
        )
    return bucket


def _is_ip(name: str) -> bool:
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return False
    return True


def normalise_prefix(prefix: str) -> str:
    """The key prefix without leading or trailing slashes; segments of letters, digits, '.', '_' and '-' only."""
    if not isinstance(prefix, str):
        raise InvalidArgument("the S3 prefix must be a string")
    trimmed = prefix.strip("/")
    if not trimmed:
        return ""
    segments = trimmed.split("/")
    if len(trimmed) > 512 or any(_SEGMENT.fullmatch(s) is None or s in (".", "..") for s in segments):
        raise InvalidArgument(
            "invalid S3 prefix: use '/'-separated names of letters, digits, '.', '_' or '-' "
            "(no empty, '.' or '..' segments; at most 512 characters)"
        )
    return trimmed


def check_endpoint(endpoint: str) -> str:
    """An http(s)://host[:port] endpoint URL, without credentials, query or fragment."""
    if (
        not isinstance(endpoint, str)
        or re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+(/[A-Za-z0-9._\-/]*)?", endpoint) is None
    ):
        raise InvalidArgument("the S3 endpoint must be a URL like https://s3.example.com or http://127.0.0.1:8333")
    return endpoint.rstrip("/")
