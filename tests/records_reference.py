"""A plain-Python reference evaluator for record queries: the spec's semantics, written to be obviously correct.

Records are a list of dicts (source order = index). Only valid queries are evaluated;
validation errors are the engine's business, not this module's.

* Fields are the union of top-level keys in order of first appearance; a missing key reads as null.
* A leaf other than ``is_null`` is false when the field is null or missing (two-valued logic),
  and ``not`` negates that two-valued result.
* ``order``: nulls sort below every value (first ascending, last descending); the record
  index ascending is always the final tie-breaker; no order means index order.
* ``record_range`` ``[start, end)`` restricts which records are considered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Record = Mapping[str, Any]


def schema(records: Sequence[Record]) -> list[str]:
    """Every top-level key, in order of first appearance."""
    names: dict[str, None] = {}
    for record in records:
        for name in record:
            names.setdefault(name, None)
    return list(names)


def matches(record: Record, where: Mapping[str, Any] | None) -> bool:
    """Whether ``record`` satisfies the selector (``None`` matches every record)."""
    if where is None:
        return True
    if "and" in where:
        return all(matches(record, part) for part in where["and"])
    if "or" in where:
        return any(matches(record, part) for part in where["or"])
    if "not" in where:
        return not matches(record, where["not"])
    value = record.get(where["field"])
    op = where["op"]
    if op == "is_null":
        wanted = where.get("value", True)
        return (value is None) == wanted
    if value is None:
        return False
    operand = where["value"]
    if op == "eq":
        return bool(value == operand)
    if op == "ne":
        return bool(value != operand)
    if op == "lt":
        return bool(value < operand)
    if op == "lte":
        return bool(value <= operand)
    if op == "gt":
        return bool(value > operand)
    if op == "gte":
        return bool(value >= operand)
    if op == "in":
        return any(value == item for item in operand)
    if op == "contains":
        return operand in value
    raise ValueError(f"unknown op {op!r}")


def evaluate(
    records: Sequence[Record],
    *,
    where: Mapping[str, Any] | None = None,
    fields: Sequence[str] | None = None,
    order: Sequence[Mapping[str, Any]] | None = None,
    record_range: Sequence[int] | None = None,
) -> list[tuple[int, dict[str, Any]]]:
    """The whole answer, unpaged: ``(index, projected record)`` pairs in result order."""
    start, end = (0, len(records)) if record_range is None else (record_range[0], record_range[1])
    chosen = [i for i in range(len(records)) if start <= i < end and matches(records[i], where)]
    # Stable sorts from the last key to the first; the index order we start from is the final tie-breaker.
    # Python's sort stays stable with reverse=True, so ties keep ascending index order in both directions.
    for item in reversed(order or ()):
        name = item["field"]
        descending = item.get("direction", "asc") == "desc"

        def key(i: int, name: str = name) -> tuple[int, Any]:
            value = records[i].get(name)
            return (0, 0) if value is None else (1, value)  # null below every value

        chosen.sort(key=key, reverse=descending)
    names = schema(records) if fields is None else list(fields)
    return [(i, {name: records[i].get(name) for name in names}) for i in chosen]


def first_page(answer: Sequence[tuple[int, dict[str, Any]]], limit: int) -> list[tuple[int, dict[str, Any]]]:
    """The first ``limit`` results (limits above 1000 are clamped to 1000)."""
    return list(answer[: min(limit, 1000)])
