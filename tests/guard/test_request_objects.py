"""The guard walks every request shape it is handed: SDK objects, pydantic models, dict keys, provider shapes.

Tests named ``test_leak_*`` pin a gap that was found and closed; ``test_defended_*`` pin attacks the guard already
stopped when they were written.
"""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pydantic
import pytest

from refvault.guard import LeakGuard
from tests.guard.protected import ART, B64, EXCERPT, SECRET, _ids


@pytest.fixture(scope="module")
def guard() -> LeakGuard:
    g = LeakGuard(min_match=64)
    g.protect(ART, SECRET)
    return g


# -- 2. request objects the walker does not descend into -----------------------------------------------------------


@dataclasses.dataclass
class _Msg:
    role: str
    content: str


@pytest.mark.parametrize(
    "request_",
    [
        [_Msg("tool", EXCERPT)],
        {"messages": [{"role": "user", "content": {EXCERPT}}]},
        SimpleNamespace(messages=[{"role": "tool", "content": EXCERPT}]),
    ],
    ids=["dataclass", "set", "namespace"],
)
def test_leak_unwalked_request_objects_pass_unchecked(guard: LeakGuard, request_: object) -> None:
    assert _ids(guard.scan(request_)) == {ART}


def test_defended_pydantic_request_and_dict_key(guard: LeakGuard) -> None:
    class Message(pydantic.BaseModel):
        role: str
        content: str

    class Req(pydantic.BaseModel):
        messages: list[Message]

    assert _ids(guard.scan(Req(messages=[Message(role="tool", content=EXCERPT)]))) == {ART}
    assert _ids(guard.scan({"messages": [{"role": "user", "content": {EXCERPT: 1}}]})) == {ART}


# -- 7. request shapes, redaction, spans and what a finding shows (defended) ---------------------------------------


def test_defended_provider_shapes(guard: LeakGuard) -> None:
    escaped = json.dumps({"q": EXCERPT.replace(" ", "\n") + "é"})  # JSON escapes (\\n, \\u00e9)
    anthropic = {
        "messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"q": EXCERPT}}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": escaped}]}
                ],
            },
        ]
    }
    assert {f.site for f in guard.scan(anthropic)} == {
        "messages[0].content[0].input.q",
        "messages[1].content[0].content[0].text",
    }
    gemini = {
        "contents": [
            {"role": "user", "parts": [{"inline_data": {"mime_type": "text/plain", "data": B64}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"out": EXCERPT}}}]},
        ]
    }
    assert len(guard.scan(gemini)) == 2
    responses = {"input": [{"type": "function_call_output", "call_id": "c", "output": json.dumps(json.dumps(EXCERPT))}]}
    assert _ids(guard.scan(responses)) == {ART}
