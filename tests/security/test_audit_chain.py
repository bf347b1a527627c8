"""The persistent audit log as an attacker with database access meets it, on SQLite and PostgreSQL.

* 1,000 mixed operations leave chains that verify, numbered 1..n per tenant, on every backend.
* Edits, deletions, insertions, reorderings done with raw SQL are each named at the right seq; a tail cut
  together with the head row is caught only against a head anchored outside the store.
* Two processes appending to one PostgreSQL at once leave one chain that verifies, with no duplicate seq.
* A planted canary (in content, a filename, a grep pattern, a query, an error path) never reaches the
  audit tables.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from refvault import Scope, Vault
from refvault import read as rv_read
from refvault.catalog.audit_log import AuditEntry, seal
from refvault.catalog.schema import audit, audit_heads
from refvault.catalog.sql import SqlCatalog
from refvault.errors import NotFound, RefvaultError
from tests.servers import fresh_catalog, fresh_database

SCOPE = Scope("acme", "ana", "s1")
OTHER = Scope("acme", "bob", "s1")
ELSEWHERE = Scope("zeta", "zed", "s9")
CANARY = "CANARY-7f3a9c1e"


@pytest.fixture(params=["sqlite", "postgres"])
def sql_vault(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Vault]:
    if request.param == "sqlite":
        opened = Vault.open(tmp_path / "store")
    else:
        opened = Vault.open(fresh_catalog(request.getfixturevalue("postgres_url")), blobs=str(tmp_path / "blobs"))
    yield opened
    opened.close()


def execute(vault: Vault, statement: Any, params: dict[str, Any] | None = None) -> None:
    catalog = vault.catalog
    assert isinstance(catalog, SqlCatalog)
    with catalog._write() as conn, conn.begin():
        conn.execute(statement, params or {})


def rows(vault: Vault, tenant: str = "acme") -> list[AuditEntry]:
    vault.flush_audit()
    return list(vault.catalog.audit_entries(tenant))


def busy(vault: Vault, n: int) -> None:
    """``n`` operations of mixed kinds and outcomes."""
    ids = []
    for i in range(n):
        kind = i % 10
        if kind in (0, 5) or not ids:
            ids.append(vault.put(SCOPE, f"line {i}\nmore\n".encode(), media_type="text/plain").artifact_id)
        elif kind == 1:
            vault.read_bytes(SCOPE, ids[-1])
        elif kind == 2:
            vault.describe(SCOPE, ids[i % len(ids)])
        elif kind == 3:
            vault.read_range(SCOPE, ids[-1], 2, 3)
        elif kind == 4:
            with pytest.raises(NotFound):
                vault.read_bytes(OTHER, ids[-1])
        elif kind == 6:
            vault.list(SCOPE)
        elif kind == 7:
            rv_read.window(vault, SCOPE, ids[-1], lines=(0, 1))
        elif kind == 8:
            vault.put(ELSEWHERE, f"z {i}".encode())
        else:
            vault.delete(SCOPE, ids.pop(0))


def tamper_setup(vault: Vault) -> list[AuditEntry]:
    busy(vault, 30)
    entries = rows(vault)
    assert len(entries) >= 20
    assert vault.verify_audit("acme").ok
    return entries


def test_a_thousand_mixed_operations_leave_chains_that_verify(vault: Vault) -> None:
    busy(vault, 1000)
    report = vault.verify_audit()
    assert report.ok, report.detail
    acme, zeta = rows(vault, "acme"), rows(vault, "zeta")
    assert report.entries == len(acme) + len(zeta) >= 1000
    assert [e.seq for e in acme] == list(range(1, len(acme) + 1))
    assert [e.seq for e in zeta] == list(range(1, len(zeta) + 1))
    actions = {e.action for e in acme}
    assert {"put", "read", "describe", "list", "window", "delete"} <= actions
    assert any(e.outcome == "NotFound" and e.user == "bob" for e in acme)  # a denial is on record
    assert vault.audit_head("acme") == (acme[-1].seq, acme[-1].hash)


def test_an_edited_row_is_named(sql_vault: Vault) -> None:
    tamper_setup(sql_vault)
    execute(sql_vault, audit.update().where(audit.c.tenant == "acme", audit.c.seq == 5).values(outcome="Forbidden"))
    report = sql_vault.verify_audit("acme")
    assert (report.ok, report.seq, report.kind) == (False, 5, "edited")


def test_a_deleted_row_is_named(sql_vault: Vault) -> None:
    tamper_setup(sql_vault)
    execute(sql_vault, audit.delete().where(audit.c.tenant == "acme", audit.c.seq == 6))
    report = sql_vault.verify_audit()
    assert (report.ok, report.tenant, report.seq, report.kind) == (False, "acme", 6, "deleted")


def _shift_up(vault: Vault, start: int) -> None:
    """Make room at ``start``: every later seq + 1 (through negatives, so no primary key clashes on the way)."""
    execute(vault, sa.text("UPDATE refvault_audit SET seq = -seq WHERE tenant = 'acme' AND seq >= :s"), {"s": start})
    execute(vault, sa.text("UPDATE refvault_audit SET seq = 1 - seq WHERE tenant = 'acme' AND seq < 0"))
    execute(vault, sa.text("UPDATE refvault_audit_heads SET seq = seq + 1 WHERE tenant = 'acme'"))


def test_an_inserted_row_is_named_even_when_it_chains_properly(sql_vault: Vault) -> None:
    entries = tamper_setup(sql_vault)
    before = entries[3]
    forged = seal(
        AuditEntry(seq=0, at_us=before.at_us + 1, tenant="acme", user="ana", session="s1", action="read", outcome="ok"),
        5,
        before.hash,
    )
    _shift_up(sql_vault, 5)
    row = forged.as_dict()
    row["user_name"] = row.pop("user")
    execute(sql_vault, audit.insert().values(**row))
    report = sql_vault.verify_audit("acme")
    assert (report.ok, report.seq, report.kind) == (False, 5, "inserted")


def test_reordered_rows_are_named(sql_vault: Vault) -> None:
    tamper_setup(sql_vault)
    execute(sql_vault, sa.text("UPDATE refvault_audit SET seq = -1 WHERE tenant = 'acme' AND seq = 7"))
    execute(sql_vault, sa.text("UPDATE refvault_audit SET seq = 7 WHERE tenant = 'acme' AND seq = 8"))
    execute(sql_vault, sa.text("UPDATE refvault_audit SET seq = 8 WHERE tenant = 'acme' AND seq = -1"))
    report = sql_vault.verify_audit("acme")
    assert (report.ok, report.seq, report.kind) == (False, 7, "reordered")


def test_a_cut_tail_is_caught_against_an_anchored_head(sql_vault: Vault) -> None:
    entries = tamper_setup(sql_vault)
    seq, digest = sql_vault.audit_head("acme")
    anchored = f"{seq}:{digest}"
    keep = entries[len(entries) - 4]
    execute(sql_vault, audit.delete().where(audit.c.tenant == "acme", audit.c.seq > keep.seq))
    report = sql_vault.verify_audit("acme")  # the head row still says more: caught without an anchor
    assert (report.ok, report.seq, report.kind) == (False, keep.seq + 1, "cut-tail")
    execute(
        sql_vault,
        audit_heads.update().where(audit_heads.c.tenant == "acme").values(seq=keep.seq, hash=keep.hash),
    )
    assert sql_vault.verify_audit("acme").ok  # a consistent cut: only an anchor outside the store tells
    report = sql_vault.verify_audit("acme", head=anchored)
    assert (report.ok, report.seq, report.kind) == (False, keep.seq + 1, "cut-tail")


def test_a_head_row_moved_back_or_deleted_does_not_hide_the_entries_past_it(sql_vault: Vault) -> None:
    entries = tamper_setup(sql_vault)
    keep = entries[4]
    execute(
        sql_vault, audit.update().where(audit.c.tenant == "acme", audit.c.seq == keep.seq + 3).values(user_name="eve")
    )
    execute(
        sql_vault,
        audit_heads.update().where(audit_heads.c.tenant == "acme").values(seq=keep.seq, hash=keep.hash),
    )
    report = sql_vault.verify_audit("acme")  # the edit past the head row is still checked
    assert (report.ok, report.seq, report.kind) == (False, keep.seq + 3, "edited")
    execute(
        sql_vault, audit.update().where(audit.c.tenant == "acme", audit.c.seq == keep.seq + 3).values(user_name="ana")
    )
    report = sql_vault.verify_audit("acme")  # every entry chains, but the head row no longer covers them
    assert (report.ok, report.seq, report.kind) == (False, keep.seq + 1, "head")
    execute(sql_vault, audit_heads.delete().where(audit_heads.c.tenant == "acme"))
    report = sql_vault.verify_audit()
    assert (report.ok, report.tenant, report.seq, report.kind) == (False, "acme", 1, "head")


def test_verify_names_the_tampered_tenant_and_leaves_the_others_alone(sql_vault: Vault) -> None:
    tamper_setup(sql_vault)
    execute(sql_vault, audit.update().where(audit.c.tenant == "zeta", audit.c.seq == 1).values(bytes=12))
    assert sql_vault.verify_audit("acme").ok
    report = sql_vault.verify_audit()
    assert (report.ok, report.tenant, report.seq, report.kind) == (False, "zeta", 1, "edited")


CHILD = """
import sys
from refvault import Scope, Vault
vault = Vault.open(sys.argv[1], blobs=sys.argv[2])
scope = Scope("acme", "ana", sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()
for i in range(60):
    d = vault.put(scope, b"x%d" % i)
    vault.read_bytes(scope, d.artifact_id)
    vault.describe(scope, d.artifact_id)
vault.close()
print("done", flush=True)
"""


def test_two_processes_appending_to_one_postgres_keep_one_chain(postgres_url: str, tmp_path: Path) -> None:
    database = fresh_database(postgres_url)
    Vault.open(database, blobs=str(tmp_path / "blobs")).close()  # migrate once, before the race
    children = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(CHILD), database, str(tmp_path / "blobs"), f"s{n}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    for child in children:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    for child in children:
        assert child.wait(timeout=300) == 0
    with Vault.open(database, blobs=str(tmp_path / "blobs")) as vault:
        entries = rows(vault)
        report = vault.verify_audit("acme")
    assert report.ok, report.detail
    assert [e.seq for e in entries] == list(range(1, 361))  # 2 x 60 x (put, read, describe): no gap, no duplicate
    assert {e.session for e in entries} == {"s0", "s1"}


def _dump(vault: Vault) -> str:
    vault.flush_audit()
    catalog = vault.catalog
    if isinstance(catalog, SqlCatalog):
        with catalog._read() as conn:
            found = [*conn.execute(sa.select(audit)).all(), *conn.execute(sa.select(audit_heads)).all()]
        return "\n".join(repr(tuple(row)) for row in found)
    return "\n".join(repr(e) for tenant in catalog.audit_tenants() for e in catalog.audit_entries(tenant))


def test_a_planted_canary_never_reaches_the_audit_log(vault: Vault) -> None:
    text = vault.put(
        SCOPE, f"alpha\n{CANARY} beta\ngamma\n".encode(), media_type="text/plain", filename=f"{CANARY}.txt"
    )
    records = vault.put(SCOPE, f'{{"k": "{CANARY}"}}\n{{"k": "b"}}\n'.encode(), media_type="application/x-ndjson")
    vault.read_bytes(SCOPE, text.artifact_id)
    vault.read_range(SCOPE, text.artifact_id, 6, 20)
    rv_read.window(vault, SCOPE, text.artifact_id, lines=(1, 2))
    rv_read.grep(vault, SCOPE, text.artifact_id, CANARY)
    rv_read.query(vault, SCOPE, records.artifact_id, where={"field": "k", "op": "eq", "value": CANARY})
    for attempt in (
        lambda: vault.put(SCOPE, b"x", tool_call_id=CANARY * 30),
        lambda: vault.put(SCOPE, b"x", filename=CANARY * 40),
        lambda: vault.read_bytes(SCOPE, f"art_{CANARY}"),
        lambda: rv_read.grep(vault, SCOPE, text.artifact_id, f"({CANARY}", regex=True),
    ):
        with pytest.raises((RefvaultError, ValueError)):
            attempt()
    dumped = _dump(vault)
    assert "window" in dumped
    assert "grep" in dumped
    assert "query" in dumped
    assert CANARY not in dumped
    assert CANARY.lower() not in dumped.lower()
    ledger = vault.disclosures(SCOPE, text.artifact_id)
    assert {d.action for d in ledger} >= {"read", "window", "grep"}
    assert CANARY not in repr(ledger)


def test_http_reads_are_audited_and_a_key_reads_its_own_view(tmp_path: Path) -> None:
    import hashlib

    from refvault import Client
    from tests.servers import serve

    with serve(tmp_path / "store") as live, Client(live.url, live.token) as client:
        owned = client.put(SCOPE, b"alpha\nbeta\n", media_type="text/plain")
        assert client.read_range(SCOPE, owned.artifact_id, 0, 5, recipient="model:gpt") == b"alpha"
        shown = rv_read.window(client, SCOPE, owned.artifact_id, lines=(1, 2))["text"]
        with pytest.raises(NotFound):
            client.describe(Scope("acme", "ana", "s2"), owned.artifact_id)
        entries = client.audit(SCOPE)
        assert [e.action for e in entries][:1] == ["put"]
        assert {"read", "window"} <= {e.action for e in entries}
        assert all(e.session == "s1" or e.artifact_id == owned.artifact_id for e in entries)
        ledger = client.disclosures(SCOPE, owned.artifact_id)
        assert ("model:gpt", hashlib.sha256(b"alpha").hexdigest()) in {(d.recipient, d.excerpt_hash) for d in ledger}
        assert any(
            d.action == "window" and d.excerpt_hash == hashlib.sha256(shown.encode()).hexdigest() for d in ledger
        )
        seq, digest = client.audit_head(SCOPE)
        assert seq >= len(entries)
        assert len(digest) == 64
        with pytest.raises(NotFound):
            client.disclosures(Scope("acme", "ana", "s2"), owned.artifact_id)
        with Client(live.url, live.foreign_token) as foreign:
            assert foreign.audit(Scope("globex", "gus", "s1")) == []
            with pytest.raises(NotFound):
                foreign.audit(Scope("globex", "gus", "s1"), artifact_id=owned.artifact_id)
    with Vault.open(tmp_path / "store") as vault:
        report = vault.verify_audit("acme", head=f"{seq}:{digest}")
        assert report.ok, report.detail
        s2 = [e for e in rows(vault) if e.session == "s2"]
        assert [(e.action, e.outcome) for e in s2] == [("describe", "NotFound")]  # the denial, on record


def test_a_put_and_a_delete_are_on_record_when_they_return(vault: Vault) -> None:
    """Their entries commit with the change (no flush of the batched reads needed to see them)."""
    stored = vault.put(SCOPE, b"kept")
    assert [(e.action, e.artifact_id) for e in vault.catalog.audit_entries("acme")] == [("put", stored.artifact_id)]
    vault.delete(SCOPE, stored.artifact_id)
    assert [e.action for e in vault.catalog.audit_entries("acme")] == ["put", "delete"]
    replayed = [vault.put(SCOPE, b"again", idempotency_key="k1") for _ in range(2)]
    assert replayed[0].artifact_id == replayed[1].artifact_id
    puts = [e for e in vault.catalog.audit_entries("acme") if e.action == "put"]
    assert [e.artifact_id for e in puts[1:]] == [replayed[0].artifact_id] * 2  # the replay is on record too
    assert vault.verify_audit("acme").ok
