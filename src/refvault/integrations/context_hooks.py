"""The context working set in every framework: the half of each adapter's hook that all of them share.

Each framework has its own extension point that sees a model request before it is sent (OpenAI Agents'
``call_model_input_filter``, Pydantic AI's capabilities, a LangChain agent middleware, ADK's
``before_model_callback``). Each adapter's hook does the same three things:

1. render the framework's request history as OpenAI Chat-style messages with a :class:`ChatHistory`
   (roles, the assistant's tool calls with their ids, names and arguments, each tool result's
   ``tool_call_id`` and text; images and other parts become short text placeholders, counted as text);
2. ask the working set which tool results to replace: ``ws.replacements(chat)``, a map
   ``{tool_call_id: stub}`` (:class:`~refvault.context.WorkingSet`; the stub is a JSON text naming the
   artifact id and how to bring it back);
3. hand the model a copy of the native history with exactly those tool results' content swapped for the
   stub, nothing else changed.

Invariants every hook keeps (each adapter's tests check them on the exact messages a scripted model gets):

* **Only stored tool results change.** Message count, order, roles, tool calls and every non-tool message
  reach the model as the framework built them; a tool result not in the map is untouched.
* **The run's history keeps the originals.** A hook never edits the framework's stored history or any
  object in it in place: it builds new messages (and new parts) for the ones it changes, so the run's
  history (``result.new_items``, ``all_messages()``, the graph state, the session events) still holds every
  full result, and a cleared result can be read back by its artifact id.
* **Deterministic.** The same history gives the same rendering, so the same stubs (the working set is
  deterministic for the same input).

A tool call or result without an id (one a hook could not recover) gets a positional id (``_rv_call_<n>``,
``_rv_<n>``) that no framework generates, so every call and result in the rendering has an id; such a result
is never found stored under it, so it is never cleared (unless it is a refvault observation naming its
artifacts).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from refvault.errors import InvalidArgument

__all__ = ["ChatHistory", "ReplacementSource", "check_working_set", "json_text", "parts_text"]


@runtime_checkable
class ReplacementSource(Protocol):
    """What a hook needs of a working set: :meth:`refvault.context.WorkingSet.replacements`."""

    def replacements(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        """``{tool_call_id: new content}`` for the tool results of ``messages`` to replace with a stub."""
        ...


def check_working_set(ws: object) -> ReplacementSource:
    """``ws`` itself if it has ``replacements(messages)``; else :class:`~refvault.errors.InvalidArgument`."""
    if not isinstance(ws, ReplacementSource):
        raise InvalidArgument("ws must be a refvault.context.WorkingSet (an object with replacements(messages))")
    return ws


def json_text(value: Any) -> str:
    """A value as the text a model would read: a string as itself, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_placeholder)


def parts_text(parts: Sequence[Any]) -> str:
    """Content parts as one text: each part's ``text``, and a placeholder for an image, file or audio part."""
    return "\n".join(_part_text(part) for part in parts)


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, Mapping):
        text = part.get("text")
        if isinstance(text, str):
            return text
        kind = str(part.get("type", "part"))
        if any(word in kind for word in ("image", "file", "audio")):
            return f"[{kind}]"
        return json_text(dict(part))
    return _placeholder(part)


def _placeholder(value: Any) -> str:
    """A short stand-in for what is not text (bytes, media): it is counted, never rendered."""
    if isinstance(value, bytes | bytearray | memoryview):
        return f"[{len(value)} bytes]"
    media_type = getattr(value, "media_type", None) or getattr(value, "mime_type", None)
    return f"[{media_type or type(value).__name__}]"


class ChatHistory:
    """A request history rendered as OpenAI Chat-style messages, in order, as a working set reads them.

    Consecutive tool calls (and the assistant text right before them) form one assistant message, as in the
    Chat Completions API. :meth:`tool_result` returns the id the result has in the rendering (the one
    given, or a positional ``_rv_<n>`` when there is none), the key to look it up in the replacements.
    """

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self._anonymous = 0
        self._anonymous_calls = 0

    def add(self, role: str, content: str | None) -> None:
        """A system, user or assistant message of text."""
        self.messages.append({"role": role, "content": content})

    def tool_call(self, call_id: str | None, name: str, arguments: Any) -> None:
        """An assistant tool call; joins the assistant message before it unless a tool result came between."""
        if not call_id:
            self._anonymous_calls += 1
            call_id = f"_rv_call_{self._anonymous_calls}"
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": json_text(arguments if arguments is not None else {})},
        }
        last = self.messages[-1] if self.messages else None
        if last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).append(call)
        else:
            self.messages.append({"role": "assistant", "content": None, "tool_calls": [call]})

    def tool_result(self, call_id: str | None, content: str) -> str:
        """A tool result; returns its id in the rendering."""
        if not call_id:
            self._anonymous += 1
            call_id = f"_rv_{self._anonymous}"
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
        return call_id

    def replacements(self, ws: ReplacementSource) -> dict[str, str]:
        """The working set's stubs for this history (only ids of tool results in it)."""
        ids = {message["tool_call_id"] for message in self.messages if message["role"] == "tool"}
        return {key: value for key, value in ws.replacements(self.messages).items() if key in ids}
