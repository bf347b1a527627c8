"""What a tool message holds of the vault, and the stub that stands in for it once cleared.

A tool result can be cleared losslessly only if the vault can give it back. Two kinds qualify
(:func:`subject_of`):

* **stored**: artifacts in the scope carry the message's ``tool_call_id`` (the Toolbox captured the
  result, offloaded or kept with ``keep_results=True``), all of them disclosed to the model:
  ``load_artifacts`` or a read tool brings the result back;
* **observed**: the content is a refvault observation naming artifacts the caller can describe in
  the scope (an offloaded preview, an ``{"artifact": ...}`` summary, a read tool's answer, a
  ``load_artifacts`` answer, or an MCP ``CallToolResult`` from the gateway made only of
  ``resource_link`` blocks and offloaded previews): the same read brings it back.

Anything else (a result held nowhere, an id the scope cannot describe) is never cleared.

A stub (:func:`stub`) is JSON naming the ids, what they are (media type, size, disclosure), what the
cleared message covered, its size in tokens, and the call that restores it. It carries no byte of
any artifact (so none of a sealed or policy-denied one): metadata the caller may describe, or the
bare id when the policy refuses even that. Stubs are deterministic: the same message and vault state
give the same text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from refvault.ids import is_artifact_id
from refvault.model import Descriptor

__all__ = ["RECOVERING", "Subject", "message_text", "named_ids", "stub", "subject_of"]

RECOVERING = frozenset({"load_artifacts", "read_artifact", "query_artifact"})  # what brings a result back
_COVERAGE_KEYS = ("unit", "start", "end", "total", "next", "record_range", "returned", "scanned", "complete")
_LOADED_ID = re.compile(r"^\[(art_[a-z2-7]+)\]", re.MULTILINE)  # a load_artifacts text part's header


@dataclass(frozen=True, slots=True)
class Subject:
    """The artifacts a tool message stands for, and how it came to hold them.

    ``kind`` is ``"stored"`` (captured under the message's ``tool_call_id``) or ``"observed"`` (the
    content names them). ``descriptors`` are what the caller may describe, in order; ``coverage`` is
    what a read answer said it covers (numbers and units only, never content).
    """

    kind: str
    ids: tuple[str, ...]
    descriptors: tuple[Descriptor, ...]
    coverage: Mapping[str, Any]


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
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return ()
    if not isinstance(arguments, Mapping):
        return ()
    found: list[str] = []
    single = arguments.get("artifact_id")
    if is_artifact_id(single):
        found.append(single)
    several = arguments.get("artifact_ids")
    if isinstance(several, list):
        found.extend(value for value in several if is_artifact_id(value))
    return tuple(dict.fromkeys(found))


def _observed(content: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The ids a refvault observation names, and the coverage it states; ``((), {})`` if it is none."""
    text = message_text(content)
    ids: list[str] = []
    coverage: dict[str, Any] = {}
    try:
        value = json.loads(text) if text.startswith("{") else None
    except ValueError:
        value = None
    if isinstance(value, Mapping) and isinstance(value.get("content"), list):  # an MCP CallToolResult
        return _mcp_result(value), {}
    if isinstance(value, Mapping):
        inner = value.get("offloaded") or value.get("artifact")
        if isinstance(inner, Mapping) and is_artifact_id(inner.get("artifact_id")):
            ids.append(inner["artifact_id"])
        elif is_artifact_id(value.get("artifact_id")):  # a read tool's answer
            ids.append(value["artifact_id"])
            coverage = {key: value[key] for key in _COVERAGE_KEYS if _plain(value.get(key))}
        results = value.get("results")
        if isinstance(results, list):  # load_artifacts' summary
            named = (r.get("artifact_id") for r in results if isinstance(r, Mapping))
            ids.extend(i for i in named if is_artifact_id(i))
    else:
        ids.extend(_LOADED_ID.findall(text))
    return tuple(dict.fromkeys(i for i in ids if is_artifact_id(i))), coverage


def _mcp_result(result: Mapping[str, Any]) -> tuple[str, ...]:
    """The ids an MCP ``CallToolResult`` (as the gateway projects it) consists of, or ``()`` if any of it is held
    nowhere else: every block must be a ``resource_link`` to an artifact or a text block holding an offloaded
    preview, and ``structuredContent`` (if any) an offloaded one."""
    ids: list[str] = []
    for block in result["content"]:
        if not isinstance(block, Mapping):
            return ()
        meta = block.get("_meta")
        if (
            block.get("type") == "resource_link"
            and isinstance(meta, Mapping)
            and is_artifact_id(meta.get("artifact_id"))
        ):
            ids.append(meta["artifact_id"])
            continue
        text = block.get("text") if block.get("type") == "text" else None
        named = _offloaded_id(text)
        if named is None:
            return ()
        ids.append(named)
    structured = result.get("structuredContent")
    if structured is not None:
        named = _offloaded_id(structured)
        if named is None:
            return ()
        ids.append(named)
    return tuple(dict.fromkeys(ids))


def _offloaded_id(value: Any) -> str | None:
    """The id an offloaded observation (``{"offloaded": {"artifact_id": ...}}``, or its JSON text) names."""
    if isinstance(value, str) and value.startswith("{"):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    inner = value.get("offloaded") if isinstance(value, Mapping) else None
    named = inner.get("artifact_id") if isinstance(inner, Mapping) else None
    return named if is_artifact_id(named) else None


def _plain(value: Any) -> bool:
    """Numbers, short unit names and lists of numbers: what a coverage may repeat (never content)."""
    if isinstance(value, bool) or value is None:
        return isinstance(value, bool)
    if isinstance(value, int | float):
        return True
    if isinstance(value, str):
        return value in {"lines", "bytes", "chars", "records"}
    return isinstance(value, list) and len(value) <= 2 and all(isinstance(v, int) for v in value)


def subject_of(
    message: Mapping[str, Any],
    stored: Sequence[Descriptor],
    describe: Callable[[str], Descriptor | None],
) -> Subject | None:
    """What ``message`` (a tool message) stands for in the vault, or None if clearing it would lose it.

    ``stored`` are the artifacts captured under the message's ``tool_call_id`` in the scope (as the
    caller may describe them); ``describe`` gives an id's descriptor as the caller may see it, or None.
    """
    if stored and all(d.disclosure == "model" for d in stored):  # else the model could not load back what it saw
        return Subject("stored", tuple(d.artifact_id for d in stored), tuple(stored), {})
    ids, coverage = _observed(message.get("content"))
    if not ids:
        return None
    descriptors = []
    for artifact_id in ids:
        descriptor = describe(artifact_id)
        if descriptor is None:
            return None  # not readable here: what the message holds may be held nowhere else
        descriptors.append(descriptor)
    return Subject("observed", ids, tuple(descriptors), coverage)


def stub(subject: Subject, *, tool: str | None, arguments: Any, tokens: int, brief: bool = False) -> str:
    """The compact text that replaces a cleared tool message (see the module's invariants).

    ``brief``: only the ids and the restoring call (for when even full stubs do not fit the budget).
    """
    artifacts = [_what(d) for d in subject.descriptors]
    ids = list(subject.ids)
    restore: dict[str, Any]
    if subject.kind == "observed" and tool in RECOVERING:  # the same read gives the same answer
        restore = {"tool": tool, "arguments": _arguments(arguments)}
    elif len(ids) == 1 and subject.descriptors and subject.descriptors[0].disclosure == "sealed":
        restore = {"note": "sealed: usable by reference only (pass the id to a tool that takes a Ref)"}
    else:
        restore = {"tool": "load_artifacts", "arguments": {"artifact_ids": ids}}
    if brief:
        return json.dumps({"cleared": {"ids": ids, "restore": restore}}, separators=(",", ":"), sort_keys=True)
    body: dict[str, Any] = {
        "note": "cleared to save context; nothing is lost",
        "tool": tool,
        "artifacts": artifacts,
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
