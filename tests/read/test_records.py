"""Record artifacts: derivation, query semantics, cursors bound to what they page, budgets and coverage."""

from __future__ import annotations

import base64
import json
import threading
from datetime import timedelta
from typing import Any

import pytest

from refvault import Scope, Vault, read
from refvault.errors import (
    IntegrityError,
    InvalidArgument,
    InvalidCursor,
    InvalidQuery,
    NotFound,
    SealedArtifact,
    UnsupportedRead,
)
from refvault.read.records import INDEX, derivation_of
from tests.conftest import Clock, Tamper

NDJSON = "application/x-ndjson"


def _ndjson(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def _incidents(n: int = 200) -> list[dict[str, Any]]:
    return [
        {
            "event_id": f"evt-{i:05d}",
            "ts": f"2026-11-29T04:{i % 60:02d}:00Z",
            "region": ["eu-west", "us-east", "ap-south"][i % 3],
            "severity": "critical" if i % 50 == 7 else ["info", "warning"][i % 2],
            "latency_ms": (i * 7919) % 1000 / 10,
            "code": (i * 31) % 600,
        }
        for i in range(n)
    ]


def _put(vault: Vault, scope: Scope, rows: list[dict[str, Any]], **options: Any) -> str:
    return vault.put(scope, _ndjson(rows), media_type=NDJSON, **options).artifact_id


def _walk(vault: Vault, scope: Scope, artifact_id: str, **selection: Any) -> list[int]:
    page = read.query(vault, scope, artifact_id, **selection)
    seen = [r["index"] for r in page["records"]]
    while page["has_more"]:
        page = read.query(vault, scope, artifact_id, cursor=page["next_cursor"], **selection)
        seen += [r["index"] for r in page["records"]]
    return seen


# -- derivation ------------------------------------------------------------------------------


def test_derive_records_schema_count_and_a_lineage_linked_derivative(vault: Vault, scope: Scope) -> None:
    artifact_id = _put(vault, scope, _incidents())
    records = read.derive(vault, scope, artifact_id)
    assert records.count == 200
    assert dict(records.fields) == {
        "event_id": "VARCHAR",
        "ts": "VARCHAR",  # timestamps stay the strings the source holds
        "region": "VARCHAR",
        "severity": "VARCHAR",
        "latency_ms": "DOUBLE",
        "code": "BIGINT",
    }
    derivation = derivation_of(vault, scope, artifact_id)
    assert derivation is not None
    assert records.derived_hash == "sha256:" + derivation.digest != records.content_hash
    assert derivation.source.digest == records.content_hash.removeprefix("sha256:")
    # The source bytes are untouched: the artifact is still exactly what was captured.
    assert vault.read_bytes(scope, artifact_id) == _ndjson(_incidents())


def test_identical_bytes_share_one_derivative_and_derive_runs_once(vault: Vault, scope: Scope) -> None:
    first = _put(vault, scope, _incidents())
    second = _put(vault, scope, _incidents())
    results: list[str] = []
    threads = [
        threading.Thread(target=lambda a=a: results.append(read.derive(vault, scope, a).derived_hash))
        for a in (first, second, first, second)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1
    assert len(list(vault.catalog.derivations())) == 1


def test_gc_collects_the_derivative_with_its_source(vault: Vault, scope: Scope) -> None:
    artifact_id = _put(vault, scope, _incidents())
    read.query(vault, scope, artifact_id, limit=1)
    assert vault.gc(grace=0).blobs_removed == 0  # source referenced, derivative linked
    assert vault.verify().ok
    vault.delete(scope, artifact_id)
    report = vault.gc(grace=0)
    assert report.blobs_removed == 2
    assert not list(vault.catalog.derivations())
    assert not list(vault.blobs.keys())


def test_a_tampered_derivative_is_an_integrity_error_and_verify_names_the_artifact(
    vault: Vault, scope: Scope, tamper: Tamper
) -> None:
    rows = _incidents(3000)  # large enough that the derivative is stored as a blob, not inline
    artifact_id = _put(vault, scope, rows)
    read.derive(vault, scope, artifact_id)
    derivation = derivation_of(vault, scope, artifact_id)
    assert derivation is not None
    record = vault.catalog.blob(derivation.key)
    assert record is not None
    stored = record.inline if record.inline is not None else tamper.get_bytes(derivation.key)
    damaged = bytearray(stored)
    damaged[len(damaged) // 2] ^= 0xFF
    if record.inline is not None:
        tamper.set_inline(derivation.key, bytes(damaged))
    else:
        tamper.set_bytes(derivation.key, bytes(damaged))
    with pytest.raises(IntegrityError):
        read.query(vault, scope, artifact_id, limit=5)
    report = vault.verify()
    assert [p.artifact_ids for p in report.problems] == [(artifact_id,)]


@pytest.mark.parametrize(
    ("media_type", "data"),
    [
        (NDJSON, b'{"a": 1}\n{"a": 2, "b": "x"}\n{"b": "y"}\n'),
        ("application/json", b'[{"a": 1}, {"a": 2, "b": "x"}, {"b": "y"}]'),
        ("text/csv", b"a,b\n1,\n2,x\n,y\n"),
    ],
)
def test_every_record_format_reads_the_same_ragged_records(
    vault: Vault, scope: Scope, media_type: str, data: bytes
) -> None:
    artifact_id = vault.put(scope, data, media_type=media_type).artifact_id
    page = read.query(vault, scope, artifact_id)
    assert [r["record"] for r in page["records"]] == [
        {"a": 1, "b": None},
        {"a": 2, "b": "x"},
        {"a": None, "b": "y"},
    ]


def test_csv_with_quoted_newlines_quotes_and_leading_zeros(vault: Vault, scope: Scope) -> None:
    data = b'id,zip,note\n1,007,"two\nlines"\n2,10115,"say ""hi"""\n'
    artifact_id = vault.put(scope, data, media_type="text/csv").artifact_id
    page = read.query(vault, scope, artifact_id)
    assert [r["record"] for r in page["records"]] == [
        {"id": 1, "zip": "007", "note": "two\nlines"},
        {"id": 2, "zip": "10115", "note": 'say "hi"'},
    ]


def test_nested_and_mixed_values_come_back_as_json_and_only_is_null_applies(vault: Vault, scope: Scope) -> None:
    rows = [{"k": 1, "tags": ["a", "b"], "meta": {"x": 1}}, {"k": 2, "tags": None, "meta": {"y": [1]}}]
    artifact_id = _put(vault, scope, rows)
    page = read.query(vault, scope, artifact_id, where={"field": "tags", "op": "is_null", "value": False})
    assert [r["record"] for r in page["records"]] == [rows[0]]
    with pytest.raises(InvalidQuery, match="only is_null"):
        read.query(vault, scope, artifact_id, where={"field": "meta", "op": "eq", "value": "x"})


def test_empty_and_parquet_and_dataframe_sources(vault: Vault, scope: Scope) -> None:
    import pandas as pd
    import pyarrow as pa

    empty = vault.put(scope, b"", media_type=NDJSON).artifact_id
    page = read.query(vault, scope, empty)
    assert (page["records"], page["total_records"], page["has_more"], page["scan_complete"]) == ([], 0, False, True)

    frame = pd.DataFrame({"host": ["a", "b", "c"], "load": [0.5, 2.0, 1.25]})
    from_frame = read.capture_records(vault, scope, frame, filename="hosts.parquet")
    assert from_frame.media_type == "application/vnd.apache.parquet"
    page = read.query(vault, scope, from_frame.artifact_id, order=[{"field": "load", "direction": "desc"}])
    assert [r["record"]["host"] for r in page["records"]] == ["b", "c", "a"]

    table = pa.table({"n": [3, 1, 2]})
    from_table = read.capture_records(vault, scope, table)
    page = read.query(vault, scope, from_table.artifact_id, where={"field": "n", "op": "gte", "value": 2})
    assert [(r["index"], r["record"]) for r in page["records"]] == [(0, {"n": 3}), (2, {"n": 2})]
    with pytest.raises(InvalidArgument, match=r"pyarrow\.Table or a pandas\.DataFrame"):
        read.capture_records(vault, scope, [{"n": 1}])


CANARY = "CANARY-7f3a-do-not-echo"


@pytest.mark.parametrize(
    ("media_type", "data"),
    [
        (NDJSON, f'{{"a": 1}}\n{{"a": "{CANARY}"\n'.encode()),
        (NDJSON, f'["{CANARY}"]\n'.encode()),
        ("application/json", f'{{"not": "an array", "x": "{CANARY}"}}'.encode()),
        ("application/json", f'["{CANARY}", 2]'.encode()),
    ],
)
def test_malformed_records_are_refused_without_echoing_them(
    vault: Vault, scope: Scope, media_type: str, data: bytes
) -> None:
    artifact_id = vault.put(scope, data, media_type=media_type).artifact_id
    with pytest.raises(UnsupportedRead) as caught:
        read.query(vault, scope, artifact_id)
    assert CANARY not in str(caught.value)
    assert artifact_id in str(caught.value)
    assert derivation_of(vault, scope, artifact_id) is None


def test_reserved_index_field_is_refused(vault: Vault, scope: Scope) -> None:
    artifact_id = _put(vault, scope, [{INDEX: 1}])
    with pytest.raises(UnsupportedRead, match="reserves"):
        read.derive(vault, scope, artifact_id)


def test_non_record_and_sealed_artifacts_are_refused(vault: Vault, scope: Scope) -> None:
    text = vault.put(scope, b"hello", media_type="text/plain").artifact_id
    with pytest.raises(UnsupportedRead, match="not a record artifact"):
        read.query(vault, scope, text)
    sealed = _put(vault, scope, _incidents(), disclosure="sealed")
    with pytest.raises(SealedArtifact, match=r"by reference|Ref"):
        read.query(vault, scope, sealed)
    assert derivation_of(vault, scope, sealed) is None


# -- semantics -------------------------------------------------------------------------------


def test_filters_projection_order_and_ranges(vault: Vault, scope: Scope) -> None:
    rows = _incidents()
    artifact_id = _put(vault, scope, rows)
    page = read.query(
        vault,
        scope,
        artifact_id,
        where={
            "and": [
                {"field": "region", "op": "in", "value": ["eu-west", "us-east"]},
                {"not": {"field": "severity", "op": "eq", "value": "info"}},
                {"field": "code", "op": "lt", "value": 300},
            ]
        },
        fields=["event_id", "code"],
        order=[{"field": "code", "direction": "desc"}],
        limit=1000,
        record_range=[10, 150],
    )
    expected = sorted(
        (
            i
            for i in range(10, 150)
            if rows[i]["region"] in ("eu-west", "us-east") and rows[i]["severity"] != "info" and rows[i]["code"] < 300
        ),
        key=lambda i: (-rows[i]["code"], i),
    )
    assert [r["index"] for r in page["records"]] == expected
    assert all(set(r["record"]) == {"event_id", "code"} for r in page["records"])
    assert page["selection"]["record_range"] == [10, 150]
    assert page["scanned_records"] == 140


def test_null_logic_is_two_valued_and_nulls_sort_lowest(vault: Vault, scope: Scope) -> None:
    rows = [{"v": 2}, {"v": None}, {}, {"v": 1}]
    artifact_id = _put(vault, scope, rows)

    def indexes(**selection: Any) -> list[int]:
        return [r["index"] for r in read.query(vault, scope, artifact_id, **selection)["records"]]

    assert indexes(where={"field": "v", "op": "ne", "value": 2}) == [3]
    assert indexes(where={"not": {"field": "v", "op": "eq", "value": 2}}) == [1, 2, 3]
    assert indexes(where={"field": "v", "op": "is_null"}) == [1, 2]
    assert indexes(order=[{"field": "v"}]) == [1, 2, 3, 0]
    assert indexes(order=[{"field": "v", "direction": "desc"}]) == [0, 3, 1, 2]


@pytest.mark.parametrize(
    ("selection", "message"),
    [
        ({"where": {"field": "nope", "op": "eq", "value": 1}}, "unknown field"),
        ({"where": {"field": "code", "op": "like", "value": 1}}, "unknown op"),
        ({"where": {"field": "code", "op": "eq", "value": "1"}}, "number"),
        ({"where": {"field": "code", "op": "eq", "value": True}}, "number"),
        ({"where": {"field": "region", "op": "gt", "value": 3}}, "string"),
        ({"where": {"field": "code", "op": "eq"}}, "is_null"),
        ({"where": {"field": "code", "op": "eq", "value": None}}, "is_null"),
        ({"where": {"field": "code", "op": "contains", "value": "1"}}, "contains"),
        ({"where": {"field": "code", "op": "in", "value": []}}, "list"),
        ({"where": {"and": []}}, "non-empty"),
        ({"where": {"and": [{"field": "code", "op": "eq", "value": 1}], "or": []}}, "condition"),
        ({"where": {"field": "code", "op": "eq", "value": 1, "extra": 1}}, "condition"),
        ({"where": "code = 1; DROP TABLE x"}, "selector"),
        ({"fields": ["code", "code"]}, "twice"),
        ({"fields": []}, "non-empty"),
        ({"order": [{"field": "code", "direction": "up"}]}, "asc"),
        ({"order": [{"field": "ghost"}]}, "unknown field"),
        ({"limit": 0}, "positive"),
        ({"limit": True}, "positive"),
        ({"record_range": [5, 2]}, "start <= end"),
        ({"record_range": [-1, 2]}, "start <= end"),
    ],
)
def test_invalid_queries_are_clear_typed_errors(
    vault: Vault, scope: Scope, selection: dict[str, Any], message: str
) -> None:
    artifact_id = _put(vault, scope, _incidents(10))
    with pytest.raises(InvalidQuery, match=message):
        read.query(vault, scope, artifact_id, **selection)


def test_deep_selectors_are_refused_not_crashed(vault: Vault, scope: Scope) -> None:
    artifact_id = _put(vault, scope, _incidents(10))
    node: dict[str, Any] = {"field": "code", "op": "eq", "value": 1}
    for _ in range(10_000):
        node = {"not": node}
    with pytest.raises(InvalidQuery, match="deeper"):
        read.query(vault, scope, artifact_id, where=node)


def test_hostile_field_names_and_values_are_only_data(vault: Vault, scope: Scope) -> None:
    name = 'x" = 1 OR "1'
    rows = [{name: "a'); DROP TABLE t; --", "ok": 1}, {name: "b", "ok": 2}]
    artifact_id = _put(vault, scope, rows)
    page = read.query(vault, scope, artifact_id, where={"field": name, "op": "eq", "value": "a'); DROP TABLE t; --"})
    assert [r["record"] for r in page["records"]] == [rows[0]]
    assert read.query(vault, scope, artifact_id)["total_records"] == 2


def test_limit_is_clamped_and_the_selection_says_so(vault: Vault, scope: Scope) -> None:
    artifact_id = _put(vault, scope, _incidents(1500))
    page = read.query(vault, scope, artifact_id, limit=5000)
    assert page["selection"]["limit"] == 1000
    assert page["returned_records"] == 1000
    assert page["has_more"] is True


# -- coverage and absence ----------------------------------------------------------------------


def test_no_matches_is_claimed_only_for_the_scanned_coverage(vault: Vault, scope: Scope) -> None:
    artifact_id = _put(
        vault,
        scope,
        _incidents(),
        completeness={"status": "partial", "omissions": [{"region": "ap-south", "reason": "collector down"}]},
        source_version={"source": "infra.incident-events", "snapshot_id": "snap-043950"},
    )
    page = read.query(vault, scope, artifact_id, where={"field": "severity", "op": "eq", "value": "fatal"})
    assert (page["records"], page["has_more"]) == ([], False)
    assert (page["scan_complete"], page["scanned_records"]) == (True, 200)
    assert page["capture_status"] == "partial"  # independent of scan completeness
    assert page["omissions"] == [{"region": "ap-south", "reason": "collector down"}]
    assert page["source_snapshot_id"] == "snap-043950"


def test_scan_budget_stops_honestly_and_the_cursor_goes_on(vault: Vault, scope: Scope) -> None:
    rows = _incidents(1000)
    artifact_id = _put(vault, scope, rows)
    where = {"field": "severity", "op": "eq", "value": "critical"}
    page = read.query(vault, scope, artifact_id, where=where, max_scan=300)
    assert (page["status"], page["scan_complete"]) == ("incomplete", False)
    assert (page["scanned_records"], page["has_more"]) == (300, True)
    assert page["omissions"][-1]["record_range"] == [300, 1000]
    seen = [r["index"] for r in page["records"]]
    while page["has_more"]:
        page = read.query(vault, scope, artifact_id, where=where, max_scan=300, cursor=page["next_cursor"])
        seen += [r["index"] for r in page["records"]]
    assert seen == [i for i, row in enumerate(rows) if row["severity"] == "critical"]


def test_time_budget_never_claims_absence(vault: Vault, scope: Scope) -> None:
    artifact_id = _put(vault, scope, _incidents())
    where = {"field": "severity", "op": "eq", "value": "fatal"}
    page = read.query(vault, scope, artifact_id, where=where, max_seconds=0)
    assert (page["records"], page["scan_complete"], page["has_more"]) == ([], False, True)
    assert page["scanned_records"] == 0
    ordered = read.query(vault, scope, artifact_id, where=where, order=[{"field": "code"}], max_seconds=0)
    assert (ordered["scan_complete"], ordered["status"]) == (False, "incomplete")
    assert "time budget" in ordered["omissions"][-1]["reason"]


def test_ordered_scan_budget_pages_within_the_scanned_prefix(vault: Vault, scope: Scope) -> None:
    rows = _incidents(500)
    artifact_id = _put(vault, scope, rows)
    order = [{"field": "code", "direction": "desc"}]
    seen = _walk(vault, scope, artifact_id, order=order, limit=7, max_scan=100)
    assert seen == sorted(range(100), key=lambda i: (-rows[i]["code"], i))


# -- cursors -------------------------------------------------------------------------------------


def test_pages_concatenate_to_the_unpaged_answer(vault: Vault, scope: Scope) -> None:
    artifact_id = _put(vault, scope, _incidents(400))
    for selection in (
        {"where": {"field": "region", "op": "eq", "value": "eu-west"}},
        {"order": [{"field": "latency_ms", "direction": "desc"}, {"field": "region"}]},
    ):
        full = [r["index"] for r in read.query(vault, scope, artifact_id, limit=1000, **selection)["records"]]
        assert _walk(vault, scope, artifact_id, limit=9, **selection) == full


def _first_cursor(vault: Vault, scope: Scope, artifact_id: str, **selection: Any) -> str:
    page = read.query(vault, scope, artifact_id, limit=3, **selection)
    assert page["has_more"]
    cursor: str = page["next_cursor"]
    return cursor


def test_cursor_reused_with_a_changed_query_or_another_artifact_is_refused(vault: Vault, scope: Scope) -> None:
    artifact_id = _put(vault, scope, _incidents())
    other = _put(vault, scope, _incidents()[::-1])
    where = {"field": "region", "op": "eq", "value": "eu-west"}
    cursor = _first_cursor(vault, scope, artifact_id, where=where)
    for change in (
        {"where": {"field": "region", "op": "eq", "value": "us-east"}},
        {"where": where, "fields": ["code"]},
        {"where": where, "order": [{"field": "code"}]},
        {"where": where, "record_range": [0, 100]},
    ):
        with pytest.raises(InvalidCursor) as caught:
            read.query(vault, scope, artifact_id, cursor=cursor, **change)
        assert caught.value.reason == "query"
    with pytest.raises(InvalidCursor) as caught:
        read.query(vault, scope, other, cursor=cursor, where=where)
    assert caught.value.reason == "artifact"
    # The page size is not part of the query: it may change between pages.
    assert read.query(vault, scope, artifact_id, cursor=cursor, where=where, limit=50)["returned_records"] > 0


def test_a_cursor_is_never_authorisation(vault: Vault, scope: Scope) -> None:
    artifact_id = _put(vault, scope, _incidents())
    cursor = _first_cursor(vault, scope, artifact_id)
    for other in (Scope("acme", "ana", "s2"), Scope("acme", "bob", "s1"), Scope("evil", "ana", "s1")):
        with pytest.raises(NotFound):
            read.query(vault, other, artifact_id, cursor=cursor)


def test_every_altered_cursor_is_refused(vault: Vault, scope: Scope) -> None:
    artifact_id = _put(vault, scope, _incidents())
    cursor = _first_cursor(vault, scope, artifact_id)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    for position in range(0, len(cursor), 3):
        replacement = alphabet[(alphabet.find(cursor[position]) + 1) % len(alphabet)]
        forged = cursor[:position] + replacement + cursor[position + 1 :]
        with pytest.raises(InvalidCursor):
            read.query(vault, scope, artifact_id, cursor=forged)
    for forged in (cursor + "A", cursor[:-1], "", "rvc1..", 17, ["rvc1"]):
        with pytest.raises(InvalidCursor):
            read.query(vault, scope, artifact_id, cursor=forged)


def test_a_cursor_with_a_rewritten_position_is_refused(vault: Vault, scope: Scope) -> None:
    artifact_id = _put(vault, scope, _incidents())
    cursor = _first_cursor(vault, scope, artifact_id)
    prefix, body, mac = cursor.split(".")
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    payload["p"]["pos"] = {"from": 0}
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    rewritten = base64.urlsafe_b64encode(canonical).decode().rstrip("=")
    with pytest.raises(InvalidCursor) as caught:
        read.query(vault, scope, artifact_id, cursor=f"{prefix}.{rewritten}.{mac}")
    assert caught.value.reason == "signature"


def test_cursors_expire(vault: Vault, scope: Scope, clock: Clock) -> None:
    artifact_id = _put(vault, scope, _incidents())
    cursor = _first_cursor(vault, scope, artifact_id)
    clock.advance(minutes=59)
    read.query(vault, scope, artifact_id, cursor=cursor)
    clock.advance(minutes=1)
    with pytest.raises(InvalidCursor) as caught:
        read.query(vault, scope, artifact_id, cursor=cursor)
    assert caught.value.reason == "expired"


def test_key_rotation_keeps_old_cursors_for_the_grace_only(vault: Vault, scope: Scope, clock: Clock) -> None:
    artifact_id = _put(vault, scope, _incidents())
    old = _first_cursor(vault, scope, artifact_id)
    read.rotate_cursor_keys(vault)
    new = _first_cursor(vault, scope, artifact_id)
    assert old.split(".")[1] != new.split(".")[1]
    read.query(vault, scope, artifact_id, cursor=old)  # within the grace
    # Past the grace (24 h) the old key no longer verifies; keep the cursors themselves unexpired.
    clock.advance(hours=24, seconds=1)
    with pytest.raises(InvalidCursor) as caught:
        read.query(vault, scope, artifact_id, cursor=old)
    assert caught.value.reason in ("key_retired", "expired")
    fresh = _first_cursor(vault, scope, artifact_id)
    read.rotate_cursor_keys(vault)
    clock.advance(hours=24, seconds=1)
    with pytest.raises(InvalidCursor) as caught:
        read.query(vault, scope, artifact_id, cursor=fresh)
    assert caught.value.reason in ("key_retired", "unknown_key", "expired")


def test_embedded_cursors_survive_reopening_and_rotation_is_shared(tmp_path: Any, scope: Scope) -> None:
    first = Vault.open(tmp_path / "store")
    second = Vault.open(tmp_path / "store")
    try:
        artifact_id = _put(first, scope, _incidents())
        cursor = _first_cursor(first, scope, artifact_id)
        assert read.query(second, scope, artifact_id, cursor=cursor)["returned_records"] > 0
        read.rotate_cursor_keys(first)
        rotated = _first_cursor(first, scope, artifact_id)
        assert read.query(second, scope, artifact_id, cursor=rotated)["returned_records"] > 0
        key_file = tmp_path / "store" / "cursor-keys.json"
        assert key_file.stat().st_mode & 0o777 == 0o600
    finally:
        first.close()
        second.close()


def test_paging_costs_a_keyset_lookup_not_a_rescan(vault: Vault, scope: Scope) -> None:
    # The cursor carries the last index only: no record values travel in it.
    rows = [{"secret_value": f"value-{i}", "n": i % 4} for i in range(20)]
    artifact_id = _put(vault, scope, rows)
    page = read.query(vault, scope, artifact_id, fields=["n"], order=[{"field": "secret_value"}], limit=2)
    body = page["next_cursor"].split(".")[1]
    decoded = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()
    assert "value-" not in decoded
    assert json.loads(decoded)["p"]["pos"]["after"] == page["records"][-1]["index"]


def test_cursor_ttl_is_an_hour(vault: Vault, scope: Scope, clock: Clock) -> None:
    artifact_id = _put(vault, scope, _incidents())
    cursor = _first_cursor(vault, scope, artifact_id)
    body = cursor.split(".")[1]
    exp = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))["exp"]
    assert exp == int((clock.now + timedelta(hours=1)).timestamp())


def test_queries_are_audited_by_id_and_hash_only(vault: Vault, scope: Scope) -> None:
    artifact_id = _put(vault, scope, _incidents())
    seen: list[Any] = []
    vault.add_audit_sink(seen.append)
    read.query(vault, scope, artifact_id, where={"field": "region", "op": "eq", "value": "eu-west"})
    queries = [r for r in seen if r.action == "query"]
    assert len(queries) == 1
    assert queries[0].artifact_id == artifact_id
    assert queries[0].content_hash == vault.describe(scope, artifact_id).content_hash
    assert "eu-west" not in repr(seen)


@pytest.mark.parametrize(
    ("media_type", "data"),
    [
        (NDJSON, b'{"a": 1, "A": 2}\n{"a": 3}\n'),
        ("application/json", b'[{"a": 1, "A": 2}]'),
        ("text/csv", b"a,A\n1,2\n"),
    ],
)
def test_field_names_differing_only_in_case_are_refused_not_renamed(
    vault: Vault, scope: Scope, media_type: str, data: bytes
) -> None:
    artifact_id = vault.put(scope, data, media_type=media_type).artifact_id
    with pytest.raises(UnsupportedRead, match="letter case"):
        read.query(vault, scope, artifact_id)


def test_a_real_field_named_like_a_rename_is_kept(vault: Vault, scope: Scope) -> None:
    artifact_id = _put(vault, scope, [{"a": 1, "a_1": 2}])
    assert read.query(vault, scope, artifact_id)["records"][0]["record"] == {"a": 1, "a_1": 2}
