"""A Toolbox sized to its model (issue 22): offload threshold, preview size and the read tools' caps follow
``model_context_tokens``; without it, the fixed defaults; explicit ``offload_tokens`` / ``preview_chars`` win."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from refvault import Scope, Toolbox, ToolContext, Vault
from refvault.errors import InvalidArgument
from refvault.limits import DEFAULT_CAPS, caps_for_model
from refvault.read.previews import PREVIEW_SLACK

SMALL, LARGE = 8_192, 1_048_576
MEDIUM_TEXT = "".join(f"row {i:05d} " + "v" * 40 + "\n" for i in range(200))  # 10,000 characters, ~2,500 tokens
OFFLOADED_WRAPPER = len(json.dumps({"offloaded": None})) - len("null")


@pytest.fixture
def vault(embedded_vault: Vault) -> Vault:
    return embedded_vault


def text_artifact(vault: Vault, scope: Scope, lines: int = 5_000) -> str:
    body = "".join(f"line {i:06d} needle " + "t" * 50 + "\n" for i in range(lines))
    return vault.put(scope, body.encode(), media_type="text/plain").artifact_id


def records_artifact(vault: Vault, scope: Scope, count: int = 2_000) -> str:
    rows = "".join(json.dumps({"id": i, "name": f"item-{i}"}) + "\n" for i in range(count))
    return vault.put(scope, rows.encode(), media_type="application/x-ndjson").artifact_id


def answer(box: Toolbox, scope: Scope, name: str, arguments: dict[str, Any], **options: Any) -> dict[str, Any]:
    observation = box.call_sync(name, arguments, scope=scope, **options)
    assert not observation.is_error, observation.content
    parsed = json.loads(observation.content)
    assert isinstance(parsed, dict)
    return parsed


def medium_box(vault: Vault, **options: Any) -> Toolbox:
    box = Toolbox(vault, **options)
    box.tool(lambda: MEDIUM_TEXT, name="medium")
    return box


# -- the caps a Toolbox applies ---------------------------------------------------------------------------


def test_a_toolbox_without_a_model_size_keeps_the_fixed_defaults(vault: Vault) -> None:
    box = Toolbox(vault)
    assert box.caps == DEFAULT_CAPS
    assert (box.offload_tokens, box.preview_chars) == (20_000, 4_000)


def test_a_toolbox_takes_the_caps_of_its_model(vault: Vault) -> None:
    small, large = Toolbox(vault, model_context_tokens=SMALL), Toolbox(vault, model_context_tokens=LARGE)
    assert small.caps == caps_for_model(SMALL)
    assert large.caps == caps_for_model(LARGE)
    assert small.offload_tokens == 256 < large.offload_tokens == 20_971
    assert small.preview_chars == 256 < large.preview_chars == 4_194


def test_explicit_offload_tokens_and_preview_chars_win_over_the_scaled_values(vault: Vault, scope: Scope) -> None:
    box = medium_box(vault, model_context_tokens=SMALL, offload_tokens=50_000, preview_chars=3_000)
    assert (box.caps.offload_tokens, box.caps.preview_chars) == (50_000, 3_000)
    assert box.caps.window_chars == caps_for_model(SMALL).window_chars  # the rest stays scaled
    assert box.call_sync("medium", {}, scope=scope).content == MEDIUM_TEXT  # 50,000 tokens: kept inline
    assert box.caps_for(LARGE).offload_tokens == 50_000  # kept for a call sized to another model too
    never = medium_box(vault, model_context_tokens=SMALL, offload_tokens=None)
    assert never.offload_tokens is None
    assert never.call_sync("medium", {}, scope=scope).content == MEDIUM_TEXT


@pytest.mark.parametrize("bad", [0, 512, 10**9, 2.5, "8192", True])
def test_a_bad_model_size_is_refused_with_a_typed_error(vault: Vault, scope: Scope, bad: Any) -> None:
    with pytest.raises(InvalidArgument, match="model_context_tokens"):
        Toolbox(vault, model_context_tokens=bad)
    box = medium_box(vault)
    with pytest.raises(InvalidArgument, match="model_context_tokens"):
        box.call_sync("medium", {}, scope=scope, model_context_tokens=bad)
    with pytest.raises(InvalidArgument, match="model_context_tokens"):
        box.schemas("openai", model_context_tokens=bad)
    assert vault.list(scope) == []  # nothing ran, nothing was stored


# -- offload ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["call", "call_sync"])
def test_an_8k_model_offloads_what_a_1m_model_keeps_inline(vault: Vault, scope: Scope, mode: str) -> None:
    def run(box: Toolbox) -> str:
        if mode == "call":
            return asyncio.run(box.call("medium", {}, scope=scope)).content
        return box.call_sync("medium", {}, scope=scope).content

    assert run(medium_box(vault, model_context_tokens=LARGE)) == MEDIUM_TEXT
    assert run(medium_box(vault)) == MEDIUM_TEXT
    assert vault.list(scope) == []
    content = run(medium_box(vault, model_context_tokens=SMALL))
    shown = json.loads(content)["offloaded"]
    (stored,) = vault.list(scope)
    assert shown["artifact_id"] == stored.artifact_id
    assert vault.read_bytes(scope, stored.artifact_id) == MEDIUM_TEXT.encode()
    assert len(content) <= max(256, PREVIEW_SLACK) + OFFLOADED_WRAPPER  # the 8k model's preview bound


def test_a_call_sized_to_another_model_gets_that_models_threshold(vault: Vault, scope: Scope) -> None:
    box = medium_box(vault, model_context_tokens=LARGE)
    assert box.call_sync("medium", {}, scope=scope).content == MEDIUM_TEXT
    assert "offloaded" in json.loads(box.call_sync("medium", {}, scope=scope, model_context_tokens=SMALL).content)
    a_tool_of_its_own = Toolbox(vault, model_context_tokens=SMALL)
    a_tool_of_its_own.tool(lambda: MEDIUM_TEXT, name="medium", offload_tokens=100_000)  # the tool's own threshold
    assert a_tool_of_its_own.call_sync("medium", {}, scope=scope).content == MEDIUM_TEXT


# -- the read tools ---------------------------------------------------------------------------------------


def test_an_8k_models_read_is_capped_and_says_so(vault: Vault, scope: Scope) -> None:
    artifact_id = text_artifact(vault, scope)
    box = Toolbox(vault, model_context_tokens=SMALL)
    caps = box.caps

    default = answer(box, scope, "read_artifact", {"artifact_id": artifact_id})
    assert len(default["text"]) <= caps.window_chars == 1_000
    assert default["truncated"] is True
    assert default["next"] is not None
    assert "capped" not in default

    asked = answer(box, scope, "read_artifact", {"artifact_id": artifact_id, "max_chars": 150_000})
    assert 0 < len(asked["text"]) <= caps.max_window_chars == 3_276
    assert asked["capped"]["argument"] == "max_chars"
    assert (asked["capped"]["asked"], asked["capped"]["used"]) == (150_000, 3_276)
    assert "8,192-token context" in asked["capped"]["reason"]
    observation = box.call_sync("read_artifact", {"artifact_id": artifact_id, "max_chars": 150_000}, scope=scope)
    assert len(observation.content) < 3_276 + 2_000  # the whole result, not only its text: the window and its framing


def test_an_8k_models_grep_and_query_are_capped_and_say_so(vault: Vault, scope: Scope) -> None:
    text_id, records_id = text_artifact(vault, scope), records_artifact(vault, scope)
    box = Toolbox(vault, model_context_tokens=SMALL)

    found = answer(box, scope, "read_artifact", {"artifact_id": text_id, "pattern": "needle"})
    assert len(found["matches"]) == box.caps.grep_matches == 5
    many = answer(box, scope, "read_artifact", {"artifact_id": text_id, "pattern": "needle", "max_matches": 900})
    assert len(many["matches"]) == box.caps.max_grep_matches == 8
    assert many["capped"] == {**many["capped"], "argument": "max_matches", "asked": 900, "used": 8}

    page = answer(box, scope, "query_artifact", {"artifact_id": records_id})
    assert len(page["records"]) == box.caps.query_limit == 5
    big = answer(box, scope, "query_artifact", {"artifact_id": records_id, "limit": 700})
    assert len(big["records"]) == box.caps.max_query_limit == 8
    assert big["capped"] == {**big["capped"], "argument": "limit", "asked": 700, "used": 8}
    assert big["has_more"] is True


def test_without_a_model_size_the_read_tools_answer_as_before(vault: Vault, scope: Scope) -> None:
    text_id, records_id = text_artifact(vault, scope), records_artifact(vault, scope)
    box = Toolbox(vault)
    wide = answer(box, scope, "read_artifact", {"artifact_id": text_id, "max_chars": 150_000})
    assert 100_000 < len(wide["text"]) <= 150_000
    assert "capped" not in wide
    assert len(answer(box, scope, "query_artifact", {"artifact_id": records_id})["records"]) == 100
    refused = box.call_sync("read_artifact", {"artifact_id": text_id, "max_chars": 300_000}, scope=scope)
    assert refused.is_error
    assert "max_chars" in refused.content


def test_an_8k_models_load_is_cut_to_its_text_cap(vault: Vault, scope: Scope) -> None:
    artifact_id = text_artifact(vault, scope)
    small = Toolbox(vault, model_context_tokens=SMALL).call_sync(
        "load_artifacts", {"artifact_ids": [artifact_id]}, scope=scope
    )
    large = Toolbox(vault, model_context_tokens=LARGE).call_sync(
        "load_artifacts", {"artifact_ids": [artifact_id]}, scope=scope
    )
    (small_part,), (large_part,) = small.parts, large.parts
    head, _, body = str(small_part["text"]).partition("\n")
    assert 0 < len(body) <= caps_for_model(SMALL).load_text_chars == 1_000
    assert "truncated, continue with read_artifact" in head
    assert len(str(large_part["text"])) > 20_000


def test_the_schemas_show_the_models_defaults(vault: Vault) -> None:
    def defaults(schemas: list[dict[str, Any]]) -> dict[str, Any]:
        by_name = {schema["name"]: schema["inputSchema"]["properties"] for schema in schemas}
        read, query = by_name["read_artifact"], by_name["query_artifact"]
        return {
            "max_chars": read["max_chars"]["default"],
            "max_matches": read["max_matches"]["default"],
            "limit": query["limit"]["default"],
        }

    plain = Toolbox(vault)
    assert defaults(plain.schemas("mcp")) == {"max_chars": 20_000, "max_matches": 100, "limit": 100}
    small = Toolbox(vault, model_context_tokens=SMALL)
    assert defaults(small.schemas("mcp")) == {"max_chars": 1_000, "max_matches": 5, "limit": 5}
    assert defaults(plain.schemas("mcp", model_context_tokens=SMALL)) == defaults(small.schemas("mcp"))
    assert defaults(plain.schemas("mcp")) == {"max_chars": 20_000, "max_matches": 100, "limit": 100}  # unchanged


def test_no_argument_gets_an_8k_model_more_than_its_ceiling(vault: Vault, scope: Scope) -> None:
    artifact_id = text_artifact(vault, scope)
    box = Toolbox(vault, model_context_tokens=SMALL)
    ceiling = box.caps.max_window_chars
    for arguments in (
        {"byte_range": [0, 10**6]},
        {"lines": [0, None], "max_chars": 10**5},
        {"byte_range": [0, 10**6], "max_chars": 199_999},
    ):
        shown = answer(box, scope, "read_artifact", {"artifact_id": artifact_id, **arguments})
        assert len(shown["text"]) <= ceiling, arguments
    for bad in (-1, 0, "all"):
        refused = box.call_sync("read_artifact", {"artifact_id": artifact_id, "max_chars": bad}, scope=scope)
        assert refused.is_error, bad
    huge = answer(box, scope, "read_artifact", {"artifact_id": artifact_id, "max_chars": 10**12})
    assert len(huge["text"]) <= ceiling  # over every limit: capped to this model's ceiling, never honoured
    assert huge["capped"]["used"] == ceiling


def test_a_tool_finds_its_calls_caps_in_its_context(vault: Vault, scope: Scope) -> None:
    box = Toolbox(vault, model_context_tokens=SMALL)

    @box.tool
    def sized(ctx: ToolContext) -> int:
        """How many characters one window of this model holds."""
        return ctx.caps.window_chars

    assert box.call_sync("sized", {}, scope=scope).content == "1000"
    assert box.call_sync("sized", {}, scope=scope, model_context_tokens=LARGE).content == "20971"
