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
* **Offload.** With the built-in read tools registered (the default), a
  result estimated above ``offload_tokens`` (20,000 by default, per tool if
  given) is captured with ``disclosure="model"`` and the observation is a
  bounded, type-aware preview that says what it covers and omits and how to
  read more. Output of a sealed input stays sealed, and its preview shows
  type and size only. If capture fails, the observation says so and carries a
  bounded truncation marked incomplete (``tests/test_offload.py``).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
import json
import logging
import threading
import time
import typing
from collections import OrderedDict, deque
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from typing_extensions import is_typeddict

from refvault.errors import BadRef, RefvaultError
from refvault.model import Descriptor, Scope
from refvault.toolbox.builtin import LoadedContent
from refvault.toolbox.offload import offload
from refvault.toolbox.ref import DispatchFrame, Ref, enter_frame, finish_ref_schemas
from refvault.toolbox.substitute import bind_refs

if TYPE_CHECKING:
    from refvault.client import VaultLike

__all__ = ["Artifact", "Observation", "ToolContext", "ToolEvent", "Toolbox"]

Flavor = Literal["openai", "anthropic", "gemini", "mcp"]
logger = logging.getLogger("refvault.toolbox")

DEFAULT_OFFLOAD_TOKENS = 20_000
DEFAULT_PREVIEW_CHARS = 4_000
MAX_PROTECTED_IDS = 100_000


class _Default:
    """Marks an argument left at the Toolbox's default."""

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Any = _Default()


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may know about its call (declare a parameter of this type; it is not in the schema)."""

    scope: Scope
    run_id: str | None
    tool_call_id: str | None
    vault: VaultLike


@dataclass(frozen=True, slots=True)
class Artifact:
    """Return this (or plain ``bytes``) from a tool to capture output instead of sending it to the model."""

    data: bytes
    media_type: str = "application/octet-stream"
    filename: str | None = None
    disclosure: Literal["model", "sealed"] | None = None  # None: sealed if any Ref input was sealed

    def __repr__(self) -> str:
        return f"Artifact(<{len(self.data)} bytes>, media_type={self.media_type!r})"


@dataclass(frozen=True, slots=True)
class Observation:
    """What goes back to the model for one tool call."""

    tool_call_id: str | None
    content: str
    is_error: bool = False
    artifacts: tuple[Mapping[str, Any], ...] = ()
    parts: tuple[Mapping[str, Any], ...] = ()  # model content beyond text (load_artifacts: text and image parts)


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
    takes_refs: bool  # only decides whether resolution runs off the event loop
    fields: tuple[str, ...]
    offload_tokens: int | None = None  # None: never offload this tool's results
    builtin: bool = False  # refvault's own read tools: their refvault errors are shown (written content-free)


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

    def __init__(
        self,
        vault: VaultLike,
        *,
        ref_pattern: bool = False,
        max_runs: int = 1000,
        max_events_per_run: int = 10_000,
        read_tools: bool = True,
        offload_tokens: int | None = DEFAULT_OFFLOAD_TOKENS,
        preview_chars: int = DEFAULT_PREVIEW_CHARS,
        guard: Any = DEFAULT,
    ) -> None:
        """``read_tools`` registers describe/list/read/query/load_artifacts; offloading needs them.

        ``offload_tokens`` is the default threshold above which a result is
        offloaded (None: never); ``preview_chars`` bounds each preview.
        ``guard`` is the :class:`~refvault.guard.LeakGuard` that learns every
        value a tool reads by reference (default: one made on first use;
        None: none). Check outgoing model requests with ``box.guard.check``.
        """
        if offload_tokens is not None and (not isinstance(offload_tokens, int) or offload_tokens < 1):
            raise ValueError("offload_tokens must be a positive integer or None")
        if not isinstance(preview_chars, int) or isinstance(preview_chars, bool) or not 256 <= preview_chars <= 200_000:
            raise ValueError("preview_chars must be an integer between 256 and 200,000")
        self.vault = vault
        self.ref_pattern = ref_pattern
        self.max_runs = max_runs
        self.max_events_per_run = max_events_per_run
        self.read_tools = read_tools
        self.offload_tokens = offload_tokens if read_tools else None
        self.preview_chars = preview_chars
        self._guard = guard
        self._protected: OrderedDict[str, None] = OrderedDict()  # ids protected whole (bounded)
        self._tools: dict[str, _Tool] = {}
        self._sinks: list[Callable[[ToolEvent], None]] = []
        self._runs: OrderedDict[str | None, deque[ToolEvent]] = OrderedDict()
        self._lock = threading.Lock()
        if read_tools:
            from refvault.toolbox.builtin import BUILTIN_TOOLS

            for function in BUILTIN_TOOLS:
                self._tools[function.__name__] = dataclasses.replace(
                    _build_tool(function, name=None, description=None, context="ctx"), builtin=True
                )

    @property
    def guard(self) -> Any:
        """The leak guard protecting what this Toolbox's tools read by reference (None if disabled)."""
        if self._guard is DEFAULT:
            with self._lock:
                if self._guard is DEFAULT:
                    from refvault.guard import LeakGuard

                    self._guard = LeakGuard()
        return self._guard

    def _protect(self, artifact_id: str, data: bytes, whole: bool) -> None:
        """Protect a value a tool read; an artifact protected whole once is skipped after (artifacts are immutable)."""
        guard = self.guard
        if guard is None:
            return
        with self._lock:
            if whole and artifact_id in self._protected:
                self._protected.move_to_end(artifact_id)
                return
        guard.protect(artifact_id, data)
        if whole:
            with self._lock:
                self._protected[artifact_id] = None
                while len(self._protected) > MAX_PROTECTED_IDS:
                    self._protected.popitem(last=False)

    def instructions(self, scope: Scope) -> str:
        """System-instruction text listing the artifacts ``load_artifacts`` can load in ``scope``."""
        from refvault.toolbox.builtin import instructions

        return instructions(self.vault, scope)

    # -- registration ----------------------------------------------------------------

    def tool(
        self,
        function: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        offload_tokens: int | None = DEFAULT,
    ) -> Any:
        """Register ``function`` as a tool (usable bare, ``@box.tool``, or with arguments).

        ``offload_tokens`` overrides the Toolbox's offload threshold for this
        tool (None: never offload its results).
        """
        if offload_tokens is not DEFAULT and offload_tokens is not None:
            if not isinstance(offload_tokens, int) or offload_tokens < 1:
                raise ValueError("offload_tokens must be a positive integer or None")
            if not self.read_tools:
                raise ValueError("offloading needs the read tools: create the Toolbox with read_tools=True")

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            tool = _build_tool(fn, name=name, description=description)
            threshold = self.offload_tokens if offload_tokens is DEFAULT else offload_tokens
            tool = dataclasses.replace(tool, offload_tokens=threshold)
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

    def _parameters(self, tool: _Tool, *, strict: bool) -> dict[str, Any]:
        if strict:
            from openai.lib._pydantic import to_strict_json_schema

            parameters = to_strict_json_schema(tool.arguments)
        else:
            parameters = tool.arguments.model_json_schema()
        return dict(finish_ref_schemas(_untitled(parameters), pattern=self.ref_pattern))

    def _schema(self, tool: _Tool, flavor: Flavor, strict: bool) -> dict[str, Any]:
        requested = strict
        parameters = self._parameters(tool, strict=False)
        if strict:
            strict_parameters = self._parameters(tool, strict=True)
            # OpenAI strict mode needs additionalProperties false on every object, so a
            # free-form mapping (dict[str, ...]) cannot be strict: that tool stays non-strict.
            strict = _strict_expressible(strict_parameters)
            if strict:
                parameters = strict_parameters
        if flavor == "openai":
            function: dict[str, Any] = {"name": tool.name, "description": tool.description, "parameters": parameters}
            if requested:
                function["strict"] = strict
            return {"type": "function", "function": function}
        if flavor == "anthropic":
            return {"name": tool.name, "description": tool.description, "input_schema": parameters}
        if flavor == "mcp":
            return {"name": tool.name, "description": tool.description, "inputSchema": parameters}
        if flavor == "gemini":
            declaration: dict[str, Any] = {"name": tool.name, "description": tool.description}
            if parameters.get("properties"):  # Gemini refuses an object schema without properties
                declaration["parameters"] = gemini_schema(parameters, tool=tool.name)
            return declaration
        raise ValueError(f"unknown schema flavor {flavor!r}: use openai, anthropic, gemini or mcp")

    # -- events ----------------------------------------------------------------------

    def add_sink(self, sink: Callable[[ToolEvent], None]) -> None:
        """Call ``sink`` with every :class:`ToolEvent` (ids only)."""
        self._sinks.append(sink)

    def trajectory(self, run_id: str | None) -> list[ToolEvent]:
        """What happened in ``run_id``, in order, by id only.

        Bounded: the ``max_runs`` most recently active runs are kept, each with
        its last ``max_events_per_run`` events.
        """
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
                events = self._runs[event.run_id] = deque(maxlen=self.max_events_per_run)
                while len(self._runs) > self.max_runs:
                    self._runs.popitem(last=False)
            self._runs.move_to_end(event.run_id)
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
        """Run one tool call and return its observation; a tool's own failure is an error observation.

        Sync tools, and the vault work around a call (resolving Refs, capturing
        returned bytes), run in a worker thread so the event loop never blocks.
        A tool that raises something other than an ``Exception`` (cancellation,
        ``KeyboardInterrupt``) has it re-raised as a fresh, empty exception of
        the same type: nothing the tool put in it leaves the dispatcher.
        """
        tool = self._tools.get(name)
        if tool is not None and tool.takes_refs:
            prepared = await asyncio.to_thread(self._prepare, name, arguments, scope, run_id, tool_call_id)
        else:
            prepared = self._prepare(name, arguments, scope, run_id, tool_call_id)
        if isinstance(prepared, Observation):
            return prepared
        self._started(prepared)
        leave = enter_frame(prepared.frame)
        try:
            if prepared.tool.is_async:
                outcome = await _invoke_async(prepared.tool.function, prepared.kwargs)
            else:
                outcome = await asyncio.to_thread(_invoke_sync, prepared.tool.function, prepared.kwargs)
            if outcome.awaitable is not None:  # a sync wrapper handed back a coroutine: run it in the frame
                outcome = await _invoke_async(lambda: outcome.awaitable, {})
        except asyncio.CancelledError:  # the caller cancelled while a sync tool ran in its thread
            outcome = _Outcome(failure="CancelledError", fatal=asyncio.CancelledError())
        finally:
            leave()
        if _needs_vault(outcome.value) or _may_offload(prepared.tool, outcome):
            return await asyncio.to_thread(self._conclude, prepared, outcome)
        return self._conclude(prepared, outcome)

    def call_sync(
        self,
        name: str,
        arguments: str | Mapping[str, Any],
        *,
        scope: Scope,
        run_id: str | None = None,
        tool_call_id: str | None = None,
    ) -> Observation:
        """:meth:`call` for synchronous callers. An async tool runs in a private event loop: in this
        thread, or (when this thread already runs an event loop, as in a notebook) in a worker thread
        that carries this thread's context."""
        prepared = self._prepare(name, arguments, scope, run_id, tool_call_id)
        if isinstance(prepared, Observation):
            return prepared
        self._started(prepared)
        leave = enter_frame(prepared.frame)
        try:
            if prepared.tool.is_async:
                outcome = _run_private(lambda: _invoke_async(prepared.tool.function, prepared.kwargs))
            else:
                outcome = _invoke_sync(prepared.tool.function, prepared.kwargs)
            if outcome.awaitable is not None:
                pending = outcome.awaitable
                outcome = _run_private(lambda: _invoke_async(lambda: pending, {}))
        finally:
            leave()
        return self._conclude(prepared, outcome)

    def _prepare(
        self,
        name: str,
        arguments: str | Mapping[str, Any],
        scope: Scope,
        run_id: str | None,
        tool_call_id: str | None,
    ) -> Observation | _Prepared:
        tool = self._tools.get(name)
        if tool is None:
            shown = name if len(name) <= 64 else name[:64] + "…"
            return self._refused(shown, run_id, tool_call_id, f"unknown tool {shown!r}", "UnknownTool")
        try:
            if isinstance(arguments, str):
                validated = tool.arguments.model_validate_json(arguments or "{}")
            else:
                validated = tool.arguments.model_validate(dict(arguments))
        except (ValidationError, TypeError, ValueError) as exc:
            return self._refused(name, run_id, tool_call_id, _validation_message(exc), "BadArguments")
        frame = DispatchFrame(self.vault, scope, run_id, None if self._guard is None else self._protect)
        try:
            refs = bind_refs(validated, frame)
        except BadRef as exc:
            return self._refused(name, run_id, tool_call_id, str(exc), "BadRef")
        except ValueError as exc:
            return self._refused(name, run_id, tool_call_id, str(exc), "BadArguments")
        kwargs = {field_name: getattr(validated, field_name) for field_name in tool.fields}
        if tool.context_parameter is not None:
            kwargs[tool.context_parameter] = ToolContext(scope, run_id, tool_call_id, self.vault)
        sealed = any(frame.descriptor(ref).disclosure == "sealed" for ref in refs)
        return _Prepared(tool, frame, kwargs, tuple(refs), scope, run_id, tool_call_id, sealed)

    def _started(self, prepared: _Prepared) -> None:
        self._record(
            ToolEvent("tool_started", prepared.tool.name, prepared.run_id, prepared.tool_call_id, refs=prepared.refs)
        )

    def _refused(self, name: str, run_id: str | None, call: str | None, message: str, kind: str) -> Observation:
        self._record(ToolEvent("tool_failed", name, run_id, call, error_type=kind))
        return Observation(call, f"error: {message}", is_error=True)

    def _conclude(self, prepared: _Prepared, outcome: _Outcome) -> Observation:
        """Turn what the tool did into an event and an observation; re-raise a fatal exception last."""
        if outcome.failure is None:
            try:
                content, captured, parts = self._render(outcome, prepared)
            except Exception as exc:
                outcome = _Outcome(failure=type(exc).__name__)
            else:
                ids = tuple(d.artifact_id for d in captured)
                self._record(
                    ToolEvent(
                        "tool_finished",
                        prepared.tool.name,
                        prepared.run_id,
                        prepared.tool_call_id,
                        refs=prepared.refs,
                        artifacts=ids,
                    )
                )
                return Observation(
                    prepared.tool_call_id, content, artifacts=tuple(_summary(d) for d in captured), parts=parts
                )
        self._record(
            ToolEvent(
                "tool_failed",
                prepared.tool.name,
                prepared.run_id,
                prepared.tool_call_id,
                refs=prepared.refs,
                error_type=outcome.failure,
            )
        )
        if outcome.fatal is not None:
            raise outcome.fatal
        message = outcome.message or (outcome.refvault_message if prepared.tool.builtin else None)
        message = message or f"the tool raised {outcome.failure}"
        return Observation(prepared.tool_call_id, f"error: {message}", is_error=True)

    def _render(self, outcome: _Outcome, prepared: _Prepared) -> tuple[str, list[Descriptor], tuple[Any, ...]]:
        result = outcome.value
        if isinstance(result, bytes | bytearray | memoryview):
            result = Artifact(bytes(result))
        if isinstance(result, Artifact):
            # Output derived from a sealed input stays sealed unless the tool says otherwise.
            disclosure = result.disclosure or ("sealed" if prepared.sealed_inputs else "model")
            descriptor = self.vault.put(
                prepared.scope,
                result.data,
                media_type=result.media_type,
                filename=result.filename,
                disclosure=disclosure,
                tool_call_id=prepared.tool_call_id,
                run_id=prepared.run_id,
                completeness={"status": "complete", "omissions": []},
            )
            return json.dumps({"artifact": _summary(descriptor)}), [descriptor], ()
        if isinstance(result, LoadedContent):
            guard = self.guard
            if guard is not None:  # the model asked for these model-disclosed images: not refused for their size
                for part in result.parts:
                    if part.get("type") == "image":
                        guard.exempt_payload(part["data"])
            return _ENCODER.encode(result.summary), [], result.parts
        text = _encoded(outcome)
        threshold = prepared.tool.offload_tokens
        if threshold is None or 2 * len(text) <= threshold:  # the estimate never exceeds 2 tokens per character
            return text, [], ()
        from refvault.read.previews import estimate_tokens

        if estimate_tokens(text) <= threshold:
            return text, [], ()
        content, captured = offload(
            self.vault,
            prepared.scope,
            text,
            result,
            sealed=prepared.sealed_inputs,
            tool_call_id=prepared.tool_call_id,
            run_id=prepared.run_id,
            preview_chars=self.preview_chars,
            source=prepared.tool.name,
        )
        return content, captured, ()


def _run_private(work: Callable[[], Coroutine[Any, Any, _Outcome]]) -> _Outcome:
    """``asyncio.run(work())``; in a worker thread, in this thread's context, if this thread runs a loop already."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work())
    context = contextvars.copy_context()  # the dispatch frame lives in a context variable
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(context.run, lambda: asyncio.run(work())).result()


def _encoded(outcome: _Outcome) -> str:
    """The result as the model would see it (cached on the outcome: it may be needed twice)."""
    if outcome.text is None:
        result = outcome.value
        if isinstance(result, str):
            outcome.text = result
        elif inspect.isgenerator(result) or inspect.isasyncgen(result):
            raise TypeError("a tool must return a value, not a generator")
        else:
            outcome.text = _ENCODER.encode(result.model_dump() if isinstance(result, BaseModel) else result)
    return outcome.text


def _may_offload(tool: _Tool, outcome: _Outcome) -> bool:
    """Whether concluding may capture (so the async path moves it off the event loop)."""
    if tool.offload_tokens is None or outcome.failure is not None:
        return False
    try:
        return 2 * len(_encoded(outcome)) > tool.offload_tokens
    except Exception:
        return False  # _render reports the failure


@dataclass(frozen=True, slots=True)
class _Prepared:
    tool: _Tool
    frame: DispatchFrame
    kwargs: dict[str, Any]
    refs: tuple[str, ...]
    scope: Scope
    run_id: str | None
    tool_call_id: str | None
    sealed_inputs: bool


@dataclass(slots=True)
class _Outcome:
    """What running a tool produced: a value, or the name of what it raised (never the exception)."""

    value: Any = None
    failure: str | None = None
    message: str | None = None  # shown to the model; only for errors whose text is known safe
    fatal: BaseException | None = None  # a fresh, empty exception to re-raise (not an Exception)
    awaitable: Any = None
    refvault_message: str | None = None  # a RefvaultError's message: shown for built-in tools only
    text: str | None = None  # the encoded result, once computed


def _fresh(exc: BaseException) -> BaseException:
    """An empty exception of the same kind, carrying nothing from the original."""
    if isinstance(exc, asyncio.CancelledError):
        return asyncio.CancelledError()
    try:
        return type(exc)()
    except Exception:
        return KeyboardInterrupt() if isinstance(exc, KeyboardInterrupt) else SystemExit(1)


def _caught(exc: BaseException) -> _Outcome:
    if isinstance(exc, BadRef):  # a Ref that stopped resolving mid-call: the message names only the id
        return _Outcome(failure="BadRef", message=str(exc))
    if isinstance(exc, RefvaultError):
        return _Outcome(failure=type(exc).__name__, refvault_message=str(exc))
    if isinstance(exc, Exception):
        return _Outcome(failure=type(exc).__name__)
    return _Outcome(failure=type(exc).__name__, fatal=_fresh(exc))


def _invoke_sync(function: Callable[..., Any], kwargs: dict[str, Any]) -> _Outcome:
    """Run a sync tool; whatever it raises becomes an :class:`_Outcome` (nothing crosses a thread or future)."""
    try:
        value = function(**kwargs)
    except BaseException as exc:
        return _caught(exc)
    if inspect.isawaitable(value):
        return _Outcome(awaitable=value)
    return _Outcome(value=value)


async def _invoke_async(function: Callable[..., Any], kwargs: dict[str, Any]) -> _Outcome:
    try:
        value = await function(**kwargs)
    except BaseException as exc:
        return _caught(exc)
    return _Outcome(value=value)


def _needs_vault(value: Any) -> bool:
    return isinstance(value, bytes | bytearray | memoryview | Artifact)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        raise TypeError("bytes inside a result: return them on their own, or as refvault.Artifact")
    return str(value)


_ENCODER = json.JSONEncoder(default=_json_default, separators=(",", ":"), ensure_ascii=False)


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


# Pydantic error types whose message is a fixed template that never contains the input.
_TEMPLATED_ERRORS = frozenset(
    {"missing", "extra_forbidden", "string_type", "int_type", "int_parsing", "float_type", "float_parsing",
     "bool_type", "bool_parsing", "list_type", "tuple_type", "set_type", "dict_type", "model_type",
     "model_attributes_type", "too_short", "too_long", "greater_than", "greater_than_equal", "less_than",
     "less_than_equal", "literal_error", "enum", "string_too_short", "string_too_long", "none_required",
     "int_from_float", "is_instance_of", "json_type", "dataclass_type", "multiple_of"}
)  # fmt: skip


def _validation_message(exc: Exception) -> str:
    """Where each argument is wrong and how, never what the model sent."""
    if not isinstance(exc, ValidationError):
        return "the arguments are not a JSON object"
    errors = exc.errors(include_input=False, include_url=False, include_context=False)
    if any(error["type"] in ("json_invalid", "model_type") and not error["loc"] for error in errors):
        return "the arguments are not a JSON object"
    problems = []
    for error in errors[:10]:
        where = ".".join(str(part)[:64] for part in error["loc"]) or "(arguments)"
        what = error["msg"] if error["type"] in _TEMPLATED_ERRORS else f"invalid value ({error['type']})"
        problems.append(f"{where}: {what}")
    return "invalid arguments: " + "; ".join(problems)


def _build_tool(
    fn: Callable[..., Any], *, name: str | None, description: str | None, context: str | None = None
) -> _Tool:
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    context_parameter = None
    for parameter in inspect.signature(fn).parameters.values():
        annotation = hints.get(parameter.name, Any)
        if parameter.name == context or annotation is ToolContext or ToolContext in typing.get_args(annotation):
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
        fields=tuple(fields),
    )


def _strict_expressible(node: Any) -> bool:
    """Whether OpenAI strict mode can take this schema: every object closed (additionalProperties false)."""
    if isinstance(node, list):
        return all(_strict_expressible(item) for item in node)
    if not isinstance(node, dict):
        return True
    if node.get("type") == "object" and node.get("additionalProperties") is not False:
        return False
    return all(_strict_expressible(value) for value in node.values())


def gemini_schema(schema: dict[str, Any], *, tool: str = "") -> dict[str, Any]:
    """Rewrite a JSON schema into the OpenAPI subset Gemini accepts: refs inlined, no titles or extras.

    Tuples become arrays of their (single) item type, non-string enums are
    described in words, and a parameter of no type at all (``Any``) is refused.
    """
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
        prefix = node.get("prefixItems")
        if prefix and "items" not in node:
            kinds = {json.dumps(item, sort_keys=True) for item in prefix}
            node = {**node, "items": prefix[0] if len(kinds) == 1 else {"anyOf": prefix}}
        enum = node.get("enum")
        if enum is not None and not all(isinstance(value, str) for value in enum):
            described = "One of: " + ", ".join(json.dumps(value) for value in enum)
            node = {k: v for k, v in node.items() if k != "enum"}
            node["description"] = f"{node['description']} ({described})" if node.get("description") else described
        if not node or ("type" not in node and not {"anyOf", "$ref", "properties"} & set(node)):
            raise ValueError(f"tool {tool!r}: Gemini needs a type for every parameter (Any has none)")
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
