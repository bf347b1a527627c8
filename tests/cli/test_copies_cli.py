"""The derived-copy commands on an embedded store: redact, receipt, lineage, supersede, revoke-artifact, refresh,
hold, release, holds, replay-status and delete (with its report), and a policy's retention and quotas through
``refvault policy``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from refvault import Scope, Vault
from refvault.policy import Policy, Quotas, Retention
from tests.cli.test_cli import MISSING_ID, Cli, not_found, write

LOCAL = Scope("local", "local", "local")
JSONL = "application/x-ndjson"


def records(count: int, seed: str) -> bytes:
    return b"".join(
        json.dumps({"n": n, "user": {"email": f"{seed}{n}@example.com"}}).encode() + b"\n" for n in range(count)
    )


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path / "store")


def _source(cli: Cli, tmp_path: Path, seed: str = "src", count: int = 3) -> str:
    path = write(tmp_path, f"{seed}.jsonl", records(count, seed))
    artifact_id: str = cli.put(path, "--label", "pii")["artifact_id"]
    return artifact_id


def _chain(cli: Cli, tmp_path: Path) -> tuple[str, str, str]:
    """A source (by the CLI), a tool's output derived from it (by the vault, as a tool would) and its redaction."""
    source = _source(cli, tmp_path)
    with Vault.open(cli.store) as vault:
        output = vault.put(LOCAL, records(2, "out"), media_type=JSONL, derived_from=[source]).artifact_id
    redaction: str = cli.json("redact", output)["artifact_id"]
    return source, output, redaction


def test_redact_prints_a_new_artifact_made_once(cli: Cli, tmp_path: Path) -> None:
    source = _source(cli, tmp_path)

    made = cli("redact", source)

    assert made.exit_code == 0, made.output
    line = made.stdout.strip()
    assert line.startswith(f"redacted (pii.v1) {source} as art_")
    redaction = line.split(" as ")[1].split()[0]
    assert cli.json("redact", source)["artifact_id"] == redaction  # made once, reused
    assert b"@example.com" not in cli("cat", redaction).stdout_bytes
    assert b"[EMAIL_1]" in cli("cat", redaction).stdout_bytes
    by_field = cli.json("redact", source, "--field", "user.email", "--redactor", "secrets.v1")
    assert by_field["artifact_id"] != redaction
    assert by_field["retrieval"]["labels"] == ["pii"]  # secrets.v1 removes only the secret label
    refused = cli("redact", source, "--redactor", "nope")
    assert refused.exit_code == 2
    assert "nope" in refused.stderr  # click's own choice error names what was given


def test_receipt_prints_json_and_a_direct_capture_has_none(cli: Cli, tmp_path: Path) -> None:
    source, output, redaction = _chain(cli, tmp_path)

    receipt = json.loads(cli("receipt", redaction).stdout)

    assert (receipt["kind"], receipt["transformation"]) == ("redaction", "redact:pii")
    assert [s["artifact_id"] for s in receipt["sources"]] == [output]
    assert receipt["counts"]["matches"] == {"email": 2}
    assert cli.json("receipt", output)["kind"] == "tool_output"
    direct = cli("receipt", source)
    assert direct.exit_code == 2
    assert "captured directly" in direct.stderr


def test_lineage_prints_the_tree_and_json(cli: Cli, tmp_path: Path) -> None:
    source, output, redaction = _chain(cli, tmp_path)
    sizes = {d["artifact_id"]: d["retrieval"]["size"] for d in cli.json("ls")}

    tree = cli("lineage", source)

    assert tree.exit_code == 0, tree.output
    assert tree.stdout.splitlines() == [
        f"{source} (artifact) {sizes[source]} B",
        f"  └ {output} (tool_output) {sizes[output]} B",
        f"    └ {redaction} (redaction) {sizes[redaction]} B",
    ]
    assert cli("lineage", redaction, "--up").stdout.splitlines() == [
        f"{redaction} (redaction) {sizes[redaction]} B",
        f"  ^ {output} (tool_output) {sizes[output]} B",
        f"    ^ {source} (artifact) {sizes[source]} B",
    ]
    assert cli("lineage", source, "--down", "--depth", "1").stdout.splitlines()[-1] == (
        "(more beyond the requested depth)"
    )
    graph = cli.json("lineage", source)
    assert graph["root"] == source
    assert {(e["source"], e["derived"]) for e in graph["edges"]} == {(source, output), (output, redaction)}
    with Vault.open(cli.store) as vault:
        assert graph == json.loads(json.dumps(vault.lineage(LOCAL, source).to_dict()))


def test_supersede_makes_copies_stale_and_refresh_recomputes_a_redaction(cli: Cli, tmp_path: Path) -> None:
    source = _source(cli, tmp_path)
    redaction = cli.json("redact", source)["artifact_id"]
    assert cli("refresh", redaction).stdout.strip() == f"{redaction} is current: nothing to refresh"
    newer = _source(cli, tmp_path, "new", 4)

    done = cli("supersede", source, newer, "--reason", "a corrected export")

    assert done.exit_code == 0, done.output
    assert done.stdout.strip() == f"superseded {source} by {newer}: it and its copies report stale"
    assert f"{redaction} (redaction)" in cli("lineage", source).stdout
    assert "[stale]" in cli("lineage", redaction, "--up").stdout
    fresh = cli("refresh", redaction)
    assert fresh.exit_code == 0, fresh.output
    assert fresh.stdout.startswith(f"refreshed {redaction} as art_")
    fresh_id = fresh.stdout.split(" as ")[1].split()[0]
    assert cli.json("lineage", fresh_id, "--up")["nodes"][0]["status"] == "current"
    assert cli.json("supersede", newer, source, "--reason", "back") == {"artifact_id": newer, "superseded_by": source}
    missing = cli("supersede", source, MISSING_ID, "--reason", "x")
    assert (missing.exit_code, missing.stderr) == (1, f"error: {not_found(MISSING_ID)}\n")
    no_reason = cli("supersede", source, newer)
    assert no_reason.exit_code == 2
    assert "--reason" in no_reason.stderr


def test_revoke_artifact_revokes_every_copy(cli: Cli, tmp_path: Path) -> None:
    source, output, redaction = _chain(cli, tmp_path)

    done = cli("revoke-artifact", output, "--reason", "the tool was wrong")

    assert done.stdout.strip() == f"revoked {output}: it and its copies report revoked"
    tree = cli("lineage", source).stdout
    assert f"{output} (tool_output)" in tree
    assert tree.count("[revoked]") == 2
    statuses = cli.json("replay-status", source, output, redaction)
    assert statuses[source] == {"state": "available", "status": "current", "allowed": True}
    assert statuses[output]["state"] == "revoked"
    assert statuses[redaction] == {"state": "available", "status": "revoked", "allowed": True}


def test_a_hold_blocks_delete_and_a_cascade_keeps_it(cli: Cli, tmp_path: Path) -> None:
    source, output, redaction = _chain(cli, tmp_path)

    made = cli.json("hold", output, "--reason", "litigation 42")

    assert made["artifact_id"] == output
    assert made["reason"] == "litigation 42"
    hold_id = made["hold_id"]
    listed = cli("holds", output)
    assert listed.stdout.startswith(f"{hold_id}  {output}  since ")
    assert listed.stdout.rstrip().endswith("reason litigation 42")
    assert cli.json("holds", output) == {"holds": [made]}
    refused = cli("delete", output)
    assert refused.exit_code == 1
    assert "under a hold" in refused.stderr
    report = cli.json("delete", source, "--cascade")
    assert {k["id"]: k["reason"] for k in report["kept"]} == {output: "hold", source: "a held copy derives from it"}
    assert [d["id"] for d in report["deleted"]] == [redaction]
    released = cli("release", output, hold_id)
    assert released.stdout.strip() == f"released {hold_id} on {output}; 0 holds left"
    assert cli("holds", output).stdout.strip() == "no holds"
    again = cli("release", output, hold_id)
    assert again.exit_code == 1
    assert cli("delete", output).exit_code == 0


def test_delete_cascade_reports_what_went_and_what_cannot_be_erased(cli: Cli, tmp_path: Path) -> None:
    source, output, redaction = _chain(cli, tmp_path)
    with Vault.open(cli.store) as vault:  # bytes that left (a read the audit records): a disclosure the report names
        vault.read_bytes(LOCAL, output)
    size = {d["artifact_id"]: d["retrieval"]["size"] for d in cli.json("ls")}

    done = cli("delete", source, "--cascade")

    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert lines[0] == "deleted 3, kept 0"
    assert set(lines[1:4]) == {
        f"deleted  {source} (artifact, {size[source]} B)",
        f"deleted  {output} (tool_output, {size[output]} B)",
        f"deleted  {redaction} (redaction, {size[redaction]} B)",
    }
    assert lines[4] == "not erasable: 1 disclosure(s) already made, kept in the audit chain"
    assert lines[5].startswith(f"  {output} to user at ")
    assert cli.json("ls") == []
    statuses = cli.json("replay-status", source, redaction)
    assert statuses[redaction]["state"] == "deleted"
    assert statuses[redaction]["rule"] == f"cascade:{source}"


def test_delete_json_is_the_whole_report(cli: Cli, tmp_path: Path) -> None:
    artifact_id = _source(cli, tmp_path)
    report = cli.json("delete", artifact_id)
    assert report == {
        "root": artifact_id,
        "deleted": [{"id": artifact_id, "kind": "artifact", "bytes": len(records(3, "src"))}],
        "kept": [],
        "grants_revoked": [],
        "not_erasable": [],
    }


def test_replay_status_prints_one_line_per_id(cli: Cli, tmp_path: Path) -> None:
    kept = _source(cli, tmp_path)
    gone = _source(cli, tmp_path, "gone")
    cli("delete", gone)

    shown = cli("replay-status", kept, gone, MISSING_ID, "--recipient", "model:gpt-x", "--purpose", "replay")

    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines[0] == f"{kept}  available  current"
    assert lines[1].startswith(f"{gone}  deleted  by delete  at ")
    assert lines[2] == f"{MISSING_ID}  deleted"


@pytest.mark.parametrize(
    "command",
    [
        ["redact"],
        ["receipt"],
        ["lineage"],
        ["revoke-artifact", "--reason", "x"],
        ["refresh"],
        ["hold", "--reason", "x"],
        ["holds"],
        ["delete"],
        ["delete", "--cascade"],
    ],
)
def test_missing_and_malformed_ids(cli: Cli, tmp_path: Path, command: list[str]) -> None:
    cli.init()
    missing = cli(*command, MISSING_ID)
    assert (missing.exit_code, missing.stdout) == (1, "")
    assert missing.stderr == f"error: {not_found(MISSING_ID)}\n"
    other_scope = cli(*command, _source(cli, tmp_path), "--user", "bob")
    assert other_scope.exit_code == 1
    assert "not found in scope local/bob/local" in other_scope.stderr
    bad = cli(*command, "../etc/passwd")
    assert bad.exit_code == 2
    assert bad.stderr.startswith("error: not a refvault artifact id")
    assert "passwd" not in bad.stderr


def test_a_policys_retention_and_quotas_round_trip_through_refvault_policy(cli: Cli, tmp_path: Path) -> None:
    cli.init()
    source = """version = "r-1"

[[rules]]
id = "redact-pii-for-models"
labels = ["pii"]
recipients = ["model:*"]
action = "redact"
redactor = "pii.v1"

[[retention]]
label = "pii"
max_age = 86400

[[retention]]
label = "scratch"
max_age = 3600

[quotas]
tenant_bytes = 1000000000
session_bytes = 10000000
"""
    file = tmp_path / "policy.toml"
    file.write_text(source)
    expected = Policy.from_toml(source)
    assert expected.retention == (Retention("pii", 86400), Retention("scratch", 3600))
    assert expected.quotas == Quotas(tenant_bytes=1_000_000_000, session_bytes=10_000_000)

    assert cli("policy", "set", str(file)).exit_code == 0

    assert Policy.from_toml(cli("policy", "show").stdout) == expected
    assert Policy.from_dict(cli.json("policy", "show")["policy"]) == expected
    with Vault.open(cli.store) as vault:
        assert vault.policy("local") == expected
