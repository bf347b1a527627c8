"""``Vault.open`` of a location that cannot hold a store, of one that holds none, and read-only opens."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from refvault.errors import InvalidArgument, StorageError
from refvault.model import Scope
from refvault.vault import Vault

SCOPE = Scope("t", "u", "s")


def test_opening_a_file_is_invalid_argument_naming_it(tmp_path: Path) -> None:
    file = tmp_path / "notes.txt"
    file.write_bytes(b"not a store")
    for options in ({}, {"create": False}, {"read_only": True}):
        with pytest.raises(InvalidArgument) as caught:
            Vault.open(file, **options)  # type: ignore[arg-type]
        assert str(caught.value) == f"the store location {file} is a file, not a directory"
        assert "Errno" not in str(caught.value)
    assert file.read_bytes() == b"not a store"


def test_opening_a_dangling_symlink_is_not_a_directory(tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(InvalidArgument, match="is not a directory"):
        Vault.open(link)


def test_open_creates_a_store_by_default(tmp_path: Path) -> None:
    with Vault.open(tmp_path / "new") as vault:
        vault.put(SCOPE, b"x")
    assert (tmp_path / "new" / "catalog.db").is_file()


@pytest.mark.parametrize("options", [{"create": False}, {"read_only": True}])
def test_without_create_a_location_holding_no_store_is_refused(tmp_path: Path, options: dict[str, bool]) -> None:
    for location in (tmp_path / "missing", tmp_path):  # absent, and an existing directory without a store
        with pytest.raises(StorageError) as caught:
            Vault.open(location, **options)  # type: ignore[arg-type]
        assert caught.value.errno == errno.ENOENT
        assert caught.value.strerror == f"no refvault store at {location}"
    assert not (tmp_path / "missing").exists()
    assert list(tmp_path.iterdir()) == []


def test_create_false_opens_an_existing_store_for_writing(tmp_path: Path) -> None:
    Vault.open(tmp_path / "s").close()
    with Vault.open(tmp_path / "s", create=False) as vault:
        stored = vault.put(SCOPE, b"x")
    with Vault.open(tmp_path / "s", read_only=True) as vault:
        assert vault.read_bytes(SCOPE, stored.artifact_id) == b"x"
        with pytest.raises(StorageError, match="read-only"):
            vault.put(SCOPE, b"y")
