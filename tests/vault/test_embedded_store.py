"""The embedded store's files: paths, permissions, symlinks, planted files, temporaries and a busy catalog."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from refvault import Scope, Vault
from refvault.catalog.base import CHUNK_SIZE
from refvault.catalog.sql import SqlCatalog
from refvault.errors import (
    StorageError,
)
from tests.conftest import Tamper, payload

SCOPE = Scope("acme", "ana", "s1")


# -- the embedded store's files -------------------------------------------------------


@pytest.mark.parametrize("name", ["a?mode=ro", "b#frag", "c%41d", "d?timeout=0"])
def test_store_paths_with_url_syntax_stay_inside_the_root(tmp_path: Path, name: str) -> None:
    root = tmp_path / name
    with Vault.open(root) as vault:
        d = vault.put(SCOPE, b"x")
        assert vault.read_bytes(SCOPE, d.artifact_id) == b"x"
    assert (root / "catalog.db").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_the_store_is_private_to_its_owner(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with Vault.open(root) as vault:
        vault.put(SCOPE, b"secret", disclosure="sealed")
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for name in ("catalog.db", "catalog.db-wal"):
        path = root / name
        if path.exists():
            assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, name


def test_a_symlinked_catalog_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    (root / "catalog.db").symlink_to(tmp_path / "victim.db")
    with pytest.raises(StorageError):
        Vault.open(root)
    assert not (tmp_path / "victim.db").exists()


def test_an_empty_store_variable_means_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REFVAULT_STORE", "")
    with Vault.open() as vault:
        vault.put(SCOPE, b"x")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".refvault"]


def test_files_planted_in_the_blob_tree_do_not_stop_verify_or_gc(tmp_path: Path) -> None:
    with Vault.open(tmp_path / "store") as vault:
        d = vault.put(SCOPE, payload(100_000))
        (tmp_path / "store" / "blobs" / ("f" * 32)).write_bytes(b"not a directory")
        (tmp_path / "store" / "tmp" / "a-dir").mkdir()
        assert vault.verify().ok
        report = vault.gc(grace=0)
        assert report.failures == 0
        assert vault.read_bytes(SCOPE, d.artifact_id) == payload(100_000)


def test_gc_never_removes_a_temporary_a_live_writer_holds(tmp_path: Path) -> None:
    with Vault.open(tmp_path / "store") as vault:
        writer = vault.blobs.writer()
        writer.write(b"in flight")
        temp = next((tmp_path / "store" / "tmp").iterdir())
        os.utime(temp, (0, 0))  # looks ancient
        assert vault.gc(grace=0).temporaries_removed == 0
        assert temp.exists()
        writer.abort()


def test_a_selective_read_does_not_wait_for_a_busy_catalog(tmp_path: Path) -> None:
    with Vault.open(tmp_path / "store") as vault:
        data = payload(3 * CHUNK_SIZE)
        d = vault.put(SCOPE, data)
        key = vault.catalog.find(SCOPE, d.artifact_id).key  # type: ignore[union-attr]
        Tamper(vault).forget_merkle(key)  # captured before Merkle roots: the first selective read derives them
        other = sqlite3.connect(tmp_path / "store" / "catalog.db", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            assert vault.read_range(SCOPE, d.artifact_id, CHUNK_SIZE, 10) == data[CHUNK_SIZE : CHUNK_SIZE + 10]
        finally:
            other.execute("ROLLBACK")
            other.close()
        record = vault.catalog.blob(key)
        assert record is not None
        assert (record.chunk_digests, record.merkle_root) == (b"", None)  # not recorded, and fine


def test_an_unknown_disclosure_in_the_catalog_fails_closed(tmp_path: Path) -> None:
    """An edited disclosure is never read as ``model``. Since manifest MACs the row fails its MAC and
    nothing of it is served (it used to be served as ``sealed``, the fallback that still decides how a
    row written before the upgrade is adopted: tests/security/test_manifest_integrity.py)."""
    from refvault.catalog.schema import artifacts
    from refvault.errors import IntegrityError

    with Vault.open(tmp_path / "store") as vault:
        d = vault.put(SCOPE, b"x")
        catalog = vault.catalog
        assert isinstance(catalog, SqlCatalog)
        with catalog._write() as conn, conn.begin():
            conn.execute(artifacts.update().values(disclosure="weird"))
        with pytest.raises(IntegrityError, match="does not match its MAC"):
            vault.describe(SCOPE, d.artifact_id)
