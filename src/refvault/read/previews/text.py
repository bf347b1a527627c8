"""Previews of text artifacts: whole lines from the head and the tail within the budget, cut only at line ends
or UTF-8 character boundaries, base64-encoded bytes shown as placeholders.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

from refvault.content.encoded import MIN_DATA_URL_CHARS, find_encoded, placeholder
from refvault.limits import DEFAULT_WINDOW_CHARS
from refvault.model import Descriptor
from refvault.read.previews.common import (
    _back_to_boundary,
    _base,
    _decode,
    _describe_hint,
    _esc_len,
    _fit,
    _forward_to_boundary,
    _hinted,
    _masked_note,
    _n,
    _text_read_more,
)


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
            result.update(
                preview_partial=False, covers="the whole artifact: it is empty (0 lines, 0 bytes)", omits="nothing"
            )
            result.update(head="", head_lines=[0, 0], head_bytes=[0, 0], tail="", tail_lines=[0, 0], tail_bytes=[0, 0])
            result["read_more"] = _describe_hint(artifact_id)
            return result
        if budget <= 0:
            return _text_nothing_shown(result, geometry, artifact_id)
        if geometry.whole and size <= budget:
            whole = geometry.show(0, size)
            if _esc_len(whole) <= budget:
                result.update(
                    preview_partial=False,
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
            preview_partial=False,
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
    if not result["preview_partial"]:
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
            byte_range = (head_end, min(tail_start - head_end, DEFAULT_WINDOW_CHARS))
    else:
        next_lines = (first_omitted, first_omitted + 100)
        if not geometry.at_line_start(head_end):
            byte_range = (head_end, DEFAULT_WINDOW_CHARS)
    result["read_more"] = _text_read_more(artifact_id, next_lines, byte_range)
    return result
