"""The Toolbox: a tool registry whose dispatcher resolves ``Ref`` arguments by reference.

Invariants (tested in ``tests/test_toolbox.py``):

* The model authored an id and keeps seeing an id. The raw argument JSON is
  never rewritten; schemas render every ``Ref`` as a string; observations,
  events and the trajectory carry ids only.
* Resolution happens once per dispatch, in the caller's scope, through
  :func:`refvault.toolbox.substitute.bind_refs`, into a frame that exists only
  while the tool runs. A tool without Ref parameters never touches the vault.
* A tool's failure becomes an error observation naming the exception type
  only: an exception message can carry resolved content, so it is never
  echoed. Bad Ref arguments give :class:`~refvault.errors.BadRef`, whose
  message names the id and nothing else.
* Returning ``bytes`` or an :class:`Artifact` captures it; the observation
  carries the descriptor summary, not the bytes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import logging
import threading
import time
import typing
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from typing_extensions import is_typeddict

from refvault.errors import BadRef
from refvault.model import Descriptor, Scope
from refvault.toolbox.ref import DispatchFrame, Ref, enter_frame, finish_ref_schemas
from refvault.toolbox.substitute import bind_refs
from refvault.vault.vault import Vault

__all__ = ["Artifact", "Observation", "ToolContext", "ToolEvent", "Toolbox"]

Flavor = Literal["openai", "anthropic", "gemini", "mcp"]
logger = logging.getLogger("refvault.toolbox")


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may know about its call (declare a parameter of this type; it is not in the schema)."""

    scope: Scope
    run_id: str | None
    tool_call_id: str | None
    vault: Vault


@dataclass(frozen=True, slots=True)
class Artifact:
    """Return this (or plain ``bytes``) from a tool to capture output instead of sending it to the model."""

    data: bytes
    media_type: str = "application/octet-stream"
    filename: str | None = None
    disclosure: Literal["model", "sealed"] = "model"

    def __repr__(self) -> str:
        return f"Artifact(<{len(self.data)} bytes>, media_type={self.media_type!r})"


@dataclass(frozen=True, slots=True)
class Observation:
    """What goes back to the model for one tool call."""

    tool_call_id: str | None
    content: str
    is_error: bool = False
    artifacts: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class ToolEvent:
    """One step of a run, by id only: a tool started, finished or failed."""

    kind: Literal["tool_started", "tool_finished", "tool_failed"]
    tool: str
    run_id: str | None
    tool_call_id: str | None
    refs: tuple[str, ...] = ()
    artifacts: tuple[str, ...] = ()
    error_type: str | None = None
    at: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "tool": self.tool,
            "run_id": self.run_id,
            "tool_call_id": self.tool_call_id,
            "refs": list(self.refs),
            "artifacts": list(self.artifacts),
            "error_type": self.error_type,
            "at": self.at,
        }


@dataclass(frozen=True, slots=True)
class _Tool:
    name: str
    description: str
    function: Callable[..., Any]
    arguments: type[BaseModel]
    context_parameter: str | None
    is_async: bool
    takes_refs: bool


def _summary(descriptor: Descriptor) -> dict[str, Any]:
    return {
        "artifact_id": descriptor.artifact_id,
        "media_type": descriptor.media_type,
        "size": descriptor.size,
        "content_hash": descriptor.content_hash,
        "disclosure": descriptor.disclosure,
    }


class Toolbox:
    """Register tools with ``@box.tool``, describe them with :meth:`schemas`, run them with :meth:`call`."""

    def __init__(self, vault: Vault, *, ref_pattern: bool = False, max_runs: int = 1000) -> None:
        self.vault = vault
        self.ref_pattern = ref_pattern
        self.max_runs = max_runs
        self._tools: dict[str, _Tool] = {}
        self._sinks: list[Callable[[ToolEvent], None]] = []
        self._runs: OrderedDict[str | None, list[ToolEvent]] = OrderedDict()
        self._lock = threading.Lock()

    # -- registration ----------------------------------------------------------------

    def tool(
        self, function: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None
    ) -> Any:
        """Register ``function`` as a tool (usable bare, ``@box.tool``, or with arguments)."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            tool = _build_tool(fn, name=name, description=description)
            if tool.name in self._tools:
                raise ValueError(f"a tool named {tool.name!r} is already registered")
            self._tools[tool.name] = tool
            return fn

        return register(function) if function is not None else register

    def schemas(self, flavor: Flavor = "openai", *, strict: bool = False) -> list[dict[str, Any]]:
        """Tool definitions for a model API: ``openai``, ``anthropic``, ``gemini`` or ``mcp``.

        ``strict=True`` (OpenAI) converts each parameter schema with the ``openai``
        package's own strict-mode conversion.
        """
        return [self._schema(tool, flavor, strict) for tool in self._tools.values()]

    def _schema(self, tool: _Tool, flavor: Flavor, strict: bool) -> dict[str, Any]:
        if strict:
            from openai.lib._pydantic import to_strict_json_schema

            parameters = to_strict_json_schema(tool.arguments)
        else:
            parameters = tool.arguments.model_json_schema()
        parameters = finish_ref_schemas(_untitled(parameters), pattern=self.ref_pattern)
        if flavor == "openai":
            function: dict[str, Any] = {"name": tool.name, "description": tool.description, "parameters": parameters}
            if strict:
                function["strict"] = True
            return {"type": "function", "function": function}
        if flavor == "anthropic":
            return {"name": tool.name, "description": tool.description, "input_schema": parameters}
        if flavor == "mcp":
            return {"name": tool.name, "description": tool.description, "inputSchema": parameters}
        if flavor == "gemini":
            return {"name": tool.name, "description": tool.description, "parameters": gemini_schema(parameters)}
        raise ValueError(f"unknown schema flavor {flavor!r}: use openai, anthropic, gemini or mcp")

    # -- events ----------------------------------------------------------------------

    def add_sink(self, sink: Callable[[ToolEvent], None]) -> None:
        """Call ``sink`` with every :class:`ToolEvent` (ids only)."""
        self._sinks.append(sink)

    def trajectory(self, run_id: str | None) -> list[ToolEvent]:
        """What happened in ``run_id``, in order, by id only (the last ``max_runs`` runs are kept)."""
        with self._lock:
            return list(self._runs.get(run_id, ()))

    def _record(self, event: ToolEvent) -> None:
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "%s %s run=%s call=%s refs=%s artifacts=%s error=%s",
                event.kind,
                event.tool,
                event.run_id,
                event.tool_call_id,
                ",".join(event.refs),
                ",".join(event.artifacts),
                event.error_type,
            )
        with self._lock:
            events = self._runs.get(event.run_id)
            if events is None:
                events = self._runs[event.run_id] = []
                while len(self._runs) > self.max_runs:
                    self._runs.popitem(last=False)
            events.append(event)
        for sink in self._sinks:
            sink(event)

    # -- dispatch --------------------------------------------------------------------

    async def call(
        self,
        name: str,
        arguments: str | Mapping[str, Any],
        *,
        scope: Scope,
        run_id: str | None = None,
        tool_call_id: str | None = None,
    ) -> Observation:
        """Run one tool call; always returns an observation (errors included), never raises for the tool.

        Sync tools, and the vault work around a call (resolving Refs, capturing
        returned bytes), run in a worker thread so the event loop never blocks.
        """
        tool = self._tools.get(name)
        if tool is not None and tool.takes_refs:
            prepared = await asyncio.to_thread(self._prepare, name, arguments, scope, run_id, tool_call_id)
        else:
            prepared = self._prepare(name, arguments, scope, run_id, tool_call_id)
        if isinstance(prepared, Observation):
            return prepared
        tool, frame, kwargs, refs = prepared
        failure: str | None = None
        leave = enter_frame(frame)
        try:
            if tool.is_async:
                result = await tool.function(**kwargs)
            else:
                result = await asyncio.to_thread(tool.function, **kwargs)
        except asyncio.CancelledError:
            self._record(ToolEvent("tool_failed", tool.name, run_id, tool_call_id, refs=refs, error_type="Cancelled"))
            raise
        except Exception as exc:
            failure = type(exc).__name__  # only the name: the exception may carry resolved content
        finally:
            leave()
        if failure is not None:
            return self._failed(tool.name, run_id, tool_call_id, refs, failure)
        if isinstance(result, bytes | bytearray | memoryview | Artifact):
            return await asyncio.to_thread(self._finished, tool.name, scope, run_id, tool_call_id, refs, result)
        return self._finished(tool.name, scope, run_id, tool_call_id, refs, result)

    def call_sync(
        self,
        name: str,
        arguments: str | Mapping[str, Any],
        *,
        scope: Scope,
        run_id: str | None = None,
        tool_call_id: str | None = None,
    ) -> Observation:
        """:meth:`call` for synchronous callers (an async tool runs in a private event loop, so
        ``call_sync`` must not be used from inside a running loop)."""
        prepared = self._prepare(name, arguments, scope, run_id, tool_call_id)
        if isinstance(prepared, Observation):
            return prepared
        tool, frame, kwargs, refs = prepared
        failure: str | None = None
        leave = enter_frame(frame)
        try:
            result = asyncio.run(tool.function(**kwargs)) if tool.is_async else tool.function(**kwargs)
        except Exception as exc:
            failure = type(exc).__name__  # only the name: the exception may carry resolved content
        finally:
            leave()
        if failure is not None:
            return self._failed(tool.name, run_id, tool_call_id, refs, failure)
        return self._finished(tool.name, scope, run_id, tool_call_id, refs, result)

    def _prepare(
        self,
        name: str,
        arguments: str | Mapping[str, Any],
        scope: Scope,
        run_id: str | None,
        tool_call_id: str | None,
    ) -> Observation | tuple[_Tool, DispatchFrame, dict[str, Any], tuple[str, ...]]:
        tool = self._tools.get(name)
        if tool is None:
            return self._refused(name, run_id, tool_call_id, f"unknown tool {name!r}", "UnknownTool")
        try:
            if isinstance(arguments, str):
                validated = tool.arguments.model_validate_json(arguments or "{}")
            else:
                validated = tool.arguments.model_validate(dict(arguments))
        except (ValidationError, TypeError, ValueError) as exc:
            return self._refused(name, run_id, tool_call_id, _validation_message(exc), "BadArguments")
        frame = DispatchFrame(self.vault, scope, run_id)
        refs: list[str] = []
        if tool.takes_refs:
            try:
                refs = bind_refs(validated, frame)
            except BadRef as exc:
                return self._refused(name, run_id, tool_call_id, str(exc), "BadRef")
            except ValueError as exc:
                return self._refused(name, run_id, tool_call_id, str(exc), "BadArguments")
        kwargs = {field_name: getattr(validated, field_name) for field_name in type(validated).model_fields}
        if tool.context_parameter is not None:
            kwargs[tool.context_parameter] = ToolContext(scope, run_id, tool_call_id, self.vault)
        self._record(ToolEvent("tool_started", name, run_id, tool_call_id, refs=tuple(refs)))
        return tool, frame, kwargs, tuple(refs)

    def _refused(self, name: str, run_id: str | None, call: str | None, message: str, kind: str) -> Observation:
        self._record(ToolEvent("tool_failed", name, run_id, call, error_type=kind))
        return Observation(call, f"error: {message}", is_error=True)

    def _failed(self, name: str, run_id: str | None, call: str | None, refs: tuple[str, ...], kind: str) -> Observation:
        self._record(ToolEvent("tool_failed", name, run_id, call, refs=refs, error_type=kind))
        return Observation(call, f"error: the tool raised {kind}", is_error=True)

    def _finished(
        self, name: str, scope: Scope, run_id: str | None, call: str | None, refs: tuple[str, ...], result: Any
    ) -> Observation:
        failure: str | None = None
        try:
            content, captured = self._render(result, scope, run_id, call)
        except Exception as exc:
            failure = type(exc).__name__
        if failure is not None:
            return self._failed(name, run_id, call, refs, failure)
        ids = tuple(d.artifact_id for d in captured)
        self._record(ToolEvent("tool_finished", name, run_id, call, refs=refs, artifacts=ids))
        return Observation(call, content, artifacts=tuple(_summary(d) for d in captured))

    def _render(self, result: Any, scope: Scope, run_id: str | None, call: str | None) -> tuple[str, list[Descriptor]]:
        if isinstance(result, bytes | bytearray | memoryview):
            result = Artifact(bytes(result))
        if isinstance(result, Artifact):
            descriptor = self.vault.put(
                scope,
                result.data,
                media_type=result.media_type,
                filename=result.filename,
                disclosure=result.disclosure,
                tool_call_id=call,
                run_id=run_id,
                completeness={"status": "complete", "omissions": []},
            )
            return json.dumps({"artifact": _summary(descriptor)}), [descriptor]
        if isinstance(result, str):
            return result, []
        if isinstance(result, BaseModel):
            return result.model_dump_json(), []
        return json.dumps(result, default=str), []


def _mentions_ref(annotation: Any, seen: set[int] | None = None) -> bool:
    """Whether a type annotation can hold a Ref anywhere (containers, unions, nested models)."""
    seen = set() if seen is None else seen
    if annotation is Ref:
        return True
    if id(annotation) in seen:
        return False
    seen.add(id(annotation))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return any(_mentions_ref(f.annotation, seen) for f in annotation.model_fields.values())
    if isinstance(annotation, type) and (dataclasses.is_dataclass(annotation) or is_typeddict(annotation)):
        return any(_mentions_ref(hint, seen) for hint in typing.get_type_hints(annotation).values())
    return any(_mentions_ref(arg, seen) for arg in typing.get_args(annotation))


def _validation_message(exc: Exception) -> str:
    if not isinstance(exc, ValidationError):
        return "the arguments are not a JSON object"
    if any(error["type"] in ("json_invalid", "model_type") for error in exc.errors()):
        return "the arguments are not a JSON object"
    problems = [
        f"{'.'.join(str(part) for part in error['loc']) or '(arguments)'}: {error['msg']}"
        for error in exc.errors(include_input=False, include_url=False)
    ]
    return "invalid arguments: " + "; ".join(problems[:10])


def _build_tool(fn: Callable[..., Any], *, name: str | None, description: str | None) -> _Tool:
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    context_parameter = None
    for parameter in inspect.signature(fn).parameters.values():
        annotation = hints.get(parameter.name, Any)
        if annotation is ToolContext or ToolContext in typing.get_args(annotation):
            context_parameter = parameter.name
            continue
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(f"tool {fn.__name__}: *args and **kwargs cannot be described to a model")
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[parameter.name] = (annotation, default)
    tool_name = name or fn.__name__
    arguments = create_model(f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    return _Tool(
        name=tool_name,
        description=description or inspect.getdoc(fn) or "",
        function=fn,
        arguments=arguments,
        context_parameter=context_parameter,
        is_async=inspect.iscoroutinefunction(fn),
        takes_refs=any(_mentions_ref(annotation) for annotation, _ in fields.values()),
    )


def gemini_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Rewrite a JSON schema into the OpenAPI subset Gemini accepts: refs inlined, no titles or extras."""
    definitions = schema.get("$defs", {})
    expanding: list[str] = []

    def convert(node: Any) -> Any:
        if isinstance(node, list):
            return [convert(item) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            if name in expanding:
                raise ValueError(f"the Gemini schema format cannot express the recursive type {name!r}")
            expanding.append(name)
            try:
                return convert(definitions[name])
            finally:
                expanding.pop()
        values = node.get("additionalProperties")
        if isinstance(values, dict) and values.get("description") and "description" not in node:
            # Gemini has no additionalProperties: say in words what the values are.
            node = {**node, "description": "An object whose values are each: " + values["description"]}
        options = node.get("anyOf")
        if options is not None and {"type": "null"} in options:
            rest = [option for option in options if option != {"type": "null"}]
            merged = convert(rest[0]) if len(rest) == 1 else {"anyOf": convert(rest)}
            return {**merged, "nullable": True, **_kept(node, convert)}
        return {key: _convert_value(key, value, convert) for key, value in node.items() if key in _GEMINI_KEYS}

    return dict(convert({k: v for k, v in schema.items() if k != "$defs"}))


def _untitled(node: Any) -> Any:
    """Drop pydantic's generated ``title`` keys (noise to a model); property names stay."""
    if isinstance(node, list):
        return [_untitled(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        key: (
            {name: _untitled(sub) for name, sub in value.items()}
            if key in ("properties", "$defs")
            else _untitled(value)
        )
        for key, value in node.items()
        if key != "title"
    }


def _convert_value(key: str, value: Any, convert: Callable[[Any], Any]) -> Any:
    if key == "properties" and isinstance(value, dict):
        return {name: convert(sub) for name, sub in value.items()}  # property names are not schema keys
    return convert(value)


_GEMINI_KEYS = frozenset(
    {"type", "format", "description", "nullable", "enum", "properties", "required", "items", "anyOf",
     "minItems", "maxItems", "minimum", "maximum", "pattern"}
)  # fmt: skip


def _kept(node: dict[str, Any], convert: Callable[[Any], Any]) -> dict[str, Any]:
    return {
        key: _convert_value(key, value, convert)
        for key, value in node.items()
        if key in _GEMINI_KEYS and key != "anyOf"
    }
