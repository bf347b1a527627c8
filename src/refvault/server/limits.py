"""What keeps one client of ``refvault serve`` from stalling the others: deadlines and upload caps.

The attack this answers: requests that declare a large body, send a few bytes and stop (or send
half a header block and stop) cost the client nothing and, unbounded, hold the server's connections,
memory and threads forever. Invariants, where each is enforced, and the tests that hold them
(``tests/security/test_server_stalls.py``, raw sockets against a live ``refvault serve``):

* **Request headers arrive in time.** :class:`HeaderTimeoutProtocol` (the HTTP protocol
  ``refvault serve`` runs: uvicorn's own, httptools where installed, else h11, wrapped) closes a
  connection whose request line and headers are not complete ``header_timeout`` seconds
  (``REFVAULT_HEADER_TIMEOUT``, default 10) after it opened, or after the first byte of its next
  request: one deadline for the whole block, which dripping bytes does not extend. A connection idle
  after a response is closed by uvicorn's keep-alive timeout (5 s). It covers every path, ``/mcp``
  included, since no path is known before the headers are.
* **Request bodies keep arriving.** :class:`BodyIdleTimeout` (ASGI middleware around the whole app:
  every route and ``/mcp`` alike) bounds each wait for the next piece of a request body by
  ``body_timeout`` seconds (``REFVAULT_BODY_TIMEOUT``, default 30). Past it the read raises
  :class:`~refvault.errors.RequestTimeout`: the request ends with a 408 ``request-timeout`` problem
  and ``Connection: close``, and a capture publishes nothing (``Vault.put`` aborts its write, which
  removes the temporary). The bound is per wait, so a slow but live upload is never cut off;
  waits after the body's end (for a disconnect) are not bounded.
* **Bounded uploads per key and per tenant.** :class:`Uploads` counts, per API key and per tenant, the
  requests whose bodies are in progress: a capture for its whole length, a query body and an ``/mcp``
  message while they arrive. Past ``per_key`` (``REFVAULT_UPLOADS_PER_KEY``, default 8) or
  ``per_tenant`` (``REFVAULT_UPLOADS_PER_TENANT``, default 16) a request is refused before a byte of
  its body is read: 429 ``too-many-requests`` with ``Retry-After``, nothing stored. A request is
  counted only after its key authenticated, so nobody can use up another key's slots. The counts live
  on the app (one :class:`Uploads` per app, per worker process).
* **Captures cannot starve other tenants.** A capture feeds its body to ``Vault.put`` from a worker
  thread, which waits while the body arrives. Captures therefore run in threads of their own limiter
  (never the threads of reads, of ``/mcp`` or anyio's default pool): ``CAPTURE_TENANTS * per_tenant``
  threads per process (8 * 16 = 128 by default). A tenant holds at most ``per_tenant`` of them, so at
  least eight tenants must each fill their whole cap before another tenant's capture waits for a
  thread. ``/mcp`` reads its messages on the event loop and holds no thread while they arrive.

Not covered here (see the security docs): a flood spread over many keys and tenants, slow readers of
responses, and connection counts as such; run a proxy in front for those.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar, cast

import anyio
import anyio.to_thread
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from refvault.errors import InvalidArgument, RequestTimeout, TooManyRequests
from refvault.keys import parse_token
from refvault.server import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_UPLOADS_PER_KEY,
    DEFAULT_UPLOADS_PER_TENANT,
)

__all__ = [
    "BODY_TIMEOUT_ENVVAR",
    "CAPTURE_TENANTS",
    "HEADER_TIMEOUT_ENVVAR",
    "RETRY_AFTER",
    "UPLOADS_PER_KEY_ENVVAR",
    "UPLOADS_PER_TENANT_ENVVAR",
    "BodyIdleTimeout",
    "HeaderTimeoutProtocol",
    "Uploads",
    "checked_count",
    "checked_seconds",
    "count_from_env",
    "key_id",
    "seconds_from_env",
]

T = TypeVar("T")
ASGIScope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[ASGIScope, Receive, Send], Awaitable[None]]

# Environment read by ``app_from_env`` and the protocol (set by ``refvault serve`` for each worker process).
HEADER_TIMEOUT_ENVVAR = "REFVAULT_HEADER_TIMEOUT"
BODY_TIMEOUT_ENVVAR = "REFVAULT_BODY_TIMEOUT"
UPLOADS_PER_KEY_ENVVAR = "REFVAULT_UPLOADS_PER_KEY"
UPLOADS_PER_TENANT_ENVVAR = "REFVAULT_UPLOADS_PER_TENANT"

CAPTURE_TENANTS = 8  # capture threads per process = this many tenants' whole upload caps
RETRY_AFTER = 1  # seconds a refused upload is told to wait (uploads end at unknown times: retry soon)
MAX_SECONDS = 3600.0
MAX_COUNT = 10_000

_log = logging.getLogger("refvault.server")


# -- settings --------------------------------------------------------------------------------


def checked_seconds(what: str, value: object) -> float:
    """``value`` as a timeout in seconds: a number above 0 and at most an hour, else :class:`InvalidArgument`."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_SECONDS:
        raise InvalidArgument(f"{what} must be a number of seconds above 0 and at most {MAX_SECONDS:g}")
    return float(value)


def checked_count(what: str, value: object) -> int:
    """``value`` as a cap: a whole number from 1 to 10000, else :class:`InvalidArgument`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise InvalidArgument(f"{what} must be a whole number from 1 to {MAX_COUNT}")
    return value


def seconds_from_env(name: str, default: float) -> float:
    """The timeout in the environment variable ``name`` (``default`` when unset or empty)."""
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    return checked_seconds(name, value)


def count_from_env(name: str, default: int) -> int:
    """The cap in the environment variable ``name`` (``default`` when unset or empty)."""
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    return checked_count(name, value)


# -- header deadline ---------------------------------------------------------------------------


class HeaderTimeoutProtocol(asyncio.Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline on each request's line and headers.

    Wraps the protocol uvicorn's ``http="auto"`` picks (httptools where installed, else h11) and
    passes every event to it; pass the class as ``http=`` to uvicorn's ``Config``/``run``. The
    timer is armed when the connection opens and when the first byte of a further request arrives
    after a response; it is disarmed once the wrapped protocol has started the request (its headers
    are complete) or handed the connection to another protocol (a WebSocket upgrade). If it fires,
    the connection is closed. The deadline is ``REFVAULT_HEADER_TIMEOUT`` seconds (default 10).
    """

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        inner: Any = AutoHTTPProtocol
        self.inner: Any = inner(config=config, server_state=server_state, app_state=app_state, _loop=_loop)
        self.seconds = seconds_from_env(HEADER_TIMEOUT_ENVVAR, DEFAULT_HEADER_TIMEOUT)
        self.transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio subclasses
        self.inner.connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._timer is None and self._between_requests():
            self._arm()  # the first bytes of a further request: its headers have the whole deadline from now
        self.inner.data_received(data)
        if self._timer is not None and (not self._between_requests() or not self._ours()):
            self._disarm()

    def eof_received(self) -> bool | None:
        result: bool | None = self.inner.eof_received()
        return result

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def _between_requests(self) -> bool:
        """True while no request is being served: before the first, or after the last one's response."""
        cycle = self.inner.cycle
        return cycle is None or bool(cycle.response_complete)

    def _ours(self) -> bool:
        return self.transport is not None and self.transport.get_protocol() is self

    def _arm(self) -> None:
        self._disarm()
        self._timer = self.inner.loop.call_later(self.seconds, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        transport = self.transport
        if transport is None or transport.is_closing() or not self._ours() or not self._between_requests():
            return
        _log.debug("closed a connection whose request headers took over %g seconds", self.seconds)
        transport.close()


# -- body deadline -------------------------------------------------------------------------------


class BodyIdleTimeout:
    """ASGI middleware: each wait for the next piece of a request body lasts at most ``seconds``.

    Past it, the app's ``receive`` raises :class:`~refvault.errors.RequestTimeout` (the app's error
    handler answers 408) and the response gets ``Connection: close``, so the connection ends with
    it. GET and HEAD requests (the hot reads: no route reads their bodies) and requests without a
    body (no ``Content-Length`` above 0, no ``Transfer-Encoding``) pass untouched; after a body's last
    piece, ``receive`` is not timed (it then only reports a disconnect).
    """

    def __init__(self, app: ASGIApp, seconds: float = DEFAULT_BODY_TIMEOUT) -> None:
        self.app = app
        self.seconds = checked_seconds("the body timeout", seconds)

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in _UNREAD or not _has_body(scope):
            await self.app(scope, receive, send)
            return
        seconds = self.seconds
        receiving = True
        timed_out = False

        async def timed_receive() -> Message:
            nonlocal receiving, timed_out
            if not receiving:
                return await receive()
            with anyio.move_on_after(seconds) as waiting:
                message = await receive()
            if waiting.cancelled_caught:
                timed_out = True
                raise RequestTimeout(
                    f"the request body stopped arriving (nothing for {seconds:g} seconds): the request was dropped"
                    " and nothing was stored"
                )
            if message.get("type") != "http.request" or not message.get("more_body", False):
                receiving = False
            return message

        async def closing_send(message: Message) -> None:
            if timed_out and message.get("type") == "http.response.start":
                headers = list(message.get("headers", ()))
                if not any(name.lower() == b"connection" for name, _ in headers):
                    headers.append((b"connection", b"close"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, timed_receive, closing_send)


_UNREAD = frozenset(("GET", "HEAD"))  # methods whose request bodies no route of the app reads


def _has_body(scope: ASGIScope) -> bool:
    """Whether an HTTP/1.x request has a body (RFC 9112 6.3: framed by Transfer-Encoding or Content-Length)."""
    if scope.get("http_version") not in ("1.0", "1.1"):
        return True
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


# -- upload caps and capture threads -------------------------------------------------------------


def key_id(authorization: str | None) -> str:
    """The key id of the bearer token in an ``Authorization`` value (as FastAPI's ``HTTPBearer`` reads it).

    For a request whose key has authenticated; anything else gets one shared id, which only a
    request that was not authenticated could carry.
    """
    _, _, token = (authorization or "").partition(" ")
    return parse_token(token.strip()) or "(no key)"


class Uploads:
    """One app's count of the request bodies in progress, per API key and per tenant, and its capture threads.

    :meth:`slot` holds a place for one upload (refused with :class:`~refvault.errors.TooManyRequests`
    past ``per_key`` for the key or ``per_tenant`` for the tenant); :meth:`run_capture` runs a
    capture in a thread of the capture limiter (``CAPTURE_TENANTS * per_tenant`` threads).
    Thread-safe; the limiter belongs to the event loop that asked for it (one per server process).
    """

    def __init__(self, *, per_key: int = DEFAULT_UPLOADS_PER_KEY, per_tenant: int = DEFAULT_UPLOADS_PER_TENANT) -> None:
        self.per_key = checked_count("uploads per key", per_key)
        self.per_tenant = checked_count("uploads per tenant", per_tenant)
        self.capture_threads = CAPTURE_TENANTS * self.per_tenant
        self._lock = threading.Lock()
        self._by_key: dict[str, int] = {}
        self._by_tenant: dict[str, int] = {}
        self._limiter: tuple[asyncio.AbstractEventLoop, anyio.CapacityLimiter] | None = None

    @contextmanager
    def slot(self, key: str, tenant: str) -> Iterator[None]:
        """Hold one upload place of ``key`` and ``tenant`` for the block; :class:`TooManyRequests` if none is free."""
        with self._lock:
            if self._by_key.get(key, 0) >= self.per_key:
                raise TooManyRequests(
                    f"this API key already has {self.per_key} uploads in progress, the most this server takes"
                    " at once; retry when one has finished",
                    retry_after=RETRY_AFTER,
                )
            if self._by_tenant.get(tenant, 0) >= self.per_tenant:
                raise TooManyRequests(
                    f"this tenant already has {self.per_tenant} uploads in progress, the most this server takes"
                    " at once; retry when one has finished",
                    retry_after=RETRY_AFTER,
                )
            self._by_key[key] = self._by_key.get(key, 0) + 1
            self._by_tenant[tenant] = self._by_tenant.get(tenant, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                _release(self._by_key, key)
                _release(self._by_tenant, tenant)

    async def run_capture(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``func(*args, **kwargs)`` in a capture thread (at most ``capture_threads`` at once)."""
        return await anyio.to_thread.run_sync(partial(func, *args, **kwargs), limiter=self._capture_limiter())

    def _capture_limiter(self) -> anyio.CapacityLimiter:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._limiter is None or self._limiter[0] is not loop:
                self._limiter = (loop, anyio.CapacityLimiter(self.capture_threads))
            return self._limiter[1]


def _release(counts: dict[str, int], name: str) -> None:
    left = counts.get(name, 0) - 1
    if left > 0:
        counts[name] = left
    else:
        counts.pop(name, None)
