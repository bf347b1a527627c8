"""Console sign-in: by API key on the login form, by single-use link, sessions that end, CSRF on every form."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from refvault import Scope, Vault
from refvault.keys import create_key, parse_token, revoke_key
from refvault.server.app import create_app
from refvault.server.console import signin
from tests.conftest import Clock
from tests.server.console.client import csrf_of, sign_in

SCOPE = Scope("acme", "ana", "s1")


@pytest.fixture
def served(make_vault: Callable[..., Vault], clock: Clock) -> Iterator[tuple[Vault, TestClient, str]]:
    """One app on each backend (memory, embedded, S3 + PostgreSQL) with a settable clock, and an API key."""
    vault = make_vault(clock=clock)
    vault.put(SCOPE, b"hello", media_type="text/plain")
    _, key = create_key(vault, "acme", "ana")
    with TestClient(create_app(vault)) as http:
        yield vault, http, key


def _link(http: TestClient, key: str, next_path: str = "/console") -> str:
    answer = http.post("/v1/console/sessions", json={"next": next_path}, headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 201, answer.text
    assert answer.json()["expires_in"] == 60
    assert answer.headers["cache-control"] == "no-store"
    return str(answer.json()["url"]).removeprefix("http://testserver")


def test_pages_need_a_session_and_send_the_viewer_to_sign_in(served: tuple[Vault, TestClient, str]) -> None:
    _, http, _ = served
    for path in ("/console", "/console/runs", "/console/audit", "/console/artifacts/art_" + "a" * 28):
        answer = http.get(path, follow_redirects=False)
        assert answer.status_code == 303
        assert answer.headers["location"].startswith("/console/login?next=")


def test_a_valid_key_signs_in_and_a_wrong_one_does_not(served: tuple[Vault, TestClient, str]) -> None:
    _, http, key = served
    form = http.get("/console/login")
    wrong = http.post("/console/login", data={"csrf": csrf_of(form.text), "key": key[:-2] + "xx"})
    assert wrong.status_code == 401
    assert key[:-2] not in wrong.text  # the key typed is never echoed
    sign_in(http, key)
    page = http.get("/console")
    assert page.status_code == 200
    assert "acme / ana" in page.text
    cookie = next(c for c in http.cookies.jar if c.name == signin.COOKIE)
    assert cookie.has_nonstandard_attr("HttpOnly")
    assert cookie.path == "/console"


def test_the_session_cookie_is_http_only_and_same_site_strict(served: tuple[Vault, TestClient, str]) -> None:
    _, http, key = served
    form = http.get("/console/login")
    answer = http.post("/console/login", data={"csrf": csrf_of(form.text), "key": key}, follow_redirects=False)
    header = answer.headers["set-cookie"].lower()
    assert "httponly" in header
    assert "samesite=strict" in header
    assert "path=/console" in header


def test_the_login_form_without_its_token_is_refused(served: tuple[Vault, TestClient, str]) -> None:
    _, http, key = served
    http.get("/console/login")
    answer = http.post("/console/login", data={"key": key}, follow_redirects=False)
    assert answer.status_code == 403
    assert signin.COOKIE + "=" not in answer.headers.get("set-cookie", "")


def test_a_link_signs_in_once_and_goes_to_its_page(served: tuple[Vault, TestClient, str]) -> None:
    _vault, http, key = served
    link = _link(http, key, "/console/runs")
    with TestClient(http.app) as browser:
        first = browser.get(link, follow_redirects=False)
        assert first.status_code == 200  # a page that moves on by itself (same-site), not a redirect
        assert 'content="0; url=/console/runs"' in first.text
        assert browser.get("/console/runs").status_code == 200
    with TestClient(http.app) as again:
        second = again.get(link, follow_redirects=False)
        assert second.status_code == 403
        assert "used already" in second.text
        assert again.get("/console", follow_redirects=False).status_code == 303


def test_an_expired_link_is_refused(served: tuple[Vault, TestClient, str], clock: Clock) -> None:
    _, http, key = served
    link = _link(http, key)
    clock.advance(seconds=61)
    with TestClient(http.app) as browser:
        assert browser.get(link, follow_redirects=False).status_code == 403


def test_a_tampered_link_and_a_revoked_keys_link_are_refused(served: tuple[Vault, TestClient, str]) -> None:
    vault, http, key = served
    link = _link(http, key)
    head, _, signature = link.rpartition(".")
    forged = head + "." + ("A" if signature[0] != "A" else "B") + signature[1:]
    with TestClient(http.app) as browser:
        assert browser.get(forged, follow_redirects=False).status_code == 403
    assert revoke_key(vault, str(parse_token(key)))
    with TestClient(http.app) as browser:
        assert browser.get(link, follow_redirects=False).status_code == 403


def test_a_link_never_sends_the_browser_off_the_console() -> None:
    for target in (
        "https://evil.example/",
        "//evil.example/console",
        "/v1/artifacts",
        "/console\\@evil",
        "javascript:x",
    ):
        assert signin.checked_next(target) == "/console"
    assert signin.checked_next("/console/runs?session=s1") == "/console/runs?session=s1"


def test_the_link_endpoint_needs_a_key(served: tuple[Vault, TestClient, str]) -> None:
    _, http, _ = served
    answer = http.post("/v1/console/sessions", json={"next": "/console"})
    assert answer.status_code == 401
    assert answer.headers["content-type"].startswith("application/problem+json")


def test_signing_out_ends_the_session_even_for_a_copied_cookie(served: tuple[Vault, TestClient, str]) -> None:
    _, http, key = served
    sign_in(http, key)
    cookie = http.cookies.get(signin.COOKIE)
    assert cookie
    page = http.get("/console")
    answer = http.post("/console/logout", data={"csrf": csrf_of(page.text)}, follow_redirects=False)
    assert answer.status_code == 303
    with TestClient(http.app, cookies={signin.COOKIE: cookie}) as copied:
        assert copied.get("/console", follow_redirects=False).status_code == 303


def test_sessions_expire(served: tuple[Vault, TestClient, str], clock: Clock) -> None:
    _, http, key = served
    sign_in(http, key)
    assert http.get("/console", follow_redirects=False).status_code == 200
    clock.advance(seconds=signin.SESSION_TTL.total_seconds() + 1)
    assert http.get("/console", follow_redirects=False).status_code == 303


def test_revoking_the_key_ends_its_console_sessions(served: tuple[Vault, TestClient, str]) -> None:
    vault, http, key = served
    sign_in(http, key)
    assert http.get("/console", follow_redirects=False).status_code == 200
    assert revoke_key(vault, str(parse_token(key)))
    assert http.get("/console", follow_redirects=False).status_code == 303


def test_state_changing_forms_without_the_csrf_token_are_refused(served: tuple[Vault, TestClient, str]) -> None:
    vault, http, key = served
    artifact = vault.list(SCOPE)[0].artifact_id
    sign_in(http, key)
    for path in ("/console/logout", f"/console/artifacts/{artifact}/verify", f"/console/artifacts/{artifact}/download"):
        assert http.post(path, data={}, follow_redirects=False).status_code == 403
        assert http.post(path, data={"csrf": "rvc1.forged"}, follow_redirects=False).status_code == 403
    assert http.get("/console", follow_redirects=False).status_code == 200  # the refused sign-out changed nothing


def test_another_sessions_csrf_token_is_refused(served: tuple[Vault, TestClient, str]) -> None:
    _vault, http, key = served
    sign_in(http, key)
    token = csrf_of(http.get("/console").text)
    with TestClient(http.app) as other:
        sign_in(other, key)
        answer = other.post("/console/logout", data={"csrf": token}, follow_redirects=False)
        assert answer.status_code == 403


def test_the_link_lifetime_is_sixty_seconds() -> None:
    assert timedelta(seconds=60) == signin.LINK_TTL


def test_over_https_the_cookies_are_secure(served: tuple[Vault, TestClient, str]) -> None:
    _, http, key = served
    with TestClient(http.app, base_url="https://testserver") as secure:
        form = secure.get("/console/login")
        assert "secure" in form.headers["set-cookie"].lower()
        answer = secure.post("/console/login", data={"csrf": csrf_of(form.text), "key": key}, follow_redirects=False)
        assert "secure" in answer.headers["set-cookie"].lower()
    form = http.get("/console/login")
    assert "secure" not in form.headers["set-cookie"].lower()  # plain HTTP on loopback: a Secure cookie would not stick
