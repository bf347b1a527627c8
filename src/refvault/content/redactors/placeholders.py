"""Typed placeholders, one per distinct value of an artifact, and the counts of what was replaced.

Invariants:

* **Consistent.** Within one :class:`Placeholders` (one artifact) the same ``(label, value)`` always gets the
  same placeholder and distinct values of a label get distinct ones: ``[EMAIL_1]``, ``[EMAIL_2]``, ... numbered
  per label in order of first appearance.
* **Inert.** A placeholder matches :data:`PLACEHOLDER`: ``[`` + upper-case letters, digits and ``_`` + ``]``.
  The detectors' own placeholders are never detected: every detector needs a lower-case letter, an ``@``, a
  dot, digits after a boundary, two capitals followed by digits, a vendor prefix, or a key followed by ``=``
  or ``:``, none of which ``[EMAIL_1]``-style text holds (tested by the idempotence property in
  ``tests/content/test_redaction_properties.py``). Field-path labels come from the caller's paths and are not
  checked: a path named like a key (``akia...``) makes placeholders a later detector run may report.
"""

from __future__ import annotations

import re
from collections import Counter

__all__ = ["PLACEHOLDER", "Placeholders"]

PLACEHOLDER = re.compile(r"\[[A-Z][A-Z0-9_]*_[1-9][0-9]*\]", re.ASCII)
"""What every placeholder looks like."""


class Placeholders:
    """Issues placeholders for one artifact and counts the replacements by kind."""

    __slots__ = ("_issued", "_next", "matches")

    def __init__(self) -> None:
        self._issued: dict[tuple[str, str], str] = {}
        self._next: Counter[str] = Counter()
        self.matches: Counter[str] = Counter()

    def issue(self, kind: str, label: str, value: str) -> str:
        """The placeholder of ``value`` under ``label`` (a new one on first sight), counting one match of ``kind``."""
        self.matches[kind] += 1
        key = (label, value)
        placeholder = self._issued.get(key)
        if placeholder is None:
            self._next[label] += 1
            placeholder = self._issued[key] = f"[{label}_{self._next[label]}]"
        return placeholder

    @property
    def distinct(self) -> int:
        """How many distinct placeholders were issued."""
        return len(self._issued)
