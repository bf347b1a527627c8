"""Tool arguments through every adapter: Unicode, lone surrogates, empty and malformed arguments, validation errors
that echo nothing, huge arguments.

Every test drives a real framework (OpenAI Agents SDK, LangChain, Pydantic AI, Google ADK, the MCP SDK) with a
scripted model: no network, no API key.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Literal

import pytest
from agents import set_tracing_disabled
from pydantic import Field

from refvault import Toolbox, Vault
from tests.integrations.scripted import (
    FRAMEWORKS,
    SCOPE,
    Call,
    canary,
    drive,
    once,
    steps,
    words_box,
)

set_tracing_disabled(True)  # nothing may try to export traces over the network


UNICODE = "naïve café — 東京 👩‍💻 עברית \u202e reversed \u0000 nul \ufeff bom"
ARGUMENT = "ärger — 大阪 🧑‍🚀 العربية \u202e mirrored \u0000 \ufeff and more words here"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_unicode_documents_and_arguments(vault: Vault, framework: str) -> None:
    """Unicode (combining, CJK, emoji ZWJ, RTL override, NUL, BOM) in documents, filenames and arguments."""
    doc = vault.put(SCOPE, UNICODE.encode(), media_type="text/plain; charset=utf-8", filename="ünï.txt").artifact_id
    second = "第二 — 🧑‍🔬 a second document, with its own words " + secrets.token_hex(8)  # not read by Ref
    other = vault.put(SCOPE, second.encode(), media_type="text/plain", filename="東京.txt").artifact_id
    box = words_box(vault)

    @box.tool
    def echo_text(text: str) -> str:
        """Echo a text argument reversed."""
        return text[::-1]

    plan = once(
        ("count_words", {"doc": doc}),
        ("echo_text", {"text": ARGUMENT}),
        ("read_artifact", {"artifact_id": other, "pattern": "第二"}),
        ("list_artifacts", {}),
    )
    run = drive(framework, box, SCOPE, plan)

    assert run.error is None, run.error
    assert run.output == "done"
    assert str(len(UNICODE.split())) in run.results[0]
    results = run.results
    assert ARGUMENT[::-1] in results[1]
    assert second in results[2]
    assert "ünï.txt" in results[3]
    assert "東京.txt" in results[3]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_lone_surrogates_in_arguments_are_a_recoverable_error(vault: Vault, framework: str) -> None:
    """A lone surrogate (valid JSON escape, invalid Unicode) as an id: refused, and the guard does not crash.

    The OpenAI Agents SDK (0.24) fails first, in its own code: it fingerprints each tool call's arguments as
    UTF-8 before any tool runs (``agents/_tool_invocation.py``), so the run raises UnicodeEncodeError there."""
    box = words_box(vault)
    plan = once(
        ("count_words", '{"doc": "art_\\ud800"}'), ("read_artifact", '{"artifact_id": "\\udfff' + "x" * 80 + '"}')
    )
    run = drive(framework, box, SCOPE, plan)

    if framework == "openai_agents":
        assert isinstance(run.error, UnicodeEncodeError)
        assert _raised_in(run.error, "/agents/")
        assert run.results == []
        return
    assert run.error is None, run.error
    assert run.output == "done"
    assert len(run.results) == 2
    assert all("error" in result for result in run.results)


def _raised_in(error: BaseException, path: str) -> bool:
    """Whether the innermost frame of ``error`` is in a file whose path contains ``path``."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and path in tb.tb_frame.f_code.co_filename


RAW_ARGUMENTS = ["", "null", "[]", '"art_x"', "{", '{"doc": "art_x"']  # only the SDKs that pass raw JSON get these
OBJECT_ARGUMENTS = ["{}", '{"doc": null}', '{"doc": 7}', '{"doc": ""}', '{"doc": "art_x", "extra": 1}']
MALFORMED = [(f, a) for f in FRAMEWORKS for a in OBJECT_ARGUMENTS] + [
    (f, a) for f in ("openai_agents", "pydantic_ai") for a in RAW_ARGUMENTS
]


@pytest.mark.parametrize(("framework", "arguments"), MALFORMED)
def test_empty_and_malformed_arguments(vault: Vault, framework: str, arguments: str) -> None:
    """Missing, empty, non-object and malformed arguments to a Ref tool: an error the model can recover from
    (the Toolbox's, or Pydantic AI's retry prompt for unparseable JSON), and the run goes on."""
    box = words_box(vault)
    run = drive(framework, box, SCOPE, steps([[("count_words", arguments)], [("list_artifacts", "{}")]]))

    assert run.error is None, run.error
    assert run.output == "done"
    assert len(run.results) == 2
    first = run.results[0].lower()
    assert "error" in first or "validation" in first or "invalid" in first, first
    assert '"artifacts"' in run.results[1]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_validation_errors_never_echo_argument_values(vault: Vault, framework: str) -> None:
    """Values the model wrote that fail validation (wrong type, not a literal, too long, nested): the error says
    where and how, never what (the framework may still carry the model's own call in the next request)."""
    box = Toolbox(vault)

    @box.tool
    def pick(
        n: int, mode: Literal["fast", "slow"] = "fast", tags: Annotated[list[str], Field(max_length=2)] | None = None
    ) -> int:
        """Pick a number."""
        return n

    value = canary()
    calls: list[Call] = [
        ("pick", {"n": value}),
        ("pick", {"n": 1, "mode": value}),
        ("pick", {"n": 1, "tags": [value, value, value]}),
        ("pick", {"n": {"nested": value}}),
        ("pick", {"n": [value]}),
    ]
    run = drive(framework, box, SCOPE, once(*calls))

    assert run.error is None, run.error
    assert len(run.results) == len(calls)
    for result in run.results:
        assert "error: invalid arguments" in result, result
        assert value[:20] not in result


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_huge_arguments(vault: Vault, framework: str) -> None:
    """A 100 KB argument (under the guard's 128 KiB size arm) is taken; a 1 MB one runs the tool, and the next
    request, carrying the model's own oversized tool call, is stopped by the size arm, not sent."""
    box = Toolbox(vault)

    @box.tool
    def measure(text: str) -> int:
        """The length of a text."""
        return len(text)

    small, big = "x" * 100_000, "y" * 1_000_000
    taken = drive(framework, box, SCOPE, once(("measure", {"text": small})))
    stopped = drive(framework, box, SCOPE, once(("measure", {"text": big})))

    assert taken.error is None, taken.error
    assert "100000" in taken.results[0]
    if framework == "pydantic_ai":  # documented: the size arm knows provider wire formats, not Pydantic AI's dump
        assert stopped.error is None
        assert len(stopped.seen) == 2
        return
    assert stopped.leak is not None, stopped.error
    assert {finding.arm for finding in stopped.leak.findings} == {"size"}
    assert len(stopped.seen) == 1
