"""A lost ``manifest-keys.json`` is never silently replaced: a new key would make every signed row fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from refvault.catalog.macs import KEY_FILE
from refvault.errors import StorageError
from refvault.model import Scope
from refvault.read import records
from refvault.vault import Vault

SCOPE = Scope("t", "u", "s")


@pytest.mark.parametrize("read_only", [False, True])
def test_a_missing_key_file_with_signed_artifacts_is_refused(tmp_path: Path, read_only: bool) -> None:
    with Vault.open(tmp_path) as vault:
        for n in range(3):
            vault.put(SCOPE, f"row {n}".encode())
    (tmp_path / KEY_FILE).unlink()
    with pytest.raises(StorageError) as caught:
        Vault.open(tmp_path, read_only=read_only)
    assert str(caught.value).startswith(
        f"the manifest key file {KEY_FILE} is missing but 3 artifacts are signed with it: restore it from a backup"
    )
    assert not (tmp_path / KEY_FILE).exists()


def test_the_restored_key_file_opens_the_store_again(tmp_path: Path) -> None:
    with Vault.open(tmp_path) as vault:
        stored = vault.put(SCOPE, b"kept")
    backup = (tmp_path / KEY_FILE).read_bytes()
    (tmp_path / KEY_FILE).unlink()
    with pytest.raises(StorageError, match="1 artifact is signed with it"):
        Vault.open(tmp_path)
    (tmp_path / KEY_FILE).write_bytes(backup)
    (tmp_path / KEY_FILE).chmod(0o600)
    with Vault.open(tmp_path) as vault:
        assert vault.read_bytes(SCOPE, stored.artifact_id) == b"kept"
        assert vault.verify().ok


def test_signed_derived_data_alone_also_keeps_the_key(tmp_path: Path) -> None:
    with Vault.open(tmp_path) as vault:
        rows = vault.put(SCOPE, b'{"n": 1}\n{"n": 2}\n', media_type="application/x-ndjson")
        assert records.query(vault, SCOPE, rows.artifact_id)["returned_records"] == 2  # stores its derivation
        vault.delete(SCOPE, rows.artifact_id)
    (tmp_path / KEY_FILE).unlink()
    with pytest.raises(StorageError, match="1 derived-data record is signed with it"):
        Vault.open(tmp_path)


def test_a_store_with_no_signed_rows_gets_a_key_file(tmp_path: Path) -> None:
    Vault.open(tmp_path).close()
    (tmp_path / KEY_FILE).unlink()
    with pytest.raises(StorageError, match="'refvault migrate' \\(an open for writing\\) creates it"):
        Vault.open(tmp_path, read_only=True)
    assert not (tmp_path / KEY_FILE).exists()
    with Vault.open(tmp_path) as vault:
        vault.put(SCOPE, b"x")
    assert (tmp_path / KEY_FILE).is_file()
