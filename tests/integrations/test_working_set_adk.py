"""The context working set in Google ADK (a ``before_model_callback``), run by a real ``Runner`` on a scripted
``BaseLlm`` that records the exact contents of every request (the run: ``working_set.py``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from pydantic import Field

from refvault import Vault
from refvault.errors import InvalidArgument
from refvault.guard import LeakGuard
from refvault.integrations.adk import RefvaultArtifactService, guard_callback, scope_for, tools, working_set_callback
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

APP, USER, SESSION = "app", "ana", "ws-adk"
SCOPE = scope_for(APP, USER, SESSION)
INSTRUCTION = "Read the incident log, page by page."


class Recorder(BaseLlm):
    """Fetches pages 1-3, reloads whatever the stub of page 1 names, answers; records each request's contents."""

    model: str = "scripted"
    with_ids: bool = True  # False: the model gives no call ids (as Gemini), so ADK makes its own
    contents: list[list[dict[str, Any]]] = Field(default_factory=list)
    instructions: list[Any] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.contents.append([c.model_dump(mode="json", exclude_none=True) for c in llm_request.contents])
        self.instructions.append(llm_request.config.system_instruction if llm_request.config else None)
        turn = len(self.contents) - 1
        call_id = f"call_{turn}" if self.with_ids else None
        if turn < len(PAGES):
            part = types.Part(function_call=types.FunctionCall(name="fetch", args={"n": PAGES[turn]}, id=call_id))
        elif turn == RELOAD_TURN:
            stub = cleared(results(self.contents[turn])[0]["result"])
            assert stub is not None, "page 1 was not cleared"
            restore = stub["restore"]
            call = types.FunctionCall(name=restore["tool"], args=restore["arguments"], id=call_id)
            part = types.Part(function_call=call)
        else:
            part = types.Part(text="done")
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def result_of(contents: list[dict[str, Any]], call_id: str) -> dict[str, Any]:
    [response] = [
        part["function_response"]["response"]
        for content in contents
        for part in content.get("parts", [])
        if part.get("function_response", {}).get("id") == call_id
    ]
    return dict(response)


def results(contents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every function response's ``response``, in order."""
    return [
        dict(part["function_response"]["response"])
        for content in contents
        for part in content.get("parts", [])
        if "function_response" in part
    ]


def response_ids(contents: list[dict[str, Any]]) -> list[str | None]:
    return [
        part["function_response"].get("id")
        for content in contents
        for part in content.get("parts", [])
        if "function_response" in part
    ]


def run_agent(vault: Vault, callback: Any, *, with_ids: bool = True) -> tuple[Recorder, list[dict[str, Any]]]:
    model = Recorder(with_ids=with_ids)
    agent = LlmAgent(
        name="analyst",
        model=model,
        instruction=INSTRUCTION,
        tools=tools(pages_box(vault)),
        before_model_callback=callback,
    )
    sessions = InMemorySessionService()

    async def main() -> list[dict[str, Any]]:
        await sessions.create_session(app_name=APP, user_id=USER, session_id=SESSION)
        runner = Runner(
            agent=agent, app_name=APP, session_service=sessions, artifact_service=RefvaultArtifactService(vault)
        )
        message = types.Content(role="user", parts=[types.Part(text="What happened?")])
        async for _ in runner.run_async(user_id=USER, session_id=SESSION, new_message=message):
            pass
        session = await sessions.get_session(app_name=APP, user_id=USER, session_id=SESSION)
        assert session is not None
        return [e.content.model_dump(mode="json", exclude_none=True) for e in session.events if e.content]

    history = asyncio.run(main())
    assert history[-1]["parts"] == [{"text": "done"}]
    return model, history


def test_older_stored_responses_reach_the_model_as_stubs_and_the_session_keeps_them(vault: Vault) -> None:
    ws = working_set(vault, SCOPE)
    model, history = run_agent(vault, working_set_callback(ws))

    for turn in range(RELOAD_TURN):  # within budget: exactly the session's contents
        assert model.contents[turn] == history[: len(model.contents[turn])]
    sent = model.contents[RELOAD_TURN]
    assert len(sent) == 7  # the prompt, then a call and its response per page
    stub = result_of(sent, "call_0")
    assert list(stub) == ["result"]
    artifact_id = assert_stub_of(stub["result"], vault, SCOPE, "call_0")
    for content, kept in zip(sent, history, strict=False):
        response = (content["parts"][0].get("function_response") or {}) if content["parts"] else {}
        if response.get("id") == "call_0":
            expected_part = {"function_response": {**kept["parts"][0]["function_response"], "response": stub}}
            assert content == {**kept, "parts": [expected_part]}  # the one change
        else:
            assert content == kept
    assert [result_of(sent, f"call_{n}")["result"] for n in (1, 2)] == [page(2), page(3)]
    assert all(INSTRUCTION in str(instruction) for instruction in model.instructions)
    # The session's events keep every full response; the reload brings page 1 back.
    assert [result_of(history, f"call_{n}")["result"] for n in (0, 1, 2)] == [page(n) for n in PAGES]
    reload = result_of(model.contents[RELOAD_TURN + 1], "call_3")
    assert reloaded_page_one(json.dumps(reload, ensure_ascii=False))
    assert artifact_id in json.dumps(reload)
    assert ws.stats.restored == 1
    # What the working set read: the history as chat messages, every request, nothing dropped.
    assert parsed(ws.seen[RELOAD_TURN]) == rendered(model.instructions[RELOAD_TURN], "What happened?", len(PAGES))
    assert len(ws.seen) == RELOAD_TURN + 2


def test_call_ids_adk_strips_from_the_request_are_found_again_in_the_session(vault: Vault) -> None:
    """A model that gives no call ids (as Gemini): ADK makes ``adk-…`` ids, which tools are called with (and results
    stored under), and strips them from the request; the callback finds them again and still clears page 1."""
    ws = working_set(vault, SCOPE)
    model, history = run_agent(vault, working_set_callback(ws), with_ids=False)
    session_ids = response_ids(history)
    assert all(str(call_id).startswith("adk-") for call_id in session_ids)
    sent = model.contents[RELOAD_TURN]
    assert response_ids(sent) == [None, None, None]  # stripped by ADK
    assert_stub_of(results(sent)[0]["result"], vault, SCOPE, str(session_ids[0]))
    assert [r["result"] for r in results(sent)[1:]] == [page(2), page(3)]
    assert [r["result"] for r in results(history)[:3]] == [page(n) for n in PAGES]
    assert reloaded_page_one(json.dumps(results(model.contents[RELOAD_TURN + 1])[3], ensure_ascii=False))
    assert ws.stats.restored == 1
    assert [m.get("tool_call_id") for m in ws.seen[RELOAD_TURN] if m["role"] == "tool"] == session_ids[:3]


def test_the_guard_callback_after_it_checks_what_it_sends(vault: Vault) -> None:
    checked: list[list[dict[str, Any]]] = []

    class Recording(LeakGuard):
        def check(self, request: Any) -> Any:
            checked.append(request["contents"])
            return super().check(request)

    ws = working_set(vault, SCOPE)
    model, _ = run_agent(vault, [working_set_callback(ws), guard_callback(Recording())])
    assert checked == model.contents  # the guard saw exactly the trimmed contents
    assert cleared(result_of(checked[RELOAD_TURN], "call_0")["result"]) is not None


def test_the_callback_takes_only_a_working_set() -> None:
    with pytest.raises(InvalidArgument, match="WorkingSet"):
        working_set_callback(None)  # type: ignore[arg-type]
