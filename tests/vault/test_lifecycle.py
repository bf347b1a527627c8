"""A closed vault or catalog refuses work; a read racing delete and gc reports absence, not damage."""

from __future__ import annotations

from pathlib import Path

import pytest

from refvault import Scope, Vault
from refvault.catalog.sql import SqlCatalog
from refvault.errors import (
    NotFound,
    StorageError,
)
from tests.conftest import payload

SCOPE = Scope("acme", "ana", "s1")


def test_a_closed_vault_refuses_every_call(make_vault: object) -> None:
    vault = make_vault()  # type: ignore[operator]
    d = vault.put(SCOPE, payload(100_000))
    vault.close()
    vault.close()  # idempotent
    for call in (
        lambda: vault.put(SCOPE, b"x"),
        lambda: vault.read_bytes(SCOPE, d.artifact_id),
        lambda: vault.describe(SCOPE, d.artifact_id),
        lambda: vault.list(SCOPE),
        lambda: vault.stream(SCOPE, d.artifact_id),
        lambda: vault.delete(SCOPE, d.artifact_id),
        vault.verify,
        vault.gc,
    ):
        with pytest.raises(StorageError, match="closed"):
            call()


def test_a_read_racing_delete_and_gc_reports_absence_not_damage(vault: Vault) -> None:
    d = vault.put(SCOPE, payload(100_000))
    manifest = vault.catalog.find(SCOPE, d.artifact_id)
    assert manifest is not None
    real_find = vault.catalog.find
    calls = 0

    def find_then_collect(scope: Scope, artifact_id: str) -> object:
        nonlocal calls
        calls += 1
        found = real_find(scope, artifact_id)
        if calls == 1:  # the artifact is deleted and collected right after the lookup
            vault.catalog.remove([(SCOPE, d.artifact_id)], [], [])
            vault.gc(grace=0)
        return found

    vault.catalog.find = find_then_collect  # type: ignore[method-assign]
    with pytest.raises(NotFound):
        vault.read_bytes(SCOPE, d.artifact_id)


def test_a_closed_catalog_refuses_work(tmp_path: Path) -> None:
    catalog = SqlCatalog.for_file(tmp_path / "catalog.db")
    catalog.close()
    with pytest.raises(StorageError, match="closed"):
        catalog.find(SCOPE, "art_" + "a" * 26)
