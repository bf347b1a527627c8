"""Commands that create a store refuse to create one in a non-empty directory that holds none (the user's files)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from refvault.cli import main
from tests.servers import free_port

CREATORS = [
    ("put", "-"),
    ("migrate",),
    ("keys", "create", "--tenant", "t", "--user", "u"),
    ("mcp", "proxy", "--url", "http://127.0.0.1:9/mcp"),
]


@pytest.fixture
def documents(tmp_path: Path) -> Path:
    folder = tmp_path / "documents"
    folder.mkdir()
    (folder / "thesis.txt").write_text("my work")
    (folder / "photos").mkdir()
    return folder


def refused(folder: Path) -> str:
    return (
        f"the store location {folder} is a non-empty directory that holds no refvault store;"
        " choose an empty or new directory"
    )


def listing(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


@pytest.mark.parametrize("args", CREATORS, ids=" ".join)
def test_a_creating_command_refuses_a_directory_of_other_files(documents: Path, args: tuple[str, ...]) -> None:
    before = listing(documents)
    result = CliRunner().invoke(main, ["--store", str(documents), *args], input=b"x", catch_exceptions=False)
    assert result.exit_code == 2
    assert result.stderr.endswith(f"{refused(documents)}\n")
    assert "created a new store" not in result.stderr
    assert listing(documents) == before


def test_serve_refuses_a_directory_of_other_files(documents: Path) -> None:
    command = [sys.executable, "-m", "refvault.cli", "serve", "--store", str(documents), "--port", str(free_port())]
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFVAULT_")}
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 2
    assert refused(documents) in result.stderr
    assert listing(documents) == ["photos", "thesis.txt"]


@pytest.mark.parametrize("args", CREATORS[:3], ids=" ".join)
def test_an_empty_directory_becomes_a_store(tmp_path: Path, args: tuple[str, ...]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["--store", str(empty), *args], input=b"x", catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert (empty / "catalog.db").is_file()
