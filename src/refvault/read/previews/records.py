"""Previews of record artifacts (JSON Lines, CSV, Parquet, arrays of objects): their schema and first rows,
values cut to fit, from a :class:`~refvault.read.previews.common.RecordsSummary` the records engine supplies.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from refvault.model import Descriptor
from refvault.read.previews.common import (
    RecordsSummary,
    _base,
    _clean,
    _describe_hint,
    _dumps_len,
    _fit,
    _masked_note,
    _Masker,
    _n,
    _shown,
)
from refvault.read.previews.structured import _render, _scalar_json


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
            result["preview_partial"] = False
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
