"""Scripted models for the docs' ``scripted-model`` blocks: one per framework, each driving the tools it is offered.

The models are the integration tests' scripted ones (``tests.integrations.scripted``); what is added here is
one plan that fits any snippet, since a snippet cannot say what its model should do:

* each turn, call every tool the model is offered that is not one of refvault's read tools, has not been
  called yet and whose required arguments can be filled: an artifact-id (``Ref``) argument takes the newest
  artifact id the model has seen (in the prompt or a tool result), any other takes a plain value of its type;
* when no such tool is left (or after ``MAX_TURNS`` turns), answer "done".

So a tool that returns something big is called first, and a ``Ref`` tool then gets the id of what it returned.
``shortfall`` says when a run exercised too little (the model never called, or none of the snippet's tools).
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, TextPart, ToolCallPart
from pydantic_ai.messages import ModelResponse as PydanticResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from refvault.ids import ARTIFACT_ID_PATTERN
from refvault.toolbox.builtin import BUILTIN_TOOLS
from tests.integrations.scripted import (
    AdkScripted,
    Call,
    LangChainScripted,
    OpenAIScripted,
    Run,
    _pydantic_results,
)

__all__ = ["MAX_TURNS", "Driver", "scripted_model", "shortfall"]

MAX_TURNS = 6
READ_TOOLS = frozenset(tool.__name__ for tool in BUILTIN_TOOLS)
ARTIFACT_ID = re.compile(ARTIFACT_ID_PATTERN.strip("^$"))


class Driver:
    """The plan every scripted model follows; ``offer`` is told the tools of each request before ``plan`` runs."""

    def __init__(self) -> None:
        self.run = Run()
        self.offered: dict[str, dict[str, Any]] = {}
        self.own_tools: set[str] = set()  # every tool of the snippet's own (not a read tool) ever offered
        self.called: set[str] = set()
        self.turns = 0

    def offer(self, tools: dict[str, dict[str, Any]]) -> None:
        """The tools of the current request, by name, each with its JSON schema of arguments."""
        self.offered = tools
        self.own_tools |= set(tools) - READ_TOOLS

    def plan(self, results: list[str]) -> list[Call] | None:
        self.turns += 1
        if self.turns > MAX_TURNS:
            return None
        ids = ARTIFACT_ID.findall(self.run.seen[-1] if self.run.seen else "")
        calls: list[Call] = []
        for name, schema in self.offered.items():
            if name in READ_TOOLS or name in self.called:
                continue
            arguments = _arguments(schema, ids[-1] if ids else None)
            if arguments is not None:
                calls.append((name, arguments))
                self.called.add(name)
        return calls or None


def _is_ref(schema: dict[str, Any]) -> bool:
    return "refvault artifact id" in str(schema.get("description", "")).lower() or "art_" in str(
        schema.get("pattern", "")
    )


def _value(schema: dict[str, Any], artifact_id: str | None) -> tuple[bool, Any]:
    """``(True, value)`` for an argument of this schema, or ``(False, None)`` if it needs an id not seen yet."""
    if _is_ref(schema):
        return (artifact_id is not None, artifact_id)
    for key in ("anyOf", "any_of", "oneOf"):
        options = [option for option in schema.get(key) or [] if str(option.get("type", "")).lower() != "null"]
        if options:
            return _value(options[0], artifact_id)
    if schema.get("enum"):
        return True, schema["enum"][0]
    if "default" in schema:
        return True, schema["default"]
    kind = str(schema.get("type", "string")).lower()
    if kind == "array":
        items = schema.get("items") or {}
        if _is_ref(items):
            return (artifact_id is not None, [artifact_id])
        return True, []
    plain = {"integer": 1, "number": 1.0, "boolean": True, "object": {}, "null": None}
    return True, plain.get(kind, "example")


def _arguments(schema: dict[str, Any], artifact_id: str | None) -> dict[str, Any] | None:
    """Arguments for each required parameter, or None if one of them needs an artifact id not seen yet."""
    properties = schema.get("properties") or {}
    arguments: dict[str, Any] = {}
    for name in schema.get("required") or []:
        ready, value = _value(properties.get(name) or {}, artifact_id)
        if not ready:
            return None
        arguments[name] = value
    return arguments


class _OpenAI(OpenAIScripted):
    def __init__(self, driver: Driver) -> None:
        super().__init__(driver.plan, driver.run)
        self.driver = driver

    async def get_response(self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any) -> Any:
        tools = kwargs.get("tools", args[1] if len(args) > 1 else [])
        self.driver.offer({t.name: t.params_json_schema for t in tools if hasattr(t, "params_json_schema")})
        return await super().get_response(system_instructions, input, *args, **kwargs)


class _LangChain(LangChainScripted):
    driver: Any = None

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        functions = [tool.get("function", tool) for tool in kw.get("tools", [])]
        self.driver.offer({f["name"]: f.get("parameters") or {} for f in functions})
        return super()._generate(messages, stop, run_manager, **kw)


class _Adk(AdkScripted):
    driver: Any = None

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse]:
        offered: dict[str, dict[str, Any]] = {}
        for tool in (llm_request.config.tools if llm_request.config else None) or []:
            for declaration in getattr(tool, "function_declarations", None) or []:
                schema = declaration.parameters_json_schema
                if schema is None and declaration.parameters is not None:
                    schema = declaration.parameters.model_dump(mode="json", exclude_none=True)
                offered[declaration.name or ""] = schema or {}
        self.driver.offer(offered)
        async for response in super().generate_content_async(llm_request, stream):
            yield response


def _pydantic(driver: Driver) -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> PydanticResponse:
        driver.run.seen.append(ModelMessagesTypeAdapter.dump_json(messages).decode())
        driver.run.results = _pydantic_results(messages)
        driver.offer({tool.name: tool.parameters_json_schema for tool in info.function_tools})
        calls = driver.plan(driver.run.results)
        if not calls:
            return PydanticResponse(parts=[TextPart("done")])
        turn = len(driver.run.seen)
        return PydanticResponse(
            parts=[ToolCallPart(name, args, tool_call_id=f"c{turn}_{i}") for i, (name, args) in enumerate(calls)]
        )

    return FunctionModel(respond)


def scripted_model(framework: str) -> tuple[Any, Driver]:
    """A scripted model for ``framework`` (one of ``blocks.FRAMEWORKS``) and its driver (what it was sent, offered
    and called)."""
    driver = Driver()
    model: Any
    if framework == "openai_agents":
        model = _OpenAI(driver)
    elif framework == "langchain":
        model = _LangChain(plan=driver.plan, run=driver.run, driver=driver)
    elif framework == "pydantic_ai":
        model = _pydantic(driver)
    elif framework == "adk":
        model = _Adk(plan=driver.plan, run=driver.run, driver=driver)
    else:
        raise ValueError(f"no scripted model for {framework!r}")
    return model, driver


def shortfall(driver: Driver) -> str | None:
    """Why a scripted run exercised too little: the model never called, or none of the snippet's tools called."""
    if not driver.run.seen:
        return "the block is marked scripted-model, but `model` was never called (by it or a later block)"
    if driver.own_tools and not driver.called:
        return (
            f"the scripted model was offered the snippet's tools ({', '.join(sorted(driver.own_tools))}) but could "
            "call none: a Ref argument takes an artifact id from the prompt or an earlier tool result"
        )
    return None
