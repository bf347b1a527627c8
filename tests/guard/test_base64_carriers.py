"""The content arm finds protected text in base64 however it is cut, glued, padded or wrapped.

Tests named ``test_leak_*`` pin a gap that was found and closed; ``test_defended_*`` pin attacks the guard already
stopped when they were written.
"""

from __future__ import annotations

import base64

import pytest

from refvault.guard import LeakGuard
from tests.guard.protected import ART, B64, EXCERPT, SECRET, _ids, _tool


@pytest.fixture(scope="module")
def guard() -> LeakGuard:
    g = LeakGuard(min_match=64)
    g.protect(ART, SECRET)
    return g


# -- 1. base64 runs glued to a prefix whose length is not a multiple of 4 -----------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "config: key=" + B64,  # '=' belongs to the base64 class, "key=" is stripped to "key": 3 chars, misaligned
        "GET https://files.example.io/v1/blob/" + B64,  # "io/v1/blob/" glued to the run
        "token-" + B64,
        "a=" + B64,
    ],
)
def test_leak_base64_run_misaligned_by_a_glued_prefix(guard: LeakGuard, text: str) -> None:
    assert _ids(guard.scan(_tool(text))) == {ART}


def test_leak_base64_concatenated_padded_chunks(guard: LeakGuard) -> None:
    # Streamed base64 chunks concatenated as sent: "...=" in the middle shifts everything after it.
    text = base64.b64encode(b"hdr").decode()[:-1] + "=" + base64.b64encode(b"X").decode() + B64
    assert text.count("=") >= 2
    assert _ids(guard.scan(_tool(text))) == {ART}


def test_leak_base64_wrapped_with_indented_lines(guard: LeakGuard) -> None:
    # YAML block scalars, folded headers, PEM-in-YAML: 76-character lines, each indented by two spaces.
    wrapped = "\n  ".join(B64[i : i + 76] for i in range(0, len(B64), 76))
    assert _ids(guard.scan(_tool("payload: |\n  " + wrapped))) == {ART}


def test_defended_base64_aligned_and_mime_wrapped(guard: LeakGuard) -> None:
    assert _ids(guard.scan(_tool("see " + B64))) == {ART}
    assert _ids(guard.scan(_tool("\r\n".join(B64[i : i + 76] for i in range(0, len(B64), 76))))) == {ART}
    odd = base64.b64encode(b"xy" + EXCERPT.encode() + b"z").decode()  # secret at odd byte alignment inside the run
    assert _ids(guard.scan(_tool(odd))) == {ART}
    url = "data:text/plain;charset=utf-8;name=a.txt;base64," + base64.urlsafe_b64encode(EXCERPT.encode()).decode()
    assert _ids(
        guard.scan({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]})
    ) == {ART}
