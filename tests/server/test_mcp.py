"""``/mcp`` of a live ``refvault serve``, through the official MCP SDK client over streamable HTTP.

The model-facing read tools and ``refvault://`` resources run in the scope of
the caller's API key and ``Refvault-Session``; no key is a 401 before MCP is
reached; another tenant's key sees nothing; sealed content is never served.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client as McpClient
from mcp import MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from refvault import Client, Scope
from tests.servers import LiveServer, serve

SCOPE = Scope("acme", "ana", "s1")
MCP_PATH = "/mcp"  # the contract's endpoint (the app is mounted there)
TOOLS = {
    "describe_artifact",
    "list_artifacts",
    "read_artifact",
    "query_artifact",
    "load_artifacts",
    "artifact_lineage",  # the read-only derived-copy tools (refvault.mcp_tools.COPY_TOOLS)
    "artifact_receipt",
}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with serve(tmp_path_factory.mktemp("mcp") / "store") as server:
        yield server


@pytest.fixture(scope="module")
def artifacts(live: LiveServer) -> dict[str, str]:
    with Client(live.url, live.token) as client:
        text = client.put(SCOPE, b"alpha\nbeta\ngamma\n", media_type="text/plain", filename="greek.txt")
        rows = client.put(SCOPE, b'{"n": 1}\n{"n": 2}\n{"n": 3}\n', media_type="application/x-ndjson")
        sealed = client.put(SCOPE, b"the sealed secret\n", media_type="text/plain", disclosure="sealed")
    return {"text": text.artifact_id, "rows": rows.artifact_id, "sealed": sealed.artifact_id}


def _session(live: LiveServer, token: str, session: str = "s1") -> McpClient:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}", "Refvault-Session": session})
    return McpClient(streamable_http_client(live.url + MCP_PATH, http_client=http))


def _text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def test_the_read_tools_and_resources_work_in_the_keys_scope(live: LiveServer, artifacts: dict[str, str]) -> None:
    async def run() -> None:
        async with _session(live, live.token) as mcp:
            assert {tool.name for tool in (await mcp.list_tools()).tools} == TOOLS
            listed = json.loads(_text(await mcp.call_tool("list_artifacts", {})))
            assert {a["artifact_id"] for a in listed["artifacts"]} == set(artifacts.values())
            described = json.loads(_text(await mcp.call_tool("describe_artifact", {"artifact_id": artifacts["text"]})))
            assert described["descriptor"]["retrieval"]["filename"] == "greek.txt"
            window = await mcp.call_tool("read_artifact", {"artifact_id": artifacts["text"], "lines": [1, 2]})
            assert not window.is_error
            assert json.loads(_text(window))["text"] == "beta\n"
            found = json.loads(
                _text(await mcp.call_tool("read_artifact", {"artifact_id": artifacts["text"], "pattern": "mm"}))
            )
            assert [m["line"] for m in found["matches"]] == [2]
            query = await mcp.call_tool(
                "query_artifact", {"artifact_id": artifacts["rows"], "where": {"field": "n", "op": "gt", "value": 1}}
            )
            assert [r["record"]["n"] for r in json.loads(_text(query))["records"]] == [2, 3]
            loaded = await mcp.call_tool("load_artifacts", {"artifact_ids": [artifacts["text"]]})
            assert "alpha\nbeta\ngamma\n" in _text(loaded)
            resource = await mcp.read_resource("refvault://" + artifacts["text"])
            assert resource.contents[0].text == "alpha\nbeta\ngamma\n"  # type: ignore[union-attr]
            uris = {str(r.uri) for r in (await mcp.list_resources()).resources}
            assert uris == {"refvault://" + a for a in artifacts.values()}

    anyio.run(run)


def test_sealed_content_is_never_served(live: LiveServer, artifacts: dict[str, str]) -> None:
    sealed = artifacts["sealed"]

    async def run() -> None:
        async with _session(live, live.token) as mcp:
            for name, arguments in [
                ("read_artifact", {"artifact_id": sealed}),
                ("read_artifact", {"artifact_id": sealed, "pattern": "secret"}),
                ("load_artifacts", {"artifact_ids": [sealed]}),
            ]:
                result = await mcp.call_tool(name, arguments)
                shown = json.dumps([block.model_dump() for block in result.content])
                assert "sealed" in shown
                assert "the sealed secret" not in shown
            with pytest.raises(MCPError) as refused:
                await mcp.read_resource("refvault://" + sealed)
            assert "sealed" in str(refused.value)
            assert "the sealed secret" not in str(refused.value)
            described = _text(await mcp.call_tool("describe_artifact", {"artifact_id": sealed}))
            assert "usable by reference only" in described
            assert "the sealed secret" not in described

    anyio.run(run)


def test_a_foreign_key_sees_nothing(live: LiveServer, artifacts: dict[str, str]) -> None:
    async def run() -> None:
        async with _session(live, live.foreign_token) as mcp:
            assert json.loads(_text(await mcp.call_tool("list_artifacts", {})))["total"] == 0
            assert (await mcp.list_resources()).resources == []
            theirs = await mcp.call_tool("read_artifact", {"artifact_id": artifacts["text"]})
            nothing = await mcp.call_tool("read_artifact", {"artifact_id": "art_" + "a" * 26})
            assert theirs.is_error
            assert nothing.is_error
            assert _text(theirs).replace(artifacts["text"], "ID") == _text(nothing).replace("art_" + "a" * 26, "ID")
            with pytest.raises(MCPError) as missing:
                await mcp.read_resource("refvault://" + artifacts["text"])
            assert "not found" in str(missing.value)

    anyio.run(run)


def test_no_valid_key_is_401_and_a_session_not_allowed_is_403(live: LiveServer) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    headers = {"Accept": "application/json, text/event-stream", "Refvault-Session": "s1"}
    url = live.url + MCP_PATH
    bodies = []
    for extra in ({}, {"Authorization": "Bearer rvk_nonsense"}, {"Authorization": "Basic x"}):
        answer = httpx.post(url, json=initialize, headers={**headers, **extra})
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"] == "Bearer"
        assert answer.headers["content-type"].startswith("application/problem+json")
        bodies.append(answer.content)
    assert len(set(bodies)) == 1
    assert json.loads(bodies[0])["error"] == "Unauthenticated"
    authorised = {**headers, "Authorization": f"Bearer {live.token}"}
    assert httpx.post(url, json=initialize, headers=authorised).status_code == 200
    no_session = {k: v for k, v in authorised.items() if k != "Refvault-Session"}
    assert httpx.post(url, json=initialize, headers=no_session).status_code == 400
    limited = {**headers, "Authorization": f"Bearer {live.s1_token}", "Refvault-Session": "s2"}
    refused = httpx.post(url, json=initialize, headers=limited)
    assert refused.status_code == 403
    assert refused.json()["error"] == "Forbidden"


def test_the_session_header_decides_what_is_visible(
    live: LiveServer, artifacts: dict[str, str], tmp_path: Path
) -> None:
    async def run() -> None:
        async with _session(live, live.token, session="elsewhere") as mcp:
            assert (await mcp.list_resources()).resources == []
            result = await mcp.call_tool("read_artifact", {"artifact_id": artifacts["text"]})
            assert result.is_error
            assert "not found" in _text(result)

    anyio.run(run)
