"""Problem responses: every error the HTTP API (and ``/mcp``) sends, as ``application/problem+json``.

An error response carries ``type``, ``title``, ``status``, ``detail`` and ``error`` (the
:class:`~refvault.errors.RefvaultError` class name), and ``reason`` for a refused cursor. Which status,
type and title a refvault error gets is :data:`refvault.problems.PROBLEM_TYPES` (the table the
client reads back); this module builds the responses from it, and the app's exception handlers
(:func:`install_handlers`) turn every failure, refvault's or the framework's, into one. Details are
the errors' own messages, which never contain artifact content; request values are never echoed,
and a traceback never leaves the process.
"""

from __future__ import annotations

from collections.abc import Iterable
from http import HTTPMethod
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match

from refvault.errors import InvalidCursor, MisCopiedId, RefvaultError, TooManyRequests
from refvault.problems import PROBLEM_MEDIA_TYPE, PROBLEM_PREFIX, problem_type, public_name

__all__ = [
    "PROBLEM_MEDIA_TYPE",
    "PROBLEM_PREFIX",
    "STORAGE_RETRY_AFTER",
    "UNAUTHENTICATED_DETAIL",
    "Problem",
    "allowed_methods",
    "install_handlers",
    "internal_error",
    "problem",
    "problem_for",
]

STORAGE_RETRY_AFTER = 2
"""Seconds a 503 ``storage-unavailable`` asks a client to wait before retrying (its ``Retry-After``)."""

UNAUTHENTICATED_DETAIL = "a valid API key is required: send 'Authorization: Bearer rvk_...'"


class Problem(BaseModel):
    """An error, as ``application/problem+json`` (RFC 9457) plus the refvault error class name."""

    type: str
    title: str
    status: int
    detail: str
    error: str
    reason: str | None = None
    suggestion: str | None = None


def problem(
    status: int,
    slug: str,
    title: str,
    detail: str,
    error: str,
    *,
    reason: str | None = None,
    suggestion: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """A problem response; ``detail`` must never hold content or request values."""
    body: dict[str, Any] = {
        "type": PROBLEM_PREFIX + slug,
        "title": title,
        "status": status,
        "detail": detail,
        "error": error,
    }
    if reason is not None:
        body["reason"] = reason
    if suggestion is not None:
        body["suggestion"] = suggestion
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_MEDIA_TYPE)


def problem_for(exc: RefvaultError) -> JSONResponse:
    """The problem response of a refvault error (unlisted classes are a 500 ``internal-error``)."""
    entry = problem_type(exc)
    if entry is None:
        return internal_error()
    status = entry.status
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if isinstance(exc, TooManyRequests):
        headers = {"Retry-After": str(exc.retry_after)}
    elif status == 503:  # storage unavailable (a database restarting, a full disk): a retry may well succeed
        headers = {"Retry-After": str(STORAGE_RETRY_AFTER)}
    detail = UNAUTHENTICATED_DETAIL if status == 401 else _message(exc)
    reason = exc.reason if isinstance(exc, InvalidCursor) else None
    suggestion = exc.suggestion if isinstance(exc, MisCopiedId) else None
    return problem(
        status,
        entry.slug,
        entry.title,
        detail,
        public_name(exc),
        reason=reason,
        suggestion=suggestion,
        headers=headers,
    )


def _message(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def internal_error() -> JSONResponse:
    """The 500 ``internal-error`` problem: what any failure that is not a refvault error becomes."""
    return problem(500, "internal-error", "Internal error", "the server failed to handle this request", "InternalError")


def install_handlers(app: FastAPI) -> None:
    """Answer every exception with a problem: refvault errors by their type, the framework's by status."""

    async def refvault_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RefvaultError)
        return problem_for(exc)

    async def validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return problem(400, "invalid-argument", "Invalid argument", _validation_detail(exc), "InvalidArgument")

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        headers = dict(exc.headers or {})
        if exc.status_code == 404:
            return problem(404, "not-found", "Not found", "no such endpoint", "NotFound", headers=headers)
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(request.app.router.routes, request.scope))
            detail = "this endpoint does not accept that method"
            return problem(405, "method-not-allowed", "Method not allowed", detail, "InvalidArgument", headers=headers)
        if exc.status_code >= 500:
            return internal_error()
        slug = "invalid-argument"
        return problem(
            exc.status_code, slug, "Invalid request", "the request was refused", "InvalidArgument", headers=headers
        )

    async def unexpected(request: Request, exc: Exception) -> Response:
        return internal_error()

    app.add_exception_handler(RefvaultError, refvault_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)


def allowed_methods(routes: Iterable[BaseRoute], scope: Any) -> list[str]:
    """Every method some route answers at ``scope``'s path: the ``Allow`` of a 405, whichever route refused.

    Starlette's 405 names the methods of the first route whose path matched (FastAPI makes one route per
    method, so ``/v1/artifacts`` said only ``POST``); this asks every route, nested routers included, for
    every method (``tests/security/test_server_http_conformance.py`` checks each path of the schema).
    """
    return [
        method
        for method in HTTPMethod
        if any(route.matches({**scope, "method": method.value})[0] is Match.FULL for route in routes)
    ]


def _validation_detail(exc: RequestValidationError) -> str:
    """Where and what was wrong, from the validation errors' locations and messages; never their inputs."""
    parts = []
    for error in list(exc.errors())[:5]:
        where = ".".join(str(p) for p in error.get("loc", ()) if not isinstance(p, int))
        if error.get("type") == "missing":
            parts.append(f"{where}: required")
        else:
            parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts) if parts else "invalid request"
