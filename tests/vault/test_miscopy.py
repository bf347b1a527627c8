"""A mis-copied id is told apart from an unknown one on every read, with the id meant when exactly one is close."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest

from refvault import MisCopiedId, NotFound, Principal, Scope, Vault
from refvault.errors import InvalidId
from refvault.ids import id_check, id_distance, new_artifact_id
from refvault.vault import miscopy
from tests.conftest import Clock

ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"


def legacy_id() -> str:
    """An id as minted before the check characters: 128 random bits as 26 characters."""
    return "art_" + base64.b32encode(secrets.token_bytes(16)).decode("ascii").rstrip("=").lower()


def changed(artifact_id: str, position: int) -> str:
    """``artifact_id`` with the character at ``position`` replaced by another."""
    other = ALPHABET[(ALPHABET.index(artifact_id[position]) + 1) % 32]
    return artifact_id[:position] + other + artifact_id[position + 1 :]


@pytest.fixture
def mint(monkeypatch: pytest.MonkeyPatch) -> Callable[[list[str]], None]:
    """Make the vault's next puts get these ids (as a store written before the check characters would have)."""

    def use(ids: list[str]) -> None:
        queue: Iterator[str] = iter(ids)
        monkeypatch.setattr("refvault.vault.core.new_artifact_id", lambda: next(queue))

    return use


def miscopied(call: Callable[[], object]) -> MisCopiedId:
    with pytest.raises(MisCopiedId) as caught:
        call()
    return caught.value


CORRUPTIONS: dict[str, Callable[[str], str]] = {
    "changed": lambda i: changed(i, 17),
    "two changed": lambda i: changed(changed(i, 9), 25),
    "dropped": lambda i: i[:12] + i[13:],
    "doubled": lambda i: i[:20] + i[20] + i[20:],
    "swapped": lambda i: i[:14] + i[15] + i[14] + i[16:] if i[14] != i[15] else changed(i, 14),
    "last two dropped": lambda i: i[:-2],
    "prefix changed": lambda i: "arf_" + i[4:],
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_corrupted_id_is_miscopied_and_the_original_is_suggested(vault: Vault, scope: Scope, corruption: str) -> None:
    ids = [vault.put(scope, b"artifact %d\n" % n).artifact_id for n in range(5)]
    original = ids[2]
    bad = CORRUPTIONS[corruption](original)
    assert bad != original
    for read in (vault.describe, vault.read_bytes, vault.stream, vault.verify_artifact):
        error = miscopied(lambda read=read: read(scope, bad))
        assert error.suggestion == original
        assert isinstance(error, NotFound)
        assert isinstance(error, InvalidId)
        assert bad not in str(error).replace(original, "")  # the string given is never repeated
        assert str(error) == (
            "this id looks mis-copied (a character changed, dropped, doubled or swapped); "
            f"did you mean {original}? Pass that id if it is the one you meant"
        )
        assert error.artifact_id == bad  # for the caller's code, never shown


def test_an_unknown_new_id_is_simply_not_found(vault: Vault, scope: Scope, monkeypatch: pytest.MonkeyPatch) -> None:
    vault.put(scope, b"one\n")
    searched: list[str] = []
    monkeypatch.setattr(miscopy, "neighbours", lambda *args, **kwargs: searched.append("x") or [])
    with pytest.raises(NotFound) as caught:
        vault.describe(scope, new_artifact_id())
    assert type(caught.value) is NotFound
    assert searched == []  # a new id whose check agrees is not searched for


def test_a_miscopied_id_with_no_neighbour_says_so_without_a_suggestion(vault: Vault, scope: Scope) -> None:
    vault.put(scope, b"one\n")
    error = miscopied(lambda: vault.describe(scope, changed(new_artifact_id(), 10)))
    assert error.suggestion is None
    assert not error.ambiguous
    assert "no id you can read is close to it" in str(error)


def test_legacy_ids_read_as_before_and_their_miscopies_are_caught(
    vault: Vault, scope: Scope, mint: Callable[[list[str]], None]
) -> None:
    old = legacy_id()
    mint([old])
    stored = vault.put(scope, b"written before the check characters\n")
    assert stored.artifact_id == old
    assert id_check(old) == "legacy"
    assert vault.read_bytes(scope, old) == b"written before the check characters\n"
    assert vault.describe(scope, old).artifact_id == old
    assert [d.artifact_id for d in vault.list(scope)] == [old]
    assert miscopied(lambda: vault.describe(scope, changed(old, 8))).suggestion == old
    assert miscopied(lambda: vault.describe(scope, old[:15] + old[16:])).suggestion == old
    with pytest.raises(NotFound) as caught:  # an unknown legacy id with nothing close: plain not found
        vault.describe(scope, legacy_id())
    assert type(caught.value) is NotFound


def test_two_close_ids_give_no_suggestion(vault: Vault, scope: Scope, mint: Callable[[list[str]], None]) -> None:
    first = legacy_id()
    second = changed(first, 6)  # also a legacy id (the last character is untouched)
    mint([first, second])
    vault.put(scope, b"first\n")
    vault.put(scope, b"second\n")
    bad = changed(first, 20)
    assert id_distance(bad, first) == 1
    assert id_distance(bad, second) == 2
    error = miscopied(lambda: vault.describe(scope, bad))
    assert error.suggestion is None
    assert error.ambiguous
    assert first not in str(error)
    assert second not in str(error)
    assert "more than one id you can read is that close" in str(error)


def test_a_sealed_or_expired_neighbour_is_never_suggested(
    vault: Vault, scope: Scope, mint: Callable[[list[str]], None], clock: Clock
) -> None:
    sealed = vault.put(scope, b"sealed\n", disclosure="sealed").artifact_id
    assert miscopied(lambda: vault.describe(scope, changed(sealed, 11))).suggestion is None
    short = vault.put(scope, b"short-lived\n", expires_at=clock.now + timedelta(seconds=5)).artifact_id
    assert miscopied(lambda: vault.describe(scope, changed(short, 11))).suggestion == short
    clock.advance(seconds=60)
    assert miscopied(lambda: vault.describe(scope, changed(short, 11))).suggestion is None


def test_an_artifact_shared_with_the_caller_is_suggested(vault: Vault) -> None:
    owner, grantee = Scope("acme", "ana", "s1"), Scope("acme", "bob", "s9")
    shared = vault.put(owner, b"shared\n").artifact_id
    vault.share(owner, shared, to=Principal("acme", "bob"))
    assert miscopied(lambda: vault.describe(grantee, changed(shared, 13))).suggestion == shared


def test_the_search_is_bounded_to_the_most_recent_window(
    vault: Vault, scope: Scope, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(miscopy, "SUGGESTION_WINDOW", 3)
    oldest = vault.put(scope, b"oldest\n").artifact_id
    for n in range(3):
        vault.put(scope, b"newer %d\n" % n)
    assert miscopied(lambda: vault.describe(scope, changed(oldest, 12))).suggestion is None
    monkeypatch.setattr(miscopy, "SUGGESTION_WINDOW", 4)
    assert miscopied(lambda: vault.describe(scope, changed(oldest, 12))).suggestion == oldest
