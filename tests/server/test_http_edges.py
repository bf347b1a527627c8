"""HTTP at its edges: other methods, HEAD, huge headers, injected media types, abusive ranges and uploads cut short."""

from __future__ import annotations

import json
import re
import threading

import pytest

from refvault import Scope
from tests.server.world import (
    CONTENT_CANARY,
    MISSING_ID,
    TEXT,
    World,
    asgi,
    check_answer,
    raw_headers,
)


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS", "TRACE", "PATCH", "PUT", "CONNECT"])
def test_other_methods_are_problems_and_head_leaks_nothing(world: World, method: str) -> None:
    foreign = world.http.request(
        method, f"/v1/artifacts/{world.ids['text']}/content", headers=world.headers(world.other_tenant)
    )
    absent = world.http.request(
        method, f"/v1/artifacts/{MISSING_ID}/content", headers=world.headers(world.other_tenant)
    )
    assert foreign.status_code == absent.status_code
    assert foreign.status_code in (404, 405)
    assert CONTENT_CANARY not in foreign.content
    if method != "HEAD":
        check_answer(foreign)
        check_answer(absent)
    assert {k: v for k, v in foreign.headers.items() if k != "content-length"} == {
        k: v for k, v in absent.headers.items() if k != "content-length"
    }


def test_huge_headers_are_refused_not_crashed(world: World) -> None:
    huge = "a" * (1 << 20)
    deep = '{"source_version": ' + "[" * 5000 + "]" * 5000 + "}"
    deep_ok = '{"source_version": {"v": ' + "[" * 900 + "]" * 900 + "}}"
    for name, value in (
        ("Refvault-Metadata", json.dumps({"filename": huge})),
        ("Refvault-Metadata", deep),
        ("Refvault-Metadata", deep_ok),
        ("Refvault-Metadata", json.dumps({"source_version": {str(i): i for i in range(100_000)}})),
        ("Idempotency-Key", huge),
        ("Refvault-Session", huge),
        ("Authorization", "Bearer " + huge),
        ("Range", "bytes=" + ",".join(f"{i}-{i}" for i in range(50_000))),
        ("If-None-Match", ", ".join(['"x"'] * 50_000)),
        ("Content-Type", "text/plain; " + "x=y; " * 20_000),
    ):
        for method, path in (
            ("POST", "/v1/artifacts"),
            ("GET", f"/v1/artifacts/{world.ids['text']}/content"),
        ):
            response = world.http.request(method, path, headers=world.headers(**{name: value}), content=b"x")
            check_answer(response, content_visible=True)
            if method == "POST" and name != "Range" and name != "If-None-Match":
                assert response.status_code in (400, 401, 413), (name, response.status_code, response.text[:300])


@pytest.mark.parametrize(
    "media_type",
    [
        "text/plain\r\nX-Injected: 1",
        "text/plain\nX-Injected: 1",
        'text/plain; charset="a\r\nX-Injected: 1"',
        "text/plain\x00",
        "text/html; charset=\u00e9",
        "text/\u2028plain",
        'text/plain; q="\\\r\n"',
    ],
)
def test_media_types_cannot_inject_response_headers(world: World, media_type: str) -> None:
    for headers in (
        {"Refvault-Metadata": json.dumps({"media_type": media_type})},
        {"Content-Type": media_type.encode("utf-8")},
    ):
        response = world.http.post("/v1/artifacts", headers=world.headers(None, "inject", **headers), content=b"x")
        check_answer(response)
        if response.status_code == 201:  # then it was made harmless: the content answer has one clean header
            artifact_id = response.json()["artifact_id"]
            content = world.http.get(f"/v1/artifacts/{artifact_id}/content", headers=world.headers(None, "inject"))
            assert content.status_code == 200
            assert "x-injected" not in content.headers
            assert re.fullmatch(r"[\x21-\x7e][\x20-\x7e]*", content.headers["content-type"])
        else:
            assert response.status_code == 400


RANGES = [
    "bytes=" + "9" * 19 + "-",
    "bytes=" + "9" * 25 + "-",
    "bytes=0-" + "9" * 25,
    "bytes=-" + "9" * 25,
    "bytes=-" + "9" * 19,
    "bytes=9223372036854775807-9223372036854775807",
    "bytes=9223372036854775806-",
    "bytes=-9223372036854775808",
    "bytes=--5",
    "bytes=-0",
    "bytes=5-2",
    "bytes=0-0,1-1,2-2",
    "bytes=" + ",".join(f"{i}-{i}" for i in range(10_000)),
    "bytes=0-1, 3-4",
    "bytes = 0-1",
    "bytes=0x10-",
    "bytes=\u0661-\u0662",
    "items=0-1",
    "bytes=",
    "bytes=-",
    "bytes=1-1-1",
    "BYTES=0-1",
]


@pytest.mark.parametrize("header", RANGES)
def test_range_abuse(world: World, header: str) -> None:
    path = f"/v1/artifacts/{world.ids['text']}/content"
    answer = world.http.get(path, headers=world.headers(Range=header.encode("utf-8")))
    check_answer(answer, content_visible=True)
    assert answer.status_code in (200, 206, 416), answer.text[:200]
    if answer.status_code == 206:
        match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", answer.headers["content-range"])
        assert match is not None
        start, end, size = (int(g) for g in match.groups())
        assert size == len(TEXT)
        assert 0 <= start <= end < size
        assert answer.content == TEXT[start : end + 1]
        assert int(answer.headers["content-length"]) == len(answer.content)
    elif answer.status_code == 200:
        assert answer.content == TEXT
    else:
        assert answer.headers["content-range"] == f"bytes */{len(TEXT)}"


def test_a_client_that_hangs_up_mid_upload_leaves_nothing(world: World) -> None:
    """An ASGI ``receive`` that hands over two pieces, then the disconnect: nothing is kept, no thread is stuck."""
    session = "hangup"
    headers = raw_headers(world, None, session, content_length=b"40000")
    messages = [
        {"type": "http.request", "body": b"p" * 10_000, "more_body": True},
        {"type": "http.request", "body": b"q" * 10_000, "more_body": True},
        {"type": "http.disconnect"},
    ]
    before = threading.active_count()
    for _ in range(8):
        status, _ = asgi(world.http.app, "POST", "/v1/artifacts", headers, messages)
        assert 400 <= status < 500
    assert world.vault.list(Scope("acme", "ana", session)) == []
    assert threading.active_count() <= before + 2  # no worker thread is left blocked on a dead upload
