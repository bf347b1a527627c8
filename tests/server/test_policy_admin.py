"""A tenant's disclosure policy over HTTP: any key reads it, only an admin key of the tenant sets or removes it,
a bad policy changes nothing, and the server's reads follow the new policy at once."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from refvault import Client, Scope, Vault, errors
from refvault.keys import create_key
from refvault.policy import Policy, Rule
from tests.servers import LiveServer, serve

SCOPE = Scope("acme", "ana", "s1")
POLICY = Policy([Rule(id="no-pii-to-models", labels={"pii"}, recipients=["model:*"], action="deny")], version="v1")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, str, str]]:
    store = tmp_path_factory.mktemp("policy-admin") / "store"
    with Vault.open(store) as vault:
        _, admin = create_key(vault, "acme", "root", admin=True)
        _, foreign_admin = create_key(vault, "globex", "root", admin=True)
    with serve(store) as server:
        yield server, admin, foreign_admin


def test_only_an_admin_key_of_the_tenant_sets_the_policy_and_reads_follow_it(
    world: tuple[LiveServer, str, str],
) -> None:
    live, admin, foreign_admin = world
    with Client(live.url, live.token) as user, Client(live.url, admin) as root:
        pii = user.put(SCOPE, b"Ada Lovelace", labels={"pii"}).artifact_id
        assert user.read_bytes(SCOPE, pii, recipient="model:gpt-x") == b"Ada Lovelace"
        with pytest.raises(errors.Forbidden, match="admin key"):
            user.set_policy(SCOPE, POLICY)
        assert user.policy(SCOPE) is None  # the refused call changed nothing
        root.set_policy(Scope("acme", "root", "ops"), POLICY)
        assert user.policy(SCOPE) == POLICY
        with pytest.raises(errors.PolicyDenied, match="no-pii-to-models"):
            user.read_bytes(SCOPE, pii, recipient="model:gpt-x")
        assert user.read_bytes(SCOPE, pii, recipient="user") == b"Ada Lovelace"
        root.set_policy(Scope("acme", "root", "ops"), None)
        assert user.policy(SCOPE) is None
        assert user.read_bytes(SCOPE, pii, recipient="model:gpt-x") == b"Ada Lovelace"
    with Client(live.url, foreign_admin) as other:  # another tenant's admin sets its own tenant's policy only
        other.set_policy(Scope("globex", "root", "ops"), POLICY)
    with Client(live.url, live.token) as user:
        assert user.policy(SCOPE) is None


def test_a_bad_policy_is_a_clear_400_and_changes_nothing(world: tuple[LiveServer, str, str]) -> None:
    live, admin, _ = world
    headers = {"Authorization": f"Bearer {admin}", "Refvault-Session": "ops", "Content-Type": "application/json"}
    bad = {"version": "v2", "rules": [{"id": "x", "action": "explode"}]}
    answer = httpx.put(live.url + "/v1/policy", headers=headers, content=json.dumps(bad))
    assert answer.status_code == 400
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert "explode" not in answer.text
    with Client(live.url, live.token) as user:
        assert user.policy(SCOPE) is None


def test_setting_the_policy_over_http_is_audited_by_the_admin(world: tuple[LiveServer, str, str]) -> None:
    live, admin, _ = world
    root_scope = Scope("acme", "root", "ops")
    with Client(live.url, admin) as root:
        root.set_policy(root_scope, POLICY)
        root.set_policy(root_scope, None)
        actions = [(e.action, e.outcome, e.detail) for e in root.audit(root_scope, limit=1000)]
    assert ("set_policy", "ok", "policy set") in actions
    assert ("set_policy", "ok", "policy removed") in actions
