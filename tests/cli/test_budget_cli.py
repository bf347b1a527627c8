"""``refvault budget set|clear`` and ``refvault usage``: a run's limits from the command line, and reads
over them refused with nothing printed but the error."""

from __future__ import annotations

from pathlib import Path

import pytest

from refvault import Scope, Vault
from tests.cli.test_cli import Cli


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path / "store")


def test_budget_set_usage_and_clear(tmp_path: Path, cli: Cli) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("first line\nsecond line\n")
    artifact_id = cli.put(path, "--media-type", "text/plain")["artifact_id"]
    shown = cli.json("budget", "set", "--read-calls", "1", "--scanned-bytes", "1000")
    assert shown["budget"] == {"read_calls": 1, "scanned_bytes": 1000}
    assert shown["started_at"] is not None
    with Vault.open(cli.store) as vault:  # an agent's read, where the store is writable: recorded
        vault.read_bytes(Scope("local", "local", "local"), artifact_id)
    refused = cli("cat", artifact_id)  # a reading command records nothing, but is held to what was spent
    assert refused.exit_code != 0
    assert "read_calls budget" in refused.output
    assert "first line" not in refused.output
    usage = cli.json("usage")
    assert usage["spent"]["read_calls"] == 1
    assert usage["exhausted"] == ["read_calls"]
    text = cli("usage").output
    assert "read_calls" in text
    assert "EXHAUSTED" in text
    assert cli.json("budget", "set", "--read-calls", "5", "--restart")["spent"]["read_calls"] == 0
    assert cli.json("budget", "clear") == {"removed": True}
    assert cli.json("usage")["budget"] is None
    assert "no budget" in cli("usage", "--session", "other").output


def test_a_negative_limit_is_a_usage_error(cli: Cli) -> None:
    cli.init()
    result = cli("budget", "set", "--read-calls", "-1")
    assert result.exit_code == 2
    assert "read-calls" in result.output
