"""Each HTTP request as an OpenTelemetry server span, a child of the caller's trace (:mod:`refvault.tracing`).

Only when the application configured a tracer provider; otherwise the request passes straight through.
The span's name is the method and the route template (``POST /v1/artifacts``,
``GET /v1/artifacts/{artifact_id}/content``), never the path itself (a path can hold a capability
link's token); its attributes are ``http.request.method``, ``http.route`` and
``http.response.status_code``. A W3C ``traceparent`` header makes the span, and every vault span
under it, part of the caller's trace.

FastAPI's built-in telemetry is switched off (:data:`NO_FRAMEWORK_TELEMETRY`): it records the URL's path
and query, which can hold a capability link's token or a grep pattern.
"""

from __future__ import annotations

import re
from typing import Any

from refvault import tracing

__all__ = ["NO_FRAMEWORK_TELEMETRY", "Traced"]

NO_FRAMEWORK_TELEMETRY: Any = {  # a fastapi.telemetry.TelemetryConfig, where FastAPI has one
    "tracing": False,
    "metrics": False,
    "logs": False,
    "operation_spans": False,
}
"""FastAPI's own telemetry (recent versions have it), off: its spans carry the URL's path and query (a link's
token, a grep pattern) and its logs exception messages. Older FastAPI keeps the setting as an unused extra."""

_WORD = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class Traced:
    """ASGI middleware: an HTTP request in a server span whose parent is the request's ``traceparent``."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not tracing.enabled():
            await self.app(scope, receive, send)
            return
        headers = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope.get("headers", ())
            if name in (b"traceparent", b"tracestate")
        }
        method = scope.get("method") if scope.get("method") in _METHODS else "_OTHER"
        status: list[int] = []

        async def sent(message: Any) -> None:
            if message.get("type") == "http.response.start" and not status:
                status.append(int(message.get("status", 0)))
            await send(message)

        with tracing.extracted(headers), tracing.span(method, {"http.request.method": method}, kind="server") as facts:
            try:
                await self.app(scope, receive, sent)
            finally:
                route = _route(scope)
                if route is not None:
                    facts.rename(f"{method} {route}")
                    facts.set("http.route", route)
                if status:
                    facts.set("http.response.status_code", status[0])
                    if status[0] >= 500:
                        facts.fail(str(status[0]))


def _route(scope: Any) -> str | None:
    """The template of the route that answered, with the prefix of the router it is included under
    (``/v1/artifacts/{artifact_id}``), or None when no route matched (a 404, the hot content path).

    The prefix is the request path's leading segments the template does not cover, kept only when the
    template's literal segments line up with the path and each prefix segment is a plain word: never a
    value a caller sent.
    """
    template = getattr(scope.get("route"), "path", None)
    if not isinstance(template, str) or not template.startswith("/"):
        return None
    path = str(scope.get("path", ""))
    wanted, got = template.split("/")[1:], path.split("/")[1:]
    extra = len(got) - len(wanted)
    if ":" in template or extra < 0:
        return template
    prefix, rest = got[:extra], got[extra:]
    aligned = all(w == g for w, g in zip(wanted, rest, strict=True) if not w.startswith("{"))
    if not aligned or not all(_WORD.fullmatch(segment) for segment in prefix):
        return template
    return "".join("/" + segment for segment in prefix) + template
