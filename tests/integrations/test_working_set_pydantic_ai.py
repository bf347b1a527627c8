"""The context working set in Pydantic AI (a capability's ``before_model_request``), run by a real ``Agent`` on a
scripted ``FunctionModel`` that records the exact messages of every request (the run: ``working_set.py``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from refvault import Scope, Vault
from refvault.errors import InvalidArgument
from refvault.guard import LeakGuard
from refvault.integrations.pydantic_ai import GuardedModel, WorkingSetCapability, toolset, working_set_capability
from tests.integrations.working_set import (
    PAGES,
    RELOAD_TURN,
    assert_stub_of,
    cleared,
    page,
    pages_box,
    parsed,
    reloaded_page_one,
    rendered,
    working_set,
)

SCOPE = Scope("acme", "ana", "ws-pydantic")
INSTRUCTIONS = "Read the incident log, page by page."


def dumped(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    return json.loads(ModelMessagesTypeAdapter.dump_json(messages))


def tool_return(messages: list[dict[str, Any]], call_id: str) -> tuple[int, int, dict[str, Any]]:
    """The (message index, part index, part) of the tool return of ``call_id``."""
    [found] = [
        (m, p, part)
        for m, message in enumerate(messages)
        for p, part in enumerate(message["parts"])
        if part["part_kind"] == "tool-return" and part["tool_call_id"] == call_id
    ]
    return found


class Recorder:
    """Fetches pages 1-3, reloads whatever the stub of page 1 names, answers; records each request exactly."""

    def __init__(self) -> None:
        self.requests: list[list[dict[str, Any]]] = []
        self.instructions: list[str | None] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(dumped(messages))
        self.instructions.append(info.instructions)
        turn = len(self.requests) - 1
        if turn < len(PAGES):
            return ModelResponse(parts=[ToolCallPart("fetch", {"n": PAGES[turn]}, tool_call_id=f"call_{turn}")])
        if turn == RELOAD_TURN:
            stub = cleared(tool_return(self.requests[turn], "call_0")[2]["content"])
            assert stub is not None, "page 1 was not cleared"
            restore = stub["restore"]
            return ModelResponse(parts=[ToolCallPart(restore["tool"], restore["arguments"], tool_call_id="call_3")])
        return ModelResponse(parts=[TextPart("done")])


def run_agent(vault: Vault, capability: Any, *, guard: LeakGuard | None = None) -> tuple[Recorder, Any]:
    recorder = Recorder()
    model: Any = FunctionModel(recorder)
    if guard is not None:
        model = GuardedModel(model, guard)
    agent = Agent(
        model,
        instructions=INSTRUCTIONS,
        toolsets=[toolset(pages_box(vault), scope=SCOPE)],
        capabilities=[capability],
    )
    result = agent.run_sync("What happened?")
    assert result.output == "done"
    return recorder, result


def test_older_stored_returns_reach_the_model_as_stubs_and_the_run_keeps_them(vault: Vault) -> None:
    ws = working_set(vault, SCOPE)
    recorder, result = run_agent(vault, working_set_capability(ws))
    history = dumped(result.all_messages())

    for turn in range(RELOAD_TURN):  # within budget: exactly the run's messages
        assert recorder.requests[turn] == history[: len(recorder.requests[turn])]
    sent = recorder.requests[RELOAD_TURN]
    assert len(sent) == 7  # the prompt, then a call and its return per page
    m, p, part = tool_return(sent, "call_0")
    artifact_id = assert_stub_of(part["content"], vault, SCOPE, "call_0")
    expected = json.loads(json.dumps(history[: len(sent)]))
    expected[m]["parts"][p]["content"] = part["content"]  # the one change
    assert sent == expected
    assert [tool_return(sent, f"call_{n}")[2]["content"] for n in (1, 2)] == [page(2), page(3)]
    assert recorder.instructions == [INSTRUCTIONS] * len(recorder.requests)
    # The run's history keeps every full return; the reload brings page 1 back.
    assert [tool_return(history, f"call_{n}")[2]["content"] for n in (0, 1, 2)] == [page(n) for n in PAGES]
    reload = tool_return(recorder.requests[RELOAD_TURN + 1], "call_3")[2]["content"]
    assert reloaded_page_one(json.dumps(reload, ensure_ascii=False).replace("\\n", "\n"))
    assert artifact_id in json.dumps(reload)
    assert ws.stats.restored == 1
    # What the working set read: the history as chat messages, every request, nothing dropped.
    assert parsed(ws.seen[RELOAD_TURN]) == rendered(INSTRUCTIONS, "What happened?", len(PAGES))
    assert len(ws.seen) == RELOAD_TURN + 2


def test_streamed_runs_get_the_same_stubs(vault: Vault) -> None:
    recorder = Recorder()

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        [part] = recorder(messages, info).parts
        if isinstance(part, ToolCallPart):
            yield {0: DeltaToolCall(part.tool_name, part.args_as_json_str(), tool_call_id=part.tool_call_id)}
        else:
            assert isinstance(part, TextPart)
            yield part.content

    ws = working_set(vault, SCOPE)
    agent = Agent(
        FunctionModel(stream_function=stream),
        instructions=INSTRUCTIONS,
        toolsets=[toolset(pages_box(vault), scope=SCOPE)],
        capabilities=[working_set_capability(ws)],
    )

    async def main() -> list[dict[str, Any]]:
        async with agent.run_stream("What happened?") as result:
            assert await result.get_output() == "done"
        return dumped(result.all_messages())

    history = asyncio.run(main())
    sent = recorder.requests[RELOAD_TURN]
    assert_stub_of(tool_return(sent, "call_0")[2]["content"], vault, SCOPE, "call_0")
    assert [tool_return(sent, f"call_{n}")[2]["content"] for n in (1, 2)] == [page(2), page(3)]
    assert [tool_return(history, f"call_{n}")[2]["content"] for n in (0, 1, 2)] == [page(n) for n in PAGES]
    assert reloaded_page_one(json.dumps(tool_return(recorder.requests[RELOAD_TURN + 1], "call_3")[2]["content"]))
    assert len(ws.seen) == len(recorder.requests)  # once per request


def test_the_guard_checks_what_the_working_set_sends(vault: Vault) -> None:
    checked: list[list[dict[str, Any]]] = []

    class Recording(LeakGuard):
        def check(self, request: Any) -> Any:
            checked.append(request["messages"])
            return super().check(request)

    recorder, _ = run_agent(vault, working_set_capability(working_set(vault, SCOPE)), guard=Recording())
    assert checked == recorder.requests  # GuardedModel saw exactly the trimmed requests
    assert cleared(tool_return(checked[RELOAD_TURN], "call_0")[2]["content"]) is not None


def test_the_capability_takes_only_a_working_set(vault: Vault) -> None:
    ws = working_set(vault, SCOPE)
    assert isinstance(working_set_capability(ws), WorkingSetCapability)
    assert WorkingSetCapability.get_serialization_name() is None
    with pytest.raises(InvalidArgument, match="WorkingSet"):
        working_set_capability("not a working set")  # type: ignore[arg-type]
