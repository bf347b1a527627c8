"""The server's fast paths answer exactly as the slow ones: key cache, one-lookup reads, the content fast path.

What is held here (the benchmark is ``bench/load.py``; nothing here measures time):

* ``KeyCache`` remembers successes only, for its TTL, bounded; ``revoke_key``
  through the same vault empties it at once, even for an authentication in flight.
* ``Vault.open_artifact`` is ``describe`` + ``stream`` from one lookup, audited once.
* ``GET .../content`` answered by the fast path (a cached key) is byte for byte
  the answer of the route (the cache off), for hits, ranges, conditionals and failures.
* ``SqlCatalog``'s direct one-row reads survive the death of their pooled PostgreSQL connections.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from fastapi.testclient import TestClient

from refvault import Scope, Vault
from refvault.errors import InvalidArgument, NotFound
from refvault.keys import KeyCache, create_key, revoke_key
from refvault.model import Principal
from refvault.server.app import create_app
from refvault.vault.core import AuditRecord
from tests.servers import fresh_database

SCOPE = Scope("acme", "ana", "s1")
BIG = bytes(range(256)) * 8192  # 2 MiB: more than one piece
MISSING_ID = "art_" + "a" * 26


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def counted_finds(vault: Vault, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = vault.catalog.find_api_key

    def find(key_id: str) -> Any:
        calls.append(key_id)
        return real(key_id)

    monkeypatch.setattr(vault.catalog, "find_api_key", find)
    return calls


# -- KeyCache --------------------------------------------------------------------------------------


def test_the_cache_remembers_a_success_for_its_ttl_only(vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    key, token = create_key(vault, "acme", "ana", sessions=["s1"])
    clock = Clock()
    cache = KeyCache(vault, seconds=2, clock=clock)
    finds = counted_finds(vault, monkeypatch)
    assert cache.cached(token) is None
    principal = Principal("acme", "ana", frozenset({"s1"}))
    assert cache.authenticate(token) == principal
    assert cache.authenticate(token) == principal
    assert cache.cached(token) == principal
    assert finds == [key.key_id]
    clock.now += 2.0
    assert cache.cached(token) is None  # expired
    assert cache.authenticate(token) == principal
    assert finds == [key.key_id, key.key_id]


def test_failures_are_never_cached(vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    revoked_key, revoked = create_key(vault, "acme", "ana")
    revoke_key(vault, revoked_key.key_id)
    _, token = create_key(vault, "acme", "ana")
    unknown = "rvk_k_" + "a" * 16 + "_" + token.rsplit("_", 1)[1]
    wrong = token[:-1] + ("a" if token[-1] != "a" else "b")
    cache = KeyCache(vault)
    finds = counted_finds(vault, monkeypatch)
    for bad in (revoked, unknown, wrong):
        for _ in range(3):
            assert cache.authenticate(bad) is None
            assert cache.cached(bad) is None
    assert len(finds) == 9  # every failure took the full path, every time
    for malformed in ("", "rvk_", None, 12, token + "x"):
        assert cache.authenticate(malformed) is None
        assert cache.cached(malformed) is None


def test_a_revocation_through_the_same_vault_applies_at_once(vault: Vault) -> None:
    key, token = create_key(vault, "acme", "ana")
    caches = [KeyCache(vault, seconds=3600), KeyCache(vault, seconds=3600)]
    for cache in caches:
        assert cache.authenticate(token) is not None
    assert revoke_key(vault, key.key_id)
    for cache in caches:
        assert cache.cached(token) is None
        assert cache.authenticate(token) is None


def test_an_authentication_overlapping_a_revocation_is_not_remembered(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, token = create_key(vault, "acme", "ana")
    cache = KeyCache(vault, seconds=3600)
    real = vault.catalog.find_api_key

    def find_then_revoke(key_id: str) -> Any:
        found = real(key_id)  # read before the revocation commits ...
        monkeypatch.setattr(vault.catalog, "find_api_key", real)
        assert revoke_key(vault, key.key_id)  # ... which lands before the result is cached
        return found

    monkeypatch.setattr(vault.catalog, "find_api_key", find_then_revoke)
    assert cache.authenticate(token) is not None  # the in-flight answer, as without a cache
    assert cache.cached(token) is None
    assert cache.authenticate(token) is None


def test_the_cache_is_bounded_and_can_be_off(vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = [create_key(vault, "acme", f"user{n}")[1] for n in range(5)]
    cache = KeyCache(vault, size=3)
    for token in tokens:
        assert cache.authenticate(token) is not None
    assert sum(cache.cached(token) is not None for token in tokens) == 3
    assert all(cache.cached(token) is not None for token in tokens[-3:])  # the oldest went first
    off = KeyCache(vault, seconds=0)
    finds = counted_finds(vault, monkeypatch)
    for _ in range(3):
        assert off.authenticate(tokens[0]) is not None
        assert off.cached(tokens[0]) is None
    assert len(finds) == 3
    for bad in ({"seconds": -1}, {"seconds": True}, {"seconds": 1e9}, {"size": 0}, {"size": 1.5}):
        with pytest.raises(InvalidArgument):
            KeyCache(vault, **bad)


def test_serve_passes_the_cache_ttl_to_its_workers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import uvicorn

    from refvault.cli import main
    from refvault.server import app as app_module

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: None)
    for name in ("REFVAULT_STORE", "REFVAULT_CATALOG", "REFVAULT_AUTH_CACHE_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    assert CliRunner().invoke(main, ["serve", "--auth-cache-seconds", "0"]).exit_code == 0
    assert float(app_module.os.environ[app_module.AUTH_CACHE_ENVVAR]) == 0.0
    assert CliRunner().invoke(main, ["serve", "--auth-cache-seconds", "-1"]).exit_code == 2
    monkeypatch.setenv(app_module.AUTH_CACHE_ENVVAR, "soon")
    with pytest.raises(InvalidArgument):
        app_module.app_from_env()


# -- Vault.open_artifact ---------------------------------------------------------------------------


def test_open_artifact_is_describe_and_stream_in_one_lookup(vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    artifact_id = vault.put(SCOPE, BIG, media_type="application/octet-stream").artifact_id
    audit: list[AuditRecord] = []
    vault.add_audit_sink(audit.append)
    finds: list[str] = []
    real = vault.catalog.find

    def find(scope: Scope, wanted: str) -> Any:
        finds.append(wanted)
        return real(scope, wanted)

    monkeypatch.setattr(vault.catalog, "find", find)
    descriptor, stream = vault.open_artifact(SCOPE, artifact_id)
    with stream:
        assert stream.read() == BIG
    assert finds == [artifact_id]
    assert [(r.action, r.outcome, r.content_hash) for r in audit] == [("read", "ok", descriptor.content_hash)]
    monkeypatch.setattr(vault.catalog, "find", real)
    assert descriptor == vault.describe(SCOPE, artifact_id)
    for scope, wanted in ((SCOPE, MISSING_ID), (Scope("acme", "ana", "s2"), artifact_id)):
        with pytest.raises(NotFound):
            vault.open_artifact(scope, wanted)


# -- the content fast path -------------------------------------------------------------------------


def _answer(client: TestClient, path: str, headers: dict[str, str]) -> tuple[int, list[tuple[str, str]], bytes]:
    response = client.get(path, headers=headers)
    kept = sorted((k, v) for k, v in response.headers.items() if k != "date")
    return response.status_code, kept, response.content


def test_the_content_fast_path_answers_as_the_route(vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    from refvault.server import app as app_module

    big = vault.put(SCOPE, BIG).artifact_id
    small = vault.put(SCOPE, b"hello\n", media_type="text/plain").artifact_id
    empty = vault.put(SCOPE, b"").artifact_id
    other_session = vault.put(Scope("acme", "ana", "s2"), b"elsewhere").artifact_id
    _, token = create_key(vault, "acme", "ana", sessions=["s1"])
    etag = '"' + vault.describe(SCOPE, small).content_hash.removeprefix("sha256:") + '"'
    auth = {"Authorization": f"Bearer {token}", "Refvault-Session": "s1"}
    cases: list[tuple[str, dict[str, str]]] = [
        (f"/v1/artifacts/{small}/content", auth),
        (f"/v1/artifacts/{big}/content", auth),
        (f"/v1/artifacts/{empty}/content", auth),
        (f"/v1/artifacts/{big}/content", {**auth, "Range": "bytes=1048570-1048580"}),
        (f"/v1/artifacts/{small}/content", {**auth, "Range": "bytes=-3"}),
        (f"/v1/artifacts/{small}/content", {**auth, "Range": "bytes=99-"}),
        (f"/v1/artifacts/{small}/content", {**auth, "Range": "bytes=0-1,3-4"}),
        (f"/v1/artifacts/{small}/content", {**auth, "If-None-Match": etag}),
        (f"/v1/artifacts/{small}/content", {**auth, "If-None-Match": '"other"'}),
        (f"/v1/artifacts/{small}/content", {**auth, "Range": "bytes=0-1", "If-Range": '"other"'}),
        (f"/v1/artifacts/{MISSING_ID}/content", auth),
        ("/v1/artifacts/not-an-id/content", auth),
        (f"/v1/artifacts/{other_session}/content", auth),
        (f"/v1/artifacts/{small}/content", {**auth, "Refvault-Session": "s2"}),  # not allowed: 403
        (f"/v1/artifacts/{small}/content", {**auth, "Refvault-Session": "bad session"}),  # 400
        (f"/v1/artifacts/{small}/content", {"Authorization": f"Bearer {token}"}),  # no session: 400
        (f"/v1/artifacts/{small}/content", {**auth, "Refvault-Tenant": "acme", "Refvault-User": "ana"}),
        (f"/v1/artifacts/{small}/content", {**auth, "Refvault-Tenant": "other"}),  # 403
        (f"/v1/artifacts/{small}/content", {**auth, "Authorization": f"bearer   {token}  "}),
        (f"/v1/artifacts/{small}/content", {**auth, "Authorization": f"Basic {token}"}),  # 401
        (f"/v1/artifacts/{small}/content", {**auth, "Authorization": f"Bearer {token}x"}),  # 401
    ]
    taken: list[bool] = []
    real_scope = app_module._FastContent._scope

    def spy(self: Any, scope: Any) -> Any:
        found = real_scope(self, scope)
        taken.append(found is not None)
        return found

    monkeypatch.setattr(app_module._FastContent, "_scope", spy)
    answers: dict[str, list[tuple[int, list[tuple[str, str]], bytes]]] = {}
    for name, seconds in (("route", 0.0), ("fast", 3600.0)):
        with TestClient(create_app(vault, auth_cache_seconds=seconds), raise_server_exceptions=False) as client:
            assert client.get("/v1/artifacts", headers=auth).status_code == 200  # the key is now checked (cached)
            taken.clear()
            answers[name] = [_answer(client, path, headers) for path, headers in cases]
            assert any(taken) == (name == "fast")
    assert answers["fast"] == answers["route"]
    statuses = [status for status, _, _ in answers["fast"]]
    assert statuses[:13] == [200, 200, 200, 206, 206, 416, 200, 304, 200, 200, 404, 404, 404]  # by the fast path ...
    assert statuses[13:] == [403, 400, 400, 200, 403, 200, 401, 401]  # ... and these by the route where they fail
    assert taken == [True] * 13 + [False, False, False, True, False, True, False, False]


# -- PostgreSQL: direct reads on dead connections --------------------------------------------------


def test_reads_survive_the_death_of_pooled_connections(postgres_url: str) -> None:
    from refvault.catalog.sql import SqlCatalog

    url = fresh_database(postgres_url)
    catalog = SqlCatalog(url)
    try:
        key, _ = create_key(Vault(_NoBlobs(), catalog), "acme", "ana")
        assert catalog.find_api_key(key.key_id) == key  # a pooled connection now exists
        with sa.create_engine(sa.make_url(url).set(drivername="postgresql+psycopg")).connect() as admin:
            admin.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
            admin.commit()
        assert catalog.find_api_key(key.key_id) == key  # retried once on a fresh connection
        assert catalog.find(SCOPE, MISSING_ID) is None
    finally:
        catalog.close()


class _NoBlobs:
    """The blob store of a vault used only for its catalog."""

    def close(self) -> None:
        pass
