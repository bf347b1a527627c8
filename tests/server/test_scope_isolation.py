"""Scopes over HTTP and /mcp: foreign (or expired) artifacts look absent, sealed content never leaves, keys, cursors
and idempotency keys stay in their scope.
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st

from refvault import Scope, Vault
from refvault.keys import create_key
from refvault.server.app import create_app
from tests.conftest import Clock
from tests.server.world import (
    CONTENT_CANARY,
    FUZZ,
    JSON_VALUES,
    MISSING_ID,
    OWNER,
    PLANTED,
    RECORDS,
    SEALED_CANARY,
    TEXT,
    World,
    check_answer,
    mcp,
)


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
