"""``refvault eval``: exact counts on a fixed seed, the JSON shape, exit codes, and broken builds that must fail it."""

from __future__ import annotations

import base64
import json
import logging
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from refvault import Vault, evidence
from refvault.errors import InvalidArgument, NotFound
from refvault.evaluation import EvalReport, eval_command, long_run, run_eval
from refvault.evaluation.world import Canaries
from refvault.guard import LeakGuard

SEED = 20261106

# One trial of the battery against a sound build.
EXPECTED: dict[str, dict[str, Any]] = {
    "identity_substitution": {"attempts": 15, "detected": 15, "failures": 0},
    "unauthorised_disclosure": {
        "attempts": 75,
        "blocked": 75,
        "disclosed": 0,
        "failures": 0,
        "by_kind": {
            "cross_scope": {"attempts": 39, "blocked": 39, "disclosed": 0},
            "sealed": {"attempts": 10, "blocked": 10, "disclosed": 0},
            "cursor": {"attempts": 10, "blocked": 10, "disclosed": 0},
            "llm_edge": {"attempts": 10, "blocked": 10, "disclosed": 0},
            "foreign_ref": {"attempts": 6, "blocked": 6, "disclosed": 0},
        },
    },
    "false_absence": {
        "answers": 11,
        "conclusions_drawn": 2,
        "false_conclusions": 0,
        "withheld": 9,
        "controls": 2,
        "failures": 0,
    },
    "omissions_reported": {"responses": 11, "carried": 11, "failures": 0},
    "evidence_gate": {
        "attempts": 14,
        "caught": 14,
        "unsupported_commits": 0,
        "controls": 2,
        "supported_commits": 2,
        "failures": 0,
    },
}
KNOWN_FAILURES: list[tuple[str, str]] = []


@pytest.fixture(autouse=True)
def _short_long_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The battery's tests run a short long run (tests/evaluation/test_long_run.py runs the whole one)."""
    monkeypatch.setattr(long_run, "CALLS", 30)


def _scaled(expected: Any, factor: int) -> Any:
    if isinstance(expected, dict):
        return {key: _scaled(value, factor) for key, value in expected.items()}
    return expected * factor


def _blocking(report: EvalReport) -> tuple[int, int, int]:
    return report.disclosures, report.unsupported_commits, report.false_absences


# -- a sound build ------------------------------------------------------------------------------------------


def test_exact_counts_on_a_fixed_seed() -> None:
    logger = logging.getLogger("refvault")
    before = (logger.level, logger.propagate, list(logger.handlers))
    report = run_eval(seed=SEED, trials=1)
    assert report.properties() == EXPECTED
    assert _blocking(report) == (0, 0, 0)
    assert report.stray == ()
    assert report.ok
    assert report.exit_code == 0
    assert [(a.prop, a.name) for a in report.failures] == KNOWN_FAILURES
    assert (logger.level, logger.propagate, list(logger.handlers)) == before  # logging left as it was
    names = [(a.prop, a.name) for a in report.attempts]
    assert len(names) == len(set(names))  # every attempt is a distinct probe
    assert "cnry" not in json.dumps(report.to_dict())  # the report itself never carries a canary


def test_another_seed_gives_the_same_counts() -> None:
    assert run_eval(seed=7, trials=1).properties() == EXPECTED


def test_cli_json_document_and_exit_code_zero() -> None:
    result = CliRunner().invoke(eval_command, ["--json", "--trials", "2", "--seed", str(SEED)])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert list(document) == [
        "ok",
        "exit_code",
        "seed",
        "trials",
        "store",
        "store_kept",
        "seconds",
        "release_blocking",
        "properties",
        "figures",
        "failures",
        "attempts",
    ]
    assert document["ok"] is True
    assert document["exit_code"] == 0
    assert (document["seed"], document["trials"], document["store"], document["store_kept"]) == (SEED, 2, None, False)
    assert document["release_blocking"] == {
        "disclosures": 0,
        "unsupported_commits": 0,
        "false_absences": 0,
        "stray_sinks": [],
    }
    assert document["properties"] == _scaled(EXPECTED, 2)
    assert len(document["attempts"]) == 2 * 128  # 15 + 75 + 11 + 11 + 16 per trial
    assert {a["trial"] for a in document["attempts"]} == {0, 1}
    assert set(document["attempts"][0]) >= {"property", "kind", "name", "trial", "ok", "outcome", "disclosed"}
    figures = document["figures"]
    assert set(figures) == {"latency_ms", "tokens_returned", "records_scanned", "bytes", "working_set", "miscopy"}
    context = figures["working_set"]
    assert context["calls"] == 30
    assert context["with"]["peak_request_tokens"] < context["without"]["peak_request_tokens"]
    assert context["with"]["reloads_lossless"] == context["with"]["reloads"]
    latency = figures["latency_ms"]
    assert latency["all"]["calls"] == sum(spread["calls"] for op, spread in latency.items() if op != "all")
    assert {"query", "window", "grep", "read_bytes", "tool load_artifacts"} <= set(latency)
    assert figures["tokens_returned"]["reads"] > 0
    assert figures["records_scanned"]["max"] == 2000
    stored = figures["bytes"]
    assert stored["artifacts"] > 0
    assert 0 < stored["stored_bytes"] <= stored["store_on_disk_bytes"]
    assert stored["derived_bytes"] < stored["stored_bytes"]
    assert figures["miscopy"]["corrupted"] == 1000
    assert figures["miscopy"]["detected_share"] >= 0.99


def test_the_command_prints_the_table_in_a_subprocess() -> None:
    code = "from refvault.evaluation import eval_command; eval_command()"
    done = subprocess.run(
        [sys.executable, "-c", code, "--trials", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "200"},  # rows on one line, as when piped
    )
    assert done.returncode == 0, done.stderr
    for row in (
        "identity substitution",
        "unauthorised disclosure",
        "cross-scope reads",
        "leaks at the LLM edge",
        "false absence conclusions",
        "omissions reported",
        "required-evidence gate",
        "0 unsupported commits",
        "latency per read",
        "bytes retained",
        "eval passed: 0 disclosures, 0 unsupported commits, 0 false absences",
    ):
        assert row in done.stdout, row


def test_a_kept_store_is_left_intact_and_can_be_evaluated_again(tmp_path: Path) -> None:
    store = tmp_path / "store"
    first = run_eval(seed=SEED, trials=1, store=store)
    assert first.store == str(store.resolve())
    second = run_eval(seed=SEED, trials=1, store=store)  # same seed, same store: tenants of its own each run
    assert second.properties() == first.properties() == EXPECTED
    with Vault.open(store) as vault:
        report = vault.verify()
    assert report.ok
    assert report.artifacts == second.figures["bytes"]["artifacts"] + first.figures["bytes"]["artifacts"]


def test_bad_input_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="trials"):
        run_eval(trials=0)
    with pytest.raises(InvalidArgument, match="embedded"):
        run_eval(store="postgresql://db/refvault", trials=1)
    runner = CliRunner()
    assert runner.invoke(eval_command, ["--trials", "0"]).exit_code == 2
    assert runner.invoke(eval_command, ["--store", "memory://x"]).exit_code == 2


# -- the instrument ----------------------------------------------------------------------------------------


def test_the_canary_scan_finds_excerpts_and_base64_and_nothing_else() -> None:
    canaries = Canaries()
    rng = random.Random(1)
    text = "".join(canaries.token(rng) + "\n" for _ in range(20))
    binary = rng.randbytes(3000)
    canaries.binary(binary)
    for start in range(0, len(text) - 57, 7):
        assert canaries.found("the tool said: " + text[start : start + 57]), start
    assert canaries.found(json.dumps({"b64": base64.b64encode(binary).decode()}))
    unrelated = random.Random(2)
    assert not canaries.found("".join(f"{unrelated.getrandbits(128):032x}\n" for _ in range(2000)))
    assert not canaries.found(text[:20] + " " + text[40:56])  # fragments shorter than a piece


# -- broken builds -----------------------------------------------------------------------------------------


def test_a_scope_check_that_leaks_is_a_disclosure_and_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    def leaky(self: Vault, scope: Any, artifact_id: str, *args: Any, **kwargs: Any) -> Any:
        for manifest in self.catalog.manifests():  # ignores the scope: the first manifest with the id
            if manifest.artifact_id == artifact_id:
                return manifest
        raise NotFound(artifact_id)

    monkeypatch.setattr(Vault, "_authorized", leaky)  # the one door every read goes through
    report = run_eval(seed=SEED, trials=1)
    kinds = report.properties()["unauthorised_disclosure"]["by_kind"]
    assert kinds["cross_scope"]["disclosed"] == 36  # every read path; only list (a scoped query) still holds
    assert kinds["foreign_ref"]["disclosed"] == 6
    assert report.disclosures >= 42
    assert report.exit_code == 1
    leaked = [a for a in report.attempts if a.name == "read_bytes as another tenant"]
    assert leaked[0].sinks == ("response",)  # the canaries were found where they landed
    result = CliRunner().invoke(eval_command, ["--trials", "1"])
    assert result.exit_code == 1
    assert "eval FAILED" in result.stdout


def test_a_gate_that_always_agrees_commits_unsupported_decisions_and_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    honest = evidence.check

    def agreeable(requirement: Any, descriptor: Any, *, at: Any, read: Any = None) -> evidence.Verdict:
        verdict = honest(requirement, descriptor, at=at, read=read)
        return evidence.Verdict(verdict.artifact_id, verdict.content_hash, verdict.evaluated_at, ())

    monkeypatch.setattr(evidence, "check", agreeable)
    report = run_eval(seed=SEED, trials=1)
    gate = report.properties()["evidence_gate"]
    # Only the refusals reread makes itself (gone, another tenant's, damaged bytes) still hold.
    assert (gate["unsupported_commits"], gate["caught"]) == (11, 3)
    assert report.unsupported_commits == 11
    assert report.exit_code == 1
    assert CliRunner().invoke(eval_command, ["--trials", "1", "--json"]).exit_code == 1


def test_a_guard_that_lets_everything_through_is_a_disclosure_at_the_edge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LeakGuard, "check", lambda self, request: request)
    report = run_eval(seed=SEED, trials=1)
    edge = [a for a in report.attempts if a.kind == "llm_edge"]
    assert sorted(a.name for a in edge if a.disclosed) == sorted(
        [
            "a tool echoes an excerpt of a value read by Ref",
            "a tool reads a sealed artifact around the Ref mechanism and echoes it",
            "a tool returns base64 of a protected binary",
            "an excerpt split across two tool results",
            "an excerpt inside JSON escaped twice",
        ]
    )
    assert all(a.sinks == ("model_request",) for a in edge if a.disclosed)
    assert report.disclosures == 5
    assert report.exit_code == 1


def test_reads_that_drop_omissions_give_false_absences(monkeypatch: pytest.MonkeyPatch) -> None:
    import refvault.read._access as access
    import refvault.read.records as records
    import refvault.read.windows as windows
    import refvault.toolbox.builtin as builtin

    honest = access.coverage

    def forgetful(descriptor: Any) -> dict[str, Any]:
        return {**honest(descriptor), "omissions": []}

    monkeypatch.setattr(records, "coverage", forgetful)
    monkeypatch.setattr(windows, "coverage", forgetful)
    monkeypatch.setattr(builtin, "coverage", forgetful)
    report = run_eval(seed=SEED, trials=1)
    absence = report.properties()["false_absence"]
    assert (absence["false_conclusions"], absence["conclusions_drawn"]) == (5, 7)
    assert report.properties()["omissions_reported"]["carried"] == 3  # the descriptor, describe tool, budget cut
    assert report.false_absences == 5
    assert report.exit_code == 1


def test_a_failure_that_discloses_nothing_is_counted_but_not_release_blocking(monkeypatch: pytest.MonkeyPatch) -> None:
    import refvault.read.cursors as cursors

    strict = cursors.check

    def lax(ring: Any, token: object, *, now: Any, binding: Any) -> dict[str, Any]:
        try:
            return strict(ring, token, now=now, binding=binding)
        except InvalidArgument:
            return {}  # accept any cursor: page from the start

    monkeypatch.setattr(cursors, "check", lax)
    report = run_eval(seed=SEED, trials=1)
    assert report.properties()["unauthorised_disclosure"]["by_kind"]["cursor"] == {
        "attempts": 10,
        "blocked": 3,  # replays from other scopes still meet NotFound first
        "disclosed": 0,
    }
    assert report.properties()["identity_substitution"]["detected"] == 13
    assert _blocking(report) == (0, 0, 0)
    assert report.exit_code == 0
