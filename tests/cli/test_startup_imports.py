"""A command that touches one artifact loads only what it needs: not the demo, the eval, the MCP or server
commands, PostgreSQL's SQL dialect, DuckDB, numba or rich's progress bars off a terminal (the CLI answers
faster; timings are measured in bench/, never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from refvault.model import Scope
from refvault.vault import Vault

NOT_NEEDED = (
    "refvault.demo",
    "refvault.evaluation",
    "refvault.cli.mcp",
    "refvault.cli.serve",
    "refvault.server.app",
    "sqlalchemy.dialects.postgresql",
    "duckdb",
    "numba",
    "rich.progress",  # verify draws a bar only on a terminal
)
SCRIPT = """
import json, sys
from refvault.cli import main
try:
    main(sys.argv[1:], prog_name="refvault")
except SystemExit as exit:
    assert not exit.code, exit.code
print(json.dumps(sorted(name for name in {names} if name in sys.modules)), file=sys.stderr)
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    location = tmp_path_factory.mktemp("startup") / "store"
    with Vault.open(location) as vault:
        artifact_id = vault.put(Scope("local", "local", "local"), b"line\n" * 100, media_type="text/plain").artifact_id
    return location, artifact_id


def loaded(*args: str) -> list[str]:
    script = SCRIPT.format(names=repr(NOT_NEEDED))
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, check=True)
    names: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return names


@pytest.mark.parametrize("command", ["show", "cat", "read", "ls", "verify"])
def test_a_command_on_one_artifact_loads_none_of_the_heavy_modules(store: tuple[Path, str], command: str) -> None:
    location, artifact_id = store
    args = [command] if command in ("ls", "verify") else [command, artifact_id]
    assert loaded("--store", str(location), *args) == []


def test_a_put_loads_none_of_the_heavy_modules(store: tuple[Path, str], tmp_path: Path) -> None:
    source = tmp_path / "notes.txt"
    source.write_text("hello\n")
    assert loaded("--store", str(store[0]), "put", str(source)) == []


def test_help_still_lists_every_command() -> None:
    done = subprocess.run([sys.executable, "-m", "refvault.cli", "--help"], capture_output=True, text=True, check=True)
    for name in ("demo", "eval", "mcp", "serve", "keys", "migrate", "put", "query"):
        assert f"\n  {name} " in done.stdout
