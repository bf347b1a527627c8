"""``refvault.client.Client`` against a hostile server: it never echoes the body, follows no redirect with its key,
survives lying lengths, refuses hostile record sets and listings, and shows no credentials.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from refvault import Client, errors
from tests.server.world import MISSING_ID, OWNER, PLANTED

# -- the client against a malicious server ---------------------------------------------------------

GOOD_TOKEN = "rvk_k_" + "b" * 16 + "_" + "c" * 52


def _hostile_client(handler: Callable[[httpx.Request], httpx.Response]) -> tuple[Client, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request)

    return Client("http://refvault.test", GOOD_TOKEN, transport=httpx.MockTransport(record)), seen


def _descriptor_json(artifact_id: str = MISSING_ID, data: bytes = b"hello") -> dict[str, Any]:
    return {
        "artifact_id": artifact_id,
        "content_hash": "sha256:" + hashlib.sha256(data).hexdigest(),
        "tool_call_id": None,
        "schema_version": None,
        "created_at": "2026-01-01T00:00:00Z",
        "source_version": {},
        "completeness": {"status": "complete", "omissions": []},
        "scope": {"tenant": "acme", "user": "ana", "session": "s1", "run_id": None},
        "expires_at": None,
        "retrieval": {
            "resolver": "refvault.read.v1",
            "consistency": "pinned_snapshot",
            "media_type": "text/plain",
            "size": len(data),
            "filename": None,
            "disclosure": "model",
            "selectors": ["byte_range"],
        },
    }


def _calls(client: Client) -> list[Callable[[], object]]:
    return [
        lambda: client.describe(OWNER, MISSING_ID),
        lambda: client.read_bytes(OWNER, MISSING_ID),
        lambda: client.read_range(OWNER, MISSING_ID, 1, 2),
        lambda: client.list(OWNER),
        lambda: client.delete(OWNER, MISSING_ID),
        lambda: client.window(OWNER, MISSING_ID, lines=[0, 1]),
        lambda: client.query(OWNER, MISSING_ID),
        lambda: client.derive(OWNER, MISSING_ID),
        lambda: client.put(OWNER, b"data"),
        lambda: client.verify_artifact(OWNER, MISSING_ID),
    ]


BIG_DETAIL = PLANTED * 200_000


@pytest.mark.parametrize(
    "answer",
    [
        lambda: httpx.Response(500, text=f"<html>{PLANTED} stack trace</html>", headers={"Content-Type": "text/html"}),
        lambda: httpx.Response(502, json={"detail": PLANTED}, headers={"Content-Type": "application/json"}),
        lambda: httpx.Response(
            404,
            content=json.dumps({"type": "about:blank", "title": "Nope", "detail": PLANTED}).encode(),
            headers={"Content-Type": "application/problem+json"},
        ),
        lambda: httpx.Response(
            400,
            content=json.dumps(
                {
                    "type": "urn:refvault:problem:invalid-argument",
                    "title": "Invalid",
                    "status": 400,
                    "detail": "bad",
                    "error": "InvalidArgument",
                    "extra": PLANTED,
                    "reason": PLANTED,
                }
            ).encode(),
            headers={"Content-Type": "application/problem+json"},
        ),
        lambda: httpx.Response(
            400,
            content=json.dumps(
                {
                    "type": "urn:refvault:problem:invalid-cursor",
                    "title": "Invalid cursor",
                    "status": 400,
                    "detail": "invalid cursor (expired): too old",
                    "error": "InvalidCursor",
                    "reason": PLANTED,
                }
            ).encode(),
            headers={"Content-Type": "application/problem+json"},
        ),
        lambda: httpx.Response(
            410,
            content=json.dumps(
                {
                    "type": "urn:refvault:problem:expired",
                    "title": "Expired",
                    "status": 410,
                    "detail": "expired at " + PLANTED * 1000,
                    "error": "Expired",
                }
            ).encode(),
            headers={"Content-Type": "application/problem+json"},
        ),
        lambda: httpx.Response(
            418,
            content=json.dumps(
                {
                    "type": "urn:refvault:problem:x",
                    "title": "T" * 10_000 + PLANTED,
                    "status": 418,
                    "detail": BIG_DETAIL,
                    "error": PLANTED,
                }
            ).encode(),
            headers={"Content-Type": "application/problem+json"},
        ),
        lambda: httpx.Response(
            400,
            content=json.dumps(
                {
                    "type": "urn:refvault:problem:invalid-argument",
                    "title": "Invalid",
                    "status": 400,
                    "detail": BIG_DETAIL,
                    "error": "InvalidArgument",
                }
            ).encode(),
            headers={"Content-Type": "application/problem+json"},
        ),
        lambda: httpx.Response(
            400, content=b"\xff" * 1000 + PLANTED.encode(), headers={"Content-Type": "application/problem+json"}
        ),
        lambda: httpx.Response(
            500, content=b'{"type": "urn:refvault:problem:', headers={"Content-Type": "application/problem+json"}
        ),
        lambda: httpx.Response(503, content=b"[1, 2]", headers={"Content-Type": "application/problem+json"}),
    ],
    ids=[
        "html-500",
        "json-502",
        "foreign-problem",
        "extra-fields",
        "cursor-reason",
        "expired-moment",
        "unknown-class",
        "huge-detail",
        "binary-problem",
        "truncated-problem",
        "non-object-problem",
    ],
)
def test_the_client_never_echoes_a_hostile_servers_body(answer: Callable[[], httpx.Response]) -> None:
    client, seen = _hostile_client(lambda request: answer())
    with client:
        for call in _calls(client):
            with pytest.raises(errors.RefvaultError) as raised:
                call()
            message = str(raised.value)
            assert PLANTED.lower() not in message.lower(), (type(raised.value).__name__, message[:300])
            assert len(message) <= 2000
            assert GOOD_TOKEN not in message
            assert GOOD_TOKEN not in repr(raised.value)
            if isinstance(raised.value, errors.InvalidCursor):
                assert PLANTED not in str(raised.value.reason)
    assert all(request.url.host == "refvault.test" for request in seen)


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_the_client_never_follows_a_redirect_with_its_key(status: int) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host != "refvault.test":
            return httpx.Response(200, json=_descriptor_json())
        return httpx.Response(
            status,
            headers={"Location": f"http://evil.test/steal?{PLANTED}", "Content-Type": "application/json"},
            json=_descriptor_json(),
        )

    client, seen = _hostile_client(handler)
    with client:
        for call in _calls(client):
            with pytest.raises(errors.RefvaultError) as raised:
                call()
            assert PLANTED not in str(raised.value)
            assert "evil.test" not in str(raised.value)
    assert seen
    assert all(request.url.host == "refvault.test" for request in seen)
    assert all(request.headers["authorization"] == f"Bearer {GOOD_TOKEN}" for request in seen)


@pytest.mark.parametrize(
    "content_length", ["\u00b2", "\u0661", "99999999999999999999999999", "-1", "", "3", "10", " 5"]
)
def test_the_client_survives_lying_content_lengths(content_length: str) -> None:
    data = b"hello"
    etag = '"' + hashlib.sha256(data).hexdigest() + '"'

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/content"):
            headers = [("ETag", etag), ("Content-Type", "text/plain"), ("Content-Length", content_length)]
            return httpx.Response(200, headers=[(k, v.encode("utf-8")) for k, v in headers], content=data)
        return httpx.Response(200, json=_descriptor_json(data=data))

    client, _ = _hostile_client(handler)
    with client:
        try:
            got = client.read_bytes(OWNER, MISSING_ID)
        except errors.RefvaultError as exc:
            assert isinstance(exc, errors.IntegrityError | errors.StorageError), repr(exc)
        else:
            assert got == data


def test_the_client_refuses_a_hostile_record_set_and_listing() -> None:
    answers: list[Any] = [
        [1, 2],
        "x",
        {"artifact_id": MISSING_ID},
        {
            **{"artifact_id": MISSING_ID, "content_hash": "h", "source_format": "csv", "derived_hash": "d"},
            "count": -1,
            "fields": [],
        },
        {
            **{"artifact_id": "art_" + "b" * 26, "content_hash": "h", "source_format": "csv", "derived_hash": "d"},
            "count": 1,
            "fields": [],
        },
        {
            **{"artifact_id": MISSING_ID, "content_hash": "h", "source_format": "csv", "derived_hash": "d"},
            "count": 1,
            "fields": [{"name": 1, "type": "x"}],
        },
        {
            **{"artifact_id": MISSING_ID, "content_hash": "h", "source_format": "csv", "derived_hash": "d"},
            "count": True,
            "fields": [],
        },
    ]
    for body in answers:
        client, _ = _hostile_client(lambda request, body=body: httpx.Response(200, json=body))
        with client, pytest.raises(errors.StorageError):
            client.derive(OWNER, MISSING_ID)
    for listing in ({"items": [], "next_offset": 0}, {"items": [{}]}, {"items": "x"}, []):
        client, _ = _hostile_client(lambda request, listing=listing: httpx.Response(200, json=listing))
        with client, pytest.raises(errors.StorageError):
            client.list(OWNER)


def test_the_client_shows_no_credentials_and_sends_the_key_only_to_its_server() -> None:
    for url in (
        "http://user:secret@refvault.test",
        "http://refvault.test/?token=secret",
        "http://refvault.test/#secret",
    ):
        with pytest.raises(errors.InvalidArgument) as raised:
            Client(url, GOOD_TOKEN)
        assert "secret" not in str(raised.value)
    with pytest.raises(errors.InvalidArgument) as bad_key:
        Client("http://refvault.test", GOOD_TOKEN + "\r\nX-Injected: 1")
    assert GOOD_TOKEN not in str(bad_key.value)

    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot connect {request.headers['authorization']}", request=request)

    client, seen = _hostile_client(unreachable)
    with client:
        assert GOOD_TOKEN not in repr(client)
        for call in _calls(client):
            with pytest.raises(errors.StorageError) as raised:
                call()
            assert GOOD_TOKEN not in str(raised.value)
            assert raised.value.__cause__ is None
            assert raised.value.__suppress_context__
    assert {request.url.host for request in seen} == {"refvault.test"}
