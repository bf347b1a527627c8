"""The MCP gateway runs every result through the leak guard: a sealed artifact's text never reaches the client.

The attack: an upstream tool returns an embedded text resource carrying the text
of a sealed artifact of the session (usable by reference only), and the gateway,
consulting no guard, passed it on. Now the gateway holds a
:class:`~refvault.guard.LeakGuard` (the same one its built-in tools' Toolbox
uses), protects the scope's sealed text artifacts before each check, and answers
a result carrying protected content with an error naming the artifact id, never
the text. Results run between the official MCP SDK's client and a real upstream
server subprocess (``base64_upstream.py``); one test runs the real
``refvault mcp proxy`` command.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.types import CallToolResult, ResourceLink, TextContent

from refvault import Scope, Vault
from refvault.guard import LeakGuard
from refvault.integrations.mcp.gateway import Gateway, GatewayOptions, Upstream, open_gateway
from tests.integrations.test_mcp_gateway import stdio_proxy
from tests.security import base64_upstream as shapes

SCRIPT = Path(shapes.__file__)
SCOPE = Scope("acme", "ana", "s1")
MEMO = "\n".join(
    f"Confidential memo, paragraph {i}: the acquisition of Globex closes on the {i + 3}th at 41.20 per share."
    for i in range(20)
)


@pytest.fixture
def vault(embedded_vault: Vault) -> Vault:
    return embedded_vault


@pytest.fixture(scope="module")
def memo_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("memo") / "memo.txt"
    path.write_text(MEMO, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def upstream_url(memo_file: Path) -> Iterator[str]:
    """``base64_upstream.py`` in a subprocess (streamable HTTP; its memo resource reads ``memo_file``), once."""
    with shapes.serving(memo_file) as url:
        yield url


@asynccontextmanager
async def gateway_client(vault: Vault, url: str, **options: Any) -> AsyncIterator[tuple[Gateway, Client]]:
    upstream = Upstream(url=url)
    async with (
        open_gateway(vault, SCOPE, upstream, GatewayOptions(**options)) as gateway,
        Client(gateway.server(), cache=None) as client,
    ):
        yield gateway, client


def assert_memo_absent(*received: Any) -> None:
    """Nothing of the memo: not whole, not any 64-character piece of it."""
    wire = "\n".join(
        item.model_dump_json(by_alias=True) if hasattr(item, "model_dump_json") else str(item) for item in received
    )
    assert not any(MEMO[i : i + 64] in wire for i in range(0, len(MEMO) - 63, 8))


def withheld_text(result: CallToolResult) -> str:
    assert result.is_error
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


@pytest.mark.parametrize("shape", ["resource", "text", "structured"])
def test_a_sealed_artifacts_text_in_a_result_is_withheld(
    vault: Vault, memo_file: Path, upstream_url: str, shape: str
) -> None:
    async def main() -> tuple[str, CallToolResult]:
        async with gateway_client(vault, upstream_url) as (_, client):
            # Sealed after the gateway started: each check protects what the scope holds then.
            sealed = vault.put(SCOPE, MEMO.encode(), media_type="text/plain", disclosure="sealed").artifact_id
            return sealed, await client.call_tool("read_file", {"path": str(memo_file), "shape": shape})

    sealed, result = anyio.run(main)
    message = withheld_text(result)
    assert sealed in message
    assert "withheld" in message
    assert "usable by reference only" in message
    assert_memo_absent(result)
    assert [d.artifact_id for d in vault.list(SCOPE)] == [sealed]  # nothing of the result was stored


def test_the_same_text_not_sealed_passes(vault: Vault, memo_file: Path, upstream_url: str) -> None:
    vault.put(SCOPE, MEMO.encode(), media_type="text/plain", disclosure="model")
    vault.put(SCOPE, b"\x89PNG\r\n\x1a\n" + MEMO.encode(), media_type="image/png", disclosure="sealed")

    async def main() -> CallToolResult:
        async with gateway_client(vault, upstream_url) as (_, client):
            return await client.call_tool("read_file", {"path": str(memo_file)})

    result = anyio.run(main)
    assert not result.is_error
    assert result.content[0].resource.text == MEMO  # type: ignore[union-attr]


def test_sealed_text_arriving_as_a_blob_is_never_stored_readable(
    vault: Vault, memo_file: Path, upstream_url: str
) -> None:
    sealed = vault.put(SCOPE, MEMO.encode(), media_type="text/plain", disclosure="sealed").artifact_id

    async def main(disclosure: str) -> CallToolResult:
        async with gateway_client(vault, upstream_url, binary_disclosure=disclosure) as (_, client):
            return await client.call_tool("read_file", {"path": str(memo_file), "shape": "blob"})

    # Stored as a readable artifact, the blob would hand the model the memo: refused before anything is stored.
    readable = anyio.run(main, "model")
    assert sealed in withheld_text(readable)
    assert [d.artifact_id for d in vault.list(SCOPE)] == [sealed]
    # Stored sealed (the default), it stays usable by reference only: the link is shown.
    kept = anyio.run(main, "sealed")
    [link] = kept.content
    assert isinstance(link, ResourceLink)
    assert vault.describe(SCOPE, link.uri.removeprefix("refvault://")).disclosure == "sealed"
    assert_memo_absent(readable, kept)


def test_an_upstream_resource_carrying_sealed_text_is_refused(vault: Vault, upstream_url: str) -> None:
    sealed = vault.put(SCOPE, MEMO.encode(), media_type="text/plain", disclosure="sealed").artifact_id

    async def main() -> str:
        async with gateway_client(vault, upstream_url) as (_, client):
            with pytest.raises(MCPError) as refused:
                await client.read_resource("file:///memo.txt")
            return refused.value.message

    message = anyio.run(main)
    assert sealed in message
    assert_memo_absent(message)


def test_one_guard_serves_the_gateway_and_its_toolbox(vault: Vault, upstream_url: str) -> None:
    """A guard passed in is the one results are checked with and the built-in tools' Toolbox guard; a
    model-readable copy of sealed text read through a built-in tool is withheld like an upstream result."""
    guard = LeakGuard()
    sealed = vault.put(SCOPE, MEMO.encode(), media_type="application/octet-stream", disclosure="sealed").artifact_id
    copy = vault.put(SCOPE, MEMO.encode(), media_type="text/plain", disclosure="model").artifact_id

    async def main() -> CallToolResult:
        async with open_gateway(vault, SCOPE, Upstream(url=upstream_url), guard=guard) as gateway:
            assert gateway.guard is guard
            assert gateway.toolbox.guard is guard
            async with Client(gateway.server(), cache=None) as client:
                return await client.call_tool("read_artifact", {"artifact_id": copy})

    read = anyio.run(main)
    assert sealed in withheld_text(read)  # sealed octet-stream bytes that are text are protected too
    assert guard.scan(MEMO)
    assert_memo_absent(read)


@pytest.mark.slow
def test_the_proxy_command_withholds_a_sealed_artifacts_text(tmp_path: Path, memo_file: Path) -> None:
    store = tmp_path / "proxy-store"
    with Vault.open(store) as vault:
        sealed = vault.put(SCOPE, MEMO.encode(), media_type="text/plain", disclosure="sealed").artifact_id

    async def main() -> CallToolResult:
        async with stdio_proxy(store, SCOPE, sys.executable, str(SCRIPT), "--memo", str(memo_file)) as client:
            return await client.call_tool("read_file", {"path": str(memo_file)})

    result = anyio.run(main)
    assert sealed in withheld_text(result)
    assert_memo_absent(result)
