"""ADK ``before_model_callback``s: the leak guard (every request checked before the model is called) and the
context working set (older stored function responses stubbed in the request, never in the session)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from google.genai import types
from pydantic import BaseModel

from refvault.guard.contract import GuardHolder, RequestChecker, resolve_guard
from refvault.integrations.context_hooks import ChatHistory, ReplacementSource, check_working_set, json_text

if TYPE_CHECKING:
    from google.adk.agents.callback_context import CallbackContext
    from google.adk.models.llm_request import LlmRequest

__all__ = ["guard_callback", "working_set_callback"]


def guard_callback(guard: RequestChecker | GuardHolder | None) -> Callable[[CallbackContext, LlmRequest], None]:
    """A ``before_model_callback`` that checks every model request with ``guard`` and raises ContextLeak.

    ``guard`` is a :class:`~refvault.guard.LeakGuard` (or a Toolbox, for its ``box.guard``) with policy
    ``raise``. The whole request is checked (contents, system instruction, tool declarations) as
    ``llm_request.model_dump(mode="json")``. Put it last in a callback list, so nothing changes the
    request after it; ``guard.protect_scope(vault, scope_for(app, user, session))`` protects every
    sealed artifact of a session up front.
    """
    checker = resolve_guard(guard, raise_policy_for="guard_callback")

    def before_model_callback(callback_context: CallbackContext, llm_request: LlmRequest) -> None:
        checker.check(llm_request.model_dump(mode="json", exclude_none=True, fallback=_rendered))

    return before_model_callback


def _rendered(value: Any) -> Any:
    """What JSON cannot hold as is: a response-schema class as its JSON schema, anything else as text."""
    if isinstance(value, type) and issubclass(value, BaseModel):
        return value.model_json_schema()
    return str(value)


def working_set_callback(ws: ReplacementSource) -> Callable[[CallbackContext, LlmRequest], Awaitable[None]]:
    """A ``before_model_callback`` that installs the context working set ``ws`` on every model request.

    It renders the request (the system instruction, then each content: a user's text, the model's text
    and function calls, each function response's ``id`` and text) as chat messages, asks
    ``ws.replacements`` which stored function responses to clear, and puts into ``llm_request.contents``
    a new ``Content`` for each content holding one, whose cleared ``Part`` is a new part with a new
    ``FunctionResponse``: same ``id`` and ``name``, ``response={"result": <stub>}`` (the stub names the
    artifact id), no media parts. ADK builds ``contents`` afresh for every request from the session's
    events, sharing nested payloads with them: this callback replaces objects, never edits one in place,
    so the session's events keep every full response. Returns None, so the model is always called.
    Put it before :func:`guard_callback` in a callback list, so the guard checks the trimmed request.
    """
    working_set = check_working_set(ws)

    async def before_model_callback(callback_context: CallbackContext, llm_request: LlmRequest) -> None:
        history = ChatHistory()
        config = llm_request.config
        if config is not None and config.system_instruction is not None:
            history.add("system", _instruction_text(config.system_instruction))
        session_ids = _session_ids(callback_context) if _ids_missing(llm_request) else {}
        keys = [_chat_content(history, content, session_ids) for content in llm_request.contents]
        stubs = await asyncio.to_thread(history.replacements, working_set)
        if stubs:
            llm_request.contents = [
                _with_stubs(content, ids, stubs) if ids else content
                for content, ids in zip(llm_request.contents, keys, strict=True)
            ]

    return before_model_callback


def _instruction_text(instruction: Any) -> str:
    if isinstance(instruction, str):
        return instruction
    if isinstance(instruction, types.Content):
        return "\n".join(part.text or "" for part in instruction.parts or [])
    if isinstance(instruction, list):
        return "\n".join(_instruction_text(item) for item in instruction)
    if isinstance(instruction, types.Part):
        return instruction.text or ""
    return json_text(instruction)


def _ids_missing(llm_request: LlmRequest) -> bool:
    return any(
        (part.function_response is not None and not part.function_response.id)
        or (part.function_call is not None and not part.function_call.id)
        for content in llm_request.contents
        for part in content.parts or ()
    )


def _session_ids(callback_context: CallbackContext) -> dict[int, str]:
    """The id of each function call and response in the session's events, by the identity of its payload.

    For a model that does not pair calls and results by id (Gemini's), ADK strips the ids it made itself
    (``adk-…``) from the request's copies; the ``args`` and ``response`` dicts are shared with the events,
    so the id a tool was called with (the one its result was stored under) is found again by identity.
    Read only when some call or response of the request has no id.
    """
    session = getattr(callback_context, "session", None)
    found: dict[int, str] = {}
    for event in getattr(session, "events", None) or ():
        for part in (event.content.parts if event.content is not None else None) or ():
            response, call = part.function_response, part.function_call
            if response is not None and response.id and response.response is not None:
                found[id(response.response)] = response.id
            if call is not None and call.id and call.args is not None:
                found[id(call.args)] = call.id
    return found


def _known_id(given: str | None, payload: object, session_ids: dict[int, str]) -> str | None:
    """``given``, or when ADK stripped it, the id the same payload has in the session's events."""
    return given or (session_ids.get(id(payload)) if payload is not None else None)


def _chat_content(history: ChatHistory, content: types.Content, session_ids: dict[int, str]) -> dict[int, str]:
    """Render one content into ``history``; the ids its function responses have there, by part index."""
    ids: dict[int, str] = {}
    role = "assistant" if content.role == "model" else "user"
    text: list[str] = []
    for index, part in enumerate(content.parts or []):
        if part.function_response is not None:
            response = part.function_response
            call_id = _known_id(response.id, response.response, session_ids)
            ids[index] = history.tool_result(call_id, _response_text(response))
        elif part.function_call is not None:
            if text:
                history.add(role, "\n".join(text))
                text = []
            call = part.function_call
            history.tool_call(_known_id(call.id, call.args, session_ids), call.name or "", call.args or {})
        elif part.text is not None:
            text.append(part.text)
        else:
            text.append(f"[{part.inline_data.mime_type if part.inline_data else 'part'}]")
    if text:
        history.add(role, "\n".join(text))
    return ids


def _response_text(response: types.FunctionResponse) -> str:
    """What a function response says: the text of a lone ``result`` (how ADK wraps a tool's value), else JSON."""
    value = response.response or {}
    lone = set(value) == {"result"} and isinstance(value["result"], str)
    text = str(value["result"]) if lone else json_text(value)
    media = [f"[{part.inline_data.mime_type}]" for part in response.parts or [] if part.inline_data is not None]
    return "\n".join([text, *media])


def _with_stubs(content: types.Content, ids: dict[int, str], stubs: dict[str, str]) -> types.Content:
    """A new content like ``content`` whose stubbed function responses are new parts (the originals untouched)."""
    parts = list(content.parts or [])
    for index, key in ids.items():
        if key in stubs:
            part = parts[index]
            response = part.function_response
            assert response is not None  # ids holds function-response parts only
            stubbed = response.model_copy(update={"response": {"result": stubs[key]}, "parts": None})
            parts[index] = part.model_copy(update={"function_response": stubbed})
    return content.model_copy(update={"parts": parts})
