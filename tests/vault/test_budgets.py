"""Run budgets through the Python API: each dimension hit by each operation, all or nothing, scans incomplete.

A put or a read call over budget raises BudgetExceeded with nothing stored or returned; a scan (grep, a
record query) over budget returns what fits, ``scan_complete`` false and ``stopped_by`` "budget"; a run
without a budget is unaffected, and another run is never charged.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from refvault import AsyncVault, Budget, BudgetExceeded, Scope, Usage, Vault, read
from refvault.budgets import DIMENSIONS, MAX_SECONDS, bytes_per_token
from refvault.errors import InvalidArgument
from refvault.read import records
from refvault.toolbox.builtin import load
from refvault.vault.budgeting import REFRESH
from tests.conftest import Clock

RUN = Scope("acme", "ana", "run")
OTHER = Scope("acme", "ana", "other")
TEXT = "".join(f"line {i} {'needle' if i % 50 == 0 else 'hay'}\n" for i in range(5000)).encode()
ROWS = "".join(json.dumps({"i": i, "name": f"n{i}"}) + "\n" for i in range(3000)).encode()


@pytest.fixture(params=["memory", "embedded"])
def vault(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Vault]:
    location = "memory://" if request.param == "memory" else str(tmp_path / "store")
    with Vault.open(location, clock=Clock()) as opened:
        yield opened


@pytest.fixture
def ids(vault: Vault) -> dict[str, str]:
    text = vault.put(RUN, TEXT, media_type="text/plain").artifact_id
    rows = vault.put(RUN, ROWS, media_type="application/x-ndjson").artifact_id
    return {"text": text, "rows": rows}


def _spent(vault: Vault, scope: Scope = RUN) -> dict[str, Any]:
    return {name: value for name, value in vault.usage(scope).spent.items() if name != "seconds"}


# -- the values ------------------------------------------------------------------------------


def test_a_budget_is_a_checked_value() -> None:
    assert Budget(read_calls=3).to_json() == {"read_calls": 3}
    assert Budget.from_json({"scanned_bytes": 10, "seconds": 1.5}) == Budget(scanned_bytes=10, seconds=1.5)
    for bad in ({"read_calls": -1}, {"read_calls": 1.5}, {"read_calls": True}, {"seconds": float("nan")}):
        with pytest.raises(InvalidArgument):
            Budget.from_json(bad)
    assert Budget(seconds=MAX_SECONDS).seconds == MAX_SECONDS
    for huge in (MAX_SECONDS * 1.5, 1e15, 1e300, float("inf")):  # would not fit the catalog's microseconds
        with pytest.raises(InvalidArgument, match="budget seconds must be a number from 0 to 1,000,000,000,000"):
            Budget(seconds=huge)
    with pytest.raises(InvalidArgument, match="unknown budget dimension 'tokens'"):
        Budget.from_json({"tokens": 3})
    assert bytes_per_token(b"") == 0
    assert bytes_per_token(b"abcde") == 2


def test_a_run_without_a_budget_reports_nothing_and_is_unaffected(vault: Vault, ids: dict[str, str]) -> None:
    for _ in range(3):
        vault.read_bytes(RUN, ids["text"])
    usage = vault.usage(RUN)
    assert isinstance(usage, Usage)
    assert usage.budget is None
    assert usage.started_at is None
    assert set(usage.spent) == set(DIMENSIONS)
    assert not any(usage.spent.values())
    assert read.grep(vault, RUN, ids["text"], "needle", max_matches=1000)["stopped_by"] is None


def test_usage_counts_every_dimension_and_when_the_run_started(vault: Vault, ids: dict[str, str]) -> None:
    started = vault.set_budget(RUN, Budget(read_calls=100)).started_at
    assert started == vault.clock()
    vault.read_range(RUN, ids["text"], 0, 400)
    vault.put(RUN, b"x" * 10)
    spent = _spent(vault)
    assert spent["read_calls"] == 1
    assert spent["scanned_bytes"] == 400
    assert spent["returned_tokens"] == 100
    assert spent["acquired_bytes"] == spent["retained_bytes"] == 10
    assert vault.usage(RUN).left["read_calls"] == 99
    assert vault.usage(RUN).left["scanned_bytes"] is None


def test_another_run_is_not_charged(vault: Vault, ids: dict[str, str]) -> None:
    vault.set_budget(RUN, Budget(read_calls=1))
    vault.set_budget(OTHER, Budget(read_calls=5))
    vault.read_bytes(RUN, ids["text"])
    vault.put(OTHER, b"other")
    assert vault.usage(OTHER).spent["read_calls"] == 0
    assert _spent(vault)["acquired_bytes"] == 0


def test_the_longest_seconds_limit_is_stored_and_read_back(vault: Vault) -> None:
    assert vault.set_budget(RUN, Budget(seconds=MAX_SECONDS)).budget == Budget(seconds=MAX_SECONDS)
    assert vault.usage(RUN).left["seconds"] > MAX_SECONDS - 60


def test_restart_and_clear(vault: Vault, ids: dict[str, str]) -> None:
    vault.set_budget(RUN, Budget(read_calls=1))
    vault.read_bytes(RUN, ids["text"])
    assert vault.set_budget(RUN, Budget(read_calls=2)).spent["read_calls"] == 1  # new limits keep the spend
    assert vault.set_budget(RUN, Budget(read_calls=2), restart=True).spent["read_calls"] == 0
    assert vault.clear_budget(RUN)
    assert not vault.clear_budget(RUN)
    assert vault.usage(RUN).budget is None


# -- puts: nothing stored ----------------------------------------------------------------------


@pytest.mark.parametrize("dimension", ["acquired_bytes", "retained_bytes"])
def test_a_put_over_budget_stores_nothing(vault: Vault, dimension: str) -> None:
    vault.set_budget(RUN, Budget(**{dimension: 100}))
    vault.put(RUN, b"a" * 60)
    before_rows = [d.artifact_id for d in vault.list(RUN)]
    before_blobs = sorted(record.key.digest for record in vault.catalog.blob_records())
    with pytest.raises(BudgetExceeded) as raised:
        vault.put(RUN, b"b" * 60, media_type="text/plain")
    assert raised.value.dimension == dimension
    assert "b" * 10 not in str(raised.value)
    assert [d.artifact_id for d in vault.list(RUN)] == before_rows
    assert sorted(record.key.digest for record in vault.catalog.blob_records()) == before_blobs
    assert _spent(vault)[dimension] == 60
    vault.put(RUN, b"c" * 40)  # exactly what is left still fits


def test_a_retried_put_is_not_charged_again(vault: Vault) -> None:
    vault.set_budget(RUN, Budget(acquired_bytes=100))
    first = vault.put(RUN, b"a" * 60, idempotency_key="k1")
    assert vault.put(RUN, b"a" * 60, idempotency_key="k1").artifact_id == first.artifact_id
    assert _spent(vault)["acquired_bytes"] == 60


# -- read calls: nothing returned ------------------------------------------------------------------

ReadCall = Callable[[Vault, dict[str, str]], object]
READ_CALLS: dict[str, tuple[ReadCall, tuple[str, ...]]] = {
    "read_range": (
        lambda v, i: v.read_range(RUN, i["text"], 0, 1000),
        ("read_calls", "scanned_bytes", "returned_tokens"),
    ),
    "read_bytes": (lambda v, i: v.read_bytes(RUN, i["text"]), ("read_calls", "scanned_bytes", "returned_tokens")),
    "stream": (lambda v, i: v.stream(RUN, i["text"]).close(), ("read_calls", "scanned_bytes")),
    "window": (
        lambda v, i: read.window(v, RUN, i["text"], lines=[0, 10]),
        ("read_calls", "scanned_bytes", "returned_tokens"),
    ),
    "byte window": (
        lambda v, i: read.window(v, RUN, i["text"], byte_range=[0, 500]),
        ("read_calls", "scanned_bytes", "returned_tokens"),
    ),
    "grep": (lambda v, i: read.grep(v, RUN, i["text"], "needle"), ("read_calls",)),
    "query": (lambda v, i: read.query(v, RUN, i["rows"], limit=5), ("read_calls",)),
}
CASES = [(name, dimension) for name, (_, dims) in READ_CALLS.items() for dimension in dims]


@pytest.mark.parametrize(("operation", "dimension"), CASES)
def test_a_read_call_over_budget_returns_nothing(
    vault: Vault, ids: dict[str, str], operation: str, dimension: str
) -> None:
    call, _ = READ_CALLS[operation]
    read.derive(vault, RUN, ids["rows"])  # the index exists: this is about the read
    vault.set_budget(RUN, Budget(**{dimension: 0}))
    before = [vault.disclosures(RUN, ids[name]) for name in ("text", "rows")]
    with pytest.raises(BudgetExceeded) as raised:
        call(vault, ids)
    assert raised.value.dimension == dimension
    assert [vault.disclosures(RUN, ids[name]) for name in ("text", "rows")] == before  # nothing left the vault
    assert _spent(vault)[dimension] == 0
    vault.set_budget(RUN, Budget(), restart=True)
    call(vault, ids)  # the same call within budget works


def test_read_calls_are_counted_once_per_call(vault: Vault, ids: dict[str, str]) -> None:
    vault.set_budget(RUN, Budget(read_calls=3))
    read.window(vault, RUN, ids["text"], lines=[0, 10])  # streams inside the window are not read calls
    read.grep(vault, RUN, ids["text"], "needle")
    read.query(vault, RUN, ids["rows"], limit=5)
    assert _spent(vault)["read_calls"] == 3
    with pytest.raises(BudgetExceeded):
        vault.read_bytes(RUN, ids["text"])


def test_seconds_since_the_run_started_stop_every_operation(vault: Vault, ids: dict[str, str]) -> None:
    clock = vault.clock
    assert isinstance(clock, Clock)
    vault.set_budget(RUN, Budget(seconds=60))
    vault.read_bytes(RUN, ids["text"])
    clock.advance(seconds=61)
    assert vault.usage(RUN).left["seconds"] == 0
    for attempt in (lambda: vault.read_bytes(RUN, ids["text"]), lambda: vault.put(RUN, b"late")):
        with pytest.raises(BudgetExceeded) as raised:
            attempt()
        assert raised.value.dimension == "seconds"


# -- scans: incomplete, never cut silently -------------------------------------------------------


@pytest.mark.parametrize("dimension", ["scanned_bytes", "returned_tokens"])
def test_a_grep_over_budget_is_incomplete(vault: Vault, ids: dict[str, str], dimension: str) -> None:
    full = read.grep(vault, RUN, ids["text"], "needle", max_matches=1000)
    vault.set_budget(RUN, Budget(**{dimension: 1000 if dimension == "scanned_bytes" else 20}))
    cut = read.grep(vault, RUN, ids["text"], "needle", max_matches=1000)
    assert full["scan_complete"]
    assert full["stopped_by"] is None
    assert not cut["scan_complete"]
    assert cut["stopped_by"] == "budget"
    assert 0 < cut["returned"] < full["returned"]
    assert cut["matches"] == full["matches"][: cut["returned"]]
    assert cut["next"] == {"from_line": cut["scanned_lines"]}
    assert _spent(vault)[dimension] <= (1000 if dimension == "scanned_bytes" else 20)
    if dimension == "scanned_bytes":
        assert cut["scanned_bytes"] == 1000
    vault.set_budget(RUN, Budget())
    rest = read.grep(vault, RUN, ids["text"], "needle", max_matches=1000, from_line=cut["next"]["from_line"])
    assert cut["matches"] + rest["matches"] == full["matches"]  # resuming loses and repeats nothing


@pytest.mark.parametrize("ordered", [False, True])
@pytest.mark.parametrize("dimension", ["scanned_records", "returned_tokens"])
def test_a_query_over_budget_is_incomplete(vault: Vault, ids: dict[str, str], dimension: str, ordered: bool) -> None:
    order = [{"field": "i", "direction": "desc"}] if ordered else None
    read.derive(vault, RUN, ids["rows"])
    vault.set_budget(RUN, Budget(**{dimension: 100}))
    cut = read.query(vault, RUN, ids["rows"], limit=500, order=order)
    assert not cut["scan_complete"]
    assert cut["stopped_by"] == "budget"
    assert cut["status"] == "incomplete"
    assert any("run's" in omission["reason"] for omission in cut["omissions"])
    assert _spent(vault)[dimension] <= 100
    if dimension == "scanned_records":
        assert cut["scanned_records"] == 100
    else:
        assert 0 < cut["returned_records"] < 500
        assert cut["next_cursor"] is not None


@pytest.mark.parametrize("ordered", [False, True])
def test_a_query_page_the_token_budget_empties_resumes_where_it_stopped(
    vault: Vault, ids: dict[str, str], ordered: bool
) -> None:
    order = [{"field": "i", "direction": "desc"}] if ordered else None
    read.derive(vault, RUN, ids["rows"])
    first = read.query(vault, RUN, ids["rows"], limit=3, order=order)
    vault.set_budget(RUN, Budget(returned_tokens=1))  # no room for one record
    empty = read.query(vault, RUN, ids["rows"], limit=3, order=order, cursor=first["next_cursor"])
    assert empty["records"] == []
    assert empty["stopped_by"] == "budget"
    vault.clear_budget(RUN)
    going_on = read.query(vault, RUN, ids["rows"], limit=3, order=order, cursor=empty["next_cursor"])
    expected = [2996, 2995, 2994] if ordered else [3, 4, 5]
    assert [row["record"]["i"] for row in going_on["records"]] == expected  # not the first page again


def test_a_query_within_budget_is_complete(vault: Vault, ids: dict[str, str]) -> None:
    vault.set_budget(RUN, Budget(scanned_records=10_000, returned_tokens=100_000))
    answer = read.query(vault, RUN, ids["rows"], limit=10)
    assert answer["stopped_by"] is None
    assert answer["returned_records"] == 10


# -- recomputations ------------------------------------------------------------------------------


def test_rebuilding_a_record_index_is_a_recomputation(vault: Vault, ids: dict[str, str]) -> None:
    vault.set_budget(RUN, Budget(recomputations=1))
    read.derive(vault, RUN, ids["rows"])
    read.query(vault, RUN, ids["rows"])  # built already: no recomputation
    assert _spent(vault)["recomputations"] == 1
    other = vault.put(RUN, ROWS + b'{"i": -1, "name": "x"}\n', media_type="application/x-ndjson").artifact_id
    with pytest.raises(BudgetExceeded) as raised:
        read.query(vault, RUN, other)
    assert raised.value.dimension == "recomputations"
    assert records.derived_records(vault, RUN, other) is None  # nothing was built


def test_a_redaction_derivative_is_a_recomputation(vault: Vault) -> None:
    source = vault.put(RUN, b"mail ana@example.com please", media_type="text/plain").artifact_id
    vault.set_budget(RUN, Budget(recomputations=0))
    with pytest.raises(BudgetExceeded) as raised:
        vault.redact(RUN, source)
    assert raised.value.dimension == "recomputations"
    assert [d.artifact_id for d in vault.list(RUN)] == [source]
    vault.set_budget(RUN, Budget(recomputations=1, acquired_bytes=1000))
    made = vault.redact(RUN, source)
    assert vault.redact(RUN, source).artifact_id == made.artifact_id  # made once: reused, not recomputed
    assert _spent(vault)["recomputations"] == 1
    assert _spent(vault)["acquired_bytes"] == made.size


# -- load_artifacts --------------------------------------------------------------------------------


def test_load_artifacts_over_budget_loads_nothing(vault: Vault, ids: dict[str, str]) -> None:
    vault.set_budget(RUN, Budget(returned_tokens=5))
    loaded = load(vault, RUN, [ids["text"]])
    assert loaded.summary["results"][0]["error"] == "BudgetExceeded"
    assert "line 0" not in json.dumps(list(loaded.parts))


def test_a_token_counter_can_be_plugged_in(vault: Vault, ids: dict[str, str]) -> None:
    vault.set_token_counter(len)  # one token a byte
    vault.set_budget(RUN, Budget(returned_tokens=1000))
    vault.read_range(RUN, ids["text"], 0, 400)
    assert _spent(vault)["returned_tokens"] == 400
    with pytest.raises(InvalidArgument):
        vault.set_token_counter("four")  # type: ignore[arg-type]


# -- other servers, the async facade -------------------------------------------------------------


def test_a_budget_set_elsewhere_applies_within_the_refresh_bound(tmp_path: Path) -> None:
    store = tmp_path / "shared"
    with Vault.open(store) as here, Vault.open(store) as there:
        artifact = here.put(RUN, b"shared").artifact_id
        there.read_bytes(RUN, artifact)  # "there" has now seen the run without a budget
        here.set_budget(RUN, Budget(read_calls=0))
        with pytest.raises(BudgetExceeded):
            here.read_bytes(RUN, artifact)  # at once where it was set
        time.sleep(REFRESH + 0.1)
        with pytest.raises(BudgetExceeded):
            there.read_bytes(RUN, artifact)  # within REFRESH seconds elsewhere


def test_the_async_vault_sets_and_reports_budgets() -> None:
    async def run() -> Usage:
        async with await AsyncVault.open("memory://") as vault:
            await vault.set_budget(RUN, Budget(read_calls=7))
            assert await vault.clear_budget(RUN)
            await vault.set_budget(RUN, Budget(read_calls=3), restart=True)
            return await vault.usage(RUN)

    assert asyncio.run(run()).left["read_calls"] == 3


def test_an_upper_layer_charges_only_counted_dimensions(vault: Vault) -> None:
    vault.set_budget(RUN, Budget(recomputations=1))
    vault.charge(RUN, recomputations=1)
    for bad in ({"tokens": 1}, {"seconds": 1}, {"read_calls": -1}, {"read_calls": 1.5}):
        with pytest.raises(InvalidArgument):
            vault.charge(RUN, **bad)  # type: ignore[arg-type]
    with pytest.raises(BudgetExceeded):
        vault.charge(RUN, recomputations=1)
    assert _spent(vault)["recomputations"] == 1
