"""Log messages, span events and redaction leave no protected window behind.

Tests named ``test_leak_*`` pin a gap that was found and closed; ``test_defended_*`` pin attacks the guard already
stopped when they were written.
"""

from __future__ import annotations

import io
import logging
import random

import pytest

from refvault.guard import LeakGuard
from refvault.guard.hooks import LogRedactor, redact_span
from tests.guard.protected import ART, B64, EXCERPT, SECRET, _tool


@pytest.fixture(scope="module")
def guard() -> LeakGuard:
    g = LeakGuard(min_match=64)
    g.protect(ART, SECRET)
    return g


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
