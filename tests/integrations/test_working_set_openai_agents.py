"""The context working set in the OpenAI Agents SDK (``RunConfig.call_model_input_filter``), run by the real
``Runner`` against a scripted ``Model`` that records the exact input of every call (the run: ``working_set.py``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage, set_tracing_disabled
from agents.run_config import CallModelData, ModelInputData
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from refvault import Scope, Vault
from refvault.errors import InvalidArgument
from refvault.guard import LeakGuard
from refvault.integrations.context_hooks import parts_text
from refvault.integrations.openai_agents import guard_model_input, tools, working_set_filter
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

set_tracing_disabled(True)  # nothing may try to export traces over the network

SCOPE = Scope("acme", "ana", "ws-openai")
INSTRUCTIONS = "Read the incident log, page by page."


class Recorder(Model):
    """Fetches pages 1-3, reloads whatever the stub of page 1 names, answers; records each call's exact input."""

    def __init__(self) -> None:
        self.inputs: list[list[dict[str, Any]]] = []
        self.instructions: list[str | None] = []

    async def get_response(self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any) -> Any:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.inputs.append(json.loads(json.dumps(items, default=str)))
        self.instructions.append(system_instructions)
        turn = len(self.inputs) - 1
        if turn < len(PAGES):
            return _calls("fetch", {"n": PAGES[turn]}, f"call_{turn}")
        if turn == RELOAD_TURN:
            stub = cleared(output_of(self.inputs[turn], "call_0"))
            assert stub is not None, "page 1 was not cleared"
            return _calls(stub["restore"]["tool"], stub["restore"]["arguments"], f"call_{turn}")
        text = [ResponseOutputText(type="output_text", text="done", annotations=[])]
        message = ResponseOutputMessage(type="message", id="m", role="assistant", status="completed", content=text)
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the tests run without streaming")


def _calls(name: str, arguments: dict[str, Any], call_id: str) -> ModelResponse:
    call = ResponseFunctionToolCall(
        type="function_call", call_id=call_id, name=name, arguments=json.dumps(arguments), id=f"fc_{call_id}"
    )
    return ModelResponse(output=[call], usage=Usage(), response_id=None)


def output_of(items: list[dict[str, Any]], call_id: str) -> Any:
    [output] = [i["output"] for i in items if i.get("type") == "function_call_output" and i["call_id"] == call_id]
    return output


def text_of(output: Any) -> str:
    return parts_text(output) if isinstance(output, list) else str(output)


def run_agent(vault: Vault, config_filter: Any) -> tuple[Recorder, list[dict[str, Any]]]:
    model = Recorder()
    agent = Agent(name="analyst", instructions=INSTRUCTIONS, model=model, tools=tools(pages_box(vault), scope=SCOPE))
    config = RunConfig(call_model_input_filter=config_filter, tracing_disabled=True)
    result = asyncio.run(Runner.run(agent, "What happened?", run_config=config))
    assert result.final_output == "done"
    return model, json.loads(json.dumps(result.to_input_list(), default=str))


def test_older_stored_outputs_reach_the_model_as_stubs_and_the_run_keeps_them(vault: Vault) -> None:
    ws = working_set(vault, SCOPE)
    model, history = run_agent(vault, working_set_filter(ws))

    # Before the budget is exceeded, the model gets the run's items exactly.
    for turn in range(RELOAD_TURN):
        assert model.inputs[turn] == history[: len(model.inputs[turn])]
    # Then: the same items, in order, with page 1's output (only) the stub naming its artifact.
    sent = model.inputs[RELOAD_TURN]
    assert len(sent) == 7  # the prompt, then a call and its output per page
    artifact_id = assert_stub_of(output_of(sent, "call_0"), vault, SCOPE, "call_0")
    for index, item in enumerate(sent):
        if item.get("call_id") == "call_0" and item["type"] == "function_call_output":
            assert item == {**history[index], "output": item["output"]}
        else:
            assert item == history[index]
    assert [output_of(sent, f"call_{n}") for n in (1, 2)] == [page(2), page(3)]
    assert model.instructions == [INSTRUCTIONS] * len(model.inputs)
    # The run's own history keeps every full output; the reload brings page 1 back.
    assert [output_of(history, f"call_{n}") for n in (0, 1, 2)] == [page(n) for n in PAGES]
    assert reloaded_page_one(text_of(output_of(model.inputs[RELOAD_TURN + 1], f"call_{RELOAD_TURN}")))
    assert artifact_id in json.dumps(output_of(history, f"call_{RELOAD_TURN}"))
    assert ws.stats.restored == 1
    # What the working set read: the history as chat messages, every request, nothing dropped.
    assert parsed(ws.seen[RELOAD_TURN]) == rendered(INSTRUCTIONS, "What happened?", len(PAGES))
    assert len(ws.seen) == RELOAD_TURN + 2


def test_the_guard_checks_what_the_working_set_sends(vault: Vault) -> None:
    checked: list[list[Any]] = []

    class Recording(LeakGuard):
        def check(self, request: Any) -> Any:
            checked.append(json.loads(json.dumps(request["input"], default=str)))
            return super().check(request)

    ws = working_set(vault, SCOPE)
    model, _ = run_agent(vault, guard_model_input(Recording(), inner=working_set_filter(ws)))
    assert checked == model.inputs  # the guard saw exactly the trimmed inputs
    assert cleared(output_of(checked[RELOAD_TURN], "call_0")) is not None


def test_an_inner_filter_runs_first_and_a_non_working_set_is_refused(vault: Vault) -> None:
    seen: list[int] = []

    def inner(data: CallModelData[Any]) -> ModelInputData:
        seen.append(len(data.model_data.input))
        return data.model_data

    model, _ = run_agent(vault, working_set_filter(working_set(vault, SCOPE), inner=inner))
    assert seen == [len(items) for items in model.inputs]
    with pytest.raises(InvalidArgument, match="WorkingSet"):
        working_set_filter(object())  # type: ignore[arg-type]
