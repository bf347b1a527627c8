"""``GET /v1/ready`` and the SIGTERM drain (``refvault.server.routes_ops``).

Ready: 200 while the catalog and the blob store answer; 503 naming the one that does not, never a URL, a
credential or the failure's own text. Drain: through the real ``refvault serve``, an upload in flight when
SIGTERM comes completes and is stored, a new request meanwhile gets 503 with ``Retry-After`` (or is refused
cleanly), and the process exits 0.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from refvault import Scope, Vault
from refvault.errors import StorageError
from refvault.server.app import create_app
from tests.servers import serve

SECRET = "postgresql://refvault:hunter2-SECRET@db.internal:5432/catalog"


@pytest.fixture
def http(vault: Vault) -> Iterator[TestClient]:
    with TestClient(create_app(vault), raise_server_exceptions=False) as client:
        yield client


def test_ready_when_the_catalog_and_the_blob_store_answer(http: TestClient) -> None:
    response = http.get("/v1/ready")  # no key needed
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "catalog": "ok", "blobs": "ok"}


def _failing(*_: Any, **__: Any) -> Any:
    raise StorageError(f"cannot reach {SECRET}")


@pytest.mark.parametrize(
    ("broken", "named"),
    [
        (("catalog", "get_setting"), ["the catalog"]),
        (("blobs", "exists"), ["the blob store"]),
        (None, ["the catalog", "the blob store"]),
    ],
)
def test_not_ready_names_what_is_down_and_nothing_else(
    http: TestClient, vault: Vault, monkeypatch: pytest.MonkeyPatch, broken: tuple[str, str] | None, named: list[str]
) -> None:
    targets = [broken] if broken is not None else [("catalog", "get_setting"), ("blobs", "exists")]
    for part, method in targets:
        monkeypatch.setattr(getattr(vault, part), method, _failing)
    response = http.get("/v1/ready")
    assert response.status_code == 503
    assert response.headers["content-type"] == "application/problem+json"
    assert int(response.headers["retry-after"]) > 0
    body = response.json()
    assert body["type"].endswith(":not-ready")
    for name in named:
        assert name in body["detail"]
    for name in {"the catalog", "the blob store"} - set(named):
        assert name not in body["detail"]
    assert "hunter2" not in response.text
    assert "db.internal" not in response.text


def _slow_upload_start(url: str, token: str, total: int, first: bytes) -> socket.socket:
    """Open a connection and send a capture's headers and the first part of its body (``total`` bytes in all)."""
    host, port = url.removeprefix("http://").split(":")
    conn = socket.create_connection((host, int(port)), timeout=30)
    head = (
        f"POST /v1/artifacts HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        f"Refvault-Session: s1\r\nContent-Type: application/octet-stream\r\nContent-Length: {total}\r\n\r\n"
    )
    conn.sendall(head.encode() + first)
    return conn


def _response(conn: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        assert piece, "the connection closed before a response"
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", "0")):
        piece = conn.recv(65536)
        if not piece:
            break
        body += piece
    return int(lines[0].split()[1]), headers, body


@pytest.mark.slow
def test_sigterm_finishes_the_upload_in_flight_refuses_new_requests_and_exits_0(tmp_path: Path) -> None:
    payload = os.urandom(300_000)
    with serve(tmp_path / "store") as server:
        assert server.process is not None
        conn = _slow_upload_start(server.url, server.token, len(payload), payload[:1000])
        time.sleep(0.3)  # the request is in flight: its headers and first bytes are in
        os.kill(server.process.pid, signal.SIGTERM)
        time.sleep(0.3)
        try:
            refused = httpx.get(server.url + "/v1/artifacts", headers={"Authorization": f"Bearer {server.token}"})
        except httpx.ConnectError:
            refused = None  # refused cleanly: the server no longer accepts
        if refused is not None:
            assert refused.status_code == 503
            assert int(refused.headers["retry-after"]) > 0
            assert refused.headers["connection"] == "close"
            assert refused.json()["type"].endswith(":unavailable")
        for start in range(1000, len(payload), 50_000):  # the rest of the upload, still slowly
            conn.sendall(payload[start : start + 50_000])
            time.sleep(0.05)
        status, headers, body = _response(conn)
        conn.close()
        assert status == 201
        assert headers.get("connection") == "close"
        artifact_id = json.loads(body)["artifact_id"]
        assert server.process.wait(30) == 0
    assert refused is not None  # the single worker drains while it still accepts: a 503, not a reset
    with Vault.open(tmp_path / "store") as vault:
        assert vault.read_bytes(Scope("acme", "ana", "s1"), artifact_id) == payload
