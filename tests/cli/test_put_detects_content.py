"""``refvault put`` detects what undeclared input holds; ``refvault read`` says what to do with a binary artifact."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest

from refvault.cli import main
from refvault.cli.console import PIPE_WIDTH
from refvault.ids import is_artifact_id
from tests.cli.test_cli import Cli, write
from tests.media import png_bytes

NOT_TEXT = b"\x00\x9f\x92\x96 opaque \xff"


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path / "store")


def jsonl(count: int) -> bytes:
    return b"".join(json.dumps({"n": i, "kind": "odd" if i % 2 else "even"}).encode() + b"\n" for i in range(count))


def media_type_of(descriptor: dict[str, object]) -> object:
    retrieval = descriptor["retrieval"]
    assert isinstance(retrieval, dict)
    return retrieval["media_type"]


def test_text_on_stdin_is_utf8_text_and_reads_back(cli: Cli) -> None:
    descriptor = cli.json("put", "-", input=b"text\n")
    assert media_type_of(descriptor) == "text/plain; charset=utf-8"
    shown = cli("read", str(descriptor["artifact_id"]))
    assert shown.exit_code == 0, shown.output
    assert shown.stdout == "text\n"


def test_jsonl_on_stdin_is_queryable(cli: Cli) -> None:
    descriptor = cli.json("put", "-", input=jsonl(30))
    assert media_type_of(descriptor) == "application/x-ndjson"
    where = json.dumps({"field": "kind", "op": "eq", "value": "odd"})
    page = cli.json("query", str(descriptor["artifact_id"]), "--where", where, "--limit", "3")
    assert [r["record"]["n"] for r in page["records"]] == [1, 3, 5]


@pytest.mark.parametrize(
    ("data", "media_type"),
    [
        (b"n,kind\n1,odd\n2,even\n", "text/csv"),
        (b'[{"n": 1}, {"n": 2}]', "application/json"),
    ],
)
def test_csv_and_json_arrays_on_stdin_are_queryable(cli: Cli, data: bytes, media_type: str) -> None:
    descriptor = cli.json("put", "-", input=data)
    assert media_type_of(descriptor) == media_type
    page = cli.json("query", str(descriptor["artifact_id"]))
    assert [r["record"]["n"] for r in page["records"]] == [1, 2]


def test_binary_on_stdin_stays_binary_and_a_png_is_named(cli: Cli) -> None:
    assert media_type_of(cli.json("put", "-", input=NOT_TEXT)) == "application/octet-stream"
    assert media_type_of(cli.json("put", "-", input="café\n".encode("latin-1"))) == "application/octet-stream"
    assert media_type_of(cli.json("put", "-", input=png_bytes())) == "image/png"


def test_an_explicit_media_type_always_wins(cli: Cli, tmp_path: Path) -> None:
    data = jsonl(5)
    assert media_type_of(cli.json("put", "-", "--media-type", "text/markdown", input=data)) == "text/markdown"
    path = write(tmp_path, "rows.txt", data)
    assert media_type_of(cli.put(path, "--media-type", "application/octet-stream")) == "application/octet-stream"


@pytest.mark.parametrize(
    ("name", "data", "media_type"),
    [
        ("rows.txt", jsonl(5), "application/x-ndjson"),  # the name says only "text": the bytes say more
        ("export", jsonl(5), "application/x-ndjson"),  # no suffix
        ("table.bin", b"a,b\n1,2\n", "text/csv"),  # the name says only "bytes"
        ("notes.txt", "café\n".encode("latin-1"), "text/plain"),  # named text that is not UTF-8 stays text
        ("notes.md", jsonl(5), "text/markdown"),  # a specific type from the name is kept
        ("rows.csv", b"a,b\n1,2,3\n", "text/csv"),
        ("image", png_bytes(), "image/png"),
        ("blob", NOT_TEXT, "application/octet-stream"),
    ],
)
def test_a_file_name_gives_a_specific_type_else_the_bytes_are_sniffed(
    cli: Cli, tmp_path: Path, name: str, data: bytes, media_type: str
) -> None:
    assert media_type_of(cli.put(write(tmp_path, name, data))) == media_type


class CountingInput(io.BytesIO):
    """Standard input that records the size of every read asked of it."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.asked: list[int] = []

    def read(self, size: int | None = -1, /) -> bytes:
        self.asked.append(-1 if size is None else size)
        return super().read(size)


def test_large_stdin_is_streamed_and_stored_unchanged(cli: Cli) -> None:
    data = jsonl(200_000)  # about 6 MiB
    assert len(data) > 4 << 20
    stdin = CountingInput(data)
    result = cli.runner.invoke(main, ["--store", str(cli.store), "put", "-", "--json"], input=stdin)
    assert result.exit_code == 0, result.output
    descriptor = json.loads(result.stdout)
    assert descriptor["content_hash"] == "sha256:" + hashlib.sha256(data).hexdigest()
    assert media_type_of(descriptor) == "application/x-ndjson"
    # Never the whole input at once: bounded reads only, as many as the input needs.
    assert all(0 <= size <= 1 << 20 for size in stdin.asked), stdin.asked[:5]
    assert sum(stdin.asked) >= len(data)


def test_reading_a_binary_artifact_suggests_putting_it_with_a_media_type(cli: Cli) -> None:
    artifact_id = str(cli.json("put", "-", input=NOT_TEXT)["artifact_id"])
    refused = cli("read", artifact_id)
    assert refused.exit_code == 2
    message = refused.stderr.replace("\n", " ")
    assert "application/octet-stream" in message
    assert "--media-type" in message
    assert f"refvault cat {artifact_id} | refvault put -" in message
    assert "opaque" not in refused.output  # never the content
    assert len(message) < PIPE_WIDTH * 3


def test_reading_a_record_file_points_to_query(cli: Cli, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.table({"n": [1, 2]}), sink)
    artifact_id = str(cli.put(write(tmp_path, "rows.parquet", sink.getvalue()))["artifact_id"])
    refused = cli("read", artifact_id)
    assert refused.exit_code == 2
    assert f"refvault query {artifact_id}" in refused.stderr
    assert "--media-type" not in refused.stderr


def test_put_quiet_prints_only_the_new_id(cli: Cli, tmp_path: Path) -> None:
    source = write(tmp_path, "notes.txt", b"hello\n")
    result = cli("put", "-q", str(source))
    assert result.exit_code == 0, result.output
    artifact_id = result.stdout.strip()
    assert is_artifact_id(artifact_id)
    assert result.stdout == artifact_id + "\n"
    assert cli.json("show", artifact_id)["artifact_id"] == artifact_id


def test_an_empty_input_is_stored_with_a_warning(cli: Cli) -> None:
    result = cli("put", "-q", "-", input=b"")
    assert result.exit_code == 0, result.output
    artifact_id = result.stdout.strip()
    assert is_artifact_id(artifact_id)
    assert f"warning: the input was empty; {artifact_id} holds 0 bytes" in result.stderr
    assert "warning" not in cli("put", "-q", "-", input=b"x").stderr
