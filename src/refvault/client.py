"""A Python client for ``refvault serve``: the :class:`~refvault.Vault` API over HTTP.

``Client(url, api_key)`` has the vault's method names and signatures, each
taking the scope first (``put``, ``describe``, ``read_bytes``, ``read_range``,
``stream``, ``list``, ``delete``), plus the selective reads of
:mod:`refvault.read` as methods (``window``, ``grep``, ``query``, ``derive``)
and ``verify_artifact``; links, grants, audit and policy calls come from
:mod:`refvault.client_authority`, and the derived-copy calls (``redact``,
``receipt``, ``lineage``, ``lineage_status``, ``supersede``,
``revoke_artifact``, ``refresh``, ``hold``, ``release``, ``holds``,
``replay_status``) from :mod:`refvault.client_copies`. It is the vault contract
(:class:`refvault.contract.VaultContract`) over HTTP: its ``read_selection``
sends the request types of :mod:`refvault.operations` to the server, so
``refvault.read.window/grep/query/derive`` and a :class:`~refvault.Toolbox`
accept a client wherever they accept a vault.

Invariants, and where each is enforced and tested (``tests/client/test_client.py``,
against a live server):

* **The key decides the scope.** Every request carries the API key and the
  scope's tenant, user and session as headers; the server refuses a scope the
  key does not allow (:class:`~refvault.errors.Forbidden`) and answers for
  another tenant's artifact exactly as for an absent one
  (:class:`~refvault.errors.NotFound`).
* **Bounded memory both ways.** ``put`` streams bytes, binary files and
  iterables of bytes in 1 MiB chunks (chunked transfer encoding), never holding
  the input whole; ``stream`` hands out bytes as they arrive, one chunk at a time.
* **Verified downloads.** ``read_bytes`` returns nothing unless the bytes hash
  to the artifact's content hash (the ``ETag``, else the descriptor's).
  ``stream`` hashes as it goes and checks length and hash when the end is
  reached: a mismatch or a connection cut short raises
  :class:`~refvault.errors.IntegrityError` from that final read, so a reader
  that reaches the end never accepts damaged or partial bytes. Partial ranges
  (``read_range``) are verified chunk by chunk by the server; a range that
  covers the whole artifact is hashed here too.
* **Same errors as the vault.** ``application/problem+json`` answers are mapped
  back to the :mod:`refvault.errors` class the server raised (``NotFound`` with
  the id the caller sent, ``InvalidCursor`` with its reason, ...). The text of
  any other unexpected answer is never repeated: only its status and, for a
  problem document, its title. Connection failures are
  :class:`~refvault.errors.StorageError`.
* **The key is never shown.** It is sent only in the ``Authorization`` header;
  ``repr`` and error messages name the server URL only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, Unpack, cast
from urllib.parse import urlsplit

import httpx

from refvault import tracing
from refvault.client_authority import AuthorityCalls
from refvault.client_copies import CopyCalls
from refvault.client_runs import RunCalls
from refvault.client_wire import (
    ClientStream,
)
from refvault.client_wire import (
    RangeNotSatisfiable as _RangeNotSatisfiable,
)
from refvault.client_wire import (
    check_whole as _check_whole,
)
from refvault.client_wire import (
    content_length as _content_length,
)
from refvault.client_wire import (
    content_range as _content_range,
)
from refvault.client_wire import (
    etag as _etag,
)
from refvault.client_wire import (
    json_bytes as _json_bytes,
)
from refvault.client_wire import (
    moment as _moment,
)
from refvault.client_wire import (
    raise_problem as _raise_problem,
)
from refvault.client_wire import (
    read_at_most as _read_at_most,
)
from refvault.client_wire import (
    upload as _upload,
)
from refvault.contract import LocalRead, VaultContract
from refvault.copies import DeletionReport
from refvault.errors import (
    IntegrityError,
    InvalidArgument,
    InvalidMetadata,
    InvalidType,
    StorageError,
)
from refvault.ids import lookup_id
from refvault.limits import (
    DEFAULT_GREP_MATCHES,
    DEFAULT_GREP_SECONDS,
    DEFAULT_QUERY_LIMIT,
    DEFAULT_QUERY_SECONDS,
    DEFAULT_WINDOW_CHARS,
    LIST_PAGE,
)
from refvault.model import Descriptor, Scope, check_labels
from refvault.operations import (
    CaptureMetadata,
    CaptureOptions,
    GrepRequest,
    ListPage,
    QueryRequest,
    RecordSet,
    RecordSetRequest,
    Selection,
    WindowRequest,
    check_byte_span,
    is_count,
)
from refvault.policy import DEFAULT_PURPOSE, DEFAULT_RECIPIENT, check_purpose, check_recipient

__all__ = ["Client", "ClientStream", "VaultLike"]

VaultLike: TypeAlias = VaultContract
"""What the read functions and the Toolbox accept: a local vault or a client of a remote one (the vault contract)."""

T = TypeVar("T")

MAX_PROBLEM_BYTES = 64 * 1024  # of an error answer read at most; a longer one is shown by status alone
_HEADER_SAFE = re.compile(r"[\x21-\x7e]+")


class Client(AuthorityCalls, CopyCalls, RunCalls):
    """The vault API of a remote ``refvault serve``; thread-safe (one connection pool, shared by threads).

    ``url`` is the server's base URL (``http://127.0.0.1:8765``); ``api_key`` a
    token from ``refvault keys create``; ``timeout`` the seconds any one network
    operation (connect, each read, each write) may take. ``transport`` replaces
    httpx's own (a proxy, a test double).
    """

    def __init__(
        self, url: str, api_key: str, *, timeout: float = 60.0, transport: httpx.BaseTransport | None = None
    ) -> None:
        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
            raise InvalidArgument("url must be the server's base URL, like 'http://127.0.0.1:8765'")
        if "@" in urlsplit(url).netloc or urlsplit(url).query or urlsplit(url).fragment:
            # The URL is shown in messages and repr: it must hold no credentials (the key goes in api_key).
            raise InvalidArgument("url must be a plain base URL, without user:password@, query or fragment")
        if not isinstance(api_key, str) or _HEADER_SAFE.fullmatch(api_key) is None:
            raise InvalidArgument("api_key must be the token printed by 'refvault keys create' (rvk_...)")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise InvalidArgument("timeout must be a positive number of seconds")
        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url + "/v1",
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=httpx.Timeout(float(timeout)),
            follow_redirects=False,
            transport=transport,
        )

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    def close(self) -> None:
        """Close the connection pool; later calls raise :class:`~refvault.errors.StorageError`."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- transport ---------------------------------------------------------------------

    @staticmethod
    def _headers(
        scope: Scope,
        extra: Mapping[str, str] | None = None,
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> dict[str, str]:
        if not isinstance(scope, Scope):
            raise InvalidArgument("scope must be a refvault.Scope(tenant=..., user=..., session=...)")
        headers = {"Refvault-Tenant": scope.tenant, "Refvault-User": scope.user, "Refvault-Session": scope.session}
        # A read's purpose and recipient (checked here, and again by the server); the defaults are not sent.
        if check_purpose(purpose) != DEFAULT_PURPOSE:
            headers["Refvault-Purpose"] = purpose
        if check_recipient(recipient) != DEFAULT_RECIPIENT:
            headers["Refvault-Recipient"] = recipient
        headers.update(extra or {})
        return headers

    def _send(self, request: httpx.Request, artifact_id: str | None, *, stream: bool = False) -> httpx.Response:
        """Send; return a 2xx response (read whole unless ``stream``), else raise the error its problem names.

        A redirect is an error like any other unexpected answer: it is never
        followed, so the key is never sent to another origin. At most
        ``MAX_PROBLEM_BYTES`` of an error answer are read.
        """
        try:
            response = self._http.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise StorageError(
                f"the refvault server at {self.url} could not be reached ({type(exc).__name__})"
            ) from None
        except RuntimeError:  # httpx: the client has been closed
            raise StorageError("this client is closed") from None
        try:
            if response.status_code < 300:
                if not stream:
                    response.read()
                return response
            body = _read_at_most(response, MAX_PROBLEM_BYTES)
        except httpx.HTTPError as exc:
            response.close()
            raise StorageError(
                f"the refvault server at {self.url} sent a broken answer ({type(exc).__name__})"
            ) from None
        except BaseException:
            response.close()
            raise
        response.close()
        _raise_problem(response, body, artifact_id)

    def _call(
        self,
        method: str,
        path: str,
        scope: Scope,
        artifact_id: str | None = None,
        *,
        params: Mapping[str, Any] | None = None,
        json_body: Any = None,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> httpx.Response:
        content = None
        headers = self._headers(scope, purpose=purpose, recipient=recipient)
        if json_body is not None:
            content = _json_bytes(json_body)
            headers["Content-Type"] = "application/json"
        request = self._request(method, path, headers=headers, params=params, content=content)
        return self._send(request, artifact_id)

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Request:
        try:
            request = self._http.build_request(method, path, **kwargs)
            tracing.inject(request.headers)  # W3C trace context: the server's spans join the caller's trace
            return request
        except UnicodeEncodeError:
            raise InvalidArgument("an argument is not valid Unicode text (it holds a lone surrogate)") from None
        except RuntimeError:
            raise StorageError("this client is closed") from None

    def _json(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            raise StorageError(f"the refvault server at {self.url} sent a malformed answer") from None

    def _descriptor(self, response: httpx.Response) -> Descriptor:
        try:
            return Descriptor.from_dict(self._json(response))
        except InvalidMetadata:
            raise StorageError(f"the refvault server at {self.url} sent a malformed descriptor") from None

    @staticmethod
    def _path(artifact_id: str, tail: str = "") -> str:
        return f"/artifacts/{lookup_id(artifact_id)}{tail}"  # a mis-copied id too: the server may suggest one

    # -- capture -----------------------------------------------------------------------

    def put(self, scope: Scope, data: object, **options: Unpack[CaptureOptions]) -> Descriptor:
        """Capture ``data`` in ``scope``; return its descriptor once the server has made it durable.

        ``data`` is ``bytes``, a binary file object or an iterable of ``bytes``,
        streamed in 1 MiB chunks and never held whole. Metadata is checked here
        before the first byte is sent (the server checks it again).
        """
        with tracing.span("refvault.put", kind="client") as traced:
            descriptor = self._put(scope, data, options)
            traced.set(tracing.ARTIFACT_ID, descriptor.artifact_id)
            traced.set(tracing.BYTES, descriptor.size)
        return descriptor

    def _put(self, scope: Scope, data: object, options: CaptureOptions) -> Descriptor:
        from refvault.vault.ingest import aligned_chunks

        capture = CaptureMetadata.of(options)
        metadata: dict[str, Any] = {
            "media_type": capture.media_type,
            "disclosure": capture.disclosure,
            "filename": capture.filename,
            "tool_call_id": capture.tool_call_id,
            "run_id": capture.run_id,
            "schema_version": capture.schema_version,
            "expires_at": _moment("expires_at", capture.expires_at),
            "created_at": _moment("created_at", capture.created_at),
        }
        if capture.source_version is not None:
            metadata["source_version"] = capture.source_version
        if capture.completeness is not None:
            metadata["completeness"] = capture.completeness
        if capture.recorded_labels():
            metadata["labels"] = sorted(capture.recorded_labels())
        if capture.recorded_derived_from():
            metadata["derived_from"] = list(capture.recorded_derived_from())
        if capture.supersedes is not None:
            metadata["supersedes"] = capture.supersedes
        headers = self._headers(scope, {"Content-Type": metadata["media_type"]})
        headers["Refvault-Metadata"] = json.dumps({k: v for k, v in metadata.items() if v is not None})
        if capture.idempotency_key is not None:
            headers["Idempotency-Key"] = capture.idempotency_key
        chunks = aligned_chunks(data)
        first = next(chunks, None)  # a wrong kind of input fails here, before anything is sent
        second = next(chunks, None) if first is not None else None
        body: bytes | Iterator[bytes]
        body = (b"" if first is None else bytes(first)) if second is None else _upload(first, second, chunks)
        request = self._request("POST", "/artifacts", headers=headers, content=body)
        return self._descriptor(self._send(request, None))

    # -- reads -------------------------------------------------------------------------

    def describe(
        self,
        scope: Scope,
        artifact_id: str,
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> Descriptor:
        """The descriptor of an artifact ``scope`` may read for ``purpose``, to ``recipient``."""
        path = self._path(artifact_id)
        return self._descriptor(self._call("GET", path, scope, artifact_id, purpose=purpose, recipient=recipient))

    def read_bytes(
        self,
        scope: Scope,
        artifact_id: str,
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> bytes:
        """Every byte of the artifact, returned only if they hash to its content hash."""
        with self.stream(scope, artifact_id, purpose=purpose, recipient=recipient) as stream:
            return stream.readall()

    def read_range(
        self,
        scope: Scope,
        artifact_id: str,
        offset: int,
        length: int | None,
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> bytes:
        """Bytes ``[offset, offset + length)`` (``None``: to the end), clipped to the artifact.

        The server verifies the chunks it reads; a range that turns out to be the
        whole artifact is hashed here as well.
        """
        traced_id = {tracing.ARTIFACT_ID: tracing.traced_id(artifact_id)}
        with tracing.span("refvault.read_range", traced_id, kind="client") as traced:
            data = self._read_range(scope, artifact_id, offset, length, purpose, recipient)
            traced.set(tracing.BYTES, len(data))
            traced.set(tracing.VERIFIED, True)
        return data

    def _read_range(
        self, scope: Scope, artifact_id: str, offset: int, length: int | None, purpose: str, recipient: str
    ) -> bytes:
        check_byte_span(offset, length)
        if offset == 0 and length is None:
            return self.read_bytes(scope, artifact_id, purpose=purpose, recipient=recipient)
        if length == 0:
            self.describe(scope, artifact_id, purpose=purpose, recipient=recipient)  # a read's errors; no bytes
            return b""
        last = "" if length is None else str(offset + length - 1)
        headers = self._headers(scope, {"Range": f"bytes={offset}-{last}"}, purpose=purpose, recipient=recipient)
        request = self._request("GET", self._path(artifact_id, "/content"), headers=headers)
        try:
            response = self._send(request, artifact_id)
        except _RangeNotSatisfiable:
            return b""  # the offset is at or past the end: nothing, as from the vault
        data = response.content
        if response.status_code == 200:  # the server sent it whole: verify it whole, then cut
            expected = _etag(response) or self._content_hash(scope, artifact_id, purpose, recipient)
            _check_whole(data, expected, artifact_id)
            return data[offset : None if length is None else offset + length]
        whole = _content_range(response.headers.get("content-range"))
        if whole is None or whole[0] != offset or whole[1] - whole[0] + 1 != len(data):
            raise IntegrityError(f"artifact {artifact_id} failed verification: the server sent another range")
        if offset == 0 and len(data) == whole[2]:
            expected = _etag(response) or self._content_hash(scope, artifact_id, purpose, recipient)
            _check_whole(data, expected, artifact_id)
        return data

    def stream(
        self,
        scope: Scope,
        artifact_id: str,
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> ClientStream:
        """A read-only stream of the artifact, hashed as it is read; :class:`IntegrityError` at the end if damaged.

        Memory use is one received chunk. The stream is not seekable; close it
        (or use it as a context manager) to release the connection.
        """
        with tracing.span("refvault.stream", {tracing.ARTIFACT_ID: tracing.traced_id(artifact_id)}, kind="client") as t:
            opened = self._stream(scope, artifact_id, purpose, recipient)
            t.set(tracing.BYTES, opened.size)
        return opened

    def _stream(self, scope: Scope, artifact_id: str, purpose: str, recipient: str) -> ClientStream:
        headers = self._headers(scope, purpose=purpose, recipient=recipient)
        request = self._request("GET", self._path(artifact_id, "/content"), headers=headers)
        response = self._send(request, artifact_id, stream=True)
        try:
            expected = _etag(response)
            size = _content_length(response)
            if expected is None or size is None:
                descriptor = self.describe(scope, artifact_id, purpose=purpose, recipient=recipient)
                expected, size = descriptor.content_hash.removeprefix("sha256:"), descriptor.size
        except BaseException:
            response.close()
            raise
        return ClientStream(response, artifact_id, expected, size)

    def _content_hash(self, scope: Scope, artifact_id: str, purpose: str, recipient: str) -> str:
        descriptor = self.describe(scope, artifact_id, purpose=purpose, recipient=recipient)
        return descriptor.content_hash.removeprefix("sha256:")

    def list(
        self,
        scope: Scope,
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> list[Descriptor]:
        """Unexpired artifacts of ``scope``, newest first (every page, fetched in turn), without those the
        tenant's policy refuses for ``purpose`` and ``recipient``."""
        found: list[Descriptor] = []
        offset: int | None = 0
        while offset is not None:
            wanted = ListPage(limit=LIST_PAGE, offset=offset)
            params = {"limit": wanted.limit, "offset": wanted.offset}
            page = self._json(
                self._call("GET", "/artifacts", scope, params=params, purpose=purpose, recipient=recipient)
            )
            try:
                found.extend(Descriptor.from_dict(item) for item in page["items"])
                following = page["next_offset"]
            except (InvalidMetadata, KeyError, TypeError):
                raise StorageError(f"the refvault server at {self.url} sent a malformed listing") from None
            if following is not None and (not is_count(following) or following <= offset):
                raise StorageError(f"the refvault server at {self.url} sent a malformed listing")
            offset = following
        return found

    def delete(self, scope: Scope, artifact_id: str, *, cascade: bool = False) -> DeletionReport:
        """:meth:`Vault.delete <refvault.Vault.delete>` over HTTP: the artifact (with ``cascade``, its copies the
        caller owns too) and the server's report of what went, what stayed and why."""
        params = {"cascade": "true"} if cascade else None
        response = self._call("DELETE", self._path(artifact_id), scope, artifact_id, params=params)
        if response.status_code == 204:  # a server from before deletion reports
            return DeletionReport(root=artifact_id)
        return DeletionReport.from_dict(self._json(response))

    def declassify(self, scope: Scope, artifact_id: str, *, remove: Iterable[str], reason: str) -> Descriptor:
        """Remove labels from an artifact the caller owns (``POST /v1/artifacts/{id}/declassify``); its new descriptor.

        The same checks and errors as :meth:`Vault.declassify <refvault.Vault.declassify>`, run by the server.
        """
        if isinstance(remove, str):
            raise InvalidArgument("remove must be a set of label names, e.g. {'pii'}")
        try:
            names = check_labels(remove)
        except InvalidMetadata as exc:
            raise InvalidArgument(str(exc)) from None
        body = {"remove": sorted(names), "reason": reason}
        return self._descriptor(
            self._call("POST", self._path(artifact_id, "/declassify"), scope, artifact_id, json_body=body)
        )

    def console_link(self, next: str = "/console") -> str:
        """A single-use URL (valid 60 seconds) that signs a browser into this server's console as this client's key.

        ``next`` is the console page to open (a path under ``/console``; anything else opens ``/console``).
        The URL is a credential until used: hand it only to the person it is for.
        """
        if not isinstance(next, str):
            raise InvalidArgument("next must be a console path such as '/console/runs'")
        content = _json_bytes({"next": next})
        request = self._request(
            "POST", "/console/sessions", headers={"Content-Type": "application/json"}, content=content
        )
        return str(self._json(self._send(request, None))["url"])

    def verify_artifact(
        self,
        scope: Scope,
        artifact_id: str,
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> dict[str, Any]:
        """Have the server re-read and hash every byte: ``{"artifact_id", "ok", "content_hash", "size"}``."""
        response = self._call(
            "GET", self._path(artifact_id, "/verify"), scope, artifact_id, purpose=purpose, recipient=recipient
        )
        answer: dict[str, Any] = self._json(response)
        return answer

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
        """The server's inclusion proof of bytes ``[offset, offset + length)`` (clipped; ``None``: to the end), as
        :meth:`refvault.Vault.prove_range`. Nothing here trusts it: check it with :func:`refvault.verify_excerpt`
        against the root of a descriptor you trust (``retrieval.integrity.merkle_root``)."""
        check_byte_span(offset, length)
        params = {"offset": offset, **({} if length is None else {"length": length})}
        path = self._path(artifact_id, "/proof")
        response = self._call("GET", path, scope, artifact_id, params=params, purpose=purpose, recipient=recipient)
        answer: dict[str, Any] = self._json(response)["proof"]
        return answer

    # -- selective reads (the server runs refvault.read) -------------------------------

    def read_selection(self, scope: Scope, artifact_id: str, request: Selection[T], local: LocalRead[T]) -> T:
        """Have the server run a selective read (the vault contract's door for them); ``local`` is not called."""
        name, traced_id = tracing.selection_name(request), tracing.traced_id(artifact_id)
        with tracing.span(name, {tracing.ARTIFACT_ID: traced_id}, kind="client") as traced:
            answer = self._selection(scope, artifact_id, request)
            tracing.selection_facts(traced, answer)
        return answer

    def _selection(self, scope: Scope, artifact_id: str, request: Selection[T]) -> T:
        answer: object
        if isinstance(request, WindowRequest):
            answer = self.window(
                scope,
                artifact_id,
                lines=request.lines,
                byte_range=request.byte_range,
                max_chars=request.max_chars,
                purpose=request.purpose,
                recipient=request.recipient,
            )
        elif isinstance(request, GrepRequest):
            answer = self.grep(
                scope,
                artifact_id,
                request.pattern,
                regex=request.regex,
                max_matches=request.max_matches,
                from_line=request.from_line,
                max_seconds=request.max_seconds,
                purpose=request.purpose,
                recipient=request.recipient,
            )
        elif isinstance(request, QueryRequest):
            answer = self.query(
                scope,
                artifact_id,
                where=request.where,
                fields=request.fields,
                order=request.order,
                limit=request.limit,
                record_range=request.record_range,
                cursor=request.cursor,
                max_seconds=request.max_seconds,
                max_scan=request.max_scan,
                purpose=request.purpose,
                recipient=request.recipient,
            )
        elif isinstance(request, RecordSetRequest):
            reader = {"purpose": request.purpose, "recipient": request.recipient}
            answer = (
                self.derive(scope, artifact_id, **reader)
                if request.build
                else self.derived_records(scope, artifact_id, **reader)
            )
        else:
            raise InvalidArgument(f"not a selective read: {type(request).__name__}")
        return cast(T, answer)

    def window(
        self,
        scope: Scope,
        artifact_id: str,
        *,
        lines: Sequence[int | None] | None = None,
        byte_range: Sequence[int] | None = None,
        max_chars: int = DEFAULT_WINDOW_CHARS,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> dict[str, Any]:
        """:func:`refvault.read.window`, run by the server."""
        params: dict[str, Any] = {"max_chars": _number("max_chars", max_chars)}
        if lines is not None:
            start, end = _pair("lines", lines)
            params["lines"] = f"{start},{'' if end is None else end}"
        if byte_range is not None:
            offset, length = _pair("byte_range", byte_range)
            params["bytes"] = f"{offset},{length}"
        return self._read("GET", "/window", scope, artifact_id, params=params, purpose=purpose, recipient=recipient)

    def grep(
        self,
        scope: Scope,
        artifact_id: str,
        pattern: str,
        *,
        regex: bool = False,
        max_matches: int = DEFAULT_GREP_MATCHES,
        from_line: int = 0,
        max_seconds: float = DEFAULT_GREP_SECONDS,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> dict[str, Any]:
        """:func:`refvault.read.grep`, run by the server."""
        if not isinstance(pattern, str) or not pattern:
            raise InvalidArgument("pattern must be a non-empty string")
        if not isinstance(regex, bool):
            raise InvalidArgument("regex must be true or false")
        params = {  # the rest is sent as given: the server checks it
            "pattern": pattern,
            "regex": "true" if regex else "false",
            "max_matches": _number("max_matches", max_matches),
            "from_line": _number("from_line", from_line),
            "max_seconds": _number("max_seconds", max_seconds),
        }
        return self._read("GET", "/grep", scope, artifact_id, params=params, purpose=purpose, recipient=recipient)

    def query(
        self,
        scope: Scope,
        artifact_id: str,
        *,
        where: object = None,
        fields: object = None,
        order: object = None,
        limit: object = DEFAULT_QUERY_LIMIT,
        record_range: object = None,
        cursor: object = None,
        max_seconds: float = DEFAULT_QUERY_SECONDS,
        max_scan: int | None = None,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> dict[str, Any]:
        """:func:`refvault.read.query`, run by the server; cursors it returns work with this method."""
        body = {  # the server checks every argument: sent as given
            "where": where,
            "fields": fields,
            "order": order,
            "limit": limit,
            "record_range": record_range,
            "cursor": cursor,
            "max_seconds": max_seconds,
            "max_scan": max_scan,
        }
        return self._read("POST", "/query", scope, artifact_id, json_body=body, purpose=purpose, recipient=recipient)

    def derive(
        self,
        scope: Scope,
        artifact_id: str,
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> RecordSet:
        """:func:`refvault.read.derive`, run by the server: a record artifact's count and fields (built once)."""
        record_set = self._records(scope, artifact_id, build=True, purpose=purpose, recipient=recipient)
        if record_set is None:  # the server must build it when asked to
            raise StorageError(f"the refvault server at {self.url} sent a malformed record set")
        return record_set

    def derived_records(
        self,
        scope: Scope,
        artifact_id: str,
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> RecordSet | None:
        """The record set if the server has already built it (as ``derive`` would), else None; never builds."""
        return self._records(scope, artifact_id, build=False, purpose=purpose, recipient=recipient)

    def _records(
        self,
        scope: Scope,
        artifact_id: str,
        *,
        build: bool,
        purpose: str,
        recipient: str,
    ) -> RecordSet | None:
        params = {"build": "true" if build else "false"}
        path = self._path(artifact_id, "/records")
        response = self._call("GET", path, scope, artifact_id, params=params, purpose=purpose, recipient=recipient)
        answer = self._json(response)
        if answer is None:
            return None
        try:
            fields = tuple((_text(item["name"]), _text(item["type"])) for item in answer["fields"])
            count = answer["count"]
            record_set = RecordSet(
                artifact_id=_text(answer["artifact_id"]),
                content_hash=_text(answer["content_hash"]),
                source_format=_text(answer["source_format"]),
                count=count,
                fields=fields,
                derived_hash=_text(answer["derived_hash"]),
            )
        except (KeyError, TypeError, ValueError):
            raise StorageError(f"the refvault server at {self.url} sent a malformed record set") from None
        if not is_count(count) or record_set.artifact_id != artifact_id:
            raise StorageError(f"the refvault server at {self.url} sent a malformed record set")
        return record_set

    def _read(
        self,
        method: str,
        tail: str,
        scope: Scope,
        artifact_id: str,
        *,
        params: Mapping[str, Any] | None = None,
        json_body: Any = None,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> dict[str, Any]:
        response = self._call(
            method,
            self._path(artifact_id, tail),
            scope,
            artifact_id,
            params=params,
            json_body=json_body,
            purpose=purpose,
            recipient=recipient,
        )
        answer = self._json(response)
        if not isinstance(answer, dict):
            raise StorageError(f"the refvault server at {self.url} sent a malformed answer")
        return answer


# -- helpers ---------------------------------------------------------------------------------


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidType("not a string")
    return value


def _number(name: str, value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{name} must be a number")
    return str(value)


def _pair(name: str, value: object) -> tuple[int | None, int | None]:
    shape = "a list of two integers, e.g. [0, 200]"
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise InvalidArgument(f"{name} must be {shape}")
    first, second = value
    for item in (first, second):
        if not (item is None or (isinstance(item, int) and not isinstance(item, bool))):
            raise InvalidArgument(f"{name} must be {shape}")
    return first, second


if TYPE_CHECKING:  # mypy checks here that the client satisfies the vault contract

    def _satisfies_contract(client: Client) -> VaultContract:
        return client
