"""``refvault query --order``: a field name containing a colon is kept."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_cli import Cli
from tests.read.record_helpers import NDJSON, _ndjson


def test_cli_order_keeps_a_field_name_containing_a_colon(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "store")
    path = tmp_path / "rows.ndjson"
    path.write_bytes(_ndjson([{"a": 1, "a:b": 2}, {"a": 2, "a:b": 1}]))
    artifact_id = cli.put(path, "--media-type", NDJSON)["artifact_id"]
    answer = cli.json("query", artifact_id, "--order", "a:b")  # today: ordered by "a"
    assert [r["index"] for r in answer["records"]] == [1, 0]
