"""What the model is told when it passes a mis-copied id: to a read tool, to load_artifacts, or as a Ref."""

from __future__ import annotations

import json
import re

import pytest

from refvault import Ref, Scope, Toolbox, ToolEvent, Vault
from refvault.ids import ARTIFACT_ID_PATTERN, new_artifact_id

SCOPE = Scope("acme", "ana", "s1")
OTHER = Scope("globex", "ana", "s1")
MISCOPIED = "this id looks mis-copied (a character changed, dropped, doubled or swapped)"


def suggestion_text(original: str) -> str:
    return f"{MISCOPIED}; did you mean {original}? Pass that id if it is the one you meant"


def test_a_read_tool_tells_the_model_the_id_looks_miscopied_and_the_id_it_meant(vault: Vault) -> None:
    original = vault.put(SCOPE, b"line one\nline two\n", media_type="text/plain").artifact_id
    vault.put(SCOPE, b"another\n", media_type="text/plain")
    box = Toolbox(vault)
    at = next(i for i in range(9, len(original) - 1) if original[i] != original[i + 1])  # two that differ
    bad = original[:at] + original[at + 1] + original[at] + original[at + 2 :]  # two neighbours swapped
    assert bad != original
    for name, arguments in [
        ("read_artifact", {"artifact_id": bad, "lines": [0, 1]}),
        ("describe_artifact", {"artifact_id": bad}),
    ]:
        obs = box.call_sync(name, json.dumps(arguments), scope=SCOPE)
        assert obs.is_error
        assert obs.content == "error: " + suggestion_text(original)
    obs = box.call_sync("read_artifact", json.dumps({"artifact_id": original, "lines": [0, 1]}), scope=SCOPE)
    assert not obs.is_error  # the suggestion reads


def test_load_artifacts_reports_the_miscopied_id_and_loads_the_others(vault: Vault) -> None:
    first = vault.put(SCOPE, b"first text\n", media_type="text/plain").artifact_id
    second = vault.put(SCOPE, b"second text\n", media_type="text/plain").artifact_id
    box = Toolbox(vault)
    bad = second[:-1]  # the last character dropped
    obs = box.call_sync("load_artifacts", json.dumps({"artifact_ids": [first, bad]}), scope=SCOPE)
    results = json.loads(obs.content)["results"]
    assert [r["status"] for r in results] == ["loaded", "error"]
    assert results[0]["artifact_id"] == first
    assert results[1]["error"] == "MisCopiedId"
    assert results[1]["message"] == suggestion_text(second)
    assert results[1]["artifact_id"] == "(not an artifact id)"  # never the string given
    assert bad not in obs.content.replace(second, "")


def test_a_miscopied_ref_argument_is_refused_with_the_id_meant_and_the_tool_never_runs(vault: Vault) -> None:
    original = vault.put(SCOPE, b"the document").artifact_id
    box = Toolbox(vault)
    events: list[ToolEvent] = []
    box.add_sink(events.append)
    ran: list[str] = []

    @box.tool
    def summarize(doc: Ref) -> str:
        ran.append(doc.artifact_id)
        return "summary"

    bad = original[:20] + original[20] + original[20:]  # a character doubled
    obs = box.call_sync("summarize", json.dumps({"doc": bad}), scope=SCOPE, tool_call_id="call_1")
    assert obs.is_error
    assert obs.content == "error: " + suggestion_text(original)
    assert events[-1].kind == "tool_failed"
    assert events[-1].error_type == "MisCopiedId"
    assert ran == []
    assert box.call_sync("summarize", json.dumps({"doc": original}), scope=SCOPE).content == "summary"


def test_a_miscopied_ref_to_another_scopes_artifact_suggests_nothing(vault: Vault) -> None:
    theirs = vault.put(OTHER, b"not yours").artifact_id
    box = Toolbox(vault)

    @box.tool
    def summarize(doc: Ref) -> str:
        return "summary"

    bad = theirs[:12] + ("a" if theirs[12] != "a" else "b") + theirs[13:]
    obs = box.call_sync("summarize", json.dumps({"doc": bad}), scope=SCOPE)
    assert obs.is_error
    assert theirs not in obs.content
    assert MISCOPIED in obs.content
    assert "no id you can read is close to it" in obs.content


def test_an_unknown_id_is_still_an_unknown_id(vault: Vault) -> None:
    box = Toolbox(vault)

    @box.tool
    def summarize(doc: Ref) -> str:
        return "summary"

    unknown = new_artifact_id()
    obs = box.call_sync("summarize", json.dumps({"doc": unknown}), scope=SCOPE)
    assert obs.content == f"error: no artifact {unknown!r} can be read here; pass an artifact id from this session"


def test_the_ref_pattern_admits_new_and_legacy_ids() -> None:
    assert re.fullmatch(ARTIFACT_ID_PATTERN, new_artifact_id())
    assert re.fullmatch(ARTIFACT_ID_PATTERN, "art_" + "a" * 26)
    assert not re.fullmatch(ARTIFACT_ID_PATTERN, "art_" + "a" * 27)


def test_a_legacy_id_resolves_as_a_ref_and_its_miscopy_is_caught(vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    old = "art_" + "q" * 25 + "e"  # 26 characters, zero padding bits: as ids were minted before the check
    monkeypatch.setattr("refvault.vault.core.new_artifact_id", lambda: old)
    vault.put(SCOPE, b"an old document", media_type="text/plain")
    box = Toolbox(vault)

    @box.tool
    def summarize(doc: Ref) -> str:
        return doc.text().upper()

    assert box.call_sync("summarize", json.dumps({"doc": old}), scope=SCOPE).content == "AN OLD DOCUMENT"
    read = box.call_sync("read_artifact", json.dumps({"artifact_id": old}), scope=SCOPE)
    assert not read.is_error
    missed = box.call_sync("summarize", json.dumps({"doc": old[:6] + "a" + old[7:]}), scope=SCOPE)
    assert missed.content == "error: " + suggestion_text(old)
