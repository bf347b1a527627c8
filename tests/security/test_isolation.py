"""Cross-tenant / user / session matrix: zero successes, and errors identical to an absent id."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from refvault import Scope, Vault
from refvault.errors import NotFound, RefvaultError
from refvault.ids import new_artifact_id

OWNER = Scope("acme", "ana", "s1")
OTHERS = [
    Scope("globex", "ana", "s1"),  # another tenant
    Scope("acme", "bob", "s1"),  # another user
    Scope("acme", "ana", "s2"),  # another session
    Scope("acme_", "ana", "s1"),  # names that differ by one character
    Scope("ACME", "ana", "s1"),  # case matters
]

Operation = Callable[[Vault, Scope, str], object]
OPERATIONS: dict[str, Operation] = {
    "describe": lambda v, s, a: v.describe(s, a),
    "read_bytes": lambda v, s, a: v.read_bytes(s, a),
    "stream": lambda v, s, a: v.stream(s, a).read(),
    "read_range": lambda v, s, a: v.read_range(s, a, 0, 10),
    "delete": lambda v, s, a: v.delete(s, a),
}


def outcome(op: Operation, vault: Vault, scope: Scope, artifact_id: str) -> tuple[type[BaseException], str]:
    try:
        op(vault, scope, artifact_id)
    except RefvaultError as exc:
        return type(exc), str(exc).replace(artifact_id, "<id>")
    return type(None), "succeeded"


@pytest.mark.parametrize("size", [10, 100_000])
@pytest.mark.parametrize("sealed", [False, True])
def test_no_other_scope_can_reach_an_artifact(vault: Vault, size: int, sealed: bool) -> None:
    d = vault.put(OWNER, b"s" * size, disclosure="sealed" if sealed else "model")
    absent = new_artifact_id()
    successes = 0
    for other in OTHERS:
        for name, op in OPERATIONS.items():
            got = outcome(op, vault, other, d.artifact_id)
            expected = outcome(op, vault, other, absent)
            assert got == expected == (NotFound, "artifact <id> not found in this scope"), name
            successes += got[0] is type(None)
        assert all(x.artifact_id != d.artifact_id for x in vault.list(other))
    assert successes == 0
    assert vault.read_bytes(OWNER, d.artifact_id) == b"s" * size  # still there: nobody deleted it


def test_idempotency_keys_do_not_cross_scopes(vault: Vault) -> None:
    mine = vault.put(OWNER, b"owner bytes", idempotency_key="call_1:0")
    for other in OTHERS:
        theirs = vault.put(other, b"other bytes", idempotency_key="call_1:0")
        assert theirs.artifact_id != mine.artifact_id
        assert vault.read_bytes(other, theirs.artifact_id) == b"other bytes"
        same = vault.put(other, b"owner bytes", idempotency_key="call_1:0x")
        assert same.artifact_id != mine.artifact_id
    assert vault.read_bytes(OWNER, mine.artifact_id) == b"owner bytes"
    assert [d.artifact_id for d in vault.list(OWNER)] == [mine.artifact_id]


def test_expired_is_only_ever_seen_by_the_owner(vault: Vault, clock: object) -> None:
    from datetime import timedelta

    from tests.conftest import Clock

    assert isinstance(clock, Clock)
    d = vault.put(OWNER, b"short-lived", expires_at=clock.now + timedelta(seconds=1))
    clock.advance(seconds=2)
    for other in OTHERS:
        assert outcome(OPERATIONS["read_bytes"], vault, other, d.artifact_id) == (
            NotFound,
            "artifact <id> not found in this scope",
        )
