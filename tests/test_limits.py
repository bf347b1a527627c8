"""Caps scaled to the model (issue 22): ``caps_for_model`` sizes every per-result cap to a model's context window."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import refvault
from refvault import limits
from refvault.errors import InvalidArgument
from refvault.limits import (
    MAX_CHARS,
    MAX_LIMIT,
    MAX_MATCHES,
    MAX_MODEL_CONTEXT_TOKENS,
    MIN_MODEL_CONTEXT_TOKENS,
    MIN_PREVIEW_CHARS,
    ModelCaps,
    caps_for_model,
)

SIZES = st.integers(min_value=MIN_MODEL_CONTEXT_TOKENS, max_value=MAX_MODEL_CONTEXT_TOKENS)
CAP_FIELDS = [f.name for f in dataclasses.fields(ModelCaps) if f.name != "model_context_tokens"]
HARD = {
    "preview_chars": 20_000,
    "window_chars": MAX_CHARS,
    "max_window_chars": MAX_CHARS,
    "load_text_chars": MAX_CHARS,
    "grep_matches": MAX_MATCHES,
    "max_grep_matches": MAX_MATCHES,
    "query_limit": MAX_LIMIT,
    "max_query_limit": MAX_LIMIT,
    "offload_tokens": MAX_CHARS // limits.CHARS_PER_TOKEN,
}
CEILINGS = {"window_chars": "max_window_chars", "grep_matches": "max_grep_matches", "query_limit": "max_query_limit"}


def test_no_model_size_gives_exactly_the_fixed_defaults() -> None:
    assert caps_for_model(None) == ModelCaps(
        model_context_tokens=None,
        offload_tokens=limits.DEFAULT_OFFLOAD_TOKENS,
        preview_chars=limits.DEFAULT_PREVIEW_CHARS,
        window_chars=limits.DEFAULT_WINDOW_CHARS,
        max_window_chars=limits.MAX_CHARS,
        grep_matches=limits.DEFAULT_GREP_MATCHES,
        max_grep_matches=limits.MAX_MATCHES,
        query_limit=limits.DEFAULT_QUERY_LIMIT,
        max_query_limit=limits.MAX_LIMIT,
        load_text_chars=limits.LOAD_TEXT_CHARS,
    )
    assert (caps_for_model(None).offload_tokens, caps_for_model(None).preview_chars) == (20_000, 4_000)
    assert refvault.caps_for_model is caps_for_model
    assert refvault.ModelCaps is ModelCaps


def test_an_8k_model_gets_far_smaller_caps_than_a_1m_model() -> None:
    small, large = caps_for_model(8_192), caps_for_model(1_048_576)
    for name in CAP_FIELDS:
        assert getattr(small, name) < getattr(large, name), name
    # one offloaded result, or a default window, is a small share of the 8k model's context
    assert small.offload_tokens <= 0.04 * 8_192
    assert small.window_chars / limits.CHARS_PER_TOKEN <= 0.04 * 8_192
    assert small.max_window_chars / limits.CHARS_PER_TOKEN <= 0.10 * 8_192


def test_the_documented_table() -> None:
    table = {
        8_192: (256, 256, 1_000, 3_276, 5, 8, 5, 8, 1_000),
        32_768: (655, 256, 1_000, 13_107, 5, 32, 5, 32, 1_000),
        131_072: (2_621, 524, 2_621, 52_428, 13, 131, 13, 131, 2_621),
        1_048_576: (20_971, 4_194, 20_971, 200_000, 104, 1_000, 104, 1_000, 20_971),
    }
    for size, expected in table.items():
        caps = caps_for_model(size)
        assert tuple(getattr(caps, name) for name in CAP_FIELDS) == expected, size
        assert caps.model_context_tokens == size


@given(SIZES, SIZES)
def test_caps_are_monotone_in_the_model_size(a: int, b: int) -> None:
    small, large = caps_for_model(min(a, b)), caps_for_model(max(a, b))
    for name in CAP_FIELDS:
        assert getattr(small, name) <= getattr(large, name), name


@given(SIZES)
def test_every_cap_is_within_its_floor_and_hard_limit(size: int) -> None:
    caps = caps_for_model(size)
    floor = caps_for_model(MIN_MODEL_CONTEXT_TOKENS)
    for name in CAP_FIELDS:
        assert getattr(floor, name) <= getattr(caps, name) <= HARD[name], name
    for default, ceiling in CEILINGS.items():
        assert getattr(caps, default) <= getattr(caps, ceiling)
    assert caps.preview_chars >= MIN_PREVIEW_CHARS
    assert caps.window_chars >= 1_000
    assert caps.grep_matches >= 5
    assert caps.query_limit >= 5
    assert (
        caps.preview_chars < limits.CHARS_PER_TOKEN * caps.offload_tokens
    )  # a preview is shorter than what it stands for


@pytest.mark.parametrize("bad", [0, -1, 1_023, MAX_MODEL_CONTEXT_TOKENS + 1, 8192.0, "8192", True, [8192]])
def test_a_bad_model_size_is_a_typed_error_naming_what_is_accepted(bad: Any) -> None:
    with pytest.raises(InvalidArgument) as caught:
        caps_for_model(bad)
    message = str(caught.value)
    assert "model_context_tokens" in message
    assert f"{MIN_MODEL_CONTEXT_TOKENS:,}" in message
    assert f"{MAX_MODEL_CONTEXT_TOKENS:,}" in message


def test_the_table_in_the_docs_is_what_caps_for_model_gives() -> None:
    rows = {}
    text = (Path(__file__).resolve().parents[1] / "docs" / "python.md").read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.startswith("| `") and line.count("|") == 8:
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            rows[cells[0].split("`")[1]] = [int(cell.replace(",", "")) for cell in cells[2:]]
    assert set(rows) == set(CAP_FIELDS)
    for name, values in rows.items():
        sizes = (8_192, 32_768, 131_072, 1_048_576, None)
        assert values == [getattr(caps_for_model(size), name) for size in sizes], name
