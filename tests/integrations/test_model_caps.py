"""Every adapter passes ``model_context_tokens`` through (issue 22): the calls its tools make get the caps of
that model (offload threshold, preview size, read-tool defaults and ceilings), with the real frameworks
(OpenAI Agents SDK, LangChain, Pydantic AI, Google ADK, the MCP SDK) and scripted models: no network."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from agents import Agent, RunConfig, Runner, set_tracing_disabled
from click.testing import CliRunner
from langchain_core.messages import ToolMessage
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import TextContent
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import refvault.cli.mcp as cli_mcp
from refvault import Toolbox, Vault
from refvault.errors import InvalidArgument
from refvault.integrations import adk as rv_adk
from refvault.integrations import langchain as rv_langchain
from refvault.integrations import openai_agents as rv_openai
from refvault.integrations import pydantic_ai as rv_pydantic
from refvault.integrations.mcp.gateway import ArtifactTools, Gateway, GatewayOptions
from refvault.limits import DEFAULT_CAPS, caps_for_model
from tests.integrations.scripted import SCOPE, OpenAIScripted, Run, _pydantic_results, drive_adk, once

set_tracing_disabled(True)

SMALL, LARGE = 8_192, 1_048_576
MEDIUM_TEXT = "".join(f"row {i:05d} " + "v" * 40 + "\n" for i in range(200))  # ~2,500 tokens: over 8k's 256


def medium_box(vault: Vault) -> Toolbox:
    """A Toolbox with no model size of its own: what the adapter passes decides."""
    box = Toolbox(vault)

    @box.tool
    def medium() -> str:
        """Return a medium-sized text."""
        return MEDIUM_TEXT

    return box


def text_artifact(vault: Vault) -> str:
    body = "".join(f"line {i:06d} " + "t" * 50 + "\n" for i in range(3_000))
    return vault.put(SCOPE, body.encode(), media_type="text/plain").artifact_id


def offloaded(result: str) -> bool:
    try:
        parsed = json.loads(result)
    except ValueError:
        return False
    return isinstance(parsed, dict) and set(parsed) == {"offloaded"}


def read_default(schema_properties: dict[str, Any]) -> Any:
    return schema_properties["max_chars"].get("default")


# -- the framework adapters ---------------------------------------------------------------------------------


def run_openai_agents(box: Toolbox, plan: Any, size: int | None) -> Run:
    run = Run()
    tools = rv_openai.tools(box, scope=SCOPE, model_context_tokens=size)
    agent = Agent(name="analyst", model=OpenAIScripted(plan, run), tools=tools)
    asyncio.run(Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True)))
    return run


def run_langchain(box: Toolbox, plan: Any, size: int | None) -> Run:
    run = Run()
    by_name = {tool.name: tool for tool in rv_langchain.tools(box, scope=SCOPE, model_context_tokens=size)}
    for i, (name, args) in enumerate(plan([])):
        message = by_name[name].invoke({"name": name, "args": args, "id": f"c{i}", "type": "tool_call"})
        assert isinstance(message, ToolMessage)
        run.results.append(str(message.content))
    return run


def run_pydantic_ai(box: Toolbox, plan: Any, size: int | None) -> Run:
    run = Run()

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        run.results = _pydantic_results(messages)
        calls = plan(run.results)
        if not calls:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(
            parts=[ToolCallPart(name, args, tool_call_id=f"c{i}") for i, (name, args) in enumerate(calls)]
        )

    toolset = rv_pydantic.toolset(box, scope=SCOPE, model_context_tokens=size)
    PydanticAgent(FunctionModel(respond), toolsets=[toolset]).run_sync("go")
    return run


def run_adk(box: Toolbox, plan: Any, size: int | None) -> Run:
    tools = rv_adk.tools(box, model_context_tokens=size)
    return asyncio.run(drive_adk(box, SCOPE, plan, guard=box.guard, names=[], extra_tools=tools))


RUNNERS = {
    "openai_agents": run_openai_agents,
    "langchain": run_langchain,
    "pydantic_ai": run_pydantic_ai,
    "adk": run_adk,
}


@pytest.mark.parametrize("framework", list(RUNNERS))
def test_an_adapter_sized_to_an_8k_model_offloads_what_a_1m_one_keeps_inline(vault: Vault, framework: str) -> None:
    box = medium_box(vault)
    plan = once(("medium", {}))
    large = RUNNERS[framework](box, plan, LARGE)
    assert large.results
    assert large.results[0] == MEDIUM_TEXT
    assert vault.list(SCOPE) == []
    small = RUNNERS[framework](box, once(("medium", {})), SMALL)
    assert offloaded(small.results[0]), small.results[0][:200]
    (stored,) = vault.list(SCOPE)
    assert vault.read_bytes(SCOPE, stored.artifact_id) == MEDIUM_TEXT.encode()


@pytest.mark.parametrize("framework", list(RUNNERS))
def test_an_adapter_sized_to_an_8k_model_caps_its_reads(vault: Vault, framework: str) -> None:
    artifact_id = text_artifact(vault)
    box = medium_box(vault)
    run = RUNNERS[framework](box, once(("read_artifact", {"artifact_id": artifact_id, "max_chars": 100_000})), SMALL)
    answer = json.loads(run.results[0])
    if framework == "adk":  # ADK's function response: the observation under "result", beside "data_only"
        answer = json.loads(answer["result"])
    assert len(answer["text"]) <= caps_for_model(SMALL).max_window_chars
    assert answer["capped"]["used"] == caps_for_model(SMALL).max_window_chars


def test_each_adapters_schemas_show_the_models_read_defaults(vault: Vault) -> None:
    box = medium_box(vault)
    small = caps_for_model(SMALL).window_chars
    (openai_tool,) = rv_openai.tools(box, scope=SCOPE, names=["read_artifact"], model_context_tokens=SMALL)
    assert read_default(openai_tool.params_json_schema["properties"]) == small
    (lc_tool,) = rv_langchain.tools(box, scope=SCOPE, names=["read_artifact"], model_context_tokens=SMALL)
    assert isinstance(lc_tool.args_schema, dict)
    assert read_default(lc_tool.args_schema["properties"]) == small
    toolset = rv_pydantic.toolset(box, scope=SCOPE, names=["read_artifact"], model_context_tokens=SMALL)
    (definition,) = toolset._definitions
    assert read_default(definition.parameters_json_schema["properties"]) == small
    assert toolset.model_context_tokens == SMALL
    (adk_tool,) = rv_adk.tools(box, names=["read_artifact"], model_context_tokens=SMALL)
    assert isinstance(adk_tool, rv_adk.RefvaultTool)
    assert adk_tool.model_context_tokens == SMALL
    # (Gemini declarations carry no defaults: ADK's calls are sized, as the tests above show)
    # the Toolbox's own schemas are untouched: another adapter over it still gets the fixed defaults
    (plain,) = rv_langchain.tools(box, scope=SCOPE, names=["read_artifact"])
    assert isinstance(plain.args_schema, dict)
    assert read_default(plain.args_schema["properties"]) == DEFAULT_CAPS.window_chars


@pytest.mark.parametrize("bad", [0, 100, "8k", 2.5])
def test_every_adapter_refuses_a_bad_model_size_when_its_tools_are_made(vault: Vault, bad: Any) -> None:
    box = medium_box(vault)
    makers = [
        lambda: rv_openai.tools(box, scope=SCOPE, model_context_tokens=bad),
        lambda: rv_langchain.tools(box, scope=SCOPE, model_context_tokens=bad),
        lambda: rv_pydantic.toolset(box, scope=SCOPE, model_context_tokens=bad),
        lambda: rv_adk.tools(box, model_context_tokens=bad),
        lambda: ArtifactTools(vault, model_context_tokens=bad),
        lambda: GatewayOptions(model_context_tokens=bad),
    ]
    for make in makers:
        with pytest.raises(InvalidArgument, match="model_context_tokens"):
            make()


# -- MCP: the gateway and refvault's own surface ------------------------------------------------------------


def upstream_server() -> MCPServer:
    server = MCPServer("sized")

    @server.tool()
    def medium() -> str:
        """A medium-sized text."""
        return MEDIUM_TEXT

    return server


@contextlib.asynccontextmanager
async def gateway_client(vault: Vault, **options: Any) -> AsyncIterator[Client]:
    async with Client(upstream_server(), cache=None) as upstream_client:
        gateway = Gateway(vault, SCOPE, upstream_client, server_name="sized", options=GatewayOptions(**options))
        assert gateway.toolbox.caps == gateway.options.caps
        async with Client(gateway.server(), cache=None) as client:
            yield client


def first_text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def test_the_gateway_sized_to_an_8k_model_offloads_and_caps_its_reads(vault: Vault) -> None:
    artifact_id = text_artifact(vault)

    async def main() -> tuple[str, str, str, str, dict[str, Any]]:
        async with gateway_client(vault, model_context_tokens=LARGE) as client:
            large = first_text(await client.call_tool("medium", {}))
        async with gateway_client(vault, model_context_tokens=SMALL) as client:
            small = first_text(await client.call_tool("medium", {}))
            read = first_text(
                await client.call_tool("read_artifact", {"artifact_id": artifact_id, "max_chars": 90_000})
            )
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        async with gateway_client(vault) as client:
            plain = first_text(await client.call_tool("medium", {}))
        return large, small, plain, read, tools["read_artifact"].input_schema

    large, small, plain, read, schema = anyio.run(main)
    assert large == MEDIUM_TEXT == plain  # a 1M model, and no model size: inline
    assert offloaded(small)
    capped = json.loads(read)
    assert len(capped["text"]) <= caps_for_model(SMALL).max_window_chars
    assert capped["capped"]["asked"] == 90_000
    assert read_default(schema["properties"]) == caps_for_model(SMALL).window_chars


def test_gateway_options_keep_explicit_values_over_the_scaled_ones() -> None:
    options = GatewayOptions(model_context_tokens=SMALL, offload_tokens=9_000)
    assert options.caps.offload_tokens == 9_000
    assert options.caps.preview_chars == caps_for_model(SMALL).preview_chars
    assert GatewayOptions().caps == DEFAULT_CAPS
    assert GatewayOptions(preview_chars=1_000).caps.preview_chars == 1_000


def test_refvaults_own_mcp_surface_is_sized_to_its_model(vault: Vault) -> None:
    tools = ArtifactTools(vault, model_context_tokens=SMALL)
    assert tools.toolbox.caps == caps_for_model(SMALL)
    assert tools.toolbox_for("another-client").caps == caps_for_model(SMALL)  # every client's Toolbox
    assert read_default(tools.input_schema("read_artifact")["properties"]) == caps_for_model(SMALL).window_chars  # type: ignore[index]
    assert ArtifactTools(vault).toolbox.caps == DEFAULT_CAPS


def test_the_cli_passes_the_model_size_to_the_proxy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(cli_mcp, "_run", lambda gateway, vault, scope, upstream, options, sock: seen.append(options))
    runner = CliRunner()
    store = ["--store", str(tmp_path / "store")]
    result = runner.invoke(cli_mcp.mcp, ["proxy", *store, "--model-context-tokens", "8192", "--", "server"])
    assert result.exit_code == 0, result.output
    (options,) = seen
    assert options.model_context_tokens == SMALL
    assert options.caps == caps_for_model(SMALL)
    bad = runner.invoke(cli_mcp.mcp, ["proxy", *store, "--model-context-tokens", "12", "--", "server"])
    assert bad.exit_code == 2
    assert "--model-context-tokens" in bad.output
    assert "--model-context-tokens" in runner.invoke(cli_mcp.mcp, ["serve", "--help"]).output
