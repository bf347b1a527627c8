"""The leak guard's hooks (issue 6): the httpx transport under the real SDKs, the log filter, the span processor.

The SDK tests run the real ``openai`` and ``anthropic`` clients (sync and async, default ``max_retries``)
against a loopback HTTP server that records every request that reaches it: a leaking request never
arrives and raises ``ContextLeak`` once (not retried, not wrapped); a clean one arrives byte-identical to
what an unguarded client sends; with the redact policy the server receives the marker, not the bytes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import io
import json
import logging
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest

from refvault.errors import ContextLeak
from refvault.guard import EVENT, LeakGuard
from refvault.guard.hooks import GuardedSpanExporter, GuardedTransport, GuardSpanProcessor, LogRedactor
from refvault.ids import new_artifact_id

MIN_MATCH = 64
MARKER = "[refvault:art_"

OPENAI_REPLY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1_700_000_000,
    "model": "gpt-test",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop", "logprobs": None}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
ANTHROPIC_REPLY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-test",
    "content": [{"type": "text", "text": "fine"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


# --------------------------------------------------------------------------- fixtures


@dataclass
class Arrival:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class LoopbackServer:
    """An HTTP/1.1 server on 127.0.0.1 that records what arrives and answers like the two APIs."""

    port: int = 0
    arrivals: list[Arrival] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def bodies(self) -> list[bytes]:
        return [a.body for a in self.arrivals]


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    state = LoopbackServer()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            with lock:
                state.arrivals.append(Arrival(self.command, self.path, dict(self.headers.items()), body))
            if self.path.endswith("/messages"):
                reply: object = ANTHROPIC_REPLY
            elif self.path.endswith("/chat/completions"):
                reply = OPENAI_REPLY
            else:
                reply = {"object": "list", "data": []}
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_POST = do_GET = do_PUT = _answer

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def make_canary() -> str:
    """Random text well above min_match, with characters JSON must escape."""
    return f'canary "{secrets.token_hex(40)}"\n\t{secrets.token_urlsafe(60)} \\ end {secrets.token_hex(20)}'


@pytest.fixture
def canary() -> str:
    return make_canary()


class CountingGuard:
    """Delegates to a LeakGuard and counts the checks, to prove a leak is not retried."""

    def __init__(self, guard: LeakGuard) -> None:
        self.guard = guard
        self.checks = 0

    def check(self, request: object) -> object:
        self.checks += 1
        return self.guard.check(request)

    def scan(self, request: object) -> Any:
        return self.guard.scan(request)

    def redact_text(self, text: str) -> Any:
        return self.guard.redact_text(text)

    @property
    def policy(self) -> str:
        return self.guard.policy

    def __repr__(self) -> str:
        return f"CountingGuard({self.guard!r})"


def guard_for(canary: str, policy: str = "raise") -> tuple[CountingGuard, str]:
    guard = LeakGuard(min_match=MIN_MATCH, policy=policy)  # type: ignore[arg-type]
    art = new_artifact_id()
    guard.protect(art, canary)
    return CountingGuard(guard), art


def leaked(canary: str, text: str | bytes, k: int = MIN_MATCH) -> bool:
    """True if any k-character window of the canary appears in text."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    return any(canary[i : i + k] in text for i in range(len(canary) - k + 1))


def leaked_json(canary: str, body: bytes) -> bool:
    """Leak check on the *decoded* JSON strings of a body (escapes undone), and on the raw body."""
    strings: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, str):
            strings.append(value)
            if value.startswith(("{", "[")):  # tool-call arguments: JSON inside a string
                with contextlib.suppress(ValueError):
                    walk(json.loads(value))
            payload = value.partition("base64,")[2] or value
            with contextlib.suppress(ValueError):
                strings.append(base64.b64decode(payload, validate=True).decode("utf-8", errors="replace"))
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(json.loads(body))
    return leaked(canary, body) or any(leaked(canary, s) for s in strings)


# --------------------------------------------------------------------------- SDK call builders


def openai_messages(canary: str | None, site: str) -> list[dict[str, Any]]:
    secret = canary or "nothing to see here"
    tool_call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    if site == "system":
        messages[0]["content"] = f"You are terse. Context: {secret}"
    messages.append({"role": "user", "content": "Look it up."})
    if site == "user":
        messages[-1]["content"] = f"Look it up: {secret}"
    if site == "tool_arguments":
        tool_call["function"]["arguments"] = json.dumps({"query": secret, "limit": 3})
    messages.append({"role": "assistant", "content": None, "tool_calls": [tool_call]})
    tool_text = f"result: {secret}" if site == "tool_result" else "result: 42 rows"
    messages.append({"role": "tool", "tool_call_id": "call_1", "content": tool_text})
    if site == "image":
        data = base64.b64encode(secret.encode()).decode()
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this image?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}},
                ],
            }
        )
    return messages


def anthropic_kwargs(canary: str | None, site: str) -> dict[str, Any]:
    secret = canary or "nothing to see here"
    tool_input: dict[str, Any] = {"query": secret if site == "tool_arguments" else "rows", "limit": 3}
    tool_text = f"result: {secret}" if site == "tool_result" else "result: 42 rows"
    user_content: list[dict[str, Any]] = [{"type": "tool_result", "tool_use_id": "toolu_1", "content": tool_text}]
    if site == "image":
        data = base64.b64encode(secret.encode()).decode()
        user_content.append({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}})
    if site == "user":
        user_content.append({"type": "text", "text": f"and {secret}"})
    return {
        "model": "claude-test",
        "max_tokens": 16,
        "system": f"You are terse. Context: {secret}" if site == "system" else "You are terse.",
        "messages": [
            {"role": "user", "content": "Look it up."},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": tool_input}],
            },
            {"role": "user", "content": user_content},
        ],
    }


SITES = ["system", "user", "tool_result", "tool_arguments", "image"]
SDKS = ["openai", "anthropic"]
MODES = ["sync", "async"]


def call_sdk(sdk: str, mode: str, server: LoopbackServer, transport: Any, canary: str | None, site: str) -> Any:
    """One chat call through the real SDK client (default max_retries), guarded by ``transport`` if given."""
    if mode == "sync":
        client_kwargs: dict[str, Any] = {"trust_env": False}
        if transport is not None:
            client_kwargs["transport"] = transport
        with httpx2.Client(**client_kwargs) as http:
            if sdk == "openai":
                client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", http_client=http)
                return client.chat.completions.create(model="gpt-test", messages=openai_messages(canary, site))
            aclient = anthropic.Anthropic(base_url=server.url, api_key="x", http_client=http)
            return aclient.messages.create(**anthropic_kwargs(canary, site))

    async def main() -> Any:
        client_kwargs: dict[str, Any] = {"trust_env": False}
        if transport is not None:
            client_kwargs["transport"] = transport
        async with httpx2.AsyncClient(**client_kwargs) as http:
            if sdk == "openai":
                client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="x", http_client=http)
                return await client.chat.completions.create(model="gpt-test", messages=openai_messages(canary, site))
            aclient = anthropic.AsyncAnthropic(base_url=server.url, api_key="x", http_client=http)
            return await aclient.messages.create(**anthropic_kwargs(canary, site))

    return asyncio.run(main())


def reply_text(sdk: str, reply: Any) -> str:
    return reply.choices[0].message.content if sdk == "openai" else reply.content[0].text


# --------------------------------------------------------------------------- transport: the real SDKs


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sdk", SDKS)
def test_clean_request_arrives_byte_identical(server: LoopbackServer, canary: str, sdk: str, mode: str) -> None:
    guard, _ = guard_for(canary)
    reference = call_sdk(sdk, mode, server, None, None, "tool_result")
    guarded = call_sdk(sdk, mode, server, GuardedTransport(guard), None, "tool_result")
    assert reply_text(sdk, reference) == reply_text(sdk, guarded) == "fine"
    assert guard.checks == 1
    unguarded_body, guarded_body = server.bodies()
    assert guarded_body == unguarded_body
    assert server.arrivals[1].headers["Content-Length"] == str(len(guarded_body))


@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sdk", SDKS)
def test_leaking_request_never_arrives(server: LoopbackServer, canary: str, sdk: str, mode: str, site: str) -> None:
    guard, art = guard_for(canary)
    with pytest.raises(ContextLeak) as caught:
        call_sdk(sdk, mode, server, GuardedTransport(guard), canary, site)
    assert server.arrivals == []
    assert guard.checks == 1, "the SDK retried a leak"  # every attempt goes through the transport
    err = caught.value
    assert not isinstance(err, openai.APIConnectionError | anthropic.APIConnectionError)
    if sdk == "openai":
        assert type(err) is ContextLeak
    assert [f.artifact_id for f in err.findings if f.arm == "content"] == [art] * len(
        [f for f in err.findings if f.arm == "content"]
    )
    assert any(f.artifact_id == art for f in err.findings)
    assert not leaked(canary, str(err))
    assert not leaked(canary, repr(err.findings))


@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sdk", SDKS)
def test_redact_policy_sends_the_marker(server: LoopbackServer, canary: str, sdk: str, mode: str, site: str) -> None:
    guard, art = guard_for(canary, policy="redact")
    reply = call_sdk(sdk, mode, server, GuardedTransport(guard), canary, site)
    assert reply_text(sdk, reply) == "fine"
    [arrival] = server.arrivals
    assert arrival.headers["Content-Length"] == str(len(arrival.body))
    assert not leaked_json(canary, arrival.body)
    if site != "image":  # an image's bytes are replaced inside its base64 payload
        assert f"[refvault:{art}]" in json.dumps(json.loads(arrival.body), ensure_ascii=False)
    clean = json.loads(arrival.body)
    assert clean["model"] in ("gpt-test", "claude-test")


def test_redact_policy_leaves_a_clean_request_byte_identical(server: LoopbackServer, canary: str) -> None:
    guard, _ = guard_for(canary, policy="redact")
    call_sdk("openai", "sync", server, None, None, "user")
    call_sdk("openai", "sync", server, GuardedTransport(guard), None, "user")
    first, second = server.bodies()
    assert first == second


def test_legacy_httpx_client_with_openai(server: LoopbackServer, canary: str) -> None:
    guard, _ = guard_for(canary)
    with httpx.Client(transport=GuardedTransport(guard), trust_env=False) as http:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", http_client=http)
        assert client.chat.completions.create(model="m", messages=openai_messages(None, "user")).id == "chatcmpl-1"
        with pytest.raises(ContextLeak):
            client.chat.completions.create(model="m", messages=openai_messages(canary, "tool_result"))
    assert len(server.arrivals) == 1
    assert not leaked(canary, server.arrivals[0].body)

    async def main() -> None:
        async with httpx.AsyncClient(transport=GuardedTransport(guard), trust_env=False) as http:
            client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="x", http_client=http)
            with pytest.raises(ContextLeak):
                await client.chat.completions.create(model="m", messages=openai_messages(canary, "system"))

    asyncio.run(main())
    assert len(server.arrivals) == 1


def test_legacy_httpx_client_redacts(server: LoopbackServer, canary: str) -> None:
    guard, art = guard_for(canary, policy="redact")
    with httpx.Client(transport=GuardedTransport(guard), trust_env=False) as http:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", http_client=http)
        client.chat.completions.create(model="m", messages=openai_messages(canary, "tool_result"))
    [arrival] = server.arrivals
    assert arrival.headers["Content-Length"] == str(len(arrival.body))
    assert not leaked_json(canary, arrival.body)
    assert f"[refvault:{art}]".encode() in arrival.body


def test_anthropic_leak_is_a_context_leak_the_sdk_does_not_retry(server: LoopbackServer, canary: str) -> None:
    guard, _ = guard_for(canary)
    with httpx2.Client(transport=GuardedTransport(guard), trust_env=False) as http:
        client = anthropic.Anthropic(base_url=server.url, api_key="x", http_client=http, max_retries=5)
        with pytest.raises(ContextLeak) as caught:
            client.messages.create(**anthropic_kwargs(canary, "tool_result"))
    assert isinstance(caught.value, anthropic.AnthropicError)
    assert not isinstance(caught.value, anthropic.APIConnectionError)
    assert caught.value.__cause__ is None
    assert guard.checks == 1
    assert server.arrivals == []


def test_sdk_default_http_clients_take_the_transport(server: LoopbackServer, canary: str) -> None:
    """The SDKs' own client factories (their timeouts, limits, redirects) accept the guarded transport."""
    guard, _ = guard_for(canary)
    with openai.DefaultHttpxClient(transport=GuardedTransport(guard), trust_env=False) as http:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", http_client=http)
        assert client.chat.completions.create(model="m", messages=openai_messages(None, "user")).id == "chatcmpl-1"
        with pytest.raises(ContextLeak):
            client.chat.completions.create(model="m", messages=openai_messages(canary, "user"))

    async def main() -> None:
        async with anthropic.DefaultAsyncHttpxClient(transport=GuardedTransport(guard), trust_env=False) as http:
            client = anthropic.AsyncAnthropic(base_url=server.url, api_key="x", http_client=http)
            assert (await client.messages.create(**anthropic_kwargs(None, "user"))).id == "msg_1"
            with pytest.raises(ContextLeak):
                await client.messages.create(**anthropic_kwargs(canary, "tool_result"))

    asyncio.run(main())
    assert len(server.arrivals) == 2
    assert not any(leaked(canary, body) for body in server.bodies())


def test_guard_events_are_logged_once(server: LoopbackServer, canary: str, caplog: pytest.LogCaptureFixture) -> None:
    guard, _ = guard_for(canary)
    with caplog.at_level(logging.DEBUG, logger="refvault.guard"), pytest.raises(ContextLeak):
        call_sdk("anthropic", "sync", server, GuardedTransport(guard), canary, "system")
    events = [r for r in caplog.records if r.name == "refvault.guard" and getattr(r, "event", None) == EVENT]
    assert len(events) == 1
    assert not leaked(canary, caplog.text)


# --------------------------------------------------------------------------- transport: bodies


def raw_post(server: LoopbackServer, transport: GuardedTransport, content: bytes, headers: dict[str, str]) -> int:
    with httpx2.Client(transport=transport, trust_env=False) as http:
        return http.post(server.url + "/upload", content=content, headers=headers).status_code


def test_text_and_gzip_bodies_are_checked(server: LoopbackServer, canary: str) -> None:
    guard, _ = guard_for(canary)
    with pytest.raises(ContextLeak):
        raw_post(server, GuardedTransport(guard), f"note: {canary}".encode(), {"Content-Type": "text/plain"})
    payload = json.dumps({"messages": [{"role": "user", "content": canary}]}).encode()
    with pytest.raises(ContextLeak):
        raw_post(
            server,
            GuardedTransport(guard),
            gzip.compress(payload),
            {"Content-Type": "application/json", "Content-Encoding": "gzip"},
        )
    assert server.arrivals == []


def test_redacted_gzip_body_stays_gzip(server: LoopbackServer, canary: str) -> None:
    guard, art = guard_for(canary, policy="redact")
    payload = json.dumps({"messages": [{"role": "user", "content": f"see {canary}"}]}).encode()
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    assert raw_post(server, GuardedTransport(guard), gzip.compress(payload), headers) == 200
    [arrival] = server.arrivals
    assert arrival.headers["Content-Encoding"] == "gzip"
    sent = json.loads(gzip.decompress(arrival.body))
    assert not leaked(canary, sent["messages"][0]["content"])
    assert f"[refvault:{art}]" in sent["messages"][0]["content"]


def test_duplicate_keys_cannot_hide_a_leak(server: LoopbackServer, canary: str) -> None:
    guard, _ = guard_for(canary)
    body = f'{{"messages": [{{"role": "user", "content": {json.dumps(canary)}, "content": "hi"}}]}}'
    with pytest.raises(ContextLeak):
        raw_post(server, GuardedTransport(guard), body.encode(), {"Content-Type": "application/json"})
    assert server.arrivals == []


def test_empty_binary_and_get_requests_pass_through(server: LoopbackServer, canary: str) -> None:
    guard, _ = guard_for(canary)
    transport = GuardedTransport(guard)
    binary = bytes(range(256)) * 8  # not UTF-8, nothing protected
    assert raw_post(server, transport, binary, {"Content-Type": "application/octet-stream"}) == 200
    assert raw_post(server, transport, b"", {}) == 200
    with httpx2.Client(transport=transport, trust_env=False) as http:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", http_client=http)
        assert list(client.models.list()) == []
    assert [a.body for a in server.arrivals] == [binary, b"", b""]


@pytest.mark.parametrize("policy", ["raise", "redact"])
def test_binary_body_with_protected_bytes_is_refused(server: LoopbackServer, canary: str, policy: str) -> None:
    guard, art = guard_for(canary, policy=policy)
    boundary = "b0undary"
    upload = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="x.bin"\r\n\r\n'.encode()
        + b"\xff\xfe\x00" * 100
        + canary.encode()
        + b"\x80" * 50
        + f"\r\n--{boundary}--\r\n".encode()
    )
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    with pytest.raises(ContextLeak) as caught:
        raw_post(server, GuardedTransport(guard), upload, headers)
    assert {f.artifact_id for f in caught.value.findings} == {art}
    assert {f.arm for f in caught.value.findings} == {"content"}
    big_clean = b"\xff" + bytes(range(256)) * 1024  # above the size threshold: the size arm does not apply
    assert raw_post(server, GuardedTransport(guard), big_clean, {"Content-Type": "application/octet-stream"}) == 200
    assert [a.body for a in server.arrivals] == [big_clean]


def test_wrapped_transport_is_used_and_closed(server: LoopbackServer, canary: str) -> None:
    guard, _ = guard_for(canary)
    seen: list[bytes] = []

    class Recording(httpx2.BaseTransport):
        def __init__(self) -> None:
            self.inner = httpx2.HTTPTransport()
            self.closed = False

        def handle_request(self, request: httpx2.Request) -> httpx2.Response:
            seen.append(request.read())
            return self.inner.handle_request(request)

        def close(self) -> None:
            self.closed = True
            self.inner.close()

    inner = Recording()
    assert raw_post(server, GuardedTransport(guard, inner), b'{"a": 1}', {"Content-Type": "application/json"}) == 200
    assert seen == [b'{"a": 1}']
    assert inner.closed
    assert canary not in repr(GuardedTransport(guard))


# --------------------------------------------------------------------------- log filter


class ExtrasFormatter(logging.Formatter):
    """Formats the message, the exception, the stack and every ``extra`` attribute (repr)."""

    STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extras = {k: v for k, v in record.__dict__.items() if k not in self.STANDARD}
        return f"{text} | extras={extras!r} | args={record.args!r}"


@pytest.fixture
def logged(canary: str) -> Iterator[tuple[logging.Logger, io.StringIO, str, str]]:
    guard, art = guard_for(canary)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(ExtrasFormatter("%(levelname)s %(name)s %(message)s"))
    handler.addFilter(LogRedactor(guard.guard))
    logger = logging.getLogger(f"refvault.test.hooks.{secrets.token_hex(4)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield logger, stream, canary, art
    finally:
        logger.removeHandler(handler)


def assert_redacted(stream: io.StringIO, canary: str, art: str) -> str:
    out = stream.getvalue()
    assert out, "the record was dropped"
    assert not leaked(canary, out), out
    assert f"[refvault:{art}]" in out
    return out


LOG_CASES: dict[str, Callable[[logging.Logger, str], None]] = {
    "msg": lambda log, c: log.warning("tool said " + c),
    "percent_args": lambda log, c: log.info("tool %s said %s", "lookup", c),
    "repr_arg": lambda log, c: log.info("tool said %r", c),
    "split_over_args": lambda log, c: log.info("%s%s", c[:50], c[50:]),
    "dict_args": lambda log, c: log.info("user %(user)s", {"user": "ana", "payload": c}),
    "dict_args_used": lambda log, c: log.info("payload %(payload)s", {"payload": c}),
    "nested_args": lambda log, c: log.info("rows %s", [{"row": 1, "text": c}]),
    "bytes_arg": lambda log, c: log.info("raw %s", c.encode()),
    "extra_str": lambda log, c: log.info("done", extra={"tool_output": c}),
    "extra_nested": lambda log, c: log.info("done", extra={"result": {"rows": [("a", c)]}}),
    "extra_bytes": lambda log, c: log.info("done", extra={"blob": b"\x00\xff" + c.encode()}),
    "extra_object": lambda log, c: log.info("done", extra={"obj": Holder(c)}),
    "non_str_msg": lambda log, c: log.info({"event": "tool", "output": c}),
}


class Holder:
    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return f"Holder({self.text})"

    __repr__ = __str__


@pytest.mark.parametrize("case", sorted(LOG_CASES))
def test_log_filter_redacts(logged: tuple[logging.Logger, io.StringIO, str, str], case: str) -> None:
    logger, stream, canary, art = logged
    LOG_CASES[case](logger, canary)
    assert_redacted(stream, canary, art)


def test_log_filter_redacts_exceptions(logged: tuple[logging.Logger, io.StringIO, str, str]) -> None:
    logger, stream, canary, art = logged

    def fail() -> None:
        try:
            raise KeyError("inner " + canary)
        except KeyError as inner:
            err = ValueError(f"tool failed: {canary}")
            err.add_note("note: " + canary)
            raise err from inner

    try:
        fail()
    except ValueError:
        logger.exception("call failed")
    out = assert_redacted(stream, canary, art)
    assert "Traceback (most recent call last)" in out
    assert "ValueError: tool failed: [refvault:" in out


def test_log_filter_redacts_stack_info_and_preformatted_text(
    logged: tuple[logging.Logger, io.StringIO, str, str],
) -> None:
    logger, stream, canary, art = logged
    record = logger.makeRecord(logger.name, logging.ERROR, __file__, 1, "boom", None, None, sinfo="Stack:\n" + canary)
    record.exc_text = "Traceback: " + canary
    logger.handle(record)
    out = assert_redacted(stream, canary, art)
    assert "Stack:" in out


def test_log_filter_keeps_clean_records_untouched(logged: tuple[logging.Logger, io.StringIO, str, str]) -> None:
    logger, stream, _, _ = logged
    captured: list[logging.LogRecord] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            captured.append(record)

    logger.addHandler(Capture())
    args = {"user": "ana", "rows": [1, 2]}
    logger.info("user %(user)s", args, extra={"extra_field": "plain"})
    [record] = captured
    assert record.msg == "user %(user)s"
    assert record.args is args
    assert record.__dict__["extra_field"] == "plain"
    assert stream.getvalue().startswith("INFO ")


def test_log_filter_fails_closed(canary: str) -> None:
    class Broken:
        def redact_text(self, text: str) -> Any:
            raise RuntimeError("index unavailable")

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(ExtrasFormatter("%(levelname)s %(message)s"))
    handler.addFilter(LogRedactor(Broken()))  # type: ignore[arg-type]
    logger = logging.getLogger(f"refvault.test.hooks.{secrets.token_hex(4)}")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        raise ValueError(canary)
    except ValueError:
        logger.error("tool said %s", canary, extra={"payload": canary}, stack_info=True, exc_info=True)
    out = stream.getvalue()
    assert "[refvault: log record withheld: redaction failed]" in out
    assert canary[:MIN_MATCH] not in out
    assert "payload" not in out


def test_log_filter_is_safe_for_the_guard_events(canary: str) -> None:
    """The guard logs llm.context_leak events; a redactor on a handler of that logger does not loop."""
    guard, _ = guard_for(canary)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(LogRedactor(guard.guard))
    guard_logger = logging.getLogger("refvault.guard")
    old_level = guard_logger.level
    guard_logger.addHandler(handler)
    guard_logger.setLevel(logging.DEBUG)
    try:
        guard_logger.warning("echo %s", canary)
        with pytest.raises(ContextLeak):
            guard.check({"messages": [{"role": "user", "content": canary}]})
    finally:
        guard_logger.removeHandler(handler)
        guard_logger.setLevel(old_level)
    assert not leaked(canary, stream.getvalue())


# --------------------------------------------------------------------------- span processor


def traced(canary: str, wrap: str) -> tuple[Any, str, str]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Link, Status, StatusCode

    guard, art = guard_for(canary)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    if wrap == "processor":
        provider.add_span_processor(GuardSpanProcessor(guard.guard, SimpleSpanProcessor(exporter)))
    else:
        provider.add_span_processor(SimpleSpanProcessor(GuardedSpanExporter(guard.guard, exporter)))
    tracer = provider.get_tracer("refvault.test")

    with tracer.start_as_current_span("clean") as clean:
        clean.set_attribute("gen_ai.request.model", "gpt-test")
        clean.add_event("gen_ai.choice", {"index": 0})
        clean_context = clean.get_span_context()
    with tracer.start_as_current_span(
        "chat " + canary, links=[Link(clean_context, {"why": canary})], attributes={"n": 3}
    ) as span:
        span.set_attribute("gen_ai.prompt", f"system: {canary}")
        span.set_attribute("gen_ai.tool.outputs", ["ok", "row " + canary])
        span.set_attribute("gen_ai.usage.input_tokens", 12)
        span.add_event("gen_ai.tool.message", {"content": canary, "role": "tool"})
        span.add_event("echo " + canary)
        span.record_exception(ValueError("tool failed: " + canary))
        span.set_status(Status(StatusCode.ERROR, "failed on " + canary))
    provider.shutdown()
    return exporter, art, clean_context


@pytest.mark.parametrize("wrap", ["processor", "exporter"])
def test_span_hooks_redact(canary: str, wrap: str) -> None:
    exporter, art, _ = traced(canary, wrap)
    clean, dirty = exporter.get_finished_spans()
    assert clean.name == "clean"
    assert dict(clean.attributes) == {"gen_ai.request.model": "gpt-test"}
    dumped = dirty.to_json()
    assert not leaked(canary, dumped)
    assert not leaked(canary, json.loads(dumped)["status"].get("description", ""))
    marker = f"[refvault:{art}]"
    assert dirty.name == "chat " + marker
    attrs = dict(dirty.attributes)
    assert attrs["gen_ai.prompt"] == "system: " + marker
    assert attrs["gen_ai.tool.outputs"] == ("ok", "row " + marker)
    assert attrs["gen_ai.usage.input_tokens"] == 12
    assert attrs["n"] == 3
    events = {e.name: dict(e.attributes or {}) for e in dirty.events}
    assert events["gen_ai.tool.message"] == {"content": marker, "role": "tool"}
    assert "echo " + marker in events
    assert events["exception"]["exception.message"] == "tool failed: " + marker
    assert marker in events["exception"]["exception.stacktrace"]
    assert dirty.status.description == "failed on " + marker
    assert dict(dirty.links[0].attributes or {}) == {"why": marker}
    assert dirty.context == dirty.get_span_context()
    assert dirty.end_time is not None


def test_span_processor_is_a_real_span_processor(canary: str) -> None:
    from opentelemetry.sdk.trace import SpanProcessor
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    guard, _ = guard_for(canary)
    processor = GuardSpanProcessor(guard.guard, SimpleSpanProcessor(InMemorySpanExporter()))
    assert isinstance(processor, SpanProcessor)
    assert isinstance(processor, GuardSpanProcessor)
    assert isinstance(GuardedSpanExporter(guard.guard, InMemorySpanExporter()), SpanExporter)
    assert processor.force_flush()
    with pytest.raises(TypeError):
        GuardSpanProcessor(guard.guard)


def test_span_hooks_fail_closed() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    class Broken:
        def redact_text(self, text: str) -> Any:
            raise RuntimeError("index unavailable")

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(GuardSpanProcessor(Broken(), SimpleSpanProcessor(exporter)))  # type: ignore[arg-type]
    with provider.get_tracer("t").start_as_current_span("s") as span:
        span.set_attribute("a", "b")
    assert exporter.get_finished_spans() == ()
    guarded = GuardedSpanExporter(Broken(), exporter)  # type: ignore[arg-type]
    assert guarded.export([span]) is SpanExportResult.FAILURE  # type: ignore[list-item]
