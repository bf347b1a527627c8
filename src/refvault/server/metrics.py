"""``GET /metrics``: the server's Prometheus metrics (the ``server`` extra's ``prometheus-client``).

* **No label carries an identifier, a scope value or content.** Labels are route templates (never the
  raw path: ``/v1/artifacts/{artifact_id}``), methods (unknown ones are ``other``), status codes and the
  fixed words of :data:`refvault.observe.EVENTS`; artifact ids, tenants, users, sessions and key ids
  have no label to travel in (``tests/server/test_metrics.py`` looks for canaries in the text).
* **Every request is counted, whichever path serves it.** :class:`RequestMetrics` wraps the whole app,
  the content fast path (:class:`refvault.server.content.FastContent`) and ``/mcp`` included; its cost
  per request is a clock read, two dictionary lookups and the counters' own locks.
* **One view over all workers.** With ``refvault serve --workers N`` (N > 1), ``serve`` makes a directory
  of its own, names it in ``PROMETHEUS_MULTIPROC_DIR`` before the workers start and removes it when it
  stops; each worker writes its samples there and ``/metrics`` (answered by any worker) adds them up
  (prometheus_client's multiprocess mode). One process keeps them in memory.
* **An operator endpoint.** ``/metrics`` needs no API key (scrapers rarely hold one); it says how much
  traffic, errors and latency the server sees, never whose. Restrict it at the network: bind
  ``refvault serve`` to loopback, or publish it through a reverse proxy that does not forward
  ``/metrics`` (docs/http.md, "Operations").

The storage, vault and guard layers report their events through :mod:`refvault.observe`;
:func:`install` makes this module their receiver for the process.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from refvault import observe

__all__ = [
    "METRICS_PATH",
    "MULTIPROC_ENVVAR",
    "Metrics",
    "RequestMetrics",
    "install",
    "metrics",
    "route_template",
    "worker_stopped",
]

METRICS_PATH = "/metrics"
MULTIPROC_ENVVAR = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's multiprocess mode: set by ``refvault serve``
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
UNMATCHED = "(unmatched)"  # the route label of a request no route matched (a 404 for an unknown path)
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_AUDIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class Metrics:
    """This process's metrics (one per process: :func:`metrics`), and the :class:`~refvault.observe.Observer`."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.multiprocess = bool(os.environ.get(MULTIPROC_ENVVAR))
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "refvault_http_requests",
            "HTTP requests answered, by route template, method and status",
            ["route", "method", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "refvault_http_request_duration_seconds",
            "Time from a request's arrival to its response's last byte, by route template and method",
            ["route", "method"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.bytes_in = Counter(
            "refvault_http_request_body_bytes", "Request body bytes received, by route template", ["route"], registry=r
        )
        self.bytes_out = Counter(
            "refvault_http_response_body_bytes", "Response body bytes sent, by route template", ["route"], registry=r
        )
        self.in_progress = Gauge(
            "refvault_http_requests_in_progress",
            "Requests being answered (all workers together)",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.integrity = Counter(
            "refvault_integrity_failures",
            "Verification failures (bytes missing or corrupt, or a catalog row failing its MAC), by kind",
            ["kind"],
            registry=r,
        )
        self.guard_stops = Counter(
            "refvault_guard_stops", "Requests the leak guard refused, by reason", ["reason"], registry=r
        )
        self.policy_denials = Counter(
            "refvault_policy_denials", "Reads a disclosure policy refused, by reason", ["reason"], registry=r
        )
        self.budget_refusals = Counter(
            "refvault_budget_refusals", "Operations refused by a run's budget, by dimension", ["dimension"], registry=r
        )
        self.audit_append = Histogram(
            "refvault_audit_append_seconds",
            "Time to append entries to the audit chain (inside the catalog transaction)",
            buckets=_AUDIT_BUCKETS,
            registry=r,
        )
        self.pool_in_use = Gauge(
            "refvault_catalog_connections_in_use",
            "Catalog connections checked out of the pool (all workers together)",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.pool_checkouts = Counter(
            "refvault_catalog_connection_checkouts", "Catalog connections taken from the pool", registry=r
        )
        self.blob_errors = Counter(
            "refvault_blob_errors",
            "Blob-store requests that failed (after the store's retries), by operation",
            ["operation"],
            registry=r,
        )
        self.blob_retries = Counter(
            "refvault_blob_retries",
            "Retries the blob store made before a request failed, by operation",
            ["operation"],
            registry=r,
        )
        self._events = {
            "integrity_failure": self.integrity,
            "guard_stop": self.guard_stops,
            "policy_denial": self.policy_denials,
            "budget_refusal": self.budget_refusals,
            "blob_error": self.blob_errors,
            "blob_retry": self.blob_retries,
        }
        self._children: dict[tuple[str, str, int], tuple[Any, Any, Any, Any]] = {}
        self._lock = threading.Lock()

    # -- refvault.observe.Observer -------------------------------------------------------------

    def event(self, name: str, reason: str, amount: float) -> None:
        """Count ``amount`` of event ``name`` (``reason`` is already one of its fixed words)."""
        if name == "catalog_connection":
            if reason == "checkout":
                self.pool_in_use.inc()
                self.pool_checkouts.inc()
            elif reason == "checkin":
                self.pool_in_use.dec()
            return
        counter = self._events.get(name)
        if counter is not None:
            counter.labels(reason).inc(amount)

    def timing(self, name: str, seconds: float) -> None:
        if name == "audit_append":
            self.audit_append.observe(seconds)

    # -- requests ----------------------------------------------------------------------------------

    def observe_request(self, route: str, method: str, status: int, seconds: float, sent: int, received: int) -> None:
        """Count one answered request (``route`` a template, ``method`` normalised, ``status`` the code sent)."""
        key = (route, method, status)
        children = self._children.get(key)
        if children is None:
            with self._lock:
                children = (
                    self.requests.labels(route, method, str(status)),
                    self.latency.labels(route, method),
                    self.bytes_out.labels(route),
                    self.bytes_in.labels(route),
                )
                self._children[key] = children
        requests, latency, bytes_out, bytes_in = children
        requests.inc()
        latency.observe(seconds)
        if sent:
            bytes_out.inc(sent)
        if received:
            bytes_in.inc(received)

    def exposition(self) -> tuple[bytes, str]:
        """The text a scrape gets (every worker's samples added up in multiprocess mode), and its media type."""
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
        from prometheus_client.multiprocess import MultiProcessCollector

        if self.multiprocess:
            registry = CollectorRegistry()
            MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


_METRICS: Metrics | None = None
_METRICS_LOCK = threading.Lock()


def metrics() -> Metrics:
    """This process's :class:`Metrics` (made on first use: every app of the process shares them)."""
    global _METRICS
    if _METRICS is None:
        with _METRICS_LOCK:
            if _METRICS is None:
                _METRICS = Metrics()
    return _METRICS


def install() -> Metrics:
    """Make this process's metrics the receiver of :mod:`refvault.observe` events; returns them."""
    found = metrics()
    observe.install(found)
    return found


def worker_stopped() -> None:
    """Tell multiprocess mode this process is gone (its live gauges stop counting); nothing in one process."""
    if os.environ.get(MULTIPROC_ENVVAR):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]


def route_template(scope: Any) -> str:
    """The template of the route that answered (``/v1/artifacts/{artifact_id}``), never the path a client sent."""
    marked = scope.get("refvault.route")
    if marked is not None:
        return str(marked)
    fastapi = scope.get("fastapi")
    effective = fastapi.get("effective_route_context") if isinstance(fastapi, dict) else None
    template = getattr(effective, "path_format", None)  # an included router's route, with its prefix
    if not isinstance(template, str):
        template = getattr(scope.get("route"), "path_format", None)
    if not isinstance(template, str):
        return UNMATCHED
    mounted = str(scope.get("root_path", ""))[len(str(scope.get("app_root_path", ""))) :]
    return mounted + template if mounted else template


class RequestMetrics:
    """ASGI middleware: counts every HTTP request by route template, method and status, with its latency and bytes.

    Outermost in the app, so the content fast path and ``/mcp`` are counted like every route. A request whose
    handler raised before answering counts as 500 (what the server then sends).
    """

    def __init__(self, app: Any, metrics: Metrics | None = None) -> None:
        self.app = app
        self.metrics = metrics if metrics is not None else install()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        sent = received = 0
        gauge = self.metrics.in_progress
        gauge.inc()

        async def counting_receive() -> Any:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
            return message

        async def counting_send(message: Any) -> None:
            nonlocal status, sent
            kind = message["type"]
            if kind == "http.response.body":
                sent += len(message.get("body", b""))
            elif kind == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, counting_receive, counting_send)
        finally:
            gauge.dec()
            method = scope["method"]
            self.metrics.observe_request(
                route_template(scope),
                method if method in _METHODS else "other",
                status,
                time.perf_counter() - start,
                sent,
                received,
            )
