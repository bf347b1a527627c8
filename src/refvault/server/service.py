"""What one app serves (its vault, key cache, body limit and upload counts), given to routes as a dependency.

:func:`refvault.server.app.create_app` keeps one :class:`Served` on ``app.state.served``; the routes
(module-level functions in ``routes_*.py`` and :mod:`refvault.server.content`) take it as a
``Service`` parameter, so one route module serves any number of apps.
"""

# No ``from __future__ import annotations``: FastAPI reads ``Service`` at runtime.
from dataclasses import dataclass
from typing import Annotated, cast

from fastapi import Depends, Request

from refvault.keys import KeyCache
from refvault.server.limits import Uploads
from refvault.vault.core import Vault

__all__ = ["Served", "Service", "served"]


@dataclass(frozen=True, slots=True)
class Served:
    """The vault an app serves (the caller keeps and closes it), its key cache, capture body limit and upload counts."""

    vault: Vault
    keys: KeyCache
    max_body: int
    uploads: Uploads


async def served(request: Request) -> Served:
    """The :class:`Served` of the app handling ``request``."""
    return cast(Served, request.app.state.served)


Service = Annotated[Served, Depends(served)]
