"""The context working set in an MCP host: results from the MCP gateway (real SDK client and server) are cleared
from later requests once the vault holds them whole, and come back through load_artifacts."""

from __future__ import annotations

import json
from typing import Any

import anyio
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, ImageContent, TextContent

from refvault import Scope, Vault, WorkingSet
from refvault.integrations.mcp.gateway import Gateway, GatewayOptions
from refvault.scripted import ScriptedRun, Seen, answer, call, calls, mcp_tools
from tests.content.parts import b64, png

SCOPE = Scope("acme", "ana", "mcp-run")
PAGE = "incident record " * 3_000  # about 48 KB: over the gateway's offload threshold below


def _upstream() -> MCPServer:
    server = MCPServer("incidents", log_level="WARNING")

    @server.tool()
    def page(n: int) -> CallToolResult:
        """One page of the incident log (offloaded by the gateway)."""
        return CallToolResult(content=[TextContent(type="text", text=f"page {n}\n{PAGE}")])

    @server.tool()
    def screenshot(n: int) -> CallToolResult:
        """A screenshot beside an inline caption: the caption is held nowhere, so this result stays."""
        image = ImageContent(type="image", data=b64(png(400, f"shot-{n}")), mime_type="image/png")
        return CallToolResult(content=[image, TextContent(type="text", text=f"caption {n} " * 400)])

    return server


def test_gateway_results_are_cleared_from_later_requests_and_come_back(embedded_vault: Vault) -> None:
    seen: list[Seen] = []

    def step(tool: str, n: int) -> Any:
        def decide(request: Seen) -> Any:
            seen.append(request)
            return calls(call(tool, n=n))

        return decide

    async def main() -> tuple[ScriptedRun, WorkingSet]:
        async with Client(_upstream(), cache=None) as upstream:
            options = GatewayOptions(offload_tokens=2_000, preview_chars=1_000)
            gateway = Gateway(embedded_vault, SCOPE, upstream, server_name="incidents", options=options)
            ws = WorkingSet(embedded_vault, SCOPE, model_context_tokens=4_096, keep_recent=1)
            run = ScriptedRun(gateway.toolbox, SCOPE, run_id="r1", guard=None, working_set=ws)
            run.attach(await mcp_tools(gateway))
            decisions = [step("screenshot", 0), *(step("page", n) for n in range(6))]

            def reload(request: Seen) -> Any:
                seen.append(request)
                first = json.loads(_tool_message(request.messages, "call_02")["content"])["cleared"]
                return calls(call("load_artifacts", **first["restore"]["arguments"]))

            def done(request: Seen) -> Any:
                seen.append(request)
                return answer("done")

            await run.converse("Read the log.", [*decisions, reload, done])
            return run, ws

    run, ws = anyio.run(main)
    last = seen[-1].messages
    originals = {m["tool_call_id"]: m for m in run.messages if m["role"] == "tool"}
    # The page results (all offloaded previews) are cleared, oldest first; the newest stays.
    first = json.loads(_tool_message(seen[-2].messages, "call_02")["content"])["cleared"]
    assert first["tool"] == "page"
    assert first["restore"]["tool"] == "load_artifacts"
    (artifact,) = first["artifacts"]
    offloaded = json.loads(json.loads(originals["call_02"]["content"])["content"][0]["text"])["offloaded"]
    assert artifact["artifact_id"] == offloaded["artifact_id"]
    assert embedded_vault.read_bytes(SCOPE, artifact["artifact_id"]).decode() == f"page 0\n{PAGE}"
    # The screenshot's caption is held nowhere: that result is never cleared.
    assert _tool_message(last, "call_01") == originals["call_01"]
    # Non-tool messages reach the model as they were; the run's own history keeps every original.
    assert [m for m in last if m["role"] != "tool"] == [m for m in run.messages[: len(last)] if m["role"] != "tool"]
    assert all(not str(m["content"]).startswith('{"cleared"') for m in run.messages if m["role"] == "tool")
    # The reload came back through the gateway's load_artifacts with the page's text.
    reloaded = _tool_message(last, "call_08")
    assert f"[{artifact['artifact_id']}] text/plain, 48007 bytes" in reloaded["content"][0]["text"]
    assert "page 0\n" in reloaded["content"][0]["text"]
    assert ws.stats.restored == 1
    assert ws.stats.tokens_after < ws.stats.tokens_before
    assert ws.stats.over_budget  # the screenshot's caption alone nearly fills this small budget, and says so


def _tool_message(messages: list[Any], call_id: str) -> dict[str, Any]:
    return next(m for m in messages if m.get("role") == "tool" and m.get("tool_call_id") == call_id)
