"""The eval's long run: the context working set keeps 200 medium results within the model, losing nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

from refvault import Scope, Vault
from refvault.evaluation import long_run
from refvault.evaluation.report import EvalReport


def test_the_working_set_keeps_a_long_run_within_the_model_and_every_reload_is_byte_exact(tmp_path: Path) -> None:
    with Vault.open(tmp_path / "store") as vault:
        figures = asyncio.run(long_run.run(vault, Scope("eval-acme", "ana", "long-run"), 20261106))
    plain, kept = figures["without"], figures["with"]
    assert figures["calls"] == 200
    assert 2_000 <= figures["result_bytes"]["min"] < figures["result_bytes"]["max"] <= 40_000
    # Without it the run outgrows the model; with it no request does, and most stay within budget.
    assert plain["requests_over_context"] > 100
    assert plain["reloads"] == 0
    assert kept["requests_over_context"] == 0
    assert kept["peak_request_tokens"] <= figures["model_context_tokens"]
    assert kept["over_budget_requests"] * 10 < kept["requests"]
    assert kept["total_request_tokens"] * 5 < plain["total_request_tokens"]
    # The model went back to cleared results; each came back exactly; the hot ones tripped the guard.
    assert kept["reloads"] > 20
    assert kept["reloads_lossless"] == kept["reloads"] == kept["restored"]
    assert kept["thrash_events"] >= 1
    assert kept["requests"] == plain["requests"] + kept["reloads"]  # one more request after each reload
    line = next(
        str(r)
        for r in EvalReport(seed=1, trials=1, store=None, attempts=[], figures={"working_set": figures})._figure_lines()
    )
    assert line.startswith("long run (200 tool calls")
    assert f"{kept['reloads']} reloads ({kept['reloads']} byte-exact)" in line
