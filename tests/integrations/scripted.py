"""Scripted models and drivers for every framework adapter (OpenAI Agents SDK, LangChain, Pydantic AI, Google ADK):
each run records every model input, the tool results and what it raised.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage, set_tracing_disabled
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner as AdkRunner
from google.adk.sessions import InMemorySessionService
from google.genai import types as genai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.tool import tool_call
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from mcp.types import TextContent
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import (
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
from refvault.integrations import adk as rv_adk
from refvault.integrations import langchain as rv_langchain
from refvault.integrations import openai_agents as rv_openai
from refvault.integrations import pydantic_ai as rv_pydantic

set_tracing_disabled(True)  # nothing may try to export traces over the network


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
            r.get("result", r.get("error")) if len(r) == 1 else json.dumps(r, default=str, ensure_ascii=False)
            for r in responses
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
        tools=[*rv_adk.tools(box, names=names), *(extra_tools or [])],
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


# -- refvault mcp serve, with the official MCP SDK client over stdio ------------------------------------------------

MAIN = "import sys; from refvault.cli import main; main(sys.argv[1:], prog_name='refvault')"


def _env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith("REFVAULT_")}


def _text(result: Any) -> str:
    return "".join(block.text for block in getattr(result, "content", []) if isinstance(block, TextContent))
