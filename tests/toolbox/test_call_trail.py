"""``Toolbox(audit_calls=True)``: one ``tool_call`` audit entry per dispatched call, read back by ``ToolCall``."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from refvault import Ref, Scope, Toolbox, ToolContext, Vault
from refvault.catalog.audit_log import AuditEntry
from refvault.ids import new_artifact_id
from refvault.toolbox.trail import TOOL_CALL, ToolCall, call_selection
from refvault.vault.audit_trail import SELECTION_CHARS

SCOPE = Scope("acme", "ana", "s1")
OTHER = Scope("acme", "ana", "s2")


@pytest.fixture
def disk_vault(tmp_path: Path) -> Iterator[Vault]:
    with Vault.open(tmp_path / "store") as opened:
        yield opened


def calls(vault: Vault, scope: Scope = SCOPE) -> list[tuple[AuditEntry, ToolCall]]:
    found = []
    for entry in vault.audit(scope, limit=10_000):
        call = ToolCall.from_entry(entry)
        if call is not None:
            found.append((entry, call))
    return found


def test_each_call_appends_one_entry_in_order_with_the_ids_it_took_and_produced(disk_vault: Vault) -> None:
    vault = disk_vault
    doc = vault.put(SCOPE, b"a short document about disks", media_type="text/plain").artifact_id
    box = Toolbox(vault, audit_calls=True)

    @box.tool
    def summarize(doc: Ref) -> str:
        """Summarise."""
        return doc.text()[:7]

    @box.tool
    def render(data: Ref) -> bytes:
        """Upper-case."""
        return data.read().upper()

    @box.tool
    def split(data: Ref, ctx: ToolContext) -> str:
        """Put two halves through the context."""
        body = data.read()
        first = ctx.vault.put(ctx.scope, body[:5]).artifact_id
        ctx.vault.put(ctx.scope, body[5:])
        ctx.vault.describe(ctx.scope, first)  # reading back what it made: still produced, not took
        return "split"

    box.call_sync("summarize", {"doc": doc}, scope=SCOPE, run_id="r")
    rendered = box.call_sync("render", {"data": doc}, scope=SCOPE, run_id="r").artifacts[0]["artifact_id"]
    asyncio.run(box.call("split", {"data": rendered}, scope=SCOPE, run_id="r"))
    box.call_sync("read_artifact", {"artifact_id": rendered}, scope=SCOPE, run_id="r")

    found = calls(vault)
    assert [call.tool for _, call in found] == ["summarize", "render", "split", "read_artifact"]
    assert [call.outcome for _, call in found] == ["ok"] * 4
    seqs = [call.seq for _, call in found]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == 4
    summarized, rendering, splitting, reading = (call for _, call in found)
    assert (summarized.took, summarized.produced) == ((doc,), ())
    assert (rendering.took, rendering.produced) == ((doc,), (rendered,))
    assert splitting.took == (rendered,)
    assert len(splitting.produced) == 2
    assert rendered not in splitting.produced
    assert (reading.took, reading.produced) == ((rendered,), ())
    entries = [entry for entry, _ in found]
    assert [entry.artifact_id for entry in entries] == [None, rendered, splitting.produced[0], None]
    assert [entry.records for entry in entries] == [0, 1, 2, 0]
    assert entries[1].selection == f"took={doc} produced={rendered}"
    assert entries[0].selection == f"took={doc} produced="
    assert all(
        (e.tenant, e.user, e.session, e.action) == (SCOPE.tenant, SCOPE.user, SCOPE.session, TOOL_CALL) for e in entries
    )
    assert vault.verify_audit(SCOPE.tenant).ok


def test_each_entry_is_in_its_own_calls_scope(memory_vault: Vault) -> None:
    box = Toolbox(memory_vault, audit_calls=True)

    @box.tool
    def ping() -> str:
        """Ping."""
        return "pong"

    box.call_sync("ping", {}, scope=SCOPE)
    box.call_sync("ping", {}, scope=OTHER)
    box.call_sync("nope", {}, scope=OTHER)  # refused before any scope was served: still the call's own
    assert len(calls(memory_vault, SCOPE)) == 1
    assert [(e.session, c.outcome) for e, c in calls(memory_vault, OTHER)] == [("s2", "ok"), ("s2", "UnknownTool")]


def test_calls_are_not_audited_by_default(memory_vault: Vault) -> None:
    doc = memory_vault.put(SCOPE, b"text").artifact_id
    box = Toolbox(memory_vault)

    @box.tool
    def render(data: Ref) -> bytes:
        """Copy."""
        return data.read()

    box.call_sync("render", {"data": doc}, scope=SCOPE)
    box.call_sync("read_artifact", {"artifact_id": doc}, scope=SCOPE)
    assert not box.audit_calls
    entries = memory_vault.audit(SCOPE, limit=10_000)
    assert {e.action for e in entries} >= {"put", "read"}
    assert [e for e in entries if e.action == TOOL_CALL] == []


def test_audit_calls_must_be_a_bool(memory_vault: Vault) -> None:
    from refvault.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="audit_calls"):
        Toolbox(memory_vault, audit_calls="yes")  # type: ignore[arg-type]


def test_a_failing_tool_records_its_error_class_and_a_refused_call_its_kind(memory_vault: Vault) -> None:
    doc = memory_vault.put(SCOPE, b"text").artifact_id
    box = Toolbox(memory_vault, audit_calls=True)

    @box.tool
    def explode(data: Ref) -> str:
        """Fail."""
        raise ValueError("no")

    @box.tool
    def count(n: int) -> int:
        """Count."""
        return n

    assert box.call_sync("explode", {"data": doc}, scope=SCOPE).is_error
    assert box.call_sync("explode", {"data": "art_" + "a" * 26}, scope=SCOPE).is_error
    assert box.call_sync("count", {"n": "many"}, scope=SCOPE).is_error
    assert box.call_sync("missing_tool", {}, scope=SCOPE).is_error
    found = [(entry.detail, call.outcome, call.took, call.produced) for entry, call in calls(memory_vault)]
    assert found == [
        ("explode", "ValueError", (doc,), ()),
        ("explode", "BadRef", (), ()),
        ("count", "BadArguments", (), ()),
        (None, "UnknownTool", (), ()),
    ]
    assert calls(memory_vault)[-1][1].tool is None


def test_a_tool_raising_a_base_exception_is_still_audited(memory_vault: Vault) -> None:
    box = Toolbox(memory_vault, audit_calls=True)

    @box.tool
    def stop() -> str:
        """Interrupt."""
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        box.call_sync("stop", {}, scope=SCOPE)
    assert [(c.tool, c.outcome) for _, c in calls(memory_vault)] == [("stop", "KeyboardInterrupt")]


def test_no_argument_value_or_content_canary_reaches_any_audit_field(memory_vault: Vault) -> None:
    canary = "CANARY" + secrets.token_hex(16)
    doc = memory_vault.put(SCOPE, f"body {canary} body".encode(), media_type="text/plain").artifact_id
    box = Toolbox(memory_vault, audit_calls=True)

    @box.tool
    def echo(data: Ref, note: str, ctx: ToolContext) -> str:
        """Echo content and the note, and put them."""
        ctx.vault.put(ctx.scope, (data.text() + note).encode(), filename=note[:40])
        return data.text() + note

    @box.tool
    def leak(data: Ref, note: str) -> bytes:
        """Return content; or fail naming it."""
        if note.startswith("fail"):
            raise RuntimeError(data.text() + note)
        return (data.text() + note).encode()

    box.call_sync("echo", {"data": doc, "note": canary}, scope=SCOPE)
    box.call_sync("leak", {"data": doc, "note": canary}, scope=SCOPE)
    box.call_sync("leak", {"data": doc, "note": "fail" + canary}, scope=SCOPE)
    box.call_sync("leak", {"data": canary, "note": canary}, scope=SCOPE)
    box.call_sync("tool_" + canary, {"note": canary}, scope=SCOPE)
    box.call_sync(
        "query_artifact", {"artifact_id": doc, "where": {"field": canary, "op": "eq", "value": canary}}, scope=SCOPE
    )
    assert len(calls(memory_vault)) == 6
    entries = list(memory_vault.catalog.audit_entries(SCOPE.tenant))
    assert entries
    for entry in entries:
        for value in entry:
            assert canary not in str(value), entry


def test_a_selection_too_long_for_its_column_keeps_whole_ids_and_ends_with_plus_n(memory_vault: Vault) -> None:
    inputs = [memory_vault.put(SCOPE, f"part {i}".encode()).artifact_id for i in range(12)]
    box = Toolbox(memory_vault, audit_calls=True)

    @box.tool
    def fan_out(parts: list[Ref], ctx: ToolContext) -> str:
        """Copy every part."""
        for part in parts:
            ctx.vault.put(ctx.scope, part.read())
        return "done"

    box.call_sync("fan_out", {"parts": inputs}, scope=SCOPE)
    [(entry, call)] = calls(memory_vault)
    assert entry.selection is not None
    assert len(entry.selection) <= SELECTION_CHARS
    took_part, produced_part = entry.selection.removeprefix("took=").split(" produced=")
    assert took_part.endswith(f",+{call.more_took}")
    assert produced_part.endswith(f",+{call.more_produced}")
    assert call.more_took > 0
    assert call.more_produced > 0
    assert call.took == tuple(inputs[: len(call.took)])
    assert len(call.took) + call.more_took == 12
    assert len(call.produced) + call.more_produced == 12 == entry.records
    assert entry.artifact_id == call.produced[0]
    assert len(call.took) >= 1
    assert len(call.produced) >= 1


def test_call_selection_lists_everything_that_fits_and_counts_the_rest() -> None:
    ids = [new_artifact_id() for _ in range(20)]
    assert call_selection([], []) == "took= produced="
    assert call_selection(ids[:2], ids[2:3]) == f"took={ids[0]},{ids[1]} produced={ids[2]}"
    assert call_selection(ids[:3], [], limit=80) == f"took={ids[0]},+2 produced="
    assert call_selection(ids[:3], ids[3:5], limit=20) == "took=+3 produced=+2"
    assert call_selection(["not an id", ids[0], "x,y"], []) == f"took={ids[0]} produced="
    for took in range(0, 20, 3):
        for produced in range(0, 20, 4):
            text = call_selection(ids[:took], ids[took : took + produced])
            assert len(text) <= SELECTION_CHARS
            if len(f"took={','.join(ids[:took])} produced={','.join(ids[took : took + produced])}") > SELECTION_CHARS:
                assert ",+" in text or "=+" in text


def test_from_entry_round_trips_what_a_call_wrote(disk_vault: Vault) -> None:
    ids = [new_artifact_id() for _ in range(15)]
    for took, produced in [(0, 0), (1, 0), (0, 1), (2, 3), (9, 0), (0, 9), (8, 7)]:
        shown = call_selection(ids[:took], ids[took : took + produced])
        entry = AuditEntry(7, 1_800_000_000_000_000, "acme", "ana", "s1", TOOL_CALL, "ok", selection=shown, detail="t")
        call = ToolCall.from_entry(entry)
        assert call is not None
        assert (call.seq, call.at, call.tool, call.outcome) == (7, entry.at, "t", "ok")
        assert call.took == tuple(ids[: len(call.took)])
        assert len(call.took) + call.more_took == took
        assert call.produced == tuple(ids[took : took + len(call.produced)])
        assert len(call.produced) + call.more_produced == produced
        if not (call.more_took or call.more_produced):
            assert call_selection(call.took, call.produced) == shown
    put = disk_vault.put(SCOPE, b"x")
    box = Toolbox(disk_vault, audit_calls=True)
    box.call_sync("describe_artifact", {"artifact_id": put.artifact_id}, scope=SCOPE)
    entries = disk_vault.audit(SCOPE, limit=100)
    assert [ToolCall.from_entry(e) is None for e in entries] == [e.action != TOOL_CALL for e in entries]
    [stored] = [e for e in entries if e.action == TOOL_CALL]
    assert ToolCall.from_entry(stored) == ToolCall(
        stored.seq, stored.at, "describe_artifact", "ok", (put.artifact_id,), (), 0, 0
    )
