"""``/mcp`` reads for the model the MCP client declares: the tenant's policy judges ``model:<clientInfo.name>``,
so one client may read a labelled artifact that another is refused, with the rule named (never content).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import anyio
import httpx2
import pytest
from mcp import Client as McpClient
from mcp import MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Implementation, TextContent

from refvault import Client, Scope, Vault
from refvault.policy import Policy, Rule
from tests.servers import LiveServer, serve

SCOPE = Scope("acme", "ana", "s1")
SECRET = "Ada Lovelace, ward 7, MRN-5512-0098"
POLICY = Policy(
    rules=[
        Rule(id="pii-to-the-trusted-agent", labels={"pii"}, recipients=["model:trusted-agent"], action="allow"),
        Rule(id="no-pii-to-other-models", labels={"pii"}, recipients=["model:*"], action="deny"),
    ],
    version="mcp-1",
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, str, str]]:
    store = tmp_path_factory.mktemp("mcp-recipients") / "store"
    with Vault.open(store) as vault:
        vault.set_policy(SCOPE.tenant, POLICY)
        pii = vault.put(SCOPE, SECRET.encode(), media_type="text/plain", labels={"pii"}).artifact_id
        plain = vault.put(SCOPE, b"nothing personal\n", media_type="text/plain").artifact_id
    with serve(store) as server:
        yield server, pii, plain


def _client(live: LiveServer, name: str) -> McpClient:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {live.token}", "Refvault-Session": "s1"})
    info = Implementation(name=name, version="1.0")
    return McpClient(streamable_http_client(live.url + "/mcp", http_client=http), client_info=info)


def _text(result: object) -> str:
    block = result.content[0]  # type: ignore[attr-defined]
    assert isinstance(block, TextContent)
    return block.text


def test_the_declared_client_is_the_recipient_the_policy_judges(world: tuple[LiveServer, str, str]) -> None:
    live, pii, plain = world

    async def run() -> None:
        async with _client(live, "trusted-agent") as mcp:
            read = await mcp.call_tool("read_artifact", {"artifact_id": pii})
            assert not read.is_error
            assert SECRET in json.loads(_text(read))["text"]
            resource = await mcp.read_resource("refvault://" + pii)
            assert resource.contents[0].text == SECRET  # type: ignore[union-attr]
        async with _client(live, "other-agent") as mcp:
            refused = await mcp.call_tool("read_artifact", {"artifact_id": pii})
            assert refused.is_error
            assert "no-pii-to-other-models" in _text(refused)
            assert "Ada" not in _text(refused)
            loaded = await mcp.call_tool("load_artifacts", {"artifact_ids": [pii]})
            assert "Ada" not in json.dumps([block.model_dump() for block in loaded.content])
            with pytest.raises(MCPError) as denied:
                await mcp.read_resource("refvault://" + pii)
            assert "Ada" not in str(denied.value)
            fine = await mcp.call_tool("read_artifact", {"artifact_id": plain})
            assert not fine.is_error
            assert "nothing personal" in _text(fine)

    anyio.run(run)


def test_the_audit_names_the_declared_model_as_the_recipient(world: tuple[LiveServer, str, str]) -> None:
    live, pii, _ = world

    async def run() -> None:
        async with _client(live, "trusted-agent") as mcp:
            assert not (await mcp.call_tool("read_artifact", {"artifact_id": pii})).is_error

    anyio.run(run)
    with Client(live.url, live.token) as client:
        recipients = {d.recipient for d in client.disclosures(SCOPE, pii)}
    assert "model:trusted-agent" in recipients
    assert "model:other-agent" not in recipients  # refused reads disclose nothing
