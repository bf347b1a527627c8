"""``refvault serve``: the HTTP API v1 over a vault, and its command line.

The app lives in :mod:`refvault.server.app` (needs the ``server`` extra:
FastAPI and uvicorn); this package imports nothing heavy, so ``refvault
--help`` works without the extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_MAX_BODY",
    "DEFAULT_UPLOADS_PER_KEY",
    "DEFAULT_UPLOADS_PER_TENANT",
    "create_app",
]

DEFAULT_MAX_BODY = 1 << 30  # a capture's body limit unless ``max_body`` says otherwise (1 GiB)
# What keeps one client from stalling the others (refvault.server.limits explains each):
DEFAULT_HEADER_TIMEOUT = 10.0  # seconds for a request's line and headers to arrive, whole
DEFAULT_BODY_TIMEOUT = 30.0  # seconds a request body may go without a byte arriving
DEFAULT_UPLOADS_PER_KEY = 8  # request bodies one API key may have in progress at once
DEFAULT_UPLOADS_PER_TENANT = 16  # ... and all of a tenant's keys together

if TYPE_CHECKING:
    from refvault.server.app import create_app


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from refvault.server import app

        return getattr(app, name)
    raise AttributeError(f"module 'refvault.server' has no attribute {name!r}")
