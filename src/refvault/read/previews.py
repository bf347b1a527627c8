"""Bounded previews of offloaded tool results, the capture-failure fallback, and a local token estimate.

When a tool result is too large for the model's context, the Toolbox captures it
as an artifact and shows the model :func:`preview` of it instead. Invariants,
each tested in ``tests/test_previews.py``:

* **Bounded.** ``len(json.dumps(preview(..., max_chars=M))) <= max(M, PREVIEW_SLACK)``
  for every input (so always ``<= M + PREVIEW_SLACK``), measured with
  ``json.dumps`` defaults (``ensure_ascii=True``, the longer rendering). The
  metadata of a preview (ids, counts, ``covers``/``omits``/``read_more`` wording)
  never exceeds ``PREVIEW_SLACK`` characters; the content (head/tail lines,
  JSON shape and sample, schema and rows) gets what is left of ``M`` and is
  dropped entirely when nothing is left. :func:`truncation` has the same bound
  with ``TRUNCATION_SLACK``.
* **Honest.** Every preview says in ``covers`` exactly what it shows and in
  ``omits`` what it does not; ``complete`` is true only when the preview shows
  the whole artifact (then ``omits`` is ``"nothing"``).
* **Work bounded by the budget, not the artifact.** Beyond O(n) C-speed passes
  (counting newlines; finding base64 spans, at most 4 KiB decoded per span, in
  the text and in each string shown), a preview touches O(``max_chars``) bytes of text, visits
  O(budget) nodes of a JSON value (a 10,000-deep or 100,000-key document is
  fine: nothing recurses), and parses JSON bytes only up to ``JSON_PARSE_LIMIT``
  (larger documents are previewed as text, with a ``note``).
* **Metadata is bounded too.** A media type whose JSON form exceeds 300
  characters (only possible with long non-ASCII parameter values) is shown as
  its ``type/subtype`` plus a note; ``describe_artifact`` has the full one.
* **Never content where it must not be.** Binary artifacts and sealed artifacts
  get type and size only: no bytes, no base64. Text is decoded with
  ``errors="replace"`` and cut only at line ends or UTF-8 character boundaries.
* **Never base64 of binary.** Base64-encoded bytes inside shown text, JSON
  strings and keys, record values and field names (what
  :func:`refvault.content.encoded.find_encoded` finds: ``data:`` URLs, runs of
  128+ base64 characters decoding to binary) are shown as
  ``[base64 omitted: <media type>, <size> bytes]``, found in the whole string or
  artifact so a span cut by the budget is still replaced whole; a text head or
  tail cut inside one extends to its edge. Such a preview is never ``complete``
  and says so in ``covers`` and ``omits``; :func:`truncation` counts them in
  ``placeholders``. Tested in ``tests/security/test_gateway_base64.py``.

Lines are numbered from 0 and split at ``\\n`` only (a ``\\r`` before it stays
part of the line's text); an artifact has ``count("\\n")`` lines, plus one if it
does not end with ``\\n``; an empty artifact has 0 lines. Ranges written as
``[start, end]`` in ``*_lines``/``*_bytes`` fields and in the suggested read
calls are end-exclusive (``*_lines`` counts a line the budget cut as touched;
``*_bytes`` is exact); ranges in the ``covers``/``omits`` sentences are
inclusive ("lines 0-19").
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any, Literal, cast

from refvault.content.encoded import MIN_DATA_URL_CHARS, find_encoded, mask, placeholder
from refvault.errors import InvalidArgument
from refvault.model import Descriptor
from refvault.read._access import base_type, is_records, is_text

__all__ = [
    "JSON_PARSE_LIMIT",
    "PREVIEW_SLACK",
    "TRUNCATION_SLACK",
    "RecordsSummary",
    "estimate_tokens",
    "preview",
    "truncation",
]

PREVIEW_SLACK = 2048
"""Most characters a preview's metadata takes (everything but its content body); see the module docstring."""

TRUNCATION_SLACK = 512
"""Most characters :func:`truncation` adds around its text (``len(json.dumps(t)) <= max(max_chars, this)``)."""

JSON_PARSE_LIMIT = 8 * 1024 * 1024
"""JSON bytes larger than this are not parsed for a preview; they are previewed as text."""

Kind = Literal["text", "json", "records", "binary"]


# --------------------------------------------------------------------------------------------------
# Token estimate
# --------------------------------------------------------------------------------------------------

_UPPER = bytes(range(0x41, 0x5B))
_LOWER = bytes(range(0x61, 0x7B))
_DIGIT = bytes(range(0x30, 0x3A))
_SPACE = b" \t\r\f\v"


def _class_table() -> bytes:
    table = bytearray(b"p" * 256)  # ASCII punctuation, symbols and control characters
    for byte in _UPPER:
        table[byte] = ord("U")
    for byte in _LOWER:
        table[byte] = ord("l")
    for byte in _DIGIT:
        table[byte] = ord("d")
    for byte in _SPACE:
        table[byte] = ord(" ")
    table[0x0A] = ord("n")
    for byte in range(0x80, 0x100):
        table[byte] = ord("h")  # any byte of a non-ASCII UTF-8 sequence (or an invalid byte)
    return bytes(table)


_CLASSES = _class_table()
_LETTER_RUNS = bytes.maketrans(b"lUdpnh ", b"aaxxxxx")
_DIGIT_RUNS = bytes.maketrans(b"lUdpnh ", b"xxaxxxx")
_TOKEN_CHUNK = 1 << 20


def _chunk_tokens(chunk: bytes) -> int:
    classes = chunk.translate(_CLASSES)
    letters = b"x" + classes.translate(_LETTER_RUNS)
    digits = b"x" + classes.translate(_DIGIT_RUNS)
    # Runs are separated by "x", so non-overlapping counts of "a" * k add up floor(len / k) per run.
    return (
        letters.count(b"xa")
        + letters.count(b"aaaaaa")
        + digits.count(b"xa")
        + digits.count(b"aaa")
        + classes.count(b" d")
        + classes.count(b"lU")
        + classes.count(b"UU")
        + classes.count(b"p")
        + classes.count(b"n")
        + (2 * classes.count(b"h") + 4) // 5
    )


def estimate_tokens(text: str | bytes) -> int:
    """Estimate how many tokens ``text`` costs a language model, without any tokenizer or network.

    The rule, over the UTF-8 bytes, in 1 MiB chunks (each chunk boundary can only
    add a token or two):

    * a run of ASCII letters costs ``1 + len // 6``, plus 1 at every lower-to-upper
      case change and 1 per pair of consecutive capitals (``camelCase``,
      ``CONSTANTS`` and base64 split there);
    * a run of ASCII digits costs ``1 + len // 3`` (tokenizers split numbers into
      groups of up to three digits), plus 1 if a space precedes it (that space is
      its own token);
    * every ASCII punctuation mark, symbol or control character costs 1, every
      newline costs 1, other whitespace is free;
    * non-ASCII text costs 2 tokens per 5 bytes of UTF-8 (about 1.2 per CJK
      character, 0.8 per Cyrillic, Greek or Arabic letter, 1.6 per emoji).

    Hence ``estimate_tokens(b) <= len(b)`` for bytes, and for a str ``s`` the
    estimate is at most ``len(s)`` when ``s`` is ASCII and at most ``2 * len(s)``
    always (cheap upper bounds for a caller deciding whether to estimate at all).

    Measured against the ``cl100k_base`` and ``o200k_base`` encodings (offline,
    bpe-openai 0.1.4, which embeds them; not a dependency) on 20-800 KB samples,
    the ratio estimate/actual was: English prose 1.38, Python 1.43, C 1.57, JSON
    Lines 1.37, indented JSON 1.26, JSON Schema 1.42, German 1.02 (cl100k) /
    1.16 (o200k), Chinese 1.22/1.45, Japanese 1.20/1.56, Korean 1.10/1.51,
    Russian 1.62/2.22, Arabic 0.99/1.78, Hindi 1.01/2.64, hex 1.04, base64
    0.94/0.99, space-separated integers 1.22. So it overestimates most text by
    about 40% (offloading a little early is the safe side) and was never below
    0.94 of either encoding. Other model families' tokenizers differ; treat the
    estimate as good to within a factor of about 1.6 for English, code and JSON,
    and 2.7 for other scripts.

    O(n) with a handful of C-level passes (``bytes.translate``/``count``/
    ``replace``) per chunk and no per-character Python loop.
    """
    total = 0
    if isinstance(text, str):
        for start in range(0, len(text), _TOKEN_CHUNK):
            total += _chunk_tokens(text[start : start + _TOKEN_CHUNK].encode("utf-8", "surrogatepass"))
        return total
    data = bytes(text)
    for start in range(0, len(data), _TOKEN_CHUNK):
        total += _chunk_tokens(data[start : start + _TOKEN_CHUNK])
    return total


# --------------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordsSummary:
    """What the records engine knows cheaply about a record artifact: its schema, count and first rows.

    ``fields`` is ``((name, type), ...)`` in schema order; ``first_rows`` holds
    the first few records (a preview shows at most ten of them).
    """

    fields: tuple[tuple[str, str], ...]
    count: int
    first_rows: tuple[Mapping[str, object], ...]


def _n(count: int | None, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _dumps_len(value: object) -> int:
    return len(json.dumps(value))


def _esc_len(text: str) -> int:
    """Characters ``text`` takes inside a JSON string literal (``json.dumps`` defaults)."""
    return len(json.dumps(text)) - 2


def _clean(text: str, limit: int) -> str:
    """A display string: lone surrogates replaced, at most ``limit`` characters (``…`` marks a cut)."""
    if len(text) > limit:
        text = text[: max(limit - 1, 0)] + "…"
    return text.encode("utf-8", "replace").decode("utf-8")


class _Masker:
    """Shows strings with base64-encoded bytes (:mod:`refvault.content.encoded`) as placeholders, for one preview.

    ``masked`` counts the strings shown masked since it was last reset (each build of a
    preview resets it, so it describes what that build shows); results are cached per string.
    """

    def __init__(self) -> None:
        self.masked = 0
        self._cache: dict[str, str | None] = {}  # a string -> how it is shown (None: as it is)

    def __call__(self, text: str) -> str:
        if len(text) < MIN_DATA_URL_CHARS:
            return text
        if text in self._cache:
            shown = self._cache[text]
        else:
            masked, count = mask(text)
            shown = self._cache[text] = masked if count else None
        if shown is None:
            return text
        self.masked += 1
        return shown


def _shown(text: str, masker: _Masker | None) -> str:
    return text if masker is None else masker(text)


def _is_continuation(data: bytes, offset: int) -> bool:
    return 0 <= offset < len(data) and 0x80 <= data[offset] <= 0xBF


def _back_to_boundary(data: bytes, offset: int) -> int:
    """Move ``offset`` back (at most 3 bytes) so it does not fall inside a UTF-8 sequence."""
    moved = 0
    while moved < 3 and offset > 0 and _is_continuation(data, offset):
        offset -= 1
        moved += 1
    return offset


def _forward_to_boundary(data: bytes, offset: int) -> int:
    moved = 0
    while moved < 3 and offset < len(data) and _is_continuation(data, offset):
        offset += 1
        moved += 1
    return offset


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _fit(build: Callable[[int], dict[str, Any]], max_chars: int) -> dict[str, Any]:
    """The largest ``build(budget)`` whose JSON fits ``max_chars`` (``build(0)`` = no content body).

    Every iteration lowers the budget by at least the overshoot plus 16, so this ends;
    in practice it takes one or two builds.
    """
    empty = build(0)
    budget = max_chars - _dumps_len(empty)
    while budget > 0:
        result = build(budget)
        over = _dumps_len(result) - max_chars
        if over <= 0:
            return result
        budget -= over + 16
    return empty


def _checked_max_chars(max_chars: object) -> int:
    if not isinstance(max_chars, int) or isinstance(max_chars, bool) or max_chars < 0:
        raise InvalidArgument("max_chars must be a non-negative integer")
    return max_chars


_MEDIA_TYPE_CHARS = 300


def _base(descriptor: Descriptor, kind: Kind) -> dict[str, Any]:
    media_type = descriptor.media_type
    if _dumps_len(media_type) > _MEDIA_TYPE_CHARS:
        # Only a pathological type (long non-ASCII parameter values) gets here; keep the metadata bounded.
        media_type = base_type(media_type) + "; (parameters omitted: see describe_artifact)"
    return {
        "artifact_id": descriptor.artifact_id,
        "media_type": media_type,
        "size": descriptor.size,
        "disclosure": descriptor.disclosure,
        "kind": kind,
        "capture_status": str(descriptor.completeness.get("status", "unknown")),
        "complete": False,
        "covers": "",
        "omits": "",
    }


def _query_hint(artifact_id: str) -> str:
    return (
        " If it holds records (JSON Lines, CSV, Parquet or a JSON array of objects),"
        f' query_artifact(artifact_id="{artifact_id}", where=..., fields=..., order=..., limit=...) selects them.'
    )


def _hinted(result: dict[str, Any], hint: str) -> dict[str, Any]:
    if hint and not result["complete"]:
        result["read_more"] += hint
    return result


def _describe_hint(artifact_id: str) -> str:
    return f'describe_artifact(artifact_id="{artifact_id}") shows its metadata and capture omissions.'


def _text_read_more(
    artifact_id: str, lines: tuple[int, int] | None = None, byte_range: tuple[int, int] | None = None
) -> str:
    parts = []
    if lines is not None:
        parts.append(
            f'Read the omitted lines with read_artifact(artifact_id="{artifact_id}", lines=[{lines[0]}, {lines[1]}])'
            " (zero-based, end exclusive; each call returns up to about 20000 characters and says where to continue)."
        )
    else:
        parts.append(
            f'Read lines with read_artifact(artifact_id="{artifact_id}", lines=[start, end])'
            " (zero-based, end exclusive; each call returns up to about 20000 characters and says where to continue)."
        )
    if byte_range is not None:
        parts.append(
            f'Read inside a long line with read_artifact(artifact_id="{artifact_id}", '
            f"byte_range=[{byte_range[0]}, {byte_range[1]}]) ([offset, length])."
        )
    parts.append(f'Find lines containing a string with read_artifact(artifact_id="{artifact_id}", pattern="...").')
    parts.append(_describe_hint(artifact_id))
    return " ".join(parts)


# --------------------------------------------------------------------------------------------------
# Text
# --------------------------------------------------------------------------------------------------


class _Text:
    """Line geometry of a text artifact (or of the prefix of one that was supplied)."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data = data
        self.size = size
        self.whole = len(data) == size
        self.newlines = data.count(b"\n")
        if self.whole:
            self.lines: int | None = self.newlines + (1 if data and not data.endswith(b"\n") else 0)
        else:
            self.lines = None
        # Base64-encoded bytes (refvault.content.encoded) are shown as placeholders: byte spans, sorted.
        # Latin-1 maps each byte to one character, so positions are byte offsets (the spans are ASCII).
        found = find_encoded(data.decode("latin-1")) if len(data) >= MIN_DATA_URL_CHARS else []
        self.spans = [(each.start, each.end, placeholder(each)) for each in found]
        self.span_ends = [end for _, end, _ in self.spans]

    def show(self, start: int, end: int) -> str:
        """The text of bytes ``[start, end)``, each base64 span touching them shown as its placeholder."""
        first = bisect_right(self.span_ends, start)
        if first == len(self.spans) or self.spans[first][0] >= end:
            return _decode(self.data[start:end])
        pieces: list[str] = []
        cursor = start
        for span_start, span_end, shown in self.spans[first:]:
            if span_start >= end:
                break
            if span_start > cursor:
                pieces.append(_decode(self.data[cursor:span_start]))
            pieces.append(shown)
            cursor = span_end
        if cursor < end:
            pieces.append(_decode(self.data[cursor:end]))
        return "".join(pieces)

    def masked(self, ranges: list[tuple[int, int]]) -> int:
        """How many base64 spans touch any of the byte ranges (so are shown as placeholders there)."""
        return sum(
            1
            for start, end, _ in self.spans
            if any(start < stop and begin < end for begin, stop in ranges if begin < stop)
        )

    def span_around(self, offset: int) -> tuple[int, int] | None:
        """The base64 span strictly containing ``offset`` (start < offset < end), if any."""
        index = bisect_right(self.span_ends, offset)
        if index < len(self.spans) and self.spans[index][0] < offset:
            return self.spans[index][0], self.spans[index][1]
        return None

    def line_of(self, offset: int) -> int:
        """Index of the line holding byte ``offset`` (= newlines before it); counts the shorter side."""
        if offset <= len(self.data) // 2:
            return self.data.count(b"\n", 0, offset)
        return self.newlines - self.data.count(b"\n", offset)

    def at_line_start(self, offset: int) -> bool:
        return offset == 0 or self.data[offset - 1] == 0x0A

    def head(self, budget: int, stop: int) -> tuple[str, int]:
        """Whole lines from the start, ending by ``stop`` (a line start), whose escaped text fits ``budget``.

        Returns ``(text, end offset)``. A line at the very end without ``\\n`` counts as whole only
        if the data is the whole artifact. Escaped text costs at least one character per byte, so
        ``budget`` bytes always suffice.
        """
        data = self.data
        limit = min(stop, budget)
        pieces: list[str] = []
        used = 0
        pos = 0
        while pos < stop:
            newline = data.find(b"\n", pos, limit)
            if newline < 0:
                if not (self.whole and stop == len(data) and len(data) <= limit):
                    break
                end = len(data)
            else:
                end = newline + 1
            piece = self.show(pos, end)
            cost = _esc_len(piece)
            if used + cost > budget:
                break
            pieces.append(piece)
            used += cost
            pos = end
        return "".join(pieces), pos

    def tail(self, budget: int, floor: int) -> tuple[str, int]:
        """Whole lines ending at the end, none before ``floor`` (a line start): ``(text, start offset)``."""
        data = self.data
        end = len(data)
        low = max(floor, end - budget)
        pieces: list[str] = []
        used = 0
        start = end
        while start > floor:
            newline = data.rfind(b"\n", low, start - 1)
            if newline >= 0:
                line_start = newline + 1
            elif low == floor:
                line_start = floor
            else:
                break
            piece = self.show(line_start, start)
            cost = _esc_len(piece)
            if used + cost > budget:
                break
            pieces.append(piece)
            used += cost
            start = line_start
        pieces.reverse()
        return "".join(pieces), start

    def cut_prefix(self, start: int, budget: int, stop: int) -> tuple[str, int]:
        """The longest text in ``[start, stop)`` from ``start`` whose escaped form fits ``budget``.

        It ends on a character boundary (or at ``stop``).
        """
        data = self.data
        low, high = start, min(stop, start + budget)
        while low < high:  # largest end that fits (the shown length never shrinks as the end grows)
            mid = (low + high + 1) // 2
            if _esc_len(self.show(start, mid)) <= budget:
                low = mid
            else:
                high = mid - 1
        end = low if low == stop else _back_to_boundary(data, low)
        around = self.span_around(end)
        if around is not None and around[1] <= stop:
            end = around[1]  # the placeholder stands for the whole span
        return self.show(start, end), end

    def cut_suffix(self, floor: int, budget: int) -> tuple[str, int]:
        """The longest text ending at the end, starting on a character boundary ``>= floor``, fitting ``budget``."""
        data = self.data
        end = len(data)
        low, high = max(floor, end - budget), end
        while low < high:  # smallest start that fits
            mid = (low + high) // 2
            if _esc_len(self.show(mid, end)) <= budget:
                high = mid
            else:
                low = mid + 1
        start = _forward_to_boundary(data, low)
        around = self.span_around(start)
        if around is not None and around[0] >= floor:
            start = around[0]  # the placeholder stands for the whole span
        return self.show(start, end), start

    def lines_words(self, start: int, end: int) -> str:
        """``lines a-b`` for bytes ``[start, end)``, saying which end lines are only partly included."""
        first = self.line_of(start)
        last = self.line_of(end - 1)
        starts_inside = not self.at_line_start(start)
        ends_inside = end < len(self.data) and not self.at_line_start(end)
        if not self.whole and end == len(self.data) and not self.at_line_start(end):
            ends_inside = True
        if first == last:
            words = f"line {first}"
            if starts_inside and ends_inside:
                words += " (a middle part of it)"
            elif starts_inside:
                words += " (its end only)"
            elif ends_inside:
                words += " (its start only)"
            return words
        words = f"lines {first}-{last}"
        notes = []
        if starts_inside:
            notes.append(f"line {first} from inside")
        if ends_inside:
            notes.append(f"line {last} only its start")
        return words + (f" ({'; '.join(notes)})" if notes else "")


def _text_preview(
    descriptor: Descriptor, data: bytes, max_chars: int, *, note: str | None = None, hint: str = ""
) -> dict[str, Any]:
    geometry = _Text(data, descriptor.size)
    size = descriptor.size
    artifact_id = descriptor.artifact_id
    lines_total = geometry.lines

    def base() -> dict[str, Any]:
        result = _base(descriptor, "text")
        if note is not None:
            result["note"] = note
        result["lines"] = lines_total
        return result

    def head_part(head_budget: int, stop: int) -> tuple[str, int]:
        """Whole lines first; if not even one fits, the start of the first line."""
        head_text, head_end = geometry.head(head_budget, stop)
        if head_end == 0:
            head_text, head_end = geometry.cut_prefix(0, head_budget, stop)
        return head_text, head_end

    def build(budget: int) -> dict[str, Any]:
        result = base()
        if size == 0:
            result.update(complete=True, covers="the whole artifact: it is empty (0 lines, 0 bytes)", omits="nothing")
            result.update(head="", head_lines=[0, 0], head_bytes=[0, 0], tail="", tail_lines=[0, 0], tail_bytes=[0, 0])
            result["read_more"] = _describe_hint(artifact_id)
            return result
        if budget <= 0:
            return _text_nothing_shown(result, geometry, artifact_id)
        if geometry.whole and size <= budget:
            whole = geometry.show(0, size)
            if _esc_len(whole) <= budget:
                result.update(
                    complete=True,
                    covers=f"the whole artifact: all {_n(lines_total, 'line')} ({_n(size, 'byte')})",
                    omits="nothing",
                    head=whole,
                    head_lines=[0, lines_total],
                    head_bytes=[0, size],
                    tail="",
                    tail_lines=[lines_total, lines_total],
                    tail_bytes=[size, size],
                )
                result["read_more"] = (
                    "This preview shows everything; pass the id to a tool taking a Ref to reuse it. "
                    + _describe_hint(artifact_id)
                )
                return result
        end = len(data)
        head_text, head_end = head_part(budget if not geometry.whole else budget // 2, end)
        tail_text, tail_start = "", end
        if geometry.whole and head_end < end:
            tail_budget = budget - _esc_len(head_text)
            tail_text, tail_start = geometry.tail(tail_budget, head_end)
            if tail_start == end:
                tail_text, tail_start = geometry.cut_suffix(head_end, tail_budget)
            # Give what the tail left unused back to the head (it stops where the tail starts).
            more_text, more_end = head_part(budget - _esc_len(tail_text), tail_start)
            if more_end > head_end:
                head_text, head_end = more_text, more_end
        return _text_result(result, geometry, artifact_id, head_text, head_end, tail_text, tail_start)

    return _fit(lambda budget: _hinted(_text_masking_noted(build(budget), geometry), hint), max_chars)


_MASKED_COVERS = "; base64-encoded bytes in it are shown as placeholders ([base64 omitted: <media type>, <size>])"
_MASKED_OMITS = "the base64 text of encoded bytes (shown as placeholders)"


def _masked_note(result: dict[str, Any], masked: int, read_more: str) -> dict[str, Any]:
    """If ``masked``, say that base64-encoded bytes are shown as placeholders: the preview is then not complete."""
    if not masked:
        return result
    result["covers"] += _MASKED_COVERS
    omits = _MASKED_OMITS
    result["omits"] = f"{result['omits']}; {omits}" if result["omits"] and not result["complete"] else omits
    if result["complete"]:
        result["complete"] = False
        result["read_more"] = read_more
    return result


def _text_masking_noted(result: dict[str, Any], geometry: _Text) -> dict[str, Any]:
    """A text preview, its shown byte ranges checked for base64 spans shown as placeholders."""
    ranges = [tuple(result[key]) for key in ("head_bytes", "tail_bytes") if key in result]
    count = geometry.masked([(int(start), int(end)) for start, end in ranges]) if geometry.spans else 0
    return _masked_note(result, count, _text_read_more(result["artifact_id"]))


def _text_nothing_shown(result: dict[str, Any], geometry: _Text, artifact_id: str) -> dict[str, Any]:
    if geometry.whole:
        result["covers"] = "no content: the preview budget left no room for any line"
        result["omits"] = f"all {_n(geometry.lines, 'line')} ({_n(geometry.size, 'byte')})"
    else:
        result["covers"] = "no content: the preview budget left no room for any line"
        result["omits"] = f"all {geometry.size} bytes (the line count is unknown)"
    result["read_more"] = _text_read_more(artifact_id, (0, geometry.lines) if geometry.lines else None, None)
    return result


def _text_result(
    result: dict[str, Any],
    geometry: _Text,
    artifact_id: str,
    head_text: str,
    head_end: int,
    tail_text: str,
    tail_start: int,
) -> dict[str, Any]:
    data, size = geometry.data, geometry.size
    shown_bytes = head_end + (len(data) - tail_start)
    segments = []
    if head_end > 0:
        segments.append(geometry.lines_words(0, head_end))
    if tail_start < len(data):
        segments.append(geometry.lines_words(tail_start, len(data)))
    if geometry.whole and head_end >= tail_start:
        # Head and tail met: everything is shown (possible when lines fit only after the split).
        result.update(
            complete=True,
            covers=f"the whole artifact: all {_n(geometry.lines, 'line')} ({_n(size, 'byte')}), as head and tail",
            omits="nothing",
        )
    else:
        shown = " and ".join(segments) if segments else "no line"
        if geometry.whole:
            result["covers"] = (
                f"{shown} of {_n(geometry.lines, 'line')} (zero-based, inclusive): {shown_bytes} of {_n(size, 'byte')}"
            )
            omitted_end = tail_start
            result["omits"] = (
                f"bytes {head_end}-{omitted_end - 1} ({_n(omitted_end - head_end, 'byte')}), which hold "
                + geometry.lines_words(head_end, omitted_end)
            )
        else:
            result["covers"] = (
                f"{shown} (zero-based, inclusive): the first {head_end} of {_n(size, 'byte')};"
                " the line count is unknown"
            )
            result["omits"] = f"bytes {head_end}-{size - 1} ({_n(size - head_end, 'byte')}); only a prefix was examined"
    result["head"] = head_text
    result["head_lines"] = [0, geometry.line_of(head_end) + (0 if geometry.at_line_start(head_end) else 1)]
    result["head_bytes"] = [0, head_end]
    if tail_start < len(data) or geometry.whole:
        result["tail"] = tail_text
        first_tail = geometry.line_of(tail_start) if tail_start < len(data) else (geometry.lines or 0)
        result["tail_lines"] = [first_tail, geometry.lines]
        result["tail_bytes"] = [tail_start, len(data)]
    if result["complete"]:
        result["read_more"] = (
            "This preview shows everything; pass the id to a tool taking a Ref to reuse it. "
            + _describe_hint(artifact_id)
        )
        return result
    next_lines: tuple[int, int] | None = None
    byte_range: tuple[int, int] | None = None
    first_omitted = geometry.line_of(head_end) + (0 if geometry.at_line_start(head_end) else 1)
    if geometry.whole:
        last_omitted_end = geometry.line_of(tail_start) if tail_start < len(data) else (geometry.lines or 0)
        if last_omitted_end > first_omitted:
            next_lines = (first_omitted, last_omitted_end)
        if not geometry.at_line_start(head_end) or not geometry.at_line_start(tail_start):
            byte_range = (head_end, min(tail_start - head_end, 20_000))
    else:
        next_lines = (first_omitted, first_omitted + 100)
        if not geometry.at_line_start(head_end):
            byte_range = (head_end, 20_000)
    result["read_more"] = _text_read_more(artifact_id, next_lines, byte_range)
    return result


# --------------------------------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------------------------------


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


def _fit_escaped(text: str, budget: int) -> str:
    """The longest prefix of ``text`` whose JSON-escaped form fits ``budget`` (binary search)."""
    if _esc_len(text) <= budget:
        return text
    low, high = 0, min(len(text), budget)
    while low < high:
        mid = (low + high + 1) // 2
        if _esc_len(text[:mid]) <= budget:
            low = mid
        else:
            high = mid - 1
    return text[:low]


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
            result["complete"] = True
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


# --------------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------------


def _cell(value: object, limit: int, masker: _Masker | None = None) -> tuple[object, bool]:
    """A JSON-ready rendering of one record value, at most about ``limit`` characters: ``(value, cut)``."""
    if value is None or isinstance(value, bool):
        return value, False
    if isinstance(value, int):
        text = _scalar_json(value, limit)
        return (value, False) if len(text) <= limit else _cell(text, limit)
    if isinstance(value, float):
        return (value, False) if math.isfinite(value) else (str(value), False)
    if isinstance(value, str):
        value = _shown(value, masker)
        if len(value) <= limit:
            return _clean(value, limit), False
        return _clean(value, limit), True
    if isinstance(value, Mapping | list | tuple):
        text, whole = _render(value, limit, masker)
        return text, not whole
    rendered = json.loads(_scalar_json(value, limit))
    if isinstance(rendered, str) and len(rendered) > limit:
        return _clean(rendered, limit), True
    return rendered, False


_RECORD_LADDER = (
    (10, 200, 50),
    (10, 100, 50),
    (5, 100, 40),
    (5, 60, 30),
    (3, 40, 20),
    (2, 30, 12),
    (1, 20, 8),
    (1, 12, 4),
    (0, 0, 8),
    (0, 0, 2),
)


def _records_preview(descriptor: Descriptor, summary: RecordsSummary, max_chars: int) -> dict[str, Any]:
    artifact_id = descriptor.artifact_id
    count = summary.count
    total_fields = len(summary.fields)
    read_more = (
        f'Select records with query_artifact(artifact_id="{artifact_id}", where={{"field": "name", "op": "eq",'
        ' "value": ...}, fields=["name", ...], order=[{"field": "name", "direction": "desc"}], limit=100)'
        ' (ops: eq, ne, lt, lte, gt, gte, in, contains, is_null; combine with {"and": [...]}, {"or": [...]},'
        ' {"not": ...}; record_range=[start, end] limits by position; pass next_cursor as cursor for the next page).'
        f' read_artifact(artifact_id="{artifact_id}", pattern="...") searches the raw text of a text format.'
        " " + _describe_hint(artifact_id)
    )
    masker = _Masker()

    def build(budget: int) -> dict[str, Any]:
        masker.masked = 0
        return _masked_note(shown(budget), masker.masked, read_more)

    def shown(budget: int) -> dict[str, Any]:
        result = _base(descriptor, "records")
        result["records"] = count
        result["fields"] = total_fields
        if budget <= 0:
            result["covers"] = "the record and field counts only: no room for the schema or rows"
            result["omits"] = f"the schema ({_n(total_fields, 'field')}) and all {_n(count, 'record')}"
            result["read_more"] = read_more
            return result
        for rows_wanted, cap, fields_wanted in _RECORD_LADDER:
            masker.masked = 0
            body, cut = _records_body(summary, rows_wanted, cap, fields_wanted, masker)
            if _dumps_len(body) <= budget:
                break
        else:
            body, cut = {"schema": {}, "first_rows": []}, False
            masker.masked = 0
        result.update(body)
        shown_fields = len(body["schema"])
        shown_rows = len(body["first_rows"])
        complete = shown_rows == count and shown_fields == total_fields and not cut
        if complete:
            result["complete"] = True
            result["covers"] = (
                f"the whole artifact: all {_n(count, 'record')} and the schema ({_n(total_fields, 'field')})"
            )
            result["omits"] = "nothing"
            result["read_more"] = read_more
            return result
        rows_words = f"records 0-{shown_rows - 1}" if shown_rows else "no record"
        result["covers"] = (
            f"the schema ({shown_fields} of {_n(total_fields, 'field')}) and {rows_words} of {count}"
            " (zero-based, inclusive)"
            + (f"; values longer than {body['value_chars']} characters are cut (marked …)" if cut else "")
        )
        omitted = []
        if shown_rows < count:
            omitted.append(f"records {shown_rows}-{count - 1} ({_n(count - shown_rows, 'record')})")
        if shown_fields < total_fields:
            omitted.append(f"fields after the first {shown_fields} ({_n(total_fields - shown_fields, 'field')})")
        if cut:
            omitted.append("the cut parts of long values")
        result["omits"] = "; ".join(omitted)
        result["read_more"] = read_more
        return result

    return _fit(build, max_chars)


def _records_body(
    summary: RecordsSummary, rows_wanted: int, cap: int, fields_wanted: int, masker: _Masker | None = None
) -> tuple[dict[str, Any], bool]:
    schema: dict[str, str] = {}
    names: list[tuple[str, str]] = []
    cut = False
    for name, kind in summary.fields[:fields_wanted]:
        shown = _clean(_shown(str(name), masker), 80)
        if shown in schema:
            continue
        schema[shown] = _clean(str(kind), 40)
        names.append((name, shown))
        cut = cut or len(str(name)) > 80 or len(str(kind)) > 40
    rows: list[dict[str, object]] = []
    for row in summary.first_rows[: min(rows_wanted, summary.count)]:
        rendered: dict[str, object] = {}
        for name, shown in names:
            value, was_cut = _cell(row.get(name), cap, masker)
            rendered[shown] = value
            cut = cut or was_cut
        rows.append(rendered)
    body: dict[str, Any] = {"schema": schema, "first_rows": rows}
    if cut:
        body["value_chars"] = cap
    return body, cut


# --------------------------------------------------------------------------------------------------
# Binary, sealed, metadata only
# --------------------------------------------------------------------------------------------------


def _opaque_preview(
    descriptor: Descriptor, kind: Kind, reason: Literal["binary", "sealed", "absent"], hint: str = ""
) -> dict[str, Any]:
    result = _base(descriptor, kind)
    size = descriptor.size
    artifact_id = descriptor.artifact_id
    if reason == "sealed":
        result["covers"] = "type and size only: the artifact is sealed, so its content is never shown to the model"
        result["omits"] = f"all {_n(size, 'byte')} of content"
        result["read_more"] = (
            f'It is usable by reference only: pass its id "{artifact_id}" to a tool whose parameter takes a Ref.'
            " Read tools refuse sealed artifacts. " + _describe_hint(artifact_id)
        )
        return result
    if reason == "absent":
        result["covers"] = "type and size only: the content was not supplied to the preview"
        result["omits"] = f"all {_n(size, 'byte')} of content"
        result["read_more"] = _text_read_more(artifact_id) + hint
        return result
    if size == 0:
        result.update(complete=True, covers="the whole artifact: it is empty (0 bytes)", omits="nothing")
    else:
        result["covers"] = "type and size only: the content is binary and is not shown"
        result["omits"] = f"all {_n(size, 'byte')} of content"
    result["read_more"] = _binary_read_more(artifact_id)
    return _hinted(result, hint)


def _binary_read_more(artifact_id: str) -> str:
    return (
        f'The artifact is binary: it is used by reference. Pass its id "{artifact_id}" to a tool whose parameter'
        " takes a Ref; the tool receives the bytes, the model never does. " + _describe_hint(artifact_id)
    )


# --------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------


def _is_json_type(media_type: str) -> bool:
    main = base_type(media_type)
    return main == "application/json" or main.endswith("+json")


def preview(
    descriptor: Descriptor,
    data: bytes | None = None,
    *,
    value: object = None,
    records: RecordsSummary | None = None,
    max_chars: int = 4000,
) -> dict[str, Any]:
    """A bounded, honest, JSON-ready preview of an artifact, shown to the model instead of the full result.

    ``data`` is the artifact's bytes (all of them, or a prefix: then the preview
    says only a prefix was examined); ``value`` the Python value a tool returned:
    a dict, list or tuple is previewed as JSON without parsing ``data``, a str
    stands for its UTF-8 bytes when ``data`` is None, anything else (a model
    object, ...) is ignored in favour of ``data``; ``records`` a
    :class:`RecordsSummary` (previewed as records). Which applies, first match
    wins: sealed artifacts and binary media types get type and size only;
    ``records``; a dict/list ``value``; JSON media types (parsed if at most
    ``JSON_PARSE_LIMIT`` bytes, else text); other text media types; nothing
    supplied (type and size only).

    Every preview has ``artifact_id, media_type, size, disclosure, kind,
    capture_status, complete, covers, omits, read_more`` and a body:
    text ``lines, head, head_lines, head_bytes, tail, tail_lines, tail_bytes``;
    json ``shape, sample``; records ``records, fields, schema, first_rows``.
    ``len(json.dumps(result)) <= max(max_chars, PREVIEW_SLACK)``.
    """
    max_chars = _checked_max_chars(max_chars)
    if isinstance(value, str) and data is None:
        data = value.encode("utf-8", "surrogatepass")
    if not isinstance(value, Mapping | list | tuple):
        value = None  # a str, a model object, ...: the stored bytes say what the model will read
    if data is not None:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidArgument("data must be bytes (the artifact's content or a prefix of it)")
        data = bytes(data)
        if len(data) > descriptor.size:
            raise InvalidArgument(
                f"data is {len(data)} bytes but the artifact is {descriptor.size} bytes; pass its bytes or a prefix"
            )
    if records is not None and not isinstance(records, RecordsSummary):
        raise InvalidArgument("records must be a RecordsSummary")
    media_type = descriptor.media_type
    json_type = _is_json_type(media_type)
    text_type = is_text(media_type)
    kind: Kind
    if records is not None:
        kind = "records"
    elif value is not None or json_type:
        kind = "json"
    elif text_type:
        kind = "text"
    else:
        kind = "binary"
    hint = _query_hint(descriptor.artifact_id) if records is None and is_records(media_type) else ""
    if descriptor.disclosure == "sealed":
        return _opaque_preview(descriptor, kind, "sealed")
    if kind == "binary":
        return _opaque_preview(descriptor, kind, "binary", hint)
    if records is not None:
        return _records_preview(descriptor, records, max_chars)
    if value is not None:
        return _json_preview(descriptor, value, max_chars)
    if data is None:
        return _opaque_preview(descriptor, kind, "absent", hint)
    if json_type:
        if len(data) < descriptor.size:
            note = "only a prefix was supplied, so the JSON was not parsed; shown as text"
        elif len(data) > JSON_PARSE_LIMIT:
            note = f"larger than {JSON_PARSE_LIMIT} bytes, so the JSON was not parsed; shown as text"
        else:
            try:
                document = json.loads(data)
            except (ValueError, RecursionError) as exc:
                note = f"not parsed as JSON ({type(exc).__name__}); shown as text"
            else:
                return _json_preview(descriptor, document, max_chars)
        return _text_preview(descriptor, data, max_chars, note=note, hint=hint)
    return _text_preview(descriptor, data, max_chars, hint=hint)


_REASON_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-")


def truncation(text: str, *, max_chars: int, reason: str) -> dict[str, Any]:
    """The visible fallback when capturing an oversized result failed: a bounded head of ``text``.

    ``reason`` is a short error type name (e.g. ``"StorageError"``; other characters
    are dropped, at most 80 kept). ``complete`` is true only if all of ``text`` fits.
    Base64-encoded bytes (:mod:`refvault.content.encoded`) are shown as placeholders
    (then ``placeholders`` counts them and ``complete`` is false); ``shown_chars``
    counts the characters of ``text`` the head covers.
    ``len(json.dumps(result)) <= max(max_chars, TRUNCATION_SLACK)``.
    """
    max_chars = _checked_max_chars(max_chars)
    if not isinstance(text, str):
        raise InvalidArgument("text must be a str")
    shown_reason = "".join(ch for ch in str(reason) if ch in _REASON_CHARS)[:80] or "Error"
    total = len(text)
    spans = find_encoded(text) if max_chars > 0 else []

    def head_of(budget: int) -> tuple[str, int, int]:
        """The head fitting ``budget`` escaped characters: its text, the characters of ``text`` it covers,
        and how many placeholders it holds."""
        pieces: list[str] = []
        used = cursor = masked = 0
        for span in spans:
            gap = text[cursor : min(span.start, cursor + budget - used)]
            fitted = _fit_escaped(gap, budget - used)
            pieces.append(fitted)
            used += _esc_len(fitted)
            if cursor + len(fitted) < span.start:
                return "".join(pieces), cursor + len(fitted), masked
            shown = placeholder(span)
            if used + len(shown) > budget:
                return "".join(pieces), span.start, masked
            pieces.append(shown)
            used += len(shown)
            cursor, masked = span.end, masked + 1
        fitted = _fit_escaped(text[cursor : cursor + max(budget - used, 0)], budget - used)
        pieces.append(fitted)
        return "".join(pieces), cursor + len(fitted), masked

    def build(budget: int) -> dict[str, Any]:
        head, shown, masked = head_of(budget) if budget > 0 else ("", 0, 0)
        head = head.encode("utf-8", "replace").decode("utf-8")  # lone surrogates -> "?", one for one
        complete = shown == total and not masked
        result: dict[str, Any] = {
            "status": "not_captured",
            "reason": shown_reason,
            "complete": complete,
            "shown_chars": shown,
            "total_chars": total,
            "omits": "nothing"
            if complete
            else (
                f"characters {shown}-{total - 1} ({total - shown} characters); the result could not be stored,"
                " so they cannot be read later"
                if shown < total
                else "the base64 text of encoded bytes (shown as placeholders); the result could not be stored"
            ),
            "text": head,
        }
        if masked:
            result["placeholders"] = masked
        return result

    return _fit(build, max_chars)
