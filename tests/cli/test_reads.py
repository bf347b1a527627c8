"""``refvault read`` and ``refvault query``: the read API from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_cli import Cli


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path / "store")


def _records(tmp_path: Path, cli: Cli) -> str:
    rows = [{"n": i, "kind": "odd" if i % 2 else "even"} for i in range(30)]
    path = tmp_path / "rows.ndjson"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    artifact_id: str = cli.put(path, "--media-type", "application/x-ndjson")["artifact_id"]
    return artifact_id


def test_query_pages_with_cursors_and_reports_coverage(tmp_path: Path, cli: Cli) -> None:
    artifact_id = _records(tmp_path, cli)
    where = json.dumps({"field": "kind", "op": "eq", "value": "odd"})
    first = cli.json("query", artifact_id, "--where", where, "--order", "n:desc", "--limit", "4", "--fields", "n")
    assert [r["record"] for r in first["records"]] == [{"n": 29}, {"n": 27}, {"n": 25}, {"n": 23}]
    assert first["scan_complete"] is True
    second = cli.json(
        "query", artifact_id, "--where", where, "--order", "n:desc", "--limit", "4", "--fields", "n",
        "--cursor", first["next_cursor"],
    )  # fmt: skip
    assert [r["record"]["n"] for r in second["records"]] == [21, 19, 17, 15]
    plain = cli("query", artifact_id, "--where", where, "--limit", "2")
    assert plain.exit_code == 0
    assert [json.loads(line)["index"] for line in plain.stdout.splitlines()] == [1, 3]
    assert "scanned" in plain.stderr
    assert "--cursor rvc1." in plain.stderr


def test_query_errors_are_typed_and_exit_2(tmp_path: Path, cli: Cli) -> None:
    artifact_id = _records(tmp_path, cli)
    result = cli("query", artifact_id, "--where", '{"field": "ghost", "op": "eq", "value": 1}')
    assert result.exit_code == 2
    assert "unknown field 'ghost'" in result.stderr
    assert cli("query", artifact_id, "--where", "not json").exit_code == 2
    forged = cli("query", artifact_id, "--cursor", "rvc1.AAAA.BBBB", "--json")
    assert forged.exit_code == 2
    assert json.loads(forged.stdout)["error"]["type"] == "InvalidCursor"


def test_read_windows_and_grep(tmp_path: Path, cli: Cli) -> None:
    path = tmp_path / "log.txt"
    path.write_text("".join(f"line {i} {'ERROR' if i % 10 == 3 else 'ok'}\n" for i in range(100)))
    artifact_id = cli.put(path)["artifact_id"]
    window = cli("read", artifact_id, "--lines", "2", "4")
    assert window.stdout == "line 2 ok\nline 3 ERROR\n"
    assert "lines 2-4 of 100" in window.stderr
    found = cli.json("read", artifact_id, "--grep", "ERROR")
    assert [m["line"] for m in found["matches"]] == [3, 13, 23, 33, 43, 53, 63, 73, 83, 93]
    assert found["scan_complete"] is True
    image = tmp_path / "x.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    png = cli.put(image)["artifact_id"]
    refused = cli("read", png)
    assert refused.exit_code == 2
    assert (
        refused.stderr == f"error: artifact {png} is binary (image/png), not text: 'refvault cat {png} > FILE'"
        " writes its bytes\n"
    )
