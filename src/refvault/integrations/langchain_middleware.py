"""The context working set as a LangChain agent middleware (``langchain`` v1's ``create_agent``).

::

    from langchain.agents import create_agent
    from refvault.integrations.langchain import WorkingSetMiddleware, tools

    agent = create_agent(model, tools=tools(box, scope=scope), middleware=[WorkingSetMiddleware(ws)])

Importable as ``refvault.integrations.langchain.WorkingSetMiddleware``; this module (and with it the
``langchain`` package, beyond ``langchain-core``) is imported only when that name is first used.
Invariants, checked on the exact messages a scripted chat model receives
(``tests/integrations/test_working_set_langchain.py``):

* **The request is trimmed, the state is not.** The middleware wraps the model call
  (``wrap_model_call`` / ``awrap_model_call``) and hands the model ``request.override(messages=...)``: a
  new list in which each stored ``ToolMessage`` the working set clears is a copy whose ``content`` is the
  stub naming the artifact id. Every other message is the very object of the agent's state; the state's
  ``messages`` (what ``invoke`` returns, what a checkpointer saves) keep every full result.
* **Nothing else changes.** The system message, tools, settings and the order and number of messages
  are the request's own; tool calls keep their ids, so a provider still pairs each call with its result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
    from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
except ImportError as exc:  # without the package (LangChain's agents live in `langchain`, not `langchain-core`)
    raise ImportError(
        "refvault.integrations.langchain.WorkingSetMiddleware needs LangChain's agents: "
        "pip install 'refvault[langchain]' (it brings the langchain package)"
    ) from exc

from refvault.integrations.context_hooks import ChatHistory, ReplacementSource, check_working_set, json_text, parts_text

__all__ = ["WorkingSetMiddleware"]

Handler = Callable[[ModelRequest[Any]], ModelResponse[Any]]
AsyncHandler = Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]


class WorkingSetMiddleware(AgentMiddleware[Any, Any, Any]):
    """Installs the context working set ``ws`` on every model call of a ``create_agent`` agent.

    Before each call the request's system message and messages are rendered as chat messages;
    ``ws.replacements`` names the stored tool results to clear, and the model gets a request whose
    ``ToolMessage`` for each of them is a copy with the stub as ``content`` (naming the artifact id, which
    the model reads back with ``read_artifact`` or ``load_artifacts``). The agent's state is never edited.
    """

    def __init__(self, ws: ReplacementSource) -> None:
        super().__init__()
        self.ws = check_working_set(ws)

    def wrap_model_call(self, request: ModelRequest[Any], handler: Handler) -> Any:
        """The model call with the trimmed request (sync)."""
        history, keys = _chat(request)
        return handler(_trimmed(request, keys, history.replacements(self.ws)))

    async def awrap_model_call(self, request: ModelRequest[Any], handler: AsyncHandler) -> Any:
        """The model call with the trimmed request (async; the working set runs in a worker thread)."""
        history, keys = _chat(request)
        stubs = await asyncio.to_thread(history.replacements, self.ws)
        return await handler(_trimmed(request, keys, stubs))


def _chat(request: ModelRequest[Any]) -> tuple[ChatHistory, list[str | None]]:
    """The request as chat messages, and for each of its messages the id of its tool result (or None)."""
    history = ChatHistory()
    if request.system_message is not None:
        history.add("system", _text(request.system_message.content))
    return history, [_chat_message(history, message) for message in request.messages]


def _chat_message(history: ChatHistory, message: BaseMessage) -> str | None:
    if isinstance(message, ToolMessage):
        return history.tool_result(message.tool_call_id, _text(message.content))
    if isinstance(message, AIMessage):
        text = _text(message.content)
        if text or not message.tool_calls:
            history.add("assistant", text)
        for call in message.tool_calls:
            history.tool_call(call.get("id"), call["name"], call.get("args"))
        return None
    role = {"human": "user", "system": "system"}.get(message.type, "user")
    history.add("system" if isinstance(message, SystemMessage) else role, _text(message.content))
    return None


def _text(content: str | Sequence[Any]) -> str:
    if isinstance(content, str):
        return content
    return parts_text([part if isinstance(part, str | Mapping) else json_text(part) for part in content])


def _trimmed(request: ModelRequest[Any], keys: list[str | None], stubs: Mapping[str, str]) -> ModelRequest[Any]:
    if not stubs:
        return request
    messages = [
        message.model_copy(update={"content": stubs[key]}) if key is not None and key in stubs else message
        for message, key in zip(request.messages, keys, strict=True)
    ]
    return request.override(messages=messages)
