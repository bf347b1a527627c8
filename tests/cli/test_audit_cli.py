"""``refvault audit verify|head|show`` and ``refvault disclosures ID`` on an embedded store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result

from refvault.catalog.schema import audit
from refvault.catalog.sql import SqlCatalog
from refvault.cli import main
from refvault.model import Scope
from refvault.vault.core import Vault

SCOPE = Scope("acme", "ana", "s1")
SCOPE_ARGS = ("--tenant", "acme", "--user", "ana", "--session", "s1")


class Cli:
    def __init__(self, store: Path) -> None:
        self.store = store
        self.runner = CliRunner()

    def __call__(self, *args: str) -> Result:
        return self.runner.invoke(main, ["--store", str(self.store), *args], catch_exceptions=False)

    def json(self, *args: str, code: int = 0) -> Any:
        result = self(*args, "--json")
        assert result.exit_code == code, result.output
        return json.loads(result.stdout)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store with a few audited operations in tenant acme (and one in tenant zeta)."""
    location = tmp_path / "store"
    with Vault.open(location) as vault:
        first = vault.put(SCOPE, b"alpha\nbeta\n", media_type="text/plain")
        vault.read_bytes(SCOPE, first.artifact_id)
        vault.read_range(SCOPE, first.artifact_id, 0, 5, recipient="model:gpt")
        vault.describe(SCOPE, first.artifact_id)
        vault.put(Scope("zeta", "zed", "s1"), b"z")
    return location


@pytest.fixture
def cli(store: Path) -> Cli:
    return Cli(store)


def artifact_of(store: Path) -> str:
    with Vault.open(store) as vault:
        return vault.list(SCOPE)[0].artifact_id


def test_verify_passes_on_an_intact_store(cli: Cli) -> None:
    result = cli("audit", "verify")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "audit chain ok: 5 entries"
    report = cli.json("audit", "verify", "--tenant", "acme")
    assert report["ok"] is True
    assert report["entries"] == 4
    assert report["kind"] is None


def test_verify_exits_1_naming_the_first_bad_entry(cli: Cli, store: Path) -> None:
    catalog = SqlCatalog.for_file(store / "catalog.db")
    with catalog._write() as conn, conn.begin():
        conn.execute(audit.update().where(audit.c.tenant == "acme", audit.c.seq == 2).values(bytes=1))
    catalog.close()
    result = cli("audit", "verify")
    assert result.exit_code == 1
    assert "audit chain of tenant 'acme' broken at entry 2: edited" in result.stdout
    report = cli.json("audit", "verify", code=1)
    assert (report["ok"], report["tenant"], report["seq"], report["kind"]) == (False, "acme", 2, "edited")


def test_head_prints_seq_colon_hash_and_an_anchored_head_detects_a_cut_tail(cli: Cli, store: Path) -> None:
    head = cli("audit", "head", "--tenant", "acme").stdout.strip()
    seq, _, digest = head.partition(":")
    assert seq == "4"
    assert len(digest) == 64
    assert cli.json("audit", "head", "--tenant", "acme")["head"] == head
    assert cli("audit", "verify", "--tenant", "acme", "--head", head).exit_code == 0
    catalog = SqlCatalog.for_file(store / "catalog.db")
    with catalog._write() as conn, conn.begin():
        third = conn.execute(sa.select(audit.c.hash).where(audit.c.tenant == "acme", audit.c.seq == 3)).scalar()
        conn.execute(audit.delete().where(audit.c.tenant == "acme", audit.c.seq == 4))
        conn.execute(sa.text("UPDATE refvault_audit_heads SET seq = 3, hash = :h WHERE tenant = 'acme'"), {"h": third})
    catalog.close()
    assert cli("audit", "verify", "--tenant", "acme").exit_code == 0  # consistent: only the anchor tells
    result = cli("audit", "verify", "--tenant", "acme", "--head", head)
    assert result.exit_code == 1
    assert "broken at entry 4: cut-tail" in result.stdout


def test_a_head_without_a_tenant_or_malformed_is_bad_input(cli: Cli) -> None:
    assert cli("audit", "verify", "--head", "1:" + "a" * 64).exit_code == 2
    assert cli("audit", "verify", "--tenant", "acme", "--head", "nope").exit_code == 2


def test_show_lists_entries_in_chain_order_never_content(cli: Cli, store: Path) -> None:
    entries = cli.json("audit", "show", "--tenant", "acme")
    assert [e["seq"] for e in entries] == [1, 2, 3, 4]
    assert [e["action"] for e in entries] == ["put", "read", "read", "describe"]
    assert entries[2]["recipient"] == "model:gpt"
    assert entries[2]["selection"] == "bytes 0-5"
    assert "alpha" not in json.dumps(entries)
    assert [e["seq"] for e in cli.json("audit", "show", "--tenant", "acme", "--after", "1", "--limit", "2")] == [2, 3]
    only = cli.json("audit", "show", "--tenant", "acme", "--artifact", artifact_of(store))
    assert len(only) == 4
    text = cli("audit", "show", "--tenant", "acme").stdout
    assert "describe" in text
    assert "model:gpt" in text


def test_disclosures_lists_what_left_with_excerpt_hashes(cli: Cli, store: Path) -> None:
    import hashlib

    artifact_id = artifact_of(store)
    rows = cli.json("disclosures", artifact_id, *SCOPE_ARGS)
    assert [(r["recipient"], r["bytes"]) for r in rows] == [("user", 11), ("model:gpt", 5)]
    assert rows[1]["excerpt_hash"] == hashlib.sha256(b"alpha").hexdigest()
    assert rows[0]["excerpt_hash"] == hashlib.sha256(b"alpha\nbeta\n").hexdigest()
    assert "model:gpt" in cli("disclosures", artifact_id, *SCOPE_ARGS).stdout


def test_disclosures_of_another_scopes_artifact_are_not_found(cli: Cli, store: Path) -> None:
    result = cli("disclosures", artifact_of(store), "--tenant", "acme", "--user", "bob", "--session", "s1")
    assert result.exit_code == 1
    assert "not found in scope acme/bob/s1" in result.output
