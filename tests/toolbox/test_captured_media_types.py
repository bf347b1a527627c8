"""The media type a tool's returned bytes are captured under: detected from the bytes unless the tool names one.

Runs through ``await box.call`` and ``box.call_sync`` on every backend. The stored bytes are always exactly
the bytes returned; only the media type recorded beside them is chosen here.
"""

import base64
import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest

from refvault import Artifact, Observation, Scope, Toolbox, Vault
from tests.media import png_bytes
from tests.toolbox.test_offload import dispatch

MODES = ("call", "call_sync")
NDJSON = "application/x-ndjson"
ROWS = [{"region": ["eu", "us"][i % 2], "code": i} for i in range(8)]
JSONL = b"".join(json.dumps(row).encode() + b"\n" for row in ROWS)
UNKNOWN_BINARY = b"\x00\x01\x02 no known signature \xff\xfe" * 20


def captured(observation: Observation) -> dict[str, Any]:
    assert not observation.is_error, observation.content
    [summary] = observation.artifacts
    return dict(summary)


def box_returning(vault: Vault, result: Callable[[], object]) -> Toolbox:
    box = Toolbox(vault)

    @box.tool
    def produce() -> object:
        """Return the prepared result."""
        return result()

    return box


@pytest.mark.parametrize("wrap", ["bytes", "artifact"])
@pytest.mark.parametrize("mode", MODES)
def test_png_bytes_from_a_tool_are_stored_as_an_image_the_model_can_load(
    vault: Vault, scope: Scope, mode: str, wrap: str
) -> None:
    image = png_bytes(4, 3)
    box = box_returning(vault, lambda: image if wrap == "bytes" else Artifact(image, filename="shot.png"))

    summary = captured(dispatch(box, mode, "produce", scope=scope))
    assert summary["media_type"] == "image/png"
    assert summary["content_hash"] == "sha256:" + hashlib.sha256(image).hexdigest()
    assert vault.read_bytes(scope, summary["artifact_id"]) == image

    loaded = dispatch(box, mode, "load_artifacts", {"artifact_ids": [summary["artifact_id"]]}, scope=scope)
    [result] = json.loads(loaded.content)["results"]
    assert result["status"] == "loaded"
    assert result["kind"] == "image"
    [picture] = [p for p in loaded.parts if p["type"] == "image"]
    assert picture["media_type"] == "image/png"
    assert base64.b64decode(picture["data"]) == image


@pytest.mark.parametrize("wrap", ["bytes", "bytearray", "artifact"])
@pytest.mark.parametrize("mode", MODES)
def test_jsonl_bytes_from_a_tool_are_stored_as_records_the_model_can_query(
    vault: Vault, scope: Scope, mode: str, wrap: str
) -> None:
    results = {"bytes": lambda: JSONL, "bytearray": lambda: bytearray(JSONL), "artifact": lambda: Artifact(JSONL)}
    box = box_returning(vault, results[wrap])

    summary = captured(dispatch(box, mode, "produce", scope=scope))
    assert summary["media_type"] == NDJSON
    assert vault.read_bytes(scope, summary["artifact_id"]) == JSONL

    where = {"field": "region", "op": "eq", "value": "us"}
    arguments = {"artifact_id": summary["artifact_id"], "where": where}
    answer = dispatch(box, mode, "query_artifact", arguments, scope=scope)
    assert not answer.is_error, answer.content
    records = [row["record"] for row in json.loads(answer.content)["records"]]
    assert records == [row for row in ROWS if row["region"] == "us"]


@pytest.mark.parametrize(
    ("data", "media_type"),
    [
        (JSONL, "text/plain"),  # records the tool chose to call text stay text
        (png_bytes(2, 2), "application/octet-stream"),  # an explicit octet-stream is not sniffed over either
        (b"<html><script>alert(1)</script></html>", "text/html"),  # the caller's own type, active or not
    ],
)
@pytest.mark.parametrize("mode", MODES)
def test_an_explicit_media_type_is_stored_as_given(
    vault: Vault, scope: Scope, mode: str, data: bytes, media_type: str
) -> None:
    box = box_returning(vault, lambda: Artifact(data, media_type=media_type))
    summary = captured(dispatch(box, mode, "produce", scope=scope))
    assert summary["media_type"] == vault.describe(scope, summary["artifact_id"]).media_type
    assert summary["media_type"].split(";")[0] == media_type
    assert vault.read_bytes(scope, summary["artifact_id"]) == data


@pytest.mark.parametrize("mode", MODES)
def test_unrecognised_binary_bytes_stay_octet_stream(vault: Vault, scope: Scope, mode: str) -> None:
    box = box_returning(vault, lambda: UNKNOWN_BINARY)
    summary = captured(dispatch(box, mode, "produce", scope=scope))
    assert summary["media_type"] == "application/octet-stream"
    assert vault.read_bytes(scope, summary["artifact_id"]) == UNKNOWN_BINARY


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"<!DOCTYPE html><html><body><script>alert(1)</script></body></html>", "text/plain; charset=utf-8"),
        (b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>', "text/plain; charset=utf-8"),
        (b"region,code\neu,1\nus,2\n", "text/csv"),
        (b'[{"a": 1}, {"a": 2}]', "application/json"),
    ],
)
def test_detection_never_yields_an_active_type(data: bytes, expected: str) -> None:
    detected = Artifact(data).stored_media_type()
    assert detected == expected
    assert Artifact(data).media_type is None  # the value itself is unchanged: None means "detect"
