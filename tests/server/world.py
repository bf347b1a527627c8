"""The attack world of the server's adversarial tests: one vault with artifacts in ``OWNER``'s scope, keys of every
kind, raw ASGI calls and the checks every answer must pass.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from refvault import Scope, Vault

OWNER = Scope("acme", "ana", "s1")
PLANTED = "PLANTEDcanary7q"  # put into requests; must never come back in a problem or a header
CONTENT_CANARY = b"CONTENTcanary4z"  # inside the owner's artifacts; never shown to another scope
SEALED_CANARY = b"SEALEDcanary9k"  # inside sealed artifacts; never shown by /mcp or a read
MISSING_ID = "art_" + "a" * 26
MAX_BODY = 64 * 1024
PROBLEM_KEYS = {"type", "title", "status", "detail", "error"}
TEXT = b"".join(b"line %d " % i + CONTENT_CANARY + b"\n" for i in range(50))
RECORDS = b"".join(b'{"n": %d, "word": "%s"}\n' % (i, CONTENT_CANARY) for i in range(30))
SEALED_TEXT = b"the sealed " + SEALED_CANARY + b" text\n"
SEALED_RECORDS = b'{"secret": "' + SEALED_CANARY + b'"}\n'
FUZZ = settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@dataclass
class World:
    """One vault with artifacts in ``OWNER``'s scope, keys of every kind, and the app over it."""

    vault: Vault
    http: TestClient
    owner: str  # acme/ana, every session
    s1_only: str  # acme/ana, session s1 only
    other_tenant: str  # globex/ana
    other_user: str  # acme/bob
    other_session_owner: str  # acme/ana too, used with session s2
    ids: dict[str, str]

    def headers(self, token: str | None = None, session: str = "s1", **extra: str) -> dict[str, str]:
        found = {"Authorization": f"Bearer {token or self.owner}", "Refvault-Session": session}
        found.update(extra)
        return found


def raw_answer(response: httpx.Response) -> bytes:
    """Everything the server sent: status line material, headers and body."""
    head = b"".join(k.encode("latin-1") + b": " + v.encode("latin-1") + b"\n" for k, v in response.headers.items())
    return head + response.content


def check_answer(response: httpx.Response, *, planted: str = PLANTED, content_visible: bool = False) -> None:
    """No 5xx; errors are well-formed problems; nothing planted (or, unless allowed, any content) comes back."""
    assert response.status_code < 500, (response.status_code, response.text[:500])
    raw = raw_answer(response)
    if response.status_code >= 400:
        assert response.headers["content-type"] == "application/problem+json", response.headers
        body = response.json()
        assert PROBLEM_KEYS <= set(body) <= PROBLEM_KEYS | {"reason"}, body
        assert body["type"].startswith("urn:refvault:problem:")
        assert body["status"] == response.status_code
        assert "Traceback" not in response.text
        assert planted.encode().lower() not in raw.lower(), response.text[:500]
    else:
        headers = raw[: len(raw) - len(response.content)]
        assert planted.encode().lower() not in headers.lower()
    if not content_visible:
        assert CONTENT_CANARY not in raw
    assert SEALED_CANARY not in raw or content_visible


def asgi(
    app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]], messages: list[dict[str, Any]]
) -> tuple[int, bytes]:
    """Call the ASGI app with exactly these headers and ``receive`` messages (then silence); its status and body.

    FastAPI's TestClient rewrites ``Content-Length`` from the body it sends;
    this sends whatever header bytes the test wants.
    """
    pending = iter(messages)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        for message in pending:
            return message
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def send_(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
        "state": {},
    }

    async def run() -> None:
        with anyio.fail_after(30):
            with contextlib.suppress(Exception):  # an unhandled error still sends its 500 first
                await app(scope, receive, send_)

    anyio.run(run)
    start = next((m for m in sent if m["type"] == "http.response.start"), None)
    assert start is not None, "no response was started"
    return start["status"], b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def raw_headers(
    world: World, token: str | None = None, session: str = "s1", **extra: bytes
) -> list[tuple[bytes, bytes]]:
    found = [(k.lower().encode(), v.encode()) for k, v in world.headers(token, session).items()]
    return found + [(k.lower().replace("_", "-").encode(), v) for k, v in extra.items()]


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


def mcp(
    world: World, method: str, params: dict[str, Any] | None, *, token: str | None = None, session: str = "s1"
) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {token or world.owner}",
        "Refvault-Session": session,
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 7, "method": method}
    if params is not None:
        message["params"] = params
    return world.http.post("/mcp", json=message, headers=headers)
