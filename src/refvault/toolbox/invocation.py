"""Running one tool function: what it produced, as an :class:`Outcome` that keeps nothing it raised.

A tool's failure is kept as the name of its exception type only (an exception
message can carry resolved content); a ``BadRef`` keeps its message (it names
the id and nothing else) and a refvault error keeps its message for the
built-in read tools. Something other than an ``Exception`` (cancellation,
``KeyboardInterrupt``) is re-raised later as a fresh, empty exception of the
same type (:func:`fresh`). :class:`Prepared` is a validated call, ready to run.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel

from refvault.errors import BadRef, InvalidType, RefvaultError
from refvault.limits import DEFAULT_CAPS, ModelCaps
from refvault.model import Scope
from refvault.toolbox.definition import Tool
from refvault.toolbox.ref import DispatchFrame
from refvault.toolbox.remote import RemoteLink
from refvault.toolbox.taint import ContextReads
from refvault.toolbox.values import Artifact

__all__ = [
    "ENCODER",
    "Outcome",
    "Prepared",
    "caught",
    "encoded",
    "fresh",
    "invoke_async",
    "invoke_sync",
    "may_offload",
    "needs_vault",
    "run_private",
    "scrubbed",
]


@dataclass(frozen=True, slots=True)
class Prepared:
    """A validated tool call whose Refs are bound into its frame: ready to run."""

    tool: Tool
    frame: DispatchFrame
    kwargs: dict[str, Any]
    refs: tuple[str, ...]
    scope: Scope
    run_id: str | None
    tool_call_id: str | None
    sealed_inputs: bool
    labels: frozenset[str] = frozenset()  # the union of the inputs' labels (refvault.toolbox.taint)
    reads: ContextReads | None = None  # what the tool read through its ToolContext (its labels join these)
    read_ids: tuple[str, ...] = ()  # the artifacts it read there, once the call is over (see tainted)
    caps: ModelCaps = DEFAULT_CAPS  # the caps of this call's model (its preview size: Toolbox._render)
    links: tuple[RemoteLink, ...] = ()  # the capability links issued for this call (revoked when it ends)


def tainted(prepared: Prepared) -> Prepared:
    """``prepared`` once its tool ran: the labels and ids of what it read through its ToolContext added."""
    if prepared.reads is None or not prepared.reads.read:
        return prepared
    read = tuple(prepared.reads.read)
    return replace(prepared, labels=prepared.labels | prepared.reads.labels(), read_ids=read)


@dataclass(slots=True)
class Outcome:
    """What running a tool produced: a value, or the name of what it raised (never the exception)."""

    value: Any = None
    failure: str | None = None
    message: str | None = None  # shown to the model; only for errors whose text is known safe
    fatal: BaseException | None = None  # a fresh, empty exception to re-raise (not an Exception)
    awaitable: Any = None
    refvault_message: str | None = None  # a RefvaultError's message: shown for built-in tools only
    text: str | None = None  # the encoded result, once computed


def run_private(work: Callable[[], Coroutine[Any, Any, Outcome]]) -> Outcome:
    """``asyncio.run(work())``; in a worker thread, in this thread's context, if this thread runs a loop already."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work())
    context = contextvars.copy_context()  # the dispatch frame lives in a context variable
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(context.run, lambda: asyncio.run(work())).result()


def encoded(outcome: Outcome) -> str:
    """The result as the model would see it (cached on the outcome: it may be needed twice)."""
    if outcome.text is None:
        result = outcome.value
        if isinstance(result, str):
            outcome.text = result
        elif inspect.isgenerator(result) or inspect.isasyncgen(result):
            raise InvalidType("a tool must return a value, not a generator")
        else:
            outcome.text = ENCODER.encode(result.model_dump() if isinstance(result, BaseModel) else result)
    return outcome.text


def scrubbed(outcome: Outcome, links: tuple[RemoteLink, ...]) -> Outcome:
    """``outcome`` with every link of the call (URL, path or token) in its text replaced by the artifact id.

    A remote tool may echo the link it received; the model only ever sees the id. Bytes and artifacts are
    captured as they are (the link is revoked by then anyway).
    """
    if not links or outcome.failure is not None or needs_vault(outcome.value):
        return outcome
    try:
        text = encoded(outcome)
    except Exception:
        return outcome  # rendering reports the failure
    for link in links:
        token = link.url.rsplit("/", 1)[-1]
        if token and token in text:
            text = text.replace(link.url, link.artifact_id).replace(token, link.artifact_id)
    outcome.text = text
    return outcome


def may_offload(tool: Tool, outcome: Outcome) -> bool:
    """Whether concluding may capture (so the async path moves it off the event loop)."""
    if tool.offload_tokens is None or outcome.failure is not None:
        return False
    try:
        return 2 * len(encoded(outcome)) > tool.offload_tokens
    except Exception:
        return False  # rendering reports the failure


def fresh(exc: BaseException) -> BaseException:
    """An empty exception of the same kind, carrying nothing from the original."""
    if isinstance(exc, asyncio.CancelledError):
        return asyncio.CancelledError()
    try:
        return type(exc)()
    except Exception:
        return KeyboardInterrupt() if isinstance(exc, KeyboardInterrupt) else SystemExit(1)


def caught(exc: BaseException) -> Outcome:
    """The outcome of a tool that raised ``exc``."""
    if isinstance(exc, BadRef):  # a Ref that stopped resolving mid-call: the message names only the id
        return Outcome(failure="BadRef", message=str(exc))
    if isinstance(exc, RefvaultError):
        return Outcome(failure=type(exc).__name__, refvault_message=str(exc))
    if isinstance(exc, Exception):
        return Outcome(failure=type(exc).__name__)
    return Outcome(failure=type(exc).__name__, fatal=fresh(exc))


def invoke_sync(function: Callable[..., Any], kwargs: dict[str, Any]) -> Outcome:
    """Run a sync tool; whatever it raises becomes an :class:`Outcome` (nothing crosses a thread or future)."""
    try:
        value = function(**kwargs)
    except BaseException as exc:
        return caught(exc)
    if inspect.isawaitable(value):
        return Outcome(awaitable=value)
    return Outcome(value=value)


async def invoke_async(function: Callable[..., Any], kwargs: dict[str, Any]) -> Outcome:
    """Run an async tool (or await what a sync wrapper handed back); whatever it raises becomes an Outcome."""
    try:
        value = await function(**kwargs)
    except BaseException as exc:
        return caught(exc)
    return Outcome(value=value)


def needs_vault(value: Any) -> bool:
    """Whether concluding this value captures it (so the async path moves it off the event loop)."""
    return isinstance(value, bytes | bytearray | memoryview | Artifact)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        raise InvalidType("bytes inside a result: return them on their own, or as refvault.Artifact")
    return str(value)


ENCODER = json.JSONEncoder(default=_json_default, separators=(",", ":"), ensure_ascii=False)
