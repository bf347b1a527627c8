"""docs/tools.md is the render of the model's tool schemas and the query checker's operators, so it cannot drift."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from refvault import Scope, Toolbox, Vault
from refvault.devtools import tools_doc

SCOPE = Scope("acme", "ana", "s1")


def test_docs_tools_page_equals_the_render_of_the_current_schemas() -> None:
    assert tools_doc.DOC_PATH.read_text(encoding="utf-8") == tools_doc.render(), (
        "docs/tools.md is out of date: run `python -m refvault.devtools.tools_doc`"
    )


def test_the_page_names_every_tool_and_argument_the_model_sees() -> None:
    with Vault.open("memory://") as vault:
        schemas = Toolbox(vault).schemas("mcp")
    page = tools_doc.render()
    for schema in schemas:
        assert f"## `{schema['name']}`" in page
        for argument in schema["inputSchema"]["properties"]:
            assert f"| `{argument}` |" in page


def test_check_exits_1_naming_the_file_when_it_differs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "tools.md"
    page.write_text(tools_doc.render() + "an edit by hand\n", encoding="utf-8")
    assert tools_doc.main(["--check", "--output", str(page)]) == 1
    assert f"{page} is out of date" in capsys.readouterr().err


def test_check_exits_1_when_the_page_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert tools_doc.main(["--check", "--output", str(tmp_path / "tools.md")]) == 1
    assert "is missing" in capsys.readouterr().err


def test_writing_then_checking_agrees(tmp_path: Path) -> None:
    page = tmp_path / "tools.md"
    assert tools_doc.main(["--output", str(page)]) == 0
    assert tools_doc.main(["--check", "--output", str(page)]) == 0


def test_an_undescribed_argument_fails_the_render(monkeypatch: pytest.MonkeyPatch) -> None:
    arguments = dict(tools_doc.ARGUMENTS)
    del arguments[("query_artifact", "cursor")]
    monkeypatch.setattr(tools_doc, "ARGUMENTS", arguments)
    with pytest.raises(ValueError, match=r"undescribed \[\('query_artifact', 'cursor'\)\]"):
        tools_doc.render()


def test_a_described_argument_no_schema_has_fails_the_render(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tools_doc, "ARGUMENTS", {**tools_doc.ARGUMENTS, ("read_artifact", "gone"): ("x", "y")})
    with pytest.raises(ValueError, match="no longer in a schema"):
        tools_doc.render()


def test_operators_differing_from_the_query_checker_fail_the_render(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tools_doc, "OPERATORS", {**tools_doc.OPERATORS, "startswith": ("x", "y")})
    with pytest.raises(ValueError, match="differ from the query checker"):
        tools_doc.render()


def _events_box(vault: Vault) -> tuple[Toolbox, str]:
    rows = [
        {"event_id": i, "ts": f"2026-11-06T04:{i:02d}:00Z", "region": ["eu-west", "us-east"][i % 2],
         "severity": ["info", "error", "critical"][i % 3], "note": None if i % 4 else "retry"}
        for i in range(40)
    ]  # fmt: skip
    data = "\n".join(json.dumps(row) for row in rows).encode()
    artifact_id = vault.put(SCOPE, data, media_type="application/x-ndjson").artifact_id
    return Toolbox(vault), artifact_id


def test_the_pages_query_example_runs_as_shown() -> None:
    with Vault.open("memory://") as vault:
        box, artifact_id = _events_box(vault)
        arguments = {**json.loads(tools_doc.EXAMPLE_QUERY), "artifact_id": artifact_id}
        observation = box.call_sync("query_artifact", arguments, scope=SCOPE)
    assert not observation.is_error, observation.content
    answer = json.loads(observation.content)
    records = [row["record"] for row in answer["records"]]
    expected = [i for i in range(39, -1, -1) if i % 2 == 0 and i % 3 != 0]  # eu-west, error or critical, ts desc
    assert [r["event_id"] for r in records] == expected
    assert set(records[0]) == {"event_id", "ts", "severity"}
    assert answer["scan_complete"] is True


@pytest.mark.parametrize("op", list(tools_doc.OPERATORS))
def test_every_documented_operator_is_accepted_by_a_query(op: str) -> None:
    condition = {
        "contains": {"field": "region", "op": "contains", "value": "west"},
        "in": {"field": "event_id", "op": "in", "value": [1, 2]},
        "is_null": {"field": "note", "op": "is_null"},
    }.get(op, {"field": "event_id", "op": op, "value": 3})
    with Vault.open("memory://") as vault:
        box, artifact_id = _events_box(vault)
        observation = box.call_sync("query_artifact", {"artifact_id": artifact_id, "where": condition}, scope=SCOPE)
    assert not observation.is_error, observation.content
    assert json.loads(observation.content)["returned_records"] > 0
