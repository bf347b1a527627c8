"""API keys and the HTTP API's auth matrix: 401 / 403 / 404, identical bodies where existence must not leak."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from refvault import Scope, Vault
from refvault.cli import main
from refvault.keys import authenticate, create_key, list_keys, parse_token, revoke_key
from refvault.model import Principal
from refvault.server.app import create_app

OWNER = Scope("acme", "ana", "s1")
MISSING_ID = "art_" + "a" * 26
TEXT = b"".join(b"row %d\n" % n for n in range(20))
RECORDS = b'{"n": 1}\n{"n": 2}\n'


@pytest.fixture
def client(vault: Vault) -> Iterator[TestClient]:
    with TestClient(create_app(vault), raise_server_exceptions=False) as test_client:
        yield test_client


def bearer(token: str, session: str | None = "s1", **extra: str) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}", **extra}
    if session is not None:
        headers["Refvault-Session"] = session
    return headers


@pytest.fixture
def owner_token(vault: Vault) -> str:
    return create_key(vault, "acme", "ana")[1]


@pytest.fixture
def artifacts(vault: Vault) -> dict[str, str]:
    return {
        "text": vault.put(OWNER, TEXT, media_type="text/plain").artifact_id,
        "records": vault.put(OWNER, RECORDS, media_type="application/x-ndjson").artifact_id,
    }


# -- keys ---------------------------------------------------------------------------------------


def test_a_key_stores_only_the_hash_of_its_token(vault: Vault) -> None:
    key, token = create_key(vault, "acme", "ana", sessions=["s1", "s2"], label="ci runner")
    assert parse_token(token) == key.key_id
    assert key.secret_hash == hashlib.sha256(token.encode()).hexdigest()
    stored = vault.catalog.find_api_key(key.key_id)
    assert stored == key
    assert token not in repr(list_keys(vault))
    assert token.split("_")[-1] not in repr(stored)
    assert authenticate(vault, token) == Principal("acme", "ana", frozenset({"s1", "s2"}))
    other_key, other_token = create_key(vault, "acme", "ana")
    assert other_token != token
    assert other_key.key_id != key.key_id


def test_every_bad_token_fails_alike(vault: Vault) -> None:
    key, token = create_key(vault, "acme", "ana")
    unknown = "rvk_k_" + "a" * 16 + "_" + token.rsplit("_", 1)[1]
    wrong_secret = token[:-1] + ("a" if token[-1] != "a" else "b")
    for bad in ("", "rvk_", token + "x", token.upper(), unknown, wrong_secret, None, 12):
        assert authenticate(vault, bad) is None, bad
    assert revoke_key(vault, key.key_id) is True
    assert authenticate(vault, token) is None
    assert revoke_key(vault, key.key_id) is False  # already revoked
    assert revoke_key(vault, "k_" + "b" * 16) is False  # unknown
    assert revoke_key(vault, "not a key id") is False
    assert list_keys(vault)[0].revoked_at is not None


def test_key_arguments_are_checked(vault: Vault) -> None:
    from refvault.errors import InvalidArgument, InvalidScope

    with pytest.raises(InvalidScope):
        create_key(vault, "bad tenant!", "ana")
    with pytest.raises(InvalidArgument):
        create_key(vault, "acme", "ana", sessions="s1")
    with pytest.raises(InvalidArgument):
        create_key(vault, "acme", "ana", sessions=[])
    assert list_keys(vault) == []


def test_keys_are_listed_per_tenant(vault: Vault) -> None:
    first, _ = create_key(vault, "acme", "ana")
    create_key(vault, "globex", "bob")
    second, _ = create_key(vault, "acme", "cid")
    assert [k.key_id for k in list_keys(vault, "acme")] == [first.key_id, second.key_id]
    assert len(list_keys(vault)) == 3


def test_keys_command_line(tmp_path: Path) -> None:
    store = str(tmp_path / "cli-store")
    runner = CliRunner()
    created = runner.invoke(
        main, ["keys", "create", "--store", store, "--tenant", "acme", "--user", "ana", "--session", "s1"]
    )
    assert created.exit_code == 0, created.output
    token = created.stdout.strip()
    assert parse_token(token) is not None
    assert "shown only once" in created.stderr
    as_json = runner.invoke(main, ["--store", store, "keys", "create", "--tenant", "acme", "--user", "bo", "--json"])
    record = json.loads(as_json.stdout)
    assert record["token"].startswith("rvk_" + record["key_id"])
    assert record["sessions"] is None
    listed = runner.invoke(main, ["keys", "list", "--store", store, "--json"])
    keys = json.loads(listed.stdout)
    assert [k["user"] for k in keys] == ["ana", "bo"]
    assert keys[0]["sessions"] == ["s1"]
    assert token not in listed.stdout
    assert record["token"] not in listed.stdout
    key_id = keys[0]["key_id"]
    assert runner.invoke(main, ["keys", "revoke", key_id, "--store", store]).exit_code == 0
    again = runner.invoke(main, ["keys", "revoke", key_id, "--store", store])
    assert again.exit_code == 1
    assert "no active API key" in again.stderr
    plain = runner.invoke(main, ["keys", "list", "--store", store])
    assert f"{key_id}  acme/ana  sessions s1" in plain.stdout
    assert "revoked" in plain.stdout
    with Vault.open(store) as opened:
        assert authenticate(opened, token) is None
        assert authenticate(opened, record["token"]) == Principal("acme", "bo")
    bad = runner.invoke(main, ["keys", "create", "--store", store, "--tenant", "bad tenant!", "--user", "x"])
    assert bad.exit_code == 2


# -- 401 ----------------------------------------------------------------------------------------


def test_every_authentication_failure_is_the_same_401(
    client: TestClient, vault: Vault, owner_token: str, artifacts: dict[str, str]
) -> None:
    revoked_key, revoked_token = create_key(vault, "acme", "ana")
    revoke_key(vault, revoked_key.key_id)
    unknown = "rvk_k_" + "a" * 16 + "_" + owner_token.rsplit("_", 1)[1]
    wrong_secret = owner_token[:-1] + ("a" if owner_token[-1] != "a" else "b")
    authorizations: list[str | None] = [
        None,
        "",
        "Bearer",
        "Bearer ",
        f"Basic {owner_token}",
        f"Token {owner_token}",
        "Bearer garbage",
        f"Bearer {owner_token}x",
        f"Bearer {unknown}",
        f"Bearer {wrong_secret}",
        f"Bearer {revoked_token}",
    ]
    requests = [
        ("GET", f"/v1/artifacts/{artifacts['text']}"),
        ("GET", f"/v1/artifacts/{MISSING_ID}"),
        ("GET", "/v1/artifacts/not-an-id/content"),
        ("GET", "/v1/artifacts"),
        ("POST", "/v1/artifacts"),
        ("POST", f"/v1/artifacts/{artifacts['records']}/query"),
        ("DELETE", f"/v1/artifacts/{artifacts['text']}"),
    ]
    bodies = set()
    for authorization in authorizations:
        for method, path in requests:
            headers = {"Refvault-Session": "s1"}
            if authorization is not None:
                headers["Authorization"] = authorization
            response = client.request(method, path, headers=headers, content=b"captured?")
            assert response.status_code == 401, (authorization, path, response.text)
            assert response.headers["www-authenticate"] == "Bearer"
            assert response.headers["content-type"] == "application/problem+json"
            bodies.add(response.content)
    assert len(bodies) == 1
    assert json.loads(bodies.pop())["type"] == "urn:refvault:problem:unauthenticated"
    assert len(vault.list(OWNER)) == 2  # nothing captured, nothing deleted


def test_authentication_comes_before_header_checks(client: TestClient) -> None:
    response = client.get("/v1/artifacts", headers={"Refvault-Session": "bad session!", "Refvault-Tenant": "x"})
    assert response.status_code == 401
    assert client.get("/v1/health").status_code == 200  # the one endpoint without a key


# -- 404: other tenants, users and sessions look absent ------------------------------------------


def endpoints(artifact_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    base = f"/v1/artifacts/{artifact_id}"
    return [
        ("GET", base, {}),
        ("GET", f"{base}/content", {}),
        ("GET", f"{base}/content", {"headers": {"Range": "bytes=0-3"}}),
        ("GET", f"{base}/window", {"params": {"lines": "0,2"}}),
        ("GET", f"{base}/grep", {"params": {"pattern": "row"}}),
        ("POST", f"{base}/query", {"json": {"limit": 1}}),
        ("GET", f"{base}/verify", {}),
        ("DELETE", base, {}),
    ]


@pytest.mark.parametrize(
    ("tenant", "user", "session"),
    [("globex", "ana", "s1"), ("acme", "bob", "s1"), ("acme", "ana", "s2")],
    ids=["other-tenant", "other-user", "other-session"],
)
def test_another_scope_sees_404_identical_to_absent(
    client: TestClient, vault: Vault, artifacts: dict[str, str], tenant: str, user: str, session: str
) -> None:
    token = create_key(vault, tenant, user)[1]
    for kind in ("text", "records"):
        existing = artifacts[kind]
        for (method, path, options), (_, absent_path, _) in zip(
            endpoints(existing), endpoints(MISSING_ID), strict=True
        ):
            extra = options.pop("headers", {})
            seen = client.request(method, path, headers=bearer(token, session, **extra), **options)
            absent = client.request(method, absent_path, headers=bearer(token, session, **extra), **options)
            assert seen.status_code == 404, (method, path, seen.text)
            assert absent.status_code == 404
            assert seen.content.replace(existing.encode(), MISSING_ID.encode()) == absent.content
            assert seen.headers["content-type"] == absent.headers["content-type"] == "application/problem+json"
            assert "etag" not in seen.headers
    assert len(vault.list(OWNER)) == 2  # the other scope's DELETE removed nothing
    listed = client.get("/v1/artifacts", headers=bearer(token, session)).json()
    assert listed == {"items": [], "next_offset": None}


def test_the_owner_reads_what_others_cannot(client: TestClient, owner_token: str, artifacts: dict[str, str]) -> None:
    for method, path, options in endpoints(artifacts["records"])[:-1]:
        extra = options.pop("headers", {})
        response = client.request(method, path, headers=bearer(owner_token, **extra), **options)
        assert response.status_code in (200, 206, 422), (path, response.text)  # 422: a text read of records


# -- 403: the key's scope -------------------------------------------------------------------------


def test_scope_headers_must_repeat_the_keys_own(
    client: TestClient, owner_token: str, artifacts: dict[str, str]
) -> None:
    path = f"/v1/artifacts/{artifacts['text']}"
    agreeing = client.get(path, headers=bearer(owner_token, **{"Refvault-Tenant": "acme", "Refvault-User": "ana"}))
    assert agreeing.status_code == 200
    for extra in ({"Refvault-Tenant": "globex"}, {"Refvault-User": "bob"}, {"Refvault-Tenant": "ACME"}):
        response = client.get(path, headers=bearer(owner_token, **extra))
        assert response.status_code == 403
        body = response.json()
        assert body["type"] == "urn:refvault:problem:scope-not-allowed"
        assert body["error"] == "Forbidden"
        listing = client.get("/v1/artifacts", headers=bearer(owner_token, **extra))
        assert listing.status_code == 403


def test_a_session_the_key_does_not_allow_is_403(client: TestClient, vault: Vault, artifacts: dict[str, str]) -> None:
    token = create_key(vault, "acme", "ana", sessions=["s1"])[1]
    assert client.get(f"/v1/artifacts/{artifacts['text']}", headers=bearer(token, "s1")).status_code == 200
    for method, path in (
        ("GET", f"/v1/artifacts/{artifacts['text']}"),
        ("GET", "/v1/artifacts"),
        ("POST", "/v1/artifacts"),
    ):
        response = client.request(method, path, headers=bearer(token, "s2"), content=b"nope")
        assert response.status_code == 403
        assert response.json()["type"] == "urn:refvault:problem:scope-not-allowed"
    assert vault.list(Scope("acme", "ana", "s2")) == []
    # A forbidden session answers 403 whether or not the artifact exists: it reveals nothing either way.
    absent = client.get(f"/v1/artifacts/{MISSING_ID}", headers=bearer(token, "s2"))
    assert absent.content == client.get(f"/v1/artifacts/{artifacts['text']}", headers=bearer(token, "s2")).content


def test_captures_land_in_the_keys_scope(client: TestClient, vault: Vault) -> None:
    token = create_key(vault, "globex", "bob")[1]
    response = client.post(
        "/v1/artifacts",
        content=b"mine",
        headers=bearer(token, "s9", **{"Refvault-Metadata": json.dumps({"filename": "f.txt"})}),
    )
    assert response.json()["scope"] == {"tenant": "globex", "user": "bob", "session": "s9", "run_id": None}
    assert vault.read_bytes(Scope("globex", "bob", "s9"), response.json()["artifact_id"]) == b"mine"


def test_sealed_artifact_content_is_served_to_its_owner(client: TestClient, vault: Vault, owner_token: str) -> None:
    sealed = vault.put(OWNER, b"sealed bytes\n", media_type="text/plain", disclosure="sealed").artifact_id
    content = client.get(f"/v1/artifacts/{sealed}/content", headers=bearer(owner_token))
    assert content.status_code == 200
    assert content.content == b"sealed bytes\n"
    window = client.get(f"/v1/artifacts/{sealed}/window", headers=bearer(owner_token))
    assert window.status_code == 403
    assert window.json()["type"] == "urn:refvault:problem:sealed"
    stranger = create_key(vault, "globex", "ana")[1]
    assert client.get(f"/v1/artifacts/{sealed}/content", headers=bearer(stranger)).status_code == 404


@pytest.mark.parametrize("command", [["keys", "list"], ["keys", "revoke", "k_aaaaaaaaaaaaaaaa"]])
def test_keys_list_and_revoke_never_create_a_store(tmp_path: Path, command: list[str]) -> None:
    missing = tmp_path / "nowhere"
    result = CliRunner().invoke(main, [*command, "--store", str(missing)])
    assert result.exit_code == 1
    assert "no refvault store at" in result.stderr
    assert not missing.exists()
