"""Every selective read is checked for the purpose and recipient it was asked for, from its first lookup:
a sealed grant stays sealed, a grant for one purpose reads for that purpose, and a policy that allows one
purpose does not deny it because an engine looked the artifact up for another."""

from __future__ import annotations

import pytest

from refvault import Principal, Scope, Toolbox, Vault, errors, read
from refvault.policy import Policy, Rule

ANA, BOB = Scope("acme", "ana", "s1"), Scope("acme", "bob", "s7")
TEXT = b"ticket 1: Ada Lovelace\nticket 2: Charles Babbage\n"
ROWS = b"name,email\nAda,ada@example.com\n"


def test_a_sealed_grant_for_one_purpose_is_sealed_for_every_selective_read(memory_vault: Vault) -> None:
    text = memory_vault.put(ANA, TEXT, media_type="text/plain").artifact_id
    rows = memory_vault.put(ANA, ROWS, media_type="text/csv").artifact_id
    for artifact_id in (text, rows):
        memory_vault.share(ANA, artifact_id, to=Principal("acme", "bob"), purposes={"default"}, recipients={"user"})
        memory_vault.share(ANA, artifact_id, to=Principal("acme", "bob"), purposes={"support"}, disclosure="sealed")
    reader = {"purpose": "support", "recipient": "model:x"}
    assert memory_vault.describe(BOB, text, **reader).disclosure == "sealed"
    with pytest.raises(errors.SealedArtifact):
        read.window(memory_vault, BOB, text, **reader)
    with pytest.raises(errors.SealedArtifact):
        read.grep(memory_vault, BOB, text, "Ada", **reader)
    with pytest.raises(errors.SealedArtifact):
        read.query(memory_vault, BOB, rows, **reader)
    assert read.window(memory_vault, BOB, text)["text"] == TEXT.decode()  # the other grant, as it says


def test_a_grant_for_one_purpose_serves_every_selective_read_for_that_purpose(memory_vault: Vault) -> None:
    text = memory_vault.put(ANA, TEXT, media_type="text/plain").artifact_id
    rows = memory_vault.put(ANA, ROWS, media_type="text/csv").artifact_id
    for artifact_id in (text, rows):
        memory_vault.share(ANA, artifact_id, to=Principal("acme", "bob"), purposes={"support"})
    assert read.window(memory_vault, BOB, text, purpose="support")["text"] == TEXT.decode()
    assert [m["line"] for m in read.grep(memory_vault, BOB, text, "Ada", purpose="support")["matches"]] == [0]
    assert read.query(memory_vault, BOB, rows, purpose="support")["records"][0]["record"]["name"] == "Ada"
    with pytest.raises(errors.NotFound):
        read.window(memory_vault, BOB, text)  # the default purpose is not granted


def test_a_policy_allowing_a_purpose_lets_the_model_read_for_it(memory_vault: Vault) -> None:
    text = memory_vault.put(ANA, TEXT, media_type="text/plain", labels={"pii"}).artifact_id
    memory_vault.set_policy(
        ANA.tenant,
        Policy(
            [
                Rule(id="pii-for-support", labels={"pii"}, purposes={"support"}, action="allow"),
                Rule(id="pii-otherwise-denied", labels={"pii"}, action="deny"),
            ]
        ),
    )
    assert read.window(memory_vault, ANA, text, purpose="support")["text"] == TEXT.decode()
    with pytest.raises(errors.PolicyDenied, match="pii-otherwise-denied"):
        read.window(memory_vault, ANA, text)
    box = Toolbox(memory_vault, purpose="support")
    observation = box.call_sync("read_artifact", {"artifact_id": text}, scope=ANA)
    assert not observation.is_error
    assert "Lovelace" in observation.content
    loaded = box.call_sync("load_artifacts", {"artifact_ids": [text]}, scope=ANA)
    assert "Lovelace" in loaded.joined_text()
    describes = [e for e in memory_vault.audit(ANA, artifact_id=text, limit=1000) if e.action == "describe"]
    assert describes
    assert {e.purpose for e in describes if e.outcome == "ok"} == {"support"}
