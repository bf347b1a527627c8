"""The console script (``refvault.cli.entry.run``) ends a quick command with ``os._exit``: every byte it wrote still
arrives, every exit code is the command's own, and the other commands exit the normal way."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from refvault.cli.entry import run
from refvault.model import Scope
from refvault.vault import Vault

SCOPE = Scope("local", "local", "local")


def refvault(store: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFVAULT_")}
    command = [sys.executable, "-m", "refvault.cli", "--store", str(store), *args]
    return subprocess.run(command, input=stdin, capture_output=True, env=env, timeout=120)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    Vault.open(root).close()
    return root


def test_every_byte_a_quick_command_writes_to_a_pipe_arrives(store: Path) -> None:
    data = os.urandom(3 << 20)
    with Vault.open(store) as vault:
        artifact_id = vault.put(SCOPE, data).artifact_id
    shown = refvault(store, "cat", artifact_id)
    assert shown.returncode == 0, shown.stderr
    assert hashlib.sha256(shown.stdout).digest() == hashlib.sha256(data).digest()
    listed = refvault(store, "ls", "--json")
    assert [d["artifact_id"] for d in json.loads(listed.stdout)] == [artifact_id]


def test_a_quick_command_keeps_its_exit_code_and_its_stderr(store: Path) -> None:
    missing = refvault(store, "show", "art_aaaaaaaaaaaaaaaaaaaaaaaaaa")
    assert missing.returncode == 1
    assert b"not found in scope local/local/local" in missing.stderr
    bad = refvault(store, "query", "art_aaaaaaaaaaaaaaaaaaaaaaaaaa", "--limit", "0")
    assert bad.returncode == 2
    put = refvault(store, "put", "-q", "-", stdin=b"hello\n")
    assert put.returncode == 0
    assert put.stdout.decode().strip().startswith("art_")


def test_a_quick_command_that_writes_leaves_a_store_that_verifies(store: Path) -> None:
    for i in range(5):
        assert refvault(store, "put", "-q", "-", stdin=f"line {i}\n".encode()).returncode == 0
    with Vault.open(store) as vault:
        assert len(vault.list(SCOPE)) == 5
        assert vault.verify().ok


def test_other_commands_run_with_the_collector_on(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    monkeypatch.setattr(sys, "argv", ["refvault", "--store", str(store), "migrate"])
    monkeypatch.setattr(gc, "freeze", lambda: seen.append(gc.isenabled()))  # called just before it is turned on
    with pytest.raises(SystemExit) as done:
        run()
    assert done.value.code == 0
    assert seen == [False]  # paused for start-up, then frozen and turned back on before migrate ran
    assert gc.isenabled()
