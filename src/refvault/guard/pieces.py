"""The pieces of a scanned buffer (:class:`Piece`: a view of a leaf, or part of one) and where a match
in them lies in the leaf; the piece arm's chains (:class:`Short`) and the coverage they add up to."""

from __future__ import annotations

import bisect
from typing import NamedTuple

from refvault.guard.requests import Leaf, View

__all__ = ["Coverage", "Piece", "Short", "locate", "pieces_of", "union"]


class Piece:
    """What one stretch of the scanned buffer is: (part of) a view of a leaf."""

    __slots__ = ("data", "leaf", "offset", "origin", "view")

    def __init__(
        self, leaf: int, view: View, data: bytes, offset: int = 0, origin: tuple[int, int] | None = None
    ) -> None:
        self.leaf = leaf
        self.view = view
        self.data = data
        self.offset = offset  # where ``data`` starts in the view
        self.origin = origin  # a decoded run: the raw span of the leaf a hit redacts


class Short(NamedTuple):
    """A piece-arm chain: a short piece of one artifact at a leaf, as protected coordinates and a redaction."""

    leaf: int
    owner: str
    lo: int  # the verified bytes' protected coordinates [lo, hi)
    hi: int
    span: tuple[int, int] | None  # raw bytes of the leaf to redact; None: the whole leaf


def pieces_of(leaf: int, view: View, floor: int, origin: tuple[int, int] | None) -> list[Piece]:
    """The pieces to scan of one view: all of it, or its windows of at least ``floor`` bytes."""
    if view.windows is None:
        return [Piece(leaf, view, view.data, 0, origin)]
    return [Piece(leaf, view, view.data[a:b], a, origin) for a, b in view.windows if b - a >= floor]


def locate(start: int, end: int, piece: Piece, offset: int, leaf: Leaf) -> tuple[int, int] | None:
    """The raw span of the leaf that a match at ``[start, end)`` of the scanned buffer redacts (None: all of it)."""
    if leaf.kind == "data" or (piece.view.whole and piece.origin is None):
        return None
    if piece.origin is not None:
        return piece.origin
    lo, hi = start - offset + piece.offset, end - offset + piece.offset
    mapping = piece.view.mapping
    if mapping is not None:
        lo, hi = mapping.start(lo), mapping.end(hi)
    return lo, hi


def union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Disjoint sorted spans covering what ``spans`` cover."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


class Coverage:
    """Disjoint sorted spans of protected coordinates (the bytes of one artifact a run's pieces covered)."""

    __slots__ = ("ends", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def add(self, lo: int, hi: int) -> None:
        i = bisect.bisect_left(self.ends, lo)  # the first span that may touch [lo, hi)
        j = bisect.bisect_right(self.starts, hi)  # past the last one
        if i < j:
            lo, hi = min(lo, self.starts[i]), max(hi, self.ends[j - 1])
        self.starts[i:j] = [lo]
        self.ends[i:j] = [hi]

    def densest(self, new: list[tuple[int, int]], window: int) -> int:
        """The most bytes these spans and ``new`` cover in any ``window`` consecutive coordinates."""
        lo = min(a for a, _ in new) - window
        hi = max(b for _, b in new) + window
        i, j = bisect.bisect_left(self.ends, lo), bisect.bisect_right(self.starts, hi)
        spans = union([*zip(self.starts[i:j], self.ends[i:j], strict=True), *new])
        starts = [a for a, _ in spans]
        before = [0]
        for a, b in spans:
            before.append(before[-1] + b - a)
        best = 0
        for t, (a, _) in enumerate(spans):  # a densest window starts where a span starts
            end = a + window
            u = bisect.bisect_left(starts, end)  # spans [t, u) start inside the window
            best = max(best, before[u] - before[t] - max(0, spans[u - 1][1] - end))
        return best
