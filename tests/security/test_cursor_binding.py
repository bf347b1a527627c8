"""What a record-query cursor is bound to, and that the page size is deliberately not part of it.

The finding: the cursor docs and the refusal text said the page ``limit`` was bound into the
cursor, but the code leaves it out. The code is right (the position is a keyset, independent of
the page size, so changing ``limit`` between pages is safe and useful) and the docs now say so.
Here: a cursor from a ``limit=10`` page is accepted with ``limit=20`` and continues exactly where
the first page stopped; hypothesis walks with a different ``limit`` on every page (in index order,
in a user order, and under a scan budget) equal the unpaged answer with no gap and no repeat; every
other part of the selection is still bound, and the refusal no longer claims the limit is.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refvault import Scope, Toolbox, Vault, read
from refvault.errors import InvalidCursor
from tests.records_reference import evaluate

SCOPE = Scope("acme", "ana", "s1")
RNG = random.Random(16)
RECORDS: list[dict[str, Any]] = [
    {"n": n, "group": RNG.choice(["a", "b", "c", None]), "value": RNG.choice([None, 1.5, 2.5, 7.75, 9.0])}
    for n in range(90)
]
SELECTIONS: dict[str, dict[str, Any]] = {
    "index order": {"where": {"field": "group", "op": "in", "value": ["a", "b"]}},
    "user order": {
        "where": {"not": {"field": "group", "op": "eq", "value": "c"}},
        "order": [{"field": "value", "direction": "desc"}, {"field": "group"}],
        "fields": ["n", "value"],
    },
    "record range": {"record_range": [7, 71], "order": [{"field": "group"}]},
}


@pytest.fixture(scope="module")
def records() -> Iterator[tuple[Vault, str]]:
    vault = Vault.open("memory://")
    data = "".join(json.dumps(record) + "\n" for record in RECORDS).encode()
    yield vault, vault.put(SCOPE, data, media_type="application/x-ndjson").artifact_id
    vault.close()


def walk(vault: Vault, artifact_id: str, selection: Mapping[str, Any], limits: list[int], **budget: Any) -> list[Any]:
    """Page through a query, asking for ``limits[i % len(limits)]`` records on page ``i``."""
    got: list[Any] = []
    cursor = None
    for page in range(10_000):
        limit = limits[page % len(limits)]
        response = read.query(vault, SCOPE, artifact_id, limit=limit, cursor=cursor, **selection, **budget)
        assert response["returned_records"] <= min(limit, 1000)
        got.extend((item["index"], item["record"]) for item in response["records"])
        if not response["has_more"]:
            return got
        cursor = response["next_cursor"]
    raise AssertionError("the walk did not end")


def test_a_cursor_from_a_limit_10_page_continues_with_limit_20(records: tuple[Vault, str]) -> None:
    vault, artifact_id = records
    for name, selection in SELECTIONS.items():
        expected = evaluate(RECORDS, **selection)
        first = read.query(vault, SCOPE, artifact_id, limit=10, **selection)
        second = read.query(vault, SCOPE, artifact_id, limit=20, cursor=first["next_cursor"], **selection)
        got = [(item["index"], item["record"]) for item in first["records"] + second["records"]]
        assert got == expected[:30], name
        assert second["selection"]["limit"] == 20  # the page reports the limit it was asked for


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.sampled_from(sorted(SELECTIONS)),
    st.lists(st.integers(2, 25) | st.just(5000), min_size=1, max_size=5),
)
def test_changing_the_limit_on_every_page_has_no_gap_and_no_repeat(
    records: tuple[Vault, str], name: str, limits: list[int]
) -> None:
    vault, artifact_id = records
    selection = SELECTIONS[name]
    got = walk(vault, artifact_id, selection, limits)
    indexes = [index for index, _ in got]
    assert len(indexes) == len(set(indexes)), "a record was returned twice"
    assert got == evaluate(RECORDS, **selection)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(1, 9), min_size=2, max_size=4), st.integers(5, 30))
def test_changing_the_limit_under_a_scan_budget_has_no_gap_and_no_repeat(
    records: tuple[Vault, str], limits: list[int], max_scan: int
) -> None:
    """Incomplete pages (stopped by ``max_scan``) carry a cursor too; the limit may change across them."""
    vault, artifact_id = records
    selection = SELECTIONS["index order"]
    assert walk(vault, artifact_id, selection, limits, max_scan=max_scan) == evaluate(RECORDS, **selection)


def test_everything_else_in_the_selection_is_still_bound(records: tuple[Vault, str]) -> None:
    vault, artifact_id = records
    selection = SELECTIONS["user order"]
    cursor = read.query(vault, SCOPE, artifact_id, limit=10, **selection)["next_cursor"]
    changes = [
        {"where": {"field": "group", "op": "eq", "value": "a"}},
        {"fields": ["n"]},
        {"order": [{"field": "value", "direction": "asc"}]},
        {"record_range": [0, 50]},
    ]
    for change in changes:
        with pytest.raises(InvalidCursor) as caught:
            read.query(vault, SCOPE, artifact_id, limit=10, cursor=cursor, **{**selection, **change})
        assert caught.value.reason == "query"
        message = str(caught.value)
        assert "where, fields, order or record_range" in message
        assert "the limit may change between pages" in message


def test_the_query_tool_accepts_a_new_limit_with_a_cursor(records: tuple[Vault, str]) -> None:
    """The model-facing path: query_artifact with next_cursor and another limit continues the walk."""
    vault, artifact_id = records
    box = Toolbox(vault)
    selection = SELECTIONS["user order"]

    def page(**arguments: Any) -> dict[str, Any]:
        observation = box.call_sync(
            "query_artifact", {"artifact_id": artifact_id, **selection, **arguments}, scope=SCOPE
        )
        assert not observation.is_error, observation.content
        result: dict[str, Any] = json.loads(observation.content)
        return result

    first = page(limit=4)
    second = page(limit=9, cursor=first["next_cursor"])
    got = [(item["index"], item["record"]) for item in first["records"] + second["records"]]
    assert got == evaluate(RECORDS, **selection)[:13]
