"""The HTTP API v1: a FastAPI app over one :class:`~refvault.Vault`, and ``/mcp`` beside it.

This module wires the app (:func:`create_app`, :func:`app_from_env`); each job has its module below it:

* :mod:`refvault.server.auth`: **every request is authenticated first**; the key decides tenant
  and user, ``Refvault-Session`` must be one the key allows (:func:`~refvault.server.auth.session_scope`
  decides the scope for every surface).
* :mod:`refvault.server.problems`: **errors are problems**: every error response is
  ``application/problem+json`` with ``type``, ``title``, ``status``, ``detail`` and ``error``, from the
  one table :data:`refvault.problems.PROBLEM_TYPES` (which the client reads back). Request values are
  never echoed, and a traceback never leaves the process. A 405 lists every method of its path in ``Allow``.
* :mod:`refvault.server.routes_artifacts` (capture, list, describe, delete),
  :mod:`refvault.server.routes_runs` (evidence records, the replay packet),
  :mod:`refvault.server.routes_copies` (redaction, receipts, lineage, supersede/revoke, holds, replay status),
  :mod:`refvault.server.content` (``GET …/content`` and its fast path for recently checked keys) and
  :mod:`refvault.server.routes_reads` (window, grep, query, records, verify): the routes, module-level
  functions that take the app's :class:`~refvault.server.service.Served` as a dependency. **Absent and
  not-yours look the same** (one 404 body); **streaming both ways, bounded memory**; **artifact bytes
  stay inert in a browser**.
* :mod:`refvault.server.inputs` reads what requests carry (metadata, query bodies, sizes) and
  :mod:`refvault.server.schema` says it in the OpenAPI schema: **the schema tells the truth** (every
  response documented, every limit stated from the constant that enforces it;
  ``tests/server/test_schema.py``, ``tests/security/test_server_http_conformance.py``).
* :mod:`refvault.server.threads`: **the event loop never blocks**: every vault and catalog call runs
  in a worker thread, at most :data:`~refvault.server.threads.READ_THREADS` per process for reads.
* :mod:`refvault.server.limits`: **one tenant cannot stall the others** (body and header deadlines,
  upload caps per key and tenant, captures in threads of their own; ``tests/security/test_server_stalls.py``).
* :mod:`refvault.server.console`: **the console acts as its viewer's key** (``/console``, server-rendered
  HTML with no script; ``POST /v1/console/sessions`` issues single-use sign-in links).
* :mod:`refvault.server.routes_ops` and :mod:`refvault.server.metrics`: **operators see how, never whose**
  (``GET /metrics`` labels are route templates and fixed words; ``GET /v1/ready``; SIGTERM drains: requests in
  flight finish, new ones get 503 with ``Retry-After``).
* :mod:`refvault.server.mcp`: **``/mcp`` answers only its own names** (``Host``/``Origin`` checked
  there against an allow-list; the API under ``/v1`` needs a bearer key, which a rebinding page cannot
  make a browser send). Only this module imports it, to mount it.

Tests: ``tests/server/test_app.py``, ``tests/server/test_auth.py``, ``tests/server/test_fast_paths.py``,
``tests/server/test_schema.py`` and ``tests/security/test_server_*.py``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial
from importlib.util import find_spec
from typing import Any

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.routing import Route

from refvault import __version__
from refvault.errors import InvalidArgument
from refvault.keys import DEFAULT_CACHE_SECONDS, KeyCache
from refvault.server import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_MAX_BODY,
    DEFAULT_UPLOADS_PER_KEY,
    DEFAULT_UPLOADS_PER_TENANT,
    content,
    routes_artifacts,
    routes_audit,
    routes_budget,
    routes_copies,
    routes_grants,
    routes_links,
    routes_ops,
    routes_policy,
    routes_reads,
    routes_runs,
)
from refvault.server.content import CONTENT_SECURITY_POLICY, PIECE, FastContent
from refvault.server.inputs import MAX_JSON_BODY
from refvault.server.limits import (
    BODY_TIMEOUT_ENVVAR,
    HEADER_TIMEOUT_ENVVAR,
    UPLOADS_PER_KEY_ENVVAR,
    UPLOADS_PER_TENANT_ENVVAR,
    BodyIdleTimeout,
    Uploads,
    checked_seconds,
    count_from_env,
    seconds_from_env,
)
from refvault.server.metrics import RequestMetrics, worker_stopped
from refvault.server.problems import PROBLEM_MEDIA_TYPE, install_handlers
from refvault.server.routes_ops import Drain, Draining
from refvault.server.schema import openapi
from refvault.server.service import Served
from refvault.server.threads import READ_THREADS
from refvault.server.traced import NO_FRAMEWORK_TELEMETRY, Traced
from refvault.vault.core import Vault

__all__ = [
    "ALLOWED_HOSTS_ENVVAR",
    "ALLOWED_ORIGINS_ENVVAR",
    "AUTH_CACHE_ENVVAR",
    "CONTENT_SECURITY_POLICY",
    "DEFAULT_MAX_BODY",
    "MAX_BODY_ENVVAR",
    "MAX_JSON_BODY",
    "PIECE",
    "PROBLEM_MEDIA_TYPE",
    "READ_THREADS",
    "app_from_env",
    "create_app",
]

# Environment read by ``app_from_env`` (set by ``refvault serve`` for each worker process).
MAX_BODY_ENVVAR = "REFVAULT_MAX_BODY"
AUTH_CACHE_ENVVAR = "REFVAULT_AUTH_CACHE_SECONDS"
ALLOWED_HOSTS_ENVVAR = "REFVAULT_ALLOWED_HOSTS"  # comma-separated, for /mcp's Host check (refvault.server.mcp)
ALLOWED_ORIGINS_ENVVAR = "REFVAULT_ALLOWED_ORIGINS"  # comma-separated, for /mcp's Origin check

_FastContent = FastContent  # its former name here (tests patch the class through this module)
_ROUTERS = (  # in the schema's order of paths
    routes_artifacts.router,
    content.router,
    routes_reads.router,
    routes_links.router,
    routes_grants.router,
    routes_copies.router,
    routes_runs.router,
    routes_audit.router,
    routes_policy.router,
    routes_budget.router,
    routes_ops.router,
)


def create_app(
    vault: Vault,
    *,
    max_body: int = DEFAULT_MAX_BODY,
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]] | None = None,
    auth_cache_seconds: float = DEFAULT_CACHE_SECONDS,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    uploads_per_key: int = DEFAULT_UPLOADS_PER_KEY,
    uploads_per_tenant: int = DEFAULT_UPLOADS_PER_TENANT,
    metrics: bool = True,
) -> FastAPI:
    """The HTTP API v1 over ``vault`` (which the caller keeps and closes), plus ``/mcp`` when available.

    ``max_body`` bounds a capture's body in bytes (413 above it). ``lifespan``
    runs around the app's life (``app_from_env`` closes its vault there).
    ``auth_cache_seconds`` is how long a successful authentication is trusted
    without reading the key again (:class:`~refvault.keys.KeyCache`; 0: never):
    the longest a key revoked by another process (or vault object) keeps working here.
    ``allowed_hosts``/``allowed_origins`` are what ``/mcp`` accepts in ``Host``/``Origin``
    besides loopback names and the address a request arrived at (:func:`refvault.server.mcp.transport_security`).
    ``body_timeout`` is the longest wait, in seconds, for the next piece of a request body (408
    after it); ``uploads_per_key``/``uploads_per_tenant`` cap the request bodies a key/tenant may
    have in progress at once (429 past them; :mod:`refvault.server.limits`). ``metrics=False`` serves no
    ``/metrics`` and counts nothing (where ``prometheus_client`` is installed, both are on by default).
    """
    if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 0:
        raise InvalidArgument("max_body must be a non-negative number of bytes")
    body_timeout = checked_seconds("body_timeout", body_timeout)
    uploads = Uploads(per_key=uploads_per_key, per_tenant=uploads_per_tenant)
    keys = KeyCache(vault, seconds=auth_cache_seconds)
    mcp = _mcp_app(vault, keys, allowed_hosts, allowed_origins, uploads)

    @asynccontextmanager
    async def life(app: FastAPI) -> AsyncIterator[None]:
        async with _optional(lifespan, app), _optional(_sub_lifespan(mcp), mcp):
            yield

    app = FastAPI(
        title="refvault",
        version=__version__,
        description="Safe artifact references: capture, verified selective reads, scoped by API key.",
        redirect_slashes=False,
        lifespan=life,
        telemetry=NO_FRAMEWORK_TELEMETRY,  # refvault's own spans carry no content (refvault.server.traced)
    )
    for router in _ROUTERS:
        app.include_router(router, prefix="/v1")
    _mount_console(app)
    app.add_middleware(FastContent, vault=vault, keys=keys)  # the hot read, for keys already checked
    app.add_middleware(BodyIdleTimeout, seconds=body_timeout)  # every route and /mcp
    draining = Draining()
    app.add_middleware(Drain, state=draining)  # 503 for new requests once SIGTERM came (routes_ops)
    app.add_middleware(Traced)  # the request's span, in the caller's trace (refvault.tracing)
    if metrics and find_spec("prometheus_client") is not None:  # the server extra: GET /metrics, all counted
        app.include_router(routes_ops.metrics_router)
        app.add_middleware(RequestMetrics)  # outermost
    install_handlers(app)
    app.openapi = partial(openapi, app)  # type: ignore[method-assign]
    if mcp is not None:  # at /mcp exactly (what MCP clients call) and below it
        app.router.routes.append(Route("/mcp", endpoint=_Asgi(mcp), include_in_schema=False))
        app.mount("/mcp", mcp)
    app.state.served = Served(vault=vault, keys=keys, max_body=max_body, uploads=uploads)  # what the routes use
    app.state.vault = vault
    app.state.uploads = uploads
    app.state.mcp_mounted = mcp is not None
    app.state.draining = draining
    return app


def _mcp_app(
    vault: Vault, keys: KeyCache, allowed_hosts: Sequence[str], allowed_origins: Sequence[str], uploads: Uploads
) -> Any:
    """The model-facing MCP endpoint from :mod:`refvault.server.mcp`, or None where that module is not installed."""
    if find_spec("refvault.server.mcp") is None:
        return None
    from refvault.server import mcp as mcp_module

    return mcp_module.mcp_app(
        vault, keys.authenticate, allowed_hosts=allowed_hosts, allowed_origins=allowed_origins, uploads=uploads
    )


def _mount_console(app: FastAPI) -> None:
    """The web console at ``/console`` (:mod:`refvault.server.console`), where its templates' packages are installed."""
    if find_spec("jinja2") is None:
        return
    from refvault.server import console

    app.include_router(console.api_router, prefix="/v1")
    app.include_router(console.router)


class _Asgi:
    """An ASGI app as a route endpoint (Starlette treats a plain function as a request handler)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


def _sub_lifespan(sub: Any) -> Callable[[Any], AbstractAsyncContextManager[Any]] | None:
    router = getattr(sub, "router", None)
    context = getattr(router, "lifespan_context", None)
    return context if callable(context) else None


@asynccontextmanager
async def _optional(context: Callable[[Any], AbstractAsyncContextManager[Any]] | None, app: Any) -> AsyncIterator[None]:
    if context is None:
        yield
        return
    async with context(app):
        yield


def app_from_env() -> FastAPI:
    """An app over ``Vault.open()`` configured by the environment (one per worker process); closes it at shutdown.

    ``refvault serve`` sets ``REFVAULT_STORE`` or ``REFVAULT_CATALOG``/``REFVAULT_BLOBS``/
    ``REFVAULT_S3_ENDPOINT``, ``REFVAULT_MAX_BODY`` and ``REFVAULT_AUTH_CACHE_SECONDS`` before starting uvicorn,
    and ``REFVAULT_ALLOWED_HOSTS``/``REFVAULT_ALLOWED_ORIGINS`` (comma-separated entries; empty or unset: none),
    ``REFVAULT_BODY_TIMEOUT``, ``REFVAULT_UPLOADS_PER_KEY`` and ``REFVAULT_UPLOADS_PER_TENANT``. It also checks
    ``REFVAULT_HEADER_TIMEOUT`` (read by the protocol, :class:`refvault.server.limits.HeaderTimeoutProtocol`),
    so a malformed value stops the worker at startup.
    """
    allowed_hosts, allowed_origins = (
        [entry.strip() for entry in os.environ.get(name, "").split(",") if entry.strip()]
        for name in (ALLOWED_HOSTS_ENVVAR, ALLOWED_ORIGINS_ENVVAR)
    )
    raw = os.environ.get(MAX_BODY_ENVVAR)
    try:
        max_body = DEFAULT_MAX_BODY if not raw else int(raw)
    except ValueError:
        raise InvalidArgument(f"{MAX_BODY_ENVVAR} must be a number of bytes") from None
    raw = os.environ.get(AUTH_CACHE_ENVVAR)
    try:
        auth_cache_seconds = DEFAULT_CACHE_SECONDS if not raw else float(raw)
    except ValueError:
        raise InvalidArgument(f"{AUTH_CACHE_ENVVAR} must be a number of seconds") from None
    seconds_from_env(HEADER_TIMEOUT_ENVVAR, DEFAULT_HEADER_TIMEOUT)
    body_timeout = seconds_from_env(BODY_TIMEOUT_ENVVAR, DEFAULT_BODY_TIMEOUT)
    uploads_per_key = count_from_env(UPLOADS_PER_KEY_ENVVAR, DEFAULT_UPLOADS_PER_KEY)
    uploads_per_tenant = count_from_env(UPLOADS_PER_TENANT_ENVVAR, DEFAULT_UPLOADS_PER_TENANT)
    vault = Vault.open()

    @asynccontextmanager
    async def closing(app: FastAPI) -> AsyncIterator[None]:
        app.state.draining.hook_sigterm()  # SIGTERM drains first (refvault.server.routes_ops)
        try:
            yield
        finally:
            await run_in_threadpool(vault.close)
            worker_stopped()

    try:
        return create_app(
            vault,
            max_body=max_body,
            lifespan=closing,
            auth_cache_seconds=auth_cache_seconds,
            allowed_hosts=allowed_hosts,
            allowed_origins=allowed_origins,
            body_timeout=body_timeout,
            uploads_per_key=uploads_per_key,
            uploads_per_tenant=uploads_per_tenant,
        )
    except BaseException:
        vault.close()
        raise
