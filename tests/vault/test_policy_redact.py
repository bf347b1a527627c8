"""A policy's ``redact`` action serves the artifact's redaction derivative: made once, labels decided again."""

from __future__ import annotations

import pytest

from refvault import Principal, Scope, Vault, read
from refvault.errors import NotFound, PolicyDenied
from refvault.policy import Policy, Rule

CANARY = "ada.lovelace.canary@example.com"
TEXT = f"ticket 7: write to {CANARY} about the invoice\n".encode()
REDACT_FOR_MODELS = Policy(
    rules=(Rule(id="pii-to-models", labels=frozenset({"pii"}), recipients=("model:*",), action="redact"),),
    version="r1",
)


def test_a_redact_rule_serves_the_derivative_and_reuses_it(vault: Vault, scope: Scope) -> None:
    source = vault.put(scope, TEXT, media_type="text/plain", labels={"pii"})
    vault.set_policy(scope.tenant, REDACT_FOR_MODELS)
    seen = vault.describe(scope, source.artifact_id, recipient="model:claude")
    assert seen.artifact_id != source.artifact_id
    assert seen.retrieval["lineage"]["kind"] == "redaction"
    assert seen.retrieval["lineage"]["status"] == "current"
    assert seen.retrieval["derived_from"] == (source.artifact_id,)
    assert "pii" not in seen.labels
    shown = vault.read_bytes(scope, source.artifact_id, recipient="model:claude")
    assert CANARY.encode() not in shown
    assert b"[EMAIL_1]" in shown
    again = vault.describe(scope, source.artifact_id, recipient="model:other")
    assert again.artifact_id == seen.artifact_id  # made once, reused
    window = read.window(vault, scope, source.artifact_id, recipient="model:claude")
    assert CANARY not in str(window)
    assert window["lineage"]["kind"] == "redaction"
    # the owner reading for itself gets the source
    assert vault.read_bytes(scope, source.artifact_id) == TEXT
    receipt = vault.receipt(scope, seen.artifact_id)
    assert receipt.policy_version is not None
    assert receipt.policy_version.startswith("r1:")
    assert receipt.sources[0]["artifact_id"] == source.artifact_id


def test_a_grantee_gets_the_derivative_too(vault: Vault, scope: Scope) -> None:
    source = vault.put(scope, TEXT, media_type="text/plain", labels={"pii"})
    vault.set_policy(scope.tenant, REDACT_FOR_MODELS)
    vault.share(scope, source.artifact_id, to=Principal(scope.tenant, "bob"))
    bob = Scope(scope.tenant, "bob", "b1")
    shown = vault.read_bytes(bob, source.artifact_id, recipient="model:claude")
    assert CANARY.encode() not in shown
    assert b"[EMAIL_1]" in shown
    assert vault.read_bytes(bob, source.artifact_id) == TEXT  # the grant covers plain reads


def test_a_derivative_that_still_matches_a_refusing_rule_is_refused(vault: Vault, scope: Scope) -> None:
    source = vault.put(scope, TEXT, media_type="text/plain", labels={"pii", "confidential"})
    policy = Policy(
        rules=(
            Rule(id="pii-to-models", labels=frozenset({"pii"}), recipients=("model:*",), action="redact"),
            Rule(id="no-confidential", labels=frozenset({"confidential"}), recipients=("model:*",), action="deny"),
        ),
        version="r2",
    )
    vault.set_policy(scope.tenant, policy)
    with pytest.raises(PolicyDenied) as refused:
        vault.read_bytes(scope, source.artifact_id, recipient="model:claude")
    assert CANARY not in str(refused.value)
    vault.share(scope, source.artifact_id, to=Principal(scope.tenant, "bob"))
    with pytest.raises(NotFound):  # to anyone but the owner, a refusal is an absent artifact
        vault.read_bytes(Scope(scope.tenant, "bob", "b1"), source.artifact_id, recipient="model:claude")


def test_a_redact_rule_naming_secrets_uses_the_secrets_redactor(vault: Vault, scope: Scope) -> None:
    key = "AKIA" + "Q7ZP3MXK2LBT4NWY"
    source = vault.put(scope, f"aws_access_key_id = {key}\n".encode(), media_type="text/plain", labels={"secret"})
    rule = Rule(id="secrets-out", labels=frozenset({"secret"}), recipients=("model:*",), action="redact")
    vault.set_policy(scope.tenant, Policy(rules=(rule,), version="s1"))
    shown = vault.read_bytes(scope, source.artifact_id, recipient="model:claude")
    assert key.encode() not in shown
    d = vault.describe(scope, source.artifact_id, recipient="model:claude")
    assert vault.receipt(scope, d.artifact_id).transformation.startswith("redact")
