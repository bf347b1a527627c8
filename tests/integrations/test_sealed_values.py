"""A sealed value never reaches the model through any adapter: every route a tool or the model could take, the read
tools, outputs of sealed inputs, the instructions, and another scope's ids.

Every test drives a real framework (OpenAI Agents SDK, LangChain, Pydantic AI, Google ADK, the MCP SDK) with a
scripted model: no network, no API key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from agents import set_tracing_disabled

from refvault import Ref, Scope, Toolbox, Vault
from refvault.guard import LeakGuard
from tests.integrations.scripted import (
    FRAMEWORKS,
    OTHER,
    SCOPE,
    Call,
    Plan,
    canary,
    drive,
    forms,
    leaky_box,
    once,
    rich_secret,
    sealed,
    steps,
)

set_tracing_disabled(True)  # nothing may try to export traces over the network


ID = re.compile(r"art_[a-z2-7]{26}(?:[a-z2-7]{2})?")


# name → (the plan, given the sealed id and the secret; whether the guard must stop the run)
ECHOES: dict[str, tuple[Callable[[str, str], Plan], bool]] = {
    "direct": (lambda doc, _: once(("echo", {"doc": doc})), True),
    "json_escaped": (lambda doc, _: once(("echo_json", {"doc": doc})), True),
    "json_escaped_twice": (lambda doc, _: once(("echo_escaped_twice", {"doc": doc})), True),
    "base64": (lambda doc, _: once(("echo_base64", {"doc": doc})), True),
    "split_across_turns": (lambda doc, _: steps([[("head", {"doc": doc})], [("tail", {"doc": doc})]]), True),
    "split_in_one_turn": (lambda doc, _: once(("head", {"doc": doc}), ("tail", {"doc": doc})), True),
    "second_half_alone": (lambda doc, _: once(("tail", {"doc": doc})), True),  # halves are >= 64 bytes each
    "in_tool_call_arguments": (lambda doc, secret: once(("compare", {"doc": doc, "guess": secret})), True),
    # BadRef names a well-formed id only (refvault.errors.shown_id): the document never gets into its message.
    "bad_ref_message": (lambda doc, _: once(("fail_bad_ref", {"doc": doc})), False),
    "exception_message": (lambda doc, _: once(("fail_plain", {"doc": doc})), False),
    "refvault_error_message": (lambda doc, _: once(("fail_refvault", {"doc": doc})), False),
}


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("attack", list(ECHOES))
def test_a_sealed_canary_never_reaches_the_model(vault: Vault, framework: str, attack: str) -> None:
    """Each route a tool (or the model) could take a sealed value back to the model is stopped or never carries it."""
    secret = rich_secret()
    doc = sealed(vault, SCOPE, secret)
    make_plan, blocked = ECHOES[attack]
    run = drive(framework, leaky_box(vault), SCOPE, make_plan(doc, secret), prompt=f"look at {doc}")

    run.assert_never_saw(secret)
    if blocked:
        assert run.leak is not None, f"{framework}/{attack}: not stopped ({run.error!r})"
        assert {finding.artifact_id for finding in run.leak.findings} == {doc}
        for form in forms(secret):
            assert form not in str(run.leak)
    else:
        assert run.error is None
        assert run.output == "done"
        not_an_id = "error: the value given is not an artifact id"
        assert (not_an_id if attack == "bad_ref_message" else "error: the tool raised") in run.results[-1]


@pytest.mark.parametrize("attack", list(ECHOES))
def test_openai_agents_a_redacting_guard_hands_the_model_markers_only(vault: Vault, attack: str) -> None:
    """The one adapter that can rewrite a request: under policy "redact" every route above ends in markers."""
    guard = LeakGuard(policy="redact")
    secret = rich_secret()
    doc = sealed(vault, SCOPE, secret)
    make_plan, blocked = ECHOES[attack]
    run = drive("openai_agents", leaky_box(vault, guard=guard), SCOPE, make_plan(doc, secret), guard=guard)

    assert run.error is None, run.error
    assert run.output == "done"
    run.assert_never_saw(secret)
    assert run.saw(f"[refvault:{doc}]") == blocked


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_read_tools_never_carry_a_sealed_artifact(vault: Vault, framework: str) -> None:
    """load_artifacts, read_artifact (window and pattern), query_artifact: refused; describe and list: metadata."""
    secret = rich_secret()
    doc = sealed(vault, SCOPE, secret, filename="secret.txt")
    records = vault.put(
        SCOPE, json.dumps([{"k": secret}]).encode(), media_type="application/json", disclosure="sealed"
    ).artifact_id
    plan = once(
        ("load_artifacts", {"artifact_ids": [doc, records]}),
        ("read_artifact", {"artifact_id": doc}),
        ("read_artifact", {"artifact_id": doc, "pattern": "CANARY", "regex": False}),
        ("read_artifact", {"artifact_id": doc, "byte_range": [0, 4096]}),
        ("query_artifact", {"artifact_id": records}),
        ("describe_artifact", {"artifact_id": doc}),
        ("list_artifacts", {}),
    )
    run = drive(framework, Toolbox(vault), SCOPE, plan, prompt=f"look at {doc}")

    assert run.error is None
    run.assert_never_saw(secret)
    assert len(run.results) == 7
    assert all("sealed" in result for result in run.results[:5])
    assert doc in run.results[5]
    assert doc in run.results[6]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_output_of_a_sealed_input_stays_sealed(vault: Vault, framework: str) -> None:
    """An offloaded result, and bytes returned, derived from a sealed input: no preview, no read back."""
    secret = rich_secret()
    doc = sealed(vault, SCOPE, secret)
    box = Toolbox(vault, offload_tokens=1000)

    @box.tool
    def expand(doc: Ref) -> str:
        """A large text derived from the document (offloaded)."""
        return "\n".join(f"{i}: {doc.text()}" for i in range(200))

    @box.tool
    def render(doc: Ref) -> bytes:
        """Bytes derived from the document (captured)."""
        return doc.read() * 3

    def plan(results: list[str]) -> list[Call] | None:
        if not results:
            return [("expand", {"doc": doc}), ("render", {"doc": doc})]
        if len(results) == 2:
            derived = [i for i in ID.findall(" ".join(results)) if i != doc]
            assert len(set(derived)) == 2, results
            reads: list[Call] = []
            for derived_id in dict.fromkeys(derived):
                reads += [
                    ("read_artifact", {"artifact_id": derived_id}),
                    ("load_artifacts", {"artifact_ids": [derived_id]}),
                ]
            return reads
        return None

    run = drive(framework, box, SCOPE, plan, prompt=f"expand {doc}")

    assert run.error is None, run.error
    run.assert_never_saw(secret)
    assert len(run.results) == 6
    assert all("sealed" in result for result in run.results)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_protected_value_in_the_system_instructions_is_stopped(vault: Vault, framework: str) -> None:
    """protect_scope up front, then a secret pasted into the instructions: the first request never leaves."""
    secret = canary()
    sealed(vault, SCOPE, secret)
    box = Toolbox(vault)
    box.guard.protect_scope(vault, SCOPE)
    run = drive(framework, box, SCOPE, once(), instructions=f"Background (do not share): {secret}")

    assert run.leak is not None, run.error
    assert run.seen == []  # the model was never called


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_another_scopes_id_is_refused_exactly_like_a_missing_one(tmp_path: Path, framework: str) -> None:
    """Another user's, session's or tenant's id: the same words as a missing id (only the id differs), for the
    Ref tool and the read tools alike; to the Ref tool, an expired id of the scope reads the same too."""
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    words = "someone else's private words " + canary()
    with Vault.open(tmp_path / "store", clock=lambda: now[0]) as vault:
        box = Toolbox(vault)

        @box.tool
        def count_words(doc: Ref) -> int:
            """Count the words of a document."""
            return len(doc.text().split())

        def put(scope: Scope, **options: Any) -> str:
            return vault.put(scope, words.encode(), media_type="text/plain", **options).artifact_id

        ids = {
            "missing": "art_" + "a" * 26,
            "other_user": put(OTHER),
            "other_session": put(Scope("acme", "ana", "s2")),
            "other_tenant": put(Scope("evil", "ana", "s1")),
            "other_users_sealed": put(OTHER, disclosure="sealed"),
        }
        expired = put(SCOPE, expires_at=now[0] + timedelta(seconds=1))
        now[0] += timedelta(hours=1)
        calls: list[Call] = [("count_words", {"doc": i}) for i in [*ids.values(), expired]]
        for tool in ("read_artifact", "describe_artifact"):
            calls += [(tool, {"artifact_id": i}) for i in ids.values()]
        calls += [("load_artifacts", {"artifact_ids": [i]}) for i in ids.values()]
        run = drive(framework, box, SCOPE, once(*calls))

    assert run.error is None
    run.assert_never_saw(words)
    assert len(run.results) == len(calls)
    answers = [ID.sub("<id>", result) for result in run.results]
    by_tool: dict[str, set[str]] = {}
    for (tool, _), answer in zip(calls, answers, strict=True):
        by_tool.setdefault(tool, set()).add(answer)
    for tool, seen in by_tool.items():
        assert len(seen) == 1, (tool, seen)
        assert "error" in next(iter(seen)) or "not found" in next(iter(seen)), (tool, seen)
