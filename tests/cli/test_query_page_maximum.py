"""``refvault query --limit``: a page holds at most ``MAX_LIMIT`` records; a larger limit is refused, not cut."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from refvault.limits import MAX_LIMIT
from tests.cli.test_cli import Cli


@pytest.fixture
def records(tmp_path: Path) -> tuple[Cli, str]:
    cli = Cli(tmp_path / "store")
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"n": n}) + "\n" for n in range(MAX_LIMIT + 5)))
    return cli, cli.put(path)["artifact_id"]


@pytest.mark.parametrize("limit", [MAX_LIMIT + 1, 5000, 0, -3])
def test_a_limit_outside_one_page_is_refused_naming_the_maximum(records: tuple[Cli, str], limit: int) -> None:
    cli, artifact_id = records
    result = cli("query", artifact_id, "--limit", str(limit))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: --limit {limit}: a page holds 1 to {MAX_LIMIT} records")
    assert "--cursor" in result.stderr
    assert result.stdout == ""


def test_the_maximum_limit_fills_one_page_and_offers_the_next(records: tuple[Cli, str]) -> None:
    cli, artifact_id = records
    result = cli("query", artifact_id, "--limit", str(MAX_LIMIT))
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) == MAX_LIMIT
    assert f"stopped at the page limit ({MAX_LIMIT})" in result.stderr
    assert "next page: --cursor " in result.stderr
