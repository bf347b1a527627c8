"""``Vault.open`` creates a store only where there is nothing else: never among someone's files."""

from __future__ import annotations

from pathlib import Path

import pytest

from refvault.errors import InvalidArgument
from refvault.model import Scope
from refvault.vault import Vault
from refvault.vault.location import STORE_ENTRIES

SCOPE = Scope("t", "u", "s")


def test_a_non_empty_directory_without_a_store_is_refused_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("mine")
    with pytest.raises(InvalidArgument) as caught:
        Vault.open(tmp_path)
    assert str(caught.value) == (
        f"the store location {tmp_path} is a non-empty directory that holds no refvault store;"
        " choose an empty or new directory"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["notes.md"]


def test_a_hidden_file_makes_a_directory_non_empty(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    with pytest.raises(InvalidArgument, match="non-empty directory"):
        Vault.open(tmp_path)


def test_an_empty_directory_and_an_existing_store_open(tmp_path: Path) -> None:
    with Vault.open(tmp_path) as vault:
        stored = vault.put(SCOPE, b"x")
    assert {p.name for p in tmp_path.iterdir()} <= STORE_ENTRIES
    (tmp_path / "README").write_text("an operator's note beside the store")  # a store may hold other files
    with Vault.open(tmp_path) as vault:
        assert vault.read_bytes(SCOPE, stored.artifact_id) == b"x"


def test_what_an_interrupted_first_open_left_does_not_block_the_next(tmp_path: Path) -> None:
    for name in ("blobs", "tmp"):
        (tmp_path / name).mkdir()
    (tmp_path / ".manifest-keys.json.0123abcd.tmp").write_bytes(b"")
    with Vault.open(tmp_path) as vault:
        vault.put(SCOPE, b"x")
    assert (tmp_path / "catalog.db").is_file()
