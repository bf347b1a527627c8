"""The README's framework snippets are all found and each runs as written (with a scripted model)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import secrets
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from agents import set_tracing_disabled
from google.genai import types as genai
from langchain_core.messages import HumanMessage, ToolMessage
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.messages import ModelResponse as PydanticResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from refvault import Scope
from refvault.integrations import adk as rv_adk
from tests.integrations.scripted import (
    MAIN,
    AdkScripted,
    LangChainScripted,
    OpenAIScripted,
    Run,
    _env,
    _pydantic_results,
    _text,
    once,
)

set_tracing_disabled(True)  # nothing may try to export traces over the network


ROOT = Path(__file__).resolve().parents[2]


# -- the README's snippets, run as written (a scripted model in place of a real one) --------------------------------


def readme_snippets() -> dict[str, str]:
    """The code blocks of the README's framework section, by heading ("shared" for the one before the first)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## In the agent frameworks you already use")
    section = text[start : text.index("\n## ", start + 10)]
    snippets: dict[str, str] = {}
    heading = "shared"
    for match in re.finditer(r"^### ([^\n]+)$|^```(\w*)\n(.*?)^```", section, re.DOTALL | re.MULTILINE):
        if match.group(1):
            heading = match.group(1).split(" — ")[0].strip()
        else:
            snippets[heading] = match.group(3)
    return snippets


def substituted(code: str, *pairs: tuple[str, str]) -> str:
    """``code`` with each ``old`` replaced by ``new``: each must be there (a changed README fails loudly)."""
    for old, new in pairs:
        assert old in code, f"the README snippet no longer contains {old!r}"
        code = code.replace(old, new)
    return code


@pytest.fixture
def readme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The shared snippet run in a fresh directory (its ``Vault.open()`` opens ./.refvault there)."""
    monkeypatch.chdir(tmp_path)
    for name in [key for key in os.environ if key.startswith("REFVAULT_")]:
        monkeypatch.delenv(name)
    namespace: dict[str, Any] = {"__name__": "readme"}
    exec(compile(readme_snippets()["shared"], "README.md", "exec"), namespace)
    vault, scope = namespace["vault"], namespace["scope"]
    namespace["doc"] = vault.put(scope, b"the five words of it", media_type="text/plain").artifact_id
    yield namespace
    vault.close()


def test_readme_snippets_are_all_found() -> None:
    assert set(readme_snippets()) == {
        "shared",
        "OpenAI Agents SDK",
        "LangChain",
        "Pydantic AI",
        "Google ADK",
        "MCP hosts",
    }


def test_readme_openai_agents_snippet_runs(readme: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from agents.models import _openai_shared

    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-used")  # guarded_client makes an AsyncOpenAI client
    run = Run()
    readme["MODEL"] = OpenAIScripted(once(("count_words", {"doc": readme["doc"]})), run)
    code = substituted(
        readme_snippets()["OpenAI Agents SDK"],
        ('Agent(name="analyst",', 'Agent(name="analyst", model=MODEL,'),
        ("result = await Runner.run(", "RESULT = await Runner.run("),
    )
    previous = _openai_shared.get_default_openai_client()
    try:
        exec(
            compile("async def snippet():\n    global RESULT\n" + textwrap.indent(code, "    "), "README.md", "exec"),
            readme,
        )
        asyncio.run(readme["snippet"]())
    finally:
        _openai_shared.set_default_openai_client(previous)
    assert readme["RESULT"].final_output == "done"
    assert run.results == ["5"]


def test_readme_langchain_snippet_runs(readme: dict[str, Any]) -> None:
    run = Run()
    readme["chat_model"] = LangChainScripted(plan=once(("count_words", {"doc": readme["doc"]})), run=run)
    readme["messages"] = [HumanMessage(f"How many words are in {readme['doc']}?")]
    exec(compile(readme_snippets()["LangChain"], "README.md", "exec"), readme)
    *_, reply, answer = readme["messages"]
    assert reply.tool_calls
    assert isinstance(answer, ToolMessage)
    assert answer.content == "5"


def test_readme_pydantic_ai_snippet_runs(readme: dict[str, Any]) -> None:
    run = Run()
    png = b"\x89PNG\r\n\x1a\n" + secrets.token_bytes(64)

    def screenshot() -> BinaryContent:
        """Take a screenshot."""
        return BinaryContent(data=png, media_type="image/png")

    plan = once(("count_words", {"doc": readme["doc"]}), ("screenshot", {}))

    def respond(messages: list[ModelMessage], info: AgentInfo) -> PydanticResponse:
        run.seen.append(ModelMessagesTypeAdapter.dump_json(messages).decode())
        run.results = _pydantic_results(messages)
        calls = plan(run.results)
        if not calls:
            return PydanticResponse(parts=[TextPart("done")])
        return PydanticResponse(parts=[ToolCallPart(name, args) for name, args in calls])

    readme.update(screenshot=screenshot, MODEL=FunctionModel(respond))
    code = substituted(
        readme_snippets()["Pydantic AI"], ('GuardedModel("openai:gpt-4o", box.guard)', "GuardedModel(MODEL, box.guard)")
    )
    exec(compile(code, "README.md", "exec"), readme)
    assert run.results[0] == "5"
    assert "refvault://art_" in run.results[1]
    assert not run.saw(base64.b64encode(png).decode()[:40])


def test_readme_adk_snippet_runs(readme: dict[str, Any]) -> None:
    run = Run()
    code = substituted(readme_snippets()["Google ADK"], ('model="gemini-2.5-flash"', "model=MODEL"))

    async def scenario() -> None:
        vault = readme["vault"]
        doc = vault.put(rv_adk.scope_for("app", "u1", "s1"), b"one two three", media_type="text/plain").artifact_id
        readme["MODEL"] = AdkScripted(plan=once(("count_words", {"doc": doc})), run=run)
        exec(compile(code, "README.md", "exec"), readme)
        runner = readme["runner"]
        await runner.session_service.create_session(app_name="app", user_id="u1", session_id="s1")
        message = genai.Content(role="user", parts=[genai.Part(text=f"count {doc}")])
        async for _ in runner.run_async(user_id="u1", session_id="s1", new_message=message):
            pass

    asyncio.run(scenario())
    assert run.results == ["3"]


def test_readme_mcp_command_runs(readme: dict[str, Any], tmp_path: Path) -> None:
    import shlex

    (line,) = [ln for ln in readme_snippets()["MCP hosts"].splitlines() if ln.strip()]
    words = shlex.split(line, comments=True)
    assert words[:3] == ["refvault", "mcp", "serve"]
    readme["vault"].put(Scope("acme", "ana", "s1"), b"served notes\n", media_type="text/plain")
    params = StdioServerParameters(command=sys.executable, args=["-c", MAIN, *words[1:]], env=_env(), cwd=str(tmp_path))

    async def session() -> str:
        async with Client(params, cache=None) as client:
            return _text(await client.call_tool("list_artifacts", {}))

    listed = json.loads(anyio.run(session))
    assert listed["total"] == 2  # the shared snippet's doc and this one, in scope acme/ana/s1
