"""Each tool call the Toolbox dispatches as an OpenTelemetry ``execute_tool`` span (:mod:`refvault.tracing`).

GenAI semantic conventions: the span is named ``execute_tool {gen_ai.tool.name}`` and has
``gen_ai.operation.name = "execute_tool"``, ``gen_ai.tool.name`` and ``gen_ai.tool.call.id``; a failed or
refused call has ``error.type`` (the error class name or the refusal's kind) and status ERROR. The tool's
name is set only once it is known to be registered: a name the model made up never reaches a span. No
argument and no result is ever recorded. A no-op unless the application configured a tracer provider.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar

from refvault import tracing

__all__ = ["execute_tool", "execute_tool_async", "tool_failed", "tool_known"]

P = ParamSpec("P")
T = TypeVar("T")

_CURRENT: ContextVar[tracing.SpanFacts | None] = ContextVar("refvault_execute_tool", default=None)
"""The ``execute_tool`` span of the tool call this context dispatches (None: tracing is off)."""


@contextmanager
def _span(tool_call_id: object) -> Iterator[None]:
    call_id = tool_call_id if isinstance(tool_call_id, str) else None
    attributes = {"gen_ai.operation.name": tracing.EXECUTE_TOOL, "gen_ai.tool.call.id": call_id}
    with tracing.span(tracing.EXECUTE_TOOL, attributes) as facts:
        if not facts.recording:
            yield
            return
        token = _CURRENT.set(facts)
        try:
            yield
        finally:
            _CURRENT.reset(token)


def execute_tool(method: Callable[P, T]) -> Callable[P, T]:
    """Run a synchronous dispatch method (its ``tool_call_id`` keyword names the call) in an ``execute_tool`` span."""

    @functools.wraps(method)
    def traced(*args: P.args, **kwargs: P.kwargs) -> T:
        with _span(kwargs.get("tool_call_id")):
            return method(*args, **kwargs)

    return traced


def execute_tool_async(method: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Coroutine[Any, Any, T]]:
    """:func:`execute_tool` for an async dispatch method."""

    @functools.wraps(method)
    async def traced(*args: P.args, **kwargs: P.kwargs) -> T:
        with _span(kwargs.get("tool_call_id")):
            return await method(*args, **kwargs)

    return traced


def tool_known(name: str) -> None:
    """This context's call is of registered tool ``name``: the span is named for it."""
    facts = _CURRENT.get()
    if facts is not None:
        facts.rename(f"{tracing.EXECUTE_TOOL} {name}")
        facts.set("gen_ai.tool.name", name)


def tool_failed(name: str | None, error_type: str) -> None:
    """This context's call failed (or was refused) with ``error_type``; ``name``: the registered tool, if known."""
    if name is not None:
        tool_known(name)
    facts = _CURRENT.get()
    if facts is not None:
        facts.fail(error_type)
