"""``refvault share``, ``refvault grants`` and ``refvault revoke``: the owner shares, lists and revokes; the grantee
reads with ``cat`` meanwhile and not after."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from refvault.cli import main

OWNER = ("--tenant", "acme", "--user", "ana", "--session", "s1")
BOB = ("--tenant", "acme", "--user", "bob", "--session", "s9")


class Cli:
    def __init__(self, store: Path) -> None:
        self.store = store
        self.runner = CliRunner()

    def __call__(self, *args: str, input: bytes | None = None) -> Result:
        return self.runner.invoke(main, ["--store", str(self.store), *args], input=input, catch_exceptions=False)

    def json(self, *args: str, input: bytes | None = None) -> Any:
        result = self(*args, "--json", input=input)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)


def _put(cli: Cli, tmp_path: Path) -> str:
    source = tmp_path / "notes.txt"
    source.write_bytes(b"shared notes\n")
    artifact_id: str = cli.json("put", str(source), *OWNER)["artifact_id"]
    return artifact_id


def test_share_then_the_grantee_reads_then_revoke_stops_it(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "store")
    artifact_id = _put(cli, tmp_path)
    assert cli("cat", artifact_id, *BOB).exit_code == 1  # nothing shared yet: not found
    grant = cli.json("share", artifact_id, "--to-user", "bob", "--to-session", "s9", "--purpose", "default", *OWNER)
    assert re.fullmatch(r"grt_[a-z2-7]{26}", grant["grant_id"])
    assert (grant["to"], grant["purposes"], grant["disclosure"]) == (
        {"user": "bob", "sessions": ["s9"]},
        ["default"],
        "model",
    )
    assert cli("cat", artifact_id, *BOB).stdout == "shared notes\n"
    listed = cli.json("grants", artifact_id, *OWNER)["grants"]
    assert [g["grant_id"] for g in listed] == [grant["grant_id"]]
    human = cli("grants", artifact_id, *OWNER)
    assert human.exit_code == 0
    assert grant["grant_id"] in human.stdout
    assert "to bob[s9]" in human.stdout
    revoked = cli.json("revoke", grant["grant_id"], *OWNER)
    assert revoked["revoked_at"] is not None
    refused = cli("cat", artifact_id, *BOB)
    assert refused.exit_code == 1
    assert f"artifact {artifact_id} not found" in refused.stderr
    again = cli("revoke", grant["grant_id"], *OWNER)
    assert again.exit_code == 1
    assert f"grant {grant['grant_id']} not found in this scope" in again.stderr


def test_share_options_expiry_sealed_and_recipients(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "store")
    artifact_id = _put(cli, tmp_path)
    grant = cli.json(
        "share", artifact_id, "--to-user", "bob", "--expires-in", "1h", "--sealed", "--recipient", "model:*", *OWNER
    )
    assert grant["disclosure"] == "sealed"
    assert grant["recipients"] == ["model:*"]
    assert grant["expires_at"] is not None
    assert grant["to"]["sessions"] is None


def test_only_the_owner_shares_and_never_across_tenants(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "store")
    artifact_id = _put(cli, tmp_path)
    other = cli("share", artifact_id, "--to-user", "carol", *BOB)
    assert other.exit_code == 1
    assert f"artifact {artifact_id} not found" in other.stderr
    listed = cli("grants", artifact_id, *BOB)
    assert listed.exit_code == 1
    assert f"artifact {artifact_id} not found" in listed.stderr
    assert cli.json("grants", artifact_id, *OWNER) == {"grants": []}
    mine = cli("share", artifact_id, "--to-user", "ana", *OWNER)  # its own scope already reads it
    assert mine.exit_code == 2
    assert "own scope already reads it" in mine.stderr
