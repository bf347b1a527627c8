"""The content hits of one leaf (:class:`LeafHits`) and the leaf with its protected spans redacted."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from refvault.guard.findings import marker
from refvault.guard.requests import Leaf

__all__ = ["LeafHits", "redact_leaf", "whole_marker"]


@dataclass(slots=True)
class LeafHits:
    """Content hits of one leaf: spans of its raw bytes to redact, and matched bytes per artifact."""

    leaf: Leaf
    raw: bytes
    spans: list[tuple[int, int, str]]
    whole: set[str]
    cover: dict[tuple[str, int], list[tuple[int, int]]]  # (artifact, piece) -> matched extents in that piece
    pieces: dict[str, int] = dataclasses.field(default_factory=dict)  # artifact -> its run total (piece arm)

    @property
    def matched(self) -> dict[str, int]:
        """Bytes matched per artifact: the most any one view of the leaf has (the union of its extents)."""
        best: dict[str, int] = {}
        for (owner, _), extents in self.cover.items():
            total, reach = 0, -1
            for start, end in sorted(extents):
                if end > reach:
                    total += end - max(start, reach)
                    reach = end
            best[owner] = max(best.get(owner, 0), total)
        return best


def whole_marker(entry: LeafHits) -> str:
    matched = {**entry.pieces, **entry.matched}
    owners = sorted(matched, key=lambda o: -matched[o])
    return "".join(marker(o) for o in owners)


def redact_leaf(entry: LeafHits, original: str | bytes | None) -> Any:
    """The leaf with its protected spans replaced (the whole leaf for binary payloads)."""
    as_bytes = isinstance(original, bytes)
    if entry.whole or entry.leaf.kind == "data":
        text = whole_marker(entry)
        return text.encode() if as_bytes else text
    raw = entry.raw
    spans = sorted(entry.spans)
    out: list[bytes] = []
    pos = 0
    i = 0
    while i < len(spans):
        start, end, owner = spans[i]
        best = end - start
        j = i + 1
        while j < len(spans) and spans[j][0] <= end:  # merge overlapping spans; the longest names the marker
            if spans[j][1] - spans[j][0] > best:
                best, owner = spans[j][1] - spans[j][0], spans[j][2]
            end = max(end, spans[j][1])
            j += 1
        if not as_bytes:  # widen to whole UTF-8 characters
            while start > 0 and raw[start] & 0xC0 == 0x80:
                start -= 1
            while end < len(raw) and raw[end] & 0xC0 == 0x80:
                end += 1
        start = max(start, pos)
        out.append(raw[pos:start])
        out.append(marker(owner).encode())
        pos = end
        i = j
    out.append(raw[pos:])
    result = b"".join(out)
    return result if as_bytes else result.decode("utf-8", "surrogatepass")
