"""Record-query cursors: pages concatenate to the unpaged answer, the key ring is shared through the catalog, and a
cursor is refused outside its catalog, scope, artifact and selection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from refvault import Scope, Vault, read
from refvault.blobs.filesystem import FilesystemBlobStore
from refvault.catalog.sql import SqlCatalog
from refvault.errors import InvalidCursor, NotFound
from tests.read.record_helpers import NDJSON, _memory, _ndjson


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


# -- 6. cursor keys of a vault built without a store location ------------------------------------------
# A vault opened by path shares its key ring through cursor-keys.json (tests/read/test_records.py). A vault built
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
