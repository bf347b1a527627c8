"""API keys: a key revoked mid-session stops at the next request; an unknown key and a wrong secret take the same
path.
"""

from __future__ import annotations

import hmac
from typing import Any

import pytest

from refvault.keys import create_key, revoke_key
from tests.server.world import CONTENT_CANARY, World, mcp


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
