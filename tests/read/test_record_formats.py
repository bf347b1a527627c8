"""Record formats read exactly: numbers, CSV, UUIDs, wide integers, empty arrays, hostile field names, source order,
and errors that never quote content.
"""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from refvault import RefvaultError, Scope, Toolbox, Vault, read
from refvault.errors import InvalidQuery, UnsupportedRead
from refvault.read.records import INDEX, _engine, kind_for
from tests.read.record_helpers import CANARY, NDJSON, _memory, _ndjson

# -- 2. the derivative is keyed by blob only, not by source format (medium) ----------------------------


def test_same_bytes_captured_as_another_record_format_are_not_read_with_the_first_format() -> None:
    fresh = _memory()
    csv_bytes = b"a,b\n1,2\n3,4\n"
    alone = fresh.put(Scope("acme", "bo", "s2"), csv_bytes, media_type=NDJSON).artifact_id
    with pytest.raises(UnsupportedRead):  # not JSON Lines: refused when nothing was derived before
        read.query(fresh, Scope("acme", "bo", "s2"), alone)

    vault = _memory()
    ana, bo = Scope("acme", "ana", "s1"), Scope("acme", "bo", "s2")
    as_csv = vault.put(ana, csv_bytes, media_type="text/csv").artifact_id
    assert read.query(vault, ana, as_csv)["total_records"] == 2
    as_ndjson = vault.put(bo, csv_bytes, media_type=NDJSON).artifact_id
    # Today the CSV derivative is reused: the "JSON Lines" artifact answers with CSV records,
    # and the answer depends on which user happened to query first.
    with pytest.raises(UnsupportedRead):
        read.query(vault, bo, as_ndjson)


# -- 7. type inference changes values (medium / low) ---------------------------------------------------


def test_a_field_mixing_integers_and_fractions_is_a_double_and_the_bytes_stay_exact() -> None:
    # Documented behaviour (records.py docstring): such a field is a double, as JSON numbers are in most
    # parsers; integers beyond 2**53 are rounded in query answers, while the artifact keeps the exact text.
    vault, scope = _memory(), Scope("acme", "ana", "s1")
    artifact_id = vault.put(scope, b'{"a": 9007199254740993}\n{"a": 1.5}\n', media_type=NDJSON).artifact_id
    assert dict(read.derive(vault, scope, artifact_id).fields) == {"a": "DOUBLE"}
    assert read.query(vault, scope, artifact_id)["records"][0]["record"] == {"a": float(2**53)}
    assert "9007199254740993" in read.window(vault, scope, artifact_id, lines=[0, 1])["text"]
    # A field holding only integers stays exact.
    exact = vault.put(scope, b'{"a": 9007199254740993}\n{"a": -9223372036854775807}\n', media_type=NDJSON)
    values = [r["record"]["a"] for r in read.query(vault, scope, exact.artifact_id)["records"]]
    assert values == [9007199254740993, -9223372036854775807]


def test_csv_identifiers_beyond_int64_are_not_rounded() -> None:
    vault, scope = _memory(), Scope("acme", "ana", "s1")
    artifact_id = vault.put(scope, b"id\n12345678901234567890\n1\n", media_type="text/csv").artifact_id
    value = read.query(vault, scope, artifact_id, limit=1)["records"][0]["record"]["id"]
    assert value in (12345678901234567890, "12345678901234567890"), f"read back as {value!r}"


def test_csv_text_values_are_not_reinterpreted() -> None:
    vault, scope = _memory(), Scope("acme", "ana", "s1")
    answers = {}
    for column, body in (("flag", "yes\nno\n"), ("code", "0x10\n0x1F\n")):
        artifact_id = vault.put(scope, f"{column}\n{body}".encode(), media_type="text/csv").artifact_id
        answers[column] = [r["record"][column] for r in read.query(vault, scope, artifact_id)["records"]]
    # Today: [True, False] and [16, 31].
    assert answers == {"flag": ["yes", "no"], "code": ["0x10", "0x1F"]}


def test_text_csv_is_comma_separated_not_sniffed() -> None:
    vault, scope = _memory(), Scope("acme", "ana", "s1")
    artifact_id = vault.put(scope, b"a;b\n1;2\n", media_type="text/csv").artifact_id
    assert [r["record"] for r in read.query(vault, scope, artifact_id)["records"]] == [{"a;b": "1;2"}]


# -- 8. a string field of UUIDs cannot be filtered or ordered (medium) ---------------------------------


def test_uuid_strings_are_an_ordinary_string_field() -> None:
    vault, scope = _memory(), Scope("acme", "ana", "s1")
    ids = ["123e4567-e89b-12d3-a456-426614174000", "223e4567-e89b-12d3-a456-426614174000"]
    artifact_id = vault.put(scope, _ndjson([{"request_id": u} for u in ids]), media_type=NDJSON).artifact_id
    # Today: InvalidQuery "field 'request_id' holds nested or mixed values; only is_null applies to it".
    hit = read.query(vault, scope, artifact_id, where={"field": "request_id", "op": "eq", "value": ids[1]})
    assert [r["index"] for r in hit["records"]] == [1]
    ordered = read.query(vault, scope, artifact_id, order=[{"field": "request_id", "direction": "desc"}])
    assert [r["index"] for r in ordered["records"]] == [1, 0]


# -- 9. small robustness defects (low) -----------------------------------------------------------------


def test_an_integer_wider_than_128_bits_is_answered_or_refused_as_invalid_query() -> None:
    vault, scope = _memory(), Scope("acme", "ana", "s1")
    artifact_id = vault.put(scope, _ndjson([{"a": 5}, {"a": 1}]), media_type=NDJSON).artifact_id
    try:
        # Today: a raw duckdb.InvalidInputException (the tool shows only "the tool raised InvalidInputException").
        answer = read.query(vault, scope, artifact_id, where={"field": "a", "op": "lt", "value": 10**40})
    except InvalidQuery:
        return
    assert [r["index"] for r in answer["records"]] == [0, 1]


def test_an_empty_json_array_is_zero_records() -> None:
    vault, scope = _memory(), Scope("acme", "ana", "s1")
    artifact_id = vault.put(scope, b"[]", media_type="application/json").artifact_id
    answer = read.query(vault, scope, artifact_id)  # today: UnsupportedRead "could not be read ... well-formed"
    assert (answer["total_records"], answer["records"], answer["scan_complete"]) == (0, [], True)


def test_hostile_field_names_and_values_are_data_not_sql(vault: Vault) -> None:
    scope = Scope("acme", "ana", "s1")
    keys = ["a'b", 'a"b', "a\\", "a'}); SELECT 1; --", 'x") FROM rv_x; --', "a b", "SELECT"]
    rows = [{k: i for k in keys} | {"s": f"v{i}'; DROP VIEW x; --"} for i in range(3)]
    for media_type, data in ((NDJSON, _ndjson(rows)), ("application/json", json.dumps(rows).encode())):
        artifact_id = vault.put(scope, data, media_type=media_type).artifact_id
        answer = read.query(
            vault,
            scope,
            artifact_id,
            where={"and": [{"field": k, "op": "gte", "value": 1} for k in keys]},
            order=[{"field": k, "direction": "desc"} for k in keys],
        )
        assert [r["index"] for r in answer["records"]] == [2, 1]
        assert answer["records"][0]["record"] == rows[2]
        hit = read.query(vault, scope, artifact_id, where={"field": "s", "op": "eq", "value": "v1'; DROP VIEW x; --"})
        assert [r["index"] for r in hit["records"]] == [1]


@pytest.mark.parametrize(
    ("media_type", "data"),
    [
        (NDJSON, f'{{"a": 1}}\n{{"a": "{CANARY}"\n'.encode()),
        ("application/json", f'[{{"a": 1}}, "{CANARY}"]'.encode()),
        ("text/csv", f'a,b\n1,2\n"{CANARY}\n'.encode()),
    ],
)
def test_malformed_records_errors_never_quote_content(vault: Vault, media_type: str, data: bytes) -> None:
    scope = Scope("acme", "ana", "s1")
    artifact_id = vault.put(scope, data, media_type=media_type).artifact_id
    try:
        read.query(vault, scope, artifact_id)
    except RefvaultError as exc:
        assert CANARY not in str(exc)
    observation = Toolbox(vault).call_sync("query_artifact", {"artifact_id": artifact_id}, scope=scope)
    if observation.is_error:
        assert CANARY not in observation.content


def test_record_index_is_source_order_across_row_groups_and_threads() -> None:
    vault, scope = _memory(), Scope("acme", "ana", "s1")
    _engine(vault).db.execute("SET threads = 8")
    n = 300_000
    buffer = io.BytesIO()
    pq.write_table(
        pa.table({"i": list(range(n)), "pad": ["x" * (i % 37) for i in range(n)]}), buffer, row_group_size=5_000
    )
    sources = {
        "application/vnd.apache.parquet": buffer.getvalue(),
        "text/csv": ("i,pad\n" + "".join(f"{i},{'x' * (i % 37)}\n" for i in range(n))).encode(),
        "application/json": ("[" + ",".join(f'{{"i":{i},"p":"{"y" * (i % 11)}"}}' for i in range(n)) + "]").encode(),
        NDJSON: "".join(f'{{"i":{i}}}\n' for i in range(n)).encode(),
    }
    for media_type, data in sources.items():
        artifact_id = vault.put(scope, data, media_type=media_type).artifact_id
        assert read.derive(vault, scope, artifact_id).count == n
        _, stream = vault.open_derived(scope, artifact_id, kind_for(media_type))  # type: ignore[arg-type]
        with stream:
            derived = pq.read_table(io.BytesIO(b"".join(stream.iter_chunks())), columns=[INDEX, "i"])
        assert derived.column(INDEX).to_pylist() == derived.column("i").to_pylist() == list(range(n)), media_type
