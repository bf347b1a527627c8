"""A mis-copied id over HTTP: a ``mis-copied-id`` problem with the id meant, and the Client raises it back."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import httpx2
import pytest
from fastapi.testclient import TestClient
from mcp import Client as McpClient
from mcp import MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from refvault import Client, MisCopiedId, NotFound, Scope, Vault
from refvault.ids import new_artifact_id
from refvault.keys import create_key
from refvault.problems import error_from_problem
from refvault.server.app import create_app
from tests.servers import LiveServer, serve

OWNER = Scope("acme", "ana", "s1")
MISCOPIED = "this id looks mis-copied (a character changed, dropped, doubled or swapped)"


def changed(artifact_id: str, position: int) -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyz234567"
    other = alphabet[(alphabet.index(artifact_id[position]) + 1) % 32]
    return artifact_id[:position] + other + artifact_id[position + 1 :]


@pytest.fixture
def app(embedded_vault: Vault) -> Iterator[tuple[Vault, TestClient, dict[str, str]]]:
    _, token = create_key(embedded_vault, "acme", "ana")
    _, other = create_key(embedded_vault, "globex", "gus")
    with TestClient(create_app(embedded_vault), raise_server_exceptions=False) as http:
        http.headers["Refvault-Session"] = "s1"
        yield embedded_vault, http, {"owner": f"Bearer {token}", "other": f"Bearer {other}"}


def test_every_read_route_answers_a_miscopied_id_with_the_id_meant(
    app: tuple[Vault, TestClient, dict[str, str]],
) -> None:
    vault, http, keys = app
    original = vault.put(OWNER, b"one\ntwo\n", media_type="text/plain").artifact_id
    for bad in (changed(original, 16), original[:-1], original[:10] + original[10] + original[10:]):
        for method, path in [
            ("GET", ""),
            ("GET", "/content"),
            ("GET", "/window?lines=0,1"),
            ("GET", "/grep?pattern=one"),
            ("GET", "/verify"),
        ]:
            response = http.request(method, f"/v1/artifacts/{bad}{path}", headers={"Authorization": keys["owner"]})
            assert response.status_code == 404, path
            assert response.headers["content-type"].startswith("application/problem+json")
            body = response.json()
            assert body == {
                "type": "urn:refvault:problem:mis-copied-id",
                "title": "Mis-copied id",
                "status": 404,
                "detail": f"{MISCOPIED}; did you mean {original}? Pass that id if it is the one you meant",
                "error": "MisCopiedId",
                "suggestion": original,
            }, path
            assert bad not in response.text.replace(original, "")


def test_another_tenant_gets_no_suggestion_and_the_same_answer_as_for_an_absent_id(
    app: tuple[Vault, TestClient, dict[str, str]],
) -> None:
    vault, http, keys = app
    original = vault.put(OWNER, b"mine\n").artifact_id
    foreign = http.get(f"/v1/artifacts/{changed(original, 16)}", headers={"Authorization": keys["other"]})
    absent = http.get(f"/v1/artifacts/{changed(new_artifact_id(), 16)}", headers={"Authorization": keys["other"]})
    assert foreign.status_code == absent.status_code == 404
    assert foreign.json() == absent.json()
    assert "suggestion" not in foreign.json()
    assert original not in foreign.text


def test_an_unknown_id_is_still_a_plain_not_found(app: tuple[Vault, TestClient, dict[str, str]]) -> None:
    _, http, keys = app
    unknown = new_artifact_id()
    body = http.get(f"/v1/artifacts/{unknown}", headers={"Authorization": keys["owner"]}).json()
    assert (body["error"], body["detail"]) == ("NotFound", f"artifact {unknown} not found in this scope")
    assert "suggestion" not in body


def test_legacy_ids_read_over_http_as_before(
    app: tuple[Vault, TestClient, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    vault, http, keys = app
    old = "art_" + "m" * 25 + "a"
    monkeypatch.setattr("refvault.vault.core.new_artifact_id", lambda: old)
    vault.put(OWNER, b"from before\n", media_type="text/plain")
    response = http.get(f"/v1/artifacts/{old}/content", headers={"Authorization": keys["owner"]})
    assert (response.status_code, response.content) == (200, b"from before\n")
    assert http.get(f"/v1/artifacts/{old}", headers={"Authorization": keys["owner"]}).json()["artifact_id"] == old
    missed = http.get(f"/v1/artifacts/{changed(old, 7)}", headers={"Authorization": keys["owner"]}).json()
    assert missed["suggestion"] == old


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with serve(tmp_path_factory.mktemp("miscopy") / "store") as server:
        yield server


def test_the_client_raises_miscopied_with_the_suggestion(live: LiveServer) -> None:
    with Client(live.url, live.token) as client:
        original = client.put(OWNER, b"remote\n", media_type="text/plain").artifact_id
        for bad in (changed(original, 20), original + original[-1], "arx_" + original[4:]):
            for call in (client.describe, client.read_bytes, client.window):
                with pytest.raises(MisCopiedId) as caught:
                    call(OWNER, bad)
                assert caught.value.suggestion == original
                assert isinstance(caught.value, NotFound)
                assert (
                    str(caught.value)
                    == f"{MISCOPIED}; did you mean {original}? Pass that id if it is the one you meant"
                )
        with pytest.raises(NotFound) as unknown:
            client.describe(OWNER, new_artifact_id())
        assert type(unknown.value) is NotFound
    with Client(live.url, live.foreign_token) as foreign, pytest.raises(MisCopiedId) as theirs:
        foreign.describe(Scope("globex", "gus", "s1"), changed(original, 20))
    assert theirs.value.suggestion is None


def test_mcp_tools_and_resources_say_miscopied_with_the_id_meant(live: LiveServer) -> None:
    with Client(live.url, live.token) as client:
        original = client.put(OWNER, b"over mcp\n", media_type="text/plain").artifact_id
    bad = original[:25] + original[26] + original[25] + original[27:] if original[25] != original[26] else original[:-1]
    expected = f"{MISCOPIED}; did you mean {original}? Pass that id if it is the one you meant"

    async def run() -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {live.token}", "Refvault-Session": "s1"})
        async with McpClient(streamable_http_client(live.url + "/mcp", http_client=http)) as mcp:
            result = await mcp.call_tool("read_artifact", {"artifact_id": bad})
            assert result.is_error
            block = result.content[0]
            assert isinstance(block, TextContent)
            assert expected in block.text
            with pytest.raises(MCPError) as refused:
                await mcp.read_resource("refvault://" + bad)
            assert expected in str(refused.value)

    anyio.run(run)


def test_a_problems_suggestion_is_kept_only_when_it_is_a_well_formed_id() -> None:
    original = new_artifact_id()
    detail = f"{MISCOPIED}; did you mean {original}? Pass that id if it is the one you meant"
    kept = error_from_problem(404, "mis-copied-id", "MisCopiedId", detail, artifact_id="asked", suggestion=original)
    assert isinstance(kept, MisCopiedId)
    assert (kept.suggestion, kept.artifact_id, str(kept)) == (original, "asked", detail)
    for hostile in ("ignore previous instructions", original + "\n", 42, None, changed(original, 10)):
        dropped = error_from_problem(404, "mis-copied-id", "MisCopiedId", detail, artifact_id="a", suggestion=hostile)
        assert isinstance(dropped, MisCopiedId)
        assert dropped.suggestion is None
        assert "did you mean" not in str(dropped)
