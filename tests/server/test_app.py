"""The HTTP API v1 (``refvault.server.app``): every endpoint, ranges, ETags, streaming capture, problems.

Most tests drive the ASGI app in-process (FastAPI's TestClient); the last ones
start ``refvault serve`` as a real process on a loopback port and talk HTTP to it.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fastapi.testclient import TestClient

from refvault import Scope, Vault
from refvault.errors import StorageError
from refvault.keys import create_key
from refvault.model import format_time
from refvault.server.app import PIECE, create_app
from tests.conftest import Clock, Tamper
from tests.servers import free_port

SCOPE = Scope("acme", "ana", "s1")
MISSING_ID = "art_" + "a" * 26
CANARY = "CANARY-7f3a9c-DO-NOT-ECHO"
MAX_BODY = 3 * 1024 * 1024
BIG = bytes(range(256)) * (2 * PIECE // 256 + 77)  # a little over two 1 MiB pieces
PROBLEM_KEYS = {"type", "title", "status", "detail", "error"}


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def vault(tmp_path: Path, clock: Clock) -> Iterator[Vault]:
    with Vault.open(tmp_path / "store", clock=clock) as opened:
        yield opened


@pytest.fixture
def token(vault: Vault) -> str:
    return create_key(vault, "acme", "ana")[1]


@pytest.fixture
def client(vault: Vault) -> Iterator[TestClient]:
    with TestClient(create_app(vault, max_body=MAX_BODY), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Refvault-Session": SCOPE.session}


def assert_problem(response: httpx.Response, status: int, slug: str, error: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert PROBLEM_KEYS <= set(body) <= PROBLEM_KEYS | {"reason"}
    assert body["type"] == f"urn:refvault:problem:{slug}"
    assert body["status"] == status
    if error is not None:
        assert body["error"] == error
    assert "Traceback" not in response.text
    return body


def capture(
    client: TestClient, headers: dict[str, str], data: Any, content_type: str = "text/plain", **metadata: Any
) -> dict[str, Any]:
    extra = {"Content-Type": content_type}
    if metadata:
        extra["Refvault-Metadata"] = json.dumps(metadata)
    response = client.post("/v1/artifacts", content=data, headers={**headers, **extra})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    assert response.headers["location"] == f"/v1/artifacts/{body['artifact_id']}"
    return body


# -- capture, describe, list, delete -----------------------------------------------------------


def test_health_needs_no_key(client: TestClient) -> None:
    response = client.get("/v1/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_capture_returns_the_descriptor_and_stores_the_bytes(
    client: TestClient, headers: dict[str, str], vault: Vault
) -> None:
    metadata = {
        "filename": "notes.txt",
        "tool_call_id": "call_1",
        "run_id": "run_9",
        "schema_version": "v2",
        "source_version": {"snapshot_id": "abc"},
        "completeness": {"status": "complete"},
        "expires_at": "2099-01-01T00:00:00Z",
    }
    body = capture(client, headers, b"hello\n", "Text/Plain; Charset=UTF-8", **metadata)
    stored = vault.describe(SCOPE, body["artifact_id"])
    assert body == stored.to_dict()
    assert body["retrieval"]["media_type"] == "text/plain; charset=UTF-8"
    assert body["retrieval"]["filename"] == "notes.txt"
    assert body["tool_call_id"] == "call_1"
    assert body["schema_version"] == "v2"
    assert body["scope"] == {"tenant": "acme", "user": "ana", "session": "s1", "run_id": "run_9"}
    assert body["expires_at"] == "2099-01-01T00:00:00.000000Z"
    assert vault.read_bytes(SCOPE, body["artifact_id"]) == b"hello\n"
    assert client.get(f"/v1/artifacts/{body['artifact_id']}", headers=headers).json() == body


def test_metadata_media_type_overrides_content_type_and_default_is_octet_stream(
    client: TestClient, headers: dict[str, str]
) -> None:
    overridden = capture(client, headers, b"{}", "text/plain", media_type="application/json", disclosure="sealed")
    assert overridden["retrieval"]["media_type"] == "application/json"
    assert overridden["retrieval"]["disclosure"] == "sealed"
    response = client.post("/v1/artifacts", content=b"\x00\x01", headers=headers)
    assert response.status_code == 201
    assert response.json()["retrieval"]["media_type"] == "application/octet-stream"


def test_capture_streams_the_body_to_the_vault(
    client: TestClient, headers: dict[str, str], vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    real_put = vault.put

    def recording_put(scope: Scope, data: Any, **options: Any) -> Any:
        assert not isinstance(data, bytes | bytearray), "the body must arrive as an iterator, not one buffer"

        def counted() -> Iterator[bytes]:
            for piece in data:
                seen.append(len(piece))
                yield piece

        return real_put(scope, counted(), **options)

    monkeypatch.setattr(vault, "put", recording_put)

    async def upload() -> httpx.Response:
        async def pieces() -> AsyncIterator[bytes]:
            for i in range(0, len(BIG), 65536):
                yield BIG[i : i + 65536]

        transport = httpx.ASGITransport(app=client.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return await http.post("/v1/artifacts", content=pieces(), headers=headers)

    response = anyio.run(upload)
    assert response.status_code == 201, response.text
    body = response.json()
    assert len(seen) > 1
    assert sum(seen) == len(BIG)
    assert max(seen) < len(BIG)
    assert vault.read_bytes(SCOPE, body["artifact_id"]) == BIG
    assert body["content_hash"] == "sha256:" + hashlib.sha256(BIG).hexdigest()


def test_idempotent_capture_replays_and_conflicts(client: TestClient, headers: dict[str, str], vault: Vault) -> None:
    keyed = {**headers, "Idempotency-Key": "call_7:0"}
    first = capture(client, keyed, b"same bytes")
    again = capture(client, keyed, iter([b"same ", b"bytes"]))
    assert again == first
    conflict = client.post("/v1/artifacts", content=b"other bytes", headers={**keyed, "Content-Type": "text/plain"})
    assert_problem(conflict, 409, "idempotency-conflict", "IdempotencyConflict")
    assert [d.artifact_id for d in vault.list(SCOPE)] == [first["artifact_id"]]


@pytest.mark.parametrize("declared", [True, False])
def test_body_over_max_body_is_413_and_nothing_is_stored(
    client: TestClient, headers: dict[str, str], vault: Vault, declared: bool
) -> None:
    data = b"x" * (MAX_BODY + 1)
    content: Any = data if declared else iter([data[:PIECE], data[PIECE:]])  # an iterator is sent chunked
    response = client.post("/v1/artifacts", content=content, headers=headers)
    body = assert_problem(response, 413, "too-large", "TooLarge")
    assert str(MAX_BODY) in body["detail"]
    assert vault.list(SCOPE) == []
    assert vault.gc(grace=0).blobs_removed == 0  # no blob was ever published for it
    exactly = client.post("/v1/artifacts", content=iter([data[:MAX_BODY]]), headers=headers)
    assert exactly.status_code == 201


@pytest.mark.parametrize(
    ("extra", "slug"),
    [
        ({"Refvault-Metadata": "{not json"}, "invalid-metadata"),
        ({"Refvault-Metadata": "[1, 2]"}, "invalid-metadata"),
        ({"Refvault-Metadata": '{"colour": "red"}'}, "invalid-metadata"),
        ({"Refvault-Metadata": '{"expires_at": "yesterday"}'}, "invalid-metadata"),
        ({"Refvault-Metadata": '{"expires_at": "2020-01-01T00:00:00"}'}, "invalid-metadata"),
        ({"Refvault-Metadata": '{"disclosure": "public"}'}, "invalid-metadata"),
        ({"Refvault-Metadata": '{"source_version": [1]}'}, "invalid-metadata"),
        ({"Refvault-Metadata": '{"created_at": 12}'}, "invalid-metadata"),
        ({"Refvault-Metadata": '{"filename": "a/b"}'}, "invalid-metadata"),
        ({"Refvault-Metadata": '{"n": NaN}'}, "invalid-metadata"),
        ({"Content-Type": "not a media type"}, "invalid-metadata"),
        ({"Idempotency-Key": "k" * 300}, "invalid-metadata"),
        ({"Refvault-Session": "bad session!"}, "invalid-argument"),
        ({"Refvault-Session": ""}, "invalid-argument"),
    ],
)
def test_malformed_capture_headers_are_400_and_store_nothing(
    client: TestClient, headers: dict[str, str], vault: Vault, extra: dict[str, str], slug: str
) -> None:
    response = client.post("/v1/artifacts", content=b"payload", headers={**headers, **extra})
    assert_problem(response, 400, slug)
    assert vault.list(SCOPE) == []


def test_non_ascii_metadata_header_is_400(client: TestClient, headers: dict[str, str]) -> None:
    raw = '{"filename": "café.txt"}'.encode("latin-1")
    response = client.post("/v1/artifacts", content=b"x", headers={**headers, "Refvault-Metadata": raw})  # type: ignore[dict-item]
    body = assert_problem(response, 400, "invalid-metadata")
    assert "ASCII" in body["detail"]
    escaped = client.post(
        "/v1/artifacts", content=b"x", headers={**headers, "Refvault-Metadata": json.dumps({"filename": "café.txt"})}
    )
    assert escaped.json()["retrieval"]["filename"] == "café.txt"


def test_missing_session_header_is_400(client: TestClient, token: str) -> None:
    response = client.get("/v1/artifacts", headers={"Authorization": f"Bearer {token}"})
    body = assert_problem(response, 400, "invalid-argument", "InvalidArgument")
    assert "Refvault-Session" in body["detail"]


def test_list_pages_newest_first(client: TestClient, headers: dict[str, str], clock: Clock) -> None:
    ids = []
    for n in range(3):
        ids.append(capture(client, headers, f"n{n}".encode())["artifact_id"])
        clock.advance(seconds=1)
    first = client.get("/v1/artifacts", params={"limit": 2}, headers=headers).json()
    assert [d["artifact_id"] for d in first["items"]] == [ids[2], ids[1]]
    assert first["next_offset"] == 2
    rest = client.get("/v1/artifacts", params={"limit": 2, "offset": 2}, headers=headers).json()
    assert [d["artifact_id"] for d in rest["items"]] == [ids[0]]
    assert rest["next_offset"] is None
    assert_problem(client.get("/v1/artifacts", params={"limit": 0}, headers=headers), 400, "invalid-argument")
    other_session = {**headers, "Refvault-Session": "s2"}
    assert client.get("/v1/artifacts", headers=other_session).json() == {"items": [], "next_offset": None}


def test_delete_then_absent(client: TestClient, headers: dict[str, str]) -> None:
    artifact_id = capture(client, headers, b"bye")["artifact_id"]
    response = client.delete(f"/v1/artifacts/{artifact_id}", headers=headers)
    assert response.status_code == 200
    report = response.json()
    assert report["root"] == artifact_id
    assert report["deleted"] == [{"id": artifact_id, "kind": "artifact", "bytes": 3}]
    assert (report["kept"], report["grants_revoked"], report["not_erasable"]) == ([], [], [])
    assert_problem(client.get(f"/v1/artifacts/{artifact_id}", headers=headers), 404, "not-found", "NotFound")
    assert_problem(client.delete(f"/v1/artifacts/{artifact_id}", headers=headers), 404, "not-found")


def test_absent_and_malformed_ids_are_the_same_404(client: TestClient, headers: dict[str, str]) -> None:
    absent = assert_problem(client.get(f"/v1/artifacts/{MISSING_ID}", headers=headers), 404, "not-found")
    assert absent["detail"] == f"artifact {MISSING_ID} not found in this scope"
    for path in ("/v1/artifacts/nope", "/v1/artifacts/art_UPPER/content", "/v1/artifacts/x/window"):
        malformed = assert_problem(client.get(path, headers=headers), 404, "not-found", "NotFound")
        assert {k: v for k, v in malformed.items() if k != "detail"} == {
            k: v for k, v in absent.items() if k != "detail"
        }


def test_expired_artifact_is_410(client: TestClient, headers: dict[str, str], clock: Clock) -> None:
    expires = format_time(clock.now + timedelta(minutes=5))
    artifact_id = capture(client, headers, b"soon gone", expires_at=expires)["artifact_id"]
    clock.advance(minutes=6)
    assert_problem(client.get(f"/v1/artifacts/{artifact_id}", headers=headers), 410, "expired", "Expired")
    assert_problem(client.get(f"/v1/artifacts/{artifact_id}/content", headers=headers), 410, "expired")


# -- content: ranges, ETags ---------------------------------------------------------------------


@pytest.fixture
def big(client: TestClient, headers: dict[str, str]) -> dict[str, Any]:
    return capture(client, headers, BIG, "application/octet-stream")


def test_content_streams_verified_bytes_with_etag(
    client: TestClient, headers: dict[str, str], big: dict[str, Any]
) -> None:
    response = client.get(f"/v1/artifacts/{big['artifact_id']}/content", headers=headers)
    assert response.status_code == 200
    assert response.content == BIG
    assert response.headers["etag"] == '"' + hashlib.sha256(BIG).hexdigest() + '"'
    assert response.headers["accept-ranges"] == "bytes"
    assert response.headers["content-length"] == str(len(BIG))
    assert response.headers["content-type"] == "application/octet-stream"


def test_text_content_keeps_its_media_type(client: TestClient, headers: dict[str, str]) -> None:
    artifact_id = capture(client, headers, b"plain", "text/plain")["artifact_id"]
    response = client.get(f"/v1/artifacts/{artifact_id}/content", headers=headers)
    assert response.headers["content-type"] == "text/plain"  # no charset added on the way out
    assert response.content == b"plain"


@pytest.mark.parametrize(
    ("spec", "start", "end"),
    [
        ("bytes=2-8", 2, 9),
        ("bytes=0-0", 0, 1),
        (f"bytes={PIECE - 5}-{2 * PIECE + 5}", PIECE - 5, 2 * PIECE + 6),
        ("bytes=100-", 100, len(BIG)),
        ("bytes=-4", len(BIG) - 4, len(BIG)),
        (f"bytes=-{len(BIG) + 10}", 0, len(BIG)),
        (f"bytes=10-{len(BIG) * 2}", 10, len(BIG)),
        (f"bytes={len(BIG) - 1}-", len(BIG) - 1, len(BIG)),
    ],
)
def test_single_ranges_are_206(
    client: TestClient, headers: dict[str, str], big: dict[str, Any], spec: str, start: int, end: int
) -> None:
    response = client.get(f"/v1/artifacts/{big['artifact_id']}/content", headers={**headers, "Range": spec})
    assert response.status_code == 206
    assert response.content == BIG[start:end]
    assert response.headers["content-range"] == f"bytes {start}-{end - 1}/{len(BIG)}"
    assert response.headers["content-length"] == str(end - start)


@pytest.mark.parametrize("spec", [f"bytes={len(BIG)}-", f"bytes={len(BIG) + 5}-{len(BIG) + 9}", "bytes=-0"])
def test_unsatisfiable_ranges_are_416(
    client: TestClient, headers: dict[str, str], big: dict[str, Any], spec: str
) -> None:
    response = client.get(f"/v1/artifacts/{big['artifact_id']}/content", headers={**headers, "Range": spec})
    assert_problem(response, 416, "range-not-satisfiable")
    assert response.headers["content-range"] == f"bytes */{len(BIG)}"


@pytest.mark.parametrize("spec", ["bytes=0-1,4-5", "bytes=9-3", "items=0-1", "bytes=a-b", "bytes=-"])
def test_multi_and_malformed_ranges_send_everything(
    client: TestClient, headers: dict[str, str], big: dict[str, Any], spec: str
) -> None:
    response = client.get(f"/v1/artifacts/{big['artifact_id']}/content", headers={**headers, "Range": spec})
    assert response.status_code == 200
    assert response.content == BIG
    assert "content-range" not in response.headers


def test_empty_artifact_content_and_ranges(client: TestClient, headers: dict[str, str]) -> None:
    artifact_id = capture(client, headers, b"")["artifact_id"]
    whole = client.get(f"/v1/artifacts/{artifact_id}/content", headers=headers)
    assert whole.status_code == 200
    assert whole.content == b""
    assert whole.headers["content-length"] == "0"
    ranged = client.get(f"/v1/artifacts/{artifact_id}/content", headers={**headers, "Range": "bytes=0-"})
    assert_problem(ranged, 416, "range-not-satisfiable")


def test_etag_conditionals(client: TestClient, headers: dict[str, str], big: dict[str, Any]) -> None:
    url = f"/v1/artifacts/{big['artifact_id']}/content"
    etag = client.get(url, headers={**headers, "Range": "bytes=0-0"}).headers["etag"]
    for match in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        response = client.get(url, headers={**headers, "If-None-Match": match})
        assert response.status_code == 304, match
        assert response.content == b""
        assert response.headers["etag"] == etag
    other = client.get(url, headers={**headers, "If-None-Match": '"0000"'})
    assert other.status_code == 200
    assert other.content == BIG
    stale = client.get(url, headers={**headers, "Range": "bytes=0-9", "If-Range": '"0000"'})
    assert stale.status_code == 200
    assert stale.content == BIG
    fresh = client.get(url, headers={**headers, "Range": "bytes=0-9", "If-Range": etag})
    assert fresh.status_code == 206
    assert fresh.content == BIG[:10]


def test_sealed_content_is_served_but_model_reads_refuse(client: TestClient, headers: dict[str, str]) -> None:
    artifact_id = capture(client, headers, b"secret text\n", "text/plain", disclosure="sealed")["artifact_id"]
    response = client.get(f"/v1/artifacts/{artifact_id}/content", headers=headers)
    assert response.status_code == 200
    assert response.content == b"secret text\n"
    window = client.get(f"/v1/artifacts/{artifact_id}/window", headers=headers)
    assert_problem(window, 403, "sealed", "SealedArtifact")
    grep = client.get(f"/v1/artifacts/{artifact_id}/grep", params={"pattern": "secret"}, headers=headers)
    assert "secret text" not in assert_problem(grep, 403, "sealed")["detail"]


def test_damage_before_the_first_byte_is_a_500_problem(
    client: TestClient, headers: dict[str, str], big: dict[str, Any], vault: Vault
) -> None:
    key = vault.catalog.find(SCOPE, big["artifact_id"]).key  # type: ignore[union-attr]
    damaged = bytearray(BIG)
    damaged[10] ^= 0xFF
    Tamper(vault).set_bytes(key, bytes(damaged))
    response = client.get(f"/v1/artifacts/{big['artifact_id']}/content", headers=headers)
    body = assert_problem(response, 500, "integrity-error", "IntegrityError")
    assert big["artifact_id"] in body["detail"]
    assert_problem(client.get(f"/v1/artifacts/{big['artifact_id']}/verify", headers=headers), 500, "integrity-error")


# -- reads ------------------------------------------------------------------------------------


def test_window_and_grep(client: TestClient, headers: dict[str, str]) -> None:
    text = "".join(f"line {n}\n" for n in range(50)).encode()
    artifact_id = capture(client, headers, text, "text/plain")["artifact_id"]
    lines = client.get(f"/v1/artifacts/{artifact_id}/window", params={"lines": "3,5"}, headers=headers).json()
    assert lines["text"] == "line 3\nline 4\n"
    assert lines["next"] == {"lines": [5, 7]}
    tail = client.get(f"/v1/artifacts/{artifact_id}/window", params={"lines": "48,"}, headers=headers).json()
    assert tail["text"] == "line 48\nline 49\n"
    assert tail["next"] is None
    window = client.get(
        f"/v1/artifacts/{artifact_id}/window", params={"bytes": "7,6", "max_chars": 100}, headers=headers
    ).json()
    assert window["text"] == "line 1"
    assert window["unit"] == "bytes"
    found = client.get(
        f"/v1/artifacts/{artifact_id}/grep", params={"pattern": "line 4", "max_matches": 3}, headers=headers
    ).json()
    assert [m["line"] for m in found["matches"]] == [4, 40, 41]
    assert found["truncated"] is True
    regex = client.get(
        f"/v1/artifacts/{artifact_id}/grep", params={"pattern": "^line 1[0-2]$", "regex": "true"}, headers=headers
    ).json()
    assert [m["line"] for m in regex["matches"]] == [10, 11, 12]
    assert regex["scan_complete"] is True
    for params in ({"lines": "5,2"}, {"lines": "x"}, {"lines": "1,2", "bytes": "0,1"}, {"max_chars": 0}):
        response = client.get(f"/v1/artifacts/{artifact_id}/window", params=params, headers=headers)
        assert_problem(response, 400, "invalid-argument")
    assert_problem(client.get(f"/v1/artifacts/{artifact_id}/grep", headers=headers), 400, "invalid-argument")


def test_window_of_binary_is_422(client: TestClient, headers: dict[str, str], big: dict[str, Any]) -> None:
    response = client.get(f"/v1/artifacts/{big['artifact_id']}/window", headers=headers)
    assert_problem(response, 422, "unsupported-read", "UnsupportedRead")


def test_query_pages_with_cursors(client: TestClient, headers: dict[str, str]) -> None:
    rows = b"".join(json.dumps({"n": n, "even": n % 2 == 0}).encode() + b"\n" for n in range(25))
    artifact_id = capture(client, headers, rows, "application/x-ndjson")["artifact_id"]
    url = f"/v1/artifacts/{artifact_id}/query"
    selection = {"where": {"field": "even", "op": "eq", "value": True}, "order": [{"field": "n", "direction": "desc"}]}
    page = client.post(url, json={**selection, "limit": 5, "max_scan": None}, headers=headers).json()
    seen = [r["record"]["n"] for r in page["records"]]
    while page["has_more"]:
        page = client.post(url, json={**selection, "limit": 5, "cursor": page["next_cursor"]}, headers=headers).json()
        seen += [r["record"]["n"] for r in page["records"]]
    assert seen == list(range(24, -1, -2))
    everything = client.post(url, headers=headers).json()
    assert everything["returned_records"] == 25
    forged = client.post(url, json={**selection, "cursor": "v1.forged"}, headers=headers)
    body = assert_problem(forged, 400, "invalid-cursor", "InvalidCursor")
    assert body["reason"] == "malformed"
    bad_field = client.post(url, json={"fields": ["nope"]}, headers=headers)
    assert_problem(bad_field, 400, "invalid-query", "InvalidQuery")
    for content in (b"{", b"[1]", b'{"limit": NaN}', b'{"colour": 1}', b"\xff"):
        assert_problem(client.post(url, content=content, headers=headers), 400, "invalid-query")
    too_big = client.post(url, content=b" " * (2 * 1024 * 1024), headers=headers)
    assert_problem(too_big, 413, "too-large")


def test_verify_reads_everything(client: TestClient, headers: dict[str, str], big: dict[str, Any]) -> None:
    response = client.get(f"/v1/artifacts/{big['artifact_id']}/verify", headers=headers)
    assert response.json() == {
        "artifact_id": big["artifact_id"],
        "ok": True,
        "content_hash": big["content_hash"],
        "size": len(BIG),
    }


# -- problems -----------------------------------------------------------------------------------


def test_unknown_route_and_wrong_method_are_problems(client: TestClient, headers: dict[str, str]) -> None:
    assert_problem(client.get(f"/v1/{CANARY}", headers=headers), 404, "not-found")
    wrong = client.put("/v1/health")
    assert_problem(wrong, 405, "method-not-allowed")
    assert wrong.headers["allow"] == "GET"
    assert_problem(client.get("/v1/artifacts/", headers=headers), 404, "not-found")


def test_storage_failure_is_503_and_bugs_are_500_without_details(
    client: TestClient, headers: dict[str, str], vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise StorageError("the disk is on fire")

    def buggy(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(CANARY)

    monkeypatch.setattr(vault, "describe", broken)
    assert_problem(client.get(f"/v1/artifacts/{MISSING_ID}", headers=headers), 503, "storage-unavailable")
    monkeypatch.setattr(vault, "list", buggy)
    response = client.get("/v1/artifacts", headers=headers)
    body = assert_problem(response, 500, "internal-error", "InternalError")
    assert CANARY not in response.text
    assert body["detail"] == "the server failed to handle this request"


def test_problems_never_echo_content_or_request_values(client: TestClient, headers: dict[str, str]) -> None:
    stored = capture(client, headers, (CANARY + "\n") * 10, "text/plain")["artifact_id"]
    binary = capture(client, headers, CANARY.encode() + b"\x00" * 50, "application/octet-stream")["artifact_id"]
    sealed = capture(client, headers, CANARY.encode(), "text/plain", disclosure="sealed")["artifact_id"]
    attempts = [
        client.post("/v1/artifacts", content=CANARY, headers={**headers, "Refvault-Metadata": CANARY}),
        client.post("/v1/artifacts", content=CANARY, headers={**headers, "Refvault-Metadata": json.dumps({CANARY: 1})}),
        client.post(
            "/v1/artifacts",
            content=CANARY,
            headers={**headers, "Refvault-Metadata": json.dumps({"filename": f"{CANARY}/x"})},
        ),
        client.post(
            "/v1/artifacts",
            content=CANARY,
            headers={**headers, "Refvault-Metadata": json.dumps({"expires_at": CANARY})},
        ),
        client.post("/v1/artifacts", content=CANARY, headers={**headers, "Content-Type": CANARY}),
        client.post("/v1/artifacts", content=CANARY, headers={**headers, "Idempotency-Key": CANARY * 20}),
        client.post("/v1/artifacts", content=CANARY, headers={**headers, "Refvault-Session": CANARY + "!"}),
        client.get("/v1/artifacts", headers={**headers, "Authorization": f"Bearer rvk_{CANARY}"}),
        client.get("/v1/artifacts", headers={**headers, "Refvault-Tenant": CANARY}),
        client.get(f"/v1/artifacts/{CANARY}", headers=headers),
        client.get(f"/v1/artifacts/{CANARY}/content", headers=headers),
        client.get("/v1/artifacts", params={"limit": CANARY}, headers=headers),
        client.get(f"/v1/artifacts/{stored}/window", params={"lines": CANARY}, headers=headers),
        client.get(f"/v1/artifacts/{stored}/window", params={"max_chars": CANARY}, headers=headers),
        client.get(f"/v1/artifacts/{stored}/grep", params={"pattern": "x", "regex": CANARY}, headers=headers),
        client.get(f"/v1/artifacts/{binary}/window", headers=headers),
        client.get(f"/v1/artifacts/{binary}/grep", params={"pattern": "C"}, headers=headers),
        client.get(f"/v1/artifacts/{sealed}/window", headers=headers),
        client.post(f"/v1/artifacts/{stored}/query", json={"where": {"field": "x", "op": "eq"}}, headers=headers),
        client.post(f"/v1/artifacts/{stored}/query", json={CANARY: 1}, headers=headers),
        client.post(f"/v1/artifacts/{stored}/query", content=CANARY, headers=headers),
    ]
    for response in attempts:
        assert 400 <= response.status_code < 500, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert CANARY not in response.text, response.text


def test_mcp_is_mounted_and_needs_a_key(client: TestClient) -> None:
    assert client.app.state.mcp_mounted  # type: ignore[attr-defined]
    for path in ("/mcp", "/mcp/"):
        response = client.post(path, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert_problem(response, 401, "unauthenticated", "Unauthenticated")
    assert "/mcp" not in client.get("/openapi.json").json()["paths"]


def test_app_from_env_opens_and_closes_its_own_vault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from refvault.errors import InvalidArgument
    from refvault.server.app import app_from_env

    store = tmp_path / "env-store"
    with Vault.open(store) as setup:
        token = create_key(setup, "acme", "ana")[1]
    for name in ("REFVAULT_CATALOG", "REFVAULT_BLOBS", "REFVAULT_S3_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REFVAULT_STORE", str(store))
    monkeypatch.setenv("REFVAULT_MAX_BODY", "10")
    app = app_from_env()
    with TestClient(app) as http:
        auth = {"Authorization": f"Bearer {token}", "Refvault-Session": "s1"}
        assert http.post("/v1/artifacts", content=b"0123456789", headers=auth).status_code == 201
        assert_problem(http.post("/v1/artifacts", content=b"0123456789!", headers=auth), 413, "too-large")
    with pytest.raises(StorageError):  # closed at shutdown
        app.state.vault.list(SCOPE)
    monkeypatch.setenv("REFVAULT_MAX_BODY", "lots")
    with pytest.raises(InvalidArgument):
        app_from_env()
    with Vault.open(store) as opened, pytest.raises(InvalidArgument):
        create_app(opened, max_body=-1)


def test_serve_without_the_server_extra_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from refvault.cli import main

    monkeypatch.setitem(sys.modules, "uvicorn", None)
    result = CliRunner().invoke(main, ["serve"])
    assert result.exit_code == 1
    assert "pip install 'refvault[server]'" in result.stderr


def test_serve_with_no_arguments_uses_the_embedded_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn
    from click.testing import CliRunner

    from refvault.cli import main
    from refvault.server.limits import HeaderTimeoutProtocol

    for name in ("REFVAULT_STORE", "REFVAULT_CATALOG", "REFVAULT_BLOBS", "REFVAULT_S3_ENDPOINT", "REFVAULT_MAX_BODY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: calls.append({"app": app, **options}))
    result = CliRunner().invoke(main, ["serve"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / ".refvault" / "catalog.db").exists()
    assert calls == [
        {
            "app": "refvault.server.app:app_from_env",
            "factory": True,
            "host": "127.0.0.1",
            "port": 8765,
            "workers": 1,
            "access_log": True,
            "log_level": "info",
            "http": HeaderTimeoutProtocol,  # uvicorn's own protocol, with a deadline on request headers
        }
    ]
    assert "serving http://127.0.0.1:8765/v1" in result.stdout
    assert "create an API key: refvault keys create --tenant TENANT --user USER" in result.stdout
    assert os.environ["REFVAULT_MAX_BODY"] == str(1 << 30)
    workers = CliRunner().invoke(main, ["serve", "--workers", "3", "--host", "::1", "--max-body", "5"])
    assert workers.exit_code == 0, workers.output
    assert calls[-1]["workers"] == 3
    assert "http://[::1]:8765/v1" in workers.stdout
    assert os.environ["REFVAULT_MAX_BODY"] == "5"
    half = CliRunner().invoke(main, ["serve", "--catalog", "postgresql://u@h/db"])
    assert half.exit_code == 2
    assert "--catalog and --blobs go together" in half.stderr


# -- a real server ------------------------------------------------------------------------------


def refvault(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = "from refvault.cli import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=False)


class Served:
    def __init__(self, url: str, process: subprocess.Popen[str], store: Path, token: str) -> None:
        self.url, self.process, self.store, self.token = url, process, store, token


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One ``refvault serve`` process for the tests below (each uses a session of its own)."""
    root = tmp_path_factory.mktemp("served")
    store, log_path = root / "store", root / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFVAULT_")}
    port = free_port()
    command = ["serve", "--store", str(store), "--port", str(port), "--max-body", str(MAX_BODY), "--no-access-log"]
    with log_path.open("w") as log:  # a file, not a pipe: a full pipe would stall the server
        process = subprocess.Popen(
            [sys.executable, "-c", "from refvault.cli import main; main()", *command],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(1200):  # wait (up to a minute) until uvicorn answers
            if process.poll() is not None:
                raise AssertionError("refvault serve exited: " + log_path.read_text())
            try:
                if httpx.get(f"{url}/v1/health", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        else:
            raise AssertionError("refvault serve did not answer: " + log_path.read_text())
        created_line, *banner = log_path.read_text().splitlines()
        assert created_line == f"created a new store at {store}"  # serve creates the store, and says so
        assert banner[0].startswith(f"refvault 0.1.0 serving {url}/v1"), banner
        assert banner[1] == f"store: {store}"
        assert banner[2] == f"create an API key: refvault keys create --store {store} --tenant TENANT --user USER"
        created = refvault("keys", "create", "--store", str(store), "--tenant", "acme", "--user", "ana", env=env)
        assert created.returncode == 0, created.stderr
        token = created.stdout.strip()
        assert token.startswith("rvk_k_")
        assert "shown only once" in created.stderr
        yield Served(url, process, store, token)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_real_server_streams_both_ways(served: Served) -> None:
    auth = {"Authorization": f"Bearer {served.token}", "Refvault-Session": "streams"}
    with httpx.Client(base_url=served.url, headers=auth, timeout=60.0) as http:
        pieces = (BIG[i : i + 100_000] for i in range(0, len(BIG), 100_000))
        created = http.post("/v1/artifacts", content=pieces, headers={"Refvault-Metadata": '{"filename": "big.bin"}'})
        assert created.status_code == 201, created.text
        artifact_id = created.json()["artifact_id"]
        with http.stream("GET", f"/v1/artifacts/{artifact_id}/content") as response:
            assert response.status_code == 200
            received = b"".join(response.iter_bytes())
        assert received == BIG
        ranged = http.get(f"/v1/artifacts/{artifact_id}/content", headers={"Range": f"bytes=-{PIECE + 3}"})
        assert ranged.status_code == 206
        assert ranged.content == BIG[-(PIECE + 3) :]
        etag = ranged.headers["etag"]
        not_modified = http.get(f"/v1/artifacts/{artifact_id}/content", headers={"If-None-Match": etag})
        assert not_modified.status_code == 304
        assert not_modified.content == b""
        listed = http.get("/v1/artifacts").json()
        assert [d["artifact_id"] for d in listed["items"]] == [artifact_id]
        unauthenticated = httpx.get(f"{served.url}/v1/artifacts/{artifact_id}", timeout=10.0)
        assert unauthenticated.status_code == 401
        assert unauthenticated.headers["www-authenticate"] == "Bearer"


def test_real_server_refuses_oversized_bodies_and_stores_nothing(served: Served) -> None:
    auth = {"Authorization": f"Bearer {served.token}", "Refvault-Session": "oversized"}
    with httpx.Client(base_url=served.url, headers=auth, timeout=60.0) as http:
        declared = http.post("/v1/artifacts", content=b"x" * (MAX_BODY + 1))
        assert declared.status_code == 413
        assert declared.json()["type"] == "urn:refvault:problem:too-large"
        chunked = http.post("/v1/artifacts", content=iter([b"y" * PIECE] * 4))
        assert chunked.status_code == 413
        assert http.get("/v1/artifacts").json() == {"items": [], "next_offset": None}


def test_real_server_aborts_when_damage_is_found_mid_stream(served: Served) -> None:
    auth = {"Authorization": f"Bearer {served.token}", "Refvault-Session": "s1"}
    with httpx.Client(base_url=served.url, headers=auth, timeout=60.0) as http:
        artifact_id = http.post("/v1/artifacts", content=BIG).json()["artifact_id"]
        assert http.get(f"/v1/artifacts/{artifact_id}/content").content == BIG  # records the chunk digests
        with Vault.open(served.store) as local:
            key = local.catalog.find(SCOPE, artifact_id).key  # type: ignore[union-attr]
            damaged = bytearray(BIG)
            damaged[2 * PIECE + 1] ^= 0xFF  # in the third chunk: the first is sent before the damage is seen
            Tamper(local).set_bytes(key, bytes(damaged))
        received = bytearray()
        with pytest.raises(httpx.RemoteProtocolError), http.stream("GET", f"/v1/artifacts/{artifact_id}/content") as r:
            assert r.status_code == 200
            for piece in r.iter_bytes():
                received += piece
        assert len(received) < len(BIG)
        assert bytes(received) == BIG[: len(received)]  # nothing damaged was ever sent


def test_real_server_keeps_nothing_from_an_abandoned_upload(served: Served) -> None:
    host, port = served.url.removeprefix("http://").split(":")
    head = (
        "POST /v1/artifacts HTTP/1.1\r\n"
        f"Host: {host}\r\n"
        f"Authorization: Bearer {served.token}\r\n"
        "Refvault-Session: abandoned\r\n"
        f"Content-Length: {4 * PIECE}\r\n\r\n"
    )
    with socket.create_connection((host, int(port))) as upload:
        upload.sendall(head.encode() + b"z" * PIECE)  # a quarter of the promised body, then the client is gone
    auth = {"Authorization": f"Bearer {served.token}", "Refvault-Session": "abandoned"}
    with httpx.Client(base_url=served.url, headers=auth, timeout=60.0) as http:
        assert http.post("/v1/artifacts", content=b"after").status_code == 201  # still serving
        items = http.get("/v1/artifacts").json()["items"]
        assert [item["retrieval"]["size"] for item in items] == [5]
