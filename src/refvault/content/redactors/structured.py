"""Redacting JSON Lines and JSON documents: records stay records, untouched records keep their bytes.

**JSON Lines.** One record per line; every line is kept, in order, so the output has the line count of the
input. A blank line (spaces, tabs, ``\\r`` only) is not a record and is copied. A line that parses as JSON
(after any leading white space, a byte order mark or an RFC 7464 record separator) is a record; one that does
not is counted in ``unparseable_records`` and redacted as text (with the redactor's detectors, in field-path
mode too). A record with nothing to replace is copied byte for byte; a changed one is re-serialised compactly
by :func:`~refvault.content.redactors.jsonvalue.dumps` (numbers and ``NaN``/``Infinity`` as written, repeated
keys kept) between its original leading and trailing white space.

**The fast path.** Without field paths, the whole artifact is scanned once
(:meth:`~refvault.content.redactors.detect.Detector.hit_lines`), which marks the lines with a hit and the values
found on each. Only marked lines, and lines with a backslash (a JSON escape could hide a value from a scan of
the raw text), have their strings redacted; on a marked line without a backslash, only the strings holding one
of its values (or under a key naming a secret). Every line is still parsed, so ``unparseable_records`` is
exact. A raw line without a backslash holds each of its strings verbatim between quotes, no candidate crosses
a quote, and quotes are boundaries for every scan, so this finds what redacting every string would
(``test_the_json_lines_fast_path_agrees_with_redacting_every_record`` in
``tests/content/test_redaction_properties.py``).

**JSON documents.** Parsed whole (an invalid document is refused). A top-level array is redacted item by item,
each unchanged item keeping its bytes and the separators between items kept as they were; any other document
is copied unchanged when nothing in it is found, and re-serialised compactly otherwise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

from refvault.content.redactors.detect import Detector
from refvault.content.redactors.engine import Walker, redact_text
from refvault.content.redactors.fields import FieldPath, apply_paths
from refvault.content.redactors.jsonvalue import Decoder, Pairs, dumps
from refvault.content.redactors.placeholders import Placeholders
from refvault.errors import InvalidArgument

__all__ = ["JsonLinesResult", "redact_json_document", "redact_json_lines"]

_SKIP = re.compile(r"[ \t\r\n]*")
_WS = " \t\r"
_LEAD = " \t\r\x1e\ufeff"


def _parse(decoder: Decoder, line: str) -> tuple[Any, int, int] | None:
    """``(value, start, end)`` if ``line`` is one JSON value between white space, else None."""
    start = 0 if line[:1] not in _LEAD else len(line) - len(line.lstrip(_LEAD))
    try:
        value, end = decoder.raw_decode(line, start)
    except (ValueError, RecursionError):
        return None
    if end != len(line) and line[end:].strip(_WS):
        return None
    return value, start, end


class JsonLinesResult:
    """The redacted bytes and the record counts of a JSON Lines artifact."""

    __slots__ = ("data", "duplicate_keys", "records", "unparseable")

    def __init__(self, data: bytes, records: int, unparseable: int, duplicate_keys: int) -> None:
        self.data = data
        self.records = records
        self.unparseable = unparseable
        self.duplicate_keys = duplicate_keys


def redact_json_lines(
    data: bytes, text: str, detector: Detector, placeholders: Placeholders, paths: Sequence[FieldPath] | None
) -> JsonLinesResult:
    """Redact the JSON Lines artifact ``data`` (``text`` is its UTF-8 decoding)."""
    raw_lines = data.split(b"\n")
    lines = text.split("\n")
    hits: dict[int, set[str]] = {}
    if paths is None:
        hits = detector.hit_lines(text, [0, *accumulate(len(line) + 1 for line in lines[:-1])])
    walker = Walker(detector, placeholders)
    decoder = Decoder()
    out: list[bytes] = []
    records = unparseable = duplicate_keys = 0
    for i, line in enumerate(lines):
        if not line.strip(_WS):
            out.append(raw_lines[i])
            continue
        records += 1
        seen = decoder.duplicates
        parsed = _parse(decoder, line)
        if parsed is None:
            unparseable += 1
            redacted = redact_text(line, detector, placeholders)
            out.append(raw_lines[i] if redacted == line else redacted.encode())
            continue
        value, start, end = parsed
        duplicate_keys += decoder.duplicates != seen
        if paths is not None:
            changed = apply_paths(value, paths, placeholders)
        elif i in hits or "\\" in line:
            walker.needles = None if "\\" in line else hits[i]
            value, changed = walker.walk(value)
        else:
            changed = False
        out.append((line[:start] + dumps(value) + line[end:]).encode() if changed else raw_lines[i])
    return JsonLinesResult(b"\n".join(out), records, unparseable, duplicate_keys)


def redact_json_document(
    data: bytes, text: str, detector: Detector, placeholders: Placeholders, paths: Sequence[FieldPath] | None
) -> tuple[bytes, int, int]:
    """Redact the JSON document ``data`` (``text`` its decoding): ``(bytes, records, records with a repeated key)``.

    For a top-level array a record is an item; otherwise the document is the one record."""
    decoder = Decoder()
    body = text[1:] if text.startswith("\ufeff") else text
    try:
        document, end = decoder.raw_decode(body, _skip(body, 0))
        if body[end:].strip(" \t\r\n"):
            raise json.JSONDecodeError("Extra data", body, end)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(
            f"the JSON document does not parse (line {exc.lineno}, column {exc.colno}): {exc.msg}"
        ) from None
    except RecursionError:
        raise InvalidArgument("the JSON document is nested too deeply to parse") from None
    array = isinstance(document, list) and not isinstance(document, Pairs)
    records = len(document) if array else 1
    if paths is not None:
        out = dumps(document).encode() if apply_paths(document, paths, placeholders) else data
        return out, records, _duplicates(document, decoder.duplicates)
    walker = Walker(detector, placeholders)
    if not array:
        if "\\" not in text and not detector.has_hit(text):
            return data, records, min(decoder.duplicates, 1)
        document, changed = walker.walk(document)
        return (dumps(document).encode() if changed else data), records, min(decoder.duplicates, 1)
    out, duplicate_keys = _redact_items(data, text, walker)
    return out, records, duplicate_keys


def _duplicates(document: Any, objects: int) -> int:
    """How many records of ``document`` (its items if an array) hold an object with a repeated key."""
    if not objects:
        return 0
    if isinstance(document, list) and not isinstance(document, Pairs):
        return sum(_has_pairs(item) for item in document)
    return 1


def _has_pairs(value: Any) -> bool:
    if isinstance(value, Pairs):
        return True
    if isinstance(value, dict):
        return any(_has_pairs(v) for v in value.values() if isinstance(v, dict | list))
    if isinstance(value, list):
        return any(_has_pairs(v) for v in value if isinstance(v, dict | list))
    return False


def _skip(text: str, pos: int) -> int:
    """The index of the first character at or after ``pos`` that is not JSON white space."""
    m = _SKIP.match(text, pos)
    return m.end() if m else pos


def _redact_items(data: bytes, text: str, walker: Walker) -> tuple[bytes, int]:
    """A top-level array item by item: unchanged items and every separator keep their text. Also the number of
    items holding an object with a repeated key."""
    decoder = Decoder()
    pos = _skip(text, text.index("[") + 1)
    parts = [text[:pos]]
    changed = False
    duplicate_keys = 0
    while text[pos] != "]":
        seen = decoder.duplicates
        value, end = decoder.raw_decode(text, pos)
        duplicate_keys += decoder.duplicates != seen
        raw = text[pos:end]
        if "\\" in raw or walker.detector.has_hit(raw):
            value, hit = walker.walk(value)
            if hit:
                raw = dumps(value)
                changed = True
        parts.append(raw)
        pos = _skip(text, end)
        if text[pos] == ",":
            pos = _skip(text, pos + 1)
        parts.append(text[end:pos])
    if not changed:
        return data, duplicate_keys
    parts.append(text[pos:])
    return "".join(parts).encode(), duplicate_keys
