"""Bounded previews of offloaded tool results, the capture-failure fallback, and a local token estimate.

When a tool result is too large for the model's context, the Toolbox captures it
as an artifact and shows the model :func:`preview` of it instead. Invariants,
each tested in ``tests/read/test_previews.py``:

* **Bounded.** ``len(json.dumps(preview(..., max_chars=M))) <= max(M, PREVIEW_SLACK)``
  for every input (so always ``<= M + PREVIEW_SLACK``), measured with
  ``json.dumps`` defaults (``ensure_ascii=True``, the longer rendering). The
  metadata of a preview (ids, counts, ``covers``/``omits``/``read_more`` wording)
  never exceeds ``PREVIEW_SLACK`` characters; the content (head/tail lines,
  JSON shape and sample, schema and rows) gets what is left of ``M`` and is
  dropped entirely when nothing is left. :func:`truncation` has the same bound
  with ``TRUNCATION_SLACK``.
* **Honest.** Every preview says in ``covers`` exactly what it shows and in
  ``omits`` what it does not; ``preview_partial`` is false only when the preview
  shows the whole artifact (then ``omits`` is ``"nothing"``).
* **One flag per question.** ``capture_status`` is the *capture's* status (did
  the artifact get everything the tool produced: ``complete``, ``partial`` or
  ``unknown``, from the descriptor); ``preview_partial`` is the *preview's* (does
  this preview show only part of the artifact). A complete capture shown in
  part is ``"capture_status": "complete", "preview_partial": true``; no field of
  a preview is named ``complete``.
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
  tail cut inside one extends to its edge. Such a preview is always ``preview_partial``
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

import json
from collections.abc import Mapping
from typing import Any, Literal

from refvault.content.encoded import find_encoded, placeholder
from refvault.errors import InvalidArgument
from refvault.limits import DEFAULT_PREVIEW_CHARS
from refvault.model import Descriptor
from refvault.read._access import base_type, is_records, is_text
from refvault.read.previews.common import (
    JSON_PARSE_LIMIT,
    PREVIEW_SLACK,
    TRUNCATION_SLACK,
    Kind,
    RecordsSummary,
    _base,
    _checked_max_chars,
    _describe_hint,
    _esc_len,
    _fit,
    _fit_escaped,
    _hinted,
    _n,
    _query_hint,
    _text_read_more,
)
from refvault.read.previews.records import _records_preview
from refvault.read.previews.structured import _json_preview
from refvault.read.previews.text import _text_preview
from refvault.read.previews.tokens import estimate_tokens

__all__ = [
    "JSON_PARSE_LIMIT",
    "PREVIEW_SLACK",
    "TRUNCATION_SLACK",
    "RecordsSummary",
    "estimate_tokens",
    "preview",
    "truncation",
]


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
        result.update(preview_partial=False, covers="the whole artifact: it is empty (0 bytes)", omits="nothing")
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
    max_chars: int = DEFAULT_PREVIEW_CHARS,
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

    Every preview has these fields and a body:

    * ``artifact_id``, ``media_type``, ``size``, ``disclosure``: the descriptor's;
    * ``kind``: ``text``, ``json``, ``records`` or ``binary`` (which body follows);
    * ``capture_status``: the capture's completeness status (``complete``,
      ``partial``, ``unknown``), not the preview's;
    * ``preview_partial``: true when this preview shows only part of the artifact;
    * ``covers``, ``omits``: what the preview shows and leaves out, in words;
    * ``read_more``: the read calls that get the rest.

    Bodies: text ``lines, head, head_lines, head_bytes, tail, tail_lines, tail_bytes``;
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
    are dropped, at most 80 kept). ``preview_partial`` is false only if all of ``text`` fits.
    Base64-encoded bytes (:mod:`refvault.content.encoded`) are shown as placeholders
    (then ``placeholders`` counts them and ``preview_partial`` is true); ``shown_chars``
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
            "preview_partial": not complete,
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
