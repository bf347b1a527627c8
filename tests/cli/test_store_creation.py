"""Which commands create a store: those that only read refuse a location without one; those that write say so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from refvault.cli import main
from tests.servers import free_port

MISSING_ID = "art_" + "a" * 26


def run(*args: str, input: bytes | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def no_store(location: Path) -> str:
    return f"error: no refvault store at {location} (run 'refvault put' to create one, or pass --store)\n"


# Every command that only reads, and what it reads.
READERS = [
    ("ls",),
    ("show", MISSING_ID),
    ("cat", MISSING_ID),
    ("read", MISSING_ID),
    ("query", MISSING_ID),
    ("verify",),
    ("gc", "--dry-run"),
    ("manifest-key", "show"),
]


@pytest.mark.parametrize("args", READERS, ids=" ".join)
def test_a_mistyped_store_is_refused_by_every_reading_command(tmp_path: Path, args: tuple[str, ...]) -> None:
    mistyped = tmp_path / "stroe"
    result = run(*args, "--store", str(mistyped))
    assert result.exit_code == 1  # the code of "not found"
    assert result.stderr == no_store(mistyped)
    assert not mistyped.exists()


def test_keys_list_refuses_a_mistyped_store(tmp_path: Path) -> None:
    mistyped = tmp_path / "stroe"
    result = run("keys", "list", "--store", str(mistyped))
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: no refvault store at {mistyped}")
    assert not mistyped.exists()


def test_put_creates_the_store_and_says_so_once(tmp_path: Path) -> None:
    store = tmp_path / "new"
    first = run("put", "-", "--store", str(store), "--json", input=b"hello")
    assert first.exit_code == 0, first.output
    assert first.stderr == f"created a new store at {store}\n"
    assert json.loads(first.stdout)["artifact_id"].startswith("art_")
    again = run("put", "-", "--store", str(store), "--json", input=b"again")
    assert again.exit_code == 0
    assert again.stderr == ""


def test_keys_create_creates_the_store_and_says_so(tmp_path: Path) -> None:
    store = tmp_path / "new"
    result = run("keys", "create", "--store", str(store), "--tenant", "t", "--user", "u")
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(f"created a new store at {store}\n")
    assert (store / "catalog.db").is_file()
    assert run("keys", "list", "--store", str(store)).exit_code == 0


def test_migrate_creates_the_store_and_reports_the_schema(tmp_path: Path) -> None:
    store = tmp_path / "new"
    created = run("migrate", "--store", str(store), "--json")
    assert created.exit_code == 0, created.output
    assert created.stderr == f"created a new store at {store}\n"
    report = json.loads(created.stdout)
    assert report["created"] is True
    assert report["schema_version"] >= 1
    again = run("migrate", "--store", str(store), "--json")
    assert json.loads(again.stdout)["created"] is False
    assert again.stderr == ""
    assert run("ls", "--store", str(store)).exit_code == 0


def test_serve_creates_the_store_and_says_so(tmp_path: Path) -> None:
    store = tmp_path / "new"
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "refvault.cli", "serve", "--store", str(store), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()  # printed after the store was opened (and created)
        assert "serving" in banner
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    assert f"created a new store at {os.path.abspath(store)}" in err
    assert (store / "catalog.db").is_file()


def test_a_store_location_that_is_a_file_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    file = tmp_path / "a-file"
    file.write_bytes(b"")
    monkeypatch.setenv("REFVAULT_STORE", str(file))  # not checked by click's --store option
    for args in (("ls",), ("put", "-")):
        result = run(*args, input=b"x")
        assert result.exit_code == 2
        refused = f"the store location {file} is a file, not a directory"
        assert result.stderr == f"error: cannot open store {file}: {refused}\n"
    assert file.read_bytes() == b""
