"""An adversarial review of ``refvault serve`` and ``refvault.client``: every attack tried, kept as a test.

Most attacks drive the ASGI app in-process (FastAPI's TestClient passes raw
header bytes, CR/LF included, straight to the app, which a real HTTP parser
would refuse first); the wire-level ones (lying ``Content-Length``, a client
that hangs up mid-upload) and the remote Toolbox run against a real
``refvault serve`` on loopback. The client's own defences are tested against a
malicious server made of an ``httpx.MockTransport``.

What every answer must be, whatever was sent: never a 5xx (except the
documented integrity/storage problems, not provoked here), every error an
``application/problem+json`` document of the documented shape, and nothing
planted in the request (a canary) or held in another scope's artifact ever
echoed back.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refvault import Client, Scope, Toolbox, Vault, errors, read
from refvault.keys import create_key, revoke_key
from refvault.server.app import MAX_JSON_BODY, create_app
from tests.conftest import Clock
from tests.servers import stop_process

OWNER = Scope("acme", "ana", "s1")
PLANTED = "PLANTEDcanary7q"  # put into requests; must never come back in a problem or a header
CONTENT_CANARY = b"CONTENTcanary4z"  # inside the owner's artifacts; never shown to another scope
SEALED_CANARY = b"SEALEDcanary9k"  # inside sealed artifacts; never shown by /mcp or a read
MISSING_ID = "art_" + "a" * 26
MAX_BODY = 64 * 1024
PROBLEM_KEYS = {"type", "title", "status", "detail", "error"}
TEXT = b"".join(b"line %d " % i + CONTENT_CANARY + b"\n" for i in range(50))
RECORDS = b"".join(b'{"n": %d, "word": "%s"}\n' % (i, CONTENT_CANARY) for i in range(30))
SEALED_TEXT = b"the sealed " + SEALED_CANARY + b" text\n"
SEALED_RECORDS = b'{"secret": "' + SEALED_CANARY + b'"}\n'
FUZZ = settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@dataclass
class World:
    """One vault with artifacts in ``OWNER``'s scope, keys of every kind, and the app over it."""

    vault: Vault
    http: TestClient
    owner: str  # acme/ana, every session
    s1_only: str  # acme/ana, session s1 only
    other_tenant: str  # globex/ana
    other_user: str  # acme/bob
    other_session_owner: str  # acme/ana too, used with session s2
    ids: dict[str, str]

    def headers(self, token: str | None = None, session: str = "s1", **extra: str) -> dict[str, str]:
        found = {"Authorization": f"Bearer {token or self.owner}", "Refvault-Session": session}
        found.update(extra)
        return found


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with Vault.open(tmp_path_factory.mktemp("review") / "store") as vault:
        ids = {
            "text": vault.put(OWNER, TEXT, media_type="text/plain").artifact_id,
            "records": vault.put(OWNER, RECORDS, media_type="application/x-ndjson").artifact_id,
            "sealed": vault.put(OWNER, SEALED_TEXT, media_type="text/plain", disclosure="sealed").artifact_id,
            "sealed_records": vault.put(
                OWNER, SEALED_RECORDS, media_type="application/x-ndjson", disclosure="sealed"
            ).artifact_id,
            "binary": vault.put(OWNER, bytes(range(256)) * 8).artifact_id,
        }
        with TestClient(create_app(vault, max_body=MAX_BODY), raise_server_exceptions=False) as http:
            yield World(
                vault=vault,
                http=http,
                owner=create_key(vault, "acme", "ana")[1],
                s1_only=create_key(vault, "acme", "ana", sessions=["s1"])[1],
                other_tenant=create_key(vault, "globex", "ana")[1],
                other_user=create_key(vault, "acme", "bob")[1],
                other_session_owner=create_key(vault, "acme", "ana")[1],
                ids=ids,
            )


def raw_answer(response: httpx.Response) -> bytes:
    """Everything the server sent: status line material, headers and body."""
    head = b"".join(k.encode("latin-1") + b": " + v.encode("latin-1") + b"\n" for k, v in response.headers.items())
    return head + response.content


def check_answer(response: httpx.Response, *, planted: str = PLANTED, content_visible: bool = False) -> None:
    """No 5xx; errors are well-formed problems; nothing planted (or, unless allowed, any content) comes back."""
    assert response.status_code < 500, (response.status_code, response.text[:500])
    raw = raw_answer(response)
    if response.status_code >= 400:
        assert response.headers["content-type"] == "application/problem+json", response.headers
        body = response.json()
        assert PROBLEM_KEYS <= set(body) <= PROBLEM_KEYS | {"reason"}, body
        assert body["type"].startswith("urn:refvault:problem:")
        assert body["status"] == response.status_code
        assert "Traceback" not in response.text
        assert planted.encode().lower() not in raw.lower(), response.text[:500]
    else:
        headers = raw[: len(raw) - len(response.content)]
        assert planted.encode().lower() not in headers.lower()
    if not content_visible:
        assert CONTENT_CANARY not in raw
    assert SEALED_CANARY not in raw or content_visible


def artifact_requests(artifact_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """One request to every artifact endpoint (with the options that make it a valid request)."""
    base = f"/v1/artifacts/{artifact_id}"
    return [
        ("GET", base, {}),
        ("GET", f"{base}/content", {}),
        ("GET", f"{base}/content", {"headers": {"Range": "bytes=0-3"}}),
        ("GET", f"{base}/content", {"headers": {"If-None-Match": '"' + "0" * 64 + '"'}}),
        ("GET", f"{base}/content", {"headers": {"If-None-Match": "*"}}),
        ("GET", f"{base}/content", {"headers": {"If-None-Match": '"' + hashlib.sha256(TEXT).hexdigest() + '"'}}),
        ("GET", f"{base}/content", {"headers": {"Range": "bytes=-1", "If-Range": '"' + "0" * 64 + '"'}}),
        ("GET", f"{base}/window", {"params": {"lines": "0,2"}}),
        ("GET", f"{base}/window", {"params": {"bytes": "0,10"}}),
        ("GET", f"{base}/grep", {"params": {"pattern": "line"}}),
        ("POST", f"{base}/query", {"json": {"limit": 1}}),
        ("GET", f"{base}/records", {}),
        ("GET", f"{base}/records", {"params": {"build": "false"}}),
        ("GET", f"{base}/verify", {}),
        ("DELETE", base, {}),
    ]


def send(world: World, method: str, path: str, token: str, session: str, options: dict[str, Any]) -> httpx.Response:
    options = dict(options)
    headers = world.headers(token, session, **options.pop("headers", {}))
    return world.http.request(method, path, headers=headers, **options)


def asgi(
    app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]], messages: list[dict[str, Any]]
) -> tuple[int, bytes]:
    """Call the ASGI app with exactly these headers and ``receive`` messages (then silence); its status and body.

    FastAPI's TestClient rewrites ``Content-Length`` from the body it sends;
    this sends whatever header bytes the test wants.
    """
    pending = iter(messages)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        for message in pending:
            return message
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def send_(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
        "state": {},
    }

    async def run() -> None:
        with anyio.fail_after(30):
            with contextlib.suppress(Exception):  # an unhandled error still sends its 500 first
                await app(scope, receive, send_)

    anyio.run(run)
    start = next((m for m in sent if m["type"] == "http.response.start"), None)
    assert start is not None, "no response was started"
    return start["status"], b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def raw_headers(
    world: World, token: str | None = None, session: str = "s1", **extra: bytes
) -> list[tuple[bytes, bytes]]:
    found = [(k.lower().encode(), v.encode()) for k, v in world.headers(token, session).items()]
    return found + [(k.lower().replace("_", "-").encode(), v) for k, v in extra.items()]


# -- task 1: the record set over HTTP --------------------------------------------------------------


def test_the_records_endpoint_is_derive(world: World) -> None:
    records = world.ids["records"]
    answer = world.http.get(f"/v1/artifacts/{records}/records", headers=world.headers())
    assert answer.status_code == 200, answer.text
    local = read.derive(world.vault, OWNER, records)
    assert answer.json() == {
        "artifact_id": records,
        "content_hash": local.content_hash,
        "source_format": "ndjson",
        "count": 30,
        "fields": [
            {"name": "n", "type": "BIGINT", "kind": "number"},
            {"name": "word", "type": "VARCHAR", "kind": "string"},
        ],
        "derived_hash": local.derived_hash,
    }
    # Not a record artifact, a sealed one, one not yet derived (build=false): each as derive says.
    text = world.http.get(f"/v1/artifacts/{world.ids['text']}/records", headers=world.headers())
    assert text.status_code == 422
    assert text.json()["type"] == "urn:refvault:problem:unsupported-read"
    sealed = world.http.get(f"/v1/artifacts/{world.ids['sealed_records']}/records", headers=world.headers())
    assert sealed.status_code == 403
    assert sealed.json()["type"] == "urn:refvault:problem:sealed"
    assert (
        world.http.get(f"/v1/artifacts/{world.ids['text']}/records?build=false", headers=world.headers()).json() is None
    )
    fresh = world.vault.put(OWNER, b'{"a": 1}\n', media_type="application/x-ndjson").artifact_id
    assert world.http.get(f"/v1/artifacts/{fresh}/records?build=false", headers=world.headers()).json() is None
    assert world.http.get(f"/v1/artifacts/{fresh}/records", headers=world.headers()).json()["count"] == 1
    assert world.http.get(f"/v1/artifacts/{fresh}/records?build=false", headers=world.headers()).json()["count"] == 1
    schema = world.http.get("/openapi.json").json()
    documented = schema["paths"]["/v1/artifacts/{artifact_id}/records"]["get"]["responses"]["200"]
    assert "RecordSetModel" in json.dumps(documented)
    assert set(schema["components"]["schemas"]["RecordSetModel"]["required"]) >= {"count", "fields"}


# -- fuzzing: ids, path segments, query parameters, headers -------------------------------------

_SEGMENT_ALPHABET = st.sampled_from([*list("art_abcz27AZ./%?#;:@&=+$,\\ \t\x00\x7fé\u2028"), "..", "%2f", "%00"])
SEGMENTS = st.one_of(
    st.text(max_size=60),
    st.lists(_SEGMENT_ALPHABET, max_size=30).map("".join),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz234567", min_size=26, max_size=26).map(lambda s: "art_" + s),
)
TAILS = ["", "/content", "/window", "/grep?pattern=x", "/verify", "/records", "/query"]


@FUZZ
@given(segment=SEGMENTS, tail=st.sampled_from(TAILS), encode=st.booleans())
def test_fuzzed_ids_and_path_segments(world: World, segment: str, tail: str, encode: bool) -> None:
    shown = quote(segment + PLANTED, safe="") if encode else quote(segment + PLANTED, safe="/%?#;:@&=+$,")
    method = "POST" if tail == "/query" else "GET"
    response = world.http.request(method, f"/v1/artifacts/{shown}{tail}", headers=world.headers())
    check_answer(response)
    assert response.status_code in (400, 404, 405), response.text


PATH_TRICKS = [
    "/v1/artifacts/..%2f..%2fhealth",
    "/v1/artifacts/..%2F..%2Fv1%2Fhealth",
    "/v1/artifacts/%2e%2e/%2e%2e/health",
    "/v1/artifacts/..%252f..%252fhealth",
    "/v1/artifacts/{id}%00",
    "/v1/artifacts/{id}%2500",
    "/v1/artifacts/{id}%2fcontent",
    "/v1/artifacts/{id}%252fcontent",
    "/v1/artifacts/{id}/",
    "/v1/artifacts/{id}/content/",
    "/v1/artifacts/{id}//content",
    "/v1/artifacts/{id}/./content",
    "/v1/artifacts/{id}/../{id}/content",
    "/v1/artifacts/{ID}",
    "/v1/artifacts/{id}%20",
    "/v1/artifacts/%20{id}",
    "/v1/artifacts/{id};x=1",
    "/v1//artifacts/{id}",
    "/v1/artifacts/",
    "/v1/./artifacts/{id}",
    "/v1/Artifacts/{id}",
    "/V1/artifacts/{id}",
    "/mcp/../v1/artifacts/{id}",
    "/v1/artifacts/{other}",  # another tenant's own id, asked for with the owner's key: see the matrix
]


@pytest.mark.parametrize("template", PATH_TRICKS)
def test_path_tricks_never_cross_scopes(world: World, template: str) -> None:
    """Dot segments and encoded slashes normalise like any HTTP path; none reaches another scope's artifact."""
    theirs = Scope("globex", "ana", "s1")
    foreign = world.vault.put(theirs, b"theirs " + CONTENT_CANARY).artifact_id
    for token, target in ((world.other_tenant, world.ids["text"]), (world.owner, foreign)):
        path = template.format(id=target, ID=target.upper(), other=target)
        for method in ("GET", "DELETE", "POST"):
            response = world.http.request(method, path, headers=world.headers(token), content=b"x")
            check_answer(response)
            assert response.status_code in (400, 404, 405), (path, method, response.status_code, response.text)
    assert world.vault.describe(theirs, foreign).artifact_id == foreign  # no DELETE got through
    assert world.vault.describe(OWNER, world.ids["text"]).size == len(TEXT)


QUERY_NAMES = ("lines", "bytes", "max_chars", "pattern", "regex", "max_matches", "from_line", "max_seconds")
QUERY_NAMES += ("limit", "offset", "build")
QUERY_VALUES = st.one_of(
    st.text(max_size=40),
    st.integers().map(str),
    st.sampled_from(["", "-1", "1e9", "NaN", "inf", "0x10", "9" * 40, "1,", ",1", "1,2,3", "true", "\u0661"]),
    st.tuples(st.integers(), st.integers()).map(lambda p: f"{p[0]},{p[1]}"),
)


@FUZZ
@given(
    endpoint=st.sampled_from(["window", "grep", "list", "records"]),
    values=st.dictionaries(
        st.sampled_from([*QUERY_NAMES, PLANTED]),
        QUERY_VALUES,
        max_size=5,
    ),
    plant=st.booleans(),
)
def test_fuzzed_query_parameters(world: World, endpoint: str, values: dict[str, str], plant: bool) -> None:
    params = {name: value + PLANTED if plant else value for name, value in values.items()}
    path = "/v1/artifacts" if endpoint == "list" else f"/v1/artifacts/{world.ids['text']}/{endpoint}"
    response = world.http.get(path, params=params, headers=world.headers())
    check_answer(response, content_visible=True)
    if response.status_code < 400 and endpoint == "window":
        assert len(response.json()["text"]) <= 200_000


HEADER_VALUES = st.one_of(
    st.binary(max_size=80),
    st.text(max_size=80).map(lambda s: s.encode("utf-8")),
    st.sampled_from(
        [
            b"s1\r\nRefvault-Session: s2",
            b"x\nLocation: http://evil.example",
            b"\x00",
            b"\xff\xfe",
            b"bytes=0-1,2-3",
            b"bytes=" + b"9" * 40 + b"-",
            b'{"filename": "a\\r\\nX-Injected: 1"}',
            b'{"media_type": "text/plain\\r\\nX-Injected: 1"}',
            b'"' + b"0" * 64 + b'"',
            b"W/*",
            b"Bearer " + b"rvk_k_" + b"a" * 16 + b"_" + b"a" * 52,
        ]
    ),
)
FUZZED_HEADERS = [
    "Refvault-Session",
    "Refvault-Metadata",
    "Range",
    "If-None-Match",
    "If-Range",
    "Idempotency-Key",
    "Authorization",
    "Refvault-Tenant",
    "Refvault-User",
    "Content-Type",
]


@FUZZ
@given(
    values=st.dictionaries(st.sampled_from(FUZZED_HEADERS), HEADER_VALUES, min_size=1, max_size=4),
    method=st.sampled_from(["capture", "content", "describe", "query", "list"]),
    plant=st.booleans(),
)
def test_fuzzed_headers(world: World, values: dict[str, bytes], method: str, plant: bool) -> None:
    headers: dict[str, str | bytes] = dict(world.headers())
    for name, value in values.items():
        headers[name] = value + PLANTED.encode() if plant else value
    target = {
        "capture": ("POST", "/v1/artifacts"),
        "content": ("GET", f"/v1/artifacts/{world.ids['text']}/content"),
        "describe": ("GET", f"/v1/artifacts/{world.ids['text']}"),
        "query": ("POST", f"/v1/artifacts/{world.ids['records']}/query"),
        "list": ("GET", "/v1/artifacts"),
    }[method]
    response = world.http.request(*target, headers=headers, content=b"{}" if method != "capture" else b"body")
    check_answer(response, content_visible=True)
    assert b"x-injected" not in raw_answer(response).lower()
    assert "location: http://evil" not in raw_answer(response).decode("latin-1").lower()
    if response.status_code == 201:  # a capture made it: it landed in the key's scope, under its own id
        created = response.json()
        assert created["scope"]["tenant"] == "acme"
        assert response.headers["location"] == f"/v1/artifacts/{created['artifact_id']}"
        world.vault.delete(Scope("acme", "ana", created["scope"]["session"]), created["artifact_id"])


METADATA_NAMES = ("filename", "tool_call_id", "run_id", "schema_version", "disclosure", "expires_at", "created_at")
METADATA_NAMES += ("source_version", "completeness", "media_type")
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
TIMESTAMPS = st.sampled_from(
    ["9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "2026-01-01T00:00:00+99:00", "2026-02-30T00:00:00Z",
     "2026-01-01", "2026-01-01T00:00:00", "+275760-09-13T00:00:00Z", "2026-01-01T00:00:00.9999999999Z", PLANTED]
)  # fmt: skip


@FUZZ
@given(
    metadata=st.dictionaries(
        st.sampled_from([*METADATA_NAMES, PLANTED]),
        JSON_VALUES | TIMESTAMPS,
        max_size=5,
    )
)
def test_fuzzed_capture_metadata(world: World, metadata: dict[str, Any]) -> None:
    session = "metadata-fuzz"
    header = json.dumps(metadata)  # ASCII, \u-escaped
    response = world.http.post(
        "/v1/artifacts", headers=world.headers(None, session, **{"Refvault-Metadata": header}), content=b"m"
    )
    check_answer(response, planted="\x00never")  # a valid metadata value may be stored and shown back
    if response.status_code >= 400:
        assert response.status_code == 400, response.text
        assert PLANTED not in response.text
    # Whatever was stored is listed and described without error afterwards.
    listed = world.http.get("/v1/artifacts", headers=world.headers(None, session))
    assert listed.status_code == 200, listed.text
    for item in listed.json()["items"]:
        assert (
            world.http.get(f"/v1/artifacts/{item['artifact_id']}", headers=world.headers(None, session)).status_code
            == 200
        )
        world.vault.delete(Scope("acme", "ana", session), item["artifact_id"])


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


# -- scope: tenants, users, sessions; HTTP and /mcp ---------------------------------------------


@pytest.mark.parametrize("who", ["other_tenant", "other_user", "other_session"])
@pytest.mark.parametrize("kind", ["text", "records", "sealed", "sealed_records"])
def test_foreign_artifacts_look_absent_on_every_endpoint(world: World, who: str, kind: str) -> None:
    token = world.other_session_owner if who == "other_session" else getattr(world, who)
    session = "s2" if who == "other_session" else "s1"
    existing = world.ids[kind]
    for (method, path, options), (_, absent_path, _) in zip(
        artifact_requests(existing), artifact_requests(MISSING_ID), strict=True
    ):
        seen = send(world, method, path, token, session, options)
        absent = send(world, method, absent_path, token, session, options)
        check_answer(seen)
        assert seen.status_code == absent.status_code == 404, (method, path, seen.text)
        assert seen.content.replace(existing.encode(), MISSING_ID.encode()) == absent.content
        assert dict(seen.headers) | {"content-length": "0"} == dict(absent.headers) | {"content-length": "0"}
    assert world.vault.describe(OWNER, existing).artifact_id == existing  # the DELETEs removed nothing


def test_foreign_expired_artifacts_look_absent_too(tmp_path: Path) -> None:
    clock = Clock()
    with Vault.open(tmp_path / "store", clock=clock) as vault:
        expiring = vault.put(OWNER, TEXT, media_type="text/plain", expires_at=clock() + timedelta(seconds=5))
        clock.advance(seconds=60)
        stranger = create_key(vault, "globex", "ana")[1]
        owner = create_key(vault, "acme", "ana")[1]
        with TestClient(create_app(vault), raise_server_exceptions=False) as http:
            for (method, path, options), (_, absent_path, _) in zip(
                artifact_requests(expiring.artifact_id), artifact_requests(MISSING_ID), strict=True
            ):
                options = dict(options)
                extra = options.pop("headers", {})
                headers = {"Authorization": f"Bearer {stranger}", "Refvault-Session": "s1", **extra}
                seen = http.request(method, path, headers=headers, **options)
                absent = http.request(method, absent_path, headers=headers, **options)
                assert seen.status_code == 404, (path, seen.text)
                assert seen.content.replace(expiring.artifact_id.encode(), MISSING_ID.encode()) == absent.content
            mine = http.get(
                f"/v1/artifacts/{expiring.artifact_id}",
                headers={"Authorization": f"Bearer {owner}", "Refvault-Session": "s1"},
            )
            assert mine.status_code == 410  # its owner is told it expired


def mcp(
    world: World, method: str, params: dict[str, Any] | None, *, token: str | None = None, session: str = "s1"
) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {token or world.owner}",
        "Refvault-Session": session,
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 7, "method": method}
    if params is not None:
        message["params"] = params
    return world.http.post("/mcp", json=message, headers=headers)


def mcp_probes(artifact_id: str) -> list[tuple[str, dict[str, Any]]]:
    call = "tools/call"
    return [
        (call, {"name": "describe_artifact", "arguments": {"artifact_id": artifact_id}}),
        (call, {"name": "read_artifact", "arguments": {"artifact_id": artifact_id}}),
        (call, {"name": "read_artifact", "arguments": {"artifact_id": artifact_id, "lines": [0, 5]}}),
        (call, {"name": "read_artifact", "arguments": {"artifact_id": artifact_id, "byte_range": [0, 100]}}),
        (call, {"name": "read_artifact", "arguments": {"artifact_id": artifact_id, "pattern": "a"}}),
        (call, {"name": "query_artifact", "arguments": {"artifact_id": artifact_id}}),
        (call, {"name": "load_artifacts", "arguments": {"artifact_ids": [artifact_id]}}),
        ("resources/read", {"uri": "refvault://" + artifact_id}),
    ]


@FUZZ
@given(data=st.data())
def test_fuzzed_mcp_calls_never_show_foreign_or_sealed_content(world: World, data: st.DataObject) -> None:
    ids = st.sampled_from(sorted(world.ids.values()))
    id_like = ids | ids.map(str.upper) | ids.map(lambda i: "refvault://" + i) | ids.map(lambda i: i + " ")
    argument = id_like | JSON_VALUES | st.lists(id_like, max_size=3)
    name = data.draw(st.sampled_from(["describe_artifact", "read_artifact", "query_artifact", "load_artifacts"]))
    keys = st.sampled_from(["artifact_id", "artifact_ids", "lines", "byte_range", "pattern", "regex", "where"])
    arguments = data.draw(st.dictionaries(keys | st.text(max_size=5), argument, max_size=4))
    method = data.draw(st.sampled_from(["tools/call", "resources/read"]))
    params = (
        {"name": name, "arguments": arguments}
        if method == "tools/call"
        else {"uri": data.draw(id_like.map(lambda i: i if i.startswith("refvault://") else "refvault://" + i))}
    )
    stranger = mcp(world, method, params, token=world.other_tenant)
    assert stranger.status_code < 500
    assert CONTENT_CANARY not in stranger.content
    assert SEALED_CANARY not in stranger.content
    owner = mcp(world, method, params)
    assert owner.status_code < 500
    assert SEALED_CANARY not in owner.content


@pytest.mark.parametrize("who", ["other_tenant", "other_user", "other_session"])
def test_foreign_artifacts_look_absent_over_mcp(world: World, who: str) -> None:
    token = world.other_session_owner if who == "other_session" else getattr(world, who)
    session = "s2" if who == "other_session" else "s1"
    for kind in ("text", "records", "sealed"):
        existing = world.ids[kind]
        for (method, params), (_, absent_params) in zip(mcp_probes(existing), mcp_probes(MISSING_ID), strict=True):
            seen = mcp(world, method, params, token=token, session=session)
            absent = mcp(world, method, absent_params, token=token, session=session)
            assert seen.status_code == absent.status_code == 200
            assert CONTENT_CANARY not in seen.content
            assert SEALED_CANARY not in seen.content
            assert seen.content.replace(existing.encode(), MISSING_ID.encode()) == absent.content, (kind, params)
    for method in ("resources/list", "tools/call"):
        params = None if method == "resources/list" else {"name": "list_artifacts", "arguments": {}}
        listed = mcp(world, method, params, token=token, session=session)
        for artifact_id in world.ids.values():
            assert artifact_id.encode() not in listed.content


def test_sealed_content_never_leaves_through_mcp(world: World) -> None:
    for kind in ("sealed", "sealed_records"):
        sealed = world.ids[kind]
        uris = [
            "refvault://" + sealed,
            "REFVAULT://" + sealed,
            "refvault://" + sealed.upper(),
            "refvault://" + quote(sealed, safe=""),
            "refvault://" + sealed + "?raw=1",
            "refvault://" + sealed + "#x",
            "refvault://" + sealed + "/",
            "refvault:///" + sealed,
        ]
        probes = mcp_probes(sealed) + [("resources/read", {"uri": uri}) for uri in uris]
        probes.append(("tools/call", {"name": "load_artifacts", "arguments": {"artifact_ids": [sealed] * 3}}))
        probes.append(
            ("tools/call", {"name": "query_artifact", "arguments": {"artifact_id": sealed, "fields": ["secret"]}})
        )
        for method, params in probes:
            answer = mcp(world, method, params)
            assert answer.status_code == 200, answer.text
            assert SEALED_CANARY not in answer.content, (method, params)
        described = json.loads(
            mcp(world, "tools/call", mcp_probes(sealed)[0][1]).json()["result"]["content"][0]["text"]
        )
        assert "records" not in described  # not even a sealed artifact's field names
    for method in ("resources/list", "tools/call"):
        params = None if method == "resources/list" else {"name": "list_artifacts", "arguments": {}}
        assert SEALED_CANARY not in mcp(world, method, params).content
    # The model-facing HTTP reads refuse sealed artifacts the same way.
    for tail, options in (("/window", {}), ("/grep", {"params": {"pattern": "s"}}), ("/records", {})):
        refused = world.http.get(f"/v1/artifacts/{world.ids['sealed']}{tail}", headers=world.headers(), **options)
        assert refused.status_code in (403, 422)
        assert SEALED_CANARY not in refused.content


def test_a_key_limited_to_s1_cannot_act_in_s2_anywhere(world: World) -> None:
    before = {s: len(world.vault.list(Scope("acme", "ana", s))) for s in ("s1", "s2")}
    bodies = set()
    for artifact_id in (world.ids["text"], world.ids["records"], MISSING_ID):
        for method, path, options in [
            *artifact_requests(artifact_id),
            ("GET", "/v1/artifacts", {}),
            ("POST", "/v1/artifacts", {"content": b"x"}),
        ]:
            response = send(world, method, path, world.s1_only, "s2", options)
            check_answer(response)
            assert response.status_code == 403, (method, path, response.text)
            assert response.json()["type"] == "urn:refvault:problem:scope-not-allowed"
            bodies.add(response.content)
    assert len(bodies) == 1  # the same answer whether the artifact exists or not
    for method, params in [*mcp_probes(world.ids["text"]), ("tools/list", None), ("resources/list", None)]:
        answer = mcp(world, method, params, token=world.s1_only, session="s2")
        assert answer.status_code == 403
        assert answer.content in bodies
    assert {s: len(world.vault.list(Scope("acme", "ana", s))) for s in ("s1", "s2")} == before
    # A duplicated session header cannot smuggle s2 past the check: the first value is the session everywhere.
    for first, second in (("s1", "s2"), ("s2", "s1")):
        headers = [
            ("Authorization", f"Bearer {world.s1_only}"),
            ("Refvault-Session", first),
            ("Refvault-Session", second),
        ]
        answer = world.http.get("/v1/artifacts", headers=headers)
        assert answer.status_code == (200 if first == "s1" else 403)


def test_a_key_revoked_mid_session_stops_at_the_next_request(world: World) -> None:
    key, token = create_key(world.vault, "acme", "ana")
    assert mcp(world, "tools/list", None, token=token).status_code == 200
    listed = mcp(world, "tools/call", {"name": "list_artifacts", "arguments": {}}, token=token)
    assert listed.status_code == 200
    assert world.http.get("/v1/artifacts", headers=world.headers(token)).status_code == 200
    assert revoke_key(world.vault, key.key_id)
    for answer in (
        mcp(
            world, "tools/call", {"name": "read_artifact", "arguments": {"artifact_id": world.ids["text"]}}, token=token
        ),
        mcp(world, "resources/read", {"uri": "refvault://" + world.ids["text"]}, token=token),
        mcp(world, "tools/list", None, token=token),
        world.http.get(f"/v1/artifacts/{world.ids['text']}/content", headers=world.headers(token)),
    ):
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"] == "Bearer"
        assert CONTENT_CANARY not in answer.content


def test_unknown_key_and_wrong_secret_take_the_same_path(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    from refvault import keys

    calls: list[str] = []
    catalog = world.vault.catalog
    real_find, real_compare = catalog.find_api_key, hmac.compare_digest

    def find(key_id: str) -> Any:
        calls.append("find")
        return real_find(key_id)

    def compare(a: Any, b: Any) -> bool:
        calls.append(f"compare:{len(a)}:{len(b)}")
        return real_compare(a, b)

    monkeypatch.setattr(catalog, "find_api_key", find)
    monkeypatch.setattr(keys.hmac, "compare_digest", compare)
    prefix, secret = world.owner.rsplit("_", 1)
    revoked_key, revoked = create_key(world.vault, "acme", "ana")
    revoke_key(world.vault, revoked_key.key_id)
    paths = {}
    bodies = set()
    for name, token in (
        ("unknown key id", "rvk_k_" + "a" * 16 + "_" + secret),
        ("wrong secret", prefix + "_" + ("a" if secret[0] != "a" else "b") + secret[1:]),
        ("revoked", revoked),
    ):
        calls.clear()
        answer = world.http.get("/v1/artifacts", headers=world.headers(token))
        assert answer.status_code == 401
        bodies.add(answer.content)
        paths[name] = tuple(calls)
    assert len(set(paths.values())) == 1, paths
    assert paths["wrong secret"] == ("find", "compare:64:64")
    assert len(bodies) == 1


def test_a_cursor_works_only_for_its_own_selection_and_scope(world: World) -> None:
    records = world.ids["records"]
    first = world.http.post(f"/v1/artifacts/{records}/query", json={"limit": 2}, headers=world.headers()).json()
    cursor = first["next_cursor"]
    assert cursor
    theirs = world.vault.put(Scope("globex", "ana", "s1"), RECORDS, media_type="application/x-ndjson").artifact_id
    # Another tenant, the owner's artifact id: absent, exactly as an absent id with the same cursor.
    stolen = world.http.post(
        f"/v1/artifacts/{records}/query", json={"limit": 2, "cursor": cursor}, headers=world.headers(world.other_tenant)
    )
    absent = world.http.post(
        f"/v1/artifacts/{MISSING_ID}/query",
        json={"limit": 2, "cursor": cursor},
        headers=world.headers(world.other_tenant),
    )
    assert stolen.status_code == 404
    assert stolen.content.replace(records.encode(), MISSING_ID.encode()) == absent.content
    # Another tenant's own artifact with the same bytes: the cursor is refused, naming nothing of the owner's.
    replayed = world.http.post(
        f"/v1/artifacts/{theirs}/query", json={"limit": 2, "cursor": cursor}, headers=world.headers(world.other_tenant)
    )
    check_answer(replayed)
    assert replayed.status_code == 400
    assert replayed.json()["type"] == "urn:refvault:problem:invalid-cursor"
    assert records.encode() not in replayed.content
    assert cursor.encode() not in replayed.content
    # Another session of the same user, and another user: refused the same way.
    for token, elsewhere in (
        (world.other_session_owner, Scope("acme", "ana", "s2")),
        (world.other_user, Scope("acme", "bob", "s1")),
    ):
        session = elsewhere.session
        other = world.vault.put(
            elsewhere,
            RECORDS,
            media_type="application/x-ndjson",
        )
        answer = world.http.post(
            f"/v1/artifacts/{other.artifact_id}/query",
            json={"limit": 2, "cursor": cursor},
            headers=world.headers(token, session),
        )
        assert answer.status_code == 400, answer.text
        assert records.encode() not in answer.content
    # A tampered cursor, a huge one, a non-string one: refused, never echoed.
    for bad in (cursor[:-2] + "xx", cursor + PLANTED, PLANTED * 10_000, 12, ["x"], {"a": PLANTED}):
        answer = world.http.post(
            f"/v1/artifacts/{records}/query", json={"limit": 2, "cursor": bad}, headers=world.headers()
        )
        check_answer(answer)
        assert answer.status_code == 400


# -- bodies: limits, lies, nesting ------------------------------------------------------------------


def test_capture_body_limits_hold_in_process(world: World) -> None:
    session = "limits"
    headers = world.headers(None, session)
    chunked = world.http.post("/v1/artifacts", headers=headers, content=iter([b"a" * 16_384] * 5))
    assert chunked.status_code == 413
    exact = world.http.post("/v1/artifacts", headers=headers, content=iter([b"b" * 16_384] * 4))
    assert exact.status_code == 201  # exactly max_body is allowed
    declared = world.http.post("/v1/artifacts", headers={**headers, "Content-Length": str(10**30)}, content=b"c")
    assert declared.status_code == 413
    body = [{"type": "http.request", "body": b"d" * 10, "more_body": False}]
    for lie in (b"\xb2", b"\xb9\xb2", b"+5", b"-1", b"5 ", b"0x10", b"1e3", b"", "\u0661".encode(), b"9" * 5000):
        status, answer = asgi(
            world.http.app, "POST", "/v1/artifacts", raw_headers(world, None, session, content_length=lie), body
        )
        assert status in (201, 413), (lie, status, answer[:200])
        mcp_status, _ = asgi(world.http.app, "POST", "/mcp", raw_headers(world, content_length=lie), body)
        assert mcp_status < 500, (lie, mcp_status)
    sizes = sorted(d.size for d in world.vault.list(Scope("acme", "ana", session)))
    assert all(size <= MAX_BODY for size in sizes)
    assert MAX_BODY in sizes


def test_query_bodies_deep_huge_and_odd_are_4xx(world: World) -> None:
    path = f"/v1/artifacts/{world.ids['records']}/query"
    deep_where = {"field": "n", "op": "eq", "value": 1}
    for _ in range(200):
        deep_where = {"not": deep_where}
    nested_value: Any = 1
    for _ in range(900):
        nested_value = [nested_value]
    bodies: list[bytes] = [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"where": ' + b"[" * 900 + b"]" * 900 + b"}",
        json.dumps({"where": deep_where}).encode(),
        json.dumps({"where": {"field": "n", "op": "in", "value": nested_value}}).encode(),
        json.dumps({"where": {"field": "n", "op": "eq", "value": nested_value}}).encode(),
        json.dumps({"where": {"field": "n", "op": "in", "value": list(range(100_000))}}).encode(),
        json.dumps({"where": {"or": [{"field": "n", "op": "eq", "value": i} for i in range(5000)]}}).encode(),
        json.dumps({"fields": [f"f{i}" for i in range(50_000)]}).encode(),
        json.dumps({"fields": ["n"] * 10_000}).encode(),
        json.dumps({"order": [{"field": "n", "direction": "asc"}] * 1000}).encode(),
        b'{"limit": ' + b"9" * 5000 + b"}",
        b'{"limit": 1e400}',
        b'{"max_seconds": 1e400}',
        b'{"max_seconds": -0.0}',
        b'{"record_range": [0, 99999999999999999999999999]}',
        b'{"record_range": [-5, 3]}',
        b'{"record_range": [9223372036854775807, 9223372036854775807]}',
        b'{"max_scan": 99999999999999999999999999}',
        b'{"limit": NaN}',
        b'{"limit": 1, "limit": 2}',
        b'{"where": {"field": "n", "op": "eq", "value": 99999999999999999999999999999}}',
        b'{"where": {"field": "n", "op": "gt", "value": 1e308}}',
        b'{"where": {"field": "word", "op": "contains", "value": "' + b"%" * 100_000 + b'"}}',
        b'{"where": {"field": "n\\u0000", "op": "eq", "value": 1}}',
        b'{"fields": ["\\ud800"]}',
        b"\xff\xfe{}",
        b'{"where": "' + PLANTED.encode() + b'"}',
        b"x" * (MAX_JSON_BODY + 1),
        b" " * (MAX_JSON_BODY + 1),
    ]
    for body in bodies:
        answer = world.http.post(path, content=body, headers={**world.headers(), "Content-Type": "application/json"})
        check_answer(answer, content_visible=True)
        if answer.status_code >= 400:
            assert answer.status_code in (400, 413, 422), (body[:80], answer.text[:300])
    chunked = world.http.post(path, content=iter([b" " * 65_536] * 20), headers=world.headers())
    assert chunked.status_code == 413
    # An unknown field is named back (the caller's own query, to help the model), but only a short prefix of it.
    long_name = PLANTED * 100
    named = world.http.post(path, json={"where": {"field": long_name, "op": "eq", "value": 1}}, headers=world.headers())
    assert named.status_code == 400
    assert long_name[:200] not in named.text
    assert len(named.content) < 1000


@pytest.mark.parametrize(
    "params",
    [
        {"lines": "9999999999999999999,"},
        {"lines": "9999999999999999999,9999999999999999999"},
        {"lines": "0,9999999999999999999"},
        {"bytes": "9999999999999999999,9999999999999999999"},
        {"bytes": "0,9999999999999999999"},
        {"bytes": "9223372036854775807,1"},
        {"max_chars": str(10**30)},
        {"max_chars": "-1"},
    ],
)
def test_window_numbers_at_the_edges_are_not_5xx(world: World, params: dict[str, str]) -> None:
    answer = world.http.get(f"/v1/artifacts/{world.ids['text']}/window", params=params, headers=world.headers())
    check_answer(answer, content_visible=True)


@pytest.mark.parametrize(
    "params",
    [
        {"pattern": "x", "from_line": str(2**63)},
        {"pattern": "x", "from_line": str(10**30)},
        {"pattern": "x", "max_matches": str(10**30)},
        {"pattern": "x", "max_seconds": "1e400"},
        {"pattern": "x", "max_seconds": "nan"},
        {"pattern": "(" * 5000 + ")" * 5000, "regex": "true"},
        {"pattern": "a{1000}{1000}", "regex": "true"},
        {"pattern": "\\", "regex": "true"},
        {"pattern": "x" * 30_000},
        {"pattern": "\x00"},
        {"pattern": ""},
    ],
)
def test_grep_numbers_and_patterns_at_the_edges_are_not_5xx(world: World, params: dict[str, str]) -> None:
    answer = world.http.get(f"/v1/artifacts/{world.ids['text']}/grep", params=params, headers=world.headers())
    check_answer(answer, content_visible=True)


@pytest.mark.parametrize(
    "params",
    [{"limit": "0"}, {"limit": str(10**30)}, {"offset": str(2**63)}, {"offset": str(2**63 - 1)}, {"offset": "-1"}],
)
def test_list_paging_at_the_edges(world: World, params: dict[str, str]) -> None:
    answer = world.http.get("/v1/artifacts", params=params, headers=world.headers())
    check_answer(answer)


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


def test_idempotency_keys_are_per_scope(world: World) -> None:
    key = {"Idempotency-Key": "call-1:0"}
    mine = world.http.post("/v1/artifacts", content=b"mine", headers=world.headers(None, "idem", **key))
    theirs = world.http.post(
        "/v1/artifacts", content=b"theirs", headers=world.headers(world.other_tenant, "idem", **key)
    )
    bobs = world.http.post("/v1/artifacts", content=b"bob's", headers=world.headers(world.other_user, "idem", **key))
    assert mine.status_code == theirs.status_code == bobs.status_code == 201, (theirs.text, bobs.text)
    assert len({mine.json()["artifact_id"], theirs.json()["artifact_id"], bobs.json()["artifact_id"]}) == 3
    replay = world.http.post("/v1/artifacts", content=b"mine", headers=world.headers(None, "idem", **key))
    assert replay.json()["artifact_id"] == mine.json()["artifact_id"]
    conflict = world.http.post(
        "/v1/artifacts", content=b"other " + CONTENT_CANARY, headers=world.headers(None, "idem", **key)
    )
    assert conflict.status_code == 409
    check_answer(conflict)


def test_mcp_tool_arguments_at_the_edges(world: World) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("load_artifacts", {"artifact_ids": [MISSING_ID] * 100_000}),
        ("load_artifacts", {"artifact_ids": [PLANTED * 1000]}),
        ("list_artifacts", {"limit": 10**30}),
        ("read_artifact", {"artifact_id": world.ids["text"], "lines": [0, 10**30]}),
        ("read_artifact", {"artifact_id": world.ids["text"], "byte_range": [10**30, 10**30]}),
        ("read_artifact", {"artifact_id": world.ids["text"], "pattern": "(" * 10_000, "regex": True}),
        ("query_artifact", {"artifact_id": world.ids["records"], "where": {"not": {"not": {"not": {}}}}}),
        ("query_artifact", {"artifact_id": world.ids["records"], "record_range": [0, 10**30]}),
        ("describe_artifact", {"artifact_id": {"nested": [PLANTED]}}),
    ]
    for name, arguments in calls:
        answer = mcp(world, "tools/call", {"name": name, "arguments": arguments})
        assert answer.status_code == 200, answer.text[:300]
        result = answer.json()
        assert "result" in result, result
        assert PLANTED * 10 not in answer.text  # at most a short mention of the caller's own argument


def test_mcp_bodies_are_bounded_and_bad_requests_are_not_5xx(world: World) -> None:
    headers = {
        "Authorization": f"Bearer {world.owner}",
        "Refvault-Session": "s1",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    huge = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"x": "' + b"a" * (8 << 20) + b'"}}'
    answer = world.http.post("/mcp", content=huge, headers=headers)
    assert answer.status_code == 413
    check_answer(answer)
    chunked = world.http.post("/mcp", content=iter([b" " * (1 << 20)] * 9), headers=headers)
    assert chunked.status_code == 413
    for body in (b"", b"{", b"[]", b"[" * 100_000, b'{"jsonrpc": "2.0"}', b"\xff", b"null"):
        answer = world.http.post("/mcp", content=body, headers=headers)
        assert answer.status_code < 500, (body[:20], answer.text[:200])
    for verb in ("GET", "DELETE", "PUT"):
        assert world.http.request(verb, "/mcp", headers=headers).status_code < 500


# -- a real server on loopback: the remote Toolbox, and bodies that lie ------------------------------


@dataclass(frozen=True)
class Live:
    url: str
    store: Path
    token: str
    host: str
    port: int
    pid: int


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    root = tmp_path_factory.mktemp("review-live")
    store = root / "store"
    with Vault.open(store) as vault:
        _, token = create_key(vault, "acme", "ana")
    port = _free_port()
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
