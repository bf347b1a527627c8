"""Capability links over HTTP: issued with a key, followed without one, and every refusal one identical 404
(expired, tampered, another artifact's, outside its range, after key rotation, after the policy changed, after
deletion), with nothing of the token or the artifact in it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from fastapi.testclient import TestClient

from refvault import Client, Scope, Vault
from refvault.keys import create_key
from refvault.policy import Policy, Rule
from refvault.server.app import create_app
from tests.conftest import Clock
from tests.servers import serve

OWNER = Scope("acme", "ana", "s1")
CANARY = b"LINKcanary5w"
DATA = b"".join(b"line %d " % i + CANARY + b"\n" for i in range(400))


@pytest.fixture
def world(tmp_path) -> Iterator[tuple[Vault, TestClient, str, Clock]]:  # type: ignore[no-untyped-def]
    clock = Clock()
    with Vault.open(tmp_path / "store", clock=clock) as vault:
        _, token = create_key(vault, "acme", "ana")
        with TestClient(create_app(vault), raise_server_exceptions=False) as http:
            yield vault, http, token, clock


def _issue(http: TestClient, token: str, artifact_id: str, **body: object) -> httpx.Response:
    return http.post(
        f"/v1/artifacts/{artifact_id}/links",
        json={"recipient": "user", **body},
        headers={"Authorization": f"Bearer {token}", "Refvault-Session": "s1"},
    )


def _url(response: httpx.Response) -> str:
    assert response.status_code == 201, response.text
    answer = response.json()
    assert answer["url"].endswith(answer["path"])
    assert answer["path"].startswith("/v1/links/")
    assert response.headers["cache-control"] == "no-store"
    return str(answer["path"])


def test_a_link_serves_its_bytes_without_a_key_and_keeps_them_inert(world) -> None:  # type: ignore[no-untyped-def]
    vault, http, token, _ = world
    text = vault.put(OWNER, DATA, media_type="text/plain").artifact_id
    page = vault.put(OWNER, b"<html><script>alert(1)</script></html>", media_type="text/html").artifact_id
    got = http.get(_url(_issue(http, token, text)))
    assert got.status_code == 200
    assert got.content == DATA
    assert got.headers["content-type"].startswith("text/plain")
    assert got.headers["cache-control"] == "no-store"
    assert got.headers["referrer-policy"] == "no-referrer"
    assert got.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in got.headers["content-security-policy"]
    part = http.get(_url(_issue(http, token, text, byte_range=[5, 17])))
    assert part.content == DATA[5:17]
    assert part.headers["content-length"] == "12"
    assert "etag" not in part.headers  # a range link does not name the whole artifact's digest
    assert got.headers["etag"].strip('"') in vault.describe(OWNER, text).content_hash
    html = http.get(_url(_issue(http, token, page)))
    assert html.headers["content-disposition"].startswith("attachment")


def test_issuing_needs_a_key_that_may_read_the_artifact(world, tmp_path) -> None:  # type: ignore[no-untyped-def]
    vault, http, token, _ = world
    artifact_id = vault.put(OWNER, DATA).artifact_id
    assert _issue(http, "rvk_nope_nope", artifact_id).status_code == 401
    _, foreign = create_key(vault, "globex", "ana")
    _, other_user = create_key(vault, "acme", "bob")
    absent = _issue(http, token, "art_" + "a" * 26)
    for key in (foreign, other_user):
        refused = _issue(http, key, artifact_id)
        assert refused.status_code == 404
        assert refused.json()["detail"].replace(artifact_id, "ID") == absent.json()["detail"].replace(
            "art_" + "a" * 26, "ID"
        )
    assert _issue(http, token, artifact_id, expires_in=0).status_code == 400
    assert _issue(http, token, artifact_id, expires_in=86_401).status_code == 400
    assert _issue(http, token, artifact_id, byte_range=[0, len(DATA) + 1]).status_code == 400


def test_every_refused_link_gets_one_identical_answer(world) -> None:  # type: ignore[no-untyped-def]
    vault, http, token, clock = world
    first = vault.put(OWNER, DATA, labels={"pii"}).artifact_id
    second = vault.put(OWNER, DATA[::-1]).artifact_id
    ranged = _url(_issue(http, token, first, byte_range=[0, 10]))
    other = _url(_issue(http, token, second))
    head, body, mac = ranged.removeprefix("/v1/links/").split(".")
    _, other_body, _ = other.removeprefix("/v1/links/").split(".")
    answers = {
        "malformed": http.get("/v1/links/not-a-link"),
        "tampered": http.get(f"/v1/links/{head}.{body[:-2]}{'AA' if body[-2:] != 'AA' else 'BB'}.{mac}"),
        "other artifact": http.get(f"/v1/links/{head}.{other_body}.{mac}"),
        "with a key, still a bad link": http.get(
            f"/v1/links/{head}.{other_body}.{mac}", headers={"Authorization": f"Bearer {token}"}
        ),
    }
    assert http.get(ranged).content == DATA[:10]
    vault.set_policy("acme", Policy([Rule(id="no-pii-out", labels={"pii"}, recipients=("user",), action="deny")]))
    answers["policy now denies"] = http.get(ranged)
    vault.set_policy("acme", None)
    assert http.get(ranged).content == DATA[:10]
    clock.advance(minutes=6)
    answers["expired"] = http.get(ranged)
    fresh = _url(_issue(http, token, second))
    vault.rotate_link_keys()
    answers["keys rotated"] = http.get(fresh)
    gone = _url(_issue(http, token, second))
    vault.delete(OWNER, second)
    answers["deleted"] = http.get(gone)
    bodies = {name: (r.status_code, r.content) for name, r in answers.items()}
    assert len(set(bodies.values())) == 1, bodies
    status, content = next(iter(bodies.values()))
    assert status == 404
    assert CANARY not in content
    assert first.encode() not in content
    assert second.encode() not in content
    assert mac.encode() not in content


def test_the_client_issues_links_a_plain_http_get_follows(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with serve(tmp_path / "store") as live, Client(live.url, live.token) as client:
        artifact_id = client.put(OWNER, DATA, media_type="text/plain").artifact_id
        url = client.link(OWNER, artifact_id, recipient="export", byte_range=(3, 9), expires_in=timedelta(seconds=30))
        assert url.startswith(live.url + "/v1/links/")
        fetched = httpx.get(url)  # no key
        assert fetched.status_code == 200
        assert fetched.content == DATA[3:9]
        with pytest.raises(Exception, match="expires_in"):
            client.link(OWNER, artifact_id, recipient="user", expires_in=timedelta(milliseconds=1500))
        with Client(live.url, live.foreign_token) as foreign:
            foreign_scope = Scope("globex", "gus", "s1")
            with pytest.raises(LookupError):
                foreign.link(foreign_scope, artifact_id, recipient="user")
