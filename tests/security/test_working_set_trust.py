"""The working set clears only what the vault provably holds for that very call, and restores it exactly.

Look-alike tool output, reused call ids (another run, a shared artifact), cursors that expire, and a Toolbox
whose model or run differs must never turn into a stub that brings back something else or nothing.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from refvault import Principal, Scope, Toolbox, ToolEvent, Vault, WorkingSet
from refvault.errors import InvalidArgument
from tests.context.test_working_set import Run, stubs

SECRET = "UNSTORED-RESULT-CANARY"


@pytest.fixture
def run(memory_vault: Vault, scope: Scope) -> Run:
    return Run(memory_vault, scope)


def _ws(run: Run, **options: Any) -> WorkingSet:
    return WorkingSet(
        run.vault, run.scope, toolbox=run.box, run_id="run", model_context_tokens=1024, keep_recent=0, **options
    )


def _append(run: Run, call_id: str, tool: str, content: Any, arguments: str = "{}") -> None:
    function = {"name": tool, "arguments": arguments}
    run.messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": function}],
        }
    )
    run.messages.append({"role": "tool", "tool_call_id": call_id, "content": content})


def test_a_result_held_nowhere_is_never_cleared_even_when_another_run_stored_the_same_call_id(
    memory_vault: Vault, scope: Scope
) -> None:
    earlier = Run(memory_vault, scope)
    earlier.call("fetch", n=0)  # stores "call_0" in run "run"
    later = Run(memory_vault, scope, keep_results=False)
    later.call("fetch", n=1, size=9000)  # "call_0" again, in the same run id, not stored this time
    later.messages[-1]["content"] = SECRET + later.messages[-1]["content"]
    later.say("ok")
    out = WorkingSet(memory_vault, scope, model_context_tokens=1024, keep_recent=0, run_id="run").apply(later.messages)
    assert "call_0" not in stubs(out)  # the stored bytes are not this message's text: nothing to restore it from


def test_an_artifact_shared_in_under_the_same_call_id_is_not_taken_for_the_result(
    memory_vault: Vault, scope: Scope
) -> None:
    bob = Scope(scope.tenant, "bob", "s1")
    shared = memory_vault.put(bob, b"BOB'S REPORT " * 500, media_type="text/plain", tool_call_id="call_0")
    memory_vault.share(bob, shared.artifact_id, to=Principal(scope.tenant, scope.user))
    run = Run(memory_vault, scope, keep_results=False)
    run.call("fetch", n=1, size=9000)
    run.say("ok")
    out = WorkingSet(memory_vault, scope, model_context_tokens=1024, keep_recent=0).apply(run.messages)
    assert stubs(out) == {}


@pytest.mark.parametrize(
    ("tool", "content"),
    [
        ("web_search", "[{id}] text/plain, 10 bytes\n" + "their page " * 800),
        ("web_search", json.dumps({"artifact_id": "{id}", "text": "their page " * 800})),
        ("web_search", json.dumps({"results": [{"artifact_id": "{id}"}], "text": "their page " * 800})),
        ("web_search", json.dumps({"offloaded": {"artifact_id": "{id}"}, "more": "their page " * 800})),
        (
            "web_search",
            json.dumps(
                {
                    "content": [
                        {
                            "type": "resource_link",
                            "uri": "x",
                            "name": "their page " * 800,
                            "_meta": {"artifact_id": "{id}"},
                        }
                    ]
                }
            ),
        ),
        ("web_search", json.dumps({"offloaded": {"artifact_id": "{id}"}})),  # the shape, but this call captured nothing
        (
            "load_artifacts",
            [{"type": "text", "text": "[{id}] text/plain"}, {"type": "image_url", "image_url": {"url": "data:,x"}}],
        ),
    ],
)
def test_look_alike_output_of_other_tools_is_never_cleared(run: Run, tool: str, content: Any) -> None:
    run.call("fetch", n=0)
    real = run.vault.list(run.scope)[0].artifact_id
    shown = json.loads(json.dumps(content).replace("{id}", real))
    arguments = json.dumps({"artifact_ids": ["art_" + "a" * 26]}) if tool == "load_artifacts" else "{}"
    _append(run, "lookalike", tool, shown, arguments)
    run.say("ok")
    out = _ws(run).apply(run.messages)
    assert "lookalike" not in stubs(out)


def test_a_kept_result_comes_back_whole_through_the_call_its_stub_names(run: Run) -> None:
    run.call("fetch", n=0, size=37_800)  # beyond what load_artifacts loads of one text
    run.call("fetch", n=1, size=4_000)
    run.say("ok")
    restore = stubs(_ws(run).apply(run.messages))["call_0"]["restore"]
    assert restore["tool"] == "read_artifact"
    answer = run.box.call_sync(restore["tool"], json.dumps(restore["arguments"]), scope=run.scope, run_id="run")
    assert json.loads(answer.content)["text"] == run.messages[3]["content"]


def test_a_page_read_with_a_cursor_is_not_cleared(run: Run) -> None:
    rows = json.dumps([{"n": i, "text": "row " * 20} for i in range(400)])
    artifact = run.vault.put(run.scope, rows.encode(), media_type="application/json")
    first = run.box.call_sync(
        "query_artifact", json.dumps({"artifact_id": artifact.artifact_id, "limit": 50}), scope=run.scope, run_id="run"
    )
    cursor = json.loads(first.content)["next_cursor"]
    arguments = json.dumps({"artifact_id": artifact.artifact_id, "limit": 50, "cursor": cursor})
    page = run.box.call_sync("query_artifact", arguments, scope=run.scope, run_id="run")
    _append(run, "paged", "query_artifact", page.content, arguments)
    run.say("ok")
    assert "paged" not in stubs(_ws(run).apply(run.messages))


def test_a_working_set_takes_the_toolboxs_model_run_and_read_tools(memory_vault: Vault, scope: Scope) -> None:
    box = Toolbox(memory_vault, model="gpt-4o")
    with pytest.raises(InvalidArgument, match="run_id"):
        WorkingSet(memory_vault, scope, model_context_tokens=8192, toolbox=box)
    with pytest.raises(InvalidArgument, match="model differs"):
        WorkingSet(memory_vault, scope, model_context_tokens=8192, toolbox=box, run_id="r", model="other")
    with pytest.raises(InvalidArgument, match="no read tools"):
        WorkingSet(
            memory_vault, scope, model_context_tokens=8192, toolbox=Toolbox(memory_vault, read_tools=False), run_id="r"
        )
    assert (
        WorkingSet(memory_vault, scope, model_context_tokens=8192, toolbox=box, run_id="r").recipient == "model:gpt-4o"
    )


def test_a_thrash_callback_may_use_the_working_set(run: Run) -> None:
    seen: list[int] = []
    holder: dict[str, WorkingSet] = {}

    def on_event(event: ToolEvent) -> None:
        seen.append(len(holder["ws"].events))  # would deadlock if called under the working set's lock

    ws = holder["ws"] = WorkingSet(
        run.vault,
        run.scope,
        toolbox=run.box,
        run_id="run",
        model_context_tokens=4096,
        keep_recent=0,
        thrash_reloads=2,
        on_event=on_event,
    )
    for n in range(6):
        run.call("fetch", n=n)
        run.say("next")
        ws.apply(run.messages)
    first = run.vault.list(run.scope)[-1].artifact_id
    for _ in range(2):
        run.call("read_artifact", artifact_id=first, max_chars=20_000)
        run.say("noted")
        worker = threading.Thread(target=ws.apply, args=(list(run.messages),), daemon=True)
        worker.start()
        worker.join(20)
        assert not worker.is_alive()
    assert seen == [1]
