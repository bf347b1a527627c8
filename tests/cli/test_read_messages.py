"""What ``refvault read`` and ``query`` say besides the content: refusals of non-text artifacts, what the capture
covers, and "not found" naming the scope used. Said in the CLI's own terms, never the model tools'."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from refvault.model import Scope
from refvault.vault import Vault
from tests.cli.test_cli import Cli, not_found

MODEL_TOOL_WORDS = ("read_artifact", "query_artifact", "Ref parameter", "a tool that takes")


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path / "store")


def put_bytes(cli: Cli, data: bytes, *args: str) -> str:
    result = cli("put", "-", "-q", *args, input=data)
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


@pytest.mark.parametrize(
    ("data", "media_type"),
    [(b"\x89PNG\r\n\x1a\n" + bytes(64), "image/png"), (b"%PDF-1.7\n" + bytes(64), "application/pdf")],
)
def test_a_binary_artifact_is_refused_as_binary_with_cat_to_a_file(cli: Cli, data: bytes, media_type: str) -> None:
    artifact_id = put_bytes(cli, data, "--media-type", media_type)
    for args in ([], ["--grep", "x"]):
        result = cli("read", artifact_id, *args)
        assert result.exit_code == 2
        assert result.stderr == (
            f"error: artifact {artifact_id} is binary ({media_type}), not text:"
            f" 'refvault cat {artifact_id} > FILE' writes its bytes\n"
        )
        assert not any(word in result.stderr for word in MODEL_TOOL_WORDS)


def test_unknown_bytes_are_refused_with_the_way_to_store_them_as_text(cli: Cli) -> None:
    artifact_id = put_bytes(cli, b"plain words", "--media-type", "application/octet-stream")
    result = cli("read", artifact_id)
    assert result.exit_code == 2
    assert "application/octet-stream (unknown bytes)" in result.stderr
    assert f"'refvault cat {artifact_id} > FILE' writes its bytes" in result.stderr
    assert f"refvault cat {artifact_id} | refvault put - --media-type 'text/plain; charset=utf-8'" in result.stderr
    assert "plain words" not in result.stderr
    assert not any(word in result.stderr for word in MODEL_TOOL_WORDS)


def test_records_stored_in_a_non_text_format_point_to_query(cli: Cli, tmp_path: Path) -> None:
    import pyarrow as pa  # a dev dependency
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"n": [1, 2]}), path)
    artifact_id = cli.put(path)["artifact_id"]
    result = cli("read", artifact_id)
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: artifact {artifact_id} holds records (application/vnd.apache.parquet), not text:"
        f" select them with 'refvault query {artifact_id}'\n"
    )


def test_a_sealed_artifact_is_refused_in_cli_terms(cli: Cli) -> None:
    artifact_id = put_bytes(cli, b"runbook", "--sealed", "--media-type", "text/plain")
    result = cli("read", artifact_id)
    assert result.exit_code == 1
    assert f"'refvault cat {artifact_id}' writes its bytes for an operator" in result.stderr
    assert not any(word in result.stderr for word in MODEL_TOOL_WORDS)


def test_an_unrecorded_capture_status_is_said_in_plain_words(cli: Cli, tmp_path: Path) -> None:
    text_id = put_bytes(cli, b"a\nb\n", "--media-type", "text/plain")
    path = tmp_path / "rows.jsonl"
    path.write_text('{"n": 1}\n{"n": 2}\n')
    records_id = cli.put(path)["artifact_id"]
    for args in (["read", text_id], ["read", text_id, "--grep", "a"], ["query", records_id]):
        stderr = cli(*args).stderr
        assert "capture completeness not recorded" in stderr
        assert "capture unknown" not in stderr


def test_a_partial_capture_and_its_omissions_are_said(cli: Cli) -> None:
    with Vault.open(cli.store) as vault:
        partial = vault.put(
            Scope("local", "local", "local"),
            b"first 2 of 9 lines\nsecond\n",
            media_type="text/plain",
            completeness={"status": "partial", "omissions": [{"reason": "size cap", "lines": 7}]},
        )
    stderr = cli("read", partial.artifact_id).stderr
    assert "the stored capture is PARTIAL" in stderr
    assert json.dumps([{"lines": 7, "reason": "size cap"}]) in stderr


@pytest.mark.parametrize("command", [["read"], ["read", "--grep", "x"], ["query"], ["show"], ["cat"], ["rm"]])
def test_not_found_names_the_scope_used_and_how_to_choose_one(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    elsewhere = put_bytes(cli, b"tenant a's text\n", "--media-type", "text/plain", "--tenant", "a")
    never = "art_" + "b" * 26
    monkeypatch.setenv("REFVAULT_TENANT", "b")
    monkeypatch.setenv("REFVAULT_SESSION", "s1")
    answers = {}
    for artifact_id in (elsewhere, never):
        result = cli(command[0], artifact_id, *command[1:])
        assert result.exit_code == 1
        answers[artifact_id] = result.stderr.replace(artifact_id, "ID")
        assert result.stderr == f"error: {not_found(artifact_id, 'b/local/s1')}\n"
    assert answers[elsewhere] == answers[never]  # nothing tells an id of another scope from one that never existed
