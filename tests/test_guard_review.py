"""Adversarial review of the leak guard (issue 6): false negatives and leaks, plus defended attacks.

Tests named ``test_leak_*`` demonstrate a gap (they fail until it is fixed); ``test_defended_*`` pin
attacks the guard already stops.
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import io
import json
import logging
import random
import threading
from collections.abc import Iterator
from types import SimpleNamespace

import httpx2
import pydantic
import pytest

from refvault import Ref, Scope, Toolbox, Vault
from refvault.errors import ContextLeak
from refvault.guard import LeakGuard
from refvault.guard.hooks import GuardedTransport, LogRedactor, redact_span

CHUNK = 1 << 20
ART = "art_review"


def _text(size: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789 ") for _ in range(size))


SECRET = _text(4000, seed=61)
EXCERPT = SECRET[1000:1200]  # 200 bytes: far above min_match


@pytest.fixture(scope="module")
def guard() -> LeakGuard:
    g = LeakGuard(min_match=64)
    g.protect(ART, SECRET)
    return g


def _tool(content: str) -> dict[str, object]:
    return {
        "model": "m",
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "tool", "tool_call_id": "c1", "content": content},
        ],
    }


def _ids(findings: list[object]) -> set[str | None]:
    return {getattr(f, "artifact_id", None) for f in findings if getattr(f, "arm", None) == "content"}


B64 = base64.b64encode(EXCERPT.encode()).decode()


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


# -- 2. request objects the walker does not descend into -----------------------------------------------------------


@dataclasses.dataclass
class _Msg:
    role: str
    content: str


@pytest.mark.parametrize(
    "request_",
    [
        [_Msg("tool", EXCERPT)],
        {"messages": [{"role": "user", "content": {EXCERPT}}]},
        SimpleNamespace(messages=[{"role": "tool", "content": EXCERPT}]),
    ],
    ids=["dataclass", "set", "namespace"],
)
def test_leak_unwalked_request_objects_pass_unchecked(guard: LeakGuard, request_: object) -> None:
    assert _ids(guard.scan(request_)) == {ART}


def test_defended_pydantic_request_and_dict_key(guard: LeakGuard) -> None:
    class Message(pydantic.BaseModel):
        role: str
        content: str

    class Req(pydantic.BaseModel):
        messages: list[Message]

    assert _ids(guard.scan(Req(messages=[Message(role="tool", content=EXCERPT)]))) == {ART}
    assert _ids(guard.scan({"messages": [{"role": "user", "content": {EXCERPT: 1}}]})) == {ART}


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


# -- 4. protect() returns before the bytes are protected when another thread protects them --------------------------


def test_leak_concurrent_protect_of_the_same_bytes_returns_early() -> None:
    g = LeakGuard()
    entered, release = threading.Event(), threading.Event()
    real_add = g._index.add

    def slow_add(items: list[tuple[str, bytes]]) -> int:
        if items:  # the first caller's batch: hashing a large artifact takes a while
            entered.set()
            release.wait(10)
        return real_add(items)

    g._index.add = slow_add  # type: ignore[method-assign]
    first = threading.Thread(target=g.protect, args=(ART, SECRET))
    first.start()
    try:
        assert entered.wait(10)
        g.protect(ART, SECRET)  # the second caller: returns at once, trusting the first
        findings = g.scan(_tool(EXCERPT))  # ...and the tool's output is checked right away
    finally:
        release.set()
        first.join(10)
    assert _ids(findings) == {ART}


# -- 5. stream chunks read out of order are protected without their neighbour's tail --------------------------------


def test_leak_stream_read_backwards_misses_the_chunk_edge(vault: Vault, scope: Scope) -> None:
    secret = _text(2 * CHUNK + 500, seed=5).encode()
    art = vault.put(scope, secret, media_type="text/plain", disclosure="sealed").artifact_id
    box = Toolbox(vault)

    @box.tool
    def tail_first(doc: Ref) -> str:
        with doc.open() as stream:
            stream.seek(CHUNK)
            after = stream.read(60)  # loads chunk 1 first
            stream.seek(CHUNK - 60)
            before = stream.read(60)  # then chunk 0
        return (before + after).decode()

    out = box.call_sync("tail_first", {"doc": art}, scope=scope).content
    assert out == secret[CHUNK - 60 : CHUNK + 60].decode()
    assert _ids(box.guard.scan(_tool(str(out)))) == {art}


def test_defended_stream_read_forwards(vault: Vault, scope: Scope) -> None:
    secret = _text(2 * CHUNK + 500, seed=6).encode()
    art = vault.put(scope, secret, media_type="text/plain", disclosure="sealed").artifact_id
    box = Toolbox(vault)

    @box.tool
    def edge(doc: Ref) -> str:
        with doc.open() as stream:
            stream.seek(CHUNK - 60)
            return stream.read(120).decode()

    out = box.call_sync("edge", {"doc": art}, scope=scope).content
    assert _ids(box.guard.scan(_tool(str(out)))) == {art}


# -- 6. logs: bytes rendered into the message itself -----------------------------------------------------------------


_RNG = random.Random(9)
UNICODE_SECRET = "".join(_RNG.choice("abcdefghij klmnop") + ("é" if i % 30 == 0 else "") for i in range(1200))


def _logger(guard: LeakGuard, name: str) -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(LogRedactor(guard))
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger, out


def test_leak_log_message_with_a_bytes_repr() -> None:
    # logger.info(f"response body: {resp.content}"): non-ASCII becomes \\xNN escapes, never decoded.
    g = LeakGuard()
    g.protect("art_u", UNICODE_SECRET)
    data = UNICODE_SECRET[200:800].encode()
    logger, out = _logger(g, "refvault.review.bytes")
    logger.info(f"response body: {data!s}")
    assert str(data)[2:-1] not in out.getvalue()


def test_defended_log_args_extra_and_exception_chain(guard: LeakGuard) -> None:
    logger, out = _logger(guard, "refvault.review.defended")
    logger.info("args %s", EXCERPT.encode())
    logger.info("dict %(a)s", {"a": 1, "b": EXCERPT})
    logger.info("extra", extra={"ctx": {"deep": [(EXCERPT,)]}})
    try:
        try:
            raise ValueError(EXCERPT)
        except ValueError as inner:
            raise RuntimeError("outer") from inner
    except RuntimeError:
        logger.exception("failed")
    text = out.getvalue()
    assert EXCERPT[:64] not in text
    assert "[refvault:art_review]" in text


# -- 7. request shapes, redaction, spans and what a finding shows (defended) ---------------------------------------


def test_defended_provider_shapes(guard: LeakGuard) -> None:
    escaped = json.dumps({"q": EXCERPT.replace(" ", "\n") + "é"})  # JSON escapes (\\n, \\u00e9)
    anthropic = {
        "messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"q": EXCERPT}}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": escaped}]}
                ],
            },
        ]
    }
    assert {f.site for f in guard.scan(anthropic)} == {
        "messages[0].content[0].input.q",
        "messages[1].content[0].content[0].text",
    }
    gemini = {
        "contents": [
            {"role": "user", "parts": [{"inline_data": {"mime_type": "text/plain", "data": B64}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"out": EXCERPT}}}]},
        ]
    }
    assert len(guard.scan(gemini)) == 2
    responses = {"input": [{"type": "function_call_output", "call_id": "c", "output": json.dumps(json.dumps(EXCERPT))}]}
    assert _ids(guard.scan(responses)) == {ART}


def test_defended_redact_leaves_no_protected_window() -> None:
    g = LeakGuard(policy="redact")
    g.protect(ART, SECRET)
    text = "a" + SECRET[10:300] + " middle " + SECRET[500:600] + " end " + B64
    redacted = g.check(_tool(text))
    content = redacted["messages"][1]["content"]  # type: ignore[index]
    for i in range(len(content) - 63):
        assert content[i : i + 64] not in SECRET
    assert B64 not in content
    assert "[refvault:art_review]" in content
    assert repr(g).count(SECRET[:20]) == 0


def test_defended_span_event_attributes(guard: LeakGuard) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span("s") as span:
        span.add_event("e", {"a": ["x", EXCERPT], "b": EXCERPT})
        span.set_attribute("c", EXCERPT)
    (raw,) = exporter.get_finished_spans()
    dumped = redact_span(guard, raw).to_json()
    assert EXCERPT[:64] not in dumped
    assert "[refvault:art_review]" in dumped
