"""Fuzzed ids, path segments, query parameters, headers and capture metadata: never a 5xx, never another scope's or
any planted content.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refvault import Scope
from tests.server.world import (
    CONTENT_CANARY,
    FUZZ,
    JSON_VALUES,
    OWNER,
    PLANTED,
    TEXT,
    World,
    check_answer,
    raw_answer,
)

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
