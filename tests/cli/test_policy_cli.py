"""``refvault policy set/show`` and ``--purpose``/``--recipient`` on the reading commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from refvault import Vault
from refvault.policy import Policy
from tests.cli.test_cli import Cli

POLICY_TOML = """
version = "cli-1"

[[rules]]
id = "no-pii-to-models"
labels = ["pii"]
recipients = ["model:*"]
action = "deny"

[[rules]]
id = "pii-only-for-support"
labels = ["pii"]
purposes = ["billing"]
action = "deny"
"""


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path / "store")


def _pii_text(tmp_path: Path, cli: Cli) -> str:
    path = tmp_path / "notes.txt"
    path.write_text("ana's phone: 555-0100\nsecond line\n")
    artifact_id: str = cli.put(path, "--media-type", "text/plain", "--label", "pii")["artifact_id"]
    return artifact_id


def test_set_stores_the_policy_and_show_prints_it_back(tmp_path: Path, cli: Cli) -> None:
    cli.init()
    file = tmp_path / "policy.toml"
    file.write_text(POLICY_TOML)
    done = cli("policy", "set", str(file))
    assert done.exit_code == 0, done.output
    assert "version cli-1, 2 rules" in done.stdout
    shown = cli("policy", "show")
    assert shown.exit_code == 0
    assert Policy.from_toml(shown.stdout) == Policy.from_toml(POLICY_TOML)
    assert cli.json("policy", "show")["policy"]["rules"][0]["id"] == "no-pii-to-models"
    with Vault.open(cli.store) as vault:
        assert vault.policy("local") == Policy.from_toml(POLICY_TOML)
        assert vault.policy("other") is None
    assert cli.json("policy", "show", "--tenant", "other") == {"tenant": "other", "policy": None}
    cleared = cli("policy", "set", "--clear")
    assert cleared.exit_code == 0
    assert "removed" in cleared.stdout
    with Vault.open(cli.store) as vault:
        assert vault.policy("local") is None


def test_a_malformed_policy_is_refused_naming_the_rule_and_nothing_is_stored(tmp_path: Path, cli: Cli) -> None:
    cli.init()
    file = tmp_path / "bad.toml"
    file.write_text(POLICY_TOML.replace('action = "deny"\n', 'action = "block"\n', 1))
    refused = cli("policy", "set", str(file))
    assert refused.exit_code == 2
    assert "rules[0]" in refused.stderr
    assert "block" not in refused.stderr
    assert cli.json("policy", "show")["policy"] is None
    assert cli("policy", "set").exit_code == 2  # neither a file nor --clear
    missing = cli("policy", "set", str(tmp_path / "absent.toml"))
    assert missing.exit_code != 0


def test_reads_carry_purpose_and_recipient_and_the_policy_decides(tmp_path: Path, cli: Cli) -> None:
    artifact_id = _pii_text(tmp_path, cli)
    file = tmp_path / "policy.toml"
    file.write_text(POLICY_TOML)
    assert cli("policy", "set", str(file)).exit_code == 0
    for command in (["read"], ["cat"], ["show"]):
        allowed = cli(*command, artifact_id)
        assert allowed.exit_code == 0, (command, allowed.output)
        denied = cli(*command, artifact_id, "--recipient", "model:gpt-4o")
        assert denied.exit_code == 1, command
        assert "no-pii-to-models" in denied.stderr
        assert "555-0100" not in denied.output
        billing = cli(*command, artifact_id, "--purpose", "billing")
        assert billing.exit_code == 1
        assert "pii-only-for-support" in billing.stderr
    as_json = cli("cat", artifact_id, "--recipient", "model:x", "--json")
    assert json.loads(as_json.stdout)["error"]["type"] == "PolicyDenied"
    assert cli("read", artifact_id, "--recipient", "tool:search").stdout.startswith("ana's phone")
    bad = cli("read", artifact_id, "--recipient", "somebody")
    assert bad.exit_code == 2
    assert "a recipient is" in bad.stderr


def test_query_takes_purpose_and_recipient(tmp_path: Path, cli: Cli) -> None:
    path = tmp_path / "rows.ndjson"
    path.write_text("".join(json.dumps({"n": i}) + "\n" for i in range(5)))
    artifact_id = cli.put(path, "--media-type", "application/x-ndjson", "--label", "pii")["artifact_id"]
    file = tmp_path / "policy.toml"
    file.write_text(POLICY_TOML)
    assert cli("policy", "set", str(file)).exit_code == 0
    assert len(cli.json("query", artifact_id, "--recipient", "user")["records"]) == 5
    denied = cli("query", artifact_id, "--recipient", "model:x")
    assert denied.exit_code == 1
    assert "no-pii-to-models" in denied.stderr
