"""``cat`` and ``read`` on sealed artifacts: the help of both says why one serves them and the other refuses."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from refvault.cli import main


def run(*args: str, input: bytes | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def one_line(text: str) -> str:
    return " ".join(text.split())


def test_cat_help_says_it_is_the_operator_tool_that_serves_sealed_bytes() -> None:
    text = one_line(run("cat", "--help").stdout)
    assert "Sealed artifacts are written too: the CLI is an operator tool." in text
    assert "'refvault read' is the model-facing selective read" in text
    assert "it refuses sealed artifacts" in text


def test_read_help_says_it_is_the_model_facing_read_that_refuses_sealed_artifacts() -> None:
    text = one_line(run("read", "--help").stdout)
    assert "Like the model's read, this refuses sealed artifacts (a model may only use them by reference)" in text
    assert "'refvault cat ID' writes their bytes for an operator" in text


def test_read_of_a_sealed_artifact_points_the_operator_to_cat(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    put = run("--store", store, "put", "-", "--sealed", "--media-type", "text/plain", "--json", input=b"runbook")
    artifact_id = json.loads(put.stdout)["artifact_id"]
    refused = run("--store", store, "read", artifact_id)
    assert refused.exit_code == 1
    assert f"artifact {artifact_id} is sealed" in refused.stderr
    assert f"'refvault cat {artifact_id}' writes its bytes for an operator" in refused.stderr
    assert "Ref parameter" not in refused.stderr
    assert "runbook" not in refused.output
    assert run("--store", store, "cat", artifact_id).stdout_bytes == b"runbook"
