"""Pydantic AI: a toolset over the Toolbox, materialised ``BinaryContent`` returns, and a guarded model.

::

    from pydantic_ai import Agent
    from refvault.integrations.pydantic_ai import GuardedModel, materialized, toolset

    agent = Agent(
        GuardedModel(model, box.guard),                       # every request checked before it is sent
        toolsets=[
            toolset(box, scope=scope),                        # the Toolbox's tools, Ref resolution, offload
            materialized(my_tools, vault, scope=scope),       # BinaryContent returns stored, model gets refs
        ],
    )

Invariants, and the test in ``tests/integrations/test_pydantic_ai.py`` that shows each:

* **The Toolbox decides.** :func:`toolset` exposes each Toolbox tool with the
  Toolbox's own JSON schema (a ``Ref`` is a string) and dispatches every call
  through :meth:`Toolbox.call <refvault.toolbox.Toolbox.call>` with the run's
  ``run_id`` and the call's ``tool_call_id``. Pydantic AI only parses the JSON
  into an object (anything else, ``null`` included, gets its retry prompt);
  the Toolbox validates the arguments, resolves Refs, offloads and captures
  (``test_toolset_exposes_the_toolbox_schemas``, ``test_the_toolbox_validates_the_arguments``,
  ``test_ref_argument_reaches_the_tool_not_the_model``, ``test_oversized_result_is_offloaded_and_read_back``;
  ``test_empty_and_malformed_arguments`` in ``tests/integrations/test_adapter_arguments.py``).
* **The model sees ``Observation.content``.** An error observation becomes
  Pydantic AI's ``ToolFailed``: a failed tool return showing the text, no retry
  budget spent, so the model can recover (``test_bad_and_foreign_ids_are_recoverable_errors``).
  Bytes a tool returns are captured by the Toolbox and the model gets the
  descriptor summary (``test_tool_bytes_become_a_reference``). The only image
  bytes this toolset hands the model are ``load_artifacts`` image parts, as
  ``BinaryContent``: the explicit, model-disclosed load
  (``test_load_artifacts_images_are_native_content``).
* **``BinaryContent`` returns are materialised.** :func:`materialized` wraps
  any toolset: every ``BinaryContent`` in a tool's return (alone, in lists,
  tuples or dict values, in a ``ToolReturn``'s value or content) is stored by
  :func:`refvault.content.materialize` (``sealed`` by default, idempotent per
  tool call) and replaced by a reference text naming its ``refvault://`` URI;
  strings beside it have any copy of its base64 replaced by that URI too. If
  storing is refused, the model gets an error text and no bytes, and nothing is
  stored (``test_binary_content_returns_are_materialised``,
  ``test_materialising_refusals_are_tool_errors_without_bytes``).
* **The guard sees every request first.** :class:`GuardedModel` renders all of
  a request (the messages in Pydantic AI's own serialisation, instructions, tool
  definitions) and passes it to ``guard.check`` before the wrapped model gets
  it, for plain, streamed, token-counting, compaction and batch requests. A hit
  raises :class:`~refvault.errors.ContextLeak` under either guard policy (a
  redacted copy is not turned back into messages): nothing is sent
  (``test_guard_stops_a_leaking_tool_return`` with ``agent.run`` and ``run_sync``,
  ``test_sealed_canary_never_reaches_the_model``, ``test_guard_checks_the_instructions``,
  ``test_guard_sees_binary_content``, ``test_streamed_requests_are_guarded``,
  ``test_guard_refuses_under_the_redact_policy_too``). The content arm applies
  to every leaf, base64 fields included; the size arm knows the provider wire
  formats' tool outputs, not Pydantic AI's dump, so it does not fire here.
* **The context working set trims what the model is sent, never the run.**
  :class:`WorkingSetCapability` (``Agent(capabilities=[working_set_capability(ws)])``)
  rewrites each request before it is sent: older stored tool returns become the
  working set's stub naming the artifact id, everything else is the same
  object; the run's history (``result.all_messages()``) keeps every full return
  (``tests/integrations/test_working_set_pydantic_ai.py``).
"""

from __future__ import annotations

import base64
import dataclasses
import uuid
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

try:
    import anyio.to_thread
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.exceptions import ToolFailed
    from pydantic_ai.messages import (
        BinaryContent,
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
        RetryPromptPart,
        SystemPromptPart,
        TextPart,
        ThinkingPart,
        ToolCallPart,
        ToolReturn,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models import Model, ModelRequestContext, ModelRequestParameters, StreamedResponse
    from pydantic_ai.models.wrapper import WrapperModel
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.tools import AgentDepsT, RunContext, ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset, ToolsetTool, WrapperToolset
    from pydantic_ai.usage import RequestUsage
    from pydantic_core import SchemaValidator, core_schema
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "refvault.integrations.pydantic_ai needs Pydantic AI: pip install 'refvault[pydantic-ai]'"
    ) from exc

from refvault.content import Limits, materialize
from refvault.errors import InvalidArgument, RefvaultError
from refvault.guard.contract import GuardHolder, RequestChecker, refuse_leaks, resolve_guard
from refvault.integrations.adapter import tool_schemas
from refvault.integrations.context_hooks import ChatHistory, ReplacementSource, check_working_set, json_text, parts_text
from refvault.model import Disclosure, Scope
from refvault.toolbox import Observation, Toolbox
from refvault.toolbox.values import DATA_ONLY

if TYPE_CHECKING:
    from pydantic_ai.models.batch import BatchRequest, EncodedBatchRequest

    from refvault.vault import Vault
    from refvault.vault.aio import AsyncVault

__all__ = [
    "GuardedModel",
    "MaterializedToolset",
    "RefvaultToolset",
    "WorkingSetCapability",
    "materialized",
    "toolset",
    "working_set_capability",
]

# Pydantic AI only parses the arguments' JSON into an object; the Toolbox validates them. (Any JSON at all would
# let ``null`` through as ``None``, which Pydantic AI's tool manager asserts against, ending the run.)
_OBJECT = SchemaValidator(core_schema.dict_schema(core_schema.str_schema(), core_schema.any_schema()))


# -- the Toolbox as a toolset ---------------------------------------------------------------------------------------


class RefvaultToolset(AbstractToolset[Any]):
    """The Toolbox's tools as a Pydantic AI toolset, dispatched in one scope (see :func:`toolset`)."""

    def __init__(
        self,
        box: Toolbox,
        *,
        scope: Scope,
        names: Iterable[str] | None = None,
        id: str | None = None,
        model_context_tokens: int | None = None,
    ) -> None:
        schemas = tool_schemas(box, "mcp", scope=scope, names=names, model_context_tokens=model_context_tokens)
        self.box = box
        self.scope = scope
        self.model_context_tokens = model_context_tokens
        self._id = id
        self._definitions = [
            ToolDefinition(
                name=schema["name"],
                description=schema["description"] or None,
                parameters_json_schema=schema["inputSchema"],
            )
            for schema in schemas
        ]

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        # max_retries bounds only unparseable JSON: the Toolbox's own refusals are failed returns, not retries.
        return {
            definition.name: ToolsetTool(toolset=self, tool_def=definition, max_retries=1, args_validator=_OBJECT)
            for definition in self._definitions
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        observation = await self.box.call(
            name,
            tool_args,
            scope=self.scope,
            run_id=ctx.run_id,
            tool_call_id=ctx.tool_call_id,
            model_context_tokens=self.model_context_tokens,
        )
        if observation.is_error:
            raise ToolFailed(observation.content)
        return _model_content(observation)


def toolset(
    box: Toolbox,
    *,
    scope: Scope,
    names: Iterable[str] | None = None,
    id: str | None = None,
    model_context_tokens: int | None = None,
) -> RefvaultToolset:
    """Every tool of ``box`` (or those in ``names``) as a Pydantic AI toolset dispatching in ``scope``.

    The tool definitions are taken when the toolset is made: register tools on
    the Toolbox first. Pass it to ``Agent(toolsets=[...])``. ``model_context_tokens`` (the agent's
    model's context window) scales every call's caps to it (:mod:`refvault.integrations.adapter`).
    """
    return RefvaultToolset(box, scope=scope, names=names, id=id, model_context_tokens=model_context_tokens)


def _model_content(observation: Observation) -> Any:
    """The text, and for ``load_artifacts`` the loaded text and images as Pydantic AI content; recovered content
    as a ``ToolReturn`` of exactly that value whose ``metadata`` marks it data only (the tool return part's own
    field: the model gets the same value)."""
    if not observation.parts:
        value: Any = observation.content
    else:
        images = [
            BinaryContent(data=base64.b64decode(part["data"]), media_type=part["media_type"])
            for part in observation.parts
            if part.get("type") == "image"
        ]
        text = observation.joined_text()
        value = [text, *images] if images else text
    return ToolReturn(return_value=value, metadata={DATA_ONLY: True}) if observation.data_only else value


# -- BinaryContent returns become references ------------------------------------------------------------------------


@dataclass
class MaterializedToolset(WrapperToolset[AgentDepsT]):
    """A toolset whose tools' ``BinaryContent`` returns are stored in the vault (see :func:`materialized`)."""

    vault: Vault | AsyncVault
    scope: Scope
    disclosure: Disclosure = "sealed"
    limits: Limits = field(default_factory=Limits)

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[AgentDepsT], tool: ToolsetTool[AgentDepsT]
    ) -> Any:
        result = await self.wrapped.call_tool(name, tool_args, ctx, tool)
        blocks: list[dict[str, Any]] = []
        _swap(result, lambda leaf: blocks.append(_block(leaf)))
        if not any(block["type"] != "text" for block in blocks):
            return result
        try:
            projected = await materialize(
                self.vault,
                self.scope,
                {"content": blocks},
                provenance=f"pydantic_ai:{name}",
                tool_call_id=ctx.tool_call_id or f"pydantic_ai_{uuid.uuid4().hex}",
                run_id=ctx.run_id,
                disclosure=self.disclosure,
                limits=self.limits,
            )
        except RefvaultError as exc:  # refvault's messages never carry content; the bytes are dropped
            raise ToolFailed(f"error: the tool's binary output could not be stored: {exc}") from None
        replacements = iter(projected["content"])
        return _swap(result, lambda _: _reference(next(replacements)))


def materialized(
    toolset: AbstractToolset[AgentDepsT],
    vault: Vault | AsyncVault,
    *,
    scope: Scope,
    disclosure: Disclosure = "sealed",
    limits: Limits | None = None,
) -> MaterializedToolset[AgentDepsT]:
    """Wrap ``toolset`` so ``BinaryContent`` its tools return is stored in ``vault`` and the model gets a reference.

    Parts are stored in ``scope`` with ``disclosure`` (``sealed``: reachable by
    reference only) under the Pydantic AI tool call id, so a retried
    materialisation stores nothing new. Tools registered with ``@agent.tool``
    live in the agent's own toolset: put them in a ``FunctionToolset`` and wrap that.
    """
    if not isinstance(scope, Scope):
        raise InvalidArgument("scope must be a refvault.Scope(tenant=..., user=..., session=...)")
    return MaterializedToolset(toolset, vault, scope, disclosure, limits or Limits())


def _swap(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """``value`` with each ``BinaryContent`` and string inside it replaced by ``leaf(it)``, in a fixed order."""
    if isinstance(value, BinaryContent | str):
        return leaf(value)
    if isinstance(value, ToolReturn):
        return dataclasses.replace(
            value, return_value=_swap(value.return_value, leaf), content=_swap(value.content, leaf)
        )
    if isinstance(value, list):
        return [_swap(item, leaf) for item in value]
    if isinstance(value, tuple):
        return tuple(_swap(item, leaf) for item in value)
    if isinstance(value, Mapping):
        return {key: _swap(item, leaf) for key, item in value.items()}
    return value


def _block(leaf: BinaryContent | str) -> dict[str, Any]:
    """A leaf as an MCP content block, the shape :func:`refvault.content.materialize` takes."""
    if isinstance(leaf, str):
        return {"type": "text", "text": leaf}
    kind = leaf.media_type.partition("/")[0]
    if kind in ("image", "audio"):
        return {"type": kind, "data": leaf.base64, "mimeType": leaf.media_type}
    return {"type": "resource", "resource": {"blob": leaf.base64, "mimeType": leaf.media_type}}


def _reference(block: Mapping[str, Any]) -> str:
    if block["type"] == "resource_link":
        return f"[{block['uri']}] {block['description']}"
    return str(block["text"])


# -- the guard ------------------------------------------------------------------------------------------------------


@dataclass(init=False)
class GuardedModel(WrapperModel):
    """A model that passes every request to ``guard.check`` before the wrapped model sees it.

    ``guard`` is a :class:`~refvault.guard.LeakGuard`, usually ``box.guard``, or
    the Toolbox itself (its guard learns every value a tool reads by reference); call
    ``guard.protect_scope(vault, scope)`` to protect every sealed artifact of a
    scope up front. A hit raises :class:`~refvault.errors.ContextLeak`.
    """

    guard: RequestChecker

    def __init__(self, wrapped: Model | str, guard: RequestChecker | GuardHolder | None) -> None:
        checker = resolve_guard(guard)
        super().__init__(wrapped)
        self.guard = checker

    async def _check(
        self, messages: list[ModelMessage], parameters: ModelRequestParameters | None, extra: str | None = None
    ) -> None:
        await anyio.to_thread.run_sync(self._check_now, messages, parameters, extra)

    def _check_now(
        self, messages: list[ModelMessage], parameters: ModelRequestParameters | None, extra: str | None
    ) -> None:
        request: dict[str, Any] = {
            "model": self.wrapped.model_name,  # the recipient the disclosure policy decides for (model:<name>)
            "messages": ModelMessagesTypeAdapter.dump_python(messages, mode="json"),
        }
        if extra is not None:
            request["extra"] = extra
        if parameters is not None:
            request["instructions"] = [part.content for part in parameters.instruction_parts or ()]
            request["tools"] = [
                {"name": tool.name, "description": tool.description, "parameters": tool.parameters_json_schema}
                for tool in (*parameters.function_tools, *parameters.output_tools)
            ]
        refuse_leaks(self.guard, request)  # policy "redact" hands back a copy: refused all the same

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        await self._check(messages, model_request_parameters)
        return await self.wrapped.request(messages, model_settings, model_request_parameters)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        await self._check(messages, model_request_parameters)
        async with self.wrapped.request_stream(
            messages, model_settings, model_request_parameters, run_context
        ) as response_stream:
            yield response_stream

    async def count_tokens(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> RequestUsage:
        await self._check(messages, model_request_parameters)
        return await self.wrapped.count_tokens(messages, model_settings, model_request_parameters)

    async def compact_messages(
        self, request_context: ModelRequestContext, *, instructions: str | None = None
    ) -> ModelResponse:
        await self._check(request_context.messages, request_context.model_request_parameters, instructions)
        return await self.wrapped.compact_messages(request_context, instructions=instructions)

    async def batch_encode(self, request: BatchRequest) -> EncodedBatchRequest:
        await self._check(request.messages, request.model_request_parameters)
        return await self.wrapped.batch_encode(request)


# -- the context working set ----------------------------------------------------------------------------------------


class WorkingSetCapability(AbstractCapability[Any]):
    """A Pydantic AI capability that installs the context working set ``ws`` on every model request.

    In ``before_model_request`` (once per request step, before any attempt) it renders the request's
    instructions (as a system message) and messages as chat messages, asks ``ws.replacements`` which
    stored tool returns to clear, and gives the request (``request_context.messages``, a request-only list)
    new ``ModelRequest`` messages whose ``ToolReturnPart`` (or ``RetryPromptPart``) content is the stub
    naming the artifact id. Invariants: the same messages and parts in the same order, every unchanged
    message the very object of the run's history; nothing in the run's history (``ctx.messages``,
    ``result.all_messages()``) is edited, so it keeps every full return. (A history processor, which this
    Pydantic AI runs as the ``ProcessHistory`` capability, writes what it returns back into the run's
    history: that is why the working set is a capability of its own.) Capabilities run before the model,
    so a :class:`GuardedModel` checks the trimmed request, exactly what its wrapped model gets.
    """

    def __init__(self, ws: ReplacementSource) -> None:
        self.ws = check_working_set(ws)

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # takes a live working set: not constructible from an agent spec

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        messages = list(request_context.messages)
        history = ChatHistory()
        instructions = [part.content for part in request_context.model_request_parameters.instruction_parts or ()]
        if instructions:
            history.add("system", "\n\n".join(instructions))
        keys = [_chat_message(history, message) for message in messages]
        stubs = await anyio.to_thread.run_sync(history.replacements, self.ws)
        if stubs:
            request_context.messages = [
                _with_stubs(message, ids, stubs) if isinstance(message, ModelRequest) and ids else message
                for message, ids in zip(messages, keys, strict=True)
            ]
        return request_context


def working_set_capability(ws: ReplacementSource) -> WorkingSetCapability:
    """The context working set ``ws`` as a capability: ``Agent(model, capabilities=[working_set_capability(ws)])``.

    See :class:`WorkingSetCapability` for what the model gets and what the run keeps.
    """
    return WorkingSetCapability(ws)


def _chat_message(history: ChatHistory, message: ModelMessage) -> dict[int, str]:
    """Render one message into ``history``; the ids its tool-result parts have there, by part index."""
    ids: dict[int, str] = {}
    if isinstance(message, ModelResponse):
        text = [part.content for part in message.parts if isinstance(part, TextPart | ThinkingPart)]
        others = [part for part in message.parts if not isinstance(part, TextPart | ThinkingPart | ToolCallPart)]
        if text or others:
            history.add("assistant", "\n".join([*text, *(json_text(_part_fields(part)) for part in others)]))
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                history.tool_call(part.tool_call_id, part.tool_name, part.args_as_json_str())
        return ids
    for index, request_part in enumerate(message.parts):
        if isinstance(request_part, ToolReturnPart):
            ids[index] = history.tool_result(request_part.tool_call_id, request_part.model_response_str())
        elif isinstance(request_part, RetryPromptPart) and request_part.tool_name is not None:
            ids[index] = history.tool_result(request_part.tool_call_id, request_part.model_response())
        elif isinstance(request_part, SystemPromptPart):
            history.add("system", request_part.content)
        elif isinstance(request_part, UserPromptPart):
            content = request_part.content
            history.add("user", content if isinstance(content, str) else parts_text(list(content)))
        else:
            history.add("user", json_text(_part_fields(request_part)))
    return ids


def _part_fields(part: Any) -> Any:
    """A part other than text, a tool call or a tool return, for counting: its content (or itself), as text."""
    content = getattr(part, "content", None)
    return content if content is not None else str(part)


def _with_stubs(message: ModelRequest, ids: Mapping[int, str], stubs: Mapping[str, str]) -> ModelRequest:
    """A new request like ``message`` whose stubbed tool-result parts are new parts (the originals untouched)."""
    parts: list[Any] = list(message.parts)
    for index, key in ids.items():
        if key in stubs:
            parts[index] = dataclasses.replace(parts[index], content=stubs[key])
    return dataclasses.replace(message, parts=parts)
