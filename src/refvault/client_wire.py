"""What travels between :class:`~refvault.client.Client` and ``refvault serve``: the verified download stream,
the upload chunks, and the decoding of error answers back into :mod:`refvault.errors` classes.

Invariants: a :class:`ClientStream` hands out no byte of a download whose length or SHA-256 turns out
wrong without raising :class:`~refvault.errors.IntegrityError` from the read that reaches the end; an
error answer's text is repeated only when it is a refvault problem's own short, printable ``detail``.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn

import httpx

from refvault.errors import IntegrityError, InvalidArgument, InvalidMetadata, StorageError
from refvault.model import Scope, format_time
from refvault.problems import PROBLEM_MEDIA_TYPE, PROBLEM_PREFIX, error_from_problem

__all__ = [
    "CHUNK",
    "ClientHost",
    "ClientStream",
    "RangeNotSatisfiable",
    "check_whole",
    "content_length",
    "content_range",
    "etag",
    "json_bytes",
    "moment",
    "raise_problem",
    "read_at_most",
    "upload",
]

CHUNK = 1 << 20
_TITLE_CHARS = 200
_DETAIL_CHARS = 2000
_ETAG = re.compile(r'^(?:W/)?"(?:sha256:)?([0-9a-f]{64})"$')


class ClientHost:
    """What the call mixins of :class:`~refvault.client.Client` use of it (declared for the type checker only)."""

    if TYPE_CHECKING:
        url: str

        def _call(
            self,
            method: str,
            path: str,
            scope: Scope,
            artifact_id: str | None = None,
            *,
            params: Mapping[str, Any] | None = None,
            json_body: Any = None,
            purpose: str = ...,
            recipient: str = ...,
        ) -> httpx.Response: ...
        def _json(self, response: httpx.Response) -> Any: ...
        @staticmethod
        def _path(artifact_id: str, tail: str = "") -> str: ...


class ClientStream(io.RawIOBase):
    """A read-only binary stream of one artifact from the server, hashed as it is read.

    Bytes are handed out as they arrive; when the end is reached the length and
    the SHA-256 of everything received are checked against the artifact's, and
    a mismatch, or a connection that ends early, raises
    :class:`~refvault.errors.IntegrityError` from that read. Memory use is one
    received chunk. Not seekable. Close it to release the connection.
    """

    def __init__(self, response: httpx.Response, artifact_id: str, content_hash: str, size: int) -> None:
        super().__init__()
        self.artifact_id = artifact_id
        self._response = response
        self._expected = content_hash
        self._size = size
        self._chunks = response.iter_bytes(CHUNK)
        self._hash = hashlib.sha256()
        self._received = 0
        self._buffer = b""
        self._offset = 0  # of the buffer's first byte
        self._used = 0  # bytes of the buffer handed out
        self._done = False
        self._observer: Callable[[int, bytes], None] | None = None

    @property
    def size(self) -> int:
        return self._size

    def on_chunk(self, observer: Callable[[int, bytes], None]) -> None:
        """Call ``observer(offset, chunk)`` with each chunk as it arrives, before any of it is handed out."""
        self._observer = observer

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._offset + self._used

    def _fill(self) -> bool:
        """Receive the next chunk into the buffer; False at the (verified) end."""
        if self._done:
            return False
        try:
            chunk = next(self._chunks, None)
        except httpx.HTTPError:
            self._fail("the connection ended before every byte arrived")
        if chunk is None:
            self._done = True
            if self._received != self._size:
                self._fail(f"{self._received} of {self._size} bytes arrived")
            if self._hash.hexdigest() != self._expected:
                self._fail("its bytes do not match the content hash")
            return False
        if self._received + len(chunk) > self._size:
            self._fail("more bytes arrived than it holds")
        self._hash.update(chunk)
        self._offset, self._used = self._received, 0
        self._received += len(chunk)
        self._buffer = chunk
        if self._observer is not None:
            self._observer(self._offset, chunk)
        return True

    def _fail(self, what: str) -> NoReturn:
        self._done = True
        self._buffer = b""
        self._response.close()
        raise IntegrityError(f"artifact {self.artifact_id} failed verification: {what}")

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        """Fill ``buffer`` with the next bytes (short only at the end, which is verified first)."""
        if self.closed:
            raise InvalidArgument("I/O operation on closed stream")  # a ValueError, as io's own
        target = memoryview(buffer).cast("B")
        filled = 0
        while filled < len(target):
            if self._used == len(self._buffer) and not self._fill():
                break
            piece = self._buffer[self._used : self._used + len(target) - filled]
            target[filled : filled + len(piece)] = piece
            filled += len(piece)
            self._used += len(piece)
        return filled

    def readall(self) -> bytes:
        """The rest of the artifact; raises :class:`IntegrityError` (returning nothing) if it is damaged."""
        out = bytearray()
        while chunk := self.read(CHUNK):
            out += chunk
        return bytes(out)

    def iter_chunks(self) -> Iterator[bytes]:
        """Yield the rest of the artifact in chunks; the end is verified before the iteration stops."""
        while chunk := self.read(CHUNK):
            yield chunk

    def close(self) -> None:
        if not self.closed:
            self._response.close()
            self._buffer = b""
        super().close()


class RangeNotSatisfiable(InvalidArgument):
    """Internal: a 416 answer (the offset is past the end), turned into ``b""`` by ``read_range``."""


def upload(first: memoryview | None, second: memoryview | None, rest: Iterator[memoryview]) -> Iterator[bytes]:
    for chunk in (first, second):
        if chunk is not None:
            yield bytes(chunk)
    for chunk in rest:
        yield bytes(chunk)


def json_bytes(value: Any) -> bytes:
    try:
        return json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError):
        raise InvalidArgument("the query arguments must be JSON values (objects, lists, strings, numbers)") from None
    except UnicodeEncodeError:
        raise InvalidArgument("an argument is not valid Unicode text (it holds a lone surrogate)") from None


def etag(response: httpx.Response) -> str | None:
    match = _ETAG.fullmatch(response.headers.get("etag", "").strip())
    return None if match is None else match.group(1)


def content_length(response: httpx.Response) -> int | None:
    value = response.headers.get("content-length", "")
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 19 else None


def content_range(value: str | None) -> tuple[int, int, int] | None:
    match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", (value or "").strip())
    return None if match is None else (int(match.group(1)), int(match.group(2)), int(match.group(3)))


def check_whole(data: bytes, expected: str, artifact_id: str) -> None:
    if hashlib.sha256(data).hexdigest() != expected:
        raise IntegrityError(f"artifact {artifact_id} failed verification: its bytes do not match the content hash")


def read_at_most(response: httpx.Response, limit: int) -> bytes | None:
    """The body of an error answer, or None if it is longer than ``limit`` (the rest is never read)."""
    body = bytearray()
    for piece in response.iter_bytes():
        body += piece
        if len(body) > limit:
            return None
    return bytes(body)


def _problem(response: httpx.Response, body: bytes | None) -> dict[str, Any] | None:
    if body is None or not response.headers.get("content-type", "").startswith(PROBLEM_MEDIA_TYPE):
        return None
    try:
        problem = json.loads(body)
    except ValueError:
        return None
    return problem if isinstance(problem, dict) else None


def _shown(value: object, limit: int) -> str | None:
    """A server-written text fit to show: a string of at most ``limit`` printable characters, else None."""
    if not isinstance(value, str) or not value or len(value) > limit or not value.isprintable():
        return None
    return value


def raise_problem(response: httpx.Response, body: bytes | None, artifact_id: str | None) -> NoReturn:
    """Raise the :mod:`refvault.errors` class a refvault problem names; of any other answer show status and title.

    Only a refvault problem's own ``detail`` (short, printable) becomes a message;
    bodies that are not problems, unknown fields, oversized texts and reasons
    that are not refvault's are never repeated.
    """
    status = response.status_code
    problem = _problem(response, body)
    ours = problem is not None and str(problem.get("type", "")).startswith(PROBLEM_PREFIX)
    title = _shown(problem.get("title"), _TITLE_CHARS) if problem is not None else None
    if problem is None or not ours:
        raise StorageError(f"the refvault server answered HTTP {status}" + (f" ({title})" if title else ""))
    slug = str(problem["type"])[len(PROBLEM_PREFIX) :]
    name = problem.get("error")
    name = name if isinstance(name, str) else ""
    detail = _shown(problem.get("detail"), _DETAIL_CHARS) or title or f"HTTP {status}"
    if status == 416:
        raise RangeNotSatisfiable(detail)
    raise error_from_problem(
        status,
        slug,
        name,
        detail,
        artifact_id=artifact_id or "(unknown)",
        reason=problem.get("reason"),
        suggestion=problem.get("suggestion"),
        retry_after=_retry_after(response.headers.get("retry-after")),
    )


def _retry_after(header: str | None) -> int:
    """Seconds from a ``Retry-After`` header given in seconds (1 when absent or not a small number)."""
    if header is None or not (header.strip().isascii() and header.strip().isdigit()):
        return 1
    return max(1, min(int(header.strip()), 3600))


def moment(name: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidMetadata(f"{name} must be a timezone-aware datetime (or None)")
    try:
        return format_time(value.astimezone(UTC))
    except (OverflowError, ValueError):
        raise InvalidMetadata(f"{name} is out of range") from None
