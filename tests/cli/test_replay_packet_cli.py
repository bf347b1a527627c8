"""``refvault replay-packet``: what a run's decisions used, with availability now, and every record."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from refvault import Scope, Vault
from refvault.evidence import Requirement, reacquire, reread
from tests.cli.test_cli import Cli

RUN = Scope("local", "local", "incident-9")
DECIDED = datetime(2026, 11, 6, 6, 0, tzinfo=UTC)
NEED = Requirement(source="status.page", max_age=timedelta(minutes=15))


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path / "store")


def _capture(vault: Vault, observed: datetime) -> str:
    return vault.put(
        RUN,
        b'{"status": "degraded"}\n',
        media_type="application/x-ndjson",
        source_version={"source_id": "status.page", "observed_at": observed.isoformat()},
        completeness={"status": "complete"},
    ).artifact_id


def test_replay_packet_lists_the_runs_evidence_and_its_substitutions(cli: Cli) -> None:
    with Vault.open(cli.store) as vault:
        old = _capture(vault, DECIDED - timedelta(hours=1))
        verdict = reread(vault, RUN, old, NEED, at=DECIDED, decision="restart")
        new = reacquire(vault, RUN, verdict, NEED, decision="restart", acquire=lambda: _capture(vault, DECIDED)).new_id
        vault.delete(RUN, old)

    shown = cli("replay-packet", "--run", RUN.session)
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines[0] == f"run {RUN.session}: 2 evidence reference(s), 2 record(s)"
    assert any(line.startswith(f"{old}  deleted") and "used by restart" in line for line in lines)
    assert f"  replaced by {new}" in lines
    assert any(line.startswith(f"substituted {new}") and f"replaces {old}" in line for line in lines)

    packet = cli.json("replay-packet", "--run", RUN.session)
    assert [(e["artifact_id"], e["availability"]) for e in packet["evidence"]] == [(old, "deleted"), (new, "available")]
    assert [r["kind"] for r in packet["records"]] == ["used", "substituted"]
    assert cli.json("replay-packet")["records"] == []  # the default run is --session (local): nothing recorded there
