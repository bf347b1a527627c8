"""Observability overhead: 4 KiB verified reads through the app with metrics and tracing off, metrics on, and both on.

Run with ``.venv/bin/python bench/observability.py`` (also in ``make bench``); ``--quick`` for a short run.

Each configuration is the real app (``create_app``) over one embedded store, driven in this process by a minimal
ASGI caller (no sockets, no HTTP client: what is left is the app's own per-request work, so the overhead shows at
its largest). Every request is ``GET /v1/artifacts/{id}/content`` of a 4 KiB artifact with a valid key; every body
is hashed and compared with the artifact's content hash. The three configurations:

* **baseline**: ``create_app(vault, metrics=False)`` and no tracer provider;
* **metrics**: ``create_app(vault)`` (Prometheus counting every request, the default with the server extra);
* **metrics + tracing**: the same with an OpenTelemetry SDK tracer provider whose processor drops every span
  (the cost of making spans, not of exporting them).

Baseline and metrics repetitions interleave; the tracing samples come after them (a tracer provider, once
set, stays set for the process); medians. Target: metrics on, tracing off, within 5% of the baseline (ratio
>= 0.95).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from harness import SCOPE, KiB, command_line, machine, make_parser, total_time, work_dir

from refvault import Vault
from refvault.keys import create_key
from refvault.server.app import create_app


async def _call(app: Any, path: str, headers: list[tuple[bytes, bytes]]) -> tuple[int, bytes]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8765),
    }
    status = 0
    body = bytearray()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            body.extend(message.get("body", b""))

    await app(scope, receive, send)
    return status, bytes(body)


def _rate(app: Any, path: str, headers: list[tuple[bytes, bytes]], digest: str, seconds: float) -> float:
    async def run() -> float:
        done = 0
        began = time.perf_counter()
        while time.perf_counter() - began < seconds:
            status, body = await _call(app, path, headers)
            if status != 200 or "sha256:" + hashlib.sha256(body).hexdigest() != digest:
                raise SystemExit(f"integrity failure or error: status {status}")
            done += 1
        return done / (time.perf_counter() - began)

    return asyncio.run(run())


def _dropping_provider() -> Any:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    class Drop(SpanProcessor):
        def on_end(self, span: Any) -> None:
            pass

    provider = TracerProvider()
    provider.add_span_processor(Drop())
    return provider


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser(__doc__, quick="2 s per sample, 3 repetitions", reps="repetitions (default 5)")
    args = parser.parse_args(argv)
    seconds, reps = (2.0, 3) if args.quick else (5.0, args.reps or 5)
    began = time.perf_counter()
    print(command_line("observability.py", argv))
    print(machine())
    from opentelemetry import trace

    with work_dir("observability", args.keep) as root, Vault.open(root / "store") as vault:
        descriptor = vault.put(SCOPE, os.urandom(4 * KiB), media_type="application/octet-stream")
        _, token = create_key(vault, SCOPE.tenant, SCOPE.user)
        headers = [(b"authorization", f"Bearer {token}".encode()), (b"refvault-session", SCOPE.session.encode())]
        path = f"/v1/artifacts/{descriptor.artifact_id}/content"
        bare, counted = create_app(vault, metrics=False), create_app(vault)
        samples: dict[str, list[float]] = {"baseline": [], "metrics": [], "metrics + tracing": []}
        for rep in range(reps):  # baseline and metrics interleaved, the order alternating
            pair = [("baseline", bare), ("metrics", counted)]
            for name, app in pair if rep % 2 == 0 else pair[::-1]:
                samples[name].append(_rate(app, path, headers, descriptor.content_hash, seconds))
        trace.set_tracer_provider(_dropping_provider())  # process-wide and for good: so tracing comes last
        for _ in range(reps):
            samples["metrics + tracing"].append(_rate(counted, path, headers, descriptor.content_hash, seconds))
        base = statistics.median(samples["baseline"])
        print(f"GET 4 KiB verified, in-process ASGI, medians of {reps} samples of {seconds:g} s:")
        for name, values in samples.items():
            rate = statistics.median(values)
            print(f"  {name:<20} {rate:>9,.0f} req/s   x{rate / base:.3f} of baseline")
        ratio = statistics.median(samples["metrics"]) / base
        verdict = "met" if ratio >= 0.95 else "MISSED"
        print(f"metrics on, tracing off: x{ratio:.3f} of baseline (target >= 0.95): {verdict}")
    print(total_time(began))
    return 1 if args.strict and ratio < 0.95 else 0


if __name__ == "__main__":
    sys.exit(main())
