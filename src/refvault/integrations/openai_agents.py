"""refvault inside the OpenAI Agents SDK (``openai-agents``): Toolbox tools and the leak guard.

::

    from agents import Agent, RunConfig, Runner
    from refvault.integrations.openai_agents import guard_model_input, guarded_client, tools

    agent = Agent(name="analyst", instructions=box.instructions(scope), tools=tools(box, scope=scope))
    config = RunConfig(call_model_input_filter=guard_model_input(box.guard))
    result = await Runner.run(agent, "Count the words of art_…", run_config=config)

A thin shell: every call goes through :meth:`refvault.Toolbox.call`, which
validates the arguments, resolves ``Ref`` parameters in the caller's scope,
runs the tool, captures returned bytes and offloads oversized results. Nothing
of that is re-implemented here. Invariants, and the test in
``tests/integrations/test_openai_agents.py`` that shows each:

* **One tool per Toolbox tool, dispatched by the Toolbox.** Name, description
  and parameter schema come from ``box.schemas("openai", strict=True)``; the
  raw argument JSON the model wrote goes to ``box.call`` unchanged, with the
  SDK's tool call id and, as ``run_id``, the run's trace id (``RunConfig.trace_id``
  or the trace the SDK started; None with tracing off and no ``trace_id``)
  (``test_ref_tool_reads_bytes_the_model_never_sees``).
* **Strict schemas the SDK accepts.** A tool the Toolbox made strict is a
  strict ``FunctionTool`` whose ``params_json_schema`` is the Toolbox's schema
  as sent; a tool strict mode cannot express (a free-form mapping) stays
  non-strict (``test_strict_schemas_are_the_toolboxs``; ``test_guarded_client_end_to_end``
  checks they are what the SDK sends).
* **The model sees the observation's text.** Errors (bad or other-scope ids,
  a tool's own failure) are the Toolbox's ``error: …`` text, returned as the
  tool's result so the model can recover (``test_bad_id_is_a_recoverable_error``).
  Bytes a tool returns are captured and the model gets the descriptor summary,
  never base64 or a data URL (``test_binary_result_is_a_reference``).
* **Images reach the model only through ``load_artifacts``**, the explicit,
  model-disclosed load: its parts become ``ToolOutputText`` /
  ``ToolOutputImage`` (``test_load_artifacts_gives_native_text_and_image``).
* **The guard sees every model request before it is sent.**
  :func:`guard_model_input` is a ``RunConfig.call_model_input_filter``: it
  checks the instructions and every input item (messages, tool calls, tool
  results) that the SDK is about to hand the model, and raises
  :class:`~refvault.errors.ContextLeak`, so the model is never called
  (``test_sealed_canary_never_reaches_the_model``, ``test_leaking_tool_is_stopped_before_the_model``).
  :func:`guarded_client` puts the same guard on the HTTP transport of an
  ``AsyncOpenAI`` client, for the SDK's real OpenAI models
  (``test_guarded_client_end_to_end``).
* **The context working set trims what the model is sent, never the run.**
  :func:`working_set_filter` is a ``RunConfig.call_model_input_filter``: the model
  gets a copy of the input whose older stored tool outputs
  (``function_call_output``) are the working set's stub naming the artifact id;
  every other item, and the run's own items (``result.new_items``,
  ``result.to_input_list()``), keep what they held
  (``tests/integrations/test_working_set_openai_agents.py``).

The guard learns every value a tool reads by reference (``box.guard``); call
``box.guard.protect_scope(vault, scope)`` to protect every sealed artifact of a
scope up front, before any tool has read it. Without the SDK installed, importing
this module raises ImportError naming the extra (nothing else in refvault imports
it: ``test_missing_sdk_names_the_extra_and_core_does_not_need_it``).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

from refvault.errors import InvalidArgument
from refvault.guard.contract import resolve_guard
from refvault.integrations.adapter import tool_schemas
from refvault.integrations.context_hooks import (
    ChatHistory,
    ReplacementSource,
    check_working_set,
    json_text,
    parts_text,
)

try:
    import openai
    from agents import FunctionTool, Tool, ToolOutputImage, ToolOutputText
    from agents.run_config import CallModelData, CallModelInputFilter, ModelInputData
    from agents.tool_context import ToolContext
    from agents.tracing import get_current_trace
except ImportError as exc:
    raise ImportError(
        "refvault.integrations.openai_agents needs the OpenAI Agents SDK: pip install 'refvault[openai]'"
    ) from exc

if TYPE_CHECKING:
    from refvault.guard.contract import GuardHolder, RequestChecker
    from refvault.model import Scope
    from refvault.toolbox import Observation, Toolbox

__all__ = ["guard_model_input", "guarded_client", "tools", "working_set_filter"]

ModelInputFilter = Callable[[CallModelData[Any]], Awaitable[ModelInputData]]
ToolOutput = str | list[ToolOutputText | ToolOutputImage]


def tools(
    box: Toolbox, *, scope: Scope, names: Iterable[str] | None = None, model_context_tokens: int | None = None
) -> list[Tool]:
    """One ``FunctionTool`` per Toolbox tool (or per name in ``names``), each dispatching through ``box.call``.

    Typed ``list[Tool]`` (every item is a ``FunctionTool``) so that
    ``Agent(tools=tools(...))`` type-checks: ``Agent.tools`` is a ``list[Tool]``.

    Every call runs in ``scope``. ``names`` picks and orders tools (the five
    read tools included); an unknown name raises
    :class:`~refvault.errors.InvalidArgument`. ``model_context_tokens`` (the agent's model's context
    window) scales every call's caps to it (:mod:`refvault.integrations.adapter`).
    """
    schemas = tool_schemas(
        box,
        "openai",
        scope=scope,
        names=names,
        strict=True,
        in_given_order=True,
        model_context_tokens=model_context_tokens,
    )
    return [_function_tool(box, scope, schema["function"], model_context_tokens) for schema in schemas]


def _function_tool(
    box: Toolbox, scope: Scope, function: Mapping[str, Any], model_context_tokens: int | None = None
) -> FunctionTool:
    name = function["name"]

    async def invoke(ctx: ToolContext[Any], arguments: str) -> ToolOutput:
        observation = await box.call(
            name,
            arguments,
            scope=scope,
            run_id=_run_id(ctx),
            tool_call_id=ctx.tool_call_id,
            model_context_tokens=model_context_tokens,
        )
        return _output(observation)

    return FunctionTool(
        name=name,
        description=function["description"],
        params_json_schema=function["parameters"],
        on_invoke_tool=invoke,
        strict_json_schema=bool(function.get("strict")),
    )


def _run_id(ctx: ToolContext[Any]) -> str | None:
    """The run's trace id: ``RunConfig.trace_id`` if given, else the trace the SDK started (None if disabled)."""
    if ctx.run_config is not None and ctx.run_config.trace_id:
        return ctx.run_config.trace_id
    trace = get_current_trace()
    trace_id = trace.trace_id if trace is not None else None
    return trace_id if trace_id and trace_id != "no-op" else None  # "no-op": tracing is disabled


def _output(observation: Observation) -> ToolOutput:
    """What the model gets: the text, or (``load_artifacts``) native text and image parts."""
    if not observation.parts:
        return observation.content
    output: list[ToolOutputText | ToolOutputImage] = []
    for part in observation.parts:  # the Toolbox makes text and image parts only
        if part["type"] == "text":
            output.append(ToolOutputText(text=part["text"]))
        elif part["type"] == "image":
            output.append(ToolOutputImage(image_url=f"data:{part['media_type']};base64,{part['data']}"))
    return output


def guard_model_input(
    guard: RequestChecker | GuardHolder | None, *, inner: CallModelInputFilter | None = None
) -> ModelInputFilter:
    """A ``RunConfig.call_model_input_filter`` that checks each model request with ``guard`` before it is sent.

    It checks the system instructions and every input item (all messages, tool
    calls and tool results of the turn) and raises
    :class:`~refvault.errors.ContextLeak` if any carries protected content, so
    the model is never called. With a ``policy="redact"`` guard the model gets a
    copy with each protected span replaced by ``[refvault:<artifact_id>]``.
    ``inner`` is a filter of your own: it runs first, and the guard checks what
    it returns. Pass ``box.guard``, or the Toolbox itself (its guard learns every
    value a tool reads by reference).
    """
    checker = resolve_guard(guard)

    async def check(data: CallModelData[Any]) -> ModelInputData:
        model_data = data.model_data
        if inner is not None:
            filtered = inner(data)
            model_data = await filtered if inspect.isawaitable(filtered) else filtered
        request = {
            "model": _model_name(data.agent),  # the recipient the disclosure policy decides for (model:<name>)
            "instructions": model_data.instructions,
            "input": model_data.input,
        }
        checked = checker.check(request)
        if checked is request:
            return model_data
        redacted = cast("dict[str, Any]", checked)  # policy "redact": a redacted copy of the same shape
        return ModelInputData(input=redacted["input"], instructions=redacted["instructions"])

    return check


def _model_name(agent: object) -> str | None:
    """The name of the model an agent calls: its ``model`` (a name, or a Model object's ``model``), if known."""
    model = getattr(agent, "model", None)
    if isinstance(model, str):
        return model
    name = getattr(model, "model", None)
    return name if isinstance(name, str) else None


def guarded_client(
    guard: RequestChecker | GuardHolder | None, *, transport: Any = None, **kwargs: Any
) -> openai.AsyncOpenAI:
    """An ``openai.AsyncOpenAI`` whose HTTP transport is a :class:`~refvault.guard.GuardedTransport`.

    Every request body is checked with ``guard`` before it reaches the network:
    a leaking request raises :class:`~refvault.errors.ContextLeak` (the OpenAI
    SDK does not retry it) and is never sent. ``transport`` is the transport to
    wrap (default: the HTTP library's own); ``kwargs`` go to ``AsyncOpenAI``.
    Use it with ``agents.set_default_openai_client(...)`` or a model's
    ``openai_client=``.
    """
    from refvault.guard import GuardedTransport

    if "http_client" in kwargs:
        raise InvalidArgument("guarded_client makes the http_client itself: pass transport= to wrap your transport")
    http_client = openai.DefaultAsyncHttpxClient(transport=GuardedTransport(guard, transport))
    return openai.AsyncOpenAI(http_client=http_client, **kwargs)


def working_set_filter(ws: ReplacementSource, *, inner: CallModelInputFilter | None = None) -> ModelInputFilter:
    """A ``RunConfig.call_model_input_filter`` that installs the context working set ``ws`` on every model call.

    Before each call it renders the instructions (as a system message) and every input item as chat
    messages, asks ``ws.replacements`` which stored tool outputs to clear, and returns a new input list
    in which each of those ``function_call_output`` items is a new item whose ``output`` is the stub
    (naming the artifact id; the model reads it back with ``read_artifact`` or ``load_artifacts``).
    Invariants: the same items in the same order, every other item the very object the SDK passed, the
    instructions unchanged; the SDK's own items are never edited, so the run's history keeps every full
    output. With a server-managed conversation (``previous_response_id``, ``conversation_id``) the input
    holds only items the server has not seen, which the working set never clears (a result is cleared only
    after the model has seen it). ``inner`` is a filter of your own that runs first. To guard what the
    model is sent, give this filter as the guard's ``inner``:
    ``guard_model_input(box.guard, inner=working_set_filter(ws))``.
    """
    working_set = check_working_set(ws)

    async def trim(data: CallModelData[Any]) -> ModelInputData:
        model_data = data.model_data
        if inner is not None:
            filtered = inner(data)
            model_data = await filtered if inspect.isawaitable(filtered) else filtered
        items = list(model_data.input)
        history = ChatHistory()
        if model_data.instructions:
            history.add("system", model_data.instructions)
        outputs = {index: _chat_item(history, item) for index, item in enumerate(items)}
        stubs = await asyncio.to_thread(history.replacements, working_set)
        if not stubs:
            return model_data
        trimmed = [
            _with_output(item, stubs[key]) if (key := outputs[index]) in stubs else item
            for index, item in enumerate(items)
        ]
        return ModelInputData(input=trimmed, instructions=model_data.instructions)

    return trim


def _chat_item(history: ChatHistory, item: Any) -> str | None:
    """Render one input item into ``history``; the id it has there if it is a tool output, else None."""
    fields = _fields(item)
    kind = fields.get("type")
    if kind == "function_call":
        history.tool_call(fields.get("call_id"), str(fields.get("name", "")), fields.get("arguments"))
        return None
    if kind == "function_call_output":
        output = fields.get("output")
        text = parts_text(output) if isinstance(output, list) else json_text(output)
        return history.tool_result(fields.get("call_id"), text)
    role = fields.get("role")
    if role in ("system", "developer", "user", "assistant") and kind in (None, "message"):
        content = fields.get("content")
        history.add("system" if role == "developer" else str(role), _content_text(content))
        return None
    history.add("assistant", json_text(fields))  # reasoning and other items: counted as text
    return None


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return parts_text([_fields(part) for part in content])
    return json_text(content) if content is not None else ""


def _fields(item: Any) -> dict[str, Any]:
    """An input item (a dict, or an SDK model object) as a plain dict, for reading only."""
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    return cast("dict[str, Any]", dump(exclude_unset=True)) if callable(dump) else {"value": str(item)}


def _with_output(item: Any, stub: str) -> Any:
    """A new item like ``item`` with ``output`` replaced (a dict stays a dict; the original is not touched)."""
    if isinstance(item, Mapping):
        return {**item, "output": stub}
    return item.model_copy(update={"output": stub})
