"""refvault for LangChain (``langchain-core``): Toolbox tools as ``StructuredTool``s, and a leak-guard callback.

::

    from refvault.integrations.langchain import LeakGuardCallback, tools

    lc_tools = tools(box, scope=scope)                  # your tools and the five read tools
    by_name = {tool.name: tool for tool in lc_tools}
    model = chat_model.bind_tools(lc_tools).with_config(callbacks=[LeakGuardCallback(box)])
    reply = model.invoke(messages)                      # checked before it is sent
    messages += [reply, *(by_name[call["name"]].invoke(call) for call in reply.tool_calls)]  # ToolMessages

A thin shell: dispatch, argument validation, Ref resolution, capture of returned
bytes, offload and the read tools all live in :meth:`refvault.Toolbox.call`; the
guard is :class:`refvault.guard.LeakGuard`. Invariants, each with the test in
``tests/integrations/test_langchain.py`` that shows it:

* **The Toolbox sees the model's arguments as written.** Each tool's
  ``args_schema`` is the Toolbox's own JSON schema (a dict, which LangChain
  neither validates nor rewrites), and the raw arguments of the call go to the
  Toolbox, which validates them and resolves ``Ref`` ids in the caller's
  ``scope``. An argument called ``config``, ``run_manager`` or ``callbacks``,
  which LangChain would otherwise replace with its own objects, arrives intact
  (``test_ref_tool_reads_bytes_the_model_never_sees``,
  ``test_arguments_langchain_would_overwrite_arrive_intact``).
* **Captured bytes ride on ``ToolMessage.artifact``, never in ``content``.**
  Invoked with a ``ToolCall``, a tool returns a ``ToolMessage`` whose
  ``content`` is the Toolbox observation (for captured bytes: the descriptor
  summary, an id) and whose ``artifact`` is the list of artifact summaries the
  call captured, offloaded results included (``test_binary_result_is_a_reference``,
  ``test_offloaded_result_is_read_back_through_read_artifact``,
  ``test_tool_message_artifact_carries_the_captured_ids``).
* **Errors are recoverable text.** A bad argument or an id the scope cannot
  read gives ``ToolMessage(status="error")`` with the Toolbox's error text,
  which names the id and never content (``test_bad_id_is_a_recoverable_error``).
* **Images reach the model only when it loads them.** ``load_artifacts`` is the
  one tool whose content is a list of LangChain content blocks (text, and
  ``image`` blocks with base64 data) (``test_load_artifacts_gives_text_and_image_blocks``).
* **Recovered content is data only.** Each loaded block carries ``extras={"data_only": True}``, and a
  ``read_artifact`` / ``query_artifact`` answer ``"data_only": true`` in its JSON
  (``test_recovered_content_is_marked_data_only``).
* **Every model request is checked before it is sent.** :class:`LeakGuardCallback`
  runs the guard on all messages of a chat model request (and the prompts of a
  plain LLM) in ``on_chat_model_start`` / ``on_llm_start``; ``raise_error`` makes
  LangChain let :class:`~refvault.errors.ContextLeak` out of ``invoke``,
  ``ainvoke`` and ``stream`` before the model is called, however the callback
  is attached (``config={"callbacks": [...]}``, ``model.with_config(...)``)
  (``test_sealed_canary_never_reaches_the_model``,
  ``test_leaking_request_is_stopped_before_the_model``,
  ``test_callback_raises_out_of_invoke_and_ainvoke``, ``test_callback_checks_plain_llm_prompts``).
  Messages are read as a provider sends them: tool results are sized as tool
  output, tool-call arguments as arguments, and ``ToolMessage.artifact``
  (never sent) is not checked (``test_requests_are_read_as_a_provider_sends_them``,
  ``test_tool_call_arguments_are_checked_as_arguments``). A callback cannot
  rewrite a request, so a guard with policy ``"redact"`` refuses it too
  (``test_redact_policy_guard_refuses_too``). On the async path the check runs
  before the handlers that run concurrently (tracers) see the request
  (``test_async_check_runs_before_other_handlers_see_the_request``).

* **Sync and async paths.** Each tool has both; the sync one works inside a running event loop too
  (a notebook: ``Toolbox.call_sync`` then runs an async tool in a worker thread)
  (``test_langchain_sync_invoke_inside_a_running_loop`` in ``tests/integrations/test_langchain_guard.py``).

Attach the callback after ``bind_tools``: ``model.with_config(callbacks=[...]).bind_tools(...)``
silently drops it (LangChain's ``bind_tools`` binds the underlying model afresh), while
``model.bind_tools(...).with_config(callbacks=[...])``, ``config={"callbacks": [...]}`` per call
and the model's own ``callbacks=`` field all keep it
(``test_langchain_guard_survives_how_it_is_attached`` in ``tests/integrations/test_langchain_guard.py``).

The context working set: :class:`WorkingSetMiddleware` (an agent middleware for ``langchain`` v1's
``create_agent``, in :mod:`refvault.integrations.langchain_middleware`, imported on first use, so this
module needs only ``langchain-core``) hands the model a copy of each request whose older stored tool
results are the working set's stub, and leaves the agent's state whole
(``tests/integrations/test_working_set_langchain.py``).

Identity: ``tool_call_id`` is the id of the ``ToolCall`` the tool was invoked
with; ``run_id`` is the LangChain run id of the tool call (pass
``config={"run_id": ...}`` to choose it) (``test_tool_call_and_run_ids_reach_the_toolbox``).
Protect every sealed artifact of a session up front with
``box.guard.protect_scope(vault, scope)``: the guard then stops them even if no
tool has read them yet.

An intended block is logged once, by the guard (``refvault guard: request blocked as intended ...`` on the
``refvault.guard`` logger): LangChain's own ``Error in LeakGuardCallback...`` warning, which it logs for any
exception a callback raises, is dropped for a :class:`~refvault.errors.ContextLeak` (and only for it)
(``test_intended_block_is_logged_once_without_a_callback_error`` in ``tests/integrations/test_langchain_guard.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from uuid import UUID

from refvault.errors import ContextLeak
from refvault.guard.contract import GuardHolder, RequestChecker, refuse_leaks, resolve_guard
from refvault.integrations.adapter import tool_schemas
from refvault.model import Scope
from refvault.toolbox.toolbox import Observation, Toolbox
from refvault.toolbox.values import DATA_ONLY

try:
    from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.tools import StructuredTool, ToolException
except ImportError as exc:  # without the extra (test_missing_langchain_core_names_the_extra)
    raise ImportError(
        "refvault.integrations.langchain needs langchain-core: pip install 'refvault[langchain]'"
    ) from exc

if TYPE_CHECKING:
    from refvault.integrations.langchain_middleware import WorkingSetMiddleware

__all__ = ["LeakGuardCallback", "WorkingSetMiddleware", "tools"]


def __getattr__(name: str) -> Any:
    """``WorkingSetMiddleware`` on first use: it needs the ``langchain`` package, the rest only ``langchain-core``."""
    if name == "WorkingSetMiddleware":
        from refvault.integrations.langchain_middleware import WorkingSetMiddleware

        return WorkingSetMiddleware
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _ToolboxTool(StructuredTool):
    """A ``StructuredTool`` whose function receives the call's raw arguments and its tool call id.

    LangChain would spread the arguments as keywords, overwriting any named
    ``config``, ``run_manager`` or ``callbacks``; and with a dict schema it has
    no way to inject the tool call id. ``langchain_core.tools.Tool`` overrides
    the same method for the same reason (to shape what its function receives).
    """

    def _to_args_and_kwargs(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> tuple[tuple[str, ...], dict[str, Any]]:
        return (), {"arguments": tool_input, "tool_call_id": tool_call_id}


def tools(
    box: Toolbox, *, scope: Scope, names: Iterable[str] | None = None, model_context_tokens: int | None = None
) -> list[StructuredTool]:
    """One ``StructuredTool`` per Toolbox tool (in registration order; ``names`` selects some), run in ``scope``.

    Each has the Toolbox's name, description and JSON schema, a sync (``func``)
    and an async (``coroutine``) path, and ``response_format="content_and_artifact"``.
    ``model_context_tokens`` (the chat model's context window) scales every call's caps to it
    (:mod:`refvault.integrations.adapter`).
    """
    schemas = tool_schemas(box, "openai", scope=scope, names=names, model_context_tokens=model_context_tokens)
    return [_tool(box, scope, schema["function"], model_context_tokens) for schema in schemas]


def _tool(
    box: Toolbox, scope: Scope, definition: Mapping[str, Any], model_context_tokens: int | None = None
) -> StructuredTool:
    name: str = definition["name"]
    sized = {"model_context_tokens": model_context_tokens}

    def call(arguments: str | dict[str, Any], tool_call_id: str | None, callbacks: Any = None) -> tuple[Any, Any]:
        run_id = _run_id(callbacks)
        observation = box.call_sync(name, arguments, scope=scope, run_id=run_id, tool_call_id=tool_call_id, **sized)
        return _result(observation)

    async def acall(
        arguments: str | dict[str, Any], tool_call_id: str | None, callbacks: Any = None
    ) -> tuple[Any, Any]:
        run_id = _run_id(callbacks)
        observation = await box.call(name, arguments, scope=scope, run_id=run_id, tool_call_id=tool_call_id, **sized)
        return _result(observation)

    return _ToolboxTool(
        name=name,
        description=definition["description"],
        args_schema=dict(definition["parameters"]),
        func=call,
        coroutine=acall,
        response_format="content_and_artifact",
        handle_tool_error=True,
    )


def _run_id(callbacks: Any) -> str | None:
    """The tool call's LangChain run id: LangChain hands the function the callback manager of its children."""
    if isinstance(callbacks, BaseCallbackManager) and callbacks.parent_run_id is not None:
        return str(callbacks.parent_run_id)
    return None


def _result(observation: Observation) -> tuple[Any, list[dict[str, Any]]]:
    """``(content, artifact)``; an error becomes LangChain's handled tool error (``ToolMessage.status="error"``)."""
    if observation.is_error:
        raise ToolException(observation.content)  # the Toolbox's error text: names ids and types, never content
    content: Any = [_block(part) for part in observation.parts] if observation.parts else observation.content
    return content, [dict(summary) for summary in observation.artifacts]


def _block(part: Mapping[str, Any]) -> dict[str, Any]:
    """A ``load_artifacts`` part as a LangChain standard content block (its ``data_only`` mark in ``extras``)."""
    if part.get("type") == "image":
        block = {"type": "image", "base64": part["data"], "mime_type": part["media_type"]}
    else:
        block = {"type": "text", "text": str(part.get("text", ""))}
    if part.get(DATA_ONLY) is True:
        block["extras"] = {DATA_ONLY: True}
    return block


_CALLBACK_ERROR = "Error in %s.%s callback: %s"  # what langchain_core.callbacks.manager logs for a raising handler
_GUARD_HANDLERS: set[str] = set()  # class names of the LeakGuardCallback (sub)classes in use


class _IntendedBlocks(logging.Filter):
    """Drops LangChain's warning about a LeakGuardCallback raising ContextLeak: the block is intended and the
    guard has logged it already. Every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        return not (
            record.msg == _CALLBACK_ERROR
            and isinstance(args, tuple)
            and len(args) == 3
            and args[0] in _GUARD_HANDLERS
            and str(args[2]).startswith(f"{ContextLeak.__name__}(")
        )


_INTENDED_BLOCKS = _IntendedBlocks()


class LeakGuardCallback(BaseCallbackHandler):
    """Checks every chat model request (and plain LLM prompt) with a leak guard before it is sent.

    ``guard`` is a :class:`~refvault.guard.LeakGuard`, or a Toolbox (its
    ``guard``, which learns every value the Toolbox's tools read by reference).
    Attach it with ``config={"callbacks": [...]}``, ``model.with_config(callbacks=[...])``
    or the model's ``callbacks=``. A leaking request raises
    :class:`~refvault.errors.ContextLeak` out of the model call and is not sent;
    since a callback cannot rewrite a request, a guard with policy ``"redact"``
    refuses it too.
    """

    raise_error: bool = True  # otherwise LangChain logs the ContextLeak and sends the request anyway
    run_inline: bool = True  # async: checked before the handlers that run concurrently (tracers) see it

    def __init__(self, guard: RequestChecker | GuardHolder | None) -> None:
        self.guard = resolve_guard(guard)
        _GUARD_HANDLERS.add(type(self).__name__)
        # Added once: addFilter skips a filter that is already there.
        logging.getLogger("langchain_core.callbacks.manager").addFilter(_INTENDED_BLOCKS)

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        batches = [[_rendered(message) for message in batch] for batch in messages]
        params = kwargs.get("invocation_params")
        self._check({"model": _model_name(params), "messages": batches, "invocation_params": params})

    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        params = kwargs.get("invocation_params")
        self._check({"model": _model_name(params), "prompts": list(prompts), "invocation_params": params})

    def _check(self, request: dict[str, Any]) -> None:
        refuse_leaks(self.guard, request)  # policy "redact": the redacted copy cannot be sent instead

    def __repr__(self) -> str:
        return f"LeakGuardCallback({self.guard!r})"


def _model_name(params: object) -> str | None:
    """The model a request goes to, from LangChain's invocation parameters (the guard's recipient ``model:<name>``)."""
    if not isinstance(params, Mapping):
        return None
    for key in ("model", "model_name", "model_id"):
        if isinstance(params.get(key), str):
            return str(params[key])
    return None


def _rendered(message: BaseMessage) -> dict[str, Any]:
    """A message as the guard reads it: all its fields, its role, and tool-call arguments as ``arguments``.

    The role marks tool results (so the guard's size arm applies to them); the
    ``artifact`` of a ``ToolMessage`` is left out, since LangChain never sends
    it to a model.
    """
    fields = message.model_dump(exclude={"artifact"})
    fields.setdefault("role", message.type)
    if isinstance(message, AIMessage) and message.tool_calls:
        fields["tool_calls"] = [_call(call) for call in message.tool_calls]
    return fields


def _call(call: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": call.get("id"), "name": call.get("name"), "arguments": call.get("args")}
