"""The Toolbox's guard enforces the tenant's disclosure policy at the LLM edge: what the read tools and
``load_artifacts`` show one model of a labelled artifact, and what tools read of it by ``Ref``, is stopped on
its way to a model the policy denies those labels, and passes to the model it allows.
"""

from __future__ import annotations

import pytest

from refvault import Ref, Scope, Toolbox, Vault
from refvault.errors import ContextLeak
from refvault.policy import Policy, Rule

SCOPE = Scope("acme", "ana", "s1")
SECRET = "patient Ada Lovelace, born 1815-12-10, ward 7, record MRN-5512-0098-ZZ; " * 4
POLICY = Policy(
    rules=[
        Rule(id="pii-to-the-private-model", labels={"pii"}, recipients=["model:private"], action="allow"),
        Rule(id="no-pii-to-other-models", labels={"pii"}, recipients=["model:*"], action="deny"),
    ],
    version="edge-1",
)


def _request(model: str, text: str) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": "summarise"}, {"role": "tool", "content": text}]}


@pytest.fixture
def pii(memory_vault: Vault) -> str:
    memory_vault.set_policy(SCOPE.tenant, POLICY)
    return memory_vault.put(SCOPE, SECRET.encode(), labels={"pii"}, media_type="text/plain").artifact_id


def test_text_a_read_tool_showed_the_allowed_model_is_stopped_toward_a_denied_one(
    memory_vault: Vault, pii: str
) -> None:
    box = Toolbox(memory_vault, model="private")
    shown = box.call_sync("read_artifact", {"artifact_id": pii}, scope=SCOPE)
    assert not shown.is_error
    assert "Ada Lovelace" in shown.content
    assert box.guard is not None
    box.guard.check(_request("private", shown.content))  # the allowed model: passes
    with pytest.raises(ContextLeak) as stopped:
        box.guard.check(_request("gpt-4o", shown.content))
    assert pii in str(stopped.value)
    assert "no-pii-to-other-models" in str(stopped.value)
    assert "Ada" not in str(stopped.value)


def test_load_artifacts_text_is_watched_the_same_way(memory_vault: Vault, pii: str) -> None:
    box = Toolbox(memory_vault, model="private")
    loaded = box.call_sync("load_artifacts", {"artifact_ids": [pii]}, scope=SCOPE)
    assert not loaded.is_error
    text = " ".join(str(part.get("text", "")) for part in loaded.parts)
    assert "Ada Lovelace" in text
    assert box.guard is not None
    box.guard.check(_request("private", text))
    with pytest.raises(ContextLeak):
        box.guard.check(_request("other", text))


def test_a_value_a_tool_read_by_ref_is_denied_by_rule_toward_the_denied_model(memory_vault: Vault, pii: str) -> None:
    box = Toolbox(memory_vault, model="private")

    @box.tool
    def size(doc: Ref) -> str:
        """How long the document is."""
        return f"{len(doc.read())} bytes"

    assert box.call_sync("size", {"doc": pii}, scope=SCOPE).content == f"{len(SECRET.encode())} bytes"
    assert box.guard is not None
    with pytest.raises(ContextLeak) as stopped:
        box.guard.check(_request("gpt-4o", SECRET))
    assert any(f.rule_id == "no-pii-to-other-models" for f in stopped.value.findings)


def test_without_a_policy_a_read_tools_text_passes_to_any_model(memory_vault: Vault) -> None:
    labelled = memory_vault.put(SCOPE, SECRET.encode(), labels={"team:x"}, media_type="text/plain").artifact_id
    box = Toolbox(memory_vault, model="private")
    shown = box.call_sync("read_artifact", {"artifact_id": labelled}, scope=SCOPE)
    assert box.guard is not None
    assert box.guard.check(_request("gpt-4o", shown.content)) is not None


def test_a_stop_at_the_llm_edge_is_audited_with_the_artifact_the_recipient_and_the_rule(
    memory_vault: Vault, pii: str
) -> None:
    box = Toolbox(memory_vault, model="private")
    shown = box.call_sync("read_artifact", {"artifact_id": pii}, scope=SCOPE)
    assert box.guard is not None
    with pytest.raises(ContextLeak):
        box.guard.check(_request("gpt-4o", shown.content))
    stops = [e for e in memory_vault.audit(SCOPE, artifact_id=pii) if e.action == "guard_stop"]
    assert len(stops) >= 1
    assert {(e.outcome, e.recipient, e.rule_id) for e in stops} == {
        ("ContextLeak", "model:gpt-4o", "no-pii-to-other-models")
    }
    assert all(e.excerpt_hash is None for e in stops)  # a stop discloses nothing
    assert memory_vault.verify_audit(SCOPE.tenant).ok


def test_a_model_request_the_guard_lets_through_with_a_selection_is_in_the_ledger(
    memory_vault: Vault, pii: str
) -> None:
    import hashlib

    box = Toolbox(memory_vault, model="private")
    shown = box.call_sync("read_artifact", {"artifact_id": pii}, scope=SCOPE)
    assert box.guard is not None
    box.guard.check(_request("private", shown.content))
    passes = [d for d in memory_vault.disclosures(SCOPE, pii) if d.action == "guard_pass"]
    assert len(passes) == 1
    (passed,) = passes
    assert passed.recipient == "model:private"
    assert passed.excerpt_hash == hashlib.sha256(shown.content.encode()).hexdigest()  # the part that carried it
    assert passed.bytes == len(shown.content.encode())
    box.guard.check(_request("private", "nothing of it here, just a question about the weather today"))
    assert len([d for d in memory_vault.disclosures(SCOPE, pii) if d.action == "guard_pass"]) == 1


def test_history_re_sent_each_turn_is_ledgered_once(memory_vault: Vault, pii: str) -> None:
    box = Toolbox(memory_vault, model="private")
    shown = box.call_sync("read_artifact", {"artifact_id": pii}, scope=SCOPE)
    assert box.guard is not None
    for turn in range(4):
        request = _request("private", shown.content)
        request["messages"] += [{"role": "user", "content": f"question number {n} about it"} for n in range(turn)]  # type: ignore[operator]
        box.guard.check(request)
    assert len([d for d in memory_vault.disclosures(SCOPE, pii) if d.action == "guard_pass"]) == 1
