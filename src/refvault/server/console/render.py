"""How every console page is made and sent: one Jinja environment, one set of security headers.

* **Every value is escaped.** The environment autoescapes every template (``.html``), and nothing is marked
  safe: artifact text, JSON keys and values, file names and media-type parameters reach the page as text.
* **No script at all.** The console is plain HTML and one stylesheet (collapsible JSON is ``<details>``);
  :data:`CONSOLE_SECURITY_POLICY` allows no script, no frame, no plugin, styles and images from the console
  only, and forms posting only back to it (``frame-ancestors 'none'``).
* **Nothing cached, nothing referred.** Pages carry ``Cache-Control: no-store`` and ``Referrer-Policy:
  no-referrer``; ``X-Content-Type-Options: nosniff`` and ``X-Frame-Options: DENY`` on everything.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import Any

from fastapi.responses import HTMLResponse, Response
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

__all__ = ["CONSOLE_SECURITY_POLICY", "SECURITY_HEADERS", "STATIC", "page", "static_file"]

CONSOLE_SECURITY_POLICY = (
    "default-src 'none'; script-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONSOLE_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
STATIC = {"console.css": "text/css; charset=utf-8", "favicon.svg": "image/svg+xml"}
"""The console's own static files (shipped in the package) and their media types."""

_HERE = files("refvault.server.console")


@cache
def _environment() -> Environment:
    environment = Environment(
        loader=FileSystemLoader(str(_HERE / "templates")),
        autoescape=select_autoescape(["html"], default=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["bytes"] = human_bytes
    return environment


def page(template: str, *, status: int = 200, headers: dict[str, str] | None = None, **context: Any) -> HTMLResponse:
    """``template`` rendered with ``context`` (every value escaped), with the console's security headers."""
    body = _environment().get_template(template).render(**context)
    return HTMLResponse(body, status_code=status, headers={**SECURITY_HEADERS, **(headers or {})})


@cache
def _static(name: str) -> bytes:
    return (_HERE / "static" / name).read_bytes()


def static_file(name: str) -> Response:
    """One of :data:`STATIC` (cached by the browser for an hour: it changes only with the package)."""
    headers = {**SECURITY_HEADERS, "Cache-Control": "public, max-age=3600"}
    return Response(_static(name), media_type=STATIC[name], headers=headers)


def human_bytes(size: int | None) -> str:
    """``1.5 MiB`` for a byte count (``"-"`` for None)."""
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # pragma: no cover - the loop always returns
