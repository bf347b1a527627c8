"""The tools the eval registers on a real :class:`~refvault.Toolbox`: one honest, the rest misbehaving on purpose.

The misbehaving tools do what a buggy or hostile tool could do with a value it
received by reference: echo an excerpt, base64 it, quote it inside escaped
JSON, put it in an exception or a log line, return it as bytes or as one
oversized text. The eval checks that none of it reaches a model-facing sink.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from typing import Any

from refvault.evaluation.world import TOOL_LOGGER, World
from refvault.model import Scope
from refvault.toolbox.ref import Ref
from refvault.toolbox.toolbox import DEFAULT, Observation, Toolbox, ToolContext

__all__ = ["EXCERPT", "call_tool", "make_toolbox", "observed_text"]

EXCERPT = 200  # characters a leaking tool echoes: well above the guard's 64-byte guarantee
OFFLOAD_TOKENS = 200  # the echo_all tool's offload threshold, so its whole-value echo is offloaded


logger = logging.getLogger(TOOL_LOGGER)


def summarize(doc: Ref) -> dict[str, int]:
    """Summarise a document: how many lines and words it has."""
    text = doc.text()
    return {"lines": text.count("\n"), "words": len(text.split())}


def excerpt(doc: Ref, start: int = 0) -> str:
    """Misbehaving: return an excerpt of the document it received by reference."""
    return doc.text()[start : start + EXCERPT]


def excerpt_half(doc: Ref, half: int) -> str:
    """Misbehaving: return one half of an excerpt (two calls split it across two tool results)."""
    text = doc.text()[:EXCERPT]
    return text[: EXCERPT // 2] if half == 0 else text[EXCERPT // 2 :]


def encode(doc: Ref) -> dict[str, str]:
    """Misbehaving: return the document's bytes as base64."""
    return {"media_type": doc.descriptor.media_type, "base64": base64.b64encode(doc.read()).decode("ascii")}


def quote(doc: Ref) -> dict[str, str]:
    """Misbehaving: return an excerpt inside a JSON string inside JSON (escaped twice)."""
    return {"payload": json.dumps({"quoted": doc.text()[:EXCERPT]})}


def peek(artifact_id: str, ctx: ToolContext) -> str:
    """Misbehaving: read an artifact through the vault directly (not as a Ref) and echo it."""
    return ctx.vault.read_bytes(ctx.scope, artifact_id).decode("utf-8", "replace")[:EXCERPT]


def fail_with(doc: Ref) -> str:
    """Misbehaving: raise an exception whose message is an excerpt."""
    raise RuntimeError(doc.text()[:EXCERPT])


def log_it(doc: Ref) -> str:
    """Misbehaving: log an excerpt (the host's log handler carries a LogRedactor)."""
    logger.warning("processing document: %s", doc.text()[:EXCERPT])
    return "logged"


def mention(doc: Ref) -> str:
    """Format the Ref itself into the result and a log line: only its id can appear."""
    logger.info("summarised %s (%r)", doc, doc)
    return f"summarised {doc} ({len(doc.read())} bytes)"


def return_bytes(doc: Ref) -> bytes:
    """Return the document's bytes: captured as a new artifact, sealed like its input."""
    return doc.read()


def echo_all(doc: Ref) -> str:
    """Misbehaving: return the whole document as text (too large: offloaded)."""
    return doc.text()


def checksum(doc: Ref) -> str:
    """Hash a document received by reference."""
    return hashlib.sha256(doc.read()).hexdigest()


TOOLS = {
    tool.__name__: tool
    for tool in (
        summarize, excerpt, excerpt_half, encode, quote, peek, fail_with, log_it, mention, return_bytes, echo_all,
        checksum,
    )
}  # fmt: skip


def make_toolbox(world: World, *only: str) -> Toolbox:
    """A fresh Toolbox (with its own leak guard) whose events go to the sinks, with the eval's tools
    (``only`` these, if named) besides the five read tools."""
    box = Toolbox(world.vault)
    box.add_sink(lambda event: world.sinks.add("event", event.to_dict()))
    for name in only or TOOLS:
        box.tool(TOOLS[name], offload_tokens=OFFLOAD_TOKENS if name == "echo_all" else DEFAULT)
    return box


def observed_text(observation: Observation) -> str:
    """Everything of an observation the model would see: content and parts."""
    return json.dumps({"content": observation.content, "parts": [dict(p) for p in observation.parts]})


async def call_tool(
    world: World,
    box: Toolbox,
    name: str,
    arguments: dict[str, Any],
    *,
    scope: Scope,
    run_id: str,
    call_id: str,
    sink: bool = True,
) -> Observation:
    """Dispatch one tool call the way a model's call is dispatched; time it; record the observation."""
    observation = await _timed_call(world, box, name, arguments, scope, run_id, call_id)
    if sink:
        world.sinks.add("observation", observed_text(observation))
    world.sinks.add("trajectory", [e.to_dict() for e in box.trajectory(run_id) if e.tool_call_id == call_id])
    if not observation.is_error and name in ("read_artifact", "query_artifact", "load_artifacts", "describe_artifact"):
        world.meters.returned(observed_text(observation))
        if name == "query_artifact":
            try:
                answer = json.loads(observation.content)
            except ValueError:
                answer = None
            if isinstance(answer, dict) and isinstance(answer.get("scanned_records"), int):
                world.meters.scanned.append(answer["scanned_records"])
    return observation


async def _timed_call(
    world: World, box: Toolbox, name: str, arguments: dict[str, Any], scope: Scope, run_id: str, call_id: str
) -> Observation:
    started = time.perf_counter()
    try:
        return await box.call(name, json.dumps(arguments), scope=scope, run_id=run_id, tool_call_id=call_id)
    finally:
        world.meters.latency.setdefault(f"tool {name}", []).append(time.perf_counter() - started)
