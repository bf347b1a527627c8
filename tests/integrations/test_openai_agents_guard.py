"""OpenAI Agents SDK: an agent used as a tool and streamed runs are guarded by the outer run.

Every test drives a real framework (OpenAI Agents SDK, LangChain, Pydantic AI, Google ADK, the MCP SDK) with a
scripted model: no network, no API key.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, set_tracing_disabled
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
)

from refvault import Vault
from refvault.errors import ContextLeak
from refvault.integrations import openai_agents as rv_openai
from tests.integrations.scripted import (
    SCOPE,
    OpenAIScripted,
    Run,
    forms,
    leak_in,
    leaky_box,
    once,
    rich_secret,
    sealed,
)

set_tracing_disabled(True)  # nothing may try to export traces over the network


# -- OpenAI Agents SDK: nested agents ---------------------------------------------------------------------------------


@pytest.mark.parametrize("raising", [False, True])
def test_openai_agents_an_agent_used_as_a_tool_is_guarded_by_the_outer_run(vault: Vault, raising: bool) -> None:
    """``inner.as_tool()`` runs a nested Runner that inherits the outer RunConfig, so its model calls are checked.

    The SDK's default ``failure_error_function`` turns the nested ContextLeak into a generic tool error for the
    outer model (the run goes on, nothing leaked); ``failure_error_function=None`` lets it out of ``Runner.run``."""
    secret = rich_secret()
    doc = sealed(vault, SCOPE, secret)
    box = leaky_box(vault)
    outer_run, inner_run = Run(), Run()
    inner = Agent(
        name="reader",
        model=OpenAIScripted(once(("echo", {"doc": doc})), inner_run),
        tools=rv_openai.tools(box, scope=SCOPE, names=["echo"]),
    )
    options: dict[str, Any] = {"failure_error_function": None} if raising else {}
    outer = Agent(
        name="boss",
        model=OpenAIScripted(once(("reader", {"input": f"read {doc}"})), outer_run),
        tools=[inner.as_tool(tool_name="reader", tool_description="Reads documents.", **options)],
    )
    config = RunConfig(call_model_input_filter=rv_openai.guard_model_input(box.guard), tracing_disabled=True)
    try:
        result = asyncio.run(Runner.run(outer, "go", run_config=config))
    except Exception as exc:
        assert raising
        assert leak_in(exc) is not None, exc
    else:
        assert not raising
        assert result.final_output == "done"
        assert outer_run.results == ["An error occurred while running the tool. Please try again."]

    assert len(inner_run.seen) == 1  # the inner model's second call (with the tool result) was stopped
    for run in (outer_run, inner_run):
        for form in forms(secret):
            assert not run.saw(form)


class OpenAIStreamed(OpenAIScripted):
    """The same scripted model, answering ``Runner.run_streamed`` with one completed-response event."""

    async def stream_response(self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any) -> Any:
        answer = await self.get_response(system_instructions, input)
        response = Response(
            id="resp_1",
            created_at=0,
            model="scripted",
            object="response",
            output=answer.output,
            parallel_tool_calls=False,
            tool_choice="auto",
            tools=[],
        )
        yield ResponseCompletedEvent(type="response.completed", response=response, sequence_number=0)


def test_openai_agents_streamed_runs_are_guarded(vault: Vault) -> None:
    """``Runner.run_streamed`` applies the same ``call_model_input_filter``: the leak is raised out of the stream."""
    secret = rich_secret()
    doc = sealed(vault, SCOPE, secret)
    box = leaky_box(vault)
    run = Run()
    agent = Agent(
        name="a", model=OpenAIStreamed(once(("echo", {"doc": doc})), run), tools=rv_openai.tools(box, scope=SCOPE)
    )
    config = RunConfig(call_model_input_filter=rv_openai.guard_model_input(box.guard), tracing_disabled=True)

    async def consume() -> None:
        async for _ in Runner.run_streamed(agent, "go", run_config=config).stream_events():
            pass

    with pytest.raises(ContextLeak):
        asyncio.run(consume())
    assert len(run.seen) == 1
    for form in forms(secret):
        assert not run.saw(form)
