"""Derived record copies: concurrent queries and derivations, close mid-query, delete and gc, scratch directories and
the per-artifact lock table.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import pytest

from refvault import RefvaultError, Scope, Vault, read
from refvault.read.records import _Engine, _engine
from tests.read.record_helpers import CANARY, NDJSON, _memory, _ndjson

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
