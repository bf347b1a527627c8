"""``refvault serve``: the HTTP API v1 over a vault, and its command line.

The app lives in :mod:`refvault.server.app` (needs the ``server`` extra:
FastAPI and uvicorn); this package imports nothing heavy, so ``refvault
--help`` works without the extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["DEFAULT_MAX_BODY", "create_app"]

DEFAULT_MAX_BODY = 1 << 30  # a capture's body limit unless ``max_body`` says otherwise (1 GiB)

if TYPE_CHECKING:
    from refvault.server.app import create_app


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from refvault.server import app

        return getattr(app, name)
    raise AttributeError(f"module 'refvault.server' has no attribute {name!r}")
