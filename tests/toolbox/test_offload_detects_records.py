"""Offloaded ``str`` results are sniffed: record text becomes a queryable record artifact, other text stays text.

The preview says what the capture holds (``capture_status``) and, separately, whether the preview shows only part of
it (``preview_partial``); no preview field is named ``complete``.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import mcp.types as types
import pytest

from refvault import Ref, Scope, Toolbox, Vault
from refvault.integrations.mcp.offloading import ResultOffloader
from refvault.integrations.mcp.options import GatewayOptions
from tests.toolbox.test_offload import MODES, big_rows, big_text, dispatch, offloaded


def jsonl_export(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def csv_export(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


@pytest.mark.parametrize("mode", MODES)
def test_a_jsonl_export_returned_as_a_str_is_queryable(vault: Vault, scope: Scope, mode: str) -> None:
    box = Toolbox(vault)
    rows = big_rows()
    text = jsonl_export(rows)
    box.tool(lambda: text, name="export")

    shown = offloaded(dispatch(box, mode, "export", scope=scope))
    artifact_id = shown["artifact_id"]
    assert shown["media_type"] == "application/x-ndjson"
    assert vault.read_bytes(scope, artifact_id) == text.encode()  # the sniff changed nothing stored
    # The preview summarises the records, as it does for a list of dicts.
    assert shown["kind"] == "records"
    assert shown["records"] == len(rows)
    assert list(shown["schema"]) == ["id", "name", "score", "ok"]
    assert shown["first_rows"] == rows[: len(shown["first_rows"])]
    assert "query_artifact" in shown["read_more"]
    answer = json.loads(
        dispatch(
            box,
            mode,
            "query_artifact",
            {"artifact_id": artifact_id, "where": {"field": "score", "op": "eq", "value": 3}, "limit": 3},
            scope=scope,
        ).content
    )
    assert "error" not in answer, answer
    assert [r["record"] for r in answer["records"]] == [r for r in rows if r["score"] == 3][:3]


@pytest.mark.parametrize(
    ("render", "media_type"),
    [(csv_export, "text/csv"), (lambda rows: json.dumps(rows, indent=1), "application/json")],
)
def test_csv_and_json_array_text_become_record_artifacts(
    memory_vault: Vault, scope: Scope, render: Any, media_type: str
) -> None:
    box = Toolbox(memory_vault)
    rows = big_rows(3_000)
    text = render(rows)
    box.tool(lambda: text, name="export")

    shown = offloaded(box.call_sync("export", {}, scope=scope))
    assert shown["media_type"] == media_type
    assert shown["kind"] == "records"
    assert shown["records"] == 3_000
    page = json.loads(
        box.call_sync(
            "query_artifact", {"artifact_id": shown["artifact_id"], "record_range": [10, 12]}, scope=scope
        ).content
    )
    assert [r["record"]["id"] for r in page["records"]] == [10, 11]


def test_plain_text_stays_utf8_text(memory_vault: Vault, scope: Scope) -> None:
    box = Toolbox(memory_vault)
    text = big_text()
    box.tool(lambda: text, name="dump")

    shown = offloaded(box.call_sync("dump", {}, scope=scope))
    assert shown["media_type"] == "text/plain; charset=utf-8"
    assert shown["kind"] == "text"


def test_a_str_that_is_not_valid_utf8_is_still_stored_as_text(memory_vault: Vault, scope: Scope) -> None:
    box = Toolbox(memory_vault)
    text = big_text() + "\ud800 a lone surrogate\n"
    box.tool(lambda: text, name="dump")

    shown = offloaded(box.call_sync("dump", {}, scope=scope))
    assert shown["media_type"] == "text/plain; charset=utf-8"
    assert memory_vault.read_bytes(scope, shown["artifact_id"]) == text.encode("utf-8", "surrogatepass")


def test_jsonl_whose_records_cannot_be_derived_keeps_a_text_preview(memory_vault: Vault, scope: Scope) -> None:
    box = Toolbox(memory_vault)
    rows = [{"a": i, "A": i} for i in range(5_000)]  # names differing only in case: not queryable as records
    text = jsonl_export(rows)
    box.tool(lambda: text, name="export")

    shown = offloaded(box.call_sync("export", {}, scope=scope))
    assert shown["media_type"] == "application/x-ndjson"
    assert shown["kind"] == "text"
    assert text.startswith(shown["head"])


def test_a_sealed_jsonl_result_is_typed_but_shows_nothing(memory_vault: Vault, scope: Scope) -> None:
    box = Toolbox(memory_vault)
    secret = memory_vault.put(scope, b"token", media_type="text/plain", disclosure="sealed").artifact_id
    text = jsonl_export(big_rows())

    @box.tool
    def export(source: Ref) -> str:
        """An export derived from a sealed input."""
        return text

    shown = offloaded(box.call_sync("export", {"source": secret}, scope=scope))
    assert shown["disclosure"] == "sealed"
    assert shown["media_type"] == "application/x-ndjson"
    assert "first_rows" not in shown
    assert "item-1" not in json.dumps(shown)


# -- the preview's own flag, apart from the capture's status -----------------------------------------------------------


@pytest.mark.parametrize("size", [3, 5_000])
def test_the_preview_flag_is_apart_from_the_capture_status(memory_vault: Vault, scope: Scope, size: int) -> None:
    box = Toolbox(memory_vault, offload_tokens=1)
    rows = big_rows(size)
    box.tool(lambda: rows, name="export")

    shown = offloaded(box.call_sync("export", {}, scope=scope))
    assert "complete" not in shown
    assert shown["capture_status"] == "complete"
    assert shown["preview_partial"] is (size > 3)
    assert (shown["omits"] == "nothing") is not shown["preview_partial"]


# -- the MCP gateway's text offloading ---------------------------------------------------------------------------------


def test_the_gateway_offloads_an_upstream_jsonl_text_as_records(memory_vault: Vault, scope: Scope) -> None:
    rows = big_rows()
    text = jsonl_export(rows)
    offloader = ResultOffloader(memory_vault, scope, GatewayOptions(), "crm")
    result = types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    projected = offloader.offload(result, "export", "call_1")
    (block,) = projected.content
    assert isinstance(block, types.TextContent)
    shown = json.loads(block.text)["offloaded"]
    assert shown["media_type"] == "application/x-ndjson"
    assert shown["kind"] == "records"
    assert shown["records"] == len(rows)
    assert memory_vault.read_bytes(scope, shown["artifact_id"]) == text.encode()
