"""Record queries against a plain-Python reference evaluator (tests/records_reference.py).

Hypothesis generates ragged JSON records (each field holds one JSON type: int, float,
str or bool, plus nulls and missing keys) and selectors (where trees over every op
valid for the field's type, projections, mixed-direction orders, record ranges, small
limits that force paging). The records are captured as JSON Lines and as a JSON array;
the engine's first page must equal the reference's first ``limit`` results, and walking
``next_cursor`` to the end must give exactly the reference's whole answer, in order.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refvault import Scope, Vault, read
from tests.records_reference import evaluate, first_page, matches, schema

SCOPE = Scope("acme", "ana", "s1")

# Names that need quoting in SQL (spaces, quotes, keywords, non-ASCII) sit beside plain ones. Names that differ
# only in letter case ("id"/"ID") are refused by the engine rather than renamed (tests/read/test_records.py), so
# they are not generated here.
FIELD_NAMES = ["id", "name", "score", "ok", "x y", 'q"t', "it's", "order", "select", "Ünï", "数", "n-1", "index"]
NUMERIC_OPS = ["eq", "ne", "lt", "lte", "gt", "gte", "in", "is_null"]
OPS = {
    "int": NUMERIC_OPS,
    "float": NUMERIC_OPS,
    "str": [*NUMERIC_OPS, "contains"],
    "bool": ["eq", "ne", "in", "is_null"],
}

# Strings: no surrogates and no NUL; LIKE/regex metacharacters and quotes are likely, non-ASCII too, and
# strings that look like other types (a date, a number, a boolean) must stay strings.
_ALPHABET = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
_SPECIAL = st.sampled_from(list("aAbB%_\\'\"*.?[]()$^ é€😀\n\t"))
STRINGS = st.one_of(
    st.text(alphabet=_ALPHABET, max_size=8),
    st.text(alphabet=_SPECIAL, max_size=6),
    st.sampled_from(["2024-01-02", "2024-01-02T03:04:05Z", "12:30:00", "1", "1.5", "true", "null", "NaN", ""]),
)
# Floats: any finite double (json.dumps writes "2.0" or "1e+300", which JSON keeps floats), with a few
# fixed ones (negative zero, the smallest subnormal) and small halves that tie often.
FLOATS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-8, 8).map(lambda n: n / 2),
    st.sampled_from([-0.0, 0.1, -1e-300, 5e-324, 1.0000000000000002, 1.7976931348623157e308]),
)
INTS = st.one_of(st.integers(-(2**53) + 1, 2**53 - 1), st.integers(-3, 3))
VALUES: dict[str, st.SearchStrategy[Any]] = {"int": INTS, "float": FLOATS, "str": STRINGS, "bool": st.booleans()}


class Dataset:
    """Generated records plus what the selector strategy needs to know about them."""

    def __init__(self, records: list[dict[str, Any]], types: dict[str, str], pools: dict[str, list[Any]]) -> None:
        self.records = records
        self.types = types
        self.pools = pools
        self.names = schema(records)

    def __repr__(self) -> str:  # what hypothesis prints for a falsifying example
        return f"Dataset(records={self.records!r}, types={self.types!r})"


@st.composite
def datasets(draw: st.DrawFn) -> Dataset:
    names = draw(st.lists(st.sampled_from(FIELD_NAMES), min_size=1, max_size=4, unique=True))
    types = {name: draw(st.sampled_from(sorted(OPS))) for name in names}
    # A small pool per field, so ties (order tie-breaks, eq/in hits) are common.
    pools = {name: draw(st.lists(VALUES[types[name]], min_size=1, max_size=4, unique=True)) for name in names}
    count = draw(st.integers(1, 24))
    records: list[dict[str, Any]] = []
    for _ in range(count):
        keys = draw(st.permutations(names)) if draw(st.booleans()) else names
        record: dict[str, Any] = {}
        for name in keys:
            kind = draw(st.sampled_from(["value", "value", "value", "null", "missing"]))
            if kind == "value":
                record[name] = draw(st.sampled_from(pools[name]))
            elif kind == "null":
                record[name] = None
        records.append(record)
    # Every field gets at least one non-null value, so its column has a type to compare with.
    for name in names:
        if all(r.get(name) is None for r in records):
            records[draw(st.integers(0, count - 1))][name] = pools[name][0]
    return Dataset(records, types, pools)


def _operand(draw: st.DrawFn, data: Dataset, name: str) -> Any:
    """Mostly a value the field holds (so conditions select some records), sometimes any value of its type."""
    if draw(st.integers(0, 3)):
        return draw(st.sampled_from(data.pools[name]))
    return draw(VALUES[data.types[name]])


def _leaf(draw: st.DrawFn, data: Dataset) -> dict[str, Any]:
    name = draw(st.sampled_from(data.names))
    op = draw(st.sampled_from(OPS[data.types[name]]))
    if op == "is_null":
        choice = draw(st.sampled_from(["omit", True, False]))
        return {"field": name, "op": op} if choice == "omit" else {"field": name, "op": op, "value": choice}
    if op == "in":
        items = [_operand(draw, data, name) for _ in range(draw(st.integers(1, 4)))]
        return {"field": name, "op": op, "value": items}
    if op == "contains":
        base = draw(st.sampled_from(data.pools[name]))
        start = draw(st.integers(0, len(base)))
        end = draw(st.integers(start, len(base)))
        needle = draw(st.one_of(st.just(base[start:end]), STRINGS))
        return {"field": name, "op": op, "value": needle}
    return {"field": name, "op": op, "value": _operand(draw, data, name)}


def _where(draw: st.DrawFn, data: Dataset, depth: int) -> dict[str, Any]:
    kind = draw(st.sampled_from(["leaf", "leaf", "leaf", "and", "or", "not"] if depth < 3 else ["leaf"]))
    if kind == "leaf":
        return _leaf(draw, data)
    if kind == "not":
        return {"not": _where(draw, data, depth + 1)}
    size = draw(st.integers(1, 3))
    return {kind: [_where(draw, data, depth + 1) for _ in range(size)]}


@st.composite
def queries(draw: st.DrawFn, data: Dataset) -> dict[str, Any]:
    query: dict[str, Any] = {"limit": draw(st.integers(1, 7))}
    if draw(st.integers(0, 4)):
        query["where"] = _where(draw, data, 0)
    if draw(st.booleans()):
        query["fields"] = draw(st.lists(st.sampled_from(data.names), min_size=1, unique=True))
    if draw(st.integers(0, 2)):
        order = []
        for name in draw(st.lists(st.sampled_from(data.names), min_size=1, max_size=3, unique=True)):
            direction = draw(st.sampled_from(["asc", "desc", None]))
            order.append({"field": name} if direction is None else {"field": name, "direction": direction})
        query["order"] = order
    if draw(st.integers(0, 2)) == 0:
        count = len(data.records)
        start = draw(st.integers(0, count))
        end = draw(st.integers(start, count)) if draw(st.integers(0, 5)) == 0 else count
        query["record_range"] = [start, end]
    return query


# -- capture and comparison --------------------------------------------------------------------------------------


def encode(records: Sequence[Mapping[str, Any]], form: str) -> tuple[bytes, str]:
    """The records as JSON Lines (with or without a final newline) or as one JSON array."""
    if form == "array":
        return json.dumps(list(records), ensure_ascii=False).encode(), "application/json"
    lines = "\n".join(json.dumps(r, ensure_ascii=False) for r in records)
    return (lines + ("\n" if form == "jsonl" else "")).encode(), "application/x-ndjson"


def tagged(value: Any) -> Any:
    """A value with its JSON type attached, so that 1, 1.0 and True never compare equal."""
    if value is None:
        return None
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        assert math.isfinite(value)
        return ("float", value)
    if isinstance(value, str):
        return ("str", value)
    return ("other", repr(value))


def comparable(rows: Sequence[tuple[int, Mapping[str, Any]]]) -> list[tuple[int, dict[str, Any]]]:
    return [(i, {k: tagged(v) for k, v in record.items()}) for i, record in rows]


def engine_rows(response: Mapping[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    return [(item["index"], dict(item["record"])) for item in response["records"]]


def walk(vault: Vault, artifact_id: str, query: Mapping[str, Any], total: int) -> Iterator[dict[str, Any]]:
    """Every page of a query, following next_cursor (with the same arguments) until has_more is false."""
    cursor = None
    for _ in range(total + 2):
        response = read.query(vault, SCOPE, artifact_id, cursor=cursor, **query)
        yield response
        if not response["has_more"]:
            return
        cursor = response["next_cursor"]
    raise AssertionError("paging did not end")


def check(vault: Vault, artifact_id: str, records: Sequence[Mapping[str, Any]], query: Mapping[str, Any]) -> None:
    expected = evaluate(
        records,
        where=query.get("where"),
        fields=query.get("fields"),
        order=query.get("order"),
        record_range=query.get("record_range"),
    )
    limit = query["limit"]
    got: list[tuple[int, dict[str, Any]]] = []
    for number, response in enumerate(walk(vault, artifact_id, query, len(records))):
        assert response["status"] == "ok"
        assert response["scan_complete"] is True
        assert response["returned_records"] == len(response["records"])
        assert response["selection"]["limit"] == limit
        page = engine_rows(response)
        if number == 0:
            assert comparable(page) == comparable(first_page(expected, limit))
        assert len(page) == min(limit, len(expected) - len(got))
        got.extend(page)
        # has_more is true exactly while results remain, and then a cursor is offered.
        assert response["has_more"] is (len(got) < len(expected))
        assert (response["next_cursor"] is not None) is response["has_more"]
    assert comparable(got) == comparable(expected)
    indexes = [i for i, _ in got]
    assert len(indexes) == len(set(indexes))
    # Field order: the projection's order, or schema order (first appearance) for all fields.
    names = list(query["fields"]) if query.get("fields") is not None else schema(records)
    for _, record in got:
        assert list(record) == names


def capture(vault: Vault, records: Sequence[Mapping[str, Any]], form: str) -> str:
    data, media_type = encode(records, form)
    return vault.put(SCOPE, data, media_type=media_type).artifact_id


FORMS = st.sampled_from(["jsonl", "jsonl-no-final-newline", "array"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), dataset=datasets(), form=FORMS)
def test_engine_matches_reference_in_memory(data: st.DataObject, dataset: Dataset, form: str) -> None:
    with Vault.open("memory://") as vault:
        artifact_id = capture(vault, dataset.records, form)
        for _ in range(data.draw(st.integers(1, 3), label="queries")):
            check(vault, artifact_id, dataset.records, data.draw(queries(dataset), label="query"))


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vault]:
    with Vault.open(tmp_path_factory.mktemp("records") / "store") as vault:
        yield vault


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), dataset=datasets(), form=FORMS)
def test_engine_matches_reference_on_embedded_store(
    embedded: Vault, data: st.DataObject, dataset: Dataset, form: str
) -> None:
    artifact_id = capture(embedded, dataset.records, form)
    for _ in range(data.draw(st.integers(1, 3), label="queries")):
        check(embedded, artifact_id, dataset.records, data.draw(queries(dataset), label="query"))


# -- a fixed example on both backends, and the reference checked by hand ----------------------------------------

RAGGED = [
    {"id": 3, "name": "Zoë", "score": 1.5, "ok": True},
    {"id": 1, "name": "ana", "ok": False},
    {"name": None, "id": 2, "score": -0.5, "extra": "x"},
    {"id": None, "name": "Ana", "score": 1.5},
    {"id": 2, "name": "b%_", "score": None, "ok": True},
    {},
    {"id": 3, "name": "😀 ana", "score": 2.25, "ok": False},
]


@pytest.mark.parametrize("form", ["jsonl", "array"])
@pytest.mark.parametrize(
    "query",
    [
        {"limit": 2},
        {"limit": 3, "order": [{"field": "id", "direction": "desc"}, {"field": "score"}]},
        {"limit": 2, "order": [{"field": "name"}], "fields": ["name", "id"]},
        {"limit": 1, "where": {"not": {"field": "ok", "op": "eq", "value": True}}},
        {"limit": 2, "where": {"field": "name", "op": "contains", "value": "an"}, "record_range": [1, 7]},
        {"limit": 4, "where": {"field": "extra", "op": "is_null", "value": False}, "fields": ["extra"]},
        {
            "limit": 5,
            "where": {"or": [{"field": "score", "op": "gte", "value": 1.5}, {"field": "id", "op": "in", "value": [1]}]},
        },
    ],
)
def test_fixed_example(vault: Vault, form: str, query: dict[str, Any]) -> None:
    artifact_id = capture(vault, RAGGED, form)
    check(vault, artifact_id, RAGGED, query)


def test_reference_schema_is_first_appearance() -> None:
    assert schema(RAGGED) == ["id", "name", "score", "ok", "extra"]


def test_reference_two_valued_logic() -> None:
    assert not matches({}, {"field": "a", "op": "eq", "value": 1})
    assert not matches({"a": None}, {"field": "a", "op": "ne", "value": 1})
    assert matches({"a": None}, {"not": {"field": "a", "op": "eq", "value": 1}})
    assert matches({}, {"field": "a", "op": "is_null"})
    assert not matches({}, {"field": "a", "op": "is_null", "value": False})
    assert matches({"a": 0}, {"field": "a", "op": "is_null", "value": False})
    assert not matches({"a": "Ab"}, {"field": "a", "op": "contains", "value": "ab"})
    assert matches(
        {"a": 2}, {"and": [{"field": "a", "op": "gt", "value": 1}, {"field": "a", "op": "in", "value": [2]}]}
    )


def test_reference_order_nulls_lowest_and_index_tie_break() -> None:
    def indexes(**query: Any) -> list[int]:
        return [i for i, _ in evaluate(RAGGED, **query)]

    assert indexes() == [0, 1, 2, 3, 4, 5, 6]
    # asc: nulls (3, 5) first; ties (2 and 4; 0 and 6) by index ascending.
    assert indexes(order=[{"field": "id"}]) == [3, 5, 1, 2, 4, 0, 6]
    # desc: values high to low, ties still by index ascending, nulls last.
    assert indexes(order=[{"field": "id", "direction": "desc"}]) == [0, 6, 2, 4, 1, 3, 5]
    assert indexes(order=[{"field": "score", "direction": "desc"}, {"field": "id", "direction": "desc"}]) == [
        6,
        0,
        3,
        2,
        4,
        1,
        5,
    ]
    # Code point order: "A" < "Z" < "a" < "b" < "😀".
    assert indexes(order=[{"field": "name"}]) == [2, 5, 3, 0, 1, 4, 6]
    assert indexes(record_range=[2, 4], where={"field": "id", "op": "is_null", "value": False}) == [2]


def test_reference_projection_reads_missing_as_null() -> None:
    assert evaluate(RAGGED, fields=["extra", "id"], record_range=[1, 3]) == [
        (1, {"extra": None, "id": 1}),
        (2, {"extra": "x", "id": 2}),
    ]
    assert first_page(evaluate(RAGGED), 2000) == evaluate(RAGGED)
