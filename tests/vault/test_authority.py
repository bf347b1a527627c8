"""The one door every read goes through (refvault.vault.authority): owner or grant, expiry, the tenant's policy.

On every backend: the tenant's policy is stored and read back; each read method, each selective read and each
cursor page is decided by it with the read's purpose and recipient; the owner is told the rule, anyone else
gets the absent artifact's NotFound; a stream is authorised again at every chunk; ``list`` drops what is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from refvault import Scope, Vault, read
from refvault.catalog.base import Manifest
from refvault.errors import Expired, InvalidArgument, NotFound, PolicyDenied
from refvault.policy import Decision, Policy, Rule
from refvault.vault import authority
from refvault.vault.authority import authorize, policy_setting
from tests.conftest import Clock, payload

OWNER = Scope("acme", "ana", "s1")
GRANTEE = Scope("acme", "bob", "s9")
TEXT = b"".join(b"line %d: alpha beta\n" % n for n in range(300))
RECORDS = b"".join(b'{"n": %d, "name": "r%d"}\n' % (n, n) for n in range(40))
NO_PII_TO_MODELS = Rule("no-pii-to-models", labels=frozenset({"pii"}), recipients=("model:*",))
PII_ONLY_FOR_SUPPORT = Rule("pii-only-for-support", labels=frozenset({"pii"}), purposes=frozenset({"billing"}))
POLICY = Policy([NO_PII_TO_MODELS, PII_ONLY_FOR_SUPPORT], version="3")


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand in for a sharing grant: GRANTEE may read OWNER's artifacts through the hook (grant id ``grt_test``)."""

    def hook(vault: Any, scope: Scope, artifact_id: str, *, purpose: str, recipient: str) -> Manifest | None:
        if scope != GRANTEE:
            return None
        found = vault.catalog.find(OWNER, artifact_id)
        return None if found is None else replace(found, grant_id="grt_test")

    monkeypatch.setattr(authority, "_shared", hook)


def _error(call: Callable[[], object]) -> Exception:
    with pytest.raises(Exception) as caught:
        call()
    return caught.value


def test_a_policy_is_stored_per_tenant_and_read_back(vault: Vault) -> None:
    assert vault.policy("acme") is None
    vault.set_policy("acme", POLICY)
    assert vault.policy("acme") == POLICY
    assert vault.policy("globex") is None
    assert vault.catalog.get_setting(policy_setting("acme")) == POLICY.to_json()
    vault.set_policy("acme", None)
    assert vault.policy("acme") is None


def test_set_policy_checks_its_arguments(vault: Vault) -> None:
    with pytest.raises(InvalidArgument, match="tenant"):
        vault.set_policy("bad tenant", POLICY)
    with pytest.raises(InvalidArgument, match="Policy"):
        vault.set_policy("acme", {"rules": []})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="own tenant"):
        vault.set_policy("acme", POLICY, by=Scope("globex", "ana", "s1"))
    assert vault.policy("acme") is None


def test_with_no_policy_every_read_is_as_before(vault: Vault) -> None:
    d = vault.put(OWNER, TEXT, media_type="text/plain", labels={"pii", "secret"})
    for recipient in ("user", "model:gpt-4o", "tool:search", "export"):
        assert vault.read_bytes(OWNER, d.artifact_id, purpose="anything", recipient=recipient) == TEXT
    assert [x.artifact_id for x in vault.list(OWNER, recipient="model:x")] == [d.artifact_id]


def test_the_owner_is_told_the_rule_and_never_the_content(vault: Vault) -> None:
    d = vault.put(OWNER, TEXT, media_type="text/plain", labels={"pii"})
    vault.set_policy("acme", POLICY)
    reads: list[Callable[[], object]] = [
        lambda: vault.describe(OWNER, d.artifact_id, recipient="model:gpt-4o"),
        lambda: vault.read_bytes(OWNER, d.artifact_id, recipient="model:gpt-4o"),
        lambda: vault.read_range(OWNER, d.artifact_id, 5, 10, recipient="model:gpt-4o"),
        lambda: vault.stream(OWNER, d.artifact_id, recipient="model:gpt-4o"),
        lambda: vault.open_artifact(OWNER, d.artifact_id, recipient="model:gpt-4o"),
        lambda: vault.verify_artifact(OWNER, d.artifact_id, recipient="model:gpt-4o"),
        lambda: read.window(vault, OWNER, d.artifact_id, lines=[0, 5], recipient="model:gpt-4o"),
        lambda: read.grep(vault, OWNER, d.artifact_id, "alpha", recipient="model:gpt-4o"),
    ]
    for call in reads:
        error = _error(call)
        assert isinstance(error, PolicyDenied)
        assert error.rule_id == "no-pii-to-models"
        assert "no-pii-to-models" in str(error)
        assert d.artifact_id in str(error)
        assert "alpha" not in str(error)
    denied = _error(lambda: vault.read_bytes(OWNER, d.artifact_id, purpose="billing"))
    assert isinstance(denied, PolicyDenied)
    assert denied.rule_id == "pii-only-for-support"
    # What no rule refuses is served.
    assert vault.read_bytes(OWNER, d.artifact_id) == TEXT
    assert vault.read_bytes(OWNER, d.artifact_id, purpose="support", recipient="tool:search") == TEXT
    assert read.window(vault, OWNER, d.artifact_id, lines=[0, 1], recipient="tool:x")["text"] == "line 0: alpha beta\n"


def test_only_labelled_artifacts_are_refused(vault: Vault) -> None:
    plain = vault.put(OWNER, TEXT, media_type="text/plain")
    secret = vault.put(OWNER, TEXT, media_type="text/plain", labels={"secret"})
    vault.set_policy("acme", POLICY)
    assert vault.read_bytes(OWNER, plain.artifact_id, recipient="model:x") == TEXT
    assert vault.read_bytes(OWNER, secret.artifact_id, recipient="model:x") == TEXT  # no rule names "secret"


def test_a_denial_to_anyone_but_the_owner_is_the_absent_artifacts_not_found(vault: Vault, shared: None) -> None:
    d = vault.put(OWNER, TEXT, media_type="text/plain", labels={"pii"})
    absent = "art_" + "q" * 26
    assert vault.read_bytes(GRANTEE, d.artifact_id) == TEXT  # the (stand-in) grant lets it through
    vault.set_policy("acme", POLICY)
    for method in ("describe", "read_bytes", "stream", "verify_artifact"):
        denied = _error(lambda m=method: getattr(vault, m)(GRANTEE, d.artifact_id, recipient="model:x"))
        missing = _error(lambda m=method: getattr(vault, m)(GRANTEE, absent, recipient="model:x"))
        assert type(denied) is NotFound
        assert type(missing) is NotFound
        assert str(denied).replace(d.artifact_id, absent) == str(missing)
    window = _error(lambda: read.window(vault, GRANTEE, d.artifact_id, recipient="model:x"))
    assert type(window) is NotFound
    assert vault.describe(GRANTEE, d.artifact_id, recipient="tool:x").scope["grant_id"] == "grt_test"


def test_an_expired_artifact_is_expired_to_its_owner_and_absent_to_anyone_else(
    vault: Vault, clock: Clock, shared: None
) -> None:
    d = vault.put(OWNER, b"short-lived", expires_at=clock.now + timedelta(seconds=10))
    clock.advance(seconds=11)
    assert isinstance(_error(lambda: vault.read_bytes(OWNER, d.artifact_id)), Expired)
    assert type(_error(lambda: vault.read_bytes(GRANTEE, d.artifact_id))) is NotFound


def test_list_drops_what_the_policy_refuses_the_recipient(vault: Vault) -> None:
    pii = vault.put(OWNER, b"a", labels={"pii"})
    plain = vault.put(OWNER, b"b")
    vault.set_policy("acme", POLICY)
    assert [x.artifact_id for x in vault.list(OWNER)] == [plain.artifact_id, pii.artifact_id]
    assert [x.artifact_id for x in vault.list(OWNER, recipient="model:gpt-4o")] == [plain.artifact_id]
    assert [x.artifact_id for x in vault.list(OWNER, purpose="billing")] == [plain.artifact_id]


def test_a_stream_is_authorised_again_at_each_chunk(vault: Vault) -> None:
    data = payload(3 * (1 << 20) + 5)
    d = vault.put(OWNER, data, labels={"pii"})
    with vault.stream(OWNER, d.artifact_id, recipient="model:x") as stream:
        first = stream.read(1 << 20)
        assert first == data[: 1 << 20]
        vault.set_policy("acme", POLICY)
        with pytest.raises(PolicyDenied, match="no-pii-to-models"):
            stream.read(1 << 20)
    vault.set_policy("acme", None)
    with vault.stream(OWNER, d.artifact_id, recipient="user") as stream:  # another recipient: unaffected
        vault.set_policy("acme", POLICY)
        assert stream.read() == data


def test_each_cursor_page_goes_through_the_door(vault: Vault) -> None:
    d = vault.put(OWNER, RECORDS, media_type="application/x-ndjson", labels={"pii"})
    page = read.query(vault, OWNER, d.artifact_id, limit=10, recipient="model:x")
    assert page["returned_records"] == 10
    assert page["next_cursor"] is not None
    vault.set_policy("acme", POLICY)
    with pytest.raises(PolicyDenied, match="no-pii-to-models"):
        read.query(vault, OWNER, d.artifact_id, limit=10, cursor=page["next_cursor"], recipient="model:x")
    following = read.query(vault, OWNER, d.artifact_id, limit=10, cursor=page["next_cursor"], recipient="user")
    assert [r["index"] for r in following["records"]] == list(range(10, 20))
    with pytest.raises(PolicyDenied):
        read.derive(vault, OWNER, d.artifact_id, recipient="model:x")


def test_selective_reads_check_purpose_and_recipient_before_reading(vault: Vault) -> None:
    d = vault.put(OWNER, TEXT, media_type="text/plain")
    with pytest.raises(InvalidArgument, match="a recipient is"):
        read.window(vault, OWNER, d.artifact_id, recipient="somebody")
    with pytest.raises(InvalidArgument, match="a purpose is"):
        read.grep(vault, OWNER, d.artifact_id, "x", purpose="two words")
    with pytest.raises(InvalidArgument, match="a recipient is"):
        vault.read_bytes(OWNER, d.artifact_id, recipient="model:")
    with pytest.raises(InvalidArgument, match="a recipient is"):
        vault.list(OWNER, recipient="")


def test_authorize_fills_the_audit_facts(vault: Vault, shared: None) -> None:
    d = vault.put(OWNER, b"x", labels={"pii"})
    vault.set_policy(
        "acme", Policy([Rule("billing-ok", purposes=frozenset({"billing"}), action="allow"), *POLICY.rules])
    )
    facts: dict[str, Any] = {}
    authorize(vault, OWNER, d.artifact_id, purpose="billing", recipient="model:x", facts=facts)
    assert facts == {"purpose": "billing", "recipient": "model:x", "rule_id": "billing-ok", "grant_id": None}
    facts = {}
    with pytest.raises(NotFound):
        authorize(vault, GRANTEE, d.artifact_id, recipient="model:x", facts=facts)
    assert facts == {
        "purpose": "default",
        "recipient": "model:x",
        "rule_id": "no-pii-to-models",
        "grant_id": "grt_test",
    }
    facts = {}
    authorize(vault, OWNER, d.artifact_id, facts=facts)
    assert facts["rule_id"] is None


def test_the_decision_is_the_policys_decide(vault: Vault) -> None:
    d = vault.put(OWNER, b"x", labels={"pii"})
    vault.set_policy("acme", POLICY)
    manifest = authorize(vault, OWNER, d.artifact_id, recipient="tool:x")
    assert manifest.artifact_id == d.artifact_id
    assert POLICY.decide(manifest.labels, "default", "model:y") == Decision("deny", "no-pii-to-models")


def test_another_process_sees_a_new_policy_within_the_recheck_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Vault.open(tmp_path / "store") as first, Vault.open(tmp_path / "store") as second:
        d = first.put(OWNER, b"x", labels={"pii"})
        assert second.read_bytes(OWNER, d.artifact_id, recipient="model:x") == b"x"  # caches "no policy"
        first.set_policy("acme", POLICY)
        assert second.read_bytes(OWNER, d.artifact_id, recipient="model:x") == b"x"  # within the interval
        with pytest.raises(PolicyDenied):
            first.read_bytes(OWNER, d.artifact_id, recipient="model:x")  # the setter sees it at once
        monkeypatch.setattr(authority, "POLICY_RECHECK", 0.0)
        with pytest.raises(PolicyDenied):
            second.read_bytes(OWNER, d.artifact_id, recipient="model:x")


def test_a_refused_readers_own_audit_view_names_no_rule_and_no_grant(memory_vault: Vault) -> None:
    from refvault import Principal

    pii = memory_vault.put(OWNER, b"Ada", labels={"pii"}).artifact_id
    memory_vault.share(OWNER, pii, to=Principal("acme", "bob"))
    memory_vault.set_policy(OWNER.tenant, Policy([NO_PII_TO_MODELS]))
    absent = "art_" + "q" * 26
    for artifact_id in (pii, absent):
        with pytest.raises(NotFound):
            memory_vault.read_bytes(GRANTEE, artifact_id, recipient="model:x")
    refused = [e for e in memory_vault.audit(GRANTEE, limit=1000) if e.outcome == "NotFound"]
    assert len(refused) == 2
    assert [(e.rule_id, e.grant_id) for e in refused] == [(None, None), (None, None)]  # as for an absent id
    owners_view = [e for e in memory_vault.audit(OWNER, artifact_id=pii) if e.user == "bob" and e.outcome != "ok"]
    assert owners_view[0].rule_id == "no-pii-to-models"  # the owner sees why
    for bad in (None, "not-a-tenant name", "x" * 200):
        with pytest.raises(InvalidArgument):
            memory_vault.set_policy(bad, None)  # type: ignore[arg-type]
    assert memory_vault.catalog.audit_tenants() == ["acme"]  # no chain was started for a bad tenant name


def test_an_audit_page_holds_at_most_limit_entries_and_pages_on(memory_vault: Vault) -> None:
    artifact_id = memory_vault.put(OWNER, b"hello").artifact_id
    for _ in range(9):
        memory_vault.read_bytes(OWNER, artifact_id)
    everything = memory_vault.audit(OWNER, limit=1000)
    assert len(everything) == 10
    pages, after = [], 0
    while page := memory_vault.audit(OWNER, after=after, limit=3):
        assert len(page) <= 3
        pages.append(page)
        after = page[-1].seq
    assert [len(page) for page in pages] == [3, 3, 3, 1]
    assert [e.seq for page in pages for e in page] == [e.seq for e in everything]
    assert len(memory_vault.audit(OWNER, artifact_id=artifact_id, limit=2)) == 2
