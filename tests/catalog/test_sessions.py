"""``Catalog.sessions``: the sessions a user holds artifacts in, most recently used first, on every backend."""

from __future__ import annotations

from refvault import Scope, Vault


def test_sessions_are_a_users_own_most_recent_first_and_capped(vault: Vault) -> None:
    for session in ("s1", "s2", "s3"):
        vault.put(Scope("acme", "ana", session), session.encode(), media_type="text/plain")
    vault.put(Scope("acme", "ana", "s1"), b"again", media_type="text/plain")  # s1 used last
    vault.put(Scope("acme", "bob", "b1"), b"bob", media_type="text/plain")
    vault.put(Scope("globex", "ana", "g1"), b"other tenant", media_type="text/plain")
    assert vault.catalog.sessions("acme", "ana", limit=10) == ["s1", "s3", "s2"]
    assert vault.catalog.sessions("acme", "ana", limit=2) == ["s1", "s3"]
    assert vault.catalog.sessions("acme", "bob", limit=10) == ["b1"]
    assert vault.catalog.sessions("acme", "nobody", limit=10) == []
