"""Previews of JSON documents (a parsed artifact or a tool's returned value): their shape, breadth first and
bounded in nodes, and a sample of their compact JSON rendering, neither recursing however deep the value.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections import deque
from collections.abc import Iterator, Mapping
from itertools import islice
from typing import Any, cast

from refvault.model import Descriptor
from refvault.read.previews.common import (
    _base,
    _clean,
    _describe_hint,
    _dumps_len,
    _fit,
    _fit_escaped,
    _masked_note,
    _Masker,
    _shown,
)


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def _key_text(key: object) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool):
        return json.dumps(key)
    return str(key)


def _shape(
    value: object, *, max_nodes: int, width: int, max_depth: int = 12, masker: _Masker | None = None
) -> tuple[object, int]:
    """The shape of ``value``, breadth first, creating at most ``max_nodes`` nodes: ``(shape, nodes)``.

    Scalars become their type name; an object becomes ``{"type": "object", "keys": n, "fields":
    {key: shape}, "unlisted": k}`` (``unlisted`` counts keys not described); an array becomes
    ``{"type": "array", "length": n, "items": shape of its first element, "item_types": [...]}``.
    Iterative and O(max_nodes * width): the size and depth of ``value`` do not matter.
    """
    nodes = 0
    root: dict[str, object] = {}
    queue: deque[tuple[object, dict[str, object], str, int]] = deque([(value, root, "shape", 0)])
    while queue:
        item, parent, slot, depth = queue.popleft()
        nodes += 1
        if isinstance(item, Mapping):
            node: dict[str, object] = {"type": "object", "keys": len(item)}
            described = 0
            if depth < max_depth and nodes + len(queue) < max_nodes:
                fields: dict[str, object] = {}
                room = max(0, min(width, max_nodes - nodes - len(queue)))
                for key, child in islice(item.items(), room):
                    name = _clean(_shown(_key_text(key), masker), 80)
                    if name in fields:
                        continue
                    fields[name] = None
                    queue.append((child, fields, name, depth + 1))
                    described += 1
                node["fields"] = fields
            if len(item) > described:
                node["unlisted"] = len(item) - described
            parent[slot] = node
        elif isinstance(item, list | tuple):
            node = {"type": "array", "length": len(item)}
            if item:
                kinds = sorted({_type_name(element) for element in islice(item, 20)})
                if len(kinds) > 1:
                    node["item_types"] = kinds
                if depth < max_depth and nodes + len(queue) < max_nodes:
                    queue.append((item[0], node, "items", depth + 1))
            parent[slot] = node
        else:
            parent[slot] = _type_name(item)
    return root.get("shape"), nodes


def _scalar_json(value: object, limit: int, masker: _Masker | None = None) -> str:
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        try:
            text = int.__repr__(value)
        except ValueError:  # more digits than int -> str allows
            return '"<integer with too many digits>"'
        return text
    if isinstance(value, float):
        return json.dumps(value) if math.isfinite(value) else json.dumps(str(value))
    if isinstance(value, str):
        return json.dumps(_shown(value, masker)[: limit + 1])
    if isinstance(value, bytes | bytearray | memoryview):
        return json.dumps(f"<{len(value)} bytes>")
    if isinstance(value, _dt.date | _dt.time):
        return json.dumps(value.isoformat())
    return json.dumps(_clean(str(value), limit + 1))


def _render(value: object, limit: int, masker: _Masker | None = None) -> tuple[str, bool]:
    """Compact JSON of ``value``, at most ``limit`` characters: ``(text, complete)``.

    Iterative (no recursion, any depth) and O(limit): it stops as soon as ``limit`` is passed.
    Strings are shown with ``json.dumps`` escaping, so the result is ASCII.
    """
    out: list[str] = []
    length = 0
    stack: list[Iterator[object]] = []
    closers: list[str] = []
    firsts: list[bool] = []

    def emit(piece: str) -> bool:
        nonlocal length
        out.append(piece)
        length += len(piece)
        return length > limit

    pending: object = value
    have_pending = True
    while True:
        if have_pending:
            have_pending = False
            item = pending
            if isinstance(item, Mapping):
                if emit("{"):
                    break
                stack.append(iter(item.items()))
                closers.append("}")
                firsts.append(True)
            elif isinstance(item, list | tuple):
                if emit("["):
                    break
                stack.append(iter(item))
                closers.append("]")
                firsts.append(True)
            elif emit(_scalar_json(item, limit, masker)):
                break
        if not stack:
            text = "".join(out)
            return (text, True) if len(text) <= limit else (text[:limit], False)
        try:
            entry = next(stack[-1])
        except StopIteration:
            stack.pop()
            firsts.pop()
            if emit(closers.pop()):
                break
            continue
        if not firsts[-1] and emit(","):
            break
        firsts[-1] = False
        if closers[-1] == "}":
            key, pending = cast("tuple[object, object]", entry)
            if emit(json.dumps(_clean(_shown(_key_text(key), masker), limit + 1)) + ":"):
                break
        else:
            pending = entry
        have_pending = True
    return "".join(out)[:limit], False


_SHAPE_NODES = (256, 128, 64, 32, 16, 8, 4, 2, 1)


def _json_preview(descriptor: Descriptor, document: object, max_chars: int) -> dict[str, Any]:
    artifact_id = descriptor.artifact_id
    size = descriptor.size
    tabular = isinstance(document, list | tuple) and bool(document) and isinstance(document[0], Mapping)
    read_more = (
        f'The document is text: read_artifact(artifact_id="{artifact_id}", lines=[start, end]) reads lines'
        f' (zero-based, end exclusive) and read_artifact(artifact_id="{artifact_id}", pattern="...") finds lines'
        " containing a string."
    )
    if tabular:
        read_more += (
            f' As an array of objects it may also be queried: query_artifact(artifact_id="{artifact_id}",'
            ' where={"field": "name", "op": "eq", "value": ...}, fields=[...], order=[...], limit=100).'
        )
    read_more += " " + _describe_hint(artifact_id)
    masker = _Masker()

    def build(budget: int) -> dict[str, Any]:
        masker.masked = 0
        return _masked_note(shown(budget), masker.masked, read_more)

    def shown(budget: int) -> dict[str, Any]:
        result = _base(descriptor, "json")
        if budget <= 0:
            result["covers"] = "no content: the preview budget left no room for the document's shape or a sample"
            result["omits"] = f"the whole document ({size} bytes)"
            result["read_more"] = read_more
            return result
        shape: object = None
        nodes = 0
        shape_cost = 0
        for max_nodes in _SHAPE_NODES:
            masker.masked = 0
            width = max(1, min(25, max_nodes // 2))
            shape, nodes = _shape(document, max_nodes=max_nodes, width=width, masker=masker)
            shape_cost = _dumps_len(shape)
            if shape_cost <= budget // 2:
                break
        else:
            shape, nodes, shape_cost = None, 0, 4
            masker.masked = 0
        sample_budget = max(0, budget - shape_cost - 40)
        rendered, whole = _render(document, sample_budget, masker)
        sample = _fit_escaped(rendered, sample_budget)
        whole = whole and sample == rendered
        result["shape"] = shape
        result["sample"] = sample
        if whole:
            result["preview_partial"] = False
            result["covers"] = (
                f"the whole document: sample is its complete compact JSON rendering ({len(sample)} characters)"
            )
            result["omits"] = "nothing"
            result["read_more"] = (
                "This preview shows everything; pass the id to a tool taking a Ref to reuse it. "
                + _describe_hint(artifact_id)
            )
            return result
        described = f"the document's structure ({nodes} values described)" if shape is not None else "no structure"
        result["covers"] = f"{described} and the first {len(sample)} characters of its compact JSON rendering (sample)"
        result["omits"] = (
            "everything after the sample (the artifact is "
            f"{size} bytes); 'unlisted' in the shape counts keys not described, and an array's 'items' shows "
            "only its first element"
        )
        result["read_more"] = read_more
        return result

    return _fit(build, max_chars)
