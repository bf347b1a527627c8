"""Results through the MCP gateway: oversized texts and errors offloaded, structured content kept, sealed parts never
shown, and a SIGTERM'd stdio proxy stops its upstream.

Tests named ``test_fN_*`` were findings of a review (each failed before its fix, the defect named in its
docstring); ``test_d_*`` pin attacks the code already defended.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.client.stdio import StdioServerParameters
from mcp.server.mcpserver import MCPServer
from mcp.types import (
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    TextContent,
    TextResourceContents,
)

from refvault import Scope, Vault
from refvault.integrations.mcp.gateway import Gateway, GatewayOptions
from tests.content.parts import OTHER, RUNNER, SCOPE, b64, link_id, noise, png, surviving


@pytest.fixture
def store(embedded_vault: Vault) -> Vault:
    return embedded_vault


# -- gateway findings (in process: SDK Client -> Gateway server -> SDK Client -> MCPServer upstream) -------------------

SECRET_PDF = b"%PDF-1.4 " + noise(600, "gw")
SECRET_B64 = b64(SECRET_PDF)
GW_PNG = png(500, "gw-png")


def _review_upstream() -> MCPServer:
    server = MCPServer("review-upstream", log_level="WARNING")

    @server.tool()
    def big_resource() -> CallToolResult:
        """A 1 MB embedded *text* resource (about 250,000 tokens)."""
        contents = TextResourceContents(uri="file:///big.txt", mime_type="text/plain", text="word " * 200_000)
        return CallToolResult(content=[EmbeddedResource(type="resource", resource=contents)])

    @server.tool()
    def image_with_rows() -> CallToolResult:
        """An image beside ~140 KB of ordinary structured data."""
        rows = [{"i": i, "name": f"row {i}"} for i in range(5000)]
        return CallToolResult(
            content=[ImageContent(type="image", data=b64(GW_PNG), mime_type="image/png")],
            structured_content={"rows": rows},
        )

    @server.tool()
    def data_uri_blob() -> CallToolResult:
        """An embedded PDF whose URI is a data: URL of itself."""
        contents = BlobResourceContents(
            uri="data:application/pdf;base64," + SECRET_B64, mime_type="application/pdf", blob=SECRET_B64
        )
        return CallToolResult(content=[EmbeddedResource(type="resource", resource=contents)])

    @server.tool()
    def sealed_image() -> CallToolResult:
        """A plain image (stored sealed by default)."""
        return CallToolResult(content=[ImageContent(type="image", data=b64(GW_PNG), mime_type="image/png")])

    @server.tool()
    def echo_error(size: int) -> CallToolResult:
        """An upstream isError result with a long message."""
        return CallToolResult(content=[TextContent(type="text", text="E" * size)], is_error=True)

    return server


@contextlib.asynccontextmanager
async def gateway_client(vault: Vault, scope: Scope = SCOPE, **options: Any) -> AsyncIterator[Client]:
    async with Client(_review_upstream(), cache=None) as upstream_client:
        gateway = Gateway(vault, scope, upstream_client, server_name="review", options=GatewayOptions(**options))
        async with Client(gateway.server(), cache=None) as client:
            yield client


def test_gateway_offloads_an_oversized_embedded_text_resource(store: Vault) -> None:
    """``_offload`` only looks at TextContent blocks: a 1 MB embedded text resource reaches the model whole
    (~250,000 tokens against a 20,000-token threshold)."""

    async def main() -> int:
        async with gateway_client(store) as client:
            result = await client.call_tool("big_resource")
            return len(result.model_dump_json())

    size = anyio.run(main)
    assert size < 50_000, f"{size} characters reached the client"


def test_gateway_keeps_structured_content_beside_a_binary_part(store: Vault) -> None:
    """materialize() replaces structuredContent over 64 KiB with a ``refvault_omitted`` note whenever the
    result has a binary part, *before* the gateway's offload sees it: ordinary data is dropped and stored
    nowhere (the gateway docstring promises oversized structuredContent is offloaded)."""

    async def main() -> Any:
        async with gateway_client(store) as client:
            return (await client.call_tool("image_with_rows")).structured_content

    structured = anyio.run(main)
    assert "refvault_omitted" not in structured, structured
    assert "rows" in structured or "offloaded" in structured


def test_through_the_gateway_describe_artifact_shows_no_sealed_base64(store: Vault) -> None:
    async def main() -> tuple[str, str]:
        async with gateway_client(store) as client:
            result = await client.call_tool("data_uri_blob")
            artifact_id = link_id(result.content[0])
            described = await client.call_tool("describe_artifact", {"artifact_id": artifact_id})
            return result.model_dump_json(), described.model_dump_json()

    projected, described = anyio.run(main)
    assert surviving(projected, SECRET_B64) == 0
    assert surviving(described, SECRET_B64) == 0, "describe_artifact shows the sealed blob's base64"


# -- F17: the stdio proxy orphans its upstream on SIGTERM -------------------------------------------------------------

_SLOW_UPSTREAM = """
import os, time
from mcp.server.mcpserver import MCPServer
server = MCPServer("pids", log_level="WARNING")

@server.tool()
def pids() -> str:
    return f"{os.getpid()} {os.getppid()}"

@server.tool()
def slow() -> str:
    time.sleep(30)
    return "done"

server.run("stdio")
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_sigterm_to_the_stdio_proxy_stops_its_upstream(tmp_path: Path) -> None:
    """In stdio mode the proxy installs no SIGTERM handling (HTTP mode does): SIGTERM while a tool call is
    in flight kills the proxy without closing the SDK client, so the upstream keeps running (for as long
    as its tool does; forever if it hangs). A closed stdin alone does not stop it."""
    script = tmp_path / "slow_upstream.py"
    script.write_text(_SLOW_UPSTREAM)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFVAULT_")}
    args = ["-c", RUNNER, "proxy", "--store", str(tmp_path / "store"), "--", sys.executable, str(script)]
    pids: dict[str, int] = {}

    async def main() -> None:
        async with Client(StdioServerParameters(command=sys.executable, args=args, env=env), cache=None) as client:
            reply = await client.call_tool("pids")
            upstream_pid, proxy_pid = map(int, reply.content[0].text.split())  # type: ignore[union-attr]
            pids.update(upstream=upstream_pid, proxy=proxy_pid)
            async with anyio.create_task_group() as group:

                async def call_slow() -> None:
                    with contextlib.suppress(Exception):
                        await client.call_tool("slow")

                group.start_soon(call_slow)
                await anyio.sleep(0.5)
                os.kill(proxy_pid, signal.SIGTERM)
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline and _alive(upstream_pid):
                    await anyio.sleep(0.1)
                group.cancel_scope.cancel()

    try:
        anyio.run(main)
        assert not _alive(pids["proxy"])
        assert not _alive(pids["upstream"]), "the upstream outlived the SIGTERM'd proxy by 5 s"
    finally:
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_d_gateway_sealed_artifacts_do_not_leak_through_reads(store: Vault) -> None:
    other_id = store.put(OTHER, b"bob's words", media_type="text/plain").artifact_id
    png_b64 = b64(GW_PNG)

    async def main() -> list[str]:
        seen: list[str] = []
        async with gateway_client(store) as client:
            result = await client.call_tool("sealed_image")
            artifact_id = link_id(result.content[0])
            seen.append(result.model_dump_json())
            for tool, arguments in [
                ("load_artifacts", {"artifact_ids": [artifact_id]}),
                ("read_artifact", {"artifact_id": artifact_id}),
                ("query_artifact", {"artifact_id": artifact_id}),
                ("describe_artifact", {"artifact_id": artifact_id}),
                ("list_artifacts", {}),
            ]:
                seen.append((await client.call_tool(tool, arguments)).model_dump_json())
            with pytest.raises(MCPError, match="usable by reference only"):
                await client.read_resource(f"refvault://{artifact_id}")
            messages = []
            for uri in (f"refvault://{other_id}", "refvault://art_" + "a" * 26):
                with pytest.raises(MCPError) as caught:
                    await client.read_resource(uri)
                messages.append(caught.value.message.replace(uri, "<uri>"))
            assert len(set(messages)) == 1, "another scope's artifact is distinguishable from a missing one"
            listed = (await client.list_resources()).resources
            assert [str(r.uri) for r in listed] == [f"refvault://{artifact_id}"]
            foreign = await client.call_tool("describe_artifact", {"artifact_id": other_id})
            assert foreign.is_error
            assert "bob" not in foreign.model_dump_json()
        return seen

    for shown in anyio.run(main):
        assert surviving(shown, png_b64) == 0


def test_d_gateway_offloads_an_oversized_upstream_error_text(store: Vault) -> None:
    async def main() -> CallToolResult:
        async with gateway_client(store) as client:
            return await client.call_tool("echo_error", {"size": 400_000})

    result = anyio.run(main)
    assert result.is_error
    assert len(result.model_dump_json()) < 20_000
