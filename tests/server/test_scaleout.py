"""Two stateless ``refvault serve`` processes over one PostgreSQL catalog and one S3 bucket.

What one process captures, the other serves (bytes, windows, record queries,
and cursors signed by the first); killing a process in the middle of an
upload costs only that upload: the survivor keeps serving, every published
artifact stays readable, and the half-written upload never becomes an
artifact (its orphaned bytes, if any reached S3, are collected by ``gc``).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from refvault import Scope, Vault
from refvault.keys import create_key
from tests.servers import S3Endpoint, free_port, fresh_database, fresh_prefix, stop_process

pytestmark = pytest.mark.slow

SCOPE = Scope("acme", "ana", "s1")


@dataclass(frozen=True)
class Store:
    catalog: str
    blobs: str
    s3: S3Endpoint

    def open(self, **options: object) -> Vault:
        return Vault.open(self.catalog, blobs=self.blobs, s3_endpoint=self.s3.url, **options)  # type: ignore[arg-type]


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path


def _serve(store: Store, tmp_path: Path, name: str) -> Server:
    port = free_port()
    log = tmp_path / f"{name}.log"
    env = {**os.environ, **store.s3.env()}
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "refvault"),
            "serve",
            "--port",
            str(port),
            "--catalog",
            store.catalog,
            "--blobs",
            store.blobs,
            "--s3-endpoint",
            store.s3.url,
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{name} exited: {log.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(url + "/v1/health", timeout=2).status_code == 200:
                return Server(url, proc, log)
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop_process(proc)
    raise AssertionError(f"{name} did not start: {log.read_text(errors='replace')[-3000:]}")


@pytest.fixture
def store(postgres_url: str, s3_server: S3Endpoint) -> Store:
    return Store(fresh_database(postgres_url), fresh_prefix(s3_server), s3_server)


@pytest.fixture
def token(store: Store) -> str:
    with store.open() as vault:
        _key, secret = create_key(vault, SCOPE.tenant, SCOPE.user)
    return secret


@pytest.fixture
def servers(store: Store, token: str, tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    a = _serve(store, tmp_path, "a")
    try:
        b = _serve(store, tmp_path, "b")
    except BaseException:
        stop_process(a.proc)
        raise
    yield a, b
    for server in (a, b):
        stop_process(server.proc)


def _headers(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Refvault-Session": SCOPE.session, **extra}


def _capture(server: Server, token: str, body: bytes, media_type: str, **metadata: object) -> dict[str, object]:
    headers = _headers(token, **{"Content-Type": media_type})
    if metadata:
        headers["Refvault-Metadata"] = json.dumps(metadata)
    response = httpx.post(server.url + "/v1/artifacts", content=body, headers=headers, timeout=60)
    assert response.status_code == 201, response.text
    descriptor: dict[str, object] = response.json()
    return descriptor


def _records(n: int) -> bytes:
    return b"".join(
        json.dumps({"i": i, "severity": "critical" if i % 7 == 0 else "info"}).encode() + b"\n" for i in range(n)
    )


def test_what_one_server_captures_the_other_serves(servers: tuple[Server, Server], token: str) -> None:
    a, b = servers
    blob = os.urandom(3 << 20)  # large enough for S3, not the catalog
    d = _capture(a, token, blob, "application/octet-stream", filename="blob.bin")
    got = httpx.get(f"{b.url}/v1/artifacts/{d['artifact_id']}/content", headers=_headers(token), timeout=60)
    assert got.status_code == 200
    assert got.content == blob
    assert got.headers["etag"].strip('"') == hashlib.sha256(blob).hexdigest()
    part = httpx.get(
        f"{b.url}/v1/artifacts/{d['artifact_id']}/content",
        headers=_headers(token, Range="bytes=1048570-1048585"),
        timeout=60,
    )
    assert part.status_code == 206
    assert part.content == blob[1048570:1048586]

    text = b"".join(b"line %d\n" % i for i in range(5000))
    t = _capture(a, token, text, "text/plain")
    window = httpx.get(
        f"{b.url}/v1/artifacts/{t['artifact_id']}/window", params={"lines": "10,13"}, headers=_headers(token)
    ).json()
    assert window["text"] == "line 10\nline 11\nline 12\n"

    r = _capture(a, token, _records(3000), "application/x-ndjson")
    query = {"where": {"field": "severity", "op": "eq", "value": "critical"}, "limit": 100}
    first = httpx.post(
        f"{a.url}/v1/artifacts/{r['artifact_id']}/query", json=query, headers=_headers(token), timeout=60
    ).json()
    assert [row["record"]["i"] for row in first["records"]] == list(range(0, 700, 7))
    # The cursor a signed is honoured by b: both read the one key ring in PostgreSQL.
    second = httpx.post(
        f"{b.url}/v1/artifacts/{r['artifact_id']}/query",
        json={**query, "cursor": first["next_cursor"]},
        headers=_headers(token),
        timeout=60,
    ).json()
    assert [row["record"]["i"] for row in second["records"]] == list(range(700, 1400, 7))

    listed = httpx.get(f"{b.url}/v1/artifacts", headers=_headers(token)).json()
    assert {item["artifact_id"] for item in listed["items"]} == {d["artifact_id"], t["artifact_id"], r["artifact_id"]}


def test_killing_a_server_mid_upload_loses_nothing_published(
    servers: tuple[Server, Server], store: Store, token: str
) -> None:
    a, b = servers
    published = [_capture(a, token, os.urandom(size), "application/octet-stream") for size in (100, 2 << 20)]
    published.append(_capture(b, token, os.urandom(1 << 20), "application/octet-stream"))

    started = threading.Event()
    outcome: list[object] = []

    def slow_body() -> Iterator[bytes]:
        for i in range(64):  # 64 MiB, trickled so the kill lands mid-upload
            if i == 4:
                started.set()
            yield os.urandom(1 << 20)
            time.sleep(0.05)

    def upload() -> None:
        try:
            response = httpx.post(
                a.url + "/v1/artifacts",
                content=slow_body(),
                headers=_headers(token, **{"Content-Type": "application/octet-stream"}),
                timeout=120,
            )
            outcome.append(response.status_code)
        except httpx.HTTPError as exc:
            outcome.append(exc)

    uploader = threading.Thread(target=upload)
    uploader.start()
    assert started.wait(30)
    os.killpg(a.proc.pid, signal.SIGKILL)
    uploader.join(60)
    assert outcome
    assert not isinstance(outcome[0], int) or outcome[0] >= 500  # the upload did not complete

    # The survivor serves everything that was published, and keeps capturing.
    for d in published:
        got = httpx.get(f"{b.url}/v1/artifacts/{d['artifact_id']}/content", headers=_headers(token), timeout=60)
        assert got.status_code == 200
        assert "sha256:" + hashlib.sha256(got.content).hexdigest() == d["content_hash"]
    late = _capture(b, token, b"after the crash", "text/plain")
    listed = httpx.get(f"{b.url}/v1/artifacts", headers=_headers(token)).json()
    assert {item["artifact_id"] for item in listed["items"]} == {d["artifact_id"] for d in [*published, late]}

    with store.open(grace=0.0) as vault:
        vault.gc(grace=0.0)
        report = vault.verify()
        assert report.ok
        assert report.unreferenced == 0
        assert {d.artifact_id for d in vault.list(SCOPE)} == {d["artifact_id"] for d in [*published, late]}
