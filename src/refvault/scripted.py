"""A scripted agent loop: the real runtime around a model whose decisions are scripted.

No language model is reachable offline, so the demo (and ``refvault eval``) script the model's *decisions*;
everything else is the real thing. The conversation is kept in OpenAI chat-completions format (system, user,
assistant with ``tool_calls``, tool results). Each model turn (:meth:`ScriptedRun.turn`):

1. builds the request the model would be sent: ``{"model", "messages", "tools"}``, the tools being
   ``box.schemas("openai")`` plus any attached ones (e.g. an MCP gateway's);
2. passes it through ``box.guard.check`` (the LLM edge). A :class:`~refvault.errors.ContextLeak` stops it:
   the turn is recorded as *blocked* with the guard's findings (site, artifact id, matched length, arm; never
   content) and no decision is taken;
3. records the request as sent: :attr:`ScriptedRun.requests` is exactly what the model saw;
4. asks the decision function for the next assistant message, handing it only a :class:`Seen` (a JSON copy
   of that request), so a decision can use only what the model could have seen (ids come from previews);
5. dispatches each tool call through ``await box.call(...)`` (or the attached dispatcher that owns the tool
   name) in the run's scope, with the call's id as ``tool_call_id``, and appends the tool messages.

Invariants (tested in ``tests/demo/test_demo.py``):

* every recorded request passed the guard; a blocked request is never recorded, never reaches a decision;
* a tool result enters the conversation only as the observation the runtime produced (``Observation.content``,
  or an attached dispatcher's text), never as anything a tool computed beside it;
* :meth:`ScriptedRun.withhold_leaks` replaces, in the history, each tool message the guard flags with a note
  naming the artifact ids (never the content), which is how a harness continues after a blocked request.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from refvault.errors import ContextLeak, InvalidArgument

if TYPE_CHECKING:
    from refvault.context import WorkingSet
    from refvault.model import Scope
    from refvault.toolbox import Toolbox

__all__ = [
    "Attached",
    "CallRecord",
    "Decision",
    "Dispatched",
    "Reply",
    "ScriptedRun",
    "Seen",
    "ToolCall",
    "Turn",
    "answer",
    "call",
    "calls",
    "mcp_tools",
    "requests_containing",
]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the model makes. ``id`` None: the run assigns the next ``call_NN`` (as a model API would)."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None

    def message(self) -> dict[str, Any]:
        """The call as it appears in an OpenAI assistant message."""
        arguments = json.dumps(dict(self.arguments), separators=(",", ":"))
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": arguments}}


@dataclass(frozen=True, slots=True)
class Reply:
    """The model's next assistant message: text (an answer), tool calls, or both."""

    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [tool_call.message() for tool_call in self.tool_calls]
        return message


def call(name: str, /, **arguments: Any) -> ToolCall:
    """A tool call with the given arguments (its id is assigned by the run)."""
    return ToolCall(name, arguments)


def calls(*tool_calls: ToolCall, content: str | None = None) -> Reply:
    """A reply that calls tools."""
    return Reply(content, tuple(tool_calls))


def answer(text: str) -> Reply:
    """A reply that answers in text and calls nothing."""
    return Reply(text)


@dataclass(frozen=True, slots=True)
class Seen:
    """What the model saw in one turn: the recorded request (a JSON copy), and helpers to read it."""

    index: int  # into ScriptedRun.requests
    request: Mapping[str, Any]

    @property
    def messages(self) -> list[Mapping[str, Any]]:
        return list(self.request["messages"])

    def tool_names(self) -> list[str]:
        return [tool["function"]["name"] for tool in self.request.get("tools", ())]

    def results(self) -> list[Mapping[str, Any]]:
        """The tool messages after the last assistant message (the results of the model's last calls)."""
        found: list[Mapping[str, Any]] = []
        for message in reversed(self.messages):
            if message["role"] == "assistant":
                break
            if message["role"] == "tool":
                found.append(message)
        return found[::-1]

    def result(self, tool_call_id: str | None = None) -> Any:
        """The content of the last (or the given) tool result, parsed as JSON when it is JSON."""
        candidates = [m for m in self.messages if m["role"] == "tool"]
        if tool_call_id is not None:
            candidates = [m for m in candidates if m.get("tool_call_id") == tool_call_id]
        if not candidates:
            raise LookupError(f"the model saw no tool result{f' for {tool_call_id}' if tool_call_id else ''}")
        return _parsed(candidates[-1])

    def all_results(self) -> list[Any]:
        """The content of every tool result so far, in order, each parsed as JSON when it is JSON."""
        return [_parsed(m) for m in self.messages if m["role"] == "tool"]

    def last_user(self) -> str:
        for message in reversed(self.messages):
            if message["role"] == "user" and isinstance(message["content"], str):
                return str(message["content"])
        return ""


Decision = Callable[[Seen], Reply]
"""The scripted model: given what it saw, the next assistant message."""


@dataclass(frozen=True, slots=True)
class Dispatched:
    """What an attached dispatcher returns for one call: the text the model gets, and what was stored."""

    content: str
    is_error: bool = False
    artifacts: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class Attached:
    """Tools served by something other than the Toolbox (e.g. an MCP gateway): schemas and a dispatcher."""

    name: str
    tools: tuple[Mapping[str, Any], ...]  # OpenAI function tool definitions
    dispatch: Callable[[ToolCall], Awaitable[Dispatched]]

    def names(self) -> set[str]:
        return {tool["function"]["name"] for tool in self.tools}


@dataclass(slots=True)
class CallRecord:
    """One dispatched tool call: the call, who ran it, and the tool message it produced (as now in the history)."""

    call: ToolCall
    via: str  # "toolbox" or the attached dispatcher's name
    message: dict[str, Any]
    is_error: bool
    artifacts: tuple[Mapping[str, Any], ...] = ()
    withheld: bool = False

    @property
    def content(self) -> str:
        return _text(self.message)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.call.id,
            "name": self.call.name,
            "arguments": dict(self.call.arguments),
            "via": self.via,
            "result": self.content,
            "is_error": self.is_error,
            "artifacts": [dict(a) for a in self.artifacts],
            "withheld": self.withheld,
        }


@dataclass(slots=True)
class Turn:
    """One model turn: the request the model saw (or the guard's findings if it was blocked), its reply, calls."""

    number: int
    request: int | None  # index into ScriptedRun.requests; None when blocked
    blocked: tuple[Mapping[str, Any], ...] = ()
    reply: Reply | None = None
    calls: list[CallRecord] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "request": self.request,
            "blocked": [dict(f) for f in self.blocked],
            "answer": None if self.reply is None else self.reply.content,
            "tool_calls": [record.to_dict() for record in self.calls],
        }


_DEFAULT: Any = object()


class ScriptedRun:
    """An agent run over ``box`` in ``scope`` whose model decisions are given turn by turn.

    ``guard`` checks every request (default ``box.guard``; None: no check, recorded as sent).
    ``working_set`` (a :class:`~refvault.context.WorkingSet`) rewrites each request before the guard sees
    it, clearing old results the vault holds; :attr:`messages` keeps the originals.
    """

    def __init__(
        self,
        box: Toolbox,
        scope: Scope,
        *,
        run_id: str,
        system: str | None = None,
        model: str = "scripted",
        guard: Any = _DEFAULT,
        working_set: WorkingSet | None = None,
    ) -> None:
        self.box = box
        self.working_set = working_set
        self.scope = scope
        self.run_id = run_id
        self.model = model
        self.guard = box.guard if guard is _DEFAULT else guard
        self.messages: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.turns: list[Turn] = []
        self.records: list[CallRecord] = []
        self._attached: dict[str, Attached] = {}
        self._calls = 0
        if system is not None:
            self.messages.append({"role": "system", "content": system})

    # -- the conversation ----------------------------------------------------------------------------------------

    def say(self, text: str) -> None:
        """Add a user message."""
        self.messages.append({"role": "user", "content": text})

    def request(self) -> dict[str, Any]:
        """The request the next turn would send: a JSON copy of the history and the tool definitions."""
        tools = [*self.box.schemas("openai"), *(t for a in self._attached.values() for t in a.tools)]
        messages = self.messages if self.working_set is None else self.working_set.apply(self.messages)
        copied: dict[str, Any] = _json_copy({"model": self.model, "messages": messages, "tools": tools})
        return copied

    async def turn(self, decide: Decision) -> Turn:
        """One model turn (see the module docstring); a blocked request yields a turn with ``blocked`` findings."""
        turn = Turn(number=len(self.turns) + 1, request=None)
        self.turns.append(turn)
        request = self.request()
        if self.guard is not None:
            try:
                request = _json_copy(self.guard.check(request))
            except ContextLeak as leak:
                turn.blocked = tuple(_finding(f) for f in leak.findings)
                return turn
        self.requests.append(request)
        turn.request = len(self.requests) - 1
        reply = decide(Seen(turn.request, _json_copy(request)))
        reply = Reply(reply.content, tuple(self._numbered(tool_call) for tool_call in reply.tool_calls))
        turn.reply = reply
        self.messages.append(reply.message())
        extra: list[dict[str, Any]] = []
        for tool_call in reply.tool_calls:
            record, more = await self._dispatch(tool_call)
            self.messages.append(record.message)
            extra.extend(more)
            turn.calls.append(record)
            self.records.append(record)
        self.messages.extend(extra)
        return turn

    async def converse(self, text: str | None, decisions: Iterable[Decision]) -> list[Turn]:
        """Say ``text`` (if any), then take one turn per decision; stop early at a blocked turn."""
        if text is not None:
            self.say(text)
        turns = []
        for decide in decisions:
            turns.append(await self.turn(decide))
            if turns[-1].blocked:
                break
        return turns

    def withhold_leaks(self) -> list[str]:
        """Replace each tool message the guard flags with a note naming the artifacts; return their call ids."""
        if self.guard is None:
            return []
        withheld = []
        for record in self.records:
            if record.withheld:
                continue
            findings = self.guard.scan(record.message)
            if not findings:
                continue
            ids = sorted({str(f.artifact_id) for f in findings if f.artifact_id} or {"an oversized payload"})
            record.message["content"] = (
                f"[withheld by refvault: this result carried protected content of {', '.join(ids)}; "
                "it was not sent to the model]"
            )
            record.withheld = True
            withheld.append(str(record.call.id))
        return withheld

    # -- attached tools ------------------------------------------------------------------------------------------

    def attach(self, attached: Attached) -> None:
        """Serve ``attached.tools`` beside the Toolbox's (their names must not clash with any)."""
        taken = {schema["function"]["name"] for schema in self.box.schemas("openai")}
        for other in self._attached.values():
            taken |= other.names()
        clash = sorted(attached.names() & taken)
        if clash:
            raise InvalidArgument(f"attached tools {', '.join(clash)} clash with tools already offered")
        self._attached[attached.name] = attached

    def detach(self, name: str) -> None:
        self._attached.pop(name, None)

    @contextmanager
    def attached(self, attached: Attached) -> Iterator[None]:
        """Offer ``attached``'s tools for the length of the ``with`` block."""
        self.attach(attached)
        try:
            yield
        finally:
            self.detach(attached.name)

    # -- what was sent -------------------------------------------------------------------------------------------

    def sent_text(self) -> str:
        """Every recorded request as one JSON text (for scanning what the model saw)."""
        return json.dumps(self.requests, ensure_ascii=False)

    # -- dispatch ------------------------------------------------------------------------------------------------

    def _numbered(self, tool_call: ToolCall) -> ToolCall:
        if tool_call.id is not None:
            return tool_call
        self._calls += 1
        return ToolCall(tool_call.name, dict(tool_call.arguments), f"call_{self._calls:02d}")

    async def _dispatch(self, tool_call: ToolCall) -> tuple[CallRecord, list[dict[str, Any]]]:
        for attached in self._attached.values():
            if tool_call.name in attached.names():
                done = await attached.dispatch(tool_call)
                message = {"role": "tool", "tool_call_id": tool_call.id, "content": done.content}
                return CallRecord(tool_call, attached.name, message, done.is_error, done.artifacts), []
        observation = await self.box.call(
            tool_call.name,
            json.dumps(dict(tool_call.arguments)),
            scope=self.scope,
            run_id=self.run_id,
            tool_call_id=tool_call.id,
        )
        content: Any = observation.content
        extra: list[dict[str, Any]] = []
        if observation.parts:  # load_artifacts: text parts in the tool message, images in a user message after
            content = [{"type": "text", "text": p["text"]} for p in observation.parts if p["type"] == "text"]
            images = [
                {"type": "image_url", "image_url": {"url": f"data:{p['media_type']};base64,{p['data']}"}}
                for p in observation.parts
                if p["type"] == "image"
            ]
            if images:
                extra.append({"role": "user", "content": images})
        message = {"role": "tool", "tool_call_id": tool_call.id, "content": content}
        record = CallRecord(tool_call, "toolbox", message, observation.is_error, tuple(observation.artifacts))
        return record, extra


async def mcp_tools(gateway: Any, name: str = "mcp") -> Attached:
    """The upstream tools of a :class:`~refvault.integrations.mcp.gateway.Gateway`, dispatched through it.

    Results reach the model as the gateway projects them (binary parts as ``resource_link`` blocks with
    ``refvault://`` URIs), rendered as the JSON of the MCP ``CallToolResult``.
    """
    listed = await gateway.upstream_tools()
    tools = tuple(
        {
            "type": "function",
            "function": {"name": tool.name, "description": tool.description or "", "parameters": tool.input_schema},
        }
        for tool in listed
        if tool.name not in gateway.builtin
    )

    async def dispatch(tool_call: ToolCall) -> Dispatched:
        result = await gateway.call_tool(tool_call.name, dict(tool_call.arguments), request_id=tool_call.id)
        shown = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        links = tuple(
            {
                "artifact_id": block["_meta"]["artifact_id"],
                "media_type": block.get("mimeType"),
                "size": block.get("size"),
                "content_hash": "sha256:" + block["_meta"]["sha256"],
                "disclosure": block["_meta"].get("disclosure"),
            }
            for block in shown.get("content", ())
            if block.get("type") == "resource_link" and "artifact_id" in block.get("_meta", {})
        )
        return Dispatched(json.dumps(shown, ensure_ascii=False), bool(result.is_error), links)

    return Attached(name, tools, dispatch)


def _text(message: Mapping[str, Any]) -> str:
    content = message["content"]
    return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)


def _parsed(message: Mapping[str, Any]) -> Any:
    text = _text(message)
    try:
        return json.loads(text)
    except ValueError:
        return text


def _finding(finding: Any) -> dict[str, Any]:
    if hasattr(finding, "to_dict"):
        return dict(finding.to_dict())
    return {"site": getattr(finding, "site", "?"), "artifact_id": getattr(finding, "artifact_id", None)}


def _json_copy(value: Any) -> Any:
    """A deep, JSON-only copy (what a request would carry over the wire)."""
    try:
        return json.loads(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError):
        return copy.deepcopy(value)


def requests_containing(requests: Sequence[Mapping[str, Any]], needle: str) -> list[int]:
    """Indexes of the requests holding ``needle`` in any string (a literal scan, independent of the guard)."""
    return [i for i, request in enumerate(requests) if any(needle in text for text in _strings(request))]


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, keys included; tool-call argument JSON is also decoded."""
    if isinstance(value, str):
        yield value
        if value[:1] in ("{", "["):
            try:
                decoded = json.loads(value)
            except ValueError:
                return
            if not isinstance(decoded, str):
                yield from _strings(decoded)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)
