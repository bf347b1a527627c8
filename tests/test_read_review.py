"""Adversarial review of issue 4 (selective reads): a failing test is a bug report, a passing one a defended attack.

Failing tests demonstrate defects with a precise assertion; passing tests pin attacks that were correctly
defended (cross-tenant isolation, cursor replay, SQL injection, sealed artifacts, content-free errors, ...).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from refvault import Ref, RefvaultError, Scope, Toolbox, Vault, read
from refvault.blobs.filesystem import FilesystemBlobStore
from refvault.catalog.sql import SqlCatalog
from refvault.errors import InvalidCursor, InvalidQuery, NotFound, SealedArtifact, UnsupportedRead
from refvault.read.records import INDEX, _Engine, _engine, derivation_of, kind_for
from tests.test_cli import Cli

NDJSON = "application/x-ndjson"
CANARY = "CANARY-91c4-review-секрет"


def _ndjson(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def _memory() -> Vault:
    return Vault.open("memory://")


def _walk(vault: Vault, scope: Scope, artifact_id: str, pages: int, **selection: Any) -> list[int]:
    """Follow next_cursor for at most ``pages`` pages (a correct walk needs fewer)."""
    page = read.query(vault, scope, artifact_id, **selection)
    seen = [r["index"] for r in page["records"]]
    for _ in range(pages):
        if not page["has_more"]:
            break
        page = read.query(vault, scope, artifact_id, cursor=page["next_cursor"], **selection)
        seen += [r["index"] for r in page["records"]]
    return seen


# =====================================================================================================
# FINDINGS (these fail today)
# =====================================================================================================


# -- 1. keyset paging over nanosecond timestamps loops forever or omits records (high) ------------------


@pytest.mark.parametrize("direction", ["asc", "desc"])
def test_ns_timestamp_order_pages_concatenate_to_the_unpaged_answer(direction: str) -> None:
    vault, scope = _memory(), Scope("acme", "ana", "s1")
    base = 1_700_000_000_000_000_000
    stamps = [base + 3, base + 1, base + 2, base + 1000, base + 5]
    table = pa.table({"t": pa.array(stamps, pa.timestamp("ns")), "k": list(range(5))})
    artifact_id = read.capture_records(vault, scope, table).artifact_id
    order = [{"field": "t", "direction": direction}]
    unpaged = [r["index"] for r in read.query(vault, scope, artifact_id, order=order)["records"]]
    assert sorted(unpaged) == [0, 1, 2, 3, 4]
    # asc: the cursor after record 1 returns record 1 again, forever; desc: records are silently skipped.
    assert _walk(vault, scope, artifact_id, pages=10, order=order, limit=1) == unpaged


def test_pandas_datetime_desc_paging_does_not_claim_the_end_early() -> None:
    vault, scope = _memory(), Scope("acme", "ana", "s1")
    frame = pd.DataFrame(
        {
            "ts": pd.to_datetime(
                ["2024-01-01 00:00:00.000000001", "2024-01-01 00:00:00.000000002", "2024-01-01 00:00:00.000000003"]
            ),
            "n": [1, 2, 3],
        }
    )
    artifact_id = read.capture_records(vault, scope, frame).artifact_id
    order = [{"field": "ts", "direction": "desc"}]
    # has_more is false after the first page: records 1 and 0 are never returned (a false "no more").
    assert _walk(vault, scope, artifact_id, pages=5, order=order, limit=1) == [2, 1, 0]


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


# -- 3. vault.close() while a query runs (medium) ------------------------------------------------------


def test_close_while_a_query_runs_neither_raises_nor_leaks_a_raw_duckdb_error(tmp_path: Path) -> None:
    vault, scope = Vault.open(tmp_path / "store"), Scope("acme", "ana", "s1")
    catalog_closed: list[bool] = []
    original_close = vault.catalog.close

    def close_catalog() -> None:
        catalog_closed.append(True)
        original_close()

    vault.catalog.close = close_catalog  # type: ignore[method-assign]
    rows = duckdb.sql("SELECT i, repeat(lpad(i::VARCHAR, 8, '0'), 8) AS s FROM range(2000000) t(i)").arrow()
    artifact_id = read.capture_records(vault, scope, rows).artifact_id
    slow = {"or": [{"field": "s", "op": "contains", "value": f"zz{k:03d}"} for k in range(256)]}
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(
                read.query(vault, scope, artifact_id, where=slow, order=[{"field": "i", "direction": "desc"}])
            )
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    time.sleep(0.5)  # the query (about 2-3 s) is inside DuckDB now
    raised: BaseException | None = None
    try:
        vault.close()
    except BaseException as exc:
        raised = exc
    worker.join()
    assert raised is None, f"vault.close() raised {type(raised).__name__}: {raised}"
    assert catalog_closed == [True], "the catalog was never closed"
    assert isinstance(outcome[0], dict | RefvaultError), f"the query died with {type(outcome[0])!r}"


# -- 4. LRU eviction drops a view another thread is about to query (medium) ----------------------------


def test_concurrent_queries_survive_cache_eviction() -> None:
    vault, scope = _memory(), Scope("acme", "ana", "s1")
    vault.attachment("refvault.read.records", lambda: _Engine(max_bytes=1))  # a cache smaller than the working set
    ids = [
        vault.put(scope, _ndjson([{"i": i, "k": k} for i in range(500)]), media_type=NDJSON).artifact_id
        for k in range(4)
    ]
    for artifact_id in ids:
        read.derive(vault, scope, artifact_id)
    errors: list[BaseException] = []

    def run(artifact_id: str) -> None:
        for _ in range(40):
            try:
                read.query(vault, scope, artifact_id, where={"field": "i", "op": "gt", "value": 250}, limit=3)
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=run, args=(artifact_id,)) for artifact_id in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Today: duckdb CatalogException "Table with name rv_<ns>_<digest> does not exist" / IOException on the file.
    assert [f"{type(e).__module__}.{type(e).__name__}" for e in errors] == []


# -- 5. local derivative copies outlive deletion, gc and the process (medium) --------------------------


def test_local_derivative_copy_is_gone_after_delete_and_gc() -> None:
    vault, scope = _memory(), Scope("acme", "ana", "s1")
    artifact_id = vault.put(scope, _ndjson([{"secret": CANARY}]), media_type=NDJSON).artifact_id
    read.query(vault, scope, artifact_id)
    vault.delete(scope, artifact_id)
    assert vault.gc(grace=0).blobs_removed == 2  # source and derivative blobs are gone from the store...
    leftovers = [p.name for p in _engine(vault).root.rglob("*") if p.is_file()]
    assert leftovers == [], f"...but a plaintext copy of the records stays in the scratch dir: {leftovers}"


def test_scratch_dir_with_record_copies_is_removed_when_the_process_exits_without_close() -> None:
    script = (
        "from refvault import Vault, Scope, read\n"
        "from refvault.read.records import _engine\n"
        "v = Vault.open('memory://'); s = Scope('acme', 'ana', 's1')\n"
        "a = v.put(s, b'{\"secret\": \"x\"}\\n', media_type='application/x-ndjson').artifact_id\n"
        "read.query(v, s, a)\n"
        "print(_engine(v).root)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    root = Path(done.stdout.strip())
    leaked = root.exists()
    if leaked:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    assert not leaked, f"{root} (copies of the records) was left behind"


# -- 6. cursor keys of a vault built without a store location ------------------------------------------
# A vault opened by path shares its key ring through cursor-keys.json (tests/test_records.py). A vault built
# from backends directly signs with a per-instance key until the scale-out catalog holds a shared ring
# (issue 7); until then another instance must refuse such a cursor clearly, never page with it.


def test_vault_instances_without_a_location_share_the_cursor_ring_through_their_catalog(tmp_path: Path) -> None:
    root = tmp_path / "store"
    Vault.open(root).close()

    def instance() -> Vault:
        return Vault(FilesystemBlobStore(root), SqlCatalog.for_file(root / "catalog.db"))

    first, second = instance(), instance()
    scope = Scope("acme", "ana", "s1")
    artifact_id = first.put(scope, _ndjson([{"i": i} for i in range(10)]), media_type=NDJSON).artifact_id
    page = read.query(first, scope, artifact_id, limit=3)
    try:
        following = read.query(second, scope, artifact_id, limit=3, cursor=page["next_cursor"])
        assert [row["record"]["i"] for row in following["records"]] == [3, 4, 5]
    finally:
        first.close()
        second.close()


def test_a_cursor_from_another_catalog_is_refused_clearly() -> None:
    first, second = Vault.open("memory://"), Vault.open("memory://")
    scope = Scope("acme", "ana", "s1")
    rows = _ndjson([{"i": i} for i in range(10)])
    artifact_id = first.put(scope, rows, media_type=NDJSON).artifact_id
    page = read.query(first, scope, artifact_id, limit=3)
    try:
        theirs = second.put(scope, rows, media_type=NDJSON).artifact_id
        with pytest.raises(InvalidCursor) as caught:
            read.query(second, scope, theirs, limit=3, cursor=page["next_cursor"])
        assert caught.value.reason == "unknown_key"
        assert "query again without a cursor" in str(caught.value)
    finally:
        first.close()
        second.close()


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


def test_the_per_artifact_lock_table_is_bounded() -> None:
    vault, scope = _memory(), Scope("acme", "ana", "s1")
    for k in range(200):
        artifact_id = vault.put(scope, _ndjson([{"k": k}]), media_type=NDJSON).artifact_id
        read.query(vault, scope, artifact_id)
    # Locks are striped: a fixed set, however many artifacts were derived or viewed.
    assert len(_engine(vault)._stripes) == _Engine.STRIPES


def test_a_temp_dir_with_a_quote_in_its_path_does_not_break_record_queries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    quoted = tmp_path / "it's"
    quoted.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(quoted))
    vault, scope = _memory(), Scope("acme", "ana", "s1")
    try:
        artifact_id = vault.put(scope, _ndjson([{"a": 1}]), media_type=NDJSON).artifact_id
        # Today: UnsupportedRead "could not be read as JSON Lines (ParserException)": the path is not escaped.
        assert read.query(vault, scope, artifact_id)["records"] == [{"index": 0, "record": {"a": 1}}]
    finally:
        vault.close()


def test_cli_order_keeps_a_field_name_containing_a_colon(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "store")
    path = tmp_path / "rows.ndjson"
    path.write_bytes(_ndjson([{"a": 1, "a:b": 2}, {"a": 2, "a:b": 1}]))
    artifact_id = cli.put(path, "--media-type", NDJSON)["artifact_id"]
    answer = cli.json("query", artifact_id, "--order", "a:b")  # today: ordered by "a"
    assert [r["index"] for r in answer["records"]] == [1, 0]


# =====================================================================================================
# DEFENDED ATTACKS (these pass; keep them as regression tests)
# =====================================================================================================


def test_cross_tenant_identical_bytes_share_nothing_and_look_absent(vault: Vault) -> None:
    acme, other = Scope("acme", "ana", "s1"), Scope("globex", "gus", "s9")
    data = _ndjson([{"secret": CANARY, "n": i} for i in range(5)])
    mine = vault.put(acme, data, media_type=NDJSON).artifact_id
    read.query(vault, acme, mine)
    theirs = vault.put(other, data, media_type=NDJSON).artifact_id
    assert derivation_of(vault, other, theirs) is None  # the acme derivative is not visible to globex
    absent = "art_" + "a" * 26
    messages = []
    for artifact_id in (mine, absent):
        with pytest.raises(NotFound) as caught:
            read.query(vault, other, artifact_id)
        messages.append(str(caught.value).replace(artifact_id, "ID"))
    assert messages[0] == messages[1]
    assert read.query(vault, other, theirs)["total_records"] == 5
    assert read.derive(vault, other, theirs).derived_hash == read.derive(vault, acme, mine).derived_hash
    assert derivation_of(vault, other, theirs).key.namespace != derivation_of(vault, acme, mine).key.namespace  # type: ignore[union-attr]


def test_cursor_replay_across_scope_artifact_and_selection_is_refused(vault: Vault) -> None:
    ana, ana2, bo = Scope("acme", "ana", "s1"), Scope("acme", "ana", "s2"), Scope("acme", "bo", "s1")
    data = _ndjson([{"n": i} for i in range(20)])
    first = vault.put(ana, data, media_type=NDJSON).artifact_id
    twin = vault.put(ana, data, media_type=NDJSON).artifact_id  # same bytes, same scope, another id
    page = read.query(vault, ana, first, limit=5)
    token = page["next_cursor"]
    with pytest.raises(InvalidCursor) as caught:
        read.query(vault, ana, twin, limit=5, cursor=token)
    assert caught.value.reason == "artifact"
    with pytest.raises(InvalidCursor) as caught:
        read.query(vault, ana, first, limit=5, cursor=token, where={"field": "n", "op": "gte", "value": 0})
    assert caught.value.reason == "query"
    for stranger in (ana2, bo):  # the artifact is not theirs: NotFound before the cursor is even looked at
        with pytest.raises(NotFound):
            read.query(vault, stranger, first, limit=5, cursor=token)
        shared = vault.put(stranger, data, media_type=NDJSON).artifact_id
        with pytest.raises(InvalidCursor):
            read.query(vault, stranger, shared, limit=5, cursor=token)


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


def test_sealed_artifacts_are_refused_by_every_model_read_even_with_a_model_twin(vault: Vault) -> None:
    scope = Scope("acme", "ana", "s1")
    data = _ndjson([{"secret": CANARY}])
    public = vault.put(scope, data, media_type=NDJSON).artifact_id
    read.query(vault, scope, public)  # the shared derivative exists
    sealed = vault.put(scope, data, media_type=NDJSON, disclosure="sealed").artifact_id
    calls: list[Callable[[], object]] = [
        lambda: read.query(vault, scope, sealed),
        lambda: read.derive(vault, scope, sealed),
        lambda: read.window(vault, scope, sealed),
        lambda: read.grep(vault, scope, sealed, "CANARY"),
    ]
    for call in calls:
        with pytest.raises(SealedArtifact) as caught:
            call()
        assert CANARY not in str(caught.value)
    box = Toolbox(vault)
    for name, arguments in (
        ("query_artifact", {"artifact_id": sealed}),
        ("read_artifact", {"artifact_id": sealed, "pattern": "CANARY"}),
        ("describe_artifact", {"artifact_id": sealed}),
        ("load_artifacts", {"artifact_ids": [sealed]}),
    ):
        observation = box.call_sync(name, arguments, scope=scope)
        assert CANARY not in observation.content
        if name == "describe_artifact":  # metadata only: no record schema of a sealed artifact
            assert "records" not in json.loads(observation.content)
        else:
            assert "sealed" in observation.content


def test_offloaded_records_of_a_sealed_input_cannot_be_queried_by_the_model(vault: Vault) -> None:
    scope = Scope("acme", "ana", "s1")
    secret = vault.put(scope, f"{CANARY}\n".encode(), media_type="text/plain", disclosure="sealed").artifact_id
    box = Toolbox(vault)

    @box.tool
    def expand(doc: Ref) -> list[dict[str, Any]]:
        """Expand a document into records."""
        return [{"line": doc.text(), "n": i} for i in range(5_000)]

    shown = json.loads(box.call_sync("expand", {"doc": secret}, scope=scope).content)["offloaded"]
    assert shown["disclosure"] == "sealed"
    assert CANARY not in json.dumps(shown)
    refused = box.call_sync("query_artifact", {"artifact_id": shown["artifact_id"]}, scope=scope)
    assert refused.is_error
    assert "sealed" in refused.content
    assert CANARY not in refused.content
    assert derivation_of(vault, scope, shown["artifact_id"]) is None  # nothing was derived from it


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


def test_two_vault_instances_deriving_at_once_record_one_derivative(tmp_path: Path) -> None:
    root, scope = tmp_path / "store", Scope("acme", "ana", "s1")
    with Vault.open(root) as setup:
        artifact_id = setup.put(
            scope, _ndjson([{"i": i, "s": "x" * (i % 50)} for i in range(50_000)]), media_type=NDJSON
        ).artifact_id
    vaults = [Vault.open(root) for _ in range(3)]
    hashes: list[object] = []
    barrier = threading.Barrier(len(vaults))

    def derive(vault: Vault) -> None:
        barrier.wait()
        try:
            hashes.append(read.derive(vault, scope, artifact_id).derived_hash)
        except BaseException as exc:
            hashes.append(exc)

    threads = [threading.Thread(target=derive, args=(v,)) for v in vaults]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert len(set(hashes)) == 1, hashes
        assert isinstance(hashes[0], str), hashes
        assert len(list(vaults[0].catalog.derivations())) == 1
        report = vaults[0].verify()
        assert report.problems == []
        assert report.blobs_checked == 2
        vaults[0].gc(grace=0)
        assert len(list(vaults[0].blobs.keys())) == 2  # the losers' copies left nothing behind
    finally:
        for vault in vaults:
            vault.close()


def test_derivative_of_a_deleted_but_shared_blob_lives_until_the_last_source_goes(vault: Vault) -> None:
    ana, bo = Scope("acme", "ana", "s1"), Scope("acme", "bo", "s2")
    data = _ndjson([{"n": i} for i in range(10)])
    first = vault.put(ana, data, media_type=NDJSON).artifact_id
    second = vault.put(bo, data, media_type=NDJSON).artifact_id
    read.query(vault, ana, first)
    vault.delete(ana, first)
    assert vault.gc(grace=0).blobs_removed == 0
    assert read.query(vault, bo, second)["total_records"] == 10
    assert vault.verify().problems == []
    vault.delete(bo, second)
    assert vault.gc(grace=0).blobs_removed == 2
    assert list(vault.catalog.derivations()) == []
    assert list(vault.blobs.keys()) == []


def test_a_zero_time_budget_never_claims_absence(vault: Vault) -> None:
    scope = Scope("acme", "ana", "s1")
    artifact_id = vault.put(scope, _ndjson([{"n": i} for i in range(100)]), media_type=NDJSON).artifact_id
    for order in (None, [{"field": "n", "direction": "desc"}]):
        answer = read.query(
            vault, scope, artifact_id, where={"field": "n", "op": "eq", "value": 99}, order=order, max_seconds=0
        )
        assert answer["records"] == []
        assert answer["scan_complete"] is False
        assert answer["status"] == "incomplete"
        assert answer["omissions"], answer


def test_byte_windows_never_split_utf8_and_walk_back_to_the_whole_text(vault: Vault) -> None:
    scope = Scope("acme", "ana", "s1")
    data = "é€𝄞a\n".encode() * 7 + b"\xff\xc3" + "€".encode()
    artifact_id = vault.put(scope, data, media_type="text/plain").artifact_id
    expected = data.decode("utf-8", "surrogateescape").replace("\udcff", "\ufffd").replace("\udcc3", "\ufffd")
    for length in range(1, 9):
        for max_chars in (1, 2, 5):
            window = read.window(vault, scope, artifact_id, byte_range=[0, length], max_chars=max_chars)
            texts = [window["text"]]
            while window["next"] is not None:
                window = read.window(vault, scope, artifact_id, max_chars=max_chars, **window["next"])
                texts.append(window["text"])
            assert "".join(texts) == expected


def test_regex_grep_of_an_overlong_line_is_honest_about_what_it_did_not_search(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    from refvault.read import windows

    monkeypatch.setattr(windows, "LONG_LINE_CHARS", 64)
    monkeypatch.setattr(windows, "_BLOCK", 16)
    scope = Scope("acme", "ana", "s1")
    artifact_id = vault.put(scope, b"short\n" + b"x" * 500 + b"NEEDLE\nend\n", media_type="text/plain").artifact_id
    regex = read.grep(vault, scope, artifact_id, "NEE+DLE", regex=True)
    assert regex["matches"] == []
    assert regex["scan_complete"] is False
    assert regex["partial_lines"] == 1
    literal = read.grep(vault, scope, artifact_id, "NEEDLE")
    assert [m["line"] for m in literal["matches"]] == [1]
    assert literal["scan_complete"] is True


def test_error_and_audit_records_carry_ids_not_content(vault: Vault) -> None:
    scope = Scope("acme", "ana", "s1")
    records: list[Any] = []
    vault.add_audit_sink(records.append)
    artifact_id = vault.put(scope, _ndjson([{"k": CANARY}]), media_type=NDJSON).artifact_id
    read.query(vault, scope, artifact_id, where={"field": "k", "op": "contains", "value": "CANARY"})
    with pytest.raises(InvalidQuery) as caught:
        read.query(vault, scope, artifact_id, where={"field": "k", "op": "gt", "value": 3})
    assert CANARY not in str(caught.value)
    assert any(r.action == "query" for r in records)
    assert CANARY not in repr(records)
