"""The guarded httpx transport checks every body: undecodable, binary with base64 text, gzip and streamed.

Tests named ``test_leak_*`` pin a gap that was found and closed; ``test_defended_*`` pin attacks the guard already
stopped when they were written.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator

import httpx2
import pytest

from refvault.errors import ContextLeak
from refvault.guard import LeakGuard
from refvault.guard.hooks import GuardedTransport
from tests.guard.protected import ART, B64, EXCERPT, SECRET


@pytest.fixture(scope="module")
def guard() -> LeakGuard:
    g = LeakGuard(min_match=64)
    g.protect(ART, SECRET)
    return g


# -- 3. GuardedTransport fails open on bodies it cannot decode ------------------------------------------------------


def _post(guard: LeakGuard, body: bytes, headers: dict[str, str]) -> list[bytes]:
    arrived: list[bytes] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        arrived.append(request.read())
        return httpx2.Response(200, json={})

    client = httpx2.Client(transport=GuardedTransport(guard, httpx2.MockTransport(handler)))
    with pytest.raises(ContextLeak):
        client.post("http://llm.test/v1/chat/completions", content=body, headers=headers)
    return arrived


JSON_BODY = json.dumps({"messages": [{"role": "user", "content": EXCERPT}]}).encode()


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("gzip", gzip.compress(JSON_BODY) + b"\r\n"),  # trailing bytes: zlib-based servers inflate the first member
        ("gzip", JSON_BODY),  # mislabelled: not compressed at all
        ("br", JSON_BODY),  # an encoding the guard does not decode: the plain bytes still carry the secret
    ],
    ids=["gzip-trailing", "gzip-mislabelled", "unknown-encoding"],
)
def test_leak_transport_passes_undecodable_bodies(guard: LeakGuard, encoding: str, body: bytes) -> None:
    assert _post(guard, body, {"content-type": "application/json", "content-encoding": encoding}) == []


def test_leak_transport_binary_body_with_base64_text_part(guard: LeakGuard) -> None:
    # A multipart upload: one binary part (so the body is not UTF-8) and a text part holding base64.
    body = b"--b\r\n\r\n\xff\xfe\x00binary\r\n--b\r\n\r\n" + B64.encode() + b"\r\n--b--\r\n"
    assert _post(guard, body, {"content-type": "multipart/form-data; boundary=b"}) == []


def test_defended_transport_gzip_and_streamed_bodies(guard: LeakGuard) -> None:
    assert (
        _post(guard, gzip.compress(JSON_BODY), {"content-type": "application/json", "content-encoding": "gzip"}) == []
    )

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(JSON_BODY), 7):
            yield JSON_BODY[i : i + 7]

    arrived: list[bytes] = []
    client = httpx2.Client(
        transport=GuardedTransport(
            guard, httpx2.MockTransport(lambda r: arrived.append(r.read()) or httpx2.Response(200))
        )
    )
    with pytest.raises(ContextLeak) as caught:
        client.post("http://llm.test/v1/messages", content=chunks(), headers={"content-type": "application/json"})
    assert arrived == []
    assert EXCERPT[:64] not in str(caught.value)
    assert EXCERPT[:64] not in repr(caught.value.findings)
