"""``/mcp``: refvault's model-facing tools over streamable HTTP, scoped by each request's API key.

:func:`mcp_app` returns an ASGI app that ``refvault serve`` mounts at ``/mcp``.
It serves refvault's MCP tool surface (:class:`~refvault.mcp_tools.ArtifactTools`,
the one the MCP gateway serves beside an upstream's tools: ``describe_artifact``,
``list_artifacts``, ``read_artifact``, ``query_artifact``, ``load_artifacts``,
``resources/list`` and ``resources/read`` of ``refvault://`` URIs) through the
official MCP SDK's streamable HTTP transport, stateless, one fresh transport per
HTTP request, JSON responses.

Invariants, each tested in ``tests/server/test_mcp.py`` against a live server:

* **Every request is authenticated.** A request without a valid
  ``Authorization: Bearer`` key gets 401 ``unauthenticated`` (the same problem
  document as the HTTP API, with ``WWW-Authenticate: Bearer``) before the MCP
  layer sees it. ``Refvault-Session`` is required (400 ``invalid-argument``);
  a session, tenant or user the key does not allow is 403 ``scope-not-allowed``.
* **The key decides the scope.** Tools and resources run in
  ``Scope(key's tenant, key's user, Refvault-Session)``, computed here and passed
  to the handlers with the request; nothing in an MCP message can change it, so
  another tenant's artifacts are as absent as missing ones.
* **Only the names this server answers to (DNS rebinding).** ``Host`` must
  name a loopback address (``127.0.0.1``, ``localhost``, ``[::1]``, any port),
  the address the request arrived at, or an entry of ``allowed_hosts``
  (``refvault serve --allowed-host``): else 421 ``misdirected-request``. A
  present ``Origin`` must be ``http://`` one of those loopback names or that
  address, or an entry of ``allowed_origins`` (``--allowed-origin``): else 403
  ``origin-not-allowed``; a request without ``Origin`` (not a browser) passes.
  Checked before anything else, by the MCP SDK's own
  :class:`~mcp.server.transport_security.TransportSecurityMiddleware` (what
  ``refvault mcp proxy --http`` uses); ``tests/security/test_mcp_origin.py``.
* **Bounded requests.** A body over ``max_body`` (4 MiB) is a 413
  ``too-large`` problem before the MCP layer reads it. Only POST is served
  (405 otherwise): stateless, there is no server-initiated stream for a GET
  to hold open, and no session to DELETE.
* **One tenant cannot stall the others.** A message is read on the event loop
  (no thread waits for it), while it arrives it holds one of its key's and
  tenant's upload places (``uploads``: 429 ``too-many-requests`` with
  ``Retry-After`` past the caps), and the host app's body and header timeouts
  end a message that stops arriving (408) or headers that never finish
  (:mod:`refvault.server.limits`; ``tests/security/test_server_stalls.py``).
* **Sealed content is never shown.** The read tools and ``resources/read``
  refuse sealed artifacts (listing shows their metadata only, so the model can
  pass their ids to tools that take a reference).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from contextlib import nullcontext
from typing import Any, Literal

import anyio.to_thread
import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.requests import Request
from starlette.responses import Response

from refvault.errors import (
    Forbidden,
    InvalidArgument,
    RefvaultError,
    RequestTimeout,
    TooManyRequests,
    Unauthenticated,
)
from refvault.mcp_tools import ArtifactTools
from refvault.model import Principal, Scope
from refvault.server.auth import session_scope
from refvault.server.inputs import BodyTooLarge, declared_length
from refvault.server.limits import Uploads, key_id
from refvault.server.problems import UNAUTHENTICATED_DETAIL, problem, problem_for
from refvault.vault.core import Vault

__all__ = ["LOOPBACK_NAMES", "SCOPE_KEY", "allow_list", "mcp_app", "transport_security"]

ASGIScope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[ASGIScope, Receive, Send], Awaitable[None]]
Authenticate = Callable[[str], Principal | None]

SCOPE_KEY = "refvault.scope"
MAX_MCP_BODY = 4 << 20  # bytes of one request body (a JSON-RPC message from an MCP client)
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")  # as the MCP SDK allows them by default, on any port

_NAME = r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*)"
_ENTRY = {  # an allow-list entry, in the SDK's syntax: exact, or ":*" for any port
    "host": re.compile(rf"{_NAME}(:([0-9]{{1,5}}|\*))?"),
    "origin": re.compile(rf"https?://{_NAME}(:([0-9]{{1,5}}|\*))?"),
}


def allow_list(values: Iterable[str], kind: Literal["host", "origin"]) -> tuple[str, ...]:
    """Allow-list entries (``refvault serve --allowed-host``/``--allowed-origin``), each checked.

    A host is ``NAME``, ``NAME:PORT`` or ``NAME:*`` (any port), with an IPv6
    address in brackets; an origin is ``http://`` or ``https://`` and a host.
    Anything else (a path, a wildcard name, a comma, spaces) is
    :class:`~refvault.errors.InvalidArgument`, not an entry that silently never matches.
    """
    entries = tuple(values)
    for entry in entries:
        if _ENTRY[kind].fullmatch(entry) is None:
            example = "example.com:8765, example.com:* or [::1]:8765" if kind == "host" else "https://example.com"
            raise InvalidArgument(f"an allowed {kind} must look like {example}")
    return entries


def transport_security(
    arrived_at: tuple[str, int | None] | None, hosts: Iterable[str] = (), origins: Iterable[str] = ()
) -> TransportSecuritySettings:
    """The MCP SDK's DNS-rebinding settings for a request that ``arrived_at`` ``(address, port)`` (ASGI ``server``).

    Allowed: the loopback names on any port, the address the request came in on
    (by number: a client that names this server by a DNS name needs that name in
    ``hosts``), and the configured ``hosts`` and ``origins``.
    """
    names = [*(f"{name}:*" for name in LOOPBACK_NAMES), *LOOPBACK_NAMES]
    if arrived_at is not None and arrived_at[0]:
        address, port = arrived_at
        shown = f"[{address}]" if ":" in address else address
        names += [shown, f"{shown}:80"] if port in (None, 80) else [f"{shown}:{port}"]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*names, *hosts],
        allowed_origins=[*(f"http://{name}" for name in names), *origins],
    )


def mcp_app(
    vault: Vault,
    authenticate: Authenticate,
    *,
    max_body: int = MAX_MCP_BODY,
    allowed_hosts: Iterable[str] = (),
    allowed_origins: Iterable[str] = (),
    uploads: Uploads | None = None,
) -> ASGIApp:
    """The ``/mcp`` ASGI app over ``vault``; ``authenticate(token)`` gives the token's principal, or None.

    ``allowed_hosts`` and ``allowed_origins`` (:func:`allow_list` entries) are
    accepted in ``Host`` and ``Origin`` besides the loopback names and the
    address a request arrived at (:func:`transport_security`).

    ``authenticate`` blocks (it reads the catalog): it runs in a worker thread.
    A request body (one JSON-RPC message) over ``max_body`` bytes is a 413
    ``too-large`` problem: the SDK reads a message whole, so it is bounded here.
    With ``uploads``, a message counts as one of its key's and tenant's uploads
    while it arrives (429 ``too-many-requests`` past their caps).

    Needs no lifespan from its host: each HTTP request runs its own stateless
    MCP transport to completion.
    """
    tools = ArtifactTools(vault)
    server = tools.server(_scope_of)
    hosts, origins = allow_list(allowed_hosts, "host"), allow_list(allowed_origins, "origin")

    async def app(scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # websockets are not served
        refused = await _misdirected(scope, transport_security(scope.get("server"), hosts, origins))
        if refused is not None:
            await refused(scope, receive, send)
            return
        headers = _headers(scope)
        token = _bearer(headers.get("authorization"))
        principal = None if token is None else await anyio.to_thread.run_sync(authenticate, token)
        try:
            caller = _scope(principal, headers)
        except RefvaultError as exc:  # the same problem documents as the HTTP API's
            await problem_for(exc)(scope, receive, send)
            return
        if scope["method"] != "POST":
            # Stateless: no server-initiated stream (a GET would hang open forever), no session to DELETE.
            detail = "this endpoint takes MCP messages by POST only"
            headers_out = {"Allow": "POST"}
            await problem(
                405, "method-not-allowed", "Method not allowed", detail, "InvalidArgument", headers=headers_out
            )(scope, receive, send)
            return
        place = nullcontext() if uploads is None else uploads.slot(key_id(headers.get("authorization")), caller.tenant)
        try:
            with place:  # one of the key's and tenant's upload places while the message arrives
                replay = await _bounded(headers, receive, max_body)
        except (BodyTooLarge, TooManyRequests, RequestTimeout) as exc:
            await problem_for(exc)(scope, receive, send)
            return
        if replay is None:  # the client went away before its message arrived
            return
        manager = StreamableHTTPSessionManager(app=server, json_response=True, stateless=True)
        async with manager.run():
            await manager.handle_request({**scope, SCOPE_KEY: caller}, replay, send)

    return app


async def _misdirected(scope: ASGIScope, settings: TransportSecuritySettings) -> Response | None:
    """The problem for a ``Host`` or ``Origin`` that ``settings`` do not allow (the SDK decides), else None."""
    refused = await TransportSecurityMiddleware(settings).validate_request(Request(scope), is_post=False)
    if refused is None:
        return None
    if refused.status_code == 403:  # the SDK's answer to an Origin it does not allow
        detail = "the Origin header names a site this server does not accept (refvault serve --allowed-origin)"
        return problem(403, "origin-not-allowed", "Origin not allowed", detail, "Forbidden")
    detail = "the Host header names no host this server answers for (refvault serve --allowed-host)"
    return problem(421, "misdirected-request", "Misdirected request", detail, "InvalidArgument")


async def _bounded(headers: Mapping[str, str], receive: Receive, limit: int) -> Receive | None:
    """Read the request body (at most ``limit`` bytes) and return a ``receive`` that replays it.

    Raises :class:`BodyTooLarge` when ``Content-Length`` or the bytes received
    go over ``limit``; returns None if the client disconnected first.
    """
    declared = declared_length(headers.get("content-length"))
    if declared is not None and declared > limit:
        raise BodyTooLarge(limit)
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > limit:
            raise BodyTooLarge(limit)
        if not message.get("more_body", False):
            break
    replayed = False

    async def replay() -> MutableMapping[str, Any]:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}
        return await receive()  # after the body: only the disconnect is left to wait for

    return replay


def _scope(principal: Principal | None, headers: Mapping[str, str]) -> Scope:
    """The request's scope: the key's tenant and user, and ``Refvault-Session`` if the key allows it."""
    if principal is None:
        raise Unauthenticated(UNAUTHENTICATED_DETAIL)
    tenant, user = headers.get("refvault-tenant"), headers.get("refvault-user")
    if (tenant is not None and tenant != principal.tenant) or (user is not None and user != principal.user):
        raise Forbidden("Refvault-Tenant and Refvault-User must name the API key's own tenant and user")
    session = headers.get("refvault-session")
    if not session:
        raise InvalidArgument("the Refvault-Session header is required: it names the session to act in")
    return session_scope(principal, session)


def _scope_of(ctx: ServerRequestContext[Any]) -> Scope:
    """The scope :func:`mcp_app` authenticated this HTTP request for (never anything from the MCP message)."""
    request = ctx.request
    asgi_scope = getattr(request, "scope", None)
    scope = asgi_scope.get(SCOPE_KEY) if isinstance(asgi_scope, Mapping) else None
    if not isinstance(scope, Scope):
        raise MCPError(types.INVALID_REQUEST, "this request was not authenticated")
    return scope


def _headers(scope: ASGIScope) -> dict[str, str]:
    """Request headers, lowercased names; a repeated header keeps its first value."""
    found: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        found.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return found


def _bearer(value: str | None) -> str | None:
    if value is None:
        return None
    kind, _, token = value.strip().partition(" ")
    token = token.strip()
    return token if kind.lower() == "bearer" and token else None


async def _lifespan(receive: Receive, send: Send) -> None:
    """Answer lifespan events when run on its own (nothing to start: each request runs its own transport)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
