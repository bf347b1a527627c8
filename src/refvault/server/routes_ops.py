"""What an operator's tools call, and what SIGTERM does: ``GET /v1/ready``, ``GET /metrics`` and the drain.

* **Ready means reachable.** ``GET /v1/ready`` makes one cheap catalog query and one cheap blob-store
  call (a lookup of a key no blob has); 200 when both answer, else 503 ``not-ready`` naming which is
  down (``the catalog``, ``the blob store``), never a URL, a credential or the error's text.
  ``/v1/health`` says only that the process answers. Neither needs a key.
* **SIGTERM drains.** Under ``refvault serve`` the first SIGTERM starts a drain (:class:`Drain`): the
  requests in flight finish (an upload completes and is stored), every new request gets 503
  ``unavailable`` with ``Retry-After`` and ``Connection: close`` while the server still accepts
  connections; when none is left in flight (or after :data:`DRAIN_SECONDS`), uvicorn's own graceful
  shutdown runs (it stops accepting and waits for what is still open), and the process exits 0. A
  second SIGTERM skips the wait. ``/v1/health`` and ``/metrics`` are answered throughout.
* ``GET /metrics``: :mod:`refvault.server.metrics`.
"""

# No ``from __future__ import annotations``: FastAPI reads the routes' annotations at runtime.
import asyncio
import signal
import threading
from types import FrameType
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from refvault.blobs.base import BlobKey
from refvault.server.problems import problem
from refvault.server.schema import PROBLEM_RESPONSE
from refvault.server.service import Service
from refvault.server.threads import blocking
from refvault.vault.core import Vault

__all__ = ["DRAIN_SECONDS", "RETRY_AFTER", "Drain", "Draining", "Readiness", "metrics_router", "router"]

DRAIN_SECONDS = 30.0  # the longest a drain answers 503 before uvicorn's shutdown takes over
RETRY_AFTER = 5  # seconds, in the Retry-After of a drain's or a readiness check's 503
_PROBE_SETTING = "refvault.ready-probe"  # a setting no one writes: the catalog's cheapest indexed read
_PROBE_KEY = BlobKey("0" * 32, "0" * 64)  # no blob has it: a HEAD (S3) or a stat (files)
_ALWAYS_ANSWERED = frozenset({"/v1/health", "/metrics"})

router = APIRouter(responses={"default": PROBLEM_RESPONSE})
metrics_router = APIRouter(responses={"default": PROBLEM_RESPONSE})


class Readiness(BaseModel):
    """Both stores answered: ``{"status": "ready", "catalog": "ok", "blobs": "ok"}``."""

    status: str
    catalog: str
    blobs: str


@router.get("/ready", response_model=Readiness, tags=["service"], responses={503: PROBLEM_RESPONSE})
async def ready(service: Service) -> JSONResponse:
    """Readiness: the catalog and the blob store answer a cheap call each (503 ``not-ready`` naming which does not)."""
    down = await blocking(unreachable, service.vault)
    if down:
        detail = f"not ready: {' and '.join(down)} did not answer"
        return problem(503, "not-ready", "Not ready", detail, "StorageError", headers={"Retry-After": str(RETRY_AFTER)})
    return JSONResponse({"status": "ready", "catalog": "ok", "blobs": "ok"})


def unreachable(vault: Vault) -> list[str]:
    """Which of ``the catalog`` and ``the blob store`` failed its probe (in a worker thread); empty when both answer."""
    down = []
    try:
        vault.catalog.get_setting(_PROBE_SETTING)
    except Exception:
        down.append("the catalog")
    try:
        vault.blobs.exists(_PROBE_KEY)
    except Exception:
        down.append("the blob store")
    return down


@metrics_router.get(
    "/metrics",
    response_class=Response,
    tags=["service"],
    responses={
        200: {
            "description": "The Prometheus text exposition (no key needed: restrict it at the network)",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    },
)
async def metrics_text() -> Response:
    """Prometheus metrics of every worker; labels are route templates, methods, statuses and fixed words only."""
    from refvault.server.metrics import metrics

    body, media_type = await run_in_threadpool(metrics().exposition)
    return Response(body, media_type=media_type, headers={"Cache-Control": "no-store"})


# -- the drain -------------------------------------------------------------------------------------


class Draining:
    """One app's drain state: whether it drains, and how many requests it is answering (on its event loop)."""

    def __init__(self, seconds: float = DRAIN_SECONDS) -> None:
        self.seconds = seconds
        self.draining = False
        self.in_flight = 0
        self._task: asyncio.Task[None] | None = None

    def hook_sigterm(self) -> None:
        """Start the drain on SIGTERM, then hand the signal to the server's own handler (uvicorn's).

        Called at the app's startup on the event loop's thread; does nothing off the main thread or where no
        Python handler is installed for SIGTERM (the server does not handle it).
        """
        if threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGTERM)
        if not callable(previous):
            return
        loop = asyncio.get_running_loop()

        def on_term(sig: int, frame: FrameType | None) -> None:
            if self.draining:  # a second SIGTERM: stop waiting
                previous(sig, frame)
                return
            self.draining = True
            loop.call_soon_threadsafe(self._start, previous, sig)

        signal.signal(signal.SIGTERM, on_term)

    def _start(self, previous: Any, sig: int) -> None:
        self._task = asyncio.get_running_loop().create_task(self._hand_over(previous, sig))

    async def _hand_over(self, previous: Any, sig: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.seconds
        while self.in_flight > 0 and loop.time() < deadline:
            await asyncio.sleep(0.05)
        previous(sig, None)


class Drain:
    """ASGI middleware: while draining, new requests get 503 ``unavailable`` (``Retry-After``, ``Connection: close``).

    Requests already in flight finish; responses that start during the drain carry ``Connection: close``.
    ``/v1/health`` and ``/metrics`` are answered as usual.
    """

    def __init__(self, app: Any, state: Draining) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in _ALWAYS_ANSWERED:
            await self.app(scope, receive, send)
            return
        state = self.state
        if state.draining:
            scope["refvault.route"] = "(draining)"  # the route label of a refused request (refvault.server.metrics)
            refusal = problem(
                503,
                "unavailable",
                "Unavailable",
                "the server is shutting down; retry shortly (another instance may answer)",
                "StorageError",
                headers={"Retry-After": str(RETRY_AFTER), "Connection": "close"},
            )
            await refusal(scope, receive, send)
            return

        async def closing_send(message: Any) -> None:
            if state.draining and message["type"] == "http.response.start":
                headers = [(name, value) for name, value in message.get("headers", ()) if name.lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        state.in_flight += 1
        try:
            await self.app(scope, receive, closing_send)
        finally:
            state.in_flight -= 1
