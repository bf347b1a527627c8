"""Field-path mode: replace the values at dotted paths of each JSON record, and nothing else.

A path is dot-separated keys (``user.email``); ``*`` matches any key of an object or any item of an array;
a named step that meets an array applies to every item (``items.card`` reaches the ``card`` of each item;
array indices are not addressed by number, and a key containing a dot cannot be named). Invariants:

* **Only the paths.** The value at each path, whatever its type (object, array, number, null), becomes the
  string placeholder ``[NAME_n]``, NAME the last non-``*`` step upper-cased with every character outside
  ``A-Z0-9`` as ``_`` (``FIELD`` when every step is ``*``; prefixed ``FIELD_`` when it would not start with a
  letter). Consistent per (name, value) across the artifact, the value compared as canonical JSON (``1`` and
  ``"1"`` differ; a number by its spelling, so ``1.0`` and ``1`` differ). Each replacement counts once under
  kind ``field``. An object with a repeated key has the value of every pair under the key replaced.
* **Checked first.** 1 to :data:`MAX_PATHS` distinct paths of 1 to :data:`MAX_SEGMENTS` non-empty steps, or
  :class:`~refvault.errors.InvalidArgument` before any byte is read (naming the path's position, never its text).
  Paths apply in the order given; a later path inside an earlier one's value finds a placeholder string.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from refvault.content.redactors.engine import MAX_NESTING
from refvault.content.redactors.jsonvalue import Pairs, canonical
from refvault.content.redactors.placeholders import Placeholders
from refvault.content.redactors.spec import FIELD_KIND
from refvault.errors import InvalidArgument

__all__ = ["MAX_PATHS", "MAX_SEGMENTS", "FieldPath", "apply_paths", "compile_paths"]

MAX_PATHS = 64
MAX_SEGMENTS = 32
_NOT_LABEL = re.compile(r"[^A-Z0-9]")


@dataclass(frozen=True)
class FieldPath:
    """One compiled path: its steps and the label of its placeholders."""

    steps: tuple[str, ...]
    label: str


def compile_paths(fields: Sequence[str]) -> list[FieldPath]:
    """Check and compile ``fields`` (see the module docstring for the rules)."""
    if isinstance(fields, str | bytes) or not isinstance(fields, Sequence):
        raise InvalidArgument("fields is a list of dotted paths, e.g. ['user.email', 'items.*.card']")
    if not 1 <= len(fields) <= MAX_PATHS:
        raise InvalidArgument(f"fields, when given, lists 1 to {MAX_PATHS} paths")
    out: list[FieldPath] = []
    seen: set[tuple[str, ...]] = set()
    for n, path in enumerate(fields, 1):
        if not isinstance(path, str):
            raise InvalidArgument(f"field path {n} is not a string")
        steps = tuple(path.split("."))
        if not all(steps):
            raise InvalidArgument(f"field path {n} has an empty step (paths are keys separated by single dots)")
        if len(steps) > MAX_SEGMENTS:
            raise InvalidArgument(f"field path {n} has more than {MAX_SEGMENTS} steps")
        if steps in seen:
            continue
        seen.add(steps)
        named = [s for s in steps if s != "*"]
        label = _NOT_LABEL.sub("_", named[-1].upper())[:48] if named else "FIELD"
        if not label[:1].isalpha():
            label = "FIELD_" + label
        out.append(FieldPath(steps, label))
    return out


def apply_paths(record: Any, paths: Sequence[FieldPath], placeholders: Placeholders) -> bool:
    """Replace, in place, the values at ``paths`` in ``record``; whether anything was replaced."""
    changed = False
    for path in paths:
        changed |= _visit(record, path, 0, placeholders, 0)
    return changed


def _visit(node: Any, path: FieldPath, i: int, placeholders: Placeholders, depth: int) -> bool:
    if depth >= MAX_NESTING:
        raise InvalidArgument(f"JSON nested deeper than {MAX_NESTING} levels cannot be redacted")
    step, last = path.steps[i], i == len(path.steps) - 1
    changed = False
    if isinstance(node, Pairs):  # an object with a repeated key: every pair under the key
        for j, (key, item) in enumerate(node):
            if step not in ("*", key):
                continue
            if last:
                node[j] = (key, placeholders.issue(FIELD_KIND, path.label, canonical(item)))
                changed = True
            else:
                changed |= _visit(item, path, i + 1, placeholders, depth + 1)
    elif isinstance(node, list):
        for j, item in enumerate(node):
            if step != "*":
                changed |= _visit(item, path, i, placeholders, depth + 1)  # a named step applies to every item
            elif last:
                node[j] = placeholders.issue(FIELD_KIND, path.label, canonical(item))
                changed = True
            else:
                changed |= _visit(item, path, i + 1, placeholders, depth + 1)
    elif isinstance(node, dict):
        for key in list(node) if step == "*" else [step] if step in node else []:
            if last:
                node[key] = placeholders.issue(FIELD_KIND, path.label, canonical(node[key]))
                changed = True
            else:
                changed |= _visit(node[key], path, i + 1, placeholders, depth + 1)
    return changed
