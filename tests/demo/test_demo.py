"""``refvault demo``: every step's facts, checked from its ``--json`` output and against the store it kept.

The demo runs once in-process on a kept store (the module fixture); the facts of each step are asserted from
its JSON and, independently, from the vault (the screenshot's bytes, the runbook's bytes, re-hashes). Then:
once through the CLI in a subprocess (default temporary store, removed), with the guard's check disabled
(step 5 must fail, exit 1), without the MCP SDK (step 4 fails with a clear message); step 4's MCP server is the
module installed with refvault, which (like the example file pointing to it) serves from any directory. The
scripted loop itself (:class:`refvault.scripted.ScriptedRun`) is tested on a small Toolbox.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import redirect_stdout, suppress
from pathlib import Path
from typing import Any

import pytest

import refvault.demo.scenario as scenario
from refvault.demo import ScriptedRun, Seen, answer, call, calls, requests_containing, run_demo
from refvault.demo.incident import RUNBOOK, RUNBOOK_SPAN
from refvault.guard import LeakGuard
from refvault.model import DESCRIPTOR_FIELDS, Scope
from refvault.toolbox import Ref, Toolbox
from refvault.toolbox.trail import ToolCall
from refvault.vault.core import Vault

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "incident_mcp_server.py"
STEPS = ["capture", "absence", "pinned", "screenshot", "runbook", "restart"]
OWNER = Scope("acme", "oncall", "incident-20261106")


def demo(store: Path | None, *, as_json: bool = True) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = run_demo(None if store is None else str(store), as_json)
    return code, out.getvalue()


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], Path]:
    store = tmp_path_factory.mktemp("demo") / "store"
    code, out = demo(store)
    return code, json.loads(out), store


@pytest.fixture(scope="module")
def doc(kept: tuple[int, dict[str, Any], Path]) -> dict[str, Any]:
    return kept[1]


@pytest.fixture
def vault(kept: tuple[int, dict[str, Any], Path]) -> Iterator[Vault]:
    with Vault.open(kept[2]) as opened:
        yield opened


def facts(doc: dict[str, Any], name: str) -> dict[str, Any]:
    [step] = [s for s in doc["steps"] if s["name"] == name]
    result: dict[str, Any] = step["check"]["facts"]
    return result


def turns(doc: dict[str, Any], name: str) -> list[dict[str, Any]]:
    [step] = [s for s in doc["steps"] if s["name"] == name]
    return [entry for entry in step["transcript"] if entry["kind"] == "turn"]


def strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value (keys too), with tool-call argument JSON decoded."""
    if isinstance(value, str):
        yield value
        if value.startswith(("{", "[")):
            with suppress(ValueError):
                yield from strings(json.loads(value))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def requests_text(doc: dict[str, Any]) -> str:
    return "\n".join(strings(doc["model_requests"]))


# -- the whole run ----------------------------------------------------------------------------------------------------


def test_every_step_holds_and_the_demo_exits_0(kept: tuple[int, dict[str, Any], Path]) -> None:
    code, doc, store = kept
    assert code == 0
    assert doc["ok"] is True
    assert [s["name"] for s in doc["steps"]] == STEPS
    assert [s["number"] for s in doc["steps"]] == [1, 2, 3, 4, 5, 6]
    assert all(s["ok"] and s["check"]["ok"] for s in doc["steps"])
    assert doc["store"] == str(store)
    assert doc["store_kept"] is True
    assert list(doc) == ["ok", "store", "store_kept", "scenario", "steps", "evidence", "guard", "model_requests"]


def test_the_requests_are_chat_completions_with_the_toolbox_tools(doc: dict[str, Any]) -> None:
    requests = doc["model_requests"]
    assert len(requests) == 15
    assert all(r["messages"][0]["role"] == "system" for r in requests)
    assert {"capture_incident_events", "query_artifact", "summarise_runbook"} <= set(requests[0]["tools"])
    with_mcp = [r for r in requests if "dashboard_screenshot" in r["tools"]]
    assert len(with_mcp) == 2  # offered only while the gateway was attached
    calls_made = [c for step in doc["steps"] for t in turns(doc, step["name"]) for c in t["tool_calls"]]
    assert [c["id"] for c in calls_made] == [f"call_{n:02d}" for n in range(1, 11)]
    assert {c["via"] for c in calls_made} == {"toolbox", "mcp"}


# -- step 1: capture --------------------------------------------------------------------------------------------------


def test_capture_records_provenance_and_full_completeness(doc: dict[str, Any], vault: Vault) -> None:
    f = facts(doc, "capture")
    assert f["completeness"] == {
        "coverage": {
            "end_exclusive": "2026-11-06T04:10:00Z",
            "region": "eu-west",
            "start_inclusive": "2026-11-06T04:00:00Z",
        },
        "omissions": [],
        "records": 12_840,
        "status": "complete",
    }
    assert f["source_version"]["source_id"] == "infra.incident-events"
    assert f["source_version"]["snapshot_id"].endswith("043950")
    assert f["source_version"]["observed_at"] == "2026-11-06T04:39:50Z"
    assert f["schema_version"] == "example.incident-snapshot.v1"
    stored = vault.read_bytes(OWNER, f["artifact_id"])
    assert len(stored.splitlines()) == 12_840
    assert b'"severity":"critical"' not in stored
    assert "sha256:" + hashlib.sha256(stored).hexdigest() == f["content_hash"]


def test_the_model_got_a_preview_not_the_records(doc: dict[str, Any]) -> None:
    f = facts(doc, "capture")
    [first] = turns(doc, "capture")
    seen = json.loads(first["tool_calls"][0]["result"])
    assert seen["artifact_id"] == f["artifact_id"]
    assert seen["capture"]["coverage"]["region"] == "eu-west"
    assert seen["capture"]["omissions"] == []
    assert {"read_more", "covers", "omits"} <= set(seen["preview"])
    assert f["artifact_id"] in seen["preview"]["read_more"]
    assert f["model_saw_chars"] < f["size"] // 100
    event_ids = set(re.findall(r"evt_[0-9a-f]{10}", requests_text(doc)))
    assert 0 < len(event_ids) < 40  # a few sample rows of each capture, never the thousands of records


# -- step 2: a bounded absence ----------------------------------------------------------------------------------------


def test_critical_query_is_empty_and_complete(doc: dict[str, Any]) -> None:
    f = facts(doc, "absence")
    assert f["returned_records"] == 0
    assert f["scan_complete"] is True
    assert f["scanned_records"] == f["total_records"] == 12_840
    assert f["capture_status"] == "complete"
    assert f["artifact_id"] == facts(doc, "capture")["artifact_id"]
    said = f["conclusion"]
    assert "no critical events in eu-west" in said.lower()
    assert "infra_snapshot_20261106_043950" in said
    for limit in ("other regions", "times after", "live system"):
        assert limit in said


def test_the_gate_allows_only_the_bounded_conclusion(doc: dict[str, Any]) -> None:
    step2 = [c for c in doc["evidence"]["conclusions"] if c["step"] == 2]
    assert [c["allowed"] for c in step2] == [True, False, False, False]
    assert step2[0]["verdict"]["reasons"] == []
    codes = [[r["code"] for r in c["verdict"]["reasons"]] for c in step2[1:]]
    assert codes == [["coverage_not_met"], ["coverage_not_met"], ["too_old"]]
    assert "us-east" in step2[1]["claim"]
    assert "after 04:10" in step2[2]["claim"]
    assert "live" in step2[3]["claim"]


# -- step 3: pinned reads ---------------------------------------------------------------------------------------------


def test_a_second_capture_is_a_new_artifact_and_the_pinned_read_is_the_original(
    doc: dict[str, Any], vault: Vault
) -> None:
    f = facts(doc, "pinned")
    first, second = f["first"], f["second"]
    assert first["artifact_id"] != second["artifact_id"]
    assert first["filename"] == second["filename"] == "incident-eu-west.jsonl"
    assert first["content_hash"] != second["content_hash"]
    assert f["pinned_read"]["artifact_id"] == first["artifact_id"]
    assert f["pinned_read"]["content_hash"] == first["content_hash"] == f["rehashed_first"]
    assert f["pinned_read"]["source_snapshot_id"].endswith("043950")
    assert f["second_read"]["content_hash"] == second["content_hash"]
    assert f["pinned_rows_match_original_bytes"] is True
    for part in (first, second):  # independently: the stored bytes hash to each descriptor's content hash
        data = vault.read_bytes(OWNER, part["artifact_id"])
        assert "sha256:" + hashlib.sha256(data).hexdigest() == part["content_hash"]
    pinned_call = turns(doc, "pinned")[1]["tool_calls"][0]
    rows = [r["record"]["event_id"] for r in json.loads(pinned_call["result"])["records"]]
    original = [json.loads(line)["event_id"] for line in vault.read_bytes(OWNER, first["artifact_id"]).splitlines()]
    assert rows == original[:3]


def test_the_gate_detects_the_substituted_read(doc: dict[str, Any]) -> None:
    f = facts(doc, "pinned")
    assert "identity_mismatch" in f["mismatch_codes"]
    assert f["pinned_codes"] == []


# -- step 4: the screenshot -------------------------------------------------------------------------------------------


def test_the_screenshot_is_a_reference_never_base64(doc: dict[str, Any], vault: Vault) -> None:
    f = facts(doc, "screenshot")
    assert f["uri"] == f"refvault://{f['artifact_id']}"
    descriptor = vault.describe(OWNER, f["artifact_id"])
    assert descriptor.media_type == "image/png"
    assert descriptor.disclosure == "sealed"
    png = vault.read_bytes(OWNER, f["artifact_id"])
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    encoded = base64.b64encode(png).decode()
    assert f["base64_chars"] == len(encoded)
    assert f["requests_with_base64"] == []
    assert encoded not in requests_text(doc)
    assert encoded[:40] not in json.dumps(doc)
    assert "iVBORw0KGgo" not in json.dumps(doc)
    [shot, _] = turns(doc, "screenshot")
    result = json.loads(shot["tool_calls"][0]["result"])
    assert [block["type"] for block in result["content"]] == ["text", "resource_link"]
    assert shot["tool_calls"][0]["via"] == "mcp"


# -- step 5: the runbook ----------------------------------------------------------------------------------------------


def test_the_runbook_entered_no_request(doc: dict[str, Any], vault: Vault) -> None:
    f = facts(doc, "runbook")
    runbook = vault.read_bytes(OWNER, f["runbook_id"])
    assert runbook == RUNBOOK
    assert vault.describe(OWNER, f["runbook_id"]).disclosure == "sealed"
    sent = requests_text(doc)
    everything = json.dumps(doc, ensure_ascii=False)
    text = runbook.decode()
    for start in range(0, len(text) - 64, 8):  # no 64-character span of it, anywhere in the output
        assert text[start : start + 64] not in sent
        assert text[start : start + 64] not in everything
    assert RUNBOOK_SPAN not in sent
    assert f["summary"].startswith(f"runbook {f['runbook_id']}: 8 numbered steps in 4 sections")
    assert f["guard_protected"]["artifacts"] >= 1
    assert f["guard_protected"]["protected_bytes"] >= len(RUNBOOK)


def test_the_echoing_tool_is_blocked_and_withheld(doc: dict[str, Any]) -> None:
    f = facts(doc, "runbook")
    step_turns = turns(doc, "runbook")
    blocked = [t for t in step_turns if t["blocked"]]
    assert len(blocked) == 1
    assert blocked[0]["request"] is None
    assert blocked[0]["answer"] is None
    assert blocked[0]["blocked"] == f["blocked_findings"]
    for finding in blocked[0]["blocked"]:
        assert finding["artifact_id"] == f["runbook_id"]
        assert finding["arm"] == "content"
        assert finding["site"].startswith("messages[")
        assert finding["matched"] >= 64
    [echo] = [c for t in step_turns for c in t["tool_calls"] if c["name"] == "runbook_section"]
    assert echo["withheld"] is True
    assert f["withheld_calls"] == [echo["id"]]
    assert f["runbook_id"] in echo["result"]
    assert "withheld" in echo["result"]
    assert "withheld" in step_turns[-1]["answer"]
    assert doc["guard"]["events"] == [
        {"event": "llm.context_leak", "findings": f["blocked_findings"], "policy": "raise"}
    ]


# -- step 6: the restart ----------------------------------------------------------------------------------------------


def test_the_gate_refuses_the_restart_and_the_model_defers(doc: dict[str, Any]) -> None:
    f = facts(doc, "restart")
    assert f["completeness"]["status"] == "partial"
    assert f["completeness"]["coverage"]["region"] == "eu-west"
    [omission] = f["completeness"]["omissions"]
    assert omission["region"] == "us-east"
    assert omission["reason"] == "collector partition"
    assert f["verdict"]["satisfied"] is False
    assert f["verdict"]["evaluated_at"].startswith("2026-11-06T04:52:00")
    assert f["codes"] == ["incomplete_capture", "coverage_not_met", "omissions_in_required_coverage"]
    assert f["restarted"] == []
    assert f["decision"].startswith("Restart deferred")
    for reason in f["verdict"]["reasons"]:
        assert reason["message"] in f["decision"]
    stale = [c for c in doc["evidence"]["conclusions"] if c["step"] == 6][1]
    assert [r["code"] for r in stale["verdict"]["reasons"]] == ["coverage_not_met", "too_old"]


# -- the evidence report ----------------------------------------------------------------------------------------------


def test_evidence_lists_every_artifact_with_its_digest(doc: dict[str, Any], vault: Vault) -> None:
    artifacts = doc["evidence"]["artifacts"]
    roles = [a["role"] for a in artifacts]
    assert roles == ["incident snapshot", "incident snapshot", "dashboard screenshot", "runbook (sealed)",
                     "restart evidence"]  # fmt: skip
    for artifact in artifacts:
        d = artifact["descriptor"]
        assert list(d) == list(DESCRIPTOR_FIELDS)
        for value in d.values():
            if isinstance(value, dict):
                assert list(value) == sorted(value)
        data = vault.read_bytes(OWNER, d["artifact_id"])
        assert "sha256:" + hashlib.sha256(data).hexdigest() == d["content_hash"]


def test_the_kept_store_audits_each_tool_call_of_the_run_in_its_session(doc: dict[str, Any], vault: Vault) -> None:
    entries = vault.audit(OWNER, limit=10_000)
    trail = [(e, c) for e in entries if (c := ToolCall.from_entry(e)) is not None]
    assert {(e.tenant, e.user, e.session) for e, _ in trail} == {("acme", "oncall", "incident-20261106")}
    tools = [c.tool for _, c in trail]
    assert tools[:2] == ["capture_incident_events", "query_artifact"]
    assert {"summarise_runbook", "runbook_section", "restart_service"} <= set(tools)
    first, restart = facts(doc, "pinned")["first"]["artifact_id"], facts(doc, "restart")["artifact_id"]
    captured = [c for _, c in trail if c.tool == "capture_incident_events"]
    assert captured[0].produced == (first,)
    assert all(c.took == () and len(c.produced) == 1 for c in captured)
    assert restart in {c.produced[0] for c in captured}
    [(restarting, restarted)] = [(e, c) for e, c in trail if c.tool == "restart_service"]
    assert (restarted.outcome, restarted.took, restarted.produced) == ("ok", (restart,), ())
    assert restarting.seq > max(e.seq for e, c in trail if c.produced == (restart,))
    runbook = facts(doc, "runbook")["runbook_id"]
    assert [c.took for _, c in trail if c.tool == "runbook_section"] == [(runbook,)]
    # the guard's stop and the evidence gate's decisions are on the record of the same run
    stops = [e for e in entries if e.action == "guard_stop"]
    assert [e.artifact_id for e in stops] == [runbook]
    decisions = vault.catalog.evidence_records("acme", "oncall", "incident-20261106", limit=1000)
    decided = {(r.decision, r.artifact_id, r.satisfied) for r in decisions}
    assert ("restart checkout", restart, False) in decided
    assert len({r.decision for r in decisions}) == len(doc["evidence"]["conclusions"])
    assert vault.verify_audit("acme").ok


def test_the_console_shows_the_kept_run(doc: dict[str, Any], vault: Vault) -> None:
    from fastapi.testclient import TestClient

    from refvault.keys import create_key
    from refvault.server.app import create_app
    from tests.server.console.client import sign_in

    _, key = create_key(vault, "acme", "oncall")
    with TestClient(create_app(vault)) as http:
        sign_in(http, key)
        page = http.get("/console/runs", params={"session": OWNER.session}).text
    runbook, restart = facts(doc, "runbook")["runbook_id"], facts(doc, "restart")["artifact_id"]
    assert "Tool call <code>capture_incident_events</code>" in page
    assert "Tool call <code>restart_service</code>" in page
    assert "Guard stop" in page
    assert runbook in page
    assert "<td>restart checkout</td>" in page
    assert restart in page
    assert RUNBOOK_SPAN not in page


# -- the CLI, the default store, failures -----------------------------------------------------------------------------


def test_cli_subprocess_runs_on_a_temporary_store_and_removes_it(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("REFVAULT_STORE", None)
    code = "from refvault.cli import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", code, "demo", "--json"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["ok"] is True
    assert out["store"] is None
    assert out["store_kept"] is False
    assert [s["name"] for s in out["steps"] if s["ok"]] == STEPS
    assert list(tmp_path.iterdir()) == []  # no demo store, no .refvault: nothing accumulates
    assert done.stderr == ""


def test_without_the_guard_step_5_fails_and_the_demo_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LeakGuard, "check", lambda self, request: request)
    code, out = demo(None)
    result = json.loads(out)
    assert code == 1
    assert result["ok"] is False
    assert [s["name"] for s in result["steps"] if not s["ok"]] == ["runbook"]
    f = facts(result, "runbook")
    assert f["blocked_findings"] == []
    assert f["requests_with_runbook_span"]  # the leak reached a request: the check caught it
    assert f["independent_scan_findings"]


def test_without_the_guard_the_human_output_says_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LeakGuard, "check", lambda self, request: request)
    code, out = demo(None, as_json=False)
    assert code == 1
    assert "✘ Step 5 · runbook" in out
    assert "demo FAILED: step 5 did not hold (temporary store removed)" in out


def test_without_the_mcp_sdk_step_4_fails_with_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)
    monkeypatch.setitem(sys.modules, "refvault.integrations.mcp.gateway", None)
    code, out = demo(None, as_json=False)
    assert code == 1
    assert "pip install 'refvault[mcp]'" in out
    assert "Traceback" not in out
    assert "✘ Step 4 · screenshot" in out
    for number, name in ((1, "capture"), (2, "absence"), (3, "pinned"), (5, "runbook"), (6, "restart")):
        assert f"✔ Step {number} · {name}" in out
    assert "demo FAILED: step 4 did not hold" in out


def test_step_4_starts_the_mcp_server_shipped_in_the_refvault_package_not_a_checkout_file() -> None:
    command = scenario.server_command()
    assert command == (sys.executable, "-m", "refvault.demo.incident_mcp_server")
    spec = importlib.util.find_spec(command[2])
    assert spec is not None
    assert spec.origin is not None
    assert Path(spec.origin).parent == Path(scenario.__file__).parent  # installed with refvault, beside the demo


@pytest.mark.parametrize(
    "args",
    [["-m", "refvault.demo.incident_mcp_server"], [str(EXAMPLE)]],
    ids=["the installed module", "the example file"],
)
def test_the_screenshot_server_runs_from_any_working_directory_and_serves_a_png(
    tmp_path: Path, args: list[str]
) -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    async def screenshot() -> tuple[list[str], Any]:
        server = StdioServerParameters(command=sys.executable, args=args, cwd=tmp_path)
        async with Client(server, cache=None) as client:
            tools = [tool.name for tool in (await client.list_tools()).tools]
            return tools, await client.call_tool("dashboard_screenshot", {"panel": "checkout error rate, eu-west"})

    tools, result = asyncio.run(screenshot())
    assert tools == ["dashboard_screenshot"]
    [image] = [block for block in result.content if block.type == "image"]
    assert image.mime_type == "image/png"
    assert base64.b64decode(image.data).startswith(b"\x89PNG\r\n\x1a\n")


def test_the_human_transcript_walks_every_step(kept: tuple[int, dict[str, Any], Path]) -> None:
    code, out = demo(kept[2], as_json=False)  # a kept store runs again and passes again
    assert code == 0
    positions = [out.index(f"Step {n} · {name}") for n, name in enumerate(STEPS, start=1)]
    assert positions == sorted(positions)
    for needle in ("→ capture_incident_events [call_01]", "← [call_02]", "via mcp gateway", "✋ request blocked",
                   "Evidence report", "Conclusions the evidence gate allows", "Conclusions the evidence gate refuses",
                   "identity_mismatch", "incomplete_capture", f"demo passed: all 6 step checks hold (store kept at "
                   f"{kept[2]})"):  # fmt: skip
        assert needle in out
    assert RUNBOOK_SPAN[:64] not in out
    assert "iVBORw0KGgo" not in out


# -- the scripted loop ------------------------------------------------------------------------------------------------


def test_scripted_run_stops_a_leaking_request_before_any_decision(tmp_path: Path) -> None:
    with Vault.open(tmp_path / "store") as vault:
        scope = Scope("t", "u", "s")
        secret = b"sealed words that must never reach the model, repeated so they are long enough to match. " * 2
        sealed = vault.put(scope, secret, media_type="text/plain", disclosure="sealed")
        box = Toolbox(vault)

        @box.tool
        def echo(doc: Ref) -> str:
            """Echo a document (misbehaving)."""
            return doc.text()

        run = ScriptedRun(box, scope, run_id="r1", system="test")
        decided: list[int] = []

        def use(seen: Seen) -> Any:
            decided.append(seen.index)
            seen.request["messages"].clear()  # a decision cannot change the run's history
            return calls(call("echo", doc=sealed.artifact_id))

        def done(seen: Seen) -> Any:
            decided.append(seen.index)
            return answer(str(seen.result()))

        first, second = asyncio.run(run.converse("go", [use, done, done]))
        assert first.request == 0
        assert first.calls[0].call.id == "call_01"
        assert second.request is None
        assert second.blocked
        assert second.reply is None
        assert second.blocked[0]["artifact_id"] == sealed.artifact_id
        assert decided == [0]  # the blocked turn reached no decision, and converse stopped there
        assert len(run.requests) == 1
        assert run.messages[0] == {"role": "system", "content": "test"}
        assert run.withhold_leaks() == ["call_01"]
        third = asyncio.run(run.turn(done))
        assert third.request == 1
        assert "withheld by refvault" in str(third.reply.content if third.reply else "")
        assert requests_containing(run.requests, secret.decode()[:64]) == []


def test_scripted_run_without_a_guard_sends_the_leak(tmp_path: Path) -> None:
    with Vault.open(tmp_path / "store") as vault:
        scope = Scope("t", "u", "s")
        secret = "a sealed paragraph long enough to be recognised by the guard at sixty-four bytes or more."
        sealed = vault.put(scope, secret.encode(), media_type="text/plain", disclosure="sealed")
        box = Toolbox(vault)

        @box.tool
        def echo(doc: Ref) -> str:
            """Echo a document (misbehaving)."""
            return doc.text()

        run = ScriptedRun(box, scope, run_id="r1", guard=None)
        turns_ = asyncio.run(run.converse("go", [lambda s: calls(call("echo", doc=sealed.artifact_id)),
                                                  lambda s: answer("ok")]))  # fmt: skip
        assert [t.blocked for t in turns_] == [(), ()]
        assert requests_containing(run.requests, secret) == [1]
