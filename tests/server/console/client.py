"""Signing a TestClient into the console, and reading tokens out of its pages (for the non-browser tests)."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = _CSRF.search(html)
    assert found is not None, "the page has no CSRF field"
    return found.group(1)


def sign_in(http: TestClient, key: str) -> None:
    """Sign ``http`` in with an API key through the login form (as a person would)."""
    form = http.get("/console/login")
    answer = http.post(
        "/console/login", data={"csrf": csrf_of(form.text), "key": key, "next": "/console"}, follow_redirects=False
    )
    assert answer.status_code == 303, answer.text
