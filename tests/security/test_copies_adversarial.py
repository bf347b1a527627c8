"""Derived copies under attack: what another principal learns, what a careless redaction declassifies, what a
revoked grant still streams, and a copy made while its source is deleted."""

from __future__ import annotations

from typing import Any

import pytest

from refvault import Principal, Scope, Vault
from refvault.errors import NotFound, PolicyDenied, QuotaExceeded
from refvault.policy import Policy, Quotas, Rule

ANA = Scope("acme", "ana", "s1")
BOB = Scope("acme", "bob", "b1")
SALARY = b"secret salary 12345"


def test_naming_anothers_artifact_as_a_source_tells_nothing_of_it(vault: Vault) -> None:
    theirs = vault.put(ANA, SALARY, media_type="text/plain")
    upstream = vault.put(ANA, b"upstream", media_type="text/plain")
    vault.supersede(ANA, upstream.artifact_id, theirs.artifact_id, reason="newer")
    mine = vault.put(BOB, b"x", media_type="text/plain", derived_from=[theirs.artifact_id])
    assert list(mine.retrieval["lineage"]["sources"]) == [theirs.artifact_id]  # an id only, never a hash
    receipt = vault.receipt(BOB, mine.artifact_id)
    assert receipt.sources[0]["content_hash"] is None  # bob may not read it: its hash is not recorded
    assert theirs.content_hash not in str(receipt.to_dict())
    graph = vault.lineage(BOB, mine.artifact_id, direction="up")
    node = graph.node(theirs.artifact_id)
    assert (node.visible, node.state, node.content_hash, node.bytes, node.transformation) == (
        False,
        None,
        None,
        None,
        None,
    )
    assert {n.id for n in graph.nodes} == {mine.artifact_id, theirs.artifact_id}  # not walked above ana's


def test_a_source_shared_with_the_caller_is_recorded_with_its_hash(vault: Vault) -> None:
    shared = vault.put(ANA, SALARY, media_type="text/plain")
    vault.share(ANA, shared.artifact_id, to=Principal("acme", "bob"))
    mine = vault.put(BOB, b"x", media_type="text/plain", derived_from=[shared.artifact_id])
    assert vault.receipt(BOB, mine.artifact_id).sources[0]["content_hash"] == shared.content_hash


def test_a_receipt_is_the_owners_alone(vault: Vault) -> None:
    source = vault.put(ANA, b"mail ada@example.com", media_type="text/plain", labels={"pii"})
    copy = vault.redact(ANA, source.artifact_id)
    vault.share(ANA, copy.artifact_id, to=Principal("acme", "bob"))
    assert vault.read_bytes(BOB, copy.artifact_id) == b"mail [EMAIL_1]"
    with pytest.raises(NotFound):
        vault.receipt(BOB, copy.artifact_id)


def test_redacting_named_fields_keeps_the_labels(vault: Vault) -> None:
    record = b'{"user":{"name":"Ada"},"email":"ada@example.com"}'
    source = vault.put(ANA, record, media_type="application/json", labels={"pii"})
    rule = Rule(id="no-pii-to-models", labels=frozenset({"pii"}), recipients=("model:*",), action="deny")
    vault.set_policy(ANA.tenant, Policy(rules=(rule,), version="1"))
    copy = vault.redact(ANA, source.artifact_id, fields=["user.name"])
    assert copy.labels == {"pii"}  # a field list proves nothing about the rest of the record
    with pytest.raises(PolicyDenied):
        vault.read_bytes(ANA, copy.artifact_id, recipient="model:gpt")
    assert vault.redact(ANA, source.artifact_id).labels == frozenset()  # the detectors remove it


def test_a_revoked_grant_stops_a_stream_of_a_copy_that_is_not_the_policys_redaction(vault: Vault) -> None:
    big = b"row of data " * 200_000
    source = vault.put(ANA, big, media_type="text/plain", labels={"pii"})
    copy = vault.put(ANA, big, media_type="text/plain", derived_from=[source.artifact_id])  # a raw copy
    vault.share(ANA, source.artifact_id, to=Principal("acme", "bob"))
    grant = vault.share(ANA, copy.artifact_id, to=Principal("acme", "bob"))
    stream = vault.stream(BOB, copy.artifact_id)
    with stream:
        stream.read(1 << 20)
        vault.revoke(ANA, grant.grant_id)
        rule = Rule(id="r", labels=frozenset({"pii"}), action="redact")
        vault.set_policy(ANA.tenant, Policy(rules=(rule,), version="1"))
        with pytest.raises(NotFound):
            stream.read()


def test_a_redaction_never_outlives_a_source_deleted_while_it_was_made(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = vault.put(ANA, b"call ada@example.com\n", media_type="text/plain", labels={"pii"})
    real = type(vault)._verified_bytes

    def read_then_lose_the_source(self: Any, manifest: Any) -> bytes:
        data = real(self, manifest)
        vault.delete(ANA, source.artifact_id, cascade=True)  # another caller erases it meanwhile
        return data

    monkeypatch.setattr(type(vault), "_verified_bytes", read_then_lose_the_source)
    with pytest.raises(NotFound):
        vault.redact(ANA, source.artifact_id)
    assert [d for d in vault.list(ANA) if d.artifact_id != source.artifact_id] == []


def test_a_quota_refusal_names_no_totals_and_a_grantee_learns_nothing(vault: Vault) -> None:
    source = vault.put(ANA, b"mail ada@example.com " * 10, media_type="text/plain", labels={"pii"})
    vault.share(ANA, source.artifact_id, to=Principal("acme", "bob"), purposes=["support"])
    rule = Rule(id="r1", labels=frozenset({"pii"}), action="redact")
    vault.set_policy(ANA.tenant, Policy(rules=(rule,), version="1", quotas=Quotas(tenant_bytes=250)))
    with pytest.raises(NotFound) as refused:
        vault.read_bytes(BOB, source.artifact_id, purpose="support")
    assert str(refused.value) == str(NotFound(source.artifact_id))
    with pytest.raises(QuotaExceeded) as over:
        vault.put(ANA, b"y" * 100)
    assert "250" not in str(over.value)
    assert str(source.size) not in str(over.value)


def test_a_retried_put_is_never_refused_by_the_quota_it_already_counts_in(vault: Vault) -> None:
    vault.set_policy(ANA.tenant, Policy(version="1", quotas=Quotas(tenant_bytes=150)))
    first = vault.put(ANA, b"z" * 100, idempotency_key="k1")
    again = vault.put(ANA, b"z" * 100, idempotency_key="k1")  # the retry returns the first capture
    assert again.artifact_id == first.artifact_id
    with pytest.raises(QuotaExceeded):
        vault.put(ANA, b"z" * 100, idempotency_key="k2")
