"""The worker threads every vault and catalog call of the HTTP API runs in (the event loop never blocks).

One hop per request where possible (a recently checked API key is answered from memory). Reads
take at most :data:`READ_THREADS` threads per process, which the catalog's connection pool covers
(no connection is opened per request); captures run in threads of their own
(:meth:`refvault.server.limits.Uploads.run_capture`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import anyio
import anyio.to_thread

__all__ = ["READ_THREADS", "blocking"]

T = TypeVar("T")

READ_THREADS = 20  # worker threads per process (and event loop) for everything but captures

_limiters: tuple[Any, anyio.CapacityLimiter] | None = None  # (event loop, its read limiter), the last one asked for


def _read_limiter() -> anyio.CapacityLimiter | None:
    """This event loop's limiter of read threads (one per loop: a limiter belongs to the loop it waits on).

    None (anyio's default limiter) outside asyncio. Kept for the last loop asked
    only: a server runs one loop per process.
    """
    global _limiters
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    if _limiters is None or _limiters[0] is not loop:
        _limiters = (loop, anyio.CapacityLimiter(READ_THREADS))
    return _limiters[1]


async def blocking(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``func(*args, **kwargs)`` in a worker thread, at most :data:`READ_THREADS` at once."""
    return await anyio.to_thread.run_sync(partial(func, *args, **kwargs), limiter=_read_limiter())
