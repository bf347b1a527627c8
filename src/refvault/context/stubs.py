"""What a tool message holds of the vault, and the stub that stands in for it once cleared.

A tool result can be cleared losslessly only if the vault can give it back, and only what the
vault provably holds is trusted (:func:`subject_of`). A message qualifies as exactly one of:

* **kept**: the Toolbox stored this very text under this call (``keep_results=True``): an artifact
  captured by the call in the run, disclosed to the model, whose SHA-256 is that of the message's
  text; ``read_artifact`` with ``max_chars`` covering it gives the text back whole;
* **offloaded**: the message is exactly an offloaded preview (``{"offloaded": {...}}``) or artifact
  summary (``{"artifact": {...}}``) of an artifact this call captured: ``load_artifacts`` (or
  ``describe_artifact`` for a summary) gives it back;
* **a read**: the answer of ``read_artifact`` / ``query_artifact`` / ``load_artifacts`` about the ids
  its arguments name, complete and without a cursor (a cursor expires; a cut scan may answer
  otherwise later): the same call with the same arguments gives it back;
* **an MCP result** of the refvault gateway: a ``CallToolResult`` made only of ``resource_link``
  blocks to artifacts and offloaded previews, each captured by the gateway for this very call (its
  provenance id names the call): ``load_artifacts`` gives them back.

Every id must be one the caller may describe, and at most ``MAX_LOAD_IDS`` of them. Anything else
(a result held nowhere, a look-alike from another tool, an id the scope cannot read) is never cleared.

A stub (:func:`stub`) is JSON naming the ids, what they are (media type, size, disclosure), what the
cleared message covered, its size in tokens, and the call that restores it. It carries no byte of
any artifact (so none of a sealed or policy-denied one): metadata the caller may describe, the
model's own call arguments, numbers. Stubs are deterministic: the same message and vault state give
the same text.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from refvault.ids import is_artifact_id
from refvault.limits import MAX_CHARS, MAX_LOAD_IDS
from refvault.model import Descriptor, is_text

__all__ = ["RECOVERING", "Subject", "message_text", "named_ids", "stub", "subject_of"]

RECOVERING = frozenset({"load_artifacts", "read_artifact", "query_artifact"})  # what brings a result back
_COVERAGE_KEYS = ("unit", "start", "end", "total", "next", "record_range", "returned", "scanned")
_LOADED_ID = re.compile(r"^\[(art_[a-z2-7]+)\] ")  # a load_artifacts text part's header
_MCP_KEYS = frozenset({"content", "isError", "structuredContent", "_meta", "resultType"})


@dataclass(frozen=True, slots=True)
class Subject:
    """The artifacts a tool message stands for, and the call that gives it back.

    ``kind`` is ``"kept"``, ``"offloaded"``, ``"read"`` or ``"mcp"`` (see the module). ``descriptors``
    are what the caller may describe, in order; ``coverage`` is what a read answer said it covers
    (numbers and units only, never content); ``restore`` is ``{"tool", "arguments"}``.
    """

    kind: str
    ids: tuple[str, ...]
    descriptors: tuple[Descriptor, ...]
    restore: Mapping[str, Any]
    coverage: Mapping[str, Any] = field(default_factory=dict)


def message_text(content: Any) -> str:
    """The text of a chat message's content: a string, or the text of its parts (other parts by type only)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts = []
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text")
                texts.append(text if isinstance(text, str) else f"[{part.get('type', 'part')}]")
            else:
                texts.append(str(part))
        return "\n".join(texts)
    return str(content)


def named_ids(arguments: Any) -> tuple[str, ...]:
    """The artifact ids a tool call's arguments name (``artifact_id`` and ``artifact_ids``), in order."""
    arguments = _arguments(arguments)
    found: list[str] = []
    single = arguments.get("artifact_id")
    if is_artifact_id(single):
        found.append(single)
    several = arguments.get("artifact_ids")
    if isinstance(several, list):
        found.extend(value for value in several if is_artifact_id(value))
    return tuple(dict.fromkeys(found))


def subject_of(
    message: Mapping[str, Any],
    *,
    call_id: str,
    tool: str | None,
    arguments: Any,
    captured: Sequence[Descriptor],
    describe: Callable[[str], Descriptor | None],
    max_chars: int = MAX_CHARS,
) -> Subject | None:
    """What ``message`` (the tool message answering ``call_id``, a call of ``tool`` with ``arguments``) stands
    for in the vault, or None if clearing it could lose anything.

    ``captured`` are the artifacts this call captured in the run (as the caller may describe them);
    ``describe`` gives an id's descriptor as the caller may see it, or None; ``max_chars`` is the most a
    ``read_artifact`` window may return to this model.
    """
    content = message.get("content")
    if tool in RECOVERING:
        return _read(content, tool, arguments, describe)
    if not isinstance(content, str):
        return None  # parts beside text (an image...): only load_artifacts' are known to come back
    digest = "sha256:" + hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()
    for descriptor in captured:
        if descriptor.content_hash == digest and _whole_text(descriptor, max_chars):
            restore = {
                "tool": "read_artifact",
                "arguments": {"artifact_id": descriptor.artifact_id, "max_chars": max(1, descriptor.size)},
            }
            return Subject("kept", (descriptor.artifact_id,), (descriptor,), restore)
    value = _json(content)
    if not isinstance(value, Mapping):
        return None
    if len(value) == 1 and ("offloaded" in value or "artifact" in value):
        key = next(iter(value))
        inner = value[key]
        named = inner.get("artifact_id") if isinstance(inner, Mapping) else None
        mine = {d.artifact_id: d for d in captured}
        if named not in mine:
            return None  # a look-alike, or an artifact another call captured
        if key == "artifact":
            restore = {"tool": "describe_artifact", "arguments": {"artifact_id": named}}
        else:
            restore = {"tool": "load_artifacts", "arguments": {"artifact_ids": [named]}}
        return Subject("offloaded", (named,), (mine[named],), restore)
    if isinstance(value.get("content"), list) and set(value) <= _MCP_KEYS and value.get("isError") is not True:
        return _mcp(value, call_id, describe)
    return None


def _read(content: Any, tool: str, arguments: Any, describe: Callable[[str], Descriptor | None]) -> Subject | None:
    """A read tool's answer, if the same call gives it back: complete, without a cursor, about the ids it names."""
    given = _arguments(arguments)
    ids = named_ids(given)
    if not ids or "cursor" in given:
        return None
    coverage: dict[str, Any] = {}
    if tool == "load_artifacts":
        text = message_text(content)
        summary = _json(text)
        if isinstance(summary, Mapping):
            results = summary.get("results")
            named = (
                [r.get("artifact_id") for r in results if isinstance(r, Mapping)] if isinstance(results, list) else []
            )
            if set(named) - set(ids):
                return None
        elif (
            not isinstance(content, list)
            or not all(isinstance(p, Mapping) for p in content)
            or any(m not in ids for m in _LOADED_ID.findall(text))
        ):
            return None
    else:
        answer = _json(message_text(content))
        if not isinstance(answer, Mapping) or answer.get("artifact_id") != ids[0]:
            return None
        if answer.get("scan_complete") is False or answer.get("stopped_by") or answer.get("complete") is False:
            return None  # a cut scan may answer otherwise when repeated
        coverage = {key: answer[key] for key in _COVERAGE_KEYS if _plain(answer.get(key))}
    descriptors = _described(ids, describe)
    if descriptors is None:
        return None
    return Subject("read", ids, descriptors, {"tool": tool, "arguments": given}, coverage)


def _mcp(result: Mapping[str, Any], call_id: str, describe: Callable[[str], Descriptor | None]) -> Subject | None:
    """An MCP ``CallToolResult`` from the gateway held whole by the vault: every block a ``resource_link`` to an
    artifact or an offloaded preview, ``structuredContent`` (if any) offloaded, each captured for this call."""
    ids: list[str] = []
    for block in result["content"]:
        if not isinstance(block, Mapping):
            return None
        meta = block.get("_meta")
        linked = meta.get("artifact_id") if isinstance(meta, Mapping) else None
        if block.get("type") == "resource_link" and is_artifact_id(linked):
            ids.append(linked)
            continue
        named = _offloaded_id(block.get("text")) if block.get("type") == "text" else None
        if named is None:
            return None
        ids.append(named)
    if result.get("structuredContent") is not None:
        named = _offloaded_id(result["structuredContent"])
        if named is None:
            return None
        ids.append(named)
    unique = tuple(dict.fromkeys(ids))
    descriptors = _described(unique, describe)
    provenance = "mcpgw_" + re.sub(r"[^A-Za-z0-9._-]", "", call_id)[:64] + "_"
    if descriptors is None or not all((d.tool_call_id or "").startswith(provenance) for d in descriptors):
        return None  # not captured by the gateway for this call
    return Subject("mcp", unique, descriptors, {"tool": "load_artifacts", "arguments": {"artifact_ids": list(unique)}})


def _described(ids: Sequence[str], describe: Callable[[str], Descriptor | None]) -> tuple[Descriptor, ...] | None:
    """Each id's descriptor, or None if any cannot be described or there are more than one call can load."""
    if not ids or len(ids) > MAX_LOAD_IDS:
        return None
    found = [describe(artifact_id) for artifact_id in ids]
    if any(d is None for d in found):
        return None  # not readable here: what the message holds may be held nowhere else
    return tuple(d for d in found if d is not None)


def _whole_text(descriptor: Descriptor, max_chars: int) -> bool:
    """Whether one ``read_artifact`` gives the artifact back whole: model-disclosed text within a window's limit."""
    return descriptor.disclosure == "model" and is_text(descriptor.media_type) and 0 < descriptor.size <= max_chars


def _offloaded_id(value: Any) -> str | None:
    """The id an offloaded preview (``{"offloaded": {"artifact_id": ...}}`` alone, or its JSON text) names."""
    if isinstance(value, str):
        value = _json(value)
    if not isinstance(value, Mapping) or set(value) != {"offloaded"}:
        return None
    inner = value["offloaded"]
    named = inner.get("artifact_id") if isinstance(inner, Mapping) else None
    return named if is_artifact_id(named) else None


def _json(text: Any) -> Any:
    if not isinstance(text, str) or not text.startswith("{"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _plain(value: Any) -> bool:
    """Numbers, short unit names and lists of numbers: what a coverage may repeat (never content)."""
    if isinstance(value, bool) or value is None:
        return isinstance(value, bool)
    if isinstance(value, int | float):
        return True
    if isinstance(value, str):
        return value in {"lines", "bytes", "chars", "records"}
    return isinstance(value, list) and len(value) <= 2 and all(isinstance(v, int) for v in value)


def stub(subject: Subject, *, tool: str | None, tokens: int, brief: bool = False) -> str:
    """The compact text that replaces a cleared tool message (see the module's invariants).

    ``brief``: only the ids and the restoring call (for when even full stubs do not fit the budget).
    """
    ids = list(subject.ids)
    restore: Mapping[str, Any] = subject.restore
    if len(ids) == 1 and subject.descriptors[0].disclosure == "sealed" and subject.kind != "read":
        restore = {**restore, "note": "sealed: usable by reference only (pass the id to a tool that takes a Ref)"}
    if brief:
        return json.dumps({"cleared": {"ids": ids, "restore": restore}}, separators=(",", ":"), sort_keys=True)
    body: dict[str, Any] = {
        "note": "cleared to save context; nothing is lost",
        "tool": tool,
        "artifacts": [_what(d) for d in subject.descriptors],
        "covered": dict(subject.coverage) if subject.coverage else "whole result",
        "tokens": tokens,
        "restore": restore,
    }
    return json.dumps({"cleared": body}, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _what(descriptor: Descriptor) -> dict[str, Any]:
    return {
        "artifact_id": descriptor.artifact_id,
        "media_type": descriptor.media_type,
        "size": descriptor.size,
        "disclosure": descriptor.disclosure,
        "capture": descriptor.completeness.get("status"),
    }


def _arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return {}
    return arguments if isinstance(arguments, Mapping) else {}
