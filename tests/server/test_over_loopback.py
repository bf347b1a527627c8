"""A real ``refvault serve`` on loopback: a remote Toolbox keeps the local record preview, bodies that lie about
their length, readers that hang up, a key revoked during an MCP SDK session.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from refvault import Client, Scope, Toolbox, Vault, errors, read
from refvault.keys import create_key, revoke_key
from tests.server.world import CONTENT_CANARY, MAX_BODY, MISSING_ID
from tests.servers import free_port, stop_process

# -- a real server on loopback: the remote Toolbox, and bodies that lie ------------------------------


@dataclass(frozen=True)
class Live:
    url: str
    store: Path
    token: str
    host: str
    port: int
    pid: int


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    root = tmp_path_factory.mktemp("review-live")
    store = root / "store"
    with Vault.open(store) as vault:
        _, token = create_key(vault, "acme", "ana")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFVAULT_")}
    command = [sys.executable, "-c", "from refvault.cli import main; main()", "serve", "--store", str(store)]
    command += ["--port", str(port), "--max-body", str(MAX_BODY), "--no-access-log"]
    command += ["--auth-cache-seconds", "0"]  # revocations from other processes are tested to apply at once
    log_path = root / "serve.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/v1/health", timeout=1).status_code == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("refvault serve did not start: " + log_path.read_text())
            time.sleep(0.05)
        yield Live(url, store, token, "127.0.0.1", port, process.pid)
    finally:
        stop_process(process)


def test_a_remote_toolbox_offloads_records_with_the_local_preview(live: Live, tmp_path: Path) -> None:
    """Task 1: ``read.derive`` over a client, so offloaded records keep their preview and describe its schema."""
    scope = Scope("acme", "ana", "toolbox")

    def report(n: int) -> list[dict[str, object]]:
        """A large records result."""
        return [{"i": i, "word": f"word-{i}", "even": i % 2 == 0} for i in range(n)]

    def run(store: Vault | Client) -> tuple[dict[str, Any], dict[str, Any], str]:
        box = Toolbox(store, offload_tokens=1000)
        box.tool(report)
        result = box.call_sync("report", {"n": 600}, scope=scope, tool_call_id="call-1")
        artifact_id = result.artifacts[0]["artifact_id"]
        shown = json.loads(result.content.replace(artifact_id, "ID"))["offloaded"]
        described = json.loads(box.call_sync("describe_artifact", {"artifact_id": artifact_id}, scope=scope).content)
        return shown, described, artifact_id

    with Vault.open(tmp_path / "local") as local:
        local_shown, local_described, _ = run(local)
    with Client(live.url, live.token) as client:
        remote_shown, remote_described, remote_id = run(client)
        assert read.derive(client, scope, remote_id).fields == (
            ("i", "BIGINT"),
            ("word", "VARCHAR"),
            ("even", "BOOLEAN"),
        )
        with pytest.raises(errors.UnsupportedRead):
            read.derive(client, scope, client.put(scope, b"text", media_type="text/plain").artifact_id)
        with pytest.raises(errors.NotFound):
            read.derive(client, scope, MISSING_ID)
        sealed = client.put(scope, b'{"a": 1}\n', media_type="application/x-ndjson", disclosure="sealed")
        with pytest.raises(errors.SealedArtifact):
            read.derive(client, scope, sealed.artifact_id)
        with pytest.raises(errors.SealedArtifact):
            client.derived_records(scope, sealed.artifact_id)
    assert remote_shown["kind"] == "records"
    assert remote_shown == local_shown
    assert (
        remote_described["records"]
        == local_described["records"]
        == {
            "count": 600,
            "fields": {"i": "BIGINT", "word": "VARCHAR", "even": "BOOLEAN"},
        }
    )


def _raw(live: Live, head: str, body: bytes = b"", *, read: bool = True) -> bytes:
    with socket.create_connection((live.host, live.port), timeout=30) as conn:
        conn.sendall(head.encode("latin-1") + body)
        if not read:
            return b""
        received = b""
        with contextlib.suppress(OSError):
            while piece := conn.recv(65_536):
                received += piece
        return received


def _head(live: Live, session: str, extra: str) -> str:
    return (
        "POST /v1/artifacts HTTP/1.1\r\n"
        f"Host: {live.host}\r\n"
        f"Authorization: Bearer {live.token}\r\n"
        f"Refvault-Session: {session}\r\n"
        "Connection: close\r\n"
        f"{extra}\r\n"
    )


def test_content_length_lies_on_the_wire(live: Live) -> None:
    session = "lies"
    # Declares 10 bytes, sends far more than max_body: at most the declared 10 are a body (the HTTP layer
    # may refuse the trailing bytes as a malformed next request).
    short = _raw(live, _head(live, session, "Content-Length: 10\r\n"), b"0123456789" + b"x" * (2 * MAX_BODY))
    assert short.startswith((b"HTTP/1.1 201", b"HTTP/1.1 400")), short[:200]
    # Declares more than max_body: refused before any body is read.
    over = _raw(live, _head(live, session, f"Content-Length: {MAX_BODY + 1}\r\n"))
    assert over.startswith(b"HTTP/1.1 413"), over[:200]
    assert b"application/problem+json" in over
    # Declares a little under max_body, sends a little, hangs up: nothing kept.
    _raw(live, _head(live, session, f"Content-Length: {MAX_BODY}\r\n"), b"z" * 1000, read=False)
    # Chunked past max_body: 413.
    chunk = b"w" * 8192
    chunked_body = (
        b"".join(b"%x\r\n" % len(chunk) + chunk + b"\r\n" for _ in range(MAX_BODY // 8192 + 2)) + b"0\r\n\r\n"
    )
    chunked = _raw(live, _head(live, session, "Transfer-Encoding: chunked\r\n"), chunked_body)
    assert chunked.startswith(b"HTTP/1.1 413"), chunked[:200]
    # Two different lengths: refused outright. Length and chunked (a smuggling classic): chunked decides, one request.
    twice = _raw(live, _head(live, session, "Content-Length: 5\r\nContent-Length: 6\r\n"), b"hello!")
    assert twice.startswith(b"HTTP/1.1 400"), twice[:200]
    both = _raw(
        live, _head(live, session, "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n"), b"5\r\nhello\r\n0\r\n\r\n"
    )
    assert both.count(b"HTTP/1.1 ") == 1
    assert both.startswith((b"HTTP/1.1 201", b"HTTP/1.1 400")), both[:200]
    with Client(live.url, live.token) as client:
        sizes = sorted(d.size for d in client.list(Scope("acme", "ana", session)))
        assert set(sizes) <= {10, 5}, sizes  # the declared 10 bytes, the chunked 5; nothing partial or oversized
        assert client.put(Scope("acme", "ana", session), b"still serving").size == 13


def _open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_readers_that_hang_up_mid_download_leak_no_open_files(live: Live) -> None:
    scope = Scope("acme", "ana", "downloads")
    with Vault.open(live.store) as local:  # larger than the server's max_body, so written beside it
        artifact_id = local.put(scope, os.urandom(3 << 20)).artifact_id
    request = (
        f"GET /v1/artifacts/{artifact_id}/content HTTP/1.1\r\nHost: {live.host}\r\n"
        f"Authorization: Bearer {live.token}\r\nRefvault-Session: downloads\r\n\r\n"
    ).encode()

    def hang_up_early() -> None:
        with socket.create_connection((live.host, live.port), timeout=30) as conn:
            conn.sendall(request)
            assert conn.recv(65_536).startswith(b"HTTP/1.1 200")

    hang_up_early()
    baseline = _open_files(live.pid)
    for _ in range(20):
        hang_up_early()
    deadline = time.monotonic() + 20
    while _open_files(live.pid) > baseline + 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _open_files(live.pid) <= baseline + 3  # every abandoned download's blob handle was closed
    with Client(live.url, live.token) as client:
        assert client.verify_artifact(scope, artifact_id)["ok"]


def test_a_key_revoked_during_an_mcp_sdk_session_is_refused_at_once(live: Live) -> None:
    """With the official SDK client over the wire: a session opened with a key dies at the revocation."""
    import httpx2
    from mcp import Client as McpClient
    from mcp.client.streamable_http import streamable_http_client

    with Vault.open(live.store) as local:
        key, token = create_key(local, "acme", "ana")
        local.put(Scope("acme", "ana", "revoked"), b"visible " + CONTENT_CANARY, media_type="text/plain")

    async def run() -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}", "Refvault-Session": "revoked"})
        async with McpClient(streamable_http_client(live.url + "/mcp", http_client=http)) as session:
            listed = await session.call_tool("list_artifacts", {})
            assert not listed.is_error
            with Vault.open(live.store) as local:
                assert revoke_key(local, key.key_id)
            with pytest.raises(Exception) as refused:  # the SDK surfaces the HTTP 401 as an error
                await session.call_tool("list_artifacts", {})
            assert CONTENT_CANARY.decode() not in str(refused.value)

    anyio.run(run)
    answer = httpx.post(
        live.url + "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": f"Bearer {token}", "Refvault-Session": "revoked", "Accept": "application/json"},
    )
    assert answer.status_code == 401
