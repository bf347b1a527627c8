"""The console under hostile or odd input: image bombs and mislabelled formats, deep queries, odd cookies,
dot-segments in sign-in targets, bad query parameters, and what the audit page tells one user of another."""

from __future__ import annotations

import io
import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from refvault import Scope, Vault
from refvault.keys import create_key
from refvault.server.app import create_app
from tests.server.console.client import csrf_of, sign_in

ANA = Scope("acme", "ana", "s1")
BOB = Scope("acme", "bob", "s9")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Vault, TestClient, str]]:
    with Vault.open(tmp_path / "store") as vault:
        _, key = create_key(vault, "acme", "ana")
        with TestClient(create_app(vault), raise_server_exceptions=False) as http:
            yield vault, http, key


def _png(size: tuple[int, int], mode: str = "RGB", fmt: str = "PNG") -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new(mode, size).save(out, format=fmt)
    return out.getvalue()


def test_audit_page_does_not_reveal_other_users_activity_in_the_tenant(
    served: tuple[Vault, TestClient, str],
) -> None:
    """The audit page runs verify_audit over the whole tenant: its entry count moves when another user acts
    (the API keeps chain verification an operator's job: 'a key sees only part of its tenant's chain')."""
    vault, http, key = served
    vault.put(ANA, b"mine", media_type="text/plain")
    sign_in(http, key)
    before = http.get("/console/audit", params={"session": "s1"}).text
    for n in range(5):
        vault.put(BOB, b"bob %d" % n, media_type="text/plain")  # bob's own work, none of ana's business
    vault.flush_audit()
    after = http.get("/console/audit", params={"session": "s1"}).text
    chain = re.compile(r'id="chain">([^<]*)')
    assert chain.search(before).group(1) == chain.search(after).group(1)  # type: ignore[union-attr]


def test_thumbnail_refuses_an_image_over_the_pixel_limit(served: tuple[Vault, TestClient, str]) -> None:
    """MAX_IMAGE_PIXELS = 64M only warns up to 128M pixels: a 100M-pixel PNG of a few KB is decoded in full
    (an 11000x11000 RGBA PNG of 470 KB costs ~500 MB and 3 s per GET)."""
    vault, http, key = served
    bomb = _png((10_000, 10_000), mode="1")
    assert len(bomb) < 20_000
    artifact = vault.put(ANA, bomb, media_type="image/png").artifact_id
    sign_in(http, key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        answer = http.get(f"/console/artifacts/{artifact}/thumbnail", params={"session": "s1"})
    assert answer.status_code == 404


@pytest.mark.parametrize("fmt", ["TIFF", "PCX", "TGA"])
def test_thumbnail_decodes_only_the_declared_browser_format(served: tuple[Vault, TestClient, str], fmt: str) -> None:
    """An image/png artifact holding TIFF/PCX/TGA bytes is handed to that Pillow decoder (EPS would reach
    Ghostscript where installed): Image.open is not limited to PNG/JPEG/GIF/WebP."""
    vault, http, key = served
    artifact = vault.put(ANA, _png((40, 40), fmt=fmt), media_type="image/png").artifact_id
    sign_in(http, key)
    answer = http.get(f"/console/artifacts/{artifact}/thumbnail", params={"session": "s1"})
    assert answer.status_code == 404


def test_a_deeply_nested_record_query_is_not_a_500(served: tuple[Vault, TestClient, str]) -> None:
    vault, http, key = served
    rows = "\n".join(json.dumps({"i": i}) for i in range(3)).encode()
    artifact = vault.put(ANA, rows, media_type="application/x-ndjson").artifact_id
    sign_in(http, key)
    answer = http.get(f"/console/artifacts/{artifact}", params={"session": "s1", "where": "[" * 5000 + "]" * 5000})
    assert answer.status_code == 200
    assert "JSON selector" in answer.text


def test_a_non_ascii_pre_login_cookie_is_not_a_500(served: tuple[Vault, TestClient, str]) -> None:
    """secrets.compare_digest raises TypeError on a non-ASCII str."""
    _, http, key = served
    token = csrf_of(http.get("/console/login").text)
    http.cookies.clear()
    answer = http.post(
        "/console/login",
        data={"csrf": token, "key": key},
        headers={"Cookie": "refvault_console_login=\u00e9".encode()},  # type: ignore[dict-item]
        follow_redirects=False,
    )
    assert answer.status_code == 403


@pytest.mark.parametrize("target", ["/console/../v1/audit", "/console/%2e%2e/v1/audit"])
def test_a_sign_in_link_never_sends_the_browser_outside_the_console(
    served: tuple[Vault, TestClient, str], target: str
) -> None:
    """checked_next accepts dot-segments: the browser resolves /console/../v1/audit to /v1/audit."""
    _, http, key = served
    made = http.post("/v1/console/sessions", json={"next": target}, headers={"Authorization": f"Bearer {key}"})
    assert made.status_code == 201
    followed = http.get(made.json()["url"].removeprefix("http://testserver"), follow_redirects=False)
    assert followed.status_code == 200
    assert 'content="0; url=/console"' in followed.text


def test_a_bad_query_parameter_gets_a_console_page_not_api_json(served: tuple[Vault, TestClient, str]) -> None:
    """/console?page=abc (or a session name over 128 characters) answers with the API's problem+json, without
    the console's CSP and frame headers."""
    _, http, key = served
    sign_in(http, key)
    for params in ({"page": "abc"}, {"session": "x" * 200}):
        answer = http.get("/console", params=params)
        assert answer.headers["content-type"].startswith("text/html")
        assert "frame-ancestors 'none'" in answer.headers.get("content-security-policy", "")
