"""Validating a record selection against a record set, and compiling it to parameterised SQL.

Part of :mod:`refvault.read.records` (see its docstring for the invariants). A
selector is checked against the derivative's schema (unknown fields, ops or
value types are :class:`~refvault.errors.InvalidQuery`) and compiled to SQL whose
only identifiers are quoted schema names and whose values are bound parameters.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from refvault.errors import InvalidQuery
from refvault.limits import MAX_DEPTH, MAX_IN, MAX_LEAVES, MAX_LIMIT, MAX_ORDER
from refvault.operations import RecordSet, shown_name
from refvault.read.record_engine import INDEX, ident

__all__ = ["Selection", "Sql", "select"]

_OPS = ("eq", "ne", "lt", "lte", "gt", "gte", "in", "contains", "is_null")
_SQL_OPS = {"eq": "=", "ne": "<>", "lt": "<", "lte": "<=", "gt": ">", "gte": ">="}


@dataclass(frozen=True, slots=True)
class Selection:
    where: dict[str, Any] | None
    fields: tuple[str, ...]
    order: tuple[tuple[str, str], ...]
    limit: int
    start: int
    end: int

    def normalised(self, all_fields: bool) -> dict[str, Any]:
        return {
            "where": self.where,
            "fields": None if all_fields else list(self.fields),
            "order": [{"field": name, "direction": direction} for name, direction in self.order],
            "limit": self.limit,
            "record_range": [self.start, self.end],
        }


def select(
    records: RecordSet,
    where: object,
    fields: object,
    order: object,
    limit: object,
    record_range: object,
) -> Selection:
    leaves = [0]
    normal_where = None if where is None else _check_node(records, where, 0, leaves)
    return Selection(
        where=normal_where,
        fields=_check_fields(records, fields),
        order=_check_order(records, order),
        limit=_check_limit(limit),
        **_check_range(records, record_range),
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_limit(limit: object) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise InvalidQuery(f"limit must be a positive integer (at most {MAX_LIMIT} records are returned per page)")
    return min(limit, MAX_LIMIT)


def _check_range(records: RecordSet, record_range: object) -> dict[str, int]:
    if record_range is None:
        return {"start": 0, "end": records.count}
    if (
        not isinstance(record_range, list | tuple)
        or len(record_range) != 2
        or not all(_is_int(v) and v >= 0 for v in record_range)
        or record_range[0] > record_range[1]
    ):
        raise InvalidQuery("record_range must be [start, end): two integers with 0 <= start <= end")
    return {"start": min(record_range[0], records.count), "end": min(record_range[1], records.count)}


def _check_fields(records: RecordSet, fields: object) -> tuple[str, ...]:
    if fields is None:
        return tuple(name for name, _ in records.fields)
    if not isinstance(fields, list | tuple) or not fields or not all(isinstance(f, str) for f in fields):
        raise InvalidQuery("fields must be a non-empty list of field names (or omitted for every field)")
    if len(set(fields)) != len(fields):
        raise InvalidQuery("fields lists a field twice")
    for name in fields:
        records.kind_of(name)
    return tuple(fields)


def _check_order(records: RecordSet, order: object) -> tuple[tuple[str, str], ...]:
    if order is None:
        return ()
    if not isinstance(order, list | tuple) or len(order) > MAX_ORDER:
        raise InvalidQuery(f'order must be a list of at most {MAX_ORDER} {{"field": ..., "direction": "asc"|"desc"}}')
    keys: list[tuple[str, str]] = []
    for item in order:
        if not isinstance(item, Mapping) or not set(item) <= {"field", "direction"} or "field" not in item:
            raise InvalidQuery('each order entry is {"field": name, "direction": "asc" or "desc"}')
        name, direction = item["field"], item.get("direction", "asc")
        if not isinstance(name, str) or direction not in ("asc", "desc"):
            raise InvalidQuery('each order entry is {"field": name, "direction": "asc" or "desc"}')
        if records.kind_of(name) == "other":
            raise InvalidQuery(f"field {shown_name(name)} holds nested or mixed values and cannot be ordered by")
        if any(name == seen for seen, _ in keys):
            raise InvalidQuery(f"order names field {shown_name(name)} twice")
        keys.append((name, direction))
    return tuple(keys)


def _check_node(records: RecordSet, node: object, depth: int, leaves: list[int]) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise InvalidQuery(f"the where selector is nested deeper than {MAX_DEPTH} levels")
    if not isinstance(node, Mapping) or not node:
        raise InvalidQuery(
            'a selector is {"field": f, "op": op, "value": v}, {"and": [...]}, {"or": [...]} or {"not": ...}'
        )
    if set(node) in ({"and"}, {"or"}):
        ((combinator, children),) = node.items()
        if not isinstance(children, list | tuple) or not children:
            raise InvalidQuery(f'"{combinator}" takes a non-empty list of selectors')
        return {combinator: [_check_node(records, child, depth + 1, leaves) for child in children]}
    if set(node) == {"not"}:
        return {"not": _check_node(records, node["not"], depth + 1, leaves)}
    leaves[0] += 1
    if leaves[0] > MAX_LEAVES:
        raise InvalidQuery(f"the where selector has more than {MAX_LEAVES} conditions")
    return _check_leaf(records, node)


def _check_leaf(records: RecordSet, node: Mapping[str, Any]) -> dict[str, Any]:
    if not {"field", "op"} <= set(node) <= {"field", "op", "value"}:
        raise InvalidQuery(
            'a condition is {"field": f, "op": op, "value": v}; '
            'combine conditions with {"and": [...]}, {"or": [...]}, {"not": ...}'
        )
    name, op = node["field"], node["op"]
    if not isinstance(name, str):
        raise InvalidQuery("a condition's field must be a field name (a string)")
    if op not in _OPS:
        raise InvalidQuery(f"unknown op {shown_name(op)}; ops are: {', '.join(_OPS)}")
    kind = records.kind_of(name)
    if op == "is_null":
        value = node.get("value", True)
        if not isinstance(value, bool):
            raise InvalidQuery('"is_null" takes an optional boolean value (true: null or missing; false: present)')
        return {"field": name, "op": op, "value": value}
    if "value" not in node or node["value"] is None:
        raise InvalidQuery(f'op "{op}" needs a value; to test for a missing value use {{"op": "is_null"}}')
    value = node["value"]
    if kind == "other":
        raise InvalidQuery(f"field {shown_name(name)} holds nested or mixed values; only is_null applies to it")
    if op == "contains":
        if kind != "string" or not isinstance(value, str):
            raise InvalidQuery('"contains" takes a string value and applies to text fields')
        return {"field": name, "op": op, "value": value}
    if op == "in":
        if not isinstance(value, list | tuple) or not 1 <= len(value) <= MAX_IN:
            raise InvalidQuery(f'"in" takes a list of 1 to {MAX_IN} values')
        return {"field": name, "op": op, "value": [_check_value(name, kind, v) for v in value]}
    return {"field": name, "op": op, "value": _check_value(name, kind, value)}


def _check_value(name: str, kind: str, value: object) -> Any:
    ok = {
        "number": (_is_int(value) and -(2**127) < value < 2**127)  # type: ignore[operator]
        or (isinstance(value, float) and math.isfinite(value)),
        "string": isinstance(value, str),
        "bool": isinstance(value, bool),
        "temporal": isinstance(value, str),
    }[kind]
    if not ok:
        wanted = {
            "number": "a number",
            "string": "a string",
            "bool": "true or false",
            "temporal": "an ISO date/time string",
        }
        raise InvalidQuery(f"field {shown_name(name)} is compared with {wanted[kind]}, not {type(value).__name__}")
    return value


class Sql:
    """Compiles a checked selection; values only ever travel as bound parameters."""

    def __init__(self, records: RecordSet) -> None:
        self.records = records
        self.types = dict(records.fields)
        self.params: list[Any] = []

    def bind(self, name: str, value: Any) -> str:
        self.params.append(value)
        if self.records.kind_of(name) == "temporal":
            return f"CAST(? AS {self.types[name]})"
        return "?"

    def node(self, node: Mapping[str, Any]) -> str:
        if "and" in node:
            return "(" + " AND ".join(self.node(child) for child in node["and"]) + ")"
        if "or" in node:
            return "(" + " OR ".join(self.node(child) for child in node["or"]) + ")"
        if "not" in node:
            return f"(NOT {self.node(node['not'])})"
        column, op, value = ident(node["field"]), node["op"], node["value"]
        if op == "is_null":
            return f"({column} IS {'' if value else 'NOT '}NULL)"
        if op == "in":
            marks = ", ".join(self.bind(node["field"], v) for v in value)
            return f"coalesce({column} IN ({marks}), false)"
        if op == "contains":
            return f"coalesce(contains({column}, {self.bind(node['field'], value)}), false)"
        return f"coalesce({column} {_SQL_OPS[op]} {self.bind(node['field'], value)}, false)"

    def after(self, view: str, order: Sequence[tuple[str, str]], index: int) -> str:
        """Records strictly after record ``index`` in ``order`` (nulls lowest, the index last).

        The anchor's sort values are read by SQL from the derivative itself, never
        round-tripped through Python, so every type keeps its full precision.
        """
        alternatives = []
        for position in range(len(order) + 1):
            parts = [self._same(view, name, index) for name, _ in order[:position]]
            if position < len(order):
                name, direction = order[position]
                parts.append(self._beyond(view, name, direction, index))
            else:
                self.params.append(index)
                parts.append(f"{INDEX} > ?")
            alternatives.append("(" + " AND ".join(parts) + ")")
        return "(" + " OR ".join(alternatives) + ")"

    def _anchor(self, view: str, name: str, index: int) -> str:
        self.params.append(index)
        return f"(SELECT {ident(name)} FROM {view} WHERE {INDEX} = ?)"

    def _same(self, view: str, name: str, index: int) -> str:
        return f"({ident(name)} IS NOT DISTINCT FROM {self._anchor(view, name, index)})"

    def _beyond(self, view: str, name: str, direction: str, index: int) -> str:
        column = ident(name)
        if direction == "asc":  # after the anchor: greater, or anything non-null after a null anchor
            anchor = self._anchor(view, name, index)
            again = self._anchor(view, name, index)
            return f"(coalesce({column} > {anchor}, false) OR ({again} IS NULL AND {column} IS NOT NULL))"
        anchor = self._anchor(view, name, index)  # desc: smaller, or null after a non-null anchor
        again = self._anchor(view, name, index)
        return f"(coalesce({column} < {anchor}, false) OR ({again} IS NOT NULL AND {column} IS NULL))"
