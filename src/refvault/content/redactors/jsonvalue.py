"""Parsing and writing JSON records so that what redaction does not touch keeps its spelling.

Invariants:

* **Numbers keep their text.** Every number (``1e400``, ``0.10000000000000000555``, ``-0``) is parsed as a
  :class:`Number`, a ``str`` holding the number's source text, and written back verbatim: a changed record
  never rounds, overflows to ``Infinity`` or reformats an untouched number. The non-standard constants
  ``NaN``, ``Infinity`` and ``-Infinity`` (which Python's parser accepts) are kept verbatim the same way, so
  the output is exactly as strict as the input: valid JSON in, valid JSON out.
* **Duplicate keys are kept.** An object with a repeated key is parsed as :class:`Pairs` (its ``(key,
  value)`` pairs in order), not as a ``dict`` keeping only the last value, so every value is redacted and
  written back under its key; :class:`Decoder` counts them, so the caller can count the record.
* **Strict output.** :func:`dumps` writes compact JSON (``separators=(",", ":")``), non-ASCII characters as
  themselves unless a lone surrogate (from a ``\\ud800`` escape in the input) would make the text unencodable
  as UTF-8, in which case every non-ASCII character is escaped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["Decoder", "Number", "Pairs", "canonical", "dumps"]


class Number(str):
    """A JSON number (or non-finite constant) as it was written in the source."""

    __slots__ = ()


class Pairs(list[tuple[str, Any]]):
    """A JSON object with a repeated key: its ``(key, value)`` pairs in source order."""

    __slots__ = ()


class Decoder:
    """A strict-spelling JSON decoder (numbers as :class:`Number`, objects with a repeated key as :class:`Pairs`)
    that counts the objects with a repeated key it has made (``duplicates``); one per redaction call."""

    __slots__ = ("decoder", "duplicates")

    def __init__(self) -> None:
        self.duplicates = 0
        self.decoder = json.JSONDecoder(
            object_pairs_hook=self._object, parse_float=Number, parse_int=Number, parse_constant=Number
        )

    def _object(self, pairs: list[tuple[str, Any]]) -> dict[str, Any] | Pairs:
        obj = dict(pairs)
        if len(obj) == len(pairs):
            return obj
        self.duplicates += 1
        return Pairs(pairs)

    def raw_decode(self, text: str, pos: int = 0) -> tuple[Any, int]:
        """``(value, end)`` of the JSON value at ``text[pos:]`` (:meth:`json.JSONDecoder.raw_decode`)."""
        return self.decoder.raw_decode(text, pos)


_ENCODE = json.encoder.encode_basestring
_ENCODE_ASCII = json.encoder.encode_basestring_ascii


def _emit(value: Any, out: list[str], enc: Callable[[str], str], sort_keys: bool) -> None:
    if isinstance(value, Number):
        out.append(str.__str__(value))
    elif isinstance(value, str):
        out.append(enc(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        out.append(json.dumps(value, allow_nan=False))
    elif isinstance(value, dict | Pairs):
        items = list(value.items()) if isinstance(value, dict) else list(value)
        if sort_keys:
            items.sort(key=lambda kv: kv[0])
        out.append("{")
        for n, (key, item) in enumerate(items):
            if n:
                out.append(",")
            out.append(enc(key))
            out.append(":")
            _emit(item, out, enc, sort_keys)
        out.append("}")
    elif isinstance(value, list):
        out.append("[")
        for n, item in enumerate(value):
            if n:
                out.append(",")
            _emit(item, out, enc, sort_keys)
        out.append("]")
    else:  # pragma: no cover - the decoder makes nothing else
        raise TypeError(f"not a JSON value: {type(value).__name__}")


def dumps(value: Any, *, sort_keys: bool = False) -> str:
    """Compact JSON of a decoded value (see the module docstring)."""
    out: list[str] = []
    _emit(value, out, _ENCODE, sort_keys)
    text = "".join(out)
    try:
        text.encode()
    except UnicodeEncodeError:
        out = []
        _emit(value, out, _ENCODE_ASCII, sort_keys)
        return "".join(out)
    return text


def canonical(value: Any) -> str:
    """Sorted-key compact JSON of a decoded value: equal values, equal text (``1`` and ``"1"`` differ)."""
    return dumps(value, sort_keys=True)
