"""Adversarial review of the framework adapters (issue 8): README snippets, leak attempts, robustness, MCP serve.

Every test drives a real framework (OpenAI Agents SDK, LangChain, Pydantic AI, Google ADK, the MCP SDK)
with a scripted model that records everything it receives; "never reached the model" means "in none of
the recorded inputs", checked verbatim, JSON-escaped and base64-encoded. One driver per framework runs
the same plan (which tools the model calls, decided from the tool results it has seen so far), so each
attack runs unchanged against all four adapters.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import secrets
import subprocess
import sys
import textwrap
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
import pytest
from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage, set_tracing_disabled
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner as AdkRunner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.load_artifacts_tool import LoadArtifactsTool
from google.genai import types as genai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.tool import tool_call
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from mcp import Client, MCPError
from mcp.client.stdio import StdioServerParameters
from mcp.types import TextContent
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from pydantic import Field
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.messages import ModelResponse as PydanticResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from refvault import Ref, Scope, Toolbox, Vault
from refvault.errors import BadRef, ContextLeak, InvalidArgument
from refvault.guard import LeakGuard
from refvault.integrations import adk as rv_adk
from refvault.integrations import langchain as rv_langchain
from refvault.integrations import openai_agents as rv_openai
from refvault.integrations import pydantic_ai as rv_pydantic

set_tracing_disabled(True)  # nothing may try to export traces over the network

ROOT = Path(__file__).resolve().parents[1]
ID = re.compile(r"art_[a-z2-7]{26}")
SCOPE = Scope("acme", "ana", "s1")
OTHER = Scope("acme", "bob", "s1")
FRAMEWORKS = ("openai_agents", "langchain", "pydantic_ai", "adk")

Call = tuple[str, "dict[str, Any] | str"]  # a tool name and its arguments (a dict, or raw JSON text)
Plan = Callable[[list[str]], list[Call] | None]  # from the tool results seen so far: the next calls, or None (answer)


def canary(extra: int = 40) -> str:
    """A random secret of at least 64 bytes."""
    return "CANARY-" + secrets.token_hex(extra)


def forms(secret: str) -> list[str]:
    """How a secret could appear in a recorded input: verbatim, JSON-escaped (once, twice), base64."""
    escaped = json.dumps(secret)[1:-1]
    ascii_escaped = json.dumps(secret, ensure_ascii=True)[1:-1]
    twice = json.dumps(escaped)[1:-1]
    encoded = base64.b64encode(secret.encode()).decode()
    return [secret, escaped, ascii_escaped, twice, encoded[:64]]


@dataclass
class Run:
    """What one agent run did: every model input (as text), the tool results, and what it raised."""

    seen: list[str] = field(default_factory=list)
    results: list[str] = field(default_factory=list)
    error: BaseException | None = None
    output: str | None = None

    def saw(self, text: str) -> bool:
        return any(text in received for received in self.seen)

    def assert_never_saw(self, secret: str) -> None:
        assert self.seen, "the model was never called"
        for form in forms(secret):
            assert not self.saw(form), "the secret reached the model"
        for start in range(0, max(1, len(secret) - 64), 16):  # nor any 64-byte excerpt of it
            assert not self.saw(secret[start : start + 64]), "an excerpt of the secret reached the model"

    @property
    def leak(self) -> ContextLeak | None:
        return leak_in(self.error)


def leak_in(error: BaseException | None) -> ContextLeak | None:
    """The ContextLeak in an exception, its causes or an exception group (frameworks may wrap it)."""
    seen: set[int] = set()
    todo = [error]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ContextLeak):
            return current
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
        todo.extend([current.__cause__, current.__context__])
    return None


def once(*calls: Call) -> Plan:
    """Make these calls (in one turn), then answer."""
    return steps([list(calls)])


def steps(turns: list[list[Call]]) -> Plan:
    """Make each turn's calls in order (one turn per model call), then answer."""
    queue = list(turns)

    def plan(results: list[str]) -> list[Call] | None:
        return queue.pop(0) if queue else None

    return plan


# -- one driver per framework: the same plan, a scripted model, the adapter's guard ----------------------------------


def _args_text(args: dict[str, Any] | str) -> str:
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


class OpenAIScripted(Model):
    """An Agents SDK model answering from a plan; records the instructions and input of every call."""

    def __init__(self, plan: Plan, run: Run) -> None:
        self.plan, self.run, self.turn = plan, run, 0

    async def get_response(self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any) -> Any:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        request = {"instructions": system_instructions, "input": items}
        self.run.seen.append(json.dumps(request, default=str, ensure_ascii=False))
        outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        self.run.results = [o["output"] if isinstance(o["output"], str) else json.dumps(o["output"]) for o in outputs]
        calls = self.plan(self.run.results)
        self.turn += 1
        if not calls:
            text = [ResponseOutputText(type="output_text", text="done", annotations=[])]
            message = ResponseOutputMessage(type="message", id="m", role="assistant", status="completed", content=text)
            return ModelResponse(output=[message], usage=Usage(), response_id=None)
        output = [
            ResponseFunctionToolCall(
                type="function_call", call_id=f"c{self.turn}_{i}", name=name, arguments=_args_text(args), id=f"fc{i}"
            )
            for i, (name, args) in enumerate(calls)
        ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


async def drive_openai_agents(
    box: Toolbox, scope: Scope, plan: Plan, *, guard: Any, instructions: str | None = None, prompt: str = "go"
) -> Run:
    run = Run()
    agent = Agent(
        name="analyst",
        model=OpenAIScripted(plan, run),
        instructions=instructions,
        tools=rv_openai.tools(box, scope=scope),
    )
    config = RunConfig(call_model_input_filter=rv_openai.guard_model_input(guard), tracing_disabled=True)
    try:
        result = await Runner.run(agent, prompt, run_config=config)
        run.output = str(result.final_output)
    except Exception as exc:
        run.error = exc
    return run


class LangChainScripted(BaseChatModel):
    """A chat model answering from a plan; records every message it receives."""

    plan: Any
    run: Any
    turn: int = 0

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        dumped = [json.dumps(m.model_dump(mode="json"), ensure_ascii=False) for m in messages]  # lone surrogates too
        self.run.seen.append("\n".join(dumped) + json.dumps(kw.get("tools", [])))
        tool_messages = [m for m in messages if isinstance(m, ToolMessage)]
        self.run.results = [m.content if isinstance(m.content, str) else json.dumps(m.content) for m in tool_messages]
        calls = self.plan(self.run.results)
        self.turn += 1
        if not calls:
            return ChatResult(generations=[ChatGeneration(message=AIMessage("done"))])
        tool_calls = []
        for i, (name, args) in enumerate(calls):
            parsed = json.loads(args) if isinstance(args, str) else args  # LangChain carries args parsed
            tool_calls.append(tool_call(name=name, args=parsed, id=f"c{self.turn}_{i}"))
        return ChatResult(generations=[ChatGeneration(message=AIMessage("", tool_calls=tool_calls))])

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools], **kwargs)


async def drive_langchain(
    box: Toolbox, scope: Scope, plan: Plan, *, guard: Any, instructions: str | None = None, prompt: str = "go"
) -> Run:
    run = Run()
    lc_tools = rv_langchain.tools(box, scope=scope)
    by_name = {tool.name: tool for tool in lc_tools}
    model = LangChainScripted(plan=plan, run=run).bind_tools(lc_tools)
    model = model.with_config(callbacks=[rv_langchain.LeakGuardCallback(guard)])
    messages: list[BaseMessage] = ([SystemMessage(instructions)] if instructions else []) + [HumanMessage(prompt)]
    try:
        for _ in range(10):
            reply: AIMessage = await model.ainvoke(messages)
            messages.append(reply)
            if not reply.tool_calls:
                run.output = str(reply.content)
                break
            messages.extend(await asyncio.gather(*(by_name[c["name"]].ainvoke(c) for c in reply.tool_calls)))
    except Exception as exc:
        run.error = exc
    return run


def _pydantic_results(messages: list[ModelMessage]) -> list[str]:
    results = []
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    results.append(part.model_response_str())
                elif isinstance(part, RetryPromptPart):
                    results.append(part.model_response())
    return results


async def drive_pydantic_ai(
    box: Toolbox, scope: Scope, plan: Plan, *, guard: Any, instructions: str | None = None, prompt: str = "go"
) -> Run:
    run = Run()

    def respond(messages: list[ModelMessage], info: AgentInfo) -> PydanticResponse:
        tools = [(t.name, t.description, t.parameters_json_schema) for t in info.function_tools]
        dumped = ModelMessagesTypeAdapter.dump_json(messages).decode()
        run.seen.append(dumped + (info.instructions or "") + json.dumps(tools))
        run.results = _pydantic_results(messages)
        calls = plan(run.results)
        if not calls:
            return PydanticResponse(parts=[TextPart("done")])
        return PydanticResponse(
            parts=[
                ToolCallPart(name, args, tool_call_id=f"c{len(run.seen)}_{i}") for i, (name, args) in enumerate(calls)
            ]
        )

    model = rv_pydantic.GuardedModel(FunctionModel(respond), guard)
    agent = PydanticAgent(model, toolsets=[rv_pydantic.toolset(box, scope=scope)], instructions=instructions)
    try:
        result = await agent.run(prompt)
        run.output = str(result.output)
    except Exception as exc:
        run.error = exc
    return run


class AdkScripted(BaseLlm):
    """An ADK model answering from a plan; records every request as JSON."""

    model: str = "scripted"
    plan: Any = None
    run: Any = None

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse]:
        self.run.seen.append(json.dumps(llm_request.model_dump(mode="json", fallback=str), ensure_ascii=False))
        responses = [
            part.function_response.response or {}
            for content in llm_request.contents
            for part in content.parts or []
            if part.function_response is not None
        ]
        self.run.results = [
            r.get("result", r.get("error")) if len(r) == 1 else json.dumps(r, default=str) for r in responses
        ]
        calls = self.plan(self.run.results)
        if not calls:
            parts = [genai.Part(text="done")]
        else:
            parts = [
                genai.Part(
                    function_call=genai.FunctionCall(
                        name=name, args=json.loads(_args_text(args)), id=f"c{len(self.run.seen)}_{i}"
                    )
                )
                for i, (name, args) in enumerate(calls)
            ]
        yield LlmResponse(content=genai.Content(role="model", parts=parts))


async def drive_adk(
    box: Toolbox,
    scope: Scope,
    plan: Plan,
    *,
    guard: Any,
    instructions: str | None = None,
    prompt: str = "go",
    extra_tools: list[Any] | None = None,
    artifacts: Any = None,
    sessions: InMemorySessionService | None = None,
    state: dict[str, Any] | None = None,
    names: list[str] | None = None,
) -> Run:
    """ADK names the scope: app_name = tenant, user_id = user, session_id = session."""
    run = Run()
    model = AdkScripted(plan=plan, run=run)
    agent = LlmAgent(
        name="analyst",
        model=model,
        instruction=instructions or "",
        tools=[*rv_adk.tools(box, names), *(extra_tools or [])],
        before_model_callback=rv_adk.guard_callback(guard),
    )
    sessions = sessions or InMemorySessionService()
    if await sessions.get_session(app_name=scope.tenant, user_id=scope.user, session_id=scope.session) is None:
        await sessions.create_session(app_name=scope.tenant, user_id=scope.user, session_id=scope.session, state=state)
    runner = AdkRunner(
        agent=agent,
        app_name=scope.tenant,
        session_service=sessions,
        artifact_service=artifacts or rv_adk.RefvaultArtifactService(box.vault),
    )
    message = genai.Content(role="user", parts=[genai.Part(text=prompt)])
    try:
        async for event in runner.run_async(user_id=scope.user, session_id=scope.session, new_message=message):
            if event.content and event.content.parts and event.content.parts[0].text:
                run.output = event.content.parts[0].text
    except Exception as exc:
        run.error = exc
    return run


DRIVERS: dict[str, Callable[..., Any]] = {
    "openai_agents": drive_openai_agents,
    "langchain": drive_langchain,
    "pydantic_ai": drive_pydantic_ai,
    "adk": drive_adk,
}


def drive(framework: str, box: Toolbox, scope: Scope, plan: Plan, *, guard: Any = None, **options: Any) -> Run:
    return asyncio.run(DRIVERS[framework](box, scope, plan, guard=guard or box.guard, **options))


@pytest.fixture
def vault(tmp_path: Path) -> Iterator[Vault]:
    with Vault.open(tmp_path / "store") as opened:
        yield opened


def sealed(vault: Vault, scope: Scope, text: str, **options: Any) -> str:
    return vault.put(scope, text.encode(), media_type="text/plain", disclosure="sealed", **options).artifact_id


# -- leaks: a sealed canary, every route to the model --------------------------------------------------------------


def rich_secret(extra: int = 80) -> str:
    """A secret JSON must escape (quotes, backslash, control characters, non-ASCII) around a random canary."""
    return 'quote " back \\ nl \n tab \t é ✓ ' + canary(extra) + " ✓ end"


def leaky_box(vault: Vault, **options: Any) -> Toolbox:
    """A Toolbox whose tools misbehave with what they read by reference, each in its own way."""
    box = Toolbox(vault, **options)

    @box.tool
    def echo(doc: Ref) -> str:
        """Returns the document."""
        return "here it is: " + doc.text()

    @box.tool
    def echo_json(doc: Ref) -> dict[str, Any]:
        """Returns the document inside a structure (JSON-escaped once by the Toolbox)."""
        return {"payload": [{"text": doc.text()}]}

    @box.tool
    def echo_escaped_twice(doc: Ref) -> str:
        """Returns the document JSON-escaped twice."""
        return json.dumps({"inner": json.dumps({"text": doc.text()})})

    @box.tool
    def echo_base64(doc: Ref) -> str:
        """Returns the document base64-encoded."""
        return "b64: " + base64.b64encode(doc.read()).decode()

    @box.tool
    def head(doc: Ref) -> str:
        """Returns the first half."""
        text = doc.text()
        return text[: len(text) // 2]

    @box.tool
    def tail(doc: Ref) -> str:
        """Returns the second half."""
        text = doc.text()
        return text[len(text) // 2 :]

    @box.tool
    def fail_plain(doc: Ref) -> str:
        """Raises with the document as the message."""
        raise ValueError(doc.text())

    @box.tool
    def fail_refvault(doc: Ref) -> str:
        """Raises a refvault error with the document as the message."""
        raise InvalidArgument(doc.text())

    @box.tool
    def fail_bad_ref(doc: Ref) -> str:
        """Raises BadRef (whose message the Toolbox shows) with the document as the message."""
        raise BadRef(doc.text())

    @box.tool
    def compare(doc: Ref, guess: str) -> bool:
        """Whether the document equals a guess."""
        return doc.text() == guess

    return box


# name → (the plan, given the sealed id and the secret; whether the guard must stop the run)
ECHOES: dict[str, tuple[Callable[[str, str], Plan], bool]] = {
    "direct": (lambda doc, _: once(("echo", {"doc": doc})), True),
    "json_escaped": (lambda doc, _: once(("echo_json", {"doc": doc})), True),
    "json_escaped_twice": (lambda doc, _: once(("echo_escaped_twice", {"doc": doc})), True),
    "base64": (lambda doc, _: once(("echo_base64", {"doc": doc})), True),
    "split_across_turns": (lambda doc, _: steps([[("head", {"doc": doc})], [("tail", {"doc": doc})]]), True),
    "split_in_one_turn": (lambda doc, _: once(("head", {"doc": doc}), ("tail", {"doc": doc})), True),
    "second_half_alone": (lambda doc, _: once(("tail", {"doc": doc})), True),  # halves are >= 64 bytes each
    "in_tool_call_arguments": (lambda doc, secret: once(("compare", {"doc": doc, "guess": secret})), True),
    # BadRef names a well-formed id only (refvault.errors.shown_id): the document never gets into its message.
    "bad_ref_message": (lambda doc, _: once(("fail_bad_ref", {"doc": doc})), False),
    "exception_message": (lambda doc, _: once(("fail_plain", {"doc": doc})), False),
    "refvault_error_message": (lambda doc, _: once(("fail_refvault", {"doc": doc})), False),
}


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("attack", list(ECHOES))
def test_a_sealed_canary_never_reaches_the_model(vault: Vault, framework: str, attack: str) -> None:
    """Each route a tool (or the model) could take a sealed value back to the model is stopped or never carries it."""
    secret = rich_secret()
    doc = sealed(vault, SCOPE, secret)
    make_plan, blocked = ECHOES[attack]
    run = drive(framework, leaky_box(vault), SCOPE, make_plan(doc, secret), prompt=f"look at {doc}")

    run.assert_never_saw(secret)
    if blocked:
        assert run.leak is not None, f"{framework}/{attack}: not stopped ({run.error!r})"
        assert {finding.artifact_id for finding in run.leak.findings} == {doc}
        for form in forms(secret):
            assert form not in str(run.leak)
    else:
        assert run.error is None
        assert run.output == "done"
        not_an_id = "error: the value given is not an artifact id"
        assert (not_an_id if attack == "bad_ref_message" else "error: the tool raised") in run.results[-1]


@pytest.mark.parametrize("attack", list(ECHOES))
def test_openai_agents_a_redacting_guard_hands_the_model_markers_only(vault: Vault, attack: str) -> None:
    """The one adapter that can rewrite a request: under policy "redact" every route above ends in markers."""
    guard = LeakGuard(policy="redact")
    secret = rich_secret()
    doc = sealed(vault, SCOPE, secret)
    make_plan, blocked = ECHOES[attack]
    run = drive("openai_agents", leaky_box(vault, guard=guard), SCOPE, make_plan(doc, secret), guard=guard)

    assert run.error is None, run.error
    assert run.output == "done"
    run.assert_never_saw(secret)
    assert run.saw(f"[refvault:{doc}]") == blocked


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_read_tools_never_carry_a_sealed_artifact(vault: Vault, framework: str) -> None:
    """load_artifacts, read_artifact (window and pattern), query_artifact: refused; describe and list: metadata."""
    secret = rich_secret()
    doc = sealed(vault, SCOPE, secret, filename="secret.txt")
    records = vault.put(
        SCOPE, json.dumps([{"k": secret}]).encode(), media_type="application/json", disclosure="sealed"
    ).artifact_id
    plan = once(
        ("load_artifacts", {"artifact_ids": [doc, records]}),
        ("read_artifact", {"artifact_id": doc}),
        ("read_artifact", {"artifact_id": doc, "pattern": "CANARY", "regex": False}),
        ("read_artifact", {"artifact_id": doc, "byte_range": [0, 4096]}),
        ("query_artifact", {"artifact_id": records}),
        ("describe_artifact", {"artifact_id": doc}),
        ("list_artifacts", {}),
    )
    run = drive(framework, Toolbox(vault), SCOPE, plan, prompt=f"look at {doc}")

    assert run.error is None
    run.assert_never_saw(secret)
    assert len(run.results) == 7
    assert all("sealed" in result for result in run.results[:5])
    assert doc in run.results[5]
    assert doc in run.results[6]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_output_of_a_sealed_input_stays_sealed(vault: Vault, framework: str) -> None:
    """An offloaded result, and bytes returned, derived from a sealed input: no preview, no read back."""
    secret = rich_secret()
    doc = sealed(vault, SCOPE, secret)
    box = Toolbox(vault, offload_tokens=1000)

    @box.tool
    def expand(doc: Ref) -> str:
        """A large text derived from the document (offloaded)."""
        return "\n".join(f"{i}: {doc.text()}" for i in range(200))

    @box.tool
    def render(doc: Ref) -> bytes:
        """Bytes derived from the document (captured)."""
        return doc.read() * 3

    def plan(results: list[str]) -> list[Call] | None:
        if not results:
            return [("expand", {"doc": doc}), ("render", {"doc": doc})]
        if len(results) == 2:
            derived = [i for i in ID.findall(" ".join(results)) if i != doc]
            assert len(set(derived)) == 2, results
            reads: list[Call] = []
            for derived_id in dict.fromkeys(derived):
                reads += [
                    ("read_artifact", {"artifact_id": derived_id}),
                    ("load_artifacts", {"artifact_ids": [derived_id]}),
                ]
            return reads
        return None

    run = drive(framework, box, SCOPE, plan, prompt=f"expand {doc}")

    assert run.error is None, run.error
    run.assert_never_saw(secret)
    assert len(run.results) == 6
    assert all("sealed" in result for result in run.results)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_protected_value_in_the_system_instructions_is_stopped(vault: Vault, framework: str) -> None:
    """protect_scope up front, then a secret pasted into the instructions: the first request never leaves."""
    secret = canary()
    sealed(vault, SCOPE, secret)
    box = Toolbox(vault)
    box.guard.protect_scope(vault, SCOPE)
    run = drive(framework, box, SCOPE, once(), instructions=f"Background (do not share): {secret}")

    assert run.leak is not None, run.error
    assert run.seen == []  # the model was never called


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_another_scopes_id_is_refused_exactly_like_a_missing_one(tmp_path: Path, framework: str) -> None:
    """Another user's, session's or tenant's id: the same words as a missing id (only the id differs), for the
    Ref tool and the read tools alike; to the Ref tool, an expired id of the scope reads the same too."""
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    words = "someone else's private words " + canary()
    with Vault.open(tmp_path / "store", clock=lambda: now[0]) as vault:
        box = Toolbox(vault)

        @box.tool
        def count_words(doc: Ref) -> int:
            """Count the words of a document."""
            return len(doc.text().split())

        def put(scope: Scope, **options: Any) -> str:
            return vault.put(scope, words.encode(), media_type="text/plain", **options).artifact_id

        ids = {
            "missing": "art_" + "a" * 26,
            "other_user": put(OTHER),
            "other_session": put(Scope("acme", "ana", "s2")),
            "other_tenant": put(Scope("evil", "ana", "s1")),
            "other_users_sealed": put(OTHER, disclosure="sealed"),
        }
        expired = put(SCOPE, expires_at=now[0] + timedelta(seconds=1))
        now[0] += timedelta(hours=1)
        calls: list[Call] = [("count_words", {"doc": i}) for i in [*ids.values(), expired]]
        for tool in ("read_artifact", "describe_artifact"):
            calls += [(tool, {"artifact_id": i}) for i in ids.values()]
        calls += [("load_artifacts", {"artifact_ids": [i]}) for i in ids.values()]
        run = drive(framework, box, SCOPE, once(*calls))

    assert run.error is None
    run.assert_never_saw(words)
    assert len(run.results) == len(calls)
    answers = [ID.sub("<id>", result) for result in run.results]
    by_tool: dict[str, set[str]] = {}
    for (tool, _), answer in zip(calls, answers, strict=True):
        by_tool.setdefault(tool, set()).add(answer)
    for tool, seen in by_tool.items():
        assert len(seen) == 1, (tool, seen)
        assert "error" in next(iter(seen)) or "not found" in next(iter(seen)), (tool, seen)


# -- ADK: its own loaders, state and stored events ------------------------------------------------------------------


NOT_LOAD = ["describe_artifact", "list_artifacts", "read_artifact", "query_artifact"]  # ADK's LoadArtifactsTool instead


def _save(service: rv_adk.RefvaultArtifactService, scope: Scope, filename: str, part: genai.Part) -> None:
    async def save() -> None:
        await service.save_artifact(
            app_name=scope.tenant, user_id=scope.user, session_id=scope.session, filename=filename, artifact=part
        )

    asyncio.run(save())


@pytest.mark.parametrize(
    ("how", "kind"), [("load_artifacts_tool", "text"), ("load_artifacts_tool", "png"), ("instruction_template", "text")]
)
def test_adk_loaders_cannot_put_a_sealed_version_in_front_of_the_model(vault: Vault, how: str, kind: str) -> None:
    """A sealed version saved through the artifact service, loaded by ADK itself (its LoadArtifactsTool, or an
    ``{artifact.name}`` instruction template): the guard stops it, though protect_scope ran before the save.

    Found in review: without the service's ``guard=``, nothing taught the guard these bytes and both
    loaders put the sealed text (or image) into the model request."""
    box = Toolbox(vault)
    box.guard.protect_scope(vault, SCOPE)  # at session start, as documented: the secret is saved later
    service = rv_adk.RefvaultArtifactService(vault, disclosure="sealed", guard=box)
    secret = rich_secret()
    if kind == "text":
        part = genai.Part(text=secret)
    else:
        part = genai.Part(inline_data=genai.Blob(mime_type="image/png", data=b"\x89PNG\r\n\x1a\n" + secret.encode()))
    _save(service, SCOPE, "secret", part)
    if how == "load_artifacts_tool":
        plan, instructions = once(("load_artifacts", {"artifact_names": ["secret"]})), "Be brief."
    else:
        plan, instructions = once(), "Answer from this: {artifact.secret}"
    run = drive(
        "adk",
        box,
        SCOPE,
        plan,
        artifacts=service,
        extra_tools=[LoadArtifactsTool()],
        names=NOT_LOAD,
        instructions=instructions,
    )

    assert run.leak is not None, run.error
    for form in forms(secret):
        assert not run.saw(form)
    assert not run.saw(base64.b64encode(part.inline_data.data).decode()[:64] if part.inline_data else secret)
    assert secret not in str(run.leak)


def test_adk_model_disclosed_versions_still_load(vault: Vault) -> None:
    """The guard= of the artifact service protects sealed versions only: model-disclosed ones load as before."""
    box = Toolbox(vault)
    service = rv_adk.RefvaultArtifactService(vault, guard=box.guard)
    notes = "meeting notes: ship on friday " + canary()
    _save(service, SCOPE, "notes.txt", genai.Part(text=notes))
    run = drive(
        "adk",
        box,
        SCOPE,
        once(("load_artifacts", {"artifact_names": ["notes.txt"]})),
        artifacts=service,
        extra_tools=[LoadArtifactsTool()],
        names=NOT_LOAD,
    )

    assert run.error is None, run.error
    assert run.saw(notes)
    assert box.guard.scan(notes) == []


def test_adk_session_state_in_an_instruction_template_is_checked(vault: Vault) -> None:
    """A protected value a tool of the user's own put into session state, templated into the instruction."""
    secret = canary()
    sealed(vault, SCOPE, secret)
    box = Toolbox(vault)
    box.guard.protect_scope(vault, SCOPE)
    run = drive("adk", box, SCOPE, once(), instructions="Context: {notes}", state={"notes": f"the key is {secret}"})

    assert run.leak is not None, run.error
    assert run.seen == []


def test_adk_a_stopped_tool_result_stays_stopped_in_later_runs_of_the_session(vault: Vault) -> None:
    """The stopped result is in the session's events and a later run rebuilds its request from them: stopped again,
    by the same guard, and by a fresh process's guard that ran protect_scope at session start (as documented;
    a fresh guard that did not would let the stored result through: it knows nothing)."""
    secret = rich_secret()
    doc = sealed(vault, SCOPE, secret)
    sessions = InMemorySessionService()
    box = leaky_box(vault)
    first = drive("adk", box, SCOPE, once(("echo", {"doc": doc})), sessions=sessions)
    again = drive("adk", box, SCOPE, once(), sessions=sessions, prompt="and now?")
    restarted = leaky_box(vault)
    restarted.guard.protect_scope(vault, SCOPE)
    later = drive("adk", restarted, SCOPE, once(), sessions=sessions, prompt="and now?")

    for run in (first, again, later):
        assert run.leak is not None, run.error
        for form in forms(secret):
            assert not run.saw(form)
    assert len(first.seen) == 1
    assert again.seen == later.seen == []


# -- LangChain: how the guard is attached, ToolMessage.artifact, the sync path ----------------------------------------


def _lc_attempt(model: Any, how: str, prompt: str) -> bool:
    """Whether the guard stopped ``how`` (invoke, stream, batch or ainvoke) of ``prompt``."""
    messages = [HumanMessage(prompt)]
    try:
        if how == "invoke":
            model.invoke(messages)
        elif how == "stream":
            list(model.stream(messages))
        elif how == "batch":
            model.batch([[HumanMessage("hello")], messages])
        else:
            asyncio.run(model.ainvoke(messages))
    except ContextLeak:
        return True
    return False


@pytest.mark.parametrize("how", ["invoke", "stream", "batch", "ainvoke"])
def test_langchain_guard_survives_how_it_is_attached(how: str) -> None:
    """The three ways that keep the callback stop the request; the one that does not is a LangChain pitfall
    (``with_config`` before ``bind_tools``), documented in the adapter: this pins it."""
    box = Toolbox(Vault.open("memory://"))
    secret = canary()
    box.guard.protect("art_" + "q" * 26, secret.encode())
    guard = rv_langchain.LeakGuardCallback(box)
    run = Run()
    lc_tools = rv_langchain.tools(box, scope=SCOPE)
    kept = {
        "bind_tools_then_with_config": LangChainScripted(plan=once(), run=run)
        .bind_tools(lc_tools)
        .with_config(callbacks=[guard]),
        "callbacks_field": LangChainScripted(plan=once(), run=run, callbacks=[guard]).bind_tools(lc_tools),
        "with_config_of_the_field_model": LangChainScripted(plan=once(), run=run, callbacks=[guard])
        .with_config(tags=["x"])
        .bind_tools(lc_tools),
    }
    for name, model in kept.items():
        assert _lc_attempt(model, how, f"say {secret}"), name
    assert not any(secret in seen for seen in run.seen)

    dropped = LangChainScripted(plan=once(), run=run).with_config(callbacks=[guard]).bind_tools(lc_tools)
    assert not _lc_attempt(dropped, how, f"say {secret}")  # the pitfall: the callback never ran
    assert any(secret in seen for seen in run.seen)


def test_langchain_tool_message_artifact_carries_ids_only(vault: Vault) -> None:
    """``ToolMessage.artifact`` (never sent) holds the captured artifacts' summaries: ids and metadata, no content."""
    secret = rich_secret()
    doc = sealed(vault, SCOPE, secret)
    box = Toolbox(vault, offload_tokens=1000)

    @box.tool
    def expand(doc: Ref) -> str:
        """A large text derived from the document (offloaded)."""
        return "\n".join(f"{i}: {doc.text()}" for i in range(200))

    @box.tool
    def render(doc: Ref) -> bytes:
        """Bytes derived from the document (captured)."""
        return doc.read()

    by_name = {tool.name: tool for tool in rv_langchain.tools(box, scope=SCOPE)}
    for name in ("expand", "render"):
        message = by_name[name].invoke(tool_call(name=name, args={"doc": doc}, id=f"call_{name}"))
        assert isinstance(message, ToolMessage)
        assert message.status == "success"
        (summary,) = message.artifact
        assert set(summary) == {"artifact_id", "media_type", "size", "content_hash", "disclosure"}
        assert summary["disclosure"] == "sealed"
        assert summary["artifact_id"] in str(message.content)
        dumped = message.model_dump_json()
        for form in forms(secret):
            assert form not in dumped


def test_langchain_sync_invoke_inside_a_running_loop(vault: Vault) -> None:
    """``tool.invoke`` (sync) from code that runs inside an event loop, as in a notebook cell.

    Found in review: an async Toolbox tool raised ``RuntimeError: asyncio.run() cannot be called from a
    running event loop`` out of ``invoke`` (LangChain does not handle it) and left a coroutine never awaited."""
    doc = vault.put(SCOPE, b"one two three four", media_type="text/plain").artifact_id
    box = Toolbox(vault)

    @box.tool
    async def count_words_async(doc: Ref) -> int:
        """Count the words of a document (async)."""
        await asyncio.sleep(0)
        return len(doc.text().split())

    @box.tool
    def count_words(doc: Ref) -> int:
        """Count the words of a document."""
        return len(doc.text().split())

    by_name = {tool.name: tool for tool in rv_langchain.tools(box, scope=SCOPE)}

    async def notebook_cell() -> list[Any]:
        return [
            by_name[name].invoke(tool_call(name=name, args={"doc": doc}, id=f"c_{name}"))
            for name in by_name
            if name.startswith("count")
        ]

    outside = [
        by_name[name].invoke(tool_call(name=name, args={"doc": doc}, id="c"))
        for name in ("count_words_async", "count_words")
    ]
    inside = asyncio.run(notebook_cell())
    assert [message.content for message in [*outside, *inside]] == ["4"] * 4
    assert all(message.status == "success" for message in inside)


# -- Pydantic AI: retries ---------------------------------------------------------------------------------------------


def test_pydantic_ai_retry_prompts_that_echo_arguments_are_checked(vault: Vault) -> None:
    """Unparseable arguments make Pydantic AI echo them back in a retry prompt: with the value protected, stopped."""
    secret = canary()
    doc = sealed(vault, SCOPE, secret)
    box = leaky_box(vault)
    box.guard.protect_scope(vault, SCOPE)
    raw = f'{{"doc": "{doc}", "guess": "{secret}"'  # not JSON: the closing brace is missing
    run = drive("pydantic_ai", box, SCOPE, once(("compare", raw)))

    assert run.leak is not None, run.error
    assert len(run.seen) == 1


def test_pydantic_ai_toolbox_refusals_spend_no_retries(vault: Vault) -> None:
    """Five refused calls in a row (bad ids, bad types, unknown fields): the run goes on, each a failed return."""
    box = Toolbox(vault)
    doc = vault.put(SCOPE, b"alpha beta", media_type="text/plain").artifact_id
    bad: list[Call] = [
        ("read_artifact", {"artifact_id": "art_" + "b" * 26}),
        ("read_artifact", {"artifact_id": doc, "lines": "all"}),
        ("read_artifact", {"artifact_id": doc, "nonsense": 1}),
        ("load_artifacts", {"artifact_ids": []}),
        ("describe_artifact", {}),
    ]
    run = drive(
        "pydantic_ai", box, SCOPE, steps([[call] for call in bad] + [[("read_artifact", {"artifact_id": doc})]])
    )

    assert run.error is None, run.error
    assert run.output == "done"
    assert ["error: " in r for r in run.results] == [True] * 5 + [False]
    assert "alpha beta" in run.results[-1]


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


# -- robustness ----------------------------------------------------------------------------------------------------


def words_box(vault: Vault) -> Toolbox:
    box = Toolbox(vault)

    @box.tool
    def count_words(doc: Ref) -> int:
        """Count the words of a document."""
        return len(doc.text().split())

    @box.tool
    async def shout(doc: Ref) -> str:
        """The first word in capitals (async); more of the text, even upper-cased, is a leak the guard stops."""
        await asyncio.sleep(0)
        return doc.text().split()[0].upper()

    return box


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


UNICODE = "naïve café — 東京 👩‍💻 עברית \u202e reversed \u0000 nul \ufeff bom"
ARGUMENT = "ärger — 大阪 🧑‍🚀 العربية \u202e mirrored \u0000 \ufeff and more words here"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_unicode_documents_and_arguments(vault: Vault, framework: str) -> None:
    """Unicode (combining, CJK, emoji ZWJ, RTL override, NUL, BOM) in documents, filenames and arguments."""
    doc = vault.put(SCOPE, UNICODE.encode(), media_type="text/plain; charset=utf-8", filename="ünï.txt").artifact_id
    second = "第二 — 🧑‍🔬 a second document, with its own words " + secrets.token_hex(8)  # not read by Ref
    other = vault.put(SCOPE, second.encode(), media_type="text/plain", filename="東京.txt").artifact_id
    box = words_box(vault)

    @box.tool
    def echo_text(text: str) -> str:
        """Echo a text argument reversed."""
        return text[::-1]

    plan = once(
        ("count_words", {"doc": doc}),
        ("echo_text", {"text": ARGUMENT}),
        ("read_artifact", {"artifact_id": other, "pattern": "第二"}),
        ("list_artifacts", {}),
    )
    run = drive(framework, box, SCOPE, plan)

    assert run.error is None, run.error
    assert run.output == "done"
    assert str(len(UNICODE.split())) in run.results[0]
    results = run.results
    assert ARGUMENT[::-1] in results[1]
    assert second in results[2]
    assert "ünï.txt" in results[3]
    assert "東京.txt" in results[3]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_lone_surrogates_in_arguments_are_a_recoverable_error(vault: Vault, framework: str) -> None:
    """A lone surrogate (valid JSON escape, invalid Unicode) as an id: refused, and the guard does not crash.

    The OpenAI Agents SDK (0.24) fails first, in its own code: it fingerprints each tool call's arguments as
    UTF-8 before any tool runs (``agents/_tool_invocation.py``), so the run raises UnicodeEncodeError there."""
    box = words_box(vault)
    plan = once(
        ("count_words", '{"doc": "art_\\ud800"}'), ("read_artifact", '{"artifact_id": "\\udfff' + "x" * 80 + '"}')
    )
    run = drive(framework, box, SCOPE, plan)

    if framework == "openai_agents":
        assert isinstance(run.error, UnicodeEncodeError)
        assert _raised_in(run.error, "/agents/")
        assert run.results == []
        return
    assert run.error is None, run.error
    assert run.output == "done"
    assert len(run.results) == 2
    assert all("error" in result for result in run.results)


def _raised_in(error: BaseException, path: str) -> bool:
    """Whether the innermost frame of ``error`` is in a file whose path contains ``path``."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and path in tb.tb_frame.f_code.co_filename


RAW_ARGUMENTS = ["", "null", "[]", '"art_x"', "{", '{"doc": "art_x"']  # only the SDKs that pass raw JSON get these
OBJECT_ARGUMENTS = ["{}", '{"doc": null}', '{"doc": 7}', '{"doc": ""}', '{"doc": "art_x", "extra": 1}']
MALFORMED = [(f, a) for f in FRAMEWORKS for a in OBJECT_ARGUMENTS] + [
    (f, a) for f in ("openai_agents", "pydantic_ai") for a in RAW_ARGUMENTS
]


@pytest.mark.parametrize(("framework", "arguments"), MALFORMED)
def test_empty_and_malformed_arguments(vault: Vault, framework: str, arguments: str) -> None:
    """Missing, empty, non-object and malformed arguments to a Ref tool: an error the model can recover from
    (the Toolbox's, or Pydantic AI's retry prompt for unparseable JSON), and the run goes on."""
    box = words_box(vault)
    run = drive(framework, box, SCOPE, steps([[("count_words", arguments)], [("list_artifacts", "{}")]]))

    assert run.error is None, run.error
    assert run.output == "done"
    assert len(run.results) == 2
    first = run.results[0].lower()
    assert "error" in first or "validation" in first or "invalid" in first, first
    assert '"artifacts"' in run.results[1]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_validation_errors_never_echo_argument_values(vault: Vault, framework: str) -> None:
    """Values the model wrote that fail validation (wrong type, not a literal, too long, nested): the error says
    where and how, never what (the framework may still carry the model's own call in the next request)."""
    box = Toolbox(vault)

    @box.tool
    def pick(
        n: int, mode: Literal["fast", "slow"] = "fast", tags: Annotated[list[str], Field(max_length=2)] | None = None
    ) -> int:
        """Pick a number."""
        return n

    value = canary()
    calls: list[Call] = [
        ("pick", {"n": value}),
        ("pick", {"n": 1, "mode": value}),
        ("pick", {"n": 1, "tags": [value, value, value]}),
        ("pick", {"n": {"nested": value}}),
        ("pick", {"n": [value]}),
    ]
    run = drive(framework, box, SCOPE, once(*calls))

    assert run.error is None, run.error
    assert len(run.results) == len(calls)
    for result in run.results:
        assert "error: invalid arguments" in result, result
        assert value[:20] not in result


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_huge_arguments(vault: Vault, framework: str) -> None:
    """A 100 KB argument (under the guard's 128 KiB size arm) is taken; a 1 MB one runs the tool, and the next
    request, carrying the model's own oversized tool call, is stopped by the size arm, not sent."""
    box = Toolbox(vault)

    @box.tool
    def measure(text: str) -> int:
        """The length of a text."""
        return len(text)

    small, big = "x" * 100_000, "y" * 1_000_000
    taken = drive(framework, box, SCOPE, once(("measure", {"text": small})))
    stopped = drive(framework, box, SCOPE, once(("measure", {"text": big})))

    assert taken.error is None, taken.error
    assert "100000" in taken.results[0]
    if framework == "pydantic_ai":  # documented: the size arm knows provider wire formats, not Pydantic AI's dump
        assert stopped.error is None
        assert len(stopped.seen) == 2
        return
    assert stopped.leak is not None, stopped.error
    assert {finding.arm for finding in stopped.leak.findings} == {"size"}
    assert len(stopped.seen) == 1


# -- refvault mcp serve, with the official MCP SDK client over stdio ------------------------------------------------

MAIN = "import sys; from refvault.cli import main; main(sys.argv[1:], prog_name='refvault')"


def _serve_args(store: Path, scope: Scope) -> list[str]:
    return ["-c", MAIN, "mcp", "serve", "--store", str(store), "--tenant", scope.tenant, "--user", scope.user,
            "--session", scope.session]  # fmt: skip


def _env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith("REFVAULT_")}


def _mcp_client(store: Path, scope: Scope = SCOPE) -> Client:
    return Client(StdioServerParameters(command=sys.executable, args=_serve_args(store, scope), env=_env()), cache=None)


def _text(result: Any) -> str:
    return "".join(block.text for block in getattr(result, "content", []) if isinstance(block, TextContent))


@dataclass
class Store:
    path: Path
    secret: str
    sealed: str
    readable: str
    foreign: str
    foreign_sealed: str
    big: str


@pytest.fixture
def store(tmp_path: Path) -> Store:
    path = tmp_path / "store"
    secret = rich_secret()
    with Vault.open(path) as vault:
        readable = vault.put(SCOPE, b"line one\nline two\n", media_type="text/plain").artifact_id
        sealed_id = sealed(vault, SCOPE, secret)
        foreign = vault.put(OTHER, f"bob's {secret}".encode(), media_type="text/plain").artifact_id
        foreign_sealed = sealed(vault, OTHER, secret)
        line = b"a line of a large log, " + b"x" * 40 + b"\n"
        big_text = line * (32 * 1024 * 1024 // len(line) + 1)  # over resources/read's 32 MiB cap
        big = vault.put(SCOPE, big_text, media_type="text/plain").artifact_id
    return Store(path, secret, sealed_id, readable, foreign, foreign_sealed, big)


def test_mcp_serve_unknown_tools_and_bad_arguments_are_error_results(store: Store) -> None:
    """Unknown tools, missing, mistyped, extra and huge arguments: error results naming no content; the server
    stays up and answers the next request."""

    async def session() -> list[Any]:
        async with _mcp_client(store.path) as client:
            results = [
                await client.call_tool("no_such_tool", {}),
                await client.call_tool("x" * 10_000, {"a": 1}),
                await client.call_tool("read_artifact", {}),
                await client.call_tool("read_artifact", {"artifact_id": 7}),
                await client.call_tool("read_artifact", {"artifact_id": store.readable, "lines": "all"}),
                await client.call_tool("read_artifact", {"artifact_id": store.readable, "bogus": True}),
                await client.call_tool("read_artifact", {"artifact_id": "a" * 2_000_000}),
                await client.call_tool("load_artifacts", {"artifact_ids": [store.sealed, store.foreign] * 6}),
                await client.call_tool("query_artifact", {"artifact_id": store.sealed, "where": {"field": "k"}}),
            ]
            results.append(await client.call_tool("load_artifacts", {"artifact_ids": [store.sealed, store.foreign]}))
            results.append(await client.call_tool("read_artifact", {"artifact_id": store.big}))
            results.append(await client.call_tool("load_artifacts", {"artifact_ids": [store.big]}))
            results.append(await client.call_tool("read_artifact", {"artifact_id": store.readable}))
            return results

    *errors, loaded, big_read, big_load, last = anyio.run(session)
    for bounded in (big_read, big_load):  # a 32 MiB text comes back as a bounded window that says how to go on
        assert not bounded.is_error
        assert 1000 < len(bounded.model_dump_json()) < 200_000
        assert "a line of a large log" in _text(bounded)
    assert not loaded.is_error  # one entry per id: each refused, naming no content
    assert f"{store.sealed} is sealed" in _text(loaded)
    assert f"{store.foreign} not found in this scope" in _text(loaded)
    for form in forms(store.secret):
        assert form not in loaded.model_dump_json()
    for result in errors:
        assert result.is_error, result
        dumped = result.model_dump_json()
        for form in forms(store.secret):
            assert form not in dumped
    assert len(_text(errors[1])) < 1000  # a 10,000-character tool name is not echoed whole
    assert len(_text(errors[6])) < 1000
    assert not last.is_error
    assert "line two" in _text(last)


def test_mcp_serve_resources_read_refuses_sealed_foreign_malformed_and_large(store: Store) -> None:
    """resources/read: a sealed artifact is refused as sealed; another scope's (sealed or not) exactly like a missing
    one; malformed and other-scheme URIs are not found; an artifact over the size cap is refused, not truncated."""
    missing = "art_" + "a" * 26
    malformed = [
        "refvault://",
        "refvault://../../etc/passwd",
        f"refvault://{store.readable}/../{store.foreign}",
        f"refvault://{store.readable}?x=1",
        f"REFVAULT://{store.foreign}",
        f"file:///{store.readable}",
        "refvault://" + "a" * 5000,
        f"refvault://{store.readable}%00",
    ]

    async def session() -> dict[str, str]:
        answers: dict[str, str] = {}
        async with _mcp_client(store.path) as client:
            for name, uri in [
                ("sealed", f"refvault://{store.sealed}"),
                ("missing", f"refvault://{missing}"),
                ("foreign", f"refvault://{store.foreign}"),
                ("foreign_sealed", f"refvault://{store.foreign_sealed}"),
                ("big", f"refvault://{store.big}"),
                *((f"malformed{i}", uri) for i, uri in enumerate(malformed)),
            ]:
                with pytest.raises(MCPError) as caught:
                    await client.read_resource(uri)
                answers[name] = str(caught.value)
            answers["ok"] = (await client.read_resource(f"REFVAULT://{store.readable}")).model_dump_json()
        return answers

    answers = anyio.run(session)
    for answer in answers.values():
        for form in forms(store.secret):
            assert form not in answer
    assert "sealed" in answers["sealed"]
    assert answers["foreign"].replace(store.foreign, "<id>") == answers["missing"].replace(missing, "<id>")
    assert answers["foreign_sealed"].replace(store.foreign_sealed, "<id>") == answers["missing"].replace(
        missing, "<id>"
    )
    assert "bytes" in answers["big"]
    assert "read_artifact" in answers["big"]
    for i in range(len(malformed)):
        assert "not found" in answers[f"malformed{i}"], answers[f"malformed{i}"]
        assert len(answers[f"malformed{i}"]) < 400
    assert "line two" in answers["ok"]


def test_mcp_serve_survives_malformed_json_rpc(store: Store) -> None:
    """Garbage on stdin (not JSON, wrong shapes, unknown methods, a huge line) between valid requests: each valid
    request is still answered, and the server exits cleanly when stdin closes."""
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    lines = [
        json.dumps(init),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        "this is not json",
        "{",
        json.dumps([1, 2, 3]),
        json.dumps({"jsonrpc": "2.0", "id": 2, "method": "no/such/method"}),
        json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": 5}}),
        json.dumps({"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {}}),
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 5,
                "method": "tools/call",
                "params": {"name": "read_artifact", "arguments": {"artifact_id": "z" * 3_000_000}},
            }
        ),
        json.dumps({"jsonrpc": "2.0", "id": 8, "method": "resources/list", "params": {"cursor": "-1"}}),
        json.dumps({"jsonrpc": "2.0", "id": 9, "method": "resources/list", "params": {"cursor": "9" * 40}}),
        json.dumps(
            {"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "list_artifacts", "arguments": [1]}}
        ),
        json.dumps({"jsonrpc": "2.0", "id": 6, "method": "tools/list"}),
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {"name": "read_artifact", "arguments": {"artifact_id": store.readable}},
            }
        ),
    ]
    process = subprocess.Popen(
        [sys.executable, *_serve_args(store.path, SCOPE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    try:
        assert process.stdin is not None
        assert process.stdout is not None
        answers: dict[int, Any] = {}
        for line in lines:
            process.stdin.write(line.encode() + b"\n")
        process.stdin.flush()
        while 7 not in answers:
            raw = process.stdout.readline()
            assert raw, "the server closed stdout before answering every valid request"
            message = json.loads(raw)
            if "id" in message:
                answers[message["id"]] = message
        process.stdin.close()
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    assert "result" in answers[1]
    assert answers[2]["error"]["code"] == -32601  # method not found
    for bad in (3, 4, 8, 9, 10):  # a tool name that is no string, no uri, bad cursors, arguments that are no object
        assert answers[bad]["error"]["code"] == -32602, answers[bad]
    assert "invalid cursor" in answers[8]["error"]["message"]
    assert answers[5]["result"]["isError"] is True
    assert len(json.dumps(answers[5])) < 5000  # the 3 MB id is not echoed back
    assert {tool["name"] for tool in answers[6]["result"]["tools"]} >= {"read_artifact", "load_artifacts"}
    assert "line two" in json.dumps(answers[7]["result"])


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


def test_a_sealed_adk_service_without_a_guard_is_refused(vault: Vault) -> None:
    """The leak above is closed by construction: a sealed service cannot be made without the guard."""
    with pytest.raises(InvalidArgument, match="guard="):
        rv_adk.RefvaultArtifactService(vault, disclosure="sealed")
    assert rv_adk.RefvaultArtifactService(vault, disclosure="sealed", guard=Toolbox(vault)).guard is not None
