"""Properties of redaction: it never raises on text, placeholders are never detected (redacting an output again
finds nothing), and the JSON Lines fast path agrees with redacting every record."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refvault.content.redactors import REDACTORS, redact_bytes
from refvault.content.redactors.detect import Detector

# Pieces of what the detectors look for, their look-alikes, and the characters around values, so random text
# lands on the edges of every rule (a placeholder followed by digits, a key before a JWT, an address in a URL).
FRAGMENTS = [
    "a@example.com", "x.y+z@mail.example.co.uk", "@", ".", "-", " ", ":", "=", "/", "\n", "\\", '"', "'", "[", "]",
    "+44 20 7946 0958", "(202) 555-0147", "646-555-0123", "020 7946 0958", "4111 1111 1111 1111", "4111111111111111",
    "378282246310005", "10.0.0.1", "192.168.1.254", "fe80::1", "2001:db8::8a2e:370:7334", "::", "12:30:45",
    "DE89 3704 0044 0532 0130 00", "GB82WEST12345698765432", "2026-11-03", "1.2.3.4", "0", "9", "12345678",
    "AKIAIOSFODNN7EXAMPLE", "ghp_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5", "xoxb-123456789012-1234567890123-AbCdEf",
    "sk_live_AbCdEf1234567890GhIjKlMn", "AIzaSyA1234567890abcdefghijklmnopqrstuv", "glpat-AbCdEf1234567890GhIj",
    "sk-proj-AbCdEf1234567890GhIjKlMnOpQr", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9",
    "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEA", "password", "token",
    "api_key", "clientSecret", "Bearer ", "--password ", "Zx9Qw8Er7Ty6Ui5Op4As3Df2", "hunter2hunter2", "[EMAIL_1]",
    "[SECRET_2]", "[PHONE_1]", "_1]", "aws_secret_access_key = ", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "it's a secret phrase", "version ", "firmware 2.4.1.0", "Chrome/1.2.3.4", "\ud7ff", "\u00e9", "\t", "\r",
]  # fmt: skip
texts = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=6)), max_size=30).map("".join)
redactors = st.sampled_from(sorted(REDACTORS))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts, redactors)
def test_redacting_text_never_raises_and_is_idempotent(text: str, redactor: str) -> None:
    once = redact_bytes(text.encode(), media_type="text/plain", redactor=redactor)
    assert once.bytes_out == len(once.data)
    assert sum(once.matches.values()) >= once.placeholders
    twice = redact_bytes(once.data, media_type="text/plain", redactor=redactor)
    assert twice.matches == {}, (text, once.data)
    assert twice.data == once.data


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), redactors)
def test_any_text_is_redacted_without_error(text: str, redactor: str) -> None:
    out = redact_bytes(text.encode(), media_type="text/plain", redactor=redactor)
    assert redact_bytes(out.data, media_type="text/plain", redactor=redactor).matches == {}


keys = st.sampled_from(
    [
        "msg", "email", "password", "client_secret", "tokens", "auth", "note", "n", "apiKey", "api.key", "version",
        "password (old)", "p\u00e4ssword", "token_type", "X-Api-Key", "Authorization", "build",
    ]
)  # fmt: skip
leaves = st.one_of(texts, st.integers(), st.sampled_from([4111111111111111, 378282246310005, True, None, 1.5]))
values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3))
records = st.dictionaries(keys, values, max_size=4)
lines = st.one_of(
    records.map(json.dumps),
    records.map(lambda r: json.dumps(r, ensure_ascii=True).replace("@", "\\u0040")),
    texts.map(lambda t: t.replace("\n", " ")),
    st.just(""),
    st.just("  \r"),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(lines, max_size=8), redactors)
def test_the_json_lines_fast_path_agrees_with_redacting_every_record(rows: list[str], redactor: str) -> None:
    data = "\n".join(rows).encode()
    fast = redact_bytes(data, media_type="application/x-ndjson", redactor=redactor)
    original = Detector.hit_lines
    try:
        # every line marked, with the empty needle (in every string): every string of every record is redacted
        Detector.hit_lines = lambda self, text, starts: {i: {""} for i in range(len(starts))}  # type: ignore[method-assign]
        slow = redact_bytes(data, media_type="application/x-ndjson", redactor=redactor)
    finally:
        Detector.hit_lines = original  # type: ignore[method-assign]
    assert fast == slow
    assert fast.data.count(b"\n") == data.count(b"\n")
    for before, after in zip(data.split(b"\n"), fast.data.split(b"\n"), strict=True):
        try:
            json.loads(before)
        except ValueError:
            continue
        json.loads(after)  # a record stays a record
