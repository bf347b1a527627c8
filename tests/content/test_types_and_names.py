"""Stored media types and filenames: sniffing never promotes opaque bytes, declared and detected types, hostile
names, unknown blocks.

Tests named ``test_fN_*`` were findings of a review (each failed before its fix, the defect named in its
docstring); ``test_d_*`` pin attacks the code already defended.
"""

from __future__ import annotations

import pytest

from refvault import Vault
from refvault.content.materialize import safe_filename
from refvault.errors import InvalidResult
from tests.content.parts import PNG_HEAD, SCOPE, b64, blob, dumped, image, link_id, noise, png, run


@pytest.fixture
def vault(memory_vault: Vault) -> Vault:
    return memory_vault


# -- F12, F13, F14: block kinds, media types and names --------------------------------------------------------------


def test_unknown_block_kind_carrying_base64_is_not_passed_through(vault: Vault) -> None:
    """Blocks of an unknown ``type`` pass through untouched, ``data`` and all (dict path): a future/vendor
    binary kind (e.g. 'video') reaches the model as base64. Refuse it or store it."""
    other = b64(noise(3000, "f12"))
    value = {"content": [image(png(100, "f12")), {"type": "video", "data": other, "mimeType": "video/mp4"}]}
    try:
        projected = run(vault, value)
    except InvalidResult:
        return
    assert other not in dumped(projected), "base64 of an unknown binary block kind reached the projection"


def test_an_image_block_is_not_stored_as_html(vault: Vault) -> None:
    """An ``image`` (or ``audio``) block declaring text/html with HTML bytes is a 'match' and is stored as
    text/html: the block kind is never reconciled with the media type."""
    html = b"<!doctype html><html><body><script>alert(1)</script></body></html>"
    link = run(vault, {"content": [image(html, "text/html")]})["content"][0]
    assert not link["mimeType"].startswith("text/html"), link["_meta"]
    assert link["_meta"]["media_type_check"] != "match"


def test_a_name_from_the_uri_does_not_contradict_the_stored_type(vault: Vault) -> None:
    """Declared image/png, bytes are HTML: stored (rightly) as octet-stream, but named ``invoice.html`` from
    the URI. The extension re-introduces the executable type the media-type check refused to trust."""
    html = b"<!doctype html><html><body><script>alert(1)</script></body></html>"
    link = run(vault, {"content": [blob(html, uri="https://h/invoice.html", mime="image/png")]})["content"][0]
    assert link["mimeType"] == "application/octet-stream"
    assert not link["name"].lower().endswith((".html", ".htm")), link["name"]


@pytest.mark.parametrize(
    "uri",
    ["file:///x/CON", "file:///x/nul.png", "file:///x/COM1.txt", "file:///x/report.pdf.", "file:///x/a.png:evil.exe"],
)
def test_windows_hostile_names_are_not_kept(uri: str) -> None:
    """Reserved device names, trailing dots and NTFS stream separators pass ``safe_filename`` unchanged;
    a client saving the artifact under its name on Windows opens a device or an alternate data stream."""
    name = safe_filename(uri)
    assert name is None or (
        name.split(".")[0].upper() not in {"CON", "PRN", "AUX", "NUL", "COM1", "LPT1"}
        and not name.endswith((".", " "))
        and ":" not in name
    ), name


@pytest.mark.parametrize(
    ("declared", "data"),
    [
        ("application/octet-stream", b"<!doctype html><html><script>alert(1)</script></html>"),
        (
            "application/octet-stream",
            b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>',
        ),
        (None, b"<svg onload=alert(1)>"),
    ],
)
def test_sniffing_never_promotes_opaque_bytes_to_an_active_type(
    vault: Vault, declared: str | None, data: bytes
) -> None:
    """A blob declared ``application/octet-stream`` (or undeclared) whose bytes look like HTML/SVG is stored
    as text/html or image/svg+xml: sniffing *upgrades* opaque bytes to a scriptable type (the classic
    content-sniffing XSS that ``nosniff`` exists to stop); ``resources/read`` then serves it under that type."""
    link = run(vault, {"content": [blob(data, uri="https://h/x", mime=declared)]})["content"][0]
    assert link["mimeType"].split(";")[0] not in {"text/html", "image/svg+xml", "application/xhtml+xml"}, link


@pytest.mark.parametrize(
    ("declared", "data"),
    [
        ("image/png", b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>'),
        ("image/svg+xml", b"<!doctype html><html><script>alert(1)</script></html>"),
        ("image/png", b"<html><script>alert(1)</script></html>"),
        ("text/plain", b"<svg onload=alert(1)>"),
        ("image/jpeg", PNG_HEAD + b"rest"),
    ],
)
def test_d_declared_and_detected_disagree_stores_octet_stream(vault: Vault, declared: str, data: bytes) -> None:
    link = run(vault, {"content": [image(data, declared)]})["content"][0]
    assert link["mimeType"] == "application/octet-stream"
    assert link["_meta"]["media_type_check"] == "mismatch"
    descriptor = vault.describe(SCOPE, link_id(link))
    assert descriptor.source_version["declared_media_type"] == declared
    assert descriptor.source_version["media_type_check"] == "mismatch"


def test_d_media_type_parameters_and_case_are_canonical(vault: Vault) -> None:
    link = run(vault, {"content": [image(png(50, "mt"), "Image/PNG; Foo=Bar; a=b")]})["content"][0]
    assert link["mimeType"] == "image/png; a=b; foo=Bar"


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("file:///srv/../../etc/passwd", "passwd"),
        ("file:///x/..%2F..%2Fetc%2Fshadow", "shadow"),
        ("file:///x/a%00b.png", "ab.png"),
        ("file:///x/gnp\u202e.exe", "gnp.exe"),
        ("file:///x/\u200bzero\u2066width\u2069.png", "zerowidth.png"),
        ("C:\\Users\\me\\evil.png", None),
        ("file:///x/%2e%2e", None),
        ("file:///x/" + "a" * 300 + ".png", "a" * 124 + ".png"),
        ("file:///x/" + "b" * 3000, None),
    ],
)
def test_d_safe_filename_attacks(uri: str, expected: str | None) -> None:
    assert safe_filename(uri) == expected
