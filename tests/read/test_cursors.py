"""Signed cursors: the tamper matrix, expiry, key rotation with grace, binding, secrecy and the key file."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import multiprocessing
import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refvault import read
from refvault.errors import InvalidArgument, InvalidCursor, StorageError
from refvault.read.cursors import (
    BINDING_KEYS,
    MAX_TOKEN_CHARS,
    CursorKey,
    KeyRing,
    bind,
    check,
    digest,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
BINDING = {"artifact": "art_1@sha256:" + "a" * 64, "query": digest({"where": None}), "caller": digest(["t", "u", "s"])}


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def reason(ring: KeyRing, token: object, now: datetime = T0) -> str:
    with pytest.raises(InvalidCursor) as info:
        ring.open(token, now=now)
    return info.value.reason


def check_reason(ring: KeyRing, token: object, binding: dict[str, Any], now: datetime = T0) -> str:
    with pytest.raises(InvalidCursor) as info:
        check(ring, token, now=now, binding=binding)
    return info.value.reason


def secret_forms(secret: bytes) -> list[str]:
    return [
        secret.hex(),
        secret.hex().upper(),
        base64.b64encode(secret).decode(),
        base64.urlsafe_b64encode(secret).decode().rstrip("="),
        base64.b64encode(secret).decode().rstrip("="),
        repr(secret)[2:-1],
    ]


def assert_no_secret(text: str, ring_or_keys: KeyRing | list[CursorKey]) -> None:
    keys = ring_or_keys.keys if isinstance(ring_or_keys, KeyRing) else ring_or_keys
    for key in keys:
        for form in secret_forms(key.secret):
            assert form not in text


@pytest.fixture
def ring() -> KeyRing:
    return KeyRing.generate(now=T0)


# -- round trip and format ---------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(payload=st.dictionaries(st.text(max_size=10), json_values, max_size=5))
def test_round_trip_of_any_json_payload(payload: dict[str, Any]) -> None:
    ring = KeyRing.generate(now=T0)
    token = ring.sign(payload, now=T0, ttl=HOUR)
    assert ring.open(token, now=T0) == payload
    assert ring.open(token, now=T0 + HOUR - timedelta(seconds=1)) == payload


def test_token_format_is_prefix_body_mac(ring: KeyRing) -> None:
    token = ring.sign({"pos": {"i": 7}, "s": "é"}, now=T0, ttl=HOUR)
    assert token.isascii()
    assert "=" not in token
    prefix, body, mac = token.split(".")
    assert prefix == "rvc1"
    raw = unb64url(body)
    assert json.loads(raw) == {
        "exp": int(T0.timestamp()) + 3600,
        "kid": ring.current.key_id,
        "p": {"pos": {"i": 7}, "s": "é"},
    }
    assert raw == json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":")).encode()
    expected = hmac.new(ring.current.secret, f"rvc1.{body}".encode(), hashlib.sha256).digest()
    assert unb64url(mac) == expected
    assert len(mac) == 43


def test_signing_is_deterministic_and_payload_dependent(ring: KeyRing) -> None:
    assert ring.sign({"a": 1}, now=T0, ttl=HOUR) == ring.sign({"a": 1}, now=T0, ttl=HOUR)
    assert ring.sign({"a": 1}, now=T0, ttl=HOUR) != ring.sign({"a": 2}, now=T0, ttl=HOUR)
    other = KeyRing.generate(now=T0)
    assert ring.sign({"a": 1}, now=T0, ttl=HOUR) != other.sign({"a": 1}, now=T0, ttl=HOUR)


# -- the tamper matrix --------------------------------------------------------------------------------------------


def test_every_single_character_alteration_is_refused(ring: KeyRing) -> None:
    token = ring.sign({}, now=T0, ttl=HOUR)
    replacements = [*B64URL, ".", "=", "+", "/", " ", "é", "\x00"]
    tried = 0
    for i, original in enumerate(token):
        for c in replacements:
            if c == original:
                continue
            altered = token[:i] + c + token[i + 1 :]
            with pytest.raises(InvalidCursor):
                ring.open(altered, now=T0)
            tried += 1
    assert tried > 60 * len(token)
    assert ring.open(token, now=T0) == {}


@settings(max_examples=300, deadline=None)
@given(
    payload=st.dictionaries(st.text(max_size=6), json_values, max_size=3),
    where=st.floats(min_value=0, max_value=1, exclude_max=True),
    replacement=st.sampled_from(B64URL),
)
def test_random_alterations_of_random_tokens_are_refused(
    payload: dict[str, Any], where: float, replacement: str
) -> None:
    ring = KeyRing.generate(now=T0)
    token = ring.sign(payload, now=T0, ttl=HOUR)
    i = math.floor(where * len(token))
    if token[i] == replacement:
        replacement = "A" if replacement != "A" else "B"
    with pytest.raises(InvalidCursor):
        ring.open(token[:i] + replacement + token[i + 1 :], now=T0)


def test_unused_trailing_bits_of_the_mac_cannot_be_changed(ring: KeyRing) -> None:
    token = ring.sign({"x": 1}, now=T0, ttl=HOUR)
    last = token[-1]
    # 43 characters carry 258 bits for 256: the two low bits of the last character are padding.
    siblings = [c for c in B64URL if c != last and B64URL.index(c) >> 2 == B64URL.index(last) >> 2]
    assert len(siblings) == 3
    for c in siblings:
        altered = token[:-1] + c
        assert unb64url(altered.split(".")[2]) == unb64url(token.split(".")[2])  # same bytes, other spelling
        assert reason(ring, altered) == "malformed"


def test_truncation_extension_insertion_and_deletion_are_refused(ring: KeyRing) -> None:
    token = ring.sign({"pos": [1, "two"]}, now=T0, ttl=HOUR)
    for k in range(len(token)):
        with pytest.raises(InvalidCursor):
            ring.open(token[:k], now=T0)
        with pytest.raises(InvalidCursor):
            ring.open(token[:k] + token[k + 1 :], now=T0)
        with pytest.raises(InvalidCursor):
            ring.open(token[:k] + "A" + token[k:], now=T0)
    for suffix in [*B64URL, "=", "==", ".", ".x", " ", "\n"]:
        with pytest.raises(InvalidCursor):
            ring.open(token + suffix, now=T0)
    for prefix in [" ", "x", "rvc1."]:
        with pytest.raises(InvalidCursor):
            ring.open(prefix + token, now=T0)
    assert reason(ring, token + "\n") == "malformed"


def test_payload_swapped_between_two_valid_tokens_fails_the_signature(ring: KeyRing) -> None:
    a = ring.sign({"pos": 1}, now=T0, ttl=HOUR)
    b = ring.sign({"pos": 1000}, now=T0, ttl=HOUR)
    pa, ba, ma = a.split(".")
    pb, bb, mb = b.split(".")
    assert reason(ring, f"{pa}.{bb}.{ma}") == "signature"
    assert reason(ring, f"{pb}.{ba}.{mb}") == "signature"


def test_a_forged_payload_with_a_recomputed_mac_under_a_guessed_key_fails(ring: KeyRing) -> None:
    body = b64url(
        json.dumps({"exp": 2**40, "kid": ring.current.key_id, "p": {"pos": 5}}, separators=(",", ":")).encode()
    )
    mac = b64url(hmac.new(b"\0" * 32, f"rvc1.{body}".encode(), hashlib.sha256).digest())
    assert reason(ring, f"rvc1.{body}.{mac}") == "signature"


def test_mac_is_checked_before_the_body_json_is_parsed(ring: KeyRing) -> None:
    kid = ring.current.key_id
    fake_mac = b64url(b"\1" * 32)
    # Deeply nested (would overflow a recursive parser) and broken JSON after a valid prefix: signature, not a crash.
    nested = b'{"exp":9999999999,"kid":"' + kid.encode() + b'","p":{"a":' + b"[" * 3000 + b"]" * 3000 + b"}}"
    broken = b'{"exp":9999999999,"kid":"' + kid.encode() + b'","p":{"a":}'
    assert reason(ring, f"rvc1.{b64url(nested)}.{fake_mac}") == "signature"
    assert reason(ring, f"rvc1.{b64url(broken)}.{fake_mac}") == "signature"


def test_wrong_kid_in_the_ring_fails_the_signature() -> None:
    old = KeyRing.generate(now=T0)
    ring = old.rotate(now=T0 + timedelta(minutes=1))
    token = ring.sign({"pos": 1}, now=T0, ttl=HOUR)
    prefix, body, mac = token.split(".")
    data = json.loads(unb64url(body))
    data["kid"] = old.current.key_id  # a key the ring holds, but not the one that signed
    relabelled = b64url(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())
    assert reason(ring, f"{prefix}.{relabelled}.{mac}", T0 + timedelta(minutes=2)) == "signature"


def test_unknown_kid_is_refused(ring: KeyRing) -> None:
    stranger = KeyRing.generate(now=T0)
    assert reason(ring, stranger.sign({"pos": 1}, now=T0, ttl=HOUR)) == "unknown_key"
    token = ring.sign({"pos": 1}, now=T0, ttl=HOUR)
    prefix, body, mac = token.split(".")
    data = json.loads(unb64url(body))
    data["kid"] = "zzzzzzzz"
    relabelled = b64url(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())
    assert reason(ring, f"{prefix}.{relabelled}.{mac}") == "unknown_key"


@pytest.mark.parametrize(
    "token",
    [None, 0, 1.5, b"rvc1.a.b", bytearray(b"x"), ["rvc1"], {"t": "rvc1"}, object(), True],
)
def test_non_string_tokens_are_malformed(ring: KeyRing, token: object) -> None:
    assert reason(ring, token) == "malformed"


@pytest.mark.parametrize(
    "token",
    ["", "rvc1", "rvc1.", "rvc1..", "rvc2.e30.AAAA", "rvc1.e30", "rvc1.e30.e30.e30", "RVC1.e30.x", "rvc1.!!!.x", "é"],
)
def test_garbage_strings_are_malformed(ring: KeyRing, token: str) -> None:
    assert reason(ring, token) == "malformed"


def test_huge_tokens_are_refused_quickly(ring: KeyRing) -> None:
    token = ring.sign({}, now=T0, ttl=HOUR)
    assert reason(ring, "rvc1." + "A" * 50_000_000 + ".x") == "malformed"
    assert reason(ring, token + "A" * (MAX_TOKEN_CHARS + 1)) == "malformed"
    with pytest.raises(InvalidCursor, match=str(MAX_TOKEN_CHARS)):
        ring.open("x" * (MAX_TOKEN_CHARS + 1), now=T0)


def test_sign_refuses_a_token_longer_than_open_accepts(ring: KeyRing) -> None:
    with pytest.raises(InvalidArgument, match="longer than"):
        ring.sign({"big": "x" * MAX_TOKEN_CHARS}, now=T0, ttl=HOUR)
    fits = ring.sign({"big": "x" * (MAX_TOKEN_CHARS // 2)}, now=T0, ttl=HOUR)
    assert len(fits) <= MAX_TOKEN_CHARS
    assert ring.open(fits, now=T0) == {"big": "x" * (MAX_TOKEN_CHARS // 2)}


# -- expiry -------------------------------------------------------------------------------------------------------


def test_expiry_is_exclusive_at_exp(ring: KeyRing) -> None:
    token = ring.sign({"pos": 1}, now=T0, ttl=timedelta(seconds=60))
    assert ring.open(token, now=T0 + timedelta(seconds=59)) == {"pos": 1}
    assert ring.open(token, now=T0 + timedelta(seconds=59, microseconds=999_999)) == {"pos": 1}
    assert reason(ring, token, T0 + timedelta(seconds=60)) == "expired"
    assert reason(ring, token, T0 + timedelta(days=400)) == "expired"


def test_expiry_with_a_fractional_now_rounds_down(ring: KeyRing) -> None:
    start = T0 + timedelta(microseconds=700_000)
    token = ring.sign({}, now=start, ttl=timedelta(seconds=10))
    exp = json.loads(unb64url(token.split(".")[1]))["exp"]
    assert exp == int(T0.timestamp()) + 10
    assert ring.open(token, now=T0 + timedelta(seconds=9, microseconds=999_999)) == {}
    assert reason(ring, token, T0 + timedelta(seconds=10)) == "expired"


def test_expired_message_names_the_time(ring: KeyRing) -> None:
    token = ring.sign({}, now=T0, ttl=HOUR)
    with pytest.raises(InvalidCursor, match="expired at 2026-03-01T13:00:00"):
        ring.open(token, now=T0 + 2 * HOUR)


def test_other_time_zones_are_the_same_instant(ring: KeyRing) -> None:
    from datetime import timezone

    plus_two = timezone(timedelta(hours=2))
    token = ring.sign({}, now=T0.astimezone(plus_two), ttl=HOUR)
    assert ring.open(token, now=T0 + HOUR - timedelta(seconds=1)) == {}
    assert reason(ring, token, (T0 + HOUR).astimezone(plus_two)) == "expired"


# -- rotation -----------------------------------------------------------------------------------------------------


def test_rotation_keeps_old_cursors_within_grace_only() -> None:
    grace = timedelta(hours=24)
    old = KeyRing.generate(now=T0, grace=grace)
    token = old.sign({"pos": 3}, now=T0, ttl=timedelta(days=30))
    t1 = T0 + HOUR
    ring = old.rotate(now=t1)
    assert ring.current.key_id != old.current.key_id
    assert [k.key_id for k in ring.keys] == [old.current.key_id, ring.current.key_id]
    assert ring.keys[0].retired_at == t1
    assert ring.keys[0].secret == old.current.secret
    assert ring.open(token, now=t1) == {"pos": 3}
    assert ring.open(token, now=t1 + grace - timedelta(seconds=1)) == {"pos": 3}
    assert reason(ring, token, t1 + grace) == "key_retired"
    assert reason(ring, token, t1 + 10 * grace) == "key_retired"
    fresh = ring.sign({"pos": 4}, now=t1, ttl=timedelta(days=30))
    assert json.loads(unb64url(fresh.split(".")[1]))["kid"] == ring.current.key_id
    assert ring.open(fresh, now=t1 + 10 * grace) == {"pos": 4}
    assert reason(old, fresh, t1) == "unknown_key"  # the old ring never knew the new key


def test_rotate_twice_keeps_keys_in_grace_and_drops_expired_ones() -> None:
    grace = timedelta(hours=2)
    r1 = KeyRing.generate(now=T0, grace=grace)
    tok1 = r1.sign({"k": 1}, now=T0, ttl=timedelta(days=1))
    r2 = r1.rotate(now=T0 + HOUR)
    tok2 = r2.sign({"k": 2}, now=T0 + HOUR, ttl=timedelta(days=1))
    r3 = r2.rotate(now=T0 + 2 * HOUR)  # r1's key retired at +1h, still in grace (until +3h)
    assert len(r3.keys) == 3
    assert len({k.key_id for k in r3.keys}) == 3
    assert r3.open(tok1, now=T0 + 2 * HOUR) == {"k": 1}
    assert r3.open(tok2, now=T0 + 2 * HOUR) == {"k": 2}
    assert reason(r3, tok1, T0 + 3 * HOUR) == "key_retired"
    assert r3.open(tok2, now=T0 + 3 * HOUR) == {"k": 2}
    assert reason(r3, tok2, T0 + 4 * HOUR) == "key_retired"
    r4 = r3.rotate(now=T0 + 3 * HOUR)  # r1's key is now past grace: dropped
    assert r1.current.key_id not in {k.key_id for k in r4.keys}
    assert len(r4.keys) == 3
    assert reason(r4, tok1, T0 + 3 * HOUR) == "unknown_key"
    assert r4.open(tok2, now=T0 + 3 * HOUR) == {"k": 2}
    assert sum(1 for k in r4.keys if k.retired_at is None) == 1


def test_zero_grace_refuses_old_cursors_at_rotation() -> None:
    ring = KeyRing.generate(now=T0, grace=timedelta(0))
    token = ring.sign({}, now=T0, ttl=HOUR)
    rotated = ring.rotate(now=T0 + timedelta(seconds=1))
    assert reason(rotated, token, T0 + timedelta(seconds=1)) == "key_retired"


def test_signature_is_checked_before_key_retirement() -> None:
    ring = KeyRing.generate(now=T0, grace=timedelta(0))
    token = ring.sign({}, now=T0, ttl=HOUR)
    rotated = ring.rotate(now=T0)
    prefix, body, _mac = token.split(".")
    forged = b64url(bytes(32))
    assert reason(rotated, f"{prefix}.{body}.{forged}") == "signature"
    assert reason(rotated, token) == "key_retired"


# -- binding ------------------------------------------------------------------------------------------------------


def test_bind_and_check_round_trip(ring: KeyRing) -> None:
    position = {"after": ["2026-01-01", None, 41], "index": 41}
    token = bind(ring, now=T0, ttl=HOUR, binding=BINDING, position=position)
    assert check(ring, token, now=T0, binding=dict(BINDING)) == position


@pytest.mark.parametrize("changed", BINDING_KEYS)
def test_each_binding_mismatch_gives_its_reason(ring: KeyRing, changed: str) -> None:
    token = bind(ring, now=T0, ttl=HOUR, binding=BINDING, position={"i": 1})
    other = {**BINDING, changed: BINDING[changed] + "x"}
    with pytest.raises(InvalidCursor) as info:
        check(ring, token, now=T0, binding=other)
    assert info.value.reason == changed
    message = str(info.value)
    assert BINDING[changed] not in message
    assert other[changed] not in message
    assert {"artifact": "artifact", "query": "selection", "caller": "caller"}[changed] in message


def test_binding_values_are_not_readable_from_the_token(ring: KeyRing) -> None:
    token = bind(ring, now=T0, ttl=HOUR, binding=BINDING, position={"i": 1})
    body = unb64url(token.split(".")[1]).decode()
    for value in BINDING.values():
        assert value not in body


def test_binding_check_order_artifact_query_caller(ring: KeyRing) -> None:
    token = bind(ring, now=T0, ttl=HOUR, binding=BINDING, position={"i": 1})
    everything = {k: v + "!" for k, v in BINDING.items()}
    assert check_reason(ring, token, everything) == "artifact"
    two = {**BINDING, "query": "q2", "caller": "c2"}
    assert check_reason(ring, token, two) == "query"


def test_signature_and_expiry_come_before_binding(ring: KeyRing) -> None:
    token = bind(ring, now=T0, ttl=HOUR, binding=BINDING, position={"i": 1})
    wrong = {k: v + "!" for k, v in BINDING.items()}
    with pytest.raises(InvalidCursor) as info:
        check(ring, token, now=T0 + HOUR, binding=wrong)
    assert info.value.reason == "expired"
    prefix, body, _ = token.split(".")
    with pytest.raises(InvalidCursor) as info:
        check(ring, f"{prefix}.{body}.{b64url(bytes(32))}", now=T0, binding=wrong)
    assert info.value.reason == "signature"


def test_binding_values_do_not_collide_across_keys(ring: KeyRing) -> None:
    # the same string moved to another binding key must not verify
    same = {"artifact": "v", "query": "v", "caller": "v"}
    token = bind(ring, now=T0, ttl=HOUR, binding=same, position={})
    assert check(ring, token, now=T0, binding=same) == {}
    assert check_reason(ring, token, {**same, "caller": "w"}) == "caller"


def test_a_plain_signed_token_is_not_a_query_cursor(ring: KeyRing) -> None:
    token = ring.sign({"pos": {"i": 1}}, now=T0, ttl=HOUR)
    assert check_reason(ring, token, BINDING) == "malformed"


@pytest.mark.parametrize(
    "binding",
    [{}, {"artifact": "a", "query": "q"}, {**BINDING, "extra": "x"}, {**BINDING, "query": 5}],
)
def test_bad_bindings_are_programming_errors(ring: KeyRing, binding: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument) as info:
        bind(ring, now=T0, ttl=HOUR, binding=binding, position={})
    assert not isinstance(info.value, InvalidCursor)
    token = bind(ring, now=T0, ttl=HOUR, binding=BINDING, position={})
    with pytest.raises(InvalidArgument):
        check(ring, token, now=T0, binding=binding)


# -- digest -------------------------------------------------------------------------------------------------------


def test_digest_is_canonical_sha256() -> None:
    value = {"b": [1, 2.5, None], "a": {"z": True, "y": "é"}}
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    assert digest(value) == hashlib.sha256(canonical).hexdigest()
    assert digest({"a": {"y": "é", "z": True}, "b": [1, 2.5, None]}) == digest(value)
    assert digest(("t", "u", "s")) == digest(["t", "u", "s"])
    assert digest(["t", "u", "s"]) != digest(["t", "u", "s2"])
    assert digest({"limit": 1}) != digest({"limit": "1"})
    assert len(digest(None)) == 64


@pytest.mark.parametrize("value", [float("nan"), {"x": float("inf")}, {1: "a"}, {"x": object()}, {"x": b"bytes"}])
def test_digest_refuses_non_json(value: object) -> None:
    with pytest.raises(InvalidArgument):
        digest(value)


# -- sign argument checks -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [{"x": float("nan")}, {"x": float("-inf")}, {"x": (1, 2)}, {"x": {1: 2}}, {"x": b"b"}, {"x": {1, 2}}, [1], "s"],
)
def test_sign_refuses_payloads_that_would_not_round_trip(ring: KeyRing, payload: Any) -> None:
    with pytest.raises(InvalidArgument):
        ring.sign(payload, now=T0, ttl=HOUR)


@pytest.mark.parametrize("ttl", [timedelta(0), timedelta(seconds=-5), timedelta(milliseconds=999), 60])
def test_sign_refuses_bad_ttls(ring: KeyRing, ttl: Any) -> None:
    with pytest.raises(InvalidArgument):
        ring.sign({}, now=T0, ttl=ttl)


def test_naive_datetimes_are_refused(ring: KeyRing) -> None:
    naive = datetime(2026, 3, 1, 12, 0)
    token = ring.sign({}, now=T0, ttl=HOUR)
    with pytest.raises(InvalidArgument):
        ring.sign({}, now=naive, ttl=HOUR)
    with pytest.raises(InvalidArgument):
        ring.open(token, now=naive)
    with pytest.raises(InvalidArgument):
        KeyRing.generate(now=naive)
    with pytest.raises(InvalidArgument):
        ring.rotate(now=naive)
    with pytest.raises(InvalidArgument):
        CursorKey("abcd1234", bytes(32), naive)


# -- key and ring construction ------------------------------------------------------------------------------------


def test_key_ring_invariants() -> None:
    a = CursorKey("aaaaaaaa", b"a" * 32, T0)
    b = CursorKey("bbbbbbbb", b"b" * 32, T0)
    retired = CursorKey("cccccccc", b"c" * 32, T0, T0)
    with pytest.raises(InvalidArgument, match="exactly one"):
        KeyRing([a, b])
    with pytest.raises(InvalidArgument, match="exactly one"):
        KeyRing([retired])
    with pytest.raises(InvalidArgument, match="exactly one"):
        KeyRing([])
    with pytest.raises(InvalidArgument, match="unique"):
        KeyRing([a, CursorKey("aaaaaaaa", b"z" * 32, T0, T0)])
    with pytest.raises(InvalidArgument, match="grace"):
        KeyRing([a], grace=timedelta(seconds=-1))
    ring = KeyRing([retired, a])
    assert ring.current is a
    assert ring.grace == timedelta(hours=24)


@pytest.mark.parametrize(
    ("key_id", "secret"),
    [("", b"s" * 32), ("a" * 33, b"s" * 32), ("has space", b"s" * 32), ("abc.def", b"s" * 32), ("ok", b"s" * 31)],
)
def test_cursor_key_validation(key_id: str, secret: bytes) -> None:
    with pytest.raises(InvalidArgument) as info:
        CursorKey(key_id, secret, T0)
    assert secret.decode() not in str(info.value)


def test_cursor_key_is_frozen(ring: KeyRing) -> None:
    with pytest.raises(AttributeError):
        ring.current.secret = b"x" * 32  # type: ignore[misc]


def test_generated_keys_are_fresh() -> None:
    keys = [KeyRing.generate(now=T0).current for _ in range(50)]
    assert len({k.secret for k in keys}) == 50
    assert all(len(k.secret) == 32 and len(k.key_id) == 8 and int(k.key_id, 16) >= 0 for k in keys)


# -- secrecy ------------------------------------------------------------------------------------------------------


def test_repr_and_str_never_show_secrets() -> None:
    ring = KeyRing.generate(now=T0).rotate(now=T0 + HOUR).rotate(now=T0 + 2 * HOUR)
    assert len(ring.keys) == 3
    texts = [repr(ring), str(ring), f"{ring}", repr(ring.keys), str(ring.current), repr(ring.current)]
    for text in texts:
        assert_no_secret(text, ring)
    assert ring.current.key_id in repr(ring)
    assert "secret" not in repr(ring.current)
    assert ring.current.key_id in repr(ring.current)


def test_error_messages_never_show_secrets(ring: KeyRing, tmp_path: Path) -> None:
    messages: list[str] = []
    token = ring.sign({"p": 1}, now=T0, ttl=HOUR)
    altered = token[:-1] + ("A" if token[-1] != "A" else "B")  # a changed last byte (1 MAC in 16 ends in "A")
    for bad in [altered, token + "A", "rvc1.x.y", None, token.replace("rvc1", "rvc2")]:
        try:
            ring.open(bad, now=T0)
        except InvalidCursor as exc:
            messages.append(str(exc))
    try:
        ring.open(token, now=T0 + 2 * HOUR)
    except InvalidCursor as exc:
        messages.append(str(exc))
    text = ring.to_json()
    for broken in [text.replace('"version": 1', '"version": 2'), text[:-5], text.replace("created_at", "made_at")]:
        try:
            KeyRing.from_json(broken)
        except InvalidArgument as exc:
            messages.append(str(exc))
    path = tmp_path / "keys.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, text.replace('"key_id": "', '"key_id": "bad id ').encode())
    os.close(fd)
    with pytest.raises(StorageError) as info:
        KeyRing.load_or_create(path, now=T0)
    messages.append(str(info.value))
    assert len(messages) == 10
    for message in messages:
        assert_no_secret(message, ring)


def test_short_secret_in_file_is_not_echoed(tmp_path: Path) -> None:
    short = b"tiny-secret-value-0123"
    data = {
        "format": "refvault.cursor-keys",
        "version": 1,
        "grace_seconds": 60,
        "keys": [
            {
                "key_id": "k1",
                "secret": base64.b64encode(short).decode(),
                "created_at": T0.isoformat(),
                "retired_at": None,
            }
        ],
    }
    path = tmp_path / "keys.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, json.dumps(data).encode())
    os.close(fd)
    with pytest.raises(StorageError) as info:
        KeyRing.load_or_create(path, now=T0)
    for form in secret_forms(short):
        assert form not in str(info.value)
    assert "secret" in str(info.value)


# -- persisted form -----------------------------------------------------------------------------------------------


def test_to_json_from_json_round_trip() -> None:
    ring = KeyRing.generate(now=T0, grace=timedelta(hours=5, microseconds=250)).rotate(now=T0 + HOUR)
    again = KeyRing.from_json(ring.to_json())
    assert again.keys == ring.keys
    assert again.current == ring.current
    assert again.grace == ring.grace
    assert again.to_json() == ring.to_json()
    token = ring.sign({"x": [1]}, now=T0, ttl=HOUR)
    assert again.open(token, now=T0) == {"x": [1]}
    stored = json.loads(ring.to_json())
    assert base64.b64decode(stored["keys"][0]["secret"]) == ring.keys[0].secret


def _key_entry(**overrides: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "key_id": "k1",
        "secret": base64.b64encode(b"s" * 32).decode(),
        "created_at": T0.isoformat(),
        "retired_at": None,
    }
    entry.update(overrides)
    return entry


def _ring_text(**overrides: Any) -> str:
    data: dict[str, Any] = {"format": "refvault.cursor-keys", "version": 1, "grace_seconds": 60, "keys": [_key_entry()]}
    data.update(overrides)
    return json.dumps(data)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[]",
        "null",
        '{"format": "refvault.cursor-keys"}',
        _ring_text(format="other"),
        _ring_text(version=2),
        _ring_text(version=True),
        _ring_text(grace_seconds=-1),
        _ring_text(grace_seconds="60"),
        _ring_text(grace_seconds=True),
        _ring_text(keys=[]),
        _ring_text(keys={}),
        _ring_text(keys=["k1"]),
        _ring_text(keys=[_key_entry(secret="***not base64***")]),
        _ring_text(keys=[_key_entry(secret=5)]),
        _ring_text(keys=[_key_entry(secret=base64.b64encode(b"s" * 31).decode())]),
        _ring_text(keys=[_key_entry(key_id=7)]),
        _ring_text(keys=[_key_entry(created_at="yesterday")]),
        _ring_text(keys=[_key_entry(created_at="2026-03-01T12:00:00")]),
        _ring_text(keys=[_key_entry(retired_at=T0.isoformat())]),
        _ring_text(keys=[_key_entry(), _key_entry()]),
        _ring_text(keys=[_key_entry(), _key_entry(key_id="k2")]),
        _ring_text(keys=[{**_key_entry(), "extra": 1}]),
        "[" * 100_000,
    ],
)
def test_from_json_refuses_malformed_rings(text: str) -> None:
    with pytest.raises(InvalidArgument):
        KeyRing.from_json(text)


def test_from_json_accepts_the_minimal_form() -> None:
    ring = KeyRing.from_json(_ring_text())
    assert ring.current.key_id == "k1"
    assert ring.grace == timedelta(seconds=60)


# -- the key file -------------------------------------------------------------------------------------------------


def test_load_or_create_creates_a_private_file_once(tmp_path: Path) -> None:
    path = tmp_path / "cursor-keys.json"
    ring = KeyRing.load_or_create(path, now=T0)
    info = os.lstat(path)
    assert stat.S_ISREG(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert path.read_text() == ring.to_json()
    again = KeyRing.load_or_create(path, now=T0 + timedelta(days=3))
    assert again.to_json() == ring.to_json()
    token = ring.sign({"i": 1}, now=T0, ttl=HOUR)
    assert again.open(token, now=T0) == {"i": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cursor-keys.json"]  # no temporaries left


def test_load_or_create_is_private_despite_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        KeyRing.load_or_create(tmp_path / "k.json", now=T0)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.lstat(tmp_path / "k.json").st_mode) == 0o600


def test_load_or_create_refuses_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    KeyRing.generate(now=T0).save(real)
    before = real.read_text()
    link = tmp_path / "keys.json"
    link.symlink_to(real)
    with pytest.raises(StorageError, match="symbolic link"):
        KeyRing.load_or_create(link, now=T0)
    assert real.read_text() == before
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "nowhere.json")
    with pytest.raises(StorageError):
        KeyRing.load_or_create(dangling, now=T0)
    assert not (tmp_path / "nowhere.json").exists()
    assert os.path.islink(dangling)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling.json", "keys.json", "real.json"]


def test_load_or_create_refuses_non_regular_and_shared_files(tmp_path: Path) -> None:
    directory = tmp_path / "dir.json"
    directory.mkdir()
    with pytest.raises(StorageError, match="regular file"):
        KeyRing.load_or_create(directory, now=T0)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(StorageError, match="regular file"):
        KeyRing.load_or_create(fifo, now=T0)
    shared = tmp_path / "shared.json"
    KeyRing.generate(now=T0).save(shared)
    os.chmod(shared, 0o644)
    with pytest.raises(StorageError, match="0600"):
        KeyRing.load_or_create(shared, now=T0)


@pytest.mark.parametrize(
    "content",
    [b"", b"garbage", b"\xff\xfe\x00", b'{"format": "refvault.cursor-keys", "version": 1}', b"x" * (2 << 20)],
)
def test_load_or_create_refuses_a_malformed_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "keys.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, content)
    os.close(fd)
    with pytest.raises(StorageError):
        KeyRing.load_or_create(path, now=T0)
    assert path.read_bytes() == content  # never "repaired" by overwriting


def test_load_or_create_in_a_missing_directory_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError):
        KeyRing.load_or_create(tmp_path / "missing" / "keys.json", now=T0)


def test_save_replaces_atomically_and_privately(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    ring = KeyRing.load_or_create(path, now=T0)
    rotated = ring.rotate(now=T0 + HOUR)
    os.chmod(path, 0o600)
    inode = os.lstat(path).st_ino
    rotated.save(path)
    assert os.lstat(path).st_ino != inode  # a new file renamed into place, not rewritten
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    loaded = KeyRing.load_or_create(path, now=T0 + HOUR)
    assert loaded.to_json() == rotated.to_json()
    assert loaded.current.key_id == rotated.current.key_id != ring.current.key_id
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys.json"]


def test_save_over_a_symlink_replaces_the_link_not_its_target(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("do not touch")
    link = tmp_path / "keys.json"
    link.symlink_to(target)
    ring = KeyRing.generate(now=T0)
    ring.save(link)
    assert target.read_text() == "do not touch"
    assert not link.is_symlink()
    assert KeyRing.load_or_create(link, now=T0).to_json() == ring.to_json()


def _race(path: str, barrier: Any, out: Any) -> None:
    barrier.wait()
    ring = KeyRing.load_or_create(Path(path), now=datetime.now(UTC))
    out.put(ring.to_json())


@pytest.mark.parametrize("round_", range(3))
def test_concurrent_creation_yields_one_ring(tmp_path: Path, round_: int) -> None:
    ctx = multiprocessing.get_context("spawn")
    path = tmp_path / f"keys-{round_}.json"
    workers = 8
    barrier = ctx.Barrier(workers)
    out = ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(path), barrier, out)) for _ in range(workers)]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=120) for _ in range(workers)]
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0
    assert len(results) == workers
    assert len(set(results)) == 1
    assert path.read_text() == results[0]
    assert len(KeyRing.from_json(results[0]).keys) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_read_package_exports_the_key_classes() -> None:
    assert read.KeyRing is KeyRing
    assert read.CursorKey is CursorKey
