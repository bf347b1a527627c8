"""``refvault.content.redactors``: typed consistent placeholders, exact counts, structure kept, field paths, and typed
refusals that echo nothing of the input.

The labelled corpus (recall, false positives) is in ``test_redaction_corpus.py``; the properties (never raises,
idempotent, the JSON Lines fast path agrees with redacting every record) in ``test_redaction_properties.py``.
"""

from __future__ import annotations

import json

import pytest

from refvault.content.redactors import REDACTORS, RedactionOutcome, redact_bytes
from refvault.errors import InvalidArgument

JSONL = "application/x-ndjson"
CANARY = "CANARY-7f3a9c"


def text(data: str, redactor: str = "pii.v1") -> RedactionOutcome:
    return redact_bytes(data.encode(), media_type="text/plain", redactor=redactor)


def lines(data: str, redactor: str = "pii.v1", **kw: object) -> RedactionOutcome:
    return redact_bytes(data.encode(), media_type=JSONL, redactor=redactor, **kw)  # type: ignore[arg-type]


# -- the redactors --------------------------------------------------------------------------------------------------


def test_the_built_in_redactors() -> None:
    assert set(REDACTORS) == {"pii.v1", "secrets.v1"}
    pii, secrets = REDACTORS["pii.v1"], REDACTORS["secrets.v1"]
    assert (pii.name, pii.transformation, pii.version, pii.declassifies) == ("pii.v1", "redact:pii", "1", {"pii"})
    assert (secrets.transformation, secrets.declassifies) == ("redact:secrets", {"secret"})
    assert pii.kinds == ("email", "phone", "ipv4", "ipv6", "card", "iban")
    assert {"aws_access_key", "jwt", "private_key", "high_entropy"} <= set(secrets.kinds)
    with pytest.raises(TypeError):
        REDACTORS["x"] = pii  # type: ignore[index]


# -- text -------------------------------------------------------------------------------------------------------------


def test_placeholders_are_typed_and_consistent_within_an_artifact() -> None:
    out = text("a@example.com wrote to b@example.org, then a@example.com again; call +44 20 7946 0958")
    assert out.data == b"[EMAIL_1] wrote to [EMAIL_2], then [EMAIL_1] again; call [PHONE_1]"
    assert out.matches == {"email": 3, "phone": 1}  # occurrences, not distinct values
    assert out.placeholders == 3


def test_counts_of_a_small_text_are_exact() -> None:
    source = "card 4111 1111 1111 1111, ip 10.1.2.3 and 2001:db8::7, iban DE89 3704 0044 0532 0130 00.\n"
    out = text(source)
    assert out.data == b"card [CARD_1], ip [IPV4_1] and [IPV6_1], iban [IBAN_1].\n"
    assert (out.bytes_in, out.bytes_out) == (len(source), len(out.data))
    assert (out.records_in, out.records_out, out.unparseable_records) == (None, None, 0)
    assert out.matches == {"card": 1, "ipv4": 1, "ipv6": 1, "iban": 1}
    assert out.placeholders == 4


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("jane.doe+billing@mail.example.co.uk", "EMAIL"),
        ("+1 (202) 555-0147", "PHONE"),
        ("(312) 555-0199", "PHONE"),
        ("646-555-0123", "PHONE"),
        ("212.555.0147", "PHONE"),
        ("020 7946 0958", "PHONE"),
        ("030/1234567", "PHONE"),
        ("+4915112345678", "PHONE"),
        ("+49 (0)30 1234 5678", "PHONE"),
        ("192.168.0.17", "IPV4"),
        ("fe80::1ff:fe23:4567:890a", "IPV6"),
        ("::ffff:192.0.2.128", "IPV6"),
        ("2001:0db8:0000:0000:0000:ff00:0042:8329", "IPV6"),
        ("4111111111111111", "CARD"),
        ("5500-0000-0000-0004", "CARD"),
        ("3782 822463 10005", "CARD"),
        ("GB82WEST12345698765432", "IBAN"),
        ("NL91 ABNA 0417 1643 00", "IBAN"),
    ],
)
def test_pii_kinds(value: str, kind: str) -> None:
    assert text(f"see {value} here").data == f"see [{kind}_1] here".encode()
    assert text(value).data == f"[{kind}_1]".encode()


@pytest.mark.parametrize(
    "clean",
    [
        "2026-11-03T12:30:45.123Z",
        "at 12:30:45 on 03/11/2026 and 03.11.2026",
        "version 3.12.1 and firmware 2.4.1.0 and Chrome/124.0.6367.91",
        "id 550e8400-e29b-41d4-a716-446655440000",
        "sha256 3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "epoch 1717171717 and 1717171717123, order 12345678",
        "total $1,234.56 for 3 items",
        "listening on 0.0.0.0:8080 and 127.0.0.1, ::1",
        "std::vector<int> and a::b, mac 00:1a:2b:3c:4d:5e",
        "4111 1111 1111 1112 (bad check digit), DE89 3704 0044 0532 0130 01 (bad IBAN)",
        "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16",
        "logo.png and icon@2x.png",
    ],
)
def test_pii_leaves_look_alikes(clean: str) -> None:
    out = text(clean)
    assert out.data == clean.encode()
    assert out.matches == {}


@pytest.mark.parametrize(
    ("source", "redacted", "kind"),
    [
        ("AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE", "AWS_ACCESS_KEY_ID=[AWS_ACCESS_KEY_1]", "aws_access_key"),
        (
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "aws_secret_access_key = [AWS_SECRET_KEY_1]",
            "aws_secret_key",
        ),
        ("push with ghp_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5", "push with [GITHUB_TOKEN_1]", "github_token"),
        ("xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "[SLACK_TOKEN_1]", "slack_token"),
        ("key sk_live_AbCdEf1234567890GhIjKlMn", "key [STRIPE_KEY_1]", "stripe_key"),
        ("AIzaSyA1234567890abcdefghijklmnopqrstuv", "[GOOGLE_API_KEY_1]", "google_api_key"),
        ("OPENAI=sk-proj-AbCdEf1234567890GhIjKlMnOpQr", "OPENAI=[OPENAI_KEY_1]", "openai_key"),
        ("glpat-AbCdEf1234567890GhIj", "[GITLAB_TOKEN_1]", "gitlab_token"),
        (
            "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "Authorization: Bearer [JWT_1]",
            "jwt",
        ),
        (
            "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB4bX2\nAwEHoUQDQgAE\n-----END EC PRIVATE KEY-----\nok",
            "[PRIVATE_KEY_1]\nok",
            "private_key",
        ),
        ("client_secret=Zx9Qw8Er7Ty6Ui5Op4As3Df2", "client_secret=[SECRET_1]", "high_entropy"),
        ('"apiKey": "Zx9Qw8Er7Ty6Ui5Op4As3Df2"', '"apiKey": "[SECRET_1]"', "high_entropy"),
        ("DB_PASSWORD='correct horse'", "DB_PASSWORD='[SECRET_1]'", "high_entropy"),
        ("run --db-password hunter2hunter2 now", "run --db-password [SECRET_1] now", "high_entropy"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZDEyMw==", "Authorization: Basic [SECRET_1]", "high_entropy"),
    ],
)
def test_secret_kinds(source: str, redacted: str, kind: str) -> None:
    out = text(source, "secrets.v1")
    assert out.data == redacted.encode()
    assert out.matches == {kind: 1}


@pytest.mark.parametrize(
    "clean",
    [
        "token_type: Bearer, auth_method=oidc, author: Jane Doe, max_tokens=100000",
        "password: ********, DB_PASSWORD=${DB_PASSWORD}, secret: {{ vault_secret }}",
        "api_key=short, secret=aaaaaaaaaaaaaaaaaaaa (no entropy), token_url=https://auth.example/token",
        "the token expired and the password reset link was sent",
        "commit 3b0c44298fc1c149afbf4c8996fb92427ae41e46, image iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAA",
        "sk-this-is-not-a-key-at-all and eyJnot.a.jwt",
    ],
)
def test_secrets_leave_look_alikes(clean: str) -> None:
    out = text(clean, "secrets.v1")
    assert out.data == clean.encode()
    assert out.matches == {}


def test_placeholders_are_never_detected() -> None:
    placeholders = "[EMAIL_1] [PHONE_12] [IPV4_3] [IPV6_1] [CARD_2] [IBAN_1] [SECRET_1] [AWS_ACCESS_KEY_1] [JWT_9]"
    for redactor in REDACTORS:
        assert text(placeholders, redactor).matches == {}
        assert text(f"password={placeholders.split()[6]} token: [SECRET_2]", redactor).matches == {}


def test_an_unchanged_text_is_returned_as_given() -> None:
    source = "nothing to see here\r\n\twith odd whitespace \u00e9\n"
    out = text(source)
    assert out.data == source.encode()
    assert (out.matches, out.placeholders) == ({}, 0)


# -- JSON Lines ------------------------------------------------------------------------------------------------------


def test_json_lines_keep_their_lines_and_unchanged_records_their_bytes() -> None:
    source = "\n".join(
        [
            '{"user": {"email": "a@example.com", "tags": ["x", "b@example.org"]}, "n": 1}',
            '{ "note" : "nothing here",   "n": 2 }',  # unchanged: kept byte for byte
            "",
            "   ",
            "not json, mail c@example.net",
            '  {"msg": "call +44 20 7946 0958", "ok": true}\r',
            '{"email": "a@example.com"}',
        ]
    )
    out = lines(source + "\n")
    got = out.data.decode().split("\n")
    assert got == [
        '{"user":{"email":"[EMAIL_1]","tags":["x","[EMAIL_2]"]},"n":1}',
        '{ "note" : "nothing here",   "n": 2 }',
        "",
        "   ",
        "not json, mail [EMAIL_3]",
        '  {"msg":"call [PHONE_1]","ok":true}\r',
        '{"email":"[EMAIL_1]"}',
        "",
    ]
    assert (out.records_in, out.records_out, out.unparseable_records) == (5, 5, 1)
    assert out.matches == {"email": 4, "phone": 1}
    assert out.placeholders == 4
    assert (out.bytes_in, out.bytes_out) == (len(source) + 1, len(out.data))
    for line in got:
        if line.strip() and not line.startswith("not json"):
            json.loads(line)


def test_json_values_and_keys_are_redacted_but_never_plain_numbers() -> None:
    source = '{"alice@example.com": "x", "card": 4111111111111111, "n": 4111111111111112, "b": true, "f": 1.5}'
    out = lines(source)
    assert json.loads(out.data) == {
        "[EMAIL_1]": "x",
        "card": "[CARD_1]",
        "n": 4111111111111112,
        "b": True,
        "f": 1.5,
    }
    assert out.matches == {"email": 1, "card": 1}
    assert lines('{"card": 4111111111111111}', "secrets.v1").matches == {}  # cards are pii.v1's


def test_json_escapes_do_not_hide_values() -> None:
    escaped = json.dumps({"m": "mail a@example.com\nor b\u0040example.org"}, ensure_ascii=True).replace("@", "\\u0040")
    assert "@" not in escaped
    out = lines(escaped)
    assert json.loads(out.data) == {"m": "mail [EMAIL_1]\nor [EMAIL_2]"}


def test_the_enclosing_key_names_a_secret_in_json() -> None:
    records = [
        {
            "client_secret": "Zx9Qw8Er7Ty6Ui5Op4As3Df2",
            "password": "hunter2hunter2",
            "tokens": ["Qw8Er7Ty6Ui5Op4As3Df2Zx9"],
        },
        {"token_type": "Bearer", "max_tokens": 4096, "auth_method": "password", "author": "Zx9Qw8Er7Ty6Ui5Op4As3"},
        {"authorization": "Bearer Zx9Qw8Er7Ty6Ui5Op4As3Df2", "password_hint": "the usual one"},
    ]
    out = lines("\n".join(json.dumps(r) for r in records), "secrets.v1")
    got = [json.loads(line) for line in out.data.decode().split("\n")]
    assert got[0] == {"client_secret": "[SECRET_1]", "password": "[SECRET_2]", "tokens": ["[SECRET_3]"]}
    assert got[1] == records[1]
    assert got[2] == {"authorization": "Bearer [SECRET_1]", "password_hint": "the usual one"}  # the same value
    assert out.matches == {"high_entropy": 4}


def test_a_json_string_is_judged_alone_and_a_lone_surrogate_survives() -> None:
    source = (
        '{"version": "10.0.0.1", "password (old)": "hunter2hunter2", "api.key": "Zx9Qw8Er7Ty6Ui5Op4As3Df2"}\n'
        '{"password": "it\'s a secret phrase", "s": "\\ud800 a@example.com"}'
    )
    pii = lines(source).data.decode().split("\n")
    assert json.loads(pii[0])["version"] == "[IPV4_1]"  # the key is not the string's context
    assert pii[1] == '{"password":"it\'s a secret phrase","s":"\\ud800 [EMAIL_1]"}'
    secrets = [json.loads(line) for line in lines(source, "secrets.v1").data.decode().split("\n")]
    assert secrets[0] == {"version": "10.0.0.1", "password (old)": "hunter2hunter2", "api.key": "[SECRET_1]"}
    assert secrets[1]["password"] == "[SECRET_2]"
    assert text("firmware 2.4.1.0, version: 10.0.0.1").matches == {}  # in text, the word is context


def test_json_seq_records_and_media_type_spellings() -> None:
    for media_type in ("application/jsonl", "application/x-ndjson; charset=utf-8", "Application/JSONL"):
        out = redact_bytes(b'{"e": "a@example.com"}\n', media_type=media_type, redactor="pii.v1")
        assert out.data == b'{"e":"[EMAIL_1]"}\n'
    out = redact_bytes(
        b'\x1e{"e": "a@example.com"}\n\x1e{"n": 1}\n', media_type="application/json-seq", redactor="pii.v1"
    )
    assert out.data == b'\x1e{"e":"[EMAIL_1]"}\n\x1e{"n": 1}\n'
    assert (out.records_in, out.unparseable_records) == (2, 0)


# -- JSON documents ----------------------------------------------------------------------------------------------


def test_a_json_array_is_redacted_item_by_item() -> None:
    source = '[\n  {"n": 1,  "e": "a@example.com"},\n  {"n": 2,   "note": "kept as is"} ,\n  "10.0.0.1"\n]\n'
    out = redact_bytes(source.encode(), media_type="application/json", redactor="pii.v1")
    assert out.data.decode() == '[\n  {"n":1,"e":"[EMAIL_1]"},\n  {"n": 2,   "note": "kept as is"} ,\n  "[IPV4_1]"\n]\n'
    assert (out.records_in, out.records_out) == (3, 3)
    assert json.loads(out.data)[1] == {"n": 2, "note": "kept as is"}


def test_a_json_object_is_kept_or_reserialised() -> None:
    kept = b'{ "a" : [1, 2],\n "b": "nothing" }'
    out = redact_bytes(kept, media_type="application/json", redactor="secrets.v1")
    assert (out.data, out.records_in, out.matches) == (kept, 1, {})
    out = redact_bytes(b'{ "key": "AKIAIOSFODNN7EXAMPLE" }', media_type="application/json", redactor="secrets.v1")
    assert out.data == b'{"key":"[AWS_ACCESS_KEY_1]"}'
    assert redact_bytes(b"[]", media_type="application/json", redactor="pii.v1").records_in == 0


# -- field paths -----------------------------------------------------------------------------------------------------


def test_field_paths_replace_exactly_the_values_at_the_paths() -> None:
    records = [
        {"user": {"email": "a@example.com", "name": "Ann"}, "ip": "10.0.0.1", "items": [{"card": 1}, {"card": "x"}]},
        {"user": {"email": "a@example.com"}, "ip": None, "items": [{"card": {"deep": True}}], "note": "b@example.org"},
        {"user": "not an object", "other": 1},
    ]
    source = "\n".join(json.dumps(r) for r in records)
    out = lines(source, fields=["user.email", "ip", "items.*.card"])
    got = [json.loads(line) for line in out.data.decode().split("\n")]
    assert got[0] == {
        "user": {"email": "[EMAIL_1]", "name": "Ann"},
        "ip": "[IP_1]",
        "items": [{"card": "[CARD_1]"}, {"card": "[CARD_2]"}],
    }
    assert got[1] == {
        "user": {"email": "[EMAIL_1]"},
        "ip": "[IP_2]",
        "items": [{"card": "[CARD_3]"}],
        "note": "b@example.org",
    }
    assert out.data.decode().split("\n")[2] == source.split("\n")[2]  # nothing at the paths: bytes kept
    assert out.matches == {"field": 7}
    assert out.placeholders == 6


def test_a_named_step_applies_to_every_item_of_an_array_and_star_matches_keys() -> None:
    source = json.dumps({"items": [{"card": "1"}, [{"card": "2"}]], "meta": {"a": {"x": 1}, "b": {"x": 2}}})
    got = json.loads(lines(source, fields=["items.card", "meta.*.x"]).data)
    assert got == {
        "items": [{"card": "[CARD_1]"}, [{"card": "[CARD_2]"}]],
        "meta": {"a": {"x": "[X_1]"}, "b": {"x": "[X_2]"}},
    }
    got = json.loads(lines('{"a": 1, "b": [1]}', fields=["*"]).data)
    assert got == {"a": "[FIELD_1]", "b": "[FIELD_2]"}
    got = json.loads(lines('{"a-b": {"2fa": "1"}}', fields=["a-b.2fa"]).data)
    assert got == {"a-b": {"2fa": "[FIELD_2FA_1]"}}


def test_field_paths_distinguish_types_and_run_no_detectors() -> None:
    out = lines('{"v": 1, "e": "a@example.com"}\n{"v": "1"}\n{"v": 1}', "secrets.v1", fields=["v"])
    assert out.data == b'{"v":"[V_1]","e":"a@example.com"}\n{"v":"[V_2]"}\n{"v":"[V_1]"}'
    doc = redact_bytes(b'[{"v": 1}, {"v": 2}]', media_type="application/json", redactor="pii.v1", fields=["v"])
    assert json.loads(doc.data) == [{"v": "[V_1]"}, {"v": "[V_2]"}]
    assert doc.records_in == 2


@pytest.mark.parametrize(
    "fields",
    [
        ["a..b"],
        [".a"],
        ["a."],
        [""],
        [".".join(["a"] * 33)],
        [f"f{n}" for n in range(65)],
        [],
        "user.email",
        [1],
    ],
)
def test_invalid_field_paths_are_refused(fields: object) -> None:
    with pytest.raises(InvalidArgument):
        lines('{"a": 1}', fields=fields)


def test_the_limits_of_field_paths_are_inclusive() -> None:
    assert lines('{"a": 1}', fields=[".".join(["a"] * 32)]).matches == {}
    assert lines('{"f0": 1}', fields=[f"f{n}" for n in range(64)]).matches == {"field": 1}


# -- refusals ---------------------------------------------------------------------------------------------------------


def refused(data: bytes, **kw: object) -> str:
    with pytest.raises(InvalidArgument) as info:
        redact_bytes(data, **kw)  # type: ignore[arg-type]
    message = str(info.value)
    assert CANARY not in message
    assert message
    return message


def test_refusals_are_typed_and_echo_nothing() -> None:
    payload = f"{CANARY} a@example.com".encode()
    assert "binary" in refused(payload, media_type="image/png", redactor="pii.v1")
    assert "binary" in refused(payload, media_type=f"application/{CANARY}", redactor="pii.v1")
    assert "UTF-8" in refused(payload + b"\xff\xfe", media_type="text/plain", redactor="pii.v1")
    assert "pii.v1, secrets.v1" in refused(payload, media_type="text/plain", redactor=CANARY)
    assert "JSON" in refused(payload, media_type="text/plain", redactor="pii.v1", fields=["a"])
    assert "parse" in refused(b'{"a": "' + payload, media_type="application/json", redactor="pii.v1")
    deep = b"[" * 600 + b'"' + payload + b'"' + b"]" * 600
    refused(deep, media_type="application/json", redactor="pii.v1")
    refused(b"[" * 100_000, media_type="application/json", redactor="pii.v1")
    refused(deep, media_type=JSONL, redactor="pii.v1")
    refused(payload, media_type=JSONL, redactor="pii.v1", fields=[f"{CANARY}..x"])


# -- review fixes: JSON records keep every value they hold, keys, and number spellings -----------------------------


def document(data: str, redactor: str = "pii.v1", **kw: object) -> RedactionOutcome:
    return redact_bytes(data.encode(), media_type="application/json", redactor=redactor, **kw)  # type: ignore[arg-type]


def test_duplicate_json_keys_have_every_value_redacted_and_are_counted() -> None:
    record = '{"email":"ada@example.com","email":"x"}'
    for out in (lines(record), document(record), document(f"[{record}, 1]")):
        assert b"ada@example.com" not in out.data
        assert b'"email":"[EMAIL_1]","email":"x"' in out.data  # both pairs kept, in order
        assert out.duplicate_key_records == 1
        assert out.matches == {"email": 1}
    nested = lines('{"a":{"k":"b@example.org","k":"c@example.org"}}\n{"ok":1}')
    assert nested.data == b'{"a":{"k":"[EMAIL_1]","k":"[EMAIL_2]"}}\n{"ok":1}'
    assert (nested.duplicate_key_records, nested.unparseable_records) == (1, 0)
    assert lines('{"password":"Zx9Qw8Er7Ty6Ui5Op4As3Df2","password":"x"}', "secrets.v1").matches == {"high_entropy": 1}
    fields = lines('{"email":"ada@example.com","email":"b@example.com"}', fields=["email"])
    assert fields.data == b'{"email":"[EMAIL_1]","email":"[EMAIL_2]"}'


def test_object_keys_are_redacted_with_the_same_placeholders_and_stay_distinct() -> None:
    out = lines('{"users":{"ada@example.com":{},"b":"ada@example.com"}}')
    assert out.data == b'{"users":{"[EMAIL_1]":{},"b":"[EMAIL_1]"}}'
    assert out.matches == {"email": 2}
    # a key that redaction makes equal to an earlier one gets a suffix: no value is lost, no key repeats
    clash = json.loads(document('{"[EMAIL_1]": 1, "ada@example.com": 2}').data)
    assert clash == {"[EMAIL_1]": 1, "[EMAIL_1]~2": 2}
    assert b"ghp_" not in lines('{"ghp_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5": 1}', "secrets.v1").data


def test_a_changed_record_keeps_the_spelling_of_every_number_and_stays_strict_json() -> None:
    record = '{"a":1e400,"b":0.10000000000000000555,"c":-0,"d":1.50,"e":12345678901234567890123,"m":"ada@example.com"}'
    for out in (lines(record), document(record), document(f"[{record}]")):
        assert out.data.decode().replace("[EMAIL_1]", "ada@example.com").strip("[]") == record
        json.loads(out.data, parse_constant=lambda c: pytest.fail(f"non-strict {c}"))
    # NaN and Infinity are not JSON: they are kept as written, so the output is as strict as the input
    loose = '{"x":NaN,"y":-Infinity,"m":"ada@example.com"}'
    assert lines(loose).data == b'{"x":NaN,"y":-Infinity,"m":"[EMAIL_1]"}'
    assert document(loose).data == b'{"x":NaN,"y":-Infinity,"m":"[EMAIL_1]"}'
    # field paths compare numbers by spelling, and keep the others
    out = lines('{"n":1.0,"m":1e400}\n{"n":1}', fields=["n"])
    assert out.data == b'{"n":"[N_1]","m":1e400}\n{"n":"[N_2]"}'


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("token:aaaaaaa", b"token:aaaaaaa" * 76923),
        ("password= repeated", b"password=" * 111112),
        ('"api_key":" repeated', b'"api_key":"' * 90910),
        ("a run of key characters", b"a" * 1_000_000),
        ("token repeated", b"token" * 200_000),
        ("token_ repeated", b"token_" * 166_667),
        ("password=x& repeated", b"password=xyzxyzxyz&" * 50_000),
        ("mysql -p repeated", b"mysql -p" * 125_000),
        ("curl -u repeated", b" -u a:1" * 142_858),
        ("url userinfo repeated", b"a://b:c" * 142_858),
    ],
)
@pytest.mark.parametrize("media_type", ["text/plain", JSONL])
def test_adversarial_megabytes_are_redacted_in_linear_time(name: str, data: bytes, media_type: str) -> None:
    import time

    for redactor in ("secrets.v1", "pii.v1"):
        started = time.perf_counter()
        redact_bytes(data, media_type=media_type, redactor=redactor)
        took = time.perf_counter() - started
        print(f"\n{name} ({len(data):,} bytes, {media_type}, {redactor}): {took:.3f} s")
        assert took < 5.0  # about 0.1 s here; the bound is generous for slow CI, a quadratic scan takes 20 s+


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("PASSWORD=Tr0ub4dor&3xyz", "PASSWORD=[SECRET_1]"),
        ("PASSWORD=Tr0ub4dor&3xyz more", "PASSWORD=[SECRET_1] more"),
        ("password=Tr0ub(4)dor,x;y", "password=[SECRET_1]"),
        ("url?token=Zx9Qw8Er7Ty6Ui5Op4As3Df2&scope=read", "url?token=[SECRET_1]&scope=read"),
        ("f(password=hunter2hunter2, user=bob)", "f(password=[SECRET_1], user=bob)"),
        ("password='it is a long one'; next", "password='[SECRET_1]'; next"),
    ],
)
def test_a_keyed_secret_is_redacted_to_its_whole_extent(source: str, expected: str) -> None:
    assert text(source, "secrets.v1").data.decode() == expected


@pytest.mark.parametrize(
    ("source", "expected", "kind"),
    [
        ("DATABASE_URL=postgres://admin:S3cr3t@db:5432/x", "DATABASE_URL=postgres://admin:[URL_CREDENTIALS_1]@db:5432/x",
         "url_credentials"),
        ("see https://user:pass@host/ now", "see https://user:[URL_CREDENTIALS_1]@host/ now", "url_credentials"),
        ("redis://:p@ss:w0rd@cache:6379", "redis://:[URL_CREDENTIALS_1]@cache:6379", "url_credentials"),
        ("AccountName=a;AccountKey=" + "Ab1+" * 22 + ";EndpointSuffix=x", "AccountName=a;AccountKey=[AZURE_KEY_1];"
         "EndpointSuffix=x", "azure_key"),
        ("-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2 (GNU/Linux)\n\nlQOYBF+abc/def==\n=AbCd\n"
         "-----END PGP PRIVATE KEY BLOCK-----\nnext", "[PRIVATE_KEY_1]\nnext", "private_key"),
        ("hook https://hooks.slack.com/services/T01ABCDEF/B02ABCDEF/abcdEFGH1234ijklMNOP5678 ok",
         "hook [SLACK_WEBHOOK_1] ok", "slack_webhook"),
        ("NPM_TOKEN=npm_" + "aB3d" * 9, "NPM_TOKEN=[NPM_TOKEN_1]", "npm_token"),
        ("use hf_" + "aB3dE" * 7, "use [HF_TOKEN_1]", "hf_token"),
        ("curl -u admin:hunter2 https://x", "curl -u admin:[CLI_PASSWORD_1] https://x", "cli_password"),
        ("curl --user bob:s3cret x", "curl --user bob:[CLI_PASSWORD_1] x", "cli_password"),
        ("mysql -uroot -pS3cret orders", "mysql -uroot -p[CLI_PASSWORD_1] orders", "cli_password"),
    ],
)  # fmt: skip
def test_credentials_in_urls_connection_strings_and_commands_are_found(source: str, expected: str, kind: str) -> None:
    out = text(source, "secrets.v1")
    assert out.data.decode() == expected
    assert set(out.matches) == {kind}


@pytest.mark.parametrize(
    "source",
    [
        "docker run -u 1000:1000 img",
        "mysql -p orders",
        "http://host:8080/path@x",
        "postgres://app:${DB_PASSWORD}@db/x",
        "https://user:****@host/",
        "npm_" + "a" * 36,
        "hf_hub_download(repo)",
    ],
)
def test_look_alikes_of_the_new_secret_kinds_are_kept(source: str) -> None:
    assert text(source, "secrets.v1").matches == {}


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("4111\u00a01111\u00a01111\u00a01111", "CARD"),
        ("4111\u202f1111\u202f1111\u202f1111", "CARD"),
        ("4111.1111.1111.1111", "CARD"),
        ("3782\u00a0822463\u00a010005", "CARD"),
        ("646\u00a0555\u00a00123", "PHONE"),
        ("+44\u202f20\u202f7946\u202f0958", "PHONE"),
        ("020\u00a07946\u00a00958", "PHONE"),
        ("gb82 west 1234 5698 7654 32", "IBAN"),
        ("gb82west12345698765432", "IBAN"),
        ("De89 3704 0044 0532 0130 00", "IBAN"),
    ],
)
def test_no_break_spaces_dotted_cards_and_lower_case_ibans_are_found(source: str, kind: str) -> None:
    assert text(f"see {source}.").data.decode() == f"see [{kind}_1]."


@pytest.mark.parametrize(
    "source", ["4111.1111.1111.1112", "gb83 west 1234 5698 7654 32", "6465550123", "id 4111 1111.1111 1111"]
)
def test_checksums_still_decide_and_bare_ten_digit_numbers_are_not_phones(source: str) -> None:
    assert text(source).matches == {}
