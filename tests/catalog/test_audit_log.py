"""The audit log's chain (refvault.catalog.audit_log) and each catalog's append: seq 1..n per tenant, one chain.

The chain rules are checked on plain entries; the appends on the memory catalog, SQLite and PostgreSQL.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from refvault.catalog.audit_log import (
    GENESIS,
    AuditAppender,
    AuditEntry,
    canonical,
    chain_hash,
    parse_anchor,
    seal_all,
    verify_chain,
)
from refvault.catalog.base import Catalog
from refvault.catalog.memory import MemoryCatalog
from refvault.catalog.sql import SqlCatalog
from refvault.errors import InvalidArgument, StorageError
from tests.servers import fresh_catalog


def draft(n: int, tenant: str = "acme", action: str = "read") -> AuditEntry:
    return AuditEntry(
        seq=0,
        at_us=1_700_000_000_000_000 + n,
        tenant=tenant,
        user="ana",
        session="s1",
        action=action,
        outcome="ok",
        artifact_id="art_" + "a" * 26,
        selection=f"bytes 0-{n}",
        bytes=n,
        excerpt_hash=hashlib.sha256(str(n).encode()).hexdigest(),
        recipient="user",
        purpose="default",
    )


def chain(n: int) -> list[AuditEntry]:
    return seal_all([draft(i) for i in range(1, n + 1)], (0, GENESIS))


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Catalog]:
    opened: Catalog
    if request.param == "memory":
        opened = MemoryCatalog()
    elif request.param == "sqlite":
        opened = SqlCatalog.for_file(tmp_path / "catalog.db")
    else:
        opened = SqlCatalog(fresh_catalog(request.getfixturevalue("postgres_url")))
    yield opened
    opened.close()


# -- the chain -------------------------------------------------------------------------


def test_the_first_entry_chains_from_32_zero_bytes_and_each_hash_covers_prev_and_canonical() -> None:
    first, second = chain(2)
    assert first.seq == 1
    assert first.prev_hash == GENESIS == "00" * 32
    assert first.hash == hashlib.sha256(bytes(32) + canonical(first)).hexdigest()
    assert second.prev_hash == first.hash
    assert second.hash == hashlib.sha256(bytes.fromhex(first.hash) + canonical(second)).hexdigest()


def test_the_canonical_form_covers_every_field_but_the_hash_in_a_fixed_order() -> None:
    entry = chain(1)[0]
    assert canonical(entry._replace(hash="f" * 64)) == canonical(entry)
    for name, value in [("seq", 9), ("outcome", "NotFound"), ("bytes", 7), ("prev_hash", "1" * 64), ("user", "bo")]:
        assert canonical(entry._replace(**{name: value})) != canonical(entry), name
    assert canonical(entry).startswith(b'[1,1700000000000001,"acme","ana","s1","read","ok",')
    odd = entry._replace(selection='bytes "0"-\\4 \u00e9\u2028\n', recipient='model:a"b')
    assert canonical(odd) == json.dumps(list(odd[:-1]), ensure_ascii=False, separators=(",", ":")).encode()


def test_an_intact_chain_verifies_and_reports_its_head() -> None:
    entries = chain(50)
    report = verify_chain("acme", entries, head=(50, entries[-1].hash))
    assert report.ok
    assert report.entries == 50
    assert (report.head_seq, report.head_hash) == (50, entries[-1].hash)
    assert verify_chain("acme", []).ok


@pytest.mark.parametrize("field", ["outcome", "bytes", "selection", "hash", "prev_hash", "at_us"])
def test_an_edited_entry_is_named(field: str) -> None:
    entries = chain(10)
    value = {"outcome": "ok2", "bytes": 99, "selection": "x", "hash": "0" * 64, "prev_hash": "e" * 64, "at_us": 1}
    entries[4] = entries[4]._replace(**{field: value[field]})
    report = verify_chain("acme", entries)
    assert not report.ok
    assert (report.seq, report.kind) == (5, "edited")
    assert "entry 5: edited" in report.detail


def test_an_entry_rewritten_with_a_fresh_hash_is_named_not_its_successor() -> None:
    entries = chain(10)
    entries[4] = entries[4]._replace(outcome="NotFound", hash="")
    entries[4] = entries[4]._replace(hash=chain_hash(entries[4]))
    report = verify_chain("acme", entries)
    assert (report.ok, report.seq, report.kind) == (False, 5, "edited")


def test_a_deleted_entry_is_named_by_its_seq() -> None:
    entries = chain(10)
    del entries[6]
    report = verify_chain("acme", entries)
    assert (report.ok, report.seq, report.kind) == (False, 7, "deleted")


def test_a_deleted_entry_with_the_rest_renumbered_is_still_a_deletion() -> None:
    entries = chain(10)
    del entries[6]
    entries[6:] = [e._replace(seq=e.seq - 1) for e in entries[6:]]
    report = verify_chain("acme", entries)
    assert (report.ok, report.seq, report.kind) == (False, 7, "deleted")


def test_an_inserted_entry_is_named_whether_or_not_it_chains() -> None:
    entries = chain(10)
    forged = seal_all([draft(99)], (4, entries[3].hash))[0]  # chained properly after entry 4
    shifted = entries[:4] + [forged] + [e._replace(seq=e.seq + 1) for e in entries[4:]]
    report = verify_chain("acme", shifted)
    assert (report.ok, report.seq, report.kind) == (False, 5, "inserted")
    loose = forged._replace(prev_hash="ab" * 32)
    report = verify_chain("acme", entries[:4] + [loose] + [e._replace(seq=e.seq + 1) for e in entries[4:]])
    assert (report.ok, report.seq, report.kind) == (False, 5, "inserted")


def test_reordered_entries_are_named() -> None:
    entries = chain(10)
    swapped = [*entries[:4], entries[5]._replace(seq=5), entries[4]._replace(seq=6), *entries[6:]]
    report = verify_chain("acme", swapped)
    assert (report.ok, report.seq, report.kind) == (False, 5, "reordered")


def test_a_cut_tail_is_detected_only_against_a_head_kept_elsewhere() -> None:
    entries = chain(10)
    anchored = (10, entries[-1].hash)
    cut = entries[:7]
    assert verify_chain("acme", cut, head=(7, cut[-1].hash)).ok  # the head row moved back too: undetectable alone
    report = verify_chain("acme", cut, head=(7, cut[-1].hash), anchor=anchored)
    assert (report.ok, report.seq, report.kind) == (False, 8, "cut-tail")
    report = verify_chain("acme", cut, head=(7, cut[-1].hash), anchor=(None, entries[-1].hash))
    assert (report.ok, report.seq, report.kind) == (False, 8, "cut-tail")
    report = verify_chain("acme", cut, head=(10, entries[-1].hash))  # the head row left alone
    assert (report.ok, report.seq, report.kind) == (False, 8, "cut-tail")
    assert verify_chain("acme", entries, anchor=(7, entries[6].hash)).ok  # growth after the anchor is fine


def test_a_rewritten_chain_is_a_fork_from_the_anchored_head() -> None:
    entries = chain(10)
    other = seal_all([draft(i + 100) for i in range(1, 11)], (0, GENESIS))
    report = verify_chain("acme", other, anchor=(10, entries[-1].hash))
    assert (report.ok, report.seq, report.kind) == (False, 10, "fork")


def test_an_anchor_is_seq_colon_hash_or_a_bare_hash() -> None:
    digest = "ab" * 32
    assert parse_anchor(f"12:{digest}") == (12, digest)
    assert parse_anchor(digest.upper()) == (None, digest)
    for bad in ["12:xyz", "x:" + digest, "", digest[:-1]]:
        with pytest.raises(InvalidArgument):
            parse_anchor(bad)


def test_verifying_is_fast_enough_for_a_hundred_thousand_entries_a_second() -> None:
    import time

    entries = chain(20_000)
    start = time.perf_counter()
    assert verify_chain("acme", entries).ok
    rate = len(entries) / (time.perf_counter() - start)
    assert rate > 100_000, f"{rate:,.0f} entries/s"


# -- the catalogs ----------------------------------------------------------------------


def test_appends_number_each_tenant_from_one_and_chain_them(catalog: Catalog) -> None:
    assert catalog.audit_head("acme") == (0, GENESIS)
    first = catalog.append_audit([draft(1), draft(2, tenant="zeta"), draft(3)])
    assert [(e.tenant, e.seq) for e in first] == [("acme", 1), ("acme", 2), ("zeta", 1)]
    more = catalog.append_audit([draft(4)])
    assert more[0].seq == 3
    assert more[0].prev_hash == first[1].hash
    stored = list(catalog.audit_entries("acme"))
    assert stored == [first[0], first[1], more[0]]
    assert catalog.audit_head("acme") == (3, more[0].hash)
    assert catalog.audit_tenants() == ["acme", "zeta"]
    assert verify_chain("acme", stored, head=catalog.audit_head("acme")).ok
    assert [e.seq for e in catalog.audit_entries("acme", after=1, upto=2)] == [2]
    assert list(catalog.audit_entries("acme", artifact_id="art_" + "b" * 26)) == []


def test_concurrent_appenders_in_threads_leave_one_unforked_chain(catalog: Catalog) -> None:
    def append(worker: int) -> None:
        for i in range(20):
            catalog.append_audit([draft(worker * 1000 + i), draft(worker * 1000 + i + 500)])

    threads = [threading.Thread(target=append, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stored = list(catalog.audit_entries("acme"))
    assert [e.seq for e in stored] == list(range(1, 161))
    assert verify_chain("acme", stored, head=catalog.audit_head("acme")).ok


def test_the_appender_batches_in_the_background_and_flush_waits_for_everything_queued() -> None:
    catalog = MemoryCatalog()
    calls: list[int] = []

    def append(entries: object) -> None:
        assert isinstance(entries, list)
        calls.append(len(entries))
        catalog.append_audit(entries)

    appender = AuditAppender(append)
    for i in range(500):
        appender.add(draft(i))
    appender.flush()
    assert sum(calls) == 500
    assert len(list(catalog.audit_entries("acme"))) == 500
    appender.close()
    with pytest.raises(StorageError):
        appender.add(draft(1))


def test_an_appender_that_cannot_write_fails_closed_without_echoing_the_error() -> None:
    def append(entries: object) -> None:
        raise RuntimeError("secret payload in a driver message")

    appender = AuditAppender(append)
    appender.add(draft(1))
    with pytest.raises(StorageError) as caught:
        appender.flush()
    assert "secret" not in str(caught.value)
    assert "RuntimeError" in str(caught.value)
    with pytest.raises(StorageError):
        appender.add(draft(2))
    appender.close()


def test_an_appender_in_a_forked_child_starts_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    catalog = MemoryCatalog()
    appender = AuditAppender(catalog.append_audit)
    appender.add(draft(1))
    appender.flush()
    parent = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: parent + 1)  # as a child after fork sees it
    appender.add(draft(2))
    appender.flush()  # the parent's thread is not the child's: a new one writes
    assert [e.seq for e in catalog.audit_entries("acme")] == [1, 2]
    appender.close()
