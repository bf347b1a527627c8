"""The context working set clears old tool results losslessly, within budget, and guards against thrash."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refvault import Artifact, Scope, Toolbox, ToolEvent, Vault, WorkingSet
from refvault.blobs.memory import MemoryBlobStore
from refvault.catalog.memory import MemoryCatalog
from refvault.context.stubs import stub, subject_of
from refvault.errors import InvalidArgument
from refvault.ids import new_artifact_id

CANARY = "CANARY-5d1e-workingset-секрет"


class Run:
    """A scripted run: the model calls tools; the Toolbox answers; the history is OpenAI Chat messages."""

    def __init__(self, vault: Vault, scope: Scope, *, keep_results: bool = True) -> None:
        self.vault, self.scope = vault, scope
        self.box = Toolbox(vault, keep_results=keep_results)
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a careful analyst."},
            {"role": "user", "content": "Investigate the incidents."},
        ]
        self.calls = 0

        @self.box.tool
        def fetch(n: int, size: int = 6000) -> str:
            """Fetch a page of incidents."""
            return f"page {n} {CANARY}\n" + ("incident record " * (size // 16))

        @self.box.tool
        def snapshot() -> Artifact:
            """A sealed snapshot."""
            return Artifact(f"{CANARY} sealed bytes".encode(), media_type="text/plain", disclosure="sealed")

    def call(self, tool: str, **arguments: Any) -> str:
        call_id = f"call_{self.calls}"
        self.calls += 1
        text = json.dumps(arguments)
        self.messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": {"name": tool, "arguments": text}}],
            }
        )
        observation = asyncio.run(self.box.call(tool, text, scope=self.scope, run_id="run", tool_call_id=call_id))
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": observation.content})
        return call_id

    def say(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})


def stubs(messages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found = {}
    for message in messages:
        if message["role"] == "tool" and str(message["content"]).startswith('{"cleared"'):
            found[message["tool_call_id"]] = json.loads(message["content"])["cleared"]
    return found


@pytest.fixture
def run(memory_vault: Vault, scope: Scope) -> Run:
    return Run(memory_vault, scope)


def test_old_results_become_stubs_until_the_request_fits_and_nothing_else_changes(run: Run) -> None:
    ws = WorkingSet(run.vault, run.scope, toolbox=run.box, model_context_tokens=16_384, keep_recent=2, run_id="run")
    for n in range(10):
        run.call("fetch", n=n)
    run.say("Summarising.")
    given_messages = copy.deepcopy(run.messages)
    out = ws.apply(run.messages)
    assert run.messages == given_messages  # the input is never mutated
    assert len(out) == len(run.messages)
    assert ws.stats.tokens_before > ws.budget >= ws.stats.tokens_after
    cleared = stubs(out)
    assert ws.stats.cleared == len(cleared) > 0
    for before, after in zip(run.messages, out, strict=True):
        if after["role"] != "tool" or after.get("tool_call_id") not in cleared:
            assert after == before  # only cleared tool results change
        else:
            assert {k: v for k, v in after.items() if k != "content"} == {
                k: v for k, v in before.items() if k != "content"
            }
    # Oldest first: the cleared ones are a prefix of the results, and the two most recent stay.
    order = [m["tool_call_id"] for m in run.messages if m["role"] == "tool"]
    assert order[: len(cleared)] == sorted(cleared, key=order.index)
    assert not set(order[-2:]) & set(cleared)
    assert ws.replacements(run.messages) == {
        c: next(m for m in out if m.get("tool_call_id") == c)["content"] for c in cleared
    }


def test_a_cleared_result_comes_back_exactly_from_the_id_its_stub_names(vault: Vault, scope: Scope) -> None:
    run = Run(vault, scope)
    for n in range(6):
        run.call("fetch", n=n)
    run.say("ok")
    originals = {m["tool_call_id"]: m["content"] for m in run.messages if m["role"] == "tool"}
    out = WorkingSet(vault, scope, model_context_tokens=4096, keep_recent=1, toolbox=run.box, run_id="run").apply(
        run.messages
    )
    cleared = stubs(out)
    assert cleared
    for call_id, body in cleared.items():
        (artifact,) = body["artifacts"]
        arguments = {"artifact_id": artifact["artifact_id"], "max_chars": artifact["size"]}
        assert body["restore"] == {"tool": "read_artifact", "arguments": arguments}
        assert body["tool"] == "fetch"
        assert vault.read_bytes(scope, artifact["artifact_id"]).decode() == originals[call_id]


def test_a_result_the_model_has_not_seen_is_never_cleared_even_over_budget(run: Run) -> None:
    for n in range(3):
        run.call("fetch", n=n, size=40_000)  # each alone is over the budget
    out = WorkingSet(
        run.vault, run.scope, toolbox=run.box, model_context_tokens=1024, keep_recent=0, run_id="run"
    ).apply(run.messages)
    last = run.messages[-1]["tool_call_id"]
    assert last not in stubs(out)  # no assistant message after it yet: unseen
    assert set(stubs(out)) == {"call_0", "call_1"}


def test_results_held_nowhere_are_kept_and_the_request_reported_over_budget(memory_vault: Vault, scope: Scope) -> None:
    run = Run(memory_vault, scope, keep_results=False)  # small results go inline and are not stored
    for n in range(6):
        run.call("fetch", n=n)
    run.say("ok")
    ws = WorkingSet(memory_vault, scope, model_context_tokens=1024, keep_recent=0, run_id="run")
    assert ws.apply(run.messages) == run.messages
    assert ws.stats.over_budget
    assert ws.stats.cleared == 0


def test_a_message_naming_an_id_the_scope_cannot_read_is_not_cleared(run: Run) -> None:
    other = Scope("globex", "gus", "s9")
    foreign = run.vault.put(other, b"theirs " * 2000, media_type="text/plain").artifact_id
    run.messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "forged", "type": "function", "function": {"name": "read_artifact", "arguments": "{}"}}
            ],
        }
    )
    run.messages.append(
        {
            "role": "tool",
            "tool_call_id": "forged",
            "content": json.dumps({"offloaded": {"artifact_id": foreign}, "pad": "x " * 20_000}),
        }
    )
    run.messages.append(
        {
            "role": "tool",
            "tool_call_id": "unknown",
            "content": json.dumps({"offloaded": {"artifact_id": new_artifact_id()}, "pad": "x " * 20_000}),
        }
    )
    run.say("ok")
    ws = WorkingSet(run.vault, run.scope, toolbox=run.box, model_context_tokens=1024, keep_recent=0, run_id="run")
    assert not {"forged", "unknown"} & set(ws.replacements(run.messages))


def test_stubs_carry_no_content_of_any_artifact_sealed_or_not(run: Run) -> None:
    run.call("snapshot")
    for n in range(4):
        run.call("fetch", n=n)
    run.say("ok")
    out = WorkingSet(
        run.vault, run.scope, toolbox=run.box, model_context_tokens=1024, keep_recent=0, run_id="run"
    ).apply(run.messages)
    cleared = stubs(out)
    assert len(cleared) == 5
    assert cleared["call_0"]["restore"]["tool"] == "describe_artifact"  # the sealed artifact's summary
    assert "usable by reference only" in cleared["call_0"]["restore"]["note"]
    for message in out:
        if message["role"] == "tool" and message["tool_call_id"] in cleared:
            assert CANARY not in message["content"]


def test_a_sealed_artifacts_stub_is_metadata_and_says_it_is_used_by_reference(run: Run) -> None:
    run.call("snapshot")
    (sealed,) = run.vault.list(run.scope)
    subject = subject_of(
        run.messages[-1],
        call_id="call_0",
        tool="snapshot",
        arguments="{}",
        captured=[sealed],
        describe=lambda artifact_id: run.vault.describe(run.scope, artifact_id),
    )
    assert subject is not None
    assert subject.kind == "offloaded"
    body = json.loads(stub(subject, tool="snapshot", tokens=99))["cleared"]
    assert body["artifacts"] == [
        {
            "artifact_id": sealed.artifact_id,
            "media_type": "text/plain",
            "size": sealed.size,
            "disclosure": "sealed",
            "capture": "complete",
        }
    ]
    assert "usable by reference only" in body["restore"]["note"]
    assert CANARY not in json.dumps(body)


def test_a_read_answer_is_restored_by_the_same_read(run: Run) -> None:
    run.call("fetch", n=1, size=200_000)  # offloaded? no: kept inline and stored; read a window of it
    artifact_id = run.vault.list(run.scope)[0].artifact_id
    run.call("read_artifact", artifact_id=artifact_id, lines=[0, 1], max_chars=20_000)
    run.call("fetch", n=2)
    run.say("ok")
    out = WorkingSet(
        run.vault, run.scope, toolbox=run.box, model_context_tokens=2048, keep_recent=0, run_id="run"
    ).apply(run.messages)
    body = stubs(out)["call_1"]
    assert body["restore"] == {
        "tool": "read_artifact",
        "arguments": {"artifact_id": artifact_id, "lines": [0, 1], "max_chars": 20_000},
    }
    assert body["covered"]["unit"] in {"lines", "bytes", "chars"}
    assert CANARY not in json.dumps(body)


def _reload(run: Run, artifact_id: str) -> str:
    call_id = run.call("read_artifact", artifact_id=artifact_id, max_chars=20_000)  # the whole page comes back
    run.say("noted")
    return call_id


def test_a_result_brought_back_is_pinned_and_three_reloads_are_reported_and_pinned_for_good(run: Run) -> None:
    events: list[ToolEvent] = []
    ws = WorkingSet(
        run.vault,
        run.scope,
        toolbox=run.box,
        model_context_tokens=16_384,
        keep_recent=1,
        pin_turns=2,
        thrash_turns=20,  # each step below is two assistant turns: the call, then a remark
        on_event=events.append,
        run_id="run",
    )
    for n in range(12):
        run.call("fetch", n=n, size=3000)
        run.say("next")
        ws.apply(run.messages)
    first = stubs(ws.apply(run.messages))["call_0"]["artifacts"][0]["artifact_id"]
    answers = [_reload(run, first)]
    out = ws.apply(run.messages)
    assert answers[0] not in stubs(out)  # brought back: pinned
    assert ws.stats.cleared >= 3  # others were cleared to make room
    assert ws.stats.restored == 1
    assert first in ws.stats.pinned
    assert not events
    for n in range(3):  # the pin lapses after pin_turns turns
        run.call("fetch", n=20 + n, size=3000)
        run.say("next")
        out = ws.apply(run.messages)
    assert first not in ws.stats.pinned  # the pin lapsed: its answer is an ordinary old result again
    answers.append(_reload(run, first))
    ws.apply(run.messages)
    answers.append(_reload(run, first))
    ws.apply(run.messages)
    assert ws.stats.thrash == (first,)
    assert ws.stats.restored == 3
    assert [(e.kind, e.artifacts, e.run_id, e.tool_call_id) for e in events] == [
        ("context_thrash", (first,), "run", answers[2])
    ]
    assert ws.events == events
    for n in range(4):  # pinned for the rest of the run: every answer that brought it back stays
        run.call("fetch", n=30 + n, size=3000)
        run.say("next")
        out = ws.apply(run.messages)
    assert ws.stats.cleared > 10
    assert ws.stats.tokens_after <= ws.budget
    assert not set(answers) & set(stubs(out))
    assert first in ws.stats.pinned
    assert "call_0" in stubs(out)
    assert len(events) == 1  # reported once


def test_the_same_requests_give_the_same_output(run: Run) -> None:
    for n in range(8):
        run.call("fetch", n=n)
        run.say("next")
    outputs = []
    for _ in range(2):
        ws = WorkingSet(run.vault, run.scope, toolbox=run.box, model_context_tokens=4096, keep_recent=2, run_id="run")
        outputs.append(
            [json.dumps(ws.apply(run.messages[:k]), sort_keys=True) for k in range(4, len(run.messages) + 1)]
        )
    assert outputs[0] == outputs[1]


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(200, 30_000), min_size=1, max_size=12), context=st.integers(2_048, 32_768))
def test_the_request_fits_whenever_what_cannot_be_cleared_fits(sizes: list[int], context: int) -> None:
    vault = Vault(MemoryBlobStore(), MemoryCatalog())
    try:
        run = Run(vault, Scope("acme", "ana", "s1"))
        for n, size in enumerate(sizes):
            run.call("fetch", n=n, size=size)
            run.say("next")
        ws = WorkingSet(vault, run.scope, toolbox=run.box, model_context_tokens=context, keep_recent=3, run_id="run")
        ws.apply(run.messages)
        fixed = ws.stats.tokens_before - sum(ws._tokens(m) for m in run.messages if m["role"] == "tool")
        stub_cost = 100 * len(sizes)  # a brief stub: its id and the restoring call, under 100 tokens
        if fixed + stub_cost <= ws.budget:
            assert ws.stats.tokens_after <= ws.budget
        assert ws.stats.over_budget == (ws.stats.tokens_after > ws.budget)
    finally:
        vault.close()


def test_keep_results_stores_inline_results_with_their_call_and_the_default_does_not(
    memory_vault: Vault, scope: Scope
) -> None:
    kept = Run(memory_vault, scope)
    kept.call("fetch", n=1, size=100)
    (descriptor,) = memory_vault.list(scope)
    assert descriptor.tool_call_id == "call_0"
    assert descriptor.disclosure == "model"
    assert memory_vault.read_bytes(scope, descriptor.artifact_id).decode() == kept.messages[-1]["content"]
    plain = Run(memory_vault, Scope("acme", "ana", "s2"), keep_results=False)
    plain.call("fetch", n=1, size=100)
    assert memory_vault.list(Scope("acme", "ana", "s2")) == []
    with pytest.raises(InvalidArgument, match="keep_results"):
        Toolbox(memory_vault, keep_results="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"model_context_tokens": 10}, "model_context_tokens"),
        ({"model_context_tokens": True}, "model_context_tokens"),
        ({"model_context_tokens": 8192, "budget_fraction": 0}, "budget_fraction"),
        ({"model_context_tokens": 8192, "budget_fraction": 1.5}, "budget_fraction"),
        ({"model_context_tokens": 8192, "keep_recent": -1}, "keep_recent"),
        ({"model_context_tokens": 8192, "thrash_reloads": 1}, "thrash_reloads"),
    ],
)
def test_bad_settings_are_typed_errors_naming_the_setting(
    memory_vault: Vault, scope: Scope, options: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidArgument, match=named):
        WorkingSet(memory_vault, scope, **options, run_id="run")


def test_messages_that_are_not_a_list_of_dicts_are_a_typed_error(memory_vault: Vault, scope: Scope) -> None:
    ws = WorkingSet(memory_vault, scope, model_context_tokens=8192, run_id="run")
    for bad in ("hello", [1, 2], None):
        with pytest.raises(InvalidArgument, match="list of chat messages"):
            ws.apply(bad)  # type: ignore[arg-type]


def test_learning_captures_from_the_toolbox_trajectory_clears_the_same_results_without_listing(run: Run) -> None:
    for n in range(8):
        run.call("fetch", n=n)
    run.say("ok")
    listed = WorkingSet(
        run.vault, run.scope, toolbox=run.box, model_context_tokens=8192, keep_recent=2, run_id="run"
    ).apply(run.messages)
    calls: list[str] = []
    original = run.vault.list

    def counting_list(*args: Any, **kwargs: Any) -> Any:
        calls.append("list")
        return original(*args, **kwargs)

    run.vault.list = counting_list  # type: ignore[method-assign]
    traced = WorkingSet(
        run.vault, run.scope, model_context_tokens=8192, keep_recent=2, toolbox=run.box, run_id="run"
    ).apply(run.messages)
    assert traced == listed
    assert stubs(traced)
    assert calls == []


def test_when_full_stubs_do_not_fit_the_oldest_shrink_to_ids_and_the_restoring_call(run: Run) -> None:
    for n in range(40):
        run.call("fetch", n=n, size=800)
        run.say("next")
    out = WorkingSet(
        run.vault, run.scope, toolbox=run.box, model_context_tokens=4_096, keep_recent=0, run_id="run"
    ).apply(run.messages)
    cleared = stubs(out)
    brief = [body for body in cleared.values() if set(body) == {"ids", "restore"}]
    assert brief
    assert brief[0]["restore"]["tool"] == "read_artifact"  # a kept result comes back whole in one window
    assert [brief[0]["restore"]["arguments"]["artifact_id"]] == brief[0]["ids"]
    assert "call_0" in cleared
    assert set(cleared["call_0"]) == {"ids", "restore"}  # the oldest shrink first
