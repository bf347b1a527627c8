"""Capability links on every backend: bound to one artifact, range, recipient and purpose; short-lived; re-checked
at every use; every refusal the same."""

from __future__ import annotations

from datetime import timedelta

import pytest

from refvault import Scope, Vault, errors
from refvault.keyring import b64url
from refvault.vault.links import LINK_PATH, redeem_link
from refvault.vault.reports import AuditRecord
from tests.conftest import Clock

OWNER = Scope("acme", "ana", "s1")
DATA = b"0123456789" * 1000


def _token(path: str) -> str:
    assert path.startswith(LINK_PATH)
    return path.removeprefix(LINK_PATH)


def _read(vault: Vault, token: str) -> bytes:
    opened = vault.open_link(token)
    with opened.stream as stream:
        return stream.read(opened.end - opened.start)


def _refusal(vault: Vault, token: str) -> str:
    with pytest.raises(errors.LinkRefused) as caught:
        vault.open_link(token)
    assert isinstance(caught.value, errors.NotFound)  # refused like an absent artifact
    return str(caught.value)


def test_a_link_opens_the_whole_artifact_or_exactly_its_range(vault: Vault) -> None:
    artifact_id = vault.put(OWNER, DATA, media_type="text/plain").artifact_id
    whole = vault.link(OWNER, artifact_id, recipient="user")
    assert _read(vault, _token(whole)) == DATA
    part = vault.link(OWNER, artifact_id, recipient="export", byte_range=(10, 25))
    opened = vault.open_link(_token(part))
    with opened.stream as stream:
        assert (opened.start, opened.end) == (10, 25)
        assert stream.read(opened.end - opened.start) == DATA[10:25]
    link = redeem_link(vault, _token(part))
    assert (link.scope, link.artifact_id, link.byte_range, link.recipient, link.purpose) == (
        OWNER,
        artifact_id,
        (10, 25),
        "export",
        "default",
    )


def test_issuing_checks_its_arguments_and_the_issuers_access(vault: Vault) -> None:
    artifact_id = vault.put(OWNER, DATA).artifact_id
    with pytest.raises(errors.InvalidArgument, match="byte_range ends past"):
        vault.link(OWNER, artifact_id, recipient="user", byte_range=(0, len(DATA) + 1))
    for bad in [(5, 5), (7, 3), (-1, 4), (0,), "0:4"]:
        with pytest.raises(errors.InvalidArgument, match="byte_range"):
            vault.link(OWNER, artifact_id, recipient="user", byte_range=bad)  # type: ignore[arg-type]
    for ttl in [timedelta(0), timedelta(hours=25), 300]:
        with pytest.raises(errors.InvalidArgument, match="expires_in"):
            vault.link(OWNER, artifact_id, recipient="user", expires_in=ttl)  # type: ignore[arg-type]
    with pytest.raises(errors.NotFound):  # another scope gets no link: the id is no capability
        vault.link(Scope("acme", "bob", "s1"), artifact_id, recipient="user")
    with pytest.raises(errors.NotFound):
        vault.link(Scope("globex", "ana", "s1"), artifact_id, recipient="user")


def test_every_refusal_is_the_same_whatever_the_reason(vault: Vault, clock: Clock) -> None:
    first = vault.put(OWNER, DATA).artifact_id
    second = vault.put(OWNER, DATA[::-1]).artifact_id
    link_a = _token(vault.link(OWNER, first, recipient="user", byte_range=(0, 10)))
    link_b = _token(vault.link(OWNER, second, recipient="user"))
    prefix, body, mac = link_a.split(".")
    _, other_body, other_mac = link_b.split(".")
    flipped = body[:-3] + ("A" if body[-3] != "A" else "B") + body[-2:]
    reasons = {
        "malformed": "not-a-link",
        "empty": "",
        "tampered body": f"{prefix}.{flipped}.{mac}",
        "tampered mac": f"{prefix}.{body}.{mac[:-1]}{'A' if mac[-1] != 'A' else 'B'}",
        "other artifact's body": f"{prefix}.{other_body}.{mac}",  # ask for B with A's signature
        "other artifact's mac": f"{prefix}.{body}.{other_mac}",
        "forged wider range": f"{prefix}.{b64url(b'{}')}.{mac}",
        "huge": "rvc1." + "A" * 20_000 + ".x",
    }
    messages = {name: _refusal(vault, token) for name, token in reasons.items()}
    assert _read(vault, link_a) == DATA[:10]  # the genuine link still works
    clock.advance(minutes=5)
    messages["expired"] = _refusal(vault, link_a)
    fresh = _token(vault.link(OWNER, first, recipient="user"))
    vault.delete(OWNER, first)
    messages["artifact deleted"] = _refusal(vault, fresh)
    assert len(set(messages.values())) == 1, messages
    (message,) = set(messages.values())
    assert first not in message
    assert second not in message
    assert "rvc1" not in message


def test_rotating_the_link_keys_kills_every_earlier_link_at_once(vault: Vault) -> None:
    artifact_id = vault.put(OWNER, DATA).artifact_id
    before = _token(vault.link(OWNER, artifact_id, recipient="user"))
    assert _read(vault, before) == DATA
    vault.rotate_link_keys()
    _refusal(vault, before)
    after = _token(vault.link(OWNER, artifact_id, recipient="user"))
    assert _read(vault, after) == DATA


def test_an_expired_artifact_kills_its_links(vault: Vault, clock: Clock) -> None:
    artifact_id = vault.put(OWNER, DATA, expires_at=clock() + timedelta(minutes=10)).artifact_id
    token = _token(vault.link(OWNER, artifact_id, recipient="user", expires_in=timedelta(hours=1)))
    assert _read(vault, token) == DATA
    clock.advance(minutes=11)
    _refusal(vault, token)


def test_issuing_and_every_use_are_audited_by_id_only(vault: Vault) -> None:
    seen: list[AuditRecord] = []
    vault.add_audit_sink(seen.append)
    artifact_id = vault.put(OWNER, DATA).artifact_id
    token = _token(vault.link(OWNER, artifact_id, recipient="tool:fetch", byte_range=(0, 100)))
    _read(vault, token)
    _read(vault, token)
    _refusal(vault, token[:-2])
    actions = [r.action for r in seen if r.artifact_id == artifact_id]
    assert actions.count("link") == 1
    assert actions.count("link_use") == 2
    uses = [r for r in seen if r.action == "link_use"]
    assert all(r.outcome == "ok" and r.byte_range == (0, 100) for r in uses)
    assert all(token not in repr(r) for r in seen)


def test_a_link_issued_by_one_vault_opens_in_another_of_the_same_store_until_either_rotates(
    embedded_vault: Vault,
) -> None:
    artifact_id = embedded_vault.put(OWNER, DATA).artifact_id
    token = _token(embedded_vault.link(OWNER, artifact_id, recipient="user"))
    assert embedded_vault.location is not None
    with Vault.open(embedded_vault.location) as second:
        assert _read(second, token) == DATA
        second.rotate_link_keys()
        _refusal(embedded_vault, token)  # the rotation made elsewhere is seen at once (the key file changed)
        assert _read(embedded_vault, _token(second.link(OWNER, artifact_id, recipient="user"))) == DATA


def test_a_grantees_link_dies_with_its_grant_and_obeys_the_policy(vault: Vault) -> None:
    from refvault import Principal
    from refvault.policy import Policy, Rule

    artifact_id = vault.put(OWNER, DATA, labels={"pii"}).artifact_id
    grantee = Scope("acme", "bob", "s9")
    grant = vault.share(OWNER, artifact_id, to=Principal("acme", "bob"), recipients={"user", "export"})
    token = _token(vault.link(grantee, artifact_id, recipient="export"))
    assert _read(vault, token) == DATA
    with pytest.raises(errors.NotFound):  # the grant does not cover this recipient: no link
        vault.link(grantee, artifact_id, recipient="model:gpt-x")
    vault.set_policy(OWNER.tenant, Policy([Rule(id="no-pii-export", labels={"pii"}, recipients=["export"])]))
    refused_by_policy = _refusal(vault, token)
    vault.set_policy(OWNER.tenant, None)
    assert _read(vault, token) == DATA
    vault.revoke(OWNER, grant.grant_id)
    assert _refusal(vault, token) == refused_by_policy  # every refusal the same


def test_the_async_vault_issues_the_same_links(vault: Vault) -> None:
    import asyncio

    from refvault import AsyncVault

    artifact_id = vault.put(OWNER, DATA).artifact_id
    path = asyncio.run(AsyncVault(vault).link(OWNER, artifact_id, recipient="user", byte_range=(0, 10)))
    assert _read(vault, _token(path)) == DATA[:10]
