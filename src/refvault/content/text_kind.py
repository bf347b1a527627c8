"""What kind of text bytes hold: JSON Lines, a JSON array of objects, CSV, plain UTF-8 text, or none (binary).

Used where bytes arrive without a declared media type: a tool's ``str`` result
being offloaded (:mod:`refvault.toolbox.offload`) and ``refvault put`` of stdin or
of a file whose name says nothing specific. Invariants (tested in
``tests/content/test_text_kind.py``):

* **A sniff only names a type.** It never changes, re-encodes or strips the
  bytes that are stored; a caller's explicit media type is never sniffed over.
* **Bounded work.** At most the first :data:`SNIFF_BYTES` (64 KiB) are looked
  at, whatever the input size. Input longer than that is judged as a prefix:
  ``complete=False`` says the bytes given are a prefix of the input.
* **Detected record types are queryable types.** The record types returned
  (``application/x-ndjson``, ``application/json``, ``text/csv``) are exactly
  those the record engine reads (:data:`refvault.model.RECORD_MEDIA_TYPES`), and
  all of them are text too, so a wrong guess still reads as text.
* **Never an active type.** Sniffing alone never yields a type a client renders
  or runs (HTML, SVG, XML, script): HTML bytes are ``text/plain; charset=utf-8``.

The rules of :func:`sniff_text_media_type`, first match wins (a UTF-8 byte order
mark is skipped; "line" means a line ended by ``\\n``, with any ``\\r`` before it):

* **Text at all** — the bytes are valid UTF-8 (a prefix may end inside a
  character) with no NUL and no C0 control character other than tab, line
  feed, vertical tab, form feed, carriage return, backspace and escape (ANSI
  colours in logs). Otherwise None: binary.
* ``application/x-ndjson`` — at least two complete lines that are JSON objects,
  and every complete non-blank line is one. A prefix's last line (cut by the
  prefix boundary) is not judged. A single JSON object is a JSON document, not a
  stream of records, so it is plain text.
* ``application/json`` — a JSON array whose elements are all objects: with the
  whole input, it must parse; with a prefix, it must open with ``[`` and hold at
  least one complete object, every complete element an object (the rest of the
  input is not checked). ``[]`` is an (empty) array of objects.
* ``text/csv`` — RFC 4180 CSV (comma-separated, ``"`` quoting, parsed strictly by
  :mod:`csv`): a header of at least two fields and at least one data row, every
  complete row with the header's field count (blank lines are skipped, as the
  record engine skips them). A prefix is judged up to its last line end.
* ``text/plain; charset=utf-8`` — any other text, including empty input.

JSON here is strict: ``NaN`` and ``Infinity`` are not JSON. :func:`detect_media_type`
adds what applies when there is no text: the binary signature sniffer
(:mod:`refvault.content.sniff`), else ``application/octet-stream``.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import re
from collections.abc import Iterator

from refvault.content.sniff import ACTIVE_TYPES, OCTET_STREAM, sniff_media_type
from refvault.model import base_type

__all__ = ["PLAIN_TEXT", "SNIFF_BYTES", "detect_media_type", "sniff_text_media_type"]

SNIFF_BYTES = 64 * 1024
"""The most leading bytes a sniff looks at."""

PLAIN_TEXT = "text/plain; charset=utf-8"
NDJSON = "application/x-ndjson"
JSON = "application/json"
CSV = "text/csv"

_BOM = b"\xef\xbb\xbf"
# C0 controls text never holds (tab, LF, VT, FF, CR, backspace and escape are allowed); NUL among them.
_CONTROL = re.compile(rb"[\x00-\x07\x0e-\x1a\x1c-\x1f]")
_WHITESPACE = " \t\r\n"
# Hints a file name can give that say no more than "text" or "bytes": sniffing may be more specific.
_VAGUE = frozenset({"text/plain", OCTET_STREAM})


def sniff_text_media_type(data: bytes | bytearray | memoryview, *, complete: bool = True) -> str | None:
    """The text media type of ``data`` (see the module docstring for the rules), or None if it is not text.

    ``complete`` is False when ``data`` is only a prefix of the input; input
    longer than :data:`SNIFF_BYTES` is judged by its first :data:`SNIFF_BYTES`
    bytes as a prefix. Never raises for any bytes.
    """
    head = bytes(data[:SNIFF_BYTES])
    if len(data) > SNIFF_BYTES:
        complete = False
    head = head.removeprefix(_BOM)
    if _CONTROL.search(head):
        return None
    try:
        text = codecs.getincrementaldecoder("utf-8")("strict").decode(head, final=complete)
    except UnicodeDecodeError:
        return None
    start = text.lstrip(_WHITESPACE)[:1]
    if start == "{" and _is_json_lines(text, complete):
        return NDJSON
    if start == "[" and _is_array_of_objects(text, complete):
        return JSON
    if start not in ("{", "[") and _is_csv(text, complete):
        return CSV
    return PLAIN_TEXT


def detect_media_type(data: bytes | bytearray | memoryview, *, complete: bool = True, hint: str | None = None) -> str:
    """The media type to store undeclared bytes under; ``data`` is the input or (``complete=False``) a prefix.

    ``hint`` is a weak guess, such as the type a file name suggests. A specific
    hint is kept as it is; a vague one (``text/plain``, ``application/octet-stream``)
    or none gives way to :func:`sniff_text_media_type`. Then a ``text/plain``
    hint is kept (text the sniff could not decode stays what its name says);
    otherwise a binary signature (:func:`~refvault.content.sniff.sniff_media_type`,
    never an active type) or ``application/octet-stream``.
    """
    if hint is not None and base_type(hint) not in _VAGUE:
        return hint
    detected = sniff_text_media_type(data, complete=complete)
    if detected is not None:
        return detected
    if hint is not None and base_type(hint) == "text/plain":
        return hint
    signature = sniff_media_type(data)
    return signature if signature is not None and signature not in ACTIVE_TYPES else OCTET_STREAM


# -- the rules ------------------------------------------------------------------------------------------------------


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _complete_lines(text: str, complete: bool) -> list[str]:
    """The lines of ``text`` that end within it (all of them when it is the whole input)."""
    if not complete:
        text = text[: text.rfind("\n") + 1]
    return text.split("\n")


def _is_json_lines(text: str, complete: bool) -> bool:
    objects = 0
    for line in _complete_lines(text, complete):
        stripped = line.strip(_WHITESPACE)
        if not stripped:
            continue
        if stripped[0] != "{":
            return False
        try:
            value = _DECODER.decode(stripped)
        except (ValueError, RecursionError):
            return False
        if not isinstance(value, dict):
            return False
        objects += 1
    return objects >= 2


def _skip_whitespace(text: str, index: int) -> int:
    while index < len(text) and text[index] in _WHITESPACE:
        index += 1
    return index


def _is_array_of_objects(text: str, complete: bool) -> bool:
    if complete:
        try:
            value = _DECODER.decode(text)
        except (ValueError, RecursionError):
            return False
        return isinstance(value, list) and all(isinstance(item, dict) for item in value)
    index = _skip_whitespace(text, _skip_whitespace(text, 0) + 1)  # past "[" and the space after it
    objects = 0
    while index < len(text):
        if text[index] != "{":
            return False
        try:
            _, index = _DECODER.raw_decode(text, index)
        except (ValueError, RecursionError):
            break  # cut by the prefix boundary, or not JSON: the rest is not judged
        objects += 1
        index = _skip_whitespace(text, index)
        if index < len(text) and text[index] != ",":
            return text[index] == "]" and not text[index + 1 :].strip(_WHITESPACE)
        index = _skip_whitespace(text, index + 1)
    return objects >= 1


def _is_csv(text: str, complete: bool) -> bool:
    if not complete:
        text = text[: text.rfind("\n") + 1]
    lines = io.StringIO(text, newline="")
    exhausted = False

    def feed() -> Iterator[str]:
        nonlocal exhausted
        yield from lines
        exhausted = True

    reader = csv.reader(feed(), strict=True)
    width = rows = 0
    try:
        for row in reader:
            if not row:
                continue  # a blank line
            if width == 0:
                width = len(row)
                if width < 2:
                    return False
            elif len(row) != width:
                return False
            else:
                rows += 1
    except csv.Error:
        # Only a quoted field cut by the prefix boundary (the reader ran out of input inside it) is forgiven.
        if complete or not exhausted:
            return False
    return rows >= 1
