"""Adapters across runs: concurrent runs in two scopes share one Toolbox, and a tool registered after an adapter was
built.

Every test drives a real framework (OpenAI Agents SDK, LangChain, Pydantic AI, Google ADK, the MCP SDK) with a
scripted model: no network, no API key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from agents import set_tracing_disabled

from refvault import Scope, Toolbox, Vault
from refvault.integrations import adk as rv_adk
from refvault.integrations import langchain as rv_langchain
from refvault.integrations import openai_agents as rv_openai
from refvault.integrations import pydantic_ai as rv_pydantic
from tests.integrations.scripted import (
    DRIVERS,
    FRAMEWORKS,
    SCOPE,
    Plan,
    Run,
    canary,
    drive,
    once,
    steps,
    words_box,
)

set_tracing_disabled(True)  # nothing may try to export traces over the network


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_concurrent_runs_in_two_scopes_share_one_toolbox(vault: Vault, framework: str) -> None:
    """Two runs gathered on one event loop, one Toolbox, two scopes: each resolves only its own scope's ids."""
    box = words_box(vault)
    a_scope, b_scope = SCOPE, Scope("acme", "bob", "s9")
    a_text, b_text = "alpha " * 3 + canary(), "beta " * 5 + canary()
    a_doc = vault.put(a_scope, a_text.encode(), media_type="text/plain").artifact_id
    b_doc = vault.put(b_scope, b_text.encode(), media_type="text/plain").artifact_id

    def plan(mine: str, theirs: str) -> Plan:
        return steps(
            [
                [("count_words", {"doc": mine}), ("shout", {"doc": theirs})],
                [("shout", {"doc": mine}), ("count_words", {"doc": theirs})],
            ]
        )

    async def both() -> list[Run]:
        driver = DRIVERS[framework]
        return list(
            await asyncio.gather(
                driver(box, a_scope, plan(a_doc, b_doc), guard=box.guard),
                driver(box, b_scope, plan(b_doc, a_doc), guard=box.guard),
            )
        )

    a_run, b_run = asyncio.run(both())
    for run, _mine, theirs, text, other in (
        (a_run, a_doc, b_doc, a_text, b_text),
        (b_run, b_doc, a_doc, b_text, a_text),
    ):
        assert run.error is None, run.error
        assert run.output == "done"
        count, refused, shouted, refused_again = run.results
        assert count.strip('"') == str(len(text.split())) or str(len(text.split())) in count
        assert text.upper().split()[0] in shouted  # ALPHA or BETA: the tool read its own scope's document
        for answer in (refused, refused_again):
            assert "error" in answer
            assert theirs in answer
        assert not run.saw(other.split()[-1])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_tool_registered_after_the_adapter_was_built(vault: Vault, framework: str) -> None:
    """Adapters take the Toolbox's tools when built: a later tool is in the next adapter, not in earlier ones."""
    box = Toolbox(vault)
    build: dict[str, Callable[[], list[str]]] = {
        "openai_agents": lambda: [t.name for t in rv_openai.tools(box, scope=SCOPE)],
        "langchain": lambda: [t.name for t in rv_langchain.tools(box, scope=SCOPE)],
        "pydantic_ai": lambda: [d.name for d in rv_pydantic.toolset(box, scope=SCOPE)._definitions],
        "adk": lambda: [t.name for t in rv_adk.tools(box)],
    }
    before = build[framework]()

    @box.tool
    def late(text: str) -> str:
        """Registered after the adapter was built."""
        return text[::-1]

    after = build[framework]()
    assert "late" not in before
    assert after == [*before, "late"]
    run = drive(framework, box, SCOPE, once(("late", {"text": "abc"})))
    assert run.error is None, run.error
    assert "cba" in run.results[0]
