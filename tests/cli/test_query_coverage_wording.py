"""``refvault query``'s note on stderr says what a page covers and never more: a page cut at ``--limit`` is not
a complete scan, and "scan complete" appears only when every record of the selection was examined."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from refvault.cli import main

ODD = json.dumps({"field": "kind", "op": "eq", "value": "odd"})


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def records(tmp_path: Path, store: Path) -> str:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"n": n, "kind": "odd" if n % 2 else "even"}) + "\n" for n in range(710)))
    put = CliRunner().invoke(main, ["--store", str(store), "put", str(path), "--json"], catch_exceptions=False)
    artifact_id: str = json.loads(put.stdout)["artifact_id"]
    return artifact_id


def query(store: Path, *args: str) -> Result:
    result = CliRunner().invoke(main, ["--store", str(store), "query", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_a_page_cut_at_the_limit_says_so_and_never_claims_a_complete_scan(store: Path, records: str) -> None:
    result = query(store, records, "--limit", "3")
    note, cursor = result.stderr.splitlines()
    assert note.startswith("3 records shown, stopped at the page limit (3) with 3 of 710 records scanned; more may")
    assert "scan complete" not in note
    assert "every match" not in note
    assert "3 of 710 records;" not in note  # the old wording read as "3 matches of 710"
    assert cursor.startswith("next page: --cursor rvc1.")


def test_a_filtered_page_cut_at_the_limit_names_what_was_scanned(store: Path, records: str) -> None:
    note = query(store, records, "--where", ODD, "--limit", "3").stderr.splitlines()[0]
    assert note.startswith("3 records shown, stopped at the page limit (3) with ")
    assert " of 710 records scanned; more may follow" in note


def test_a_complete_scan_says_every_match_was_shown(store: Path, records: str) -> None:
    last = query(store, records, "--where", ODD, "--range", "700", "710", "--limit", "10").stderr
    assert last.startswith("5 records shown: every match in the range (scan complete: 10 of 710 records examined)")
    assert "next page" not in last
    everything = query(store, records, "--where", ODD, "--limit", "1000").stderr
    assert everything.startswith("355 records shown: every match (scan complete: 710 of 710 records examined)")


def test_the_last_page_after_a_cursor_is_complete(store: Path, records: str) -> None:
    first = json.loads(query(store, records, "--range", "0", "6", "--limit", "4", "--json").stdout)
    second = query(store, records, "--range", "0", "6", "--limit", "4", "--cursor", first["next_cursor"])
    assert second.stderr.startswith("2 records shown: every match in the range (scan complete: ")
