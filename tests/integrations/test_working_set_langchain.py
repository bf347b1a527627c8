"""The context working set in LangChain (an agent middleware), run by ``langchain``'s real ``create_agent`` on a
scripted chat model that records the exact messages of every call, sync and async (the run: ``working_set.py``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages.tool import tool_call
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from refvault import Scope, Vault
from refvault.errors import InvalidArgument
from refvault.integrations.langchain import LeakGuardCallback, WorkingSetMiddleware, tools
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

ROOT = Path(__file__).resolve().parents[2]
SCOPE = Scope("acme", "ana", "ws-langchain")
SYSTEM = "Read the incident log, page by page."


class Recorder(BaseChatModel):
    """Fetches pages 1-3, reloads whatever the stub of page 1 names, answers; records each call's messages."""

    received: list[list[dict[str, Any]]] = Field(default_factory=list)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        self.received.append([m.model_dump(mode="json") for m in messages])
        turn = len(self.received) - 1
        if turn < len(PAGES):
            reply = AIMessage("", tool_calls=[tool_call(name="fetch", args={"n": PAGES[turn]}, id=f"call_{turn}")])
        elif turn == RELOAD_TURN:
            stub = cleared(tool_content(self.received[turn], "call_0"))
            assert stub is not None, "page 1 was not cleared"
            restore = stub["restore"]
            reply = AIMessage("", tool_calls=[tool_call(name=restore["tool"], args=restore["arguments"], id="call_3")])
        else:
            reply = AIMessage("done")
        return ChatResult(generations=[ChatGeneration(message=reply)])

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools], **kwargs)


def tool_content(messages: list[dict[str, Any]], call_id: str) -> Any:
    [content] = [m["content"] for m in messages if m["type"] == "tool" and m["tool_call_id"] == call_id]
    return content


def run_agent(vault: Vault, ws: Any, mode: str, **config: Any) -> tuple[Recorder, list[dict[str, Any]]]:
    model = Recorder()
    agent = create_agent(
        model, tools=tools(pages_box(vault), scope=SCOPE), system_prompt=SYSTEM, middleware=[WorkingSetMiddleware(ws)]
    )
    state = {"messages": [HumanMessage("What happened?")]}
    result = agent.invoke(state, config) if mode == "sync" else asyncio.run(agent.ainvoke(state, config))
    assert result["messages"][-1].content == "done"
    return model, [m.model_dump(mode="json") for m in result["messages"]]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_older_stored_results_reach_the_model_as_stubs_and_the_state_keeps_them(vault: Vault, mode: str) -> None:
    ws = working_set(vault, SCOPE)
    model, state = run_agent(vault, ws, mode)
    system = {"role": "system", "content": SYSTEM}

    for turn in range(RELOAD_TURN):  # within budget: the system message, then exactly the state's messages
        request = model.received[turn]
        assert {"role": request[0]["type"], "content": request[0]["content"]} == system
        assert request[1:] == state[: len(request) - 1]
    sent = model.received[RELOAD_TURN]
    assert len(sent) == 8  # the system message, the prompt, then a call and its result per page
    stub = tool_content(sent, "call_0")
    artifact_id = assert_stub_of(stub, vault, SCOPE, "call_0")
    for message, kept in zip(sent[1:], state, strict=False):
        if message["type"] == "tool" and message["tool_call_id"] == "call_0":
            assert message == {**kept, "content": stub}  # the one change (the artifact rides along, never sent)
        else:
            assert message == kept
    assert [tool_content(sent, f"call_{n}") for n in (1, 2)] == [page(2), page(3)]
    # The agent's state keeps every full result; the reload brings page 1 back.
    assert [tool_content(state, f"call_{n}") for n in (0, 1, 2)] == [page(n) for n in PAGES]
    reload = tool_content(model.received[RELOAD_TURN + 1], "call_3")
    text = reload if isinstance(reload, str) else "\n".join(b["text"] for b in reload if b["type"] == "text")
    assert reloaded_page_one(text)
    assert artifact_id in json.dumps(reload)
    assert ws.stats.restored == 1
    # What the working set read: the history as chat messages, every request, nothing dropped.
    assert parsed(ws.seen[RELOAD_TURN]) == rendered(SYSTEM, "What happened?", len(PAGES))
    assert len(ws.seen) == RELOAD_TURN + 2


def test_the_guard_callback_sees_what_the_working_set_sends(vault: Vault) -> None:
    ws = working_set(vault, SCOPE)
    checked: list[list[Any]] = []

    class Recording(LeakGuardCallback):
        def _check(self, request: dict[str, Any]) -> None:
            checked.extend(request["messages"])
            super()._check(request)

    model, _ = run_agent(vault, ws, "sync", callbacks=[Recording(pages_box(vault))])
    sent_results = [[m["content"] for m in batch if m["type"] == "tool"] for batch in model.received]
    checked_results = [[m["content"] for m in batch if m["role"] == "tool"] for batch in checked]
    assert checked_results == sent_results  # the guard saw the stubs, not the cleared results
    assert cleared(checked_results[RELOAD_TURN][0]) is not None


def test_the_middleware_takes_only_a_working_set() -> None:
    with pytest.raises(InvalidArgument, match="WorkingSet"):
        WorkingSetMiddleware(object())  # type: ignore[arg-type]


def test_the_middleware_is_imported_only_when_used() -> None:
    code = (
        "import sys; import refvault.integrations.langchain as lc; "
        "assert 'langchain.agents' not in sys.modules, 'imported early'; "
        "lc.WorkingSetMiddleware; assert 'langchain.agents' in sys.modules; "
        "assert [m for m in sys.modules if m.startswith('langchain.')], 'not imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_tool_message_that_is_not_stored_is_never_changed(vault: Vault) -> None:
    """A tool result the vault does not hold reaches the model as it is, however far over budget."""
    ws = working_set(vault, SCOPE)
    middleware = WorkingSetMiddleware(ws)
    model = Recorder()
    big = "x " * 5_000
    messages: list[Any] = [
        HumanMessage("go"),
        AIMessage("", tool_calls=[tool_call(name="fetch", args={"n": 1}, id="unstored")]),
        ToolMessage(big, tool_call_id="unstored"),
        AIMessage("noted"),
    ]
    seen: list[list[BaseMessage]] = []

    def handler(request: ModelRequest[Any]) -> ModelResponse[Any]:
        seen.append(request.messages)
        return ModelResponse(result=[AIMessage("ok")])

    middleware.wrap_model_call(ModelRequest(model=model, messages=messages), handler)
    assert seen == [messages]  # the very list, not a copy
    assert seen[0][2].content == big
