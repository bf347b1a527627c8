"""A catalog opened read-only writes nothing: no migration, no key file, and the database refuses writes."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from refvault.catalog.engine import sqlite_read_only_uri
from refvault.catalog.sql import SqlCatalog
from refvault.errors import StorageError
from refvault.model import Scope
from refvault.vault import Vault


def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    with Vault.open(root) as vault:
        vault.put(Scope("t", "u", "s"), b"x")
    return root


def test_every_write_is_refused_by_the_catalog_and_by_sqlite(tmp_path: Path) -> None:
    catalog = SqlCatalog.for_file(store(tmp_path) / "catalog.db", read_only=True)
    try:
        with pytest.raises(StorageError, match="opened read-only"):
            catalog.swap_setting("anything", None, "value")
        with catalog._engine.connect() as conn, pytest.raises(sa.exc.OperationalError, match=r"readonly|read-only"):
            conn.exec_driver_sql("CREATE TABLE intruder (x INTEGER)")  # past the catalog's own check: SQLite says no
        assert catalog.get_setting("anything") is None
    finally:
        catalog.close()


def test_a_read_only_open_neither_creates_the_catalog_nor_a_key_file(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    with pytest.raises(StorageError, match="cannot open the catalog file"):
        SqlCatalog.for_file(root / "catalog.db", read_only=True)
    assert list(root.iterdir()) == []


def test_an_older_schema_is_refused_read_only_and_migrated_by_a_writer(tmp_path: Path) -> None:
    root = store(tmp_path)
    with sqlite3.connect(root / "catalog.db") as db:  # as if written before the newest migration
        newest = db.execute("SELECT max(version) FROM refvault_migrations").fetchone()[0]
        db.execute("DELETE FROM refvault_migrations WHERE version = ?", (newest,))
    db.close()
    with pytest.raises(StorageError, match=r"older refvault .* \(refvault migrate\)"):
        Vault.open(root, read_only=True)
    with sqlite3.connect(root / "catalog.db") as db:
        assert db.execute("SELECT max(version) FROM refvault_migrations").fetchone()[0] == newest - 1
    db.close()
    Vault.open(root).close()  # a writer migrates
    Vault.open(root, read_only=True).close()


def test_a_newer_schema_is_refused_read_only(tmp_path: Path) -> None:
    root = store(tmp_path)
    with sqlite3.connect(root / "catalog.db") as db:
        db.execute("INSERT INTO refvault_migrations (version, applied_us) VALUES (999, 0)")
    db.close()
    with pytest.raises(StorageError, match="newer refvault"):
        Vault.open(root, read_only=True)


def test_a_store_this_user_cannot_write_is_read_live_never_as_a_frozen_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a read-only file system may be opened ``immutable``: a directory merely not writable by this user
    may have its owner writing, and a reader must see those writes (a deletion above all)."""
    root = store(tmp_path)  # closed: no -wal file is left
    scope = Scope("t", "u", "s")
    access = os.access

    def not_writable_here(path: Any, mode: int, **kwargs: Any) -> bool:
        inside = Path(os.fspath(path)).absolute().is_relative_to(root)
        return False if inside and mode & os.W_OK else access(path, mode, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(os, "access", not_writable_here)
        uri = sqlite_read_only_uri(root / "catalog.db")
        reader = Vault.open(root, read_only=True)
    assert uri is not None
    assert uri.endswith("?mode=ro")
    try:
        [first] = reader.list(scope)
        with Vault.open(root) as writer:  # the owner writes while the reader is open
            second = writer.put(scope, b"written while the reader is open")
            assert {d.artifact_id for d in reader.list(scope)} == {first.artifact_id, second.artifact_id}
            writer.delete(scope, first.artifact_id)
            assert [d.artifact_id for d in reader.list(scope)] == [second.artifact_id]
    finally:
        reader.close()
