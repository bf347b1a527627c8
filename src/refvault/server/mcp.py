"""``/mcp``: refvault's model-facing tools over streamable HTTP, scoped by each request's API key.

:func:`mcp_app` returns an ASGI app that ``refvault serve`` mounts at ``/mcp``.
It serves the MCP gateway's own surface (:class:`~refvault.integrations.mcp.gateway.ArtifactTools`:
``describe_artifact``, ``list_artifacts``, ``read_artifact``, ``query_artifact``,
``load_artifacts``, ``resources/list`` and ``resources/read`` of ``refvault://``
URIs) through the official MCP SDK's streamable HTTP transport, stateless, one
fresh transport per HTTP request, JSON responses.

Invariants, each tested in ``tests/test_server_mcp.py`` against a live server:

* **Every request is authenticated.** A request without a valid
  ``Authorization: Bearer`` key gets 401 ``unauthenticated`` (the same problem
  document as the HTTP API, with ``WWW-Authenticate: Bearer``) before the MCP
  layer sees it. ``Refvault-Session`` is required (400 ``invalid-argument``);
  a session, tenant or user the key does not allow is 403 ``scope-not-allowed``.
* **The key decides the scope.** Tools and resources run in
  ``Scope(key's tenant, key's user, Refvault-Session)``, computed here and passed
  to the handlers with the request; nothing in an MCP message can change it, so
  another tenant's artifacts are as absent as missing ones.
* **Bounded requests.** A body over ``max_body`` (4 MiB) is a 413
  ``too-large`` problem before the MCP layer reads it. Only POST is served
  (405 otherwise): stateless, there is no server-initiated stream for a GET
  to hold open, and no session to DELETE.
* **Sealed content is never shown.** The read tools and ``resources/read``
  refuse sealed artifacts (listing shows their metadata only, so the model can
  pass their ids to tools that take a reference).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

import anyio.to_thread
import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError

from refvault.errors import Forbidden, InvalidArgument, RefvaultError, Unauthenticated
from refvault.integrations.mcp.gateway import ArtifactTools
from refvault.model import Principal, Scope
from refvault.server.app import (
    UNAUTHENTICATED_DETAIL,
    BodyTooLarge,
    declared_length,
    problem,
    problem_for,
    session_scope,
)
from refvault.vault.vault import Vault

__all__ = ["SCOPE_KEY", "mcp_app"]

ASGIScope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[ASGIScope, Receive, Send], Awaitable[None]]
Authenticate = Callable[[str], Principal | None]

SCOPE_KEY = "refvault.scope"
MAX_MCP_BODY = 4 << 20  # bytes of one request body (a JSON-RPC message from an MCP client)


def mcp_app(vault: Vault, authenticate: Authenticate, *, max_body: int = MAX_MCP_BODY) -> ASGIApp:
    """The ``/mcp`` ASGI app over ``vault``; ``authenticate(token)`` gives the token's principal, or None.

    ``authenticate`` blocks (it reads the catalog): it runs in a worker thread.
    A request body (one JSON-RPC message) over ``max_body`` bytes is a 413
    ``too-large`` problem: the SDK reads a message whole, so it is bounded here.

    Needs no lifespan from its host: each HTTP request runs its own stateless
    MCP transport to completion.
    """
    tools = ArtifactTools(vault)
    server = tools.server(_scope_of)

    async def app(scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # websockets are not served
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
        try:
            replay = await _bounded(headers, receive, max_body)
        except BodyTooLarge as exc:
            await problem_for(exc)(scope, receive, send)
            return
        if replay is None:  # the client went away before its message arrived
            return
        manager = StreamableHTTPSessionManager(app=server, json_response=True, stateless=True)
        async with manager.run():
            await manager.handle_request({**scope, SCOPE_KEY: caller}, replay, send)

    return app


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
