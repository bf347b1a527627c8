"""Finding every copy of a stored part's base64 in a tool result, and replacing it by the part's URI.

A server that returns an image often repeats it elsewhere in the same result:
in ``structuredContent``, in ``_meta``, as a ``data:`` URL in a text block,
wrapped, chunked, URL-safe, percent-encoded or JSON-escaped. :class:`Scrubber`
finds those copies and replaces each by the ``refvault://`` URI of the part.

**The normalised view.** Every string is searched as it would decode, not as
it is spelt: line breaks (with their indentation, literal or as the JSON
escapes ``\\n``/``\\r``/``\\t``) are dropped, so base64 wrapped at any column is
one run; ``%2B``/``%2F``/``%3D``, ``\\/`` and ``\\u002B``/``\\u002F``/``\\u003D``
stand for ``+``, ``/`` and ``=``; the URL-safe ``-`` and ``_`` stand for ``+``
and ``/``; padding is ignored. Adjacent strings of one list are searched as one
text, so base64 split into a list of chunks is found too (the first chunk of a
copy becomes the URI, the others become empty strings).

**What is replaced.**

* A string that *is* a part's base64 (any spelling above) or a ``data:`` URL of
  it becomes the URI. Parts under 16 base64 characters (12 bytes) are replaced
  only where a string equals their standard spelling exactly: shorter needles
  would match ordinary words.
* Any span of 63 or more characters shared with a part of 64+ characters, and
  any span of 31 or more (and any whole copy) of a part of 16-63 characters,
  is replaced: exactly the span (checked character by character against the
  part), together with the padding after it and the ``data:...;base64,``
  prefix before it when the span starts or ends the part. The rest of the
  string is kept as it was.
* A span with fewer than 4 distinct characters is never replaced: runs of
  ``AAAA`` (zero bytes, silence) carry no information and match ordinary text
  (a DNA sequence's poly-A tail, a row of zeros).

**One combined search, in bounded memory.** Parts are not searched one by
one. Each *candidate run* (a run of base64 characters in the normalised view,
at least a window long) is matched against all parts at once in one of two
ways, whichever is cheaper for that run:

* *direct*: the run's windows at every 32nd position are looked up in the
  parts' text with ``str.find`` (C speed, no memory): the right choice for the
  short runs ordinary text holds (ids, digests, paths), which would rarely
  match at all;
* *indexed*: every window of the run is hashed and looked up in an index of
  the parts' windows at every 32nd position (one normalised spelling, integer
  hashes in a sorted ``array`` beside a byte filter: about one byte per
  decoded byte of the parts, twice that while it is built; built once, only
  when runs long enough to repay it turn up).

Either way a run costs time linear in its length, and the whole search is
linear in the size of the result.
"""

from __future__ import annotations

import copy
import operator
import re
from array import array
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

__all__ = ["LONG_WINDOW", "MIN_DISTINCT", "SHORT_WINDOW", "WHOLE_ONLY_BELOW", "Scrubber"]

LONG_WINDOW = 32  # parts of 2 * LONG_WINDOW characters or more: spans of 63+ characters are found
SHORT_WINDOW = 16  # parts of 16-63 characters: whole copies and spans of 31+ characters are found
WHOLE_ONLY_BELOW = 16  # parts shorter than this are replaced only where a whole string equals them
MIN_DISTINCT = 4  # a span with fewer distinct characters is low-information: never replaced
CHUNK = 8192  # windows hashed per step (bounds the memory and the time the GIL is held)
CORPUS_PART_MAX = 8192  # parts up to this many characters are searched together, in one joined text
M64 = (1 << 64) - 1

# Rough costs (nanoseconds) that choose between a direct and an indexed search of a run.
_FIND_CALL_NS = 150.0
_FIND_CHAR_NS = 0.15
_SCAN_POSITION_NS = 400.0
_INDEX_WINDOW_NS = 1000.0

# Pieces of a string that are not 1:1 with the normalised view: escapes of '+', '/' and '=', and line breaks.
_PIECE = re.compile(
    r"\\/|\\u00(?:2[bBfF]|3[dD])|%(?:2[bBfF]|3[dD])"
    r"|(?:[ \t]|\\t)*(?:(?:\r|\n|\\r|\\n)(?:[ \t]|\\t)*)+"
)
_PIECE_VALUES = {
    "\\/": "/",
    "\\u002b": "+",
    "\\u002f": "/",
    "\\u003d": "=",
    "%2b": "+",
    "%2f": "/",
    "%3d": "=",
}
_PADDING = re.compile(r"=|%3[dD]|\\u003[dD]")
_DATA_URL = re.compile(r"data:[^,]{0,256}?;base64,(.*)", re.DOTALL | re.IGNORECASE)
_DATA_PREFIX = re.compile(r"data(?::|%3[aA])[^,\s]{0,256}?(?:;|%3[bB])base64(?:,|%2[cC])\Z", re.IGNORECASE)
_BREAK = "\x00"  # stands for a string already replaced whole, between its neighbours in a list


def _piece_value(match: re.Match[str]) -> str:
    return _PIECE_VALUES.get(match.group().lower(), "")


def _has_pieces(text: str) -> bool:
    return "\\" in text or "%" in text or "\n" in text or "\r" in text


def normalised(text: str) -> str:
    """``text`` as base64 decoding would see it (see the module docstring)."""
    if _has_pieces(text):
        text = _PIECE.sub(_piece_value, text)
    if "-" in text:
        text = text.replace("-", "+")
    if "_" in text:
        text = text.replace("_", "/")
    return text


def _low_information(text: str) -> bool:
    return len(set(text[:256])) < MIN_DISTINCT and len(set(text)) < MIN_DISTINCT


# -- the parts ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Encoded:
    number: int  # position in the scrubber's list: the first part wins a copy shared by two
    text: str  # the standard spelling, padded
    size: int  # characters without the padding


@dataclass(frozen=True, slots=True)
class _Span:
    start: int  # in the run
    end: int
    part: _Encoded
    part_start: int
    part_end: int


def _common_prefix(a: str, i: int, b: str, j: int, limit: int) -> int:
    """How many characters ``a[i:]`` and ``b[j:]`` share (at most ``limit``), by galloping slice compares."""
    done, step = 0, 64
    while done < limit:
        k = min(step, limit - done)
        if a[i + done : i + done + k] == b[j + done : j + done + k]:
            done += k
            step *= 2
            continue
        low, high = 0, k
        while high - low > 1:
            mid = (low + high) // 2
            if a[i + done : i + done + mid] == b[j + done : j + done + mid]:
                low = mid
            else:
                high = mid
        return done + low
    return done


def _common_suffix(a: str, i: int, b: str, j: int, limit: int) -> int:
    """How many characters ``a[:i]`` and ``b[:j]`` share at their ends (at most ``limit``)."""
    done, step = 0, 64
    while done < limit:
        k = min(step, limit - done)
        if a[i - done - k : i - done] == b[j - done - k : j - done]:
            done += k
            step *= 2
            continue
        low, high = 0, k
        while high - low > 1:
            mid = (low + high) // 2
            if a[i - done - mid : i - done] == b[j - done - mid : j - done]:
                low = mid
            else:
                high = mid
        return done + low
    return done


def _extend(run: str, q: int, part: _Encoded, offset: int, width: int) -> _Span | None:
    """The whole span ``run`` shares with ``part`` around a window at ``run[q:]`` / ``part[offset:]``."""
    text = part.text
    if run[q : q + width] != text[offset : offset + width]:
        return None
    back = _common_suffix(run, q, text, offset, min(q, offset))
    ahead = _common_prefix(run, q + width, text, offset + width, min(len(run) - q - width, part.size - offset - width))
    return _Span(q - back, q + width + ahead, part, offset - back, offset + width + ahead)


class _Index:
    """The windows of some parts at every ``width``-th position (and the last), by integer hash.

    A sorted ``array`` of ``hash high bits | window number`` answers which
    window a hash names; a byte filter in front of it lets a run's windows be
    checked at C speed, only the rare hits paying for a lookup.
    """

    def __init__(self, parts: Sequence[_Encoded], width: int) -> None:
        self.parts = list(parts)
        self.width = width
        self.starts: list[int] = []
        counts = [self._count(part) for part in self.parts]
        total = sum(counts)
        bits = max(1, total.bit_length())
        self.low = (1 << bits) - 1
        self.high = M64 ^ self.low
        size = 1024
        while size < 16 * total:
            size *= 2
        self.mask = size - 1
        self.filter = bytearray(size)
        keys = array("Q")
        number = 0
        for part, count in zip(self.parts, counts, strict=True):
            self.starts.append(number)
            offsets = range(0, part.size - width + 1, width)
            for first in range(0, len(offsets), CHUNK):
                chunk = offsets[first : first + CHUNK]
                self._add(keys, part.text, chunk, number + first)
            if count > len(offsets):  # the last window, where the size is not a multiple of the width
                self._add(keys, part.text, range(part.size - width, part.size - width + 1), number + len(offsets))
            number += count
        self.keys = array("Q", sorted(keys))

    def _count(self, part: _Encoded) -> int:
        aligned = (part.size - self.width) // self.width + 1
        return aligned + (1 if (part.size - self.width) % self.width else 0)

    def _add(self, keys: array[int], text: str, offsets: range, first: int) -> None:
        width = self.width
        hashes = list(map(hash, map(text.__getitem__, map(slice, offsets, map(width.__add__, offsets)))))
        deque(map(self.filter.__setitem__, map(self.mask.__and__, hashes), repeat(1)), maxlen=0)
        keys.extend(map(operator.or_, map(self.high.__and__, hashes), range(first, first + len(hashes))))

    def _locate(self, number: int) -> tuple[_Encoded, int]:
        which = bisect_right(self.starts, number) - 1
        part = self.parts[which]
        local = number - self.starts[which]
        aligned = (part.size - self.width) // self.width + 1
        return part, (local * self.width if local < aligned else part.size - self.width)

    def _candidates(self, value: int) -> Iterator[tuple[_Encoded, int]]:
        key = value & self.high
        keys = self.keys
        i = bisect_left(keys, key)
        while i < len(keys) and keys[i] & self.high == key:
            yield self._locate(keys[i] & self.low)
            i += 1

    def spans(self, run: str) -> Iterator[_Span]:
        """Every span of ``run`` shared with a part (from one of its indexed windows), left to right."""
        width, last = self.width, len(run) - self.width
        position = 0
        while position <= last:
            end = min(last + 1, position + CHUNK)
            starts = range(position, end)
            hashes = list(map(hash, map(run.__getitem__, map(slice, starts, map(width.__add__, starts)))))
            flags = bytes(map(self.filter.__getitem__, map(self.mask.__and__, hashes)))
            following = end
            i = flags.find(1)
            while i >= 0:
                span = next(
                    (
                        s
                        for part, off in self._candidates(hashes[i])
                        if (s := _extend(run, position + i, part, off, width))
                    ),
                    None,
                )
                if span is None:
                    i = flags.find(1, i + 1)
                    continue
                if not _low_information(run[span.start : span.end]):
                    yield span
                if span.end >= end:
                    following = span.end
                    break
                i = flags.find(1, span.end - position)
            position = following


class _Finder:
    """The parts of one window size, and the cheaper way to search a run for them."""

    def __init__(self, parts: Sequence[_Encoded], width: int, *, direct: bool) -> None:
        self.parts = list(parts)
        self.width = width
        self.direct = direct
        self.total = sum(part.size for part in self.parts)
        self.big = [part for part in self.parts if part.size > CORPUS_PART_MAX]
        self.windows = sum(part.size // width + 1 for part in self.parts)
        self._index: _Index | None = None
        self._corpus: tuple[str, list[int], list[_Encoded]] | None = None
        self._spent = 0.0

    def spans(self, run: str) -> list[_Span]:
        if len(run) < self.width:
            return []
        scan = len(run) * _SCAN_POSITION_NS
        if self.direct:
            direct = (len(run) // self.width + 2) * ((1 + len(self.big)) * _FIND_CALL_NS + self.total * _FIND_CHAR_NS)
            if self._index is None:
                # Direct while it is cheaper than scanning with an index, and while what direct searches
                # that an index would have beaten have cost less than building one (then build it).
                build = self.windows * _INDEX_WINDOW_NS
                if direct <= scan or (direct <= scan + build and self._spent + direct <= build):
                    self._spent += max(0.0, direct - scan)
                    return list(self._direct(run))
            elif direct <= scan:
                return list(self._direct(run))
        if self._index is None:
            self._index = _Index(self.parts, self.width)
        return list(self._index.spans(run))

    def _direct(self, run: str) -> Iterator[_Span]:
        """Look the run's windows at every ``width``-th position (and the last) up in the parts' text.

        A span of ``2 * width - 1`` characters or more always holds one of these windows whole.
        """
        width, last = self.width, len(run) - self.width
        find = self._find
        covered = 0
        for q in [*range(0, last + 1, width), *([last] if last % width else [])]:
            if q < covered:
                continue
            found = find(run[q : q + width])
            if found is None:
                continue
            span = _extend(run, q, found[0], found[1], width)
            if span is not None:
                covered = span.end
                if not _low_information(run[span.start : span.end]):
                    yield span

    def _find(self, window: str) -> tuple[_Encoded, int] | None:
        """The first part holding ``window`` (the lowest numbered), and where."""
        corpus, starts, small = self._joined()
        best: tuple[_Encoded, int] | None = None
        at = corpus.find(window)
        if at >= 0:
            which = bisect_right(starts, at) - 1
            best = (small[which], at - starts[which])
        for part in self.big:
            if best is not None and part.number > best[0].number:
                break
            at = part.text.find(window, 0, part.size)
            if at >= 0:
                best = (part, at)
                break
        return best

    def _joined(self) -> tuple[str, list[int], list[_Encoded]]:
        if self._corpus is None:
            small = [part for part in self.parts if part.size <= CORPUS_PART_MAX]
            starts: list[int] = []
            position = 0
            for part in small:
                starts.append(position)
                position += part.size + 1
            self._corpus = (_BREAK.join(part.text[: part.size] for part in small), starts, small)
        return self._corpus


# -- the scrubber ---------------------------------------------------------------------------------------------------


class _Positions:
    """Maps positions in a string's normalised view back to the string."""

    def __init__(self, text: str) -> None:
        self.normal: list[int] = []  # where each piece's output starts in the normalised view
        self.width: list[int] = []  # how many characters it outputs (0 or 1)
        self.start: list[int] = []  # where it is in the string
        self.end: list[int] = []
        if not _has_pieces(text):
            return
        normal = previous = 0
        for match in _PIECE.finditer(text):
            normal += match.start() - previous
            value = _piece_value(match)
            self.normal.append(normal)
            self.width.append(len(value))
            self.start.append(match.start())
            self.end.append(match.end())
            normal += len(value)
            previous = match.end()

    def first(self, x: int) -> int:
        """Where the character at ``x`` in the normalised view starts in the string."""
        k = bisect_right(self.normal, x) - 1
        if k < 0:
            return x
        if x < self.normal[k] + self.width[k]:
            return self.start[k]
        return self.end[k] + x - self.normal[k] - self.width[k]

    def after(self, x: int) -> int:
        """Where the character at ``x`` in the normalised view ends in the string."""
        k = bisect_right(self.normal, x) - 1
        if k >= 0 and x < self.normal[k] + self.width[k]:
            return self.end[k]
        return self.first(x) + 1


class Scrubber:
    """Replaces every copy of the given parts' base64 in a JSON-like value by their URIs.

    ``parts`` is a sequence of (standard padded base64, replacement) pairs, the
    first part first. The value is copied, never changed in place; containers
    become dicts and lists (tuples stay tuples); other values are deep-copied.
    Indexes are built on first need, so a value that holds no long run of
    base64 characters costs almost nothing.
    """

    def __init__(self, parts: Sequence[tuple[str, str]]) -> None:
        self.replacements = [uri for _, uri in parts]
        encoded = []
        for number, (text, _) in enumerate(parts):
            padding = len(text) - len(text.rstrip("="))
            encoded.append(_Encoded(number, text, len(text) - padding))
        self._exact: dict[tuple[int, str], list[_Encoded]] = {}
        self._bare: dict[tuple[int, str], list[_Encoded]] = {}
        for part in encoded:
            self._exact.setdefault((len(part.text), part.text[:WHOLE_ONLY_BELOW]), []).append(part)
            if part.size >= WHOLE_ONLY_BELOW:
                self._bare.setdefault((part.size, part.text[:WHOLE_ONLY_BELOW]), []).append(part)
        long = [part for part in encoded if part.size >= 2 * LONG_WINDOW]
        short = [part for part in encoded if WHOLE_ONLY_BELOW <= part.size < 2 * LONG_WINDOW]
        self._long = _Finder(long, LONG_WINDOW, direct=True) if long else None
        self._short = _Finder(short, SHORT_WINDOW, direct=False) if short else None
        width = SHORT_WINDOW if short else LONG_WINDOW
        self._runs = re.compile(rf"[A-Za-z0-9+/]{{{width},}}") if long or short else None

    # -- values ---------------------------------------------------------------------------------------------------

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.strings([value])[0]
        if isinstance(value, Mapping):
            return {self.strings([k])[0] if isinstance(k, str) else k: self(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            items: list[Any] = []
            i = 0
            while i < len(value):
                if isinstance(value[i], str):
                    j = i
                    while j < len(value) and isinstance(value[j], str):
                        j += 1
                    items.extend(self.strings(list(value[i:j])))
                    i = j
                else:
                    items.append(self(value[i]))
                    i += 1
            return tuple(items) if isinstance(value, tuple) else items
        return copy.deepcopy(value)

    def traced(self, text: str) -> bool:
        """True if ``text`` holds a copy of a part's base64 that would be replaced."""
        return self.strings([text]) != [text]

    # -- strings --------------------------------------------------------------------------------------------------

    def strings(self, texts: list[str]) -> list[str]:
        """Adjacent strings of one list (or one string alone), scrubbed as one text."""
        out = list(texts)
        views: list[str] = []
        for k, text in enumerate(texts):
            view = normalised(text)
            whole = self._whole(text, view)
            if whole is not None:
                out[k] = whole
                view = _BREAK
            views.append(view)
        if self._runs is None:
            return out
        joined = views[0] if len(views) == 1 else "".join(views)
        if len(joined) < SHORT_WINDOW or self._runs.search(joined) is None:
            return out
        spans = [
            span for match in self._runs.finditer(joined) for span in self._run_spans(match.group(), match.start())
        ]
        if spans:
            self._replace(texts, views, out, spans)
        return out

    def _whole(self, text: str, view: str) -> str | None:
        """The URI of the part ``text`` is (or is a ``data:`` URL of), or None."""
        for part in self._exact.get((len(text), text[:WHOLE_ONLY_BELOW]), ()):
            if part.text == text:
                return self.replacements[part.number]
        payload = view
        if view[:5].lower() == "data:":
            match = _DATA_URL.fullmatch(view)
            if match is None:
                return None
            payload = match.group(1)
            for part in self._exact.get((len(payload), payload[:WHOLE_ONLY_BELOW]), ()):
                if part.text == payload:
                    return self.replacements[part.number]
        bare = payload.rstrip("=")
        for part in self._bare.get((len(bare), bare[:WHOLE_ONLY_BELOW]), ()):
            if part.text.startswith(bare):
                return self.replacements[part.number]
        return None

    def _run_spans(self, run: str, offset: int) -> list[_Span]:
        """Spans of one run of the normalised text (positions in the joined text): long parts first."""
        found = self._long.spans(run) if self._long is not None else []
        if self._short is not None:
            gaps, previous = [], 0
            for span in found:
                if span.start - previous >= SHORT_WINDOW:
                    gaps.append((previous, span.start))
                previous = span.end
            if len(run) - previous >= SHORT_WINDOW:
                gaps.append((previous, len(run)))
            for first, stop in gaps:
                found += [
                    _Span(s.start + first, s.end + first, s.part, s.part_start, s.part_end)
                    for s in self._short.spans(run[first:stop])
                ]
        return [_Span(s.start + offset, s.end + offset, s.part, s.part_start, s.part_end) for s in found]

    def _replace(self, texts: list[str], views: list[str], out: list[str], spans: list[_Span]) -> None:
        """Apply ``spans`` (positions in the joined normalised text) to the original strings in ``out``."""
        bounds, position = [], 0
        for view in views:
            bounds.append(position)
            position += len(view)
        positions: dict[int, _Positions] = {}
        edits: dict[int, list[tuple[int, int, str]]] = {}

        def where(x: int) -> tuple[int, int]:  # the string holding position x (never an empty one), and where
            k = bisect_right(bounds, x) - 1
            return k, x - bounds[k]

        def mapped(k: int) -> _Positions:
            if k not in positions:
                positions[k] = _Positions(texts[k])
            return positions[k]

        for span in sorted(spans, key=lambda s: s.start):
            first, x = where(span.start)
            last, y = where(span.end - 1)
            start = mapped(first).first(x)
            stop = mapped(last).after(y)
            if span.part_start == 0:
                prefix = _DATA_PREFIX.search(texts[first], max(0, start - 300), start)
                if prefix is not None:
                    start = prefix.start()
            if span.part_end == span.part.size:
                for _ in range(len(span.part.text) - span.part.size):
                    pad = _PADDING.match(texts[last], stop)
                    if pad is None:
                        break
                    stop = pad.end()
            uri = self.replacements[span.part.number]
            if first == last:
                edits.setdefault(first, []).append((start, stop, uri))
                continue
            edits.setdefault(first, []).append((start, len(texts[first]), uri))
            for k in range(first + 1, last):
                edits.setdefault(k, []).append((0, len(texts[k]), ""))
            edits.setdefault(last, []).append((0, stop, ""))
        for k, changes in edits.items():
            text = texts[k]
            pieces, cursor = [], 0
            for start, stop, replacement in sorted(changes):
                if start < cursor:  # overlapping (two spans met in one escape): keep the first
                    start = cursor
                pieces += [text[cursor:start], replacement]
                cursor = max(cursor, stop)
            pieces.append(text[cursor:])
            out[k] = "".join(pieces)
