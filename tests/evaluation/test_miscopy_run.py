"""The eval's mis-copy run: 1,000 ids with one or two characters corrupted, and unknown ids as controls."""

from __future__ import annotations

import random

from rich.console import Console

from refvault import Scope, Vault
from refvault.evaluation import miscopy
from refvault.evaluation.report import EvalReport
from refvault.ids import id_distance


def test_the_run_detects_the_miscopies_suggests_the_originals_and_spares_unknown_ids(embedded_vault: Vault) -> None:
    figures = miscopy.run(embedded_vault, Scope("eval", "ana", "miscopy"), seed=7)
    assert figures["corrupted"] == 1000
    assert figures["artifacts"] == miscopy.ARTIFACTS
    assert sum(row["ids"] for row in figures["by_edits"].values()) == 1000
    assert figures["by_edits"]["1"]["detected"] == figures["by_edits"]["1"]["ids"]  # one edit: always caught
    assert figures["detected_share"] >= 0.99
    assert figures["suggested_share"] >= 0.98
    assert figures["detected_share"] == figures["detected"] / 1000
    assert figures["suggested"] <= figures["detected"]
    assert figures["wrong_suggestions"] == 0
    assert figures["resolved_to_another_id"] == 0
    assert figures["controls"] == 1000
    assert figures["controls_called_miscopied"] == 0
    assert figures["controls_called_miscopied_share"] == 0.0


def test_corrupt_makes_one_or_two_edits_and_never_returns_the_original() -> None:
    rng = random.Random(1)
    original = "art_" + "abcdefghijklmnopqrstuvwxyz234567"[:28]
    for edits in (1, 2):
        for _ in range(500):
            bad = miscopy.corrupt(original, edits, rng)
            assert bad != original
            assert (
                1 <= id_distance(bad, original, bound=3) <= (1 if edits == 1 else 3)
            )  # OSA: a swap then a drop can be 3


def test_the_report_prints_the_miscopy_figures() -> None:
    figures = {
        "miscopy": {
            "corrupted": 1000,
            "detected_share": 0.998,
            "suggested_share": 0.997,
            "wrong_suggestions": 0,
            "controls": 1000,
            "controls_called_miscopied": 0,
        }
    }
    report = EvalReport(seed=1, trials=1, store=None, attempts=[], figures=figures)
    console = Console(width=400, record=True)
    for renderable in report.renderables():
        console.print(renderable)
    text = console.export_text()
    assert "mis-copied ids: 1,000 ids with 1-2 characters changed, dropped, doubled or swapped" in text
    assert "99.8% detected as mis-copied, 99.7% given the original as the suggestion (0 wrong suggestions)" in text
    assert "0 of 1,000 unknown ids called mis-copied" in text
    assert report.to_dict()["figures"]["miscopy"]["detected_share"] == 0.998
