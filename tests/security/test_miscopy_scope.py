"""A mis-copy suggestion never names an id the caller could not read, and never tells another scope's id from
an absent one: the search looks at the caller's own scope only."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable, Iterator

import pytest

from refvault import MisCopiedId, NotFound, Principal, Scope, Vault
from refvault.policy import Policy, Rule

OWNER = Scope("acme", "ana", "s1")
OTHERS = {
    "another tenant": Scope("globex", "ana", "s1"),
    "another user": Scope("acme", "bob", "s1"),
    "another session": Scope("acme", "ana", "s2"),
}
ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"


def changed(artifact_id: str, position: int) -> str:
    other = ALPHABET[(ALPHABET.index(artifact_id[position]) + 1) % 32]
    return artifact_id[:position] + other + artifact_id[position + 1 :]


def legacy_id() -> str:
    return "art_" + base64.b32encode(secrets.token_bytes(16)).decode("ascii").rstrip("=").lower()


def answer(call: Callable[[], object]) -> tuple[str, str, str | None]:
    """What a caller learns from a failed read: the class, the message and the suggestion."""
    with pytest.raises(NotFound) as caught:
        call()
    return type(caught.value).__name__, str(caught.value), getattr(caught.value, "suggestion", None)


@pytest.fixture
def mint(monkeypatch: pytest.MonkeyPatch) -> Callable[[list[str]], None]:
    def use(ids: list[str]) -> None:
        queue: Iterator[str] = iter(ids)
        monkeypatch.setattr("refvault.vault.core.new_artifact_id", lambda: next(queue))

    return use


@pytest.mark.parametrize("other", sorted(OTHERS))
def test_another_scopes_id_is_never_suggested_even_as_the_only_neighbour(vault: Vault, other: str) -> None:
    foreign = vault.put(OTHERS[other], b"someone else's\n").artifact_id
    vault.put(OWNER, b"mine\n")
    bad = changed(foreign, 15)
    got = answer(lambda: vault.describe(OWNER, bad))
    assert got[2] is None
    assert foreign not in got[1]
    absent = changed(vault.put(Scope("initech", "x", "y"), b"elsewhere\n").artifact_id, 15)
    assert got == answer(lambda: vault.describe(OWNER, absent))  # the same words as for an absent id's mis-copy


@pytest.mark.parametrize("other", sorted(OTHERS))
def test_another_scopes_legacy_id_answers_exactly_as_an_absent_one(
    vault: Vault, other: str, mint: Callable[[list[str]], None]
) -> None:
    foreign, absent = legacy_id(), legacy_id()
    mint([foreign])
    vault.put(OTHERS[other], b"someone else's\n")
    for value, mirror in ((foreign, absent), (changed(foreign, 9), changed(absent, 9))):
        got = answer(lambda value=value: vault.read_bytes(OWNER, value))
        expected = answer(lambda mirror=mirror: vault.read_bytes(OWNER, mirror))
        assert (got[0], got[2]) == (expected[0], expected[2])
        assert got[1].replace(value, "ID") == expected[1].replace(mirror, "ID")


def test_sealed_revoked_and_uncovered_neighbours_are_never_suggested(vault: Vault) -> None:
    grantee = Scope("acme", "bob", "s9")
    sealed = vault.put(OWNER, b"sealed\n", disclosure="sealed").artifact_id
    assert answer(lambda: vault.describe(OWNER, changed(sealed, 12)))[2] is None
    shared_sealed = vault.put(OWNER, b"shared sealed\n").artifact_id
    vault.share(OWNER, shared_sealed, to=Principal("acme", "bob"), disclosure="sealed")
    assert answer(lambda: vault.describe(grantee, changed(shared_sealed, 12)))[2] is None
    revoked = vault.put(OWNER, b"revoked\n").artifact_id
    grant = vault.share(OWNER, revoked, to=Principal("acme", "bob"))
    assert answer(lambda: vault.describe(grantee, changed(revoked, 12)))[2] == revoked
    vault.revoke(OWNER, grant.grant_id)
    assert answer(lambda: vault.describe(grantee, changed(revoked, 12)))[2] is None
    narrow = vault.put(OWNER, b"for audits only\n").artifact_id
    vault.share(OWNER, narrow, to=Principal("acme", "bob"), purposes=["audit"])
    assert answer(lambda: vault.describe(grantee, changed(narrow, 12)))[2] is None
    assert answer(lambda: vault.describe(grantee, changed(narrow, 12), purpose="audit"))[2] == narrow


def test_a_neighbour_the_policy_refuses_is_never_suggested(vault: Vault) -> None:
    secret = vault.put(OWNER, b"labelled\n", labels=["pii"]).artifact_id
    assert answer(lambda: vault.describe(OWNER, changed(secret, 10)))[2] == secret
    vault.set_policy(
        "acme", Policy([Rule(id="no-pii-to-models", labels=["pii"], recipients=["model:*"], action="deny")])
    )
    assert answer(lambda: vault.describe(OWNER, changed(secret, 10), recipient="model:gpt"))[2] is None
    assert answer(lambda: vault.describe(OWNER, changed(secret, 10)))[2] == secret


def test_a_suggestion_is_an_id_the_caller_can_then_read(vault: Vault) -> None:
    mine = vault.put(OWNER, b"mine\n").artifact_id
    with pytest.raises(MisCopiedId) as caught:
        vault.read_bytes(OWNER, mine[:20] + mine[21:])
    assert caught.value.suggestion is not None
    assert vault.read_bytes(OWNER, caught.value.suggestion) == b"mine\n"
