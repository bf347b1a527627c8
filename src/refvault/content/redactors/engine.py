"""Replacing detected spans by placeholders, in a text or in every string of a JSON value.

Invariants:

* **Idempotent.** :func:`redact_text` re-scans what it produced and repeats (at most :data:`MAX_PASSES` times)
  until nothing more is found, so redacting its output again finds nothing: a replacement that changes the
  context of its neighbours cannot leave a detectable value behind. (A replacement between neighbours that
  can neither end nor start a value, such as quotes or the ends of the text, needs no re-scan.)
* **Structure is kept.** :class:`Walker` replaces strings (values and object keys, keys with the same
  placeholders) and, under ``pii.v1``, integers that are card numbers (by their placeholder string); numbers
  are :class:`~refvault.content.redactors.jsonvalue.Number` (their source text) and objects with a repeated
  key :class:`~refvault.content.redactors.jsonvalue.Pairs`, both kept as they are. Two keys of one object that
  redaction makes equal stay distinct: the later gets the suffix ``~2`` (``~3``, ...). It reports whether
  anything changed, so the caller keeps the original bytes of a value that did not.
* **Bounded depth.** A value nested deeper than :data:`MAX_NESTING` is refused
  (:class:`~refvault.errors.InvalidArgument`), never walked partway.
"""

from __future__ import annotations

from typing import Any

from refvault.content.redactors.detect import Detector
from refvault.content.redactors.digits import ends_with_version_word
from refvault.content.redactors.jsonvalue import Number, Pairs
from refvault.content.redactors.placeholders import Placeholders
from refvault.content.redactors.spec import LABELS
from refvault.content.redactors.validators import key_class
from refvault.errors import InvalidArgument

__all__ = ["MAX_NESTING", "MAX_PASSES", "Walker", "redact_text"]

MAX_PASSES = 4
MAX_NESTING = 512


# A placeholder changes the context of its neighbours: a value before it that continued into the replaced text (a
# phone number's groups, a key's value, a private key's body) may now end there, and one after it may now start
# after a boundary. Neither can happen across these neighbours (no value holds or ends with the one before, none
# starts with the one after), so a replacement between them needs no second scan, unless the value replaced ended
# in a version word ("firmware 2.4.1.0" is a version, "[EMAIL_1] 2.4.1.0" an address).
_QUIET_BEFORE = frozenset("\"'`;[{<&")
_QUIET_AFTER = frozenset(" \t\r\n\"'`,;|)]}>!?")


def redact_text(text: str, detector: Detector, placeholders: Placeholders, key: str | None = None) -> str:
    """``text`` with every detected span replaced by its placeholder (``key``: the JSON field holding it)."""
    for _ in range(MAX_PASSES):
        spans = detector.spans(text, key)
        if not spans:
            break
        parts: list[str] = []
        last = 0
        quiet = True
        for start, end, kind in spans:
            parts.append(text[last:start])
            parts.append(placeholders.issue(kind, LABELS[kind], text[start:end]))
            last = end
            if quiet and not (
                (start == 0 or text[start - 1] in _QUIET_BEFORE)
                and (end == len(text) or text[end] in _QUIET_AFTER)
                and not ends_with_version_word(text[start:end])
            ):
                quiet = False
        parts.append(text[last:])
        text = "".join(parts)
        if quiet:
            break
    return text


class Walker:
    """Redacts every string of a parsed JSON value as text, keyed by the field that holds it.

    With ``needles`` (the values a scan of the record's raw text found, see
    :meth:`~refvault.content.redactors.detect.Detector.hit_lines`), a string that holds none of them, and is
    not under a key naming a secret, is not scanned again: it has nothing to redact.
    """

    __slots__ = ("detector", "needles", "placeholders")

    def __init__(self, detector: Detector, placeholders: Placeholders) -> None:
        self.detector = detector
        self.placeholders = placeholders
        self.needles: set[str] | None = None

    def walk(self, value: Any, key: str | None = None, depth: int = 0) -> tuple[Any, bool]:
        """``(redacted value, changed)``; list items keep the key of the field holding the list."""
        if isinstance(value, Number):
            if self.detector.pii and value.isdigit() and self.detector.card_number(int(value)):
                return self.placeholders.issue("card", LABELS["card"], str.__str__(value)), True
            return value, False
        if isinstance(value, str):
            return self._string(value, key)
        if depth >= MAX_NESTING:
            raise InvalidArgument(f"JSON nested deeper than {MAX_NESTING} levels cannot be redacted")
        if isinstance(value, dict | Pairs):
            return self._object(value, depth)
        if isinstance(value, list):
            changed = False
            for i, item in enumerate(value):
                new, hit = self.walk(item, key, depth + 1)
                if hit:
                    value[i] = new
                    changed = True
            return value, changed
        return value, False

    def _string(self, value: str, key: str | None) -> tuple[str, bool]:
        needles = self.needles
        unkeyed = self.detector.pii or key is None or key_class(key) is None
        if needles is not None and unkeyed and not any(n in value for n in needles):
            return value, False
        out = redact_text(value, self.detector, self.placeholders, key)
        return out, out != value

    def _object(self, obj: dict[str, Any] | Pairs, depth: int) -> tuple[dict[str, Any] | Pairs, bool]:
        """An object's values (each keyed by its original key) and its keys (as unkeyed strings)."""
        pairs = obj.items() if isinstance(obj, dict) else obj
        out: list[tuple[str, Any]] = []
        changed = False
        for k, item in pairs:
            new, hit = self.walk(item, k, depth + 1)
            new_key, key_hit = self._string(k, None)
            changed |= hit or key_hit
            out.append((new_key, new))
        if not changed:
            return obj, False
        if isinstance(obj, Pairs):
            return Pairs(out), True  # repeated keys stay repeated, in order
        return _distinct(out), True


def _distinct(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A dict of ``pairs`` whose keys were distinct before redaction: a key that redaction made equal to an earlier
    one (``"[EMAIL_1]"`` written literally beside an address) gets the suffix ``~2``, ``~3``, ... (the first free
    one), in order, so no value is lost and the output has no repeated key."""
    obj: dict[str, Any] = {}
    for k, v in pairs:
        name, n = k, 1
        while name in obj:
            n += 1
            name = f"{k}~{n}"
        obj[name] = v
    return obj
