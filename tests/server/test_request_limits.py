"""Request bodies and numbers at their limits: capture bodies, query bodies, window, grep and list numbers, MCP
arguments and bodies are 4xx, never 5xx.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from refvault import Scope
from refvault.server.app import MAX_JSON_BODY
from tests.server.world import (
    MAX_BODY,
    MISSING_ID,
    PLANTED,
    World,
    asgi,
    check_answer,
    mcp,
    raw_headers,
)

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
