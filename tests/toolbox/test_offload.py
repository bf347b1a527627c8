"""Offload (issue 4): an oversized tool result is captured and the model sees a bounded, honest preview.

Every test dispatches through ``await box.call`` and/or ``box.call_sync`` on the memory and embedded backends.
"""

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from refvault import Observation, Ref, Scope, Toolbox, ToolEvent, Vault
from refvault.blobs.memory import MemoryBlobStore
from refvault.catalog.memory import MemoryCatalog
from refvault.errors import StorageError
from refvault.read.previews import PREVIEW_SLACK, TRUNCATION_SLACK, estimate_tokens

MODES = ("call", "call_sync")
BUILTINS = ("describe_artifact", "list_artifacts", "read_artifact", "query_artifact", "load_artifacts")
CANARY = "CANARY-7f3a9e-sealed-секрет"
OFFLOADED_WRAPPER = len(json.dumps({"offloaded": None})) - len("null")  # '{"offloaded": }'
FAILED_WRAPPER = len(json.dumps({"offload_failed": None})) - len("null")


# -- helpers ---------------------------------------------------------------------------


def dispatch(
    box: Toolbox,
    mode: str,
    name: str,
    arguments: str | Mapping[str, Any] = "{}",
    *,
    scope: Scope,
    run_id: str | None = "run_1",
    tool_call_id: str | None = "call_1",
) -> Observation:
    """One dispatch through ``await box.call`` or ``box.call_sync``."""
    if mode == "call":
        return asyncio.run(box.call(name, arguments, scope=scope, run_id=run_id, tool_call_id=tool_call_id))
    return box.call_sync(name, arguments, scope=scope, run_id=run_id, tool_call_id=tool_call_id)


def offloaded(observation: Observation) -> dict[str, Any]:
    assert not observation.is_error, observation.content
    body = json.loads(observation.content)
    assert set(body) == {"offloaded"}, body.keys()
    shown = body["offloaded"]
    assert isinstance(shown, dict)
    return shown


def failed(observation: Observation) -> dict[str, Any]:
    body = json.loads(observation.content)
    assert set(body) == {"offload_failed"}, body.keys()
    shown = body["offload_failed"]
    assert isinstance(shown, dict)
    return shown


def numbered_lines(count: int, width: int = 60) -> str:
    return "".join(f"line {i:06d} " + "w" * (width - 13) + "\n" for i in range(count))


def big_text() -> str:
    text = numbered_lines(30_000)
    assert estimate_tokens(text) > 20_000  # above the default threshold
    return text


def big_rows(count: int = 5_000) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"item-{i}", "score": i % 7, "ok": i % 2 == 0} for i in range(count)]


def compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def preview_bound(preview_chars: int) -> int:
    return max(preview_chars, PREVIEW_SLACK) + OFFLOADED_WRAPPER


def failing_put(*args: Any, **kwargs: Any) -> Any:
    raise StorageError("the disk is full")


# -- the offloaded observation ----------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_huge_string_is_captured_and_observed_as_a_preview(vault: Vault, scope: Scope, mode: str) -> None:
    box = Toolbox(vault)
    text = big_text()
    events: list[ToolEvent] = []
    box.add_sink(events.append)

    @box.tool
    def dump() -> str:
        """Dump a log."""
        return text

    observation = dispatch(box, mode, "dump", scope=scope)
    shown = offloaded(observation)
    assert len(observation.content) < len(text) // 50
    (summary,) = observation.artifacts
    artifact_id = summary["artifact_id"]
    assert shown["artifact_id"] == artifact_id
    assert shown["media_type"] == summary["media_type"] == "text/plain; charset=utf-8"
    assert shown["size"] == summary["size"] == len(text.encode())
    assert shown["disclosure"] == summary["disclosure"] == "model"
    assert shown["preview_partial"] is True
    assert shown["capture_status"] == "complete"
    assert shown["covers"]
    assert shown["omits"]
    assert shown["omits"] != "nothing"
    assert "read_artifact" in shown["read_more"]
    assert artifact_id in shown["read_more"]
    assert observation.parts == ()
    # The artifact holds exactly the bytes of the result, captured for the model.
    assert vault.read_bytes(scope, artifact_id) == text.encode()
    descriptor = vault.describe(scope, artifact_id)
    assert descriptor.disclosure == "model"
    assert descriptor.completeness["status"] == "complete"
    assert descriptor.to_dict()["tool_call_id"] == "call_1"
    # Events and the trajectory name the artifact and carry no content.
    assert [e.kind for e in events] == ["tool_started", "tool_finished"]
    assert events[-1].artifacts == (artifact_id,)
    assert box.trajectory("run_1") == events
    assert "line 000000" not in json.dumps([e.to_dict() for e in events])


@pytest.mark.parametrize("mode", MODES)
def test_a_text_preview_shows_head_and_tail_lines_and_the_line_count(vault: Vault, scope: Scope, mode: str) -> None:
    box = Toolbox(vault)
    text = big_text()
    box.tool(lambda: text, name="dump")

    shown = offloaded(dispatch(box, mode, "dump", scope=scope))
    # Issue 4: "text -> head and tail lines". A str result is stored as text/plain and must be previewed as text.
    assert shown["kind"] == "text", f"a str result is previewed as {shown['kind']!r}, not as text"
    assert shown["lines"] == 30_000
    assert text.startswith(shown["head"])
    assert shown["head"].startswith("line 000000 ")
    assert text.endswith(shown["tail"])
    assert shown["tail"].endswith(text.splitlines(keepends=True)[-1])
    start, end = shown["head_lines"]
    assert start == 0
    assert 0 < end < 30_000
    assert shown["tail_lines"][1] == 30_000


@pytest.mark.parametrize("mode", MODES)
def test_the_omitted_middle_is_readable_with_the_read_tools(vault: Vault, scope: Scope, mode: str) -> None:
    box = Toolbox(vault)
    lines = numbered_lines(30_000).splitlines(keepends=True)
    lines[15_000] = "the needle is here\n"
    text = "".join(lines)
    box.tool(lambda: text, name="dump")

    shown = offloaded(dispatch(box, mode, "dump", scope=scope))
    assert "needle" not in json.dumps(shown)
    artifact_id = shown["artifact_id"]
    found = json.loads(
        dispatch(box, mode, "read_artifact", {"artifact_id": artifact_id, "pattern": "needle"}, scope=scope).content
    )
    assert [m["line"] for m in found["matches"]] == [15_000]
    assert found["scan_complete"] is True
    window = json.loads(
        dispatch(
            box, mode, "read_artifact", {"artifact_id": artifact_id, "lines": [14_999, 15_002]}, scope=scope
        ).content
    )
    assert window["text"] == "".join(lines[14_999:15_002])


@pytest.mark.parametrize("mode", MODES)
def test_a_list_of_dicts_becomes_a_record_artifact_with_a_records_preview(
    vault: Vault, scope: Scope, mode: str
) -> None:
    box = Toolbox(vault)
    rows = big_rows()

    @box.tool
    def incidents() -> list[dict[str, Any]]:
        """All incidents."""
        return rows

    observation = dispatch(box, mode, "incidents", scope=scope)
    shown = offloaded(observation)
    artifact_id = shown["artifact_id"]
    assert shown["media_type"] == "application/json"
    assert shown["kind"] == "records"
    assert shown["records"] == 5_000
    assert shown["fields"] == 4
    assert list(shown["schema"]) == ["id", "name", "score", "ok"]
    assert 1 <= len(shown["first_rows"]) < 5_000
    assert shown["first_rows"] == rows[: len(shown["first_rows"])]
    assert shown["preview_partial"] is True
    assert "query_artifact" in shown["read_more"]
    assert vault.read_bytes(scope, artifact_id) == compact(rows)
    # ...and query_artifact reads it.
    answer = json.loads(
        dispatch(
            box,
            mode,
            "query_artifact",
            {
                "artifact_id": artifact_id,
                "where": {
                    "and": [{"field": "score", "op": "eq", "value": 3}, {"field": "ok", "op": "eq", "value": True}]
                },
                "fields": ["id", "name"],
                "limit": 5,
            },
            scope=scope,
        ).content
    )
    expected = [{"id": r["id"], "name": r["name"]} for r in rows if r["score"] == 3 and r["ok"]][:5]
    assert [r["record"] for r in answer["records"]] == expected
    assert answer["has_more"] is True
    assert answer["total_records"] == 5_000


@pytest.mark.parametrize("mode", MODES)
def test_a_dict_result_gets_a_json_shape_preview(vault: Vault, scope: Scope, mode: str) -> None:
    box = Toolbox(vault)
    document = {"items": big_rows(4_000), "meta": {"source": "crm", "page": 1}}
    box.tool(lambda: document, name="export")

    shown = offloaded(dispatch(box, mode, "export", scope=scope))
    assert shown["kind"] == "json"
    assert shown["media_type"] == "application/json"
    shape = shown["shape"]
    assert shape["type"] == "object"
    assert shape["keys"] == 2
    assert shape["fields"]["items"]["type"] == "array"
    assert shape["fields"]["items"]["length"] == 4_000
    assert shape["fields"]["meta"]["type"] == "object"
    assert compact(document).decode().startswith(shown["sample"])
    assert shown["sample"].startswith('{"items":[{"id":0,')
    assert shown["preview_partial"] is True
    assert "read_artifact" in shown["read_more"]
    assert vault.read_bytes(scope, shown["artifact_id"]) == compact(document)


class Export(BaseModel):
    title: str
    rows: list[int]


def test_a_pydantic_model_result_gets_the_json_shape_of_what_was_stored(vault: Vault, scope: Scope) -> None:
    box = Toolbox(vault)
    box.tool(lambda: Export(title="t", rows=list(range(10_000))), name="export")

    shown = offloaded(box.call_sync("export", {}, scope=scope))
    stored = json.loads(vault.read_bytes(scope, shown["artifact_id"]))
    assert stored == {"title": "t", "rows": list(range(10_000))}
    # The preview must describe the stored JSON object, not the Python object's repr.
    assert isinstance(shown["shape"], dict), f"the shape of a model result is {shown['shape']!r}"
    assert shown["shape"]["type"] == "object"
    assert set(shown["shape"]["fields"]) == {"title", "rows"}
    assert shown["sample"].startswith('{"title":"t","rows":[0,1,2')


# -- thresholds ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_results_below_the_threshold_are_unchanged(vault: Vault, scope: Scope, mode: str) -> None:
    box = Toolbox(vault)
    text = numbered_lines(200)
    document = {"rows": big_rows(50)}
    box.tool(lambda: text, name="small_text")
    box.tool(lambda: document, name="small_dict")
    box.tool(lambda: big_rows(50), name="small_rows")

    assert dispatch(box, mode, "small_text", scope=scope) == Observation("call_1", text)
    assert dispatch(box, mode, "small_dict", scope=scope) == Observation("call_1", compact(document).decode())
    assert dispatch(box, mode, "small_rows", scope=scope) == Observation("call_1", compact(big_rows(50)).decode())
    assert vault.list(scope) == []


@pytest.mark.parametrize("mode", MODES)
def test_the_threshold_is_the_token_estimate_not_the_length(vault: Vault, scope: Scope, mode: str) -> None:
    box = Toolbox(vault)
    box.tool(lambda: "." * 100, name="at", offload_tokens=100)  # punctuation: one token per character
    box.tool(lambda: "." * 101, name="above", offload_tokens=100)
    letters = "a" * 600  # one letter run: far fewer tokens than characters
    assert estimate_tokens(letters) <= 200 < len(letters)
    box.tool(lambda: letters, name="letters", offload_tokens=200)

    assert dispatch(box, mode, "at", scope=scope).content == "." * 100
    assert offloaded(dispatch(box, mode, "above", scope=scope))["size"] == 101
    assert dispatch(box, mode, "letters", scope=scope).content == letters
    assert len(vault.list(scope)) == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_per_tool_threshold_overrides_the_toolbox_default(vault: Vault, scope: Scope, mode: str) -> None:
    box = Toolbox(vault)
    medium = numbered_lines(100)  # far below 20,000 tokens
    huge = big_text()
    box.tool(lambda: medium, name="eager", offload_tokens=50)
    box.tool(lambda: huge, name="never", offload_tokens=None)
    box.tool(lambda: medium, name="default")

    assert offloaded(dispatch(box, mode, "eager", scope=scope))["size"] == len(medium)
    assert dispatch(box, mode, "never", scope=scope).content == huge
    assert dispatch(box, mode, "default", scope=scope).content == medium
    assert len(vault.list(scope)) == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_toolbox_threshold_applies_to_every_tool_and_none_disables_it(vault: Vault, scope: Scope, mode: str) -> None:
    medium = numbered_lines(100)
    low = Toolbox(vault, offload_tokens=50)
    low.tool(lambda: medium, name="t")
    assert offloaded(dispatch(low, mode, "t", scope=scope))["size"] == len(medium)

    off = Toolbox(vault, offload_tokens=None)
    off.tool(lambda: big_text(), name="huge")
    off.tool(lambda: medium, name="opted_in", offload_tokens=50)
    assert dispatch(off, mode, "huge", scope=scope).content == big_text()
    assert offloaded(dispatch(off, mode, "opted_in", scope=scope))["size"] == len(medium)
    assert len(vault.list(scope)) == 2


@pytest.mark.parametrize("mode", MODES)
def test_without_the_read_tools_nothing_is_ever_offloaded(vault: Vault, scope: Scope, mode: str) -> None:
    box = Toolbox(vault, read_tools=False)
    huge = big_text()
    box.tool(lambda: huge, name="huge")
    box.tool(lambda: huge, name="explicitly_never", offload_tokens=None)
    with pytest.raises(ValueError, match="read tools"):
        box.tool(lambda: huge, name="wants_offload", offload_tokens=5)

    names = [d["function"]["name"] for d in box.schemas("openai")]
    assert names == ["huge", "explicitly_never"]
    assert dispatch(box, mode, "huge", scope=scope).content == huge
    assert dispatch(box, mode, "explicitly_never", scope=scope).content == huge
    assert dispatch(box, mode, "read_artifact", {"artifact_id": "x"}, scope=scope).is_error
    assert vault.list(scope) == []


@pytest.mark.parametrize("bad", [0, -1, 2.5, "100"])
def test_bad_thresholds_are_refused(vault: Vault, bad: Any) -> None:
    with pytest.raises(ValueError, match="offload_tokens"):
        Toolbox(vault, offload_tokens=bad)
    box = Toolbox(vault)
    with pytest.raises(ValueError, match="offload_tokens"):
        box.tool(lambda: "x", name="t", offload_tokens=bad)


@pytest.mark.parametrize("bad", [-1, 0, 2.5, "4000"])
def test_a_bad_preview_size_is_refused_when_the_toolbox_is_made(vault: Vault, scope: Scope, bad: Any) -> None:
    try:
        box = Toolbox(vault, preview_chars=bad)
    except (ValueError, TypeError):
        return
    # Accepted: then the first offload fails after capturing, and the model sees a bare error.
    box.tool(lambda: big_text(), name="huge")
    observation = box.call_sync("huge", {}, scope=scope)
    raise AssertionError(
        f"Toolbox(preview_chars={bad!r}) was accepted; an offload then gives {observation.content[:80]!r} "
        f"and leaves {len(vault.list(scope))} orphaned artifact(s)"
    )


# -- sealed inputs ---------------------------------------------------------------------


@pytest.fixture
def sealed_doc(vault: Vault, scope: Scope) -> str:
    body = "".join(f"row {i}: {CANARY}\n" for i in range(20)).encode()
    return vault.put(scope, body, media_type="text/plain", disclosure="sealed").artifact_id


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", ["text", "records", "json"])
def test_output_of_a_sealed_input_is_sealed_and_its_preview_shows_no_content(
    vault: Vault, scope: Scope, sealed_doc: str, mode: str, shape: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    box = Toolbox(vault)
    events: list[ToolEvent] = []
    box.add_sink(events.append)

    @box.tool
    def expand(doc: Ref) -> Any:
        """Expand a document."""
        text = doc.text()
        if shape == "text":
            return f"{CANARY}\n" + text * 3_000
        rows = [{"line": line, "n": i} for i, line in enumerate(text.splitlines() * 500)]
        return rows if shape == "records" else {"secret": CANARY, "rows": rows}

    observation = dispatch(box, mode, "expand", {"doc": sealed_doc}, scope=scope)
    shown = offloaded(observation)
    artifact_id = shown["artifact_id"]
    assert shown["disclosure"] == "sealed"
    assert vault.describe(scope, artifact_id).disclosure == "sealed"
    assert observation.artifacts[0]["disclosure"] == "sealed"
    assert shown["preview_partial"] is True
    assert shown["covers"].startswith("type and size only")
    assert not {"head", "tail", "sample", "shape", "schema", "first_rows"} & set(shown)
    assert "Ref" in shown["read_more"]
    # The whole result is still captured, byte for byte.
    assert CANARY.encode() in vault.read_bytes(scope, artifact_id)
    # No door shows the content: observation, events, trajectory, logs.
    assert CANARY not in observation.content
    assert CANARY not in repr(observation)
    assert CANARY not in json.dumps([e.to_dict() for e in events], ensure_ascii=False)
    assert CANARY not in repr(box.trajectory("run_1"))
    assert CANARY not in caplog.text
    assert all(CANARY not in str(record.args) for record in caplog.records)
    # And the read tools refuse it.
    for name, arguments in [
        ("read_artifact", {"artifact_id": artifact_id}),
        ("read_artifact", {"artifact_id": artifact_id, "pattern": "row"}),
        ("query_artifact", {"artifact_id": artifact_id}),
    ]:
        refused = dispatch(box, mode, name, arguments, scope=scope)
        assert refused.is_error
        assert "sealed" in refused.content
        assert "Ref" in refused.content
        assert CANARY not in refused.content
    loaded = dispatch(box, mode, "load_artifacts", {"artifact_ids": [artifact_id]}, scope=scope)
    assert CANARY not in loaded.content + json.dumps(loaded.parts, ensure_ascii=False)
    assert json.loads(loaded.content)["results"][0]["error"] == "SealedArtifact"


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_capture_of_a_sealed_output_shows_nothing_of_it(
    vault: Vault,
    scope: Scope,
    sealed_doc: str,
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    box = Toolbox(vault)

    @box.tool
    def expand(doc: Ref) -> str:
        """Expand a document."""
        return doc.text() * 3_000

    monkeypatch.setattr(vault, "put", failing_put)
    observation = dispatch(box, mode, "expand", {"doc": sealed_doc}, scope=scope)
    shown = failed(observation)
    assert shown["preview_partial"] is True
    assert shown["shown_chars"] == 0
    assert shown["reason"] == "StorageError"
    assert CANARY not in observation.content
    assert CANARY not in caplog.text
    assert "disk is full" not in observation.content  # the exception's message is not echoed
    assert observation.artifacts == ()


def test_a_failed_capture_of_a_sealed_output_still_says_how_much_was_withheld(
    vault: Vault, scope: Scope, sealed_doc: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = Toolbox(vault)

    @box.tool
    def expand(doc: Ref) -> str:
        """Expand a document."""
        return doc.text() * 3_000

    result_chars = len(vault.read_bytes(scope, sealed_doc).decode()) * 3_000
    monkeypatch.setattr(vault, "put", failing_put)
    shown = failed(box.call_sync("expand", {"doc": sealed_doc}, scope=scope))
    # Nothing silently lost: like the unsealed fallback, say how much was shown of how much.
    assert shown.get("total_chars") == result_chars, f"the sealed fallback does not give the total: {shown}"


# -- capture failure -------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", ["text", "records"])
def test_a_failed_capture_is_visible_bounded_and_marked_incomplete(
    vault: Vault,
    scope: Scope,
    mode: str,
    shape: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    box = Toolbox(vault, preview_chars=3_000)
    events: list[ToolEvent] = []
    box.add_sink(events.append)
    result: Any = big_text() if shape == "text" else big_rows()
    box.tool(lambda: result, name="huge")
    rendered = result if shape == "text" else compact(result).decode()

    monkeypatch.setattr(vault, "put", failing_put)
    observation = dispatch(box, mode, "huge", scope=scope)
    shown = failed(observation)
    assert shown["status"] == "not_captured"
    assert shown["reason"] == "StorageError"
    assert shown["preview_partial"] is True
    assert shown["total_chars"] == len(rendered)
    assert 0 < shown["shown_chars"] < len(rendered)
    assert shown["text"] == rendered[: shown["shown_chars"]]
    assert str(shown["shown_chars"]) in shown["omits"]
    assert str(len(rendered) - 1) in shown["omits"]
    assert len(observation.content) <= max(3_000, TRUNCATION_SLACK) + FAILED_WRAPPER
    assert "disk is full" not in observation.content
    assert observation.artifacts == ()
    assert events[-1].kind == "tool_finished"
    assert events[-1].artifacts == ()
    assert any("StorageError" in record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING)
    assert "line 000001" not in caplog.text
    assert "item-1" not in caplog.text
    monkeypatch.undo()
    assert vault.list(scope) == []


# -- bounds ----------------------------------------------------------------------------


def wide_rows() -> list[dict[str, Any]]:
    return [{f"field_{k:02d}": ("ж" * 300 + f"{i}-{k}") for k in range(60)} for i in range(200)]


RESULTS: dict[str, Any] = {
    "text": big_text(),
    "one_long_line": "x" * 60_000 + "'\"\\" * 20_000,
    "cjk": "漢字かな交じり文😀\n" * 8_000,
    "control_chars": "\x00\x01\x1f\t" * 30_000,
    "json": {"a": [{"deep": [[[[i]]]], "s": "é" * 50} for i in range(3_000)], "b": {str(k): k for k in range(2_000)}},
    "records": big_rows(),
    "wide_records": wide_rows(),
    "list_of_scalars": list(range(40_000)),
}


@pytest.mark.parametrize("kind", sorted(RESULTS))
@pytest.mark.parametrize("preview_chars", [256, 500, 2_048, 4_000, 9_000])
def test_every_preview_is_bounded_by_preview_chars(vault: Vault, scope: Scope, kind: str, preview_chars: int) -> None:
    box = Toolbox(vault, preview_chars=preview_chars)
    box.tool(lambda: RESULTS[kind], name="result", offload_tokens=1_000)

    observation = box.call_sync("result", {}, scope=scope)
    shown = offloaded(observation)
    assert len(observation.content) <= preview_bound(preview_chars)
    assert len(json.dumps(shown)) <= max(preview_chars, PREVIEW_SLACK)  # also with ASCII escapes
    assert shown["preview_partial"] is True
    assert shown["covers"]
    assert shown["omits"] != "nothing"


@pytest.mark.parametrize("preview_chars", [256, 1_000, 4_000])
def test_the_capture_failure_fallback_is_bounded(
    vault: Vault, scope: Scope, preview_chars: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = Toolbox(vault, preview_chars=preview_chars)
    box.tool(lambda: RESULTS["cjk"], name="result")
    monkeypatch.setattr(vault, "put", failing_put)
    observation = box.call_sync("result", {}, scope=scope)
    shown = failed(observation)
    assert len(observation.content) <= max(preview_chars, TRUNCATION_SLACK) + FAILED_WRAPPER
    assert shown["preview_partial"] is True
    assert RESULTS["cjk"].startswith(shown["text"])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=8), children, max_size=6),
    max_leaves=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    value=st.one_of(st.text(min_size=2, max_size=3_000), json_values),
    preview_chars=st.integers(min_value=256, max_value=5_000),
)
def test_any_offloaded_result_is_stored_exactly_and_previewed_within_bounds(value: Any, preview_chars: int) -> None:
    vault = Vault(MemoryBlobStore(), MemoryCatalog())
    scope = Scope("acme", "ana", "s1")
    box = Toolbox(vault, preview_chars=preview_chars)
    box.tool(lambda: value, name="result", offload_tokens=1)
    rendered = value if isinstance(value, str) else compact(value).decode()
    observation = box.call_sync("result", {}, scope=scope)
    if estimate_tokens(rendered) <= 1:
        assert observation.content == rendered
        return
    shown = offloaded(observation)
    assert len(observation.content) <= preview_bound(preview_chars)
    stored = vault.read_bytes(scope, shown["artifact_id"])
    assert stored == rendered.encode("utf-8", "surrogatepass")
    assert shown["size"] == len(stored)
    if not shown["preview_partial"]:
        assert shown["omits"] == "nothing"


# -- concurrency -----------------------------------------------------------------------


def test_concurrent_offloads_each_capture_their_own_result(vault: Vault, scope: Scope) -> None:
    box = Toolbox(vault)

    @box.tool(offload_tokens=100)
    async def page(n: int) -> str:
        """One page."""
        await asyncio.sleep(0)
        return f"page {n}\n" + "".join(f"{n}:{i} " + "z" * 20 + "\n" for i in range(300))

    async def main() -> list[Observation]:
        return await asyncio.gather(*(box.call("page", {"n": n}, scope=scope, tool_call_id=f"c{n}") for n in range(16)))

    observations = asyncio.run(main())
    ids = set()
    for n, observation in enumerate(observations):
        shown = offloaded(observation)
        ids.add(shown["artifact_id"])
        assert observation.tool_call_id == f"c{n}"
        assert vault.read_bytes(scope, shown["artifact_id"]).startswith(f"page {n}\n".encode())
    assert len(ids) == 16
