"""The shared half of every framework's working-set hook: a history rendered as chat messages."""

from __future__ import annotations

import pytest

from refvault.errors import InvalidArgument
from refvault.integrations.context_hooks import ChatHistory, check_working_set, json_text, parts_text


def test_calls_join_the_assistant_message_before_them_and_missing_ids_get_unique_ones() -> None:
    history = ChatHistory()
    history.add("user", "go")
    history.add("assistant", "fetching")
    history.tool_call("c1", "fetch", {"n": 1})
    history.tool_call(None, "fetch", '{"n": 2}')
    first = history.tool_result("c1", "page 1")
    second = history.tool_result(None, "page 2")
    third = history.tool_result("", "page 3")
    history.tool_call(None, "fetch", None)
    assert (first, second, third) == ("c1", "_rv_1", "_rv_2")
    assert history.messages == [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "fetching",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "fetch", "arguments": '{"n":1}'}},
                {"id": "_rv_call_1", "type": "function", "function": {"name": "fetch", "arguments": '{"n": 2}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "page 1"},
        {"role": "tool", "tool_call_id": "_rv_1", "content": "page 2"},
        {"role": "tool", "tool_call_id": "_rv_2", "content": "page 3"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "_rv_call_2", "type": "function", "function": {"name": "fetch", "arguments": "{}"}}],
        },
    ]


def test_replacements_keep_only_ids_of_results_in_the_history() -> None:
    class Source:
        def replacements(self, messages: object) -> dict[str, str]:
            return {"c1": "stub", "elsewhere": "stub"}

    history = ChatHistory()
    history.tool_result("c1", "page")
    assert history.replacements(Source()) == {"c1": "stub"}


def test_media_is_counted_as_a_placeholder_never_rendered() -> None:
    parts = ["text", {"type": "input_text", "text": "more"}, {"type": "input_image", "image_url": "data:..."}, b"\x89P"]
    assert parts_text(parts) == "text\nmore\n[input_image]\n[2 bytes]"
    assert json_text({"a": b"xyz"}) == '{"a":"[3 bytes]"}'


def test_only_a_working_set_is_accepted() -> None:
    with pytest.raises(InvalidArgument, match="WorkingSet"):
        check_working_set(42)
