"""What every kind of preview shares: the bounds, the metadata frame, fitting a budget, base64 masking, read hints.

Package-private (the names starting with ``_`` are used by the sibling modules
:mod:`~refvault.read.previews.text`, :mod:`~refvault.read.previews.structured`,
:mod:`~refvault.read.previews.records` and the package itself only); the public
names are re-exported by :mod:`refvault.read.previews`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from refvault.content.encoded import MIN_DATA_URL_CHARS, mask
from refvault.errors import InvalidArgument
from refvault.model import Descriptor
from refvault.read._access import base_type

__all__ = ["JSON_PARSE_LIMIT", "PREVIEW_SLACK", "TRUNCATION_SLACK", "Kind", "RecordsSummary"]

PREVIEW_SLACK = 2048
"""Most characters a preview's metadata takes (everything but its content body); see the module docstring."""

TRUNCATION_SLACK = 512
"""Most characters :func:`truncation` adds around its text (``len(json.dumps(t)) <= max(max_chars, this)``)."""

JSON_PARSE_LIMIT = 8 * 1024 * 1024
"""JSON bytes larger than this are not parsed for a preview; they are previewed as text."""

Kind = Literal["text", "json", "records", "binary"]


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
        "preview_partial": True,
        "covers": "",
        "omits": "",
    }


def _query_hint(artifact_id: str) -> str:
    return (
        " If it holds records (JSON Lines, CSV, Parquet or a JSON array of objects),"
        f' query_artifact(artifact_id="{artifact_id}", where=..., fields=..., order=..., limit=...) selects them.'
    )


def _hinted(result: dict[str, Any], hint: str) -> dict[str, Any]:
    if hint and result["preview_partial"]:
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
            " (zero-based, end exclusive; each call returns up to max_chars characters and says where to continue)."
        )
    else:
        parts.append(
            f'Read lines with read_artifact(artifact_id="{artifact_id}", lines=[start, end])'
            " (zero-based, end exclusive; each call returns up to max_chars characters and says where to continue)."
        )
    if byte_range is not None:
        parts.append(
            f'Read inside a long line with read_artifact(artifact_id="{artifact_id}", '
            f"byte_range=[{byte_range[0]}, {byte_range[1]}]) ([offset, length])."
        )
    parts.append(f'Find lines containing a string with read_artifact(artifact_id="{artifact_id}", pattern="...").')
    parts.append(_describe_hint(artifact_id))
    return " ".join(parts)


_MASKED_COVERS = "; base64-encoded bytes in it are shown as placeholders ([base64 omitted: <media type>, <size>])"
_MASKED_OMITS = "the base64 text of encoded bytes (shown as placeholders)"


def _masked_note(result: dict[str, Any], masked: int, read_more: str) -> dict[str, Any]:
    """If ``masked``, say that base64-encoded bytes are shown as placeholders: the preview is then partial."""
    if not masked:
        return result
    result["covers"] += _MASKED_COVERS
    omits = _MASKED_OMITS
    result["omits"] = f"{result['omits']}; {omits}" if result["omits"] and result["preview_partial"] else omits
    if not result["preview_partial"]:
        result["preview_partial"] = True
        result["read_more"] = read_more
    return result


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
