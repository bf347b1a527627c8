"""Checks that turn a regex candidate into a detection: checksums, ranges, shapes and entropy.

Each function is pure and looks only at the candidate it is given. Invariants:

* **Checksums are exact.** :func:`card_ok` is the Luhn check plus a known issuer prefix and a length that
  issuer uses; :func:`iban_ok` is ISO 13616 (the country's length, then mod 97 == 1 over the rearranged
  digits). A wrong check digit is never a match.
* **Addresses are real addresses.** :func:`ipv4_ok` wants four octets 0-255; :func:`ipv6_ok` is
  :class:`ipaddress.IPv6Address` plus at least one decimal digit (so ``::``, ``a::b`` and ``dead::beef`` in
  code are not addresses, and ``12:30:45`` never reaches it: it is no IPv6 shape). Addresses that identify no
  host (``0.0.0.0``, loopback, broadcast, ``::1``) are not reported.
* **Keys decide the keyed rule.** :func:`key_class` reads a key name (snake, camel, kebab or dotted; 1-128
  characters from ``A-Z a-z 0-9 _ . -``) as a list of words: it is secret-looking when a word is (or ends
  with) a secret word (password, passwd, passphrase, secret, token, api key, access key, auth, authorization,
  credential, private) and its last word does not name something about the secret (``_url``, ``_name``,
  ``_type``, ``_id``, ``_count``, ...), nor its first a counter (``max_tokens``) or a page token.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import math
import re
from collections import Counter
from functools import lru_cache
from itertools import pairwise
from typing import Literal

from refvault.content.redactors.placeholders import PLACEHOLDER

__all__ = [
    "IBAN_LENGTHS",
    "KeyClass",
    "card_ok",
    "entropy",
    "iban_ok",
    "ipv4_ok",
    "ipv6_ok",
    "jwt_ok",
    "key_class",
    "keyed_value_ok",
    "luhn",
    "mixed",
]

KeyClass = Literal["password", "secret", "aws"]

# ISO 13616 lengths by country (the SWIFT IBAN registry).
IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BI": 27,
    "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27, "DK": 18, "DO": 28,
    "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
    "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27,
    "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25,
    "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18,
    "NO": 15, "OM": 23, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33,
    "SA": 24, "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}  # fmt: skip


def luhn(digits: str) -> bool:
    """The Luhn (mod 10) check of a string of ASCII digits."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        x = ord(ch) - 48
        if i & 1:
            x = x * 2 - 9 if x > 4 else x * 2
        total += x
    return total % 10 == 0


def _issuer_lengths(d: str) -> range | tuple[int, ...]:
    """The lengths the issuer whose prefix ``d`` starts with uses (empty: no known issuer)."""
    two, four = int(d[:2]), int(d[:4])
    if d[0] == "4":
        return (13, 16, 19)  # Visa
    if 51 <= two <= 55 or 2221 <= four <= 2720:
        return (16,)  # Mastercard
    if two in (34, 37):
        return (15,)  # American Express
    if two in (36, 38, 39) or 300 <= int(d[:3]) <= 305:
        return range(14, 20)  # Diners Club
    if 3528 <= four <= 3589:
        return range(16, 20)  # JCB
    if four == 6011 or two in (62, 65) or 644 <= int(d[:3]) <= 649:
        return range(16, 20)  # Discover, UnionPay
    if two in (50, 56, 57, 58) or four in (6304, 6759, 6761, 6762, 6763):
        return range(13, 20)  # Maestro
    return ()


def card_ok(digits: str) -> bool:
    """A payment card number: 13-19 digits, a known issuer prefix and length, and the Luhn check."""
    return 13 <= len(digits) <= 19 and len(digits) in _issuer_lengths(digits) and luhn(digits)


def iban_ok(compact: str) -> bool:
    """An IBAN without spaces: a known country, that country's length, and mod 97 == 1."""
    if IBAN_LENGTHS.get(compact[:2]) != len(compact) or not compact[2:4].isdigit():
        return False
    rearranged = compact[4:] + compact[:4]
    try:
        number = int("".join(str(int(ch, 36)) for ch in rearranged))
    except ValueError:
        return False
    return number % 97 == 1


def ipv4_ok(parts: list[str]) -> bool:
    """Four decimal octets, each 0-255 and at most three digits, that can name a host.

    Not ``0.0.0.0`` (any address), ``127.x.x.x`` (this host) or ``255.255.255.255`` (broadcast): they identify
    no one. Private and documentation ranges are addresses like any other.
    """
    if len(parts) != 4 or not all(p.isdigit() and len(p) <= 3 and int(p) <= 255 for p in parts):
        return False
    octets = [int(p) for p in parts]
    return octets[0] != 127 and octets != [0, 0, 0, 0] and octets != [255, 255, 255, 255]


def ipv6_ok(text: str) -> bool:
    """An IPv6 address (compressed forms and an IPv4 tail included) with at least one decimal digit."""
    if not any(ch.isdigit() for ch in text):
        return False
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return not (address.is_loopback or address.is_unspecified)


def entropy(text: str) -> float:
    """Shannon entropy of the characters of ``text``, in bits per character."""
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values()) if n else 0.0


def mixed(text: str, classes: int = 2) -> bool:
    """At least ``classes`` of: a lower-case letter, an upper-case letter, a digit."""
    found = any(c.islower() for c in text) + any(c.isupper() for c in text) + any(c.isdigit() for c in text)
    return found >= classes


def jwt_ok(token: str) -> bool:
    """A JWT's header segment is base64url of a JSON object."""
    header = token.split(".", 1)[0]
    try:
        decoded = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return False
    return isinstance(decoded, dict)


_KEY = re.compile(r"[A-Za-z0-9_.\-]{1,128}", re.ASCII)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD_SPLIT = re.compile(r"[^a-z0-9]+")
_SECRET_WORDS = frozenset(
    {
        "password", "passwd", "passphrase", "pass", "secret", "secrets", "token", "tokens", "apikey", "apikeys",
        "accesskey", "secretkey", "privatekey", "auth", "authorization", "credential", "credentials", "private",
    }
)  # fmt: skip
_SECRET_ENDINGS = ("password", "passwd", "secret", "token", "apikey", "accesskey", "secretkey", "privatekey")
_PASSWORD_WORDS = frozenset({"password", "passwd", "passphrase", "pass"})
_AWS_TRIPLE = ("secret", "access", "key")
_KEY_PAIRS = frozenset({("api", "key"), ("access", "key"), ("secret", "key"), ("private", "key")})
_NOT_VALUE_LAST = frozenset(
    {
        "url", "uri", "urls", "endpoint", "path", "file", "filename", "name", "type", "id", "ids", "len", "length",
        "count", "ttl", "expiry", "expires", "expiration", "at", "time", "timeout", "method", "mode", "scheme",
        "header", "field", "hint", "policy", "version", "format", "kind", "enabled", "required", "size", "limit",
        "used", "usage", "remaining", "rotation", "provider", "location", "dir", "prompt", "label", "reset",
        "changed", "updated", "created", "rule", "rules", "strength", "min", "max", "valid", "invalid", "error",
        "errors", "status", "source", "store", "env", "var", "flow", "server", "service", "level", "scope",
    }
)  # fmt: skip
_NOT_VALUE_FIRST = frozenset({"max", "min", "num", "total", "input", "output", "prompt", "completion", "page", "next"})


@lru_cache(maxsize=4096)
def key_class(key: str) -> KeyClass | None:
    """Whether ``key`` names a secret: ``"aws"`` (an AWS secret access key), ``"password"``, ``"secret"`` or None.

    A key is 1-128 characters from ``A-Z a-z 0-9 _ . -``; anything else (``"password (old)"``) names nothing.
    """
    if not _KEY.fullmatch(key):
        return None
    words = [w for w in _WORD_SPLIT.split(_CAMEL.sub("_", key).lower()) if w]
    if not words or words[-1] in _NOT_VALUE_LAST or words[0] in _NOT_VALUE_FIRST:
        return None
    secret = any(w in _SECRET_WORDS or w.endswith(_SECRET_ENDINGS) for w in words) or any(
        pair in _KEY_PAIRS for pair in pairwise(words)
    )
    if not secret:
        return None
    if ("aws" in words and any(w.startswith("secret") for w in words)) or _AWS_TRIPLE in zip(
        words, words[1:], words[2:], strict=False
    ):
        return "aws"
    if any(w in _PASSWORD_WORDS or "password" in w or "passwd" in w for w in words):
        return "password"
    return "secret"


_NOT_A_VALUE = frozenset({"null", "none", "true", "false", "undefined", "redacted", "<redacted>", "[redacted]"})
_REFERENCE = ("${", "{{", "<", "%(", "$(", "[")


def keyed_value_ok(kind: KeyClass, value: str) -> bool:
    """Whether ``value``, under a key of class ``kind``, is a secret to redact.

    Password keys: 8 characters or more. Other secret keys: 16 or more, no white space, and Shannon entropy
    >= 3.5 bits per character. Never: a value holding a placeholder, of fewer than 4 distinct characters
    (``********``), a literal like ``null`` or a template reference (``${DB_PASSWORD}``, ``{{ secret }}``).
    """
    if len(value) < 8 or len(set(value)) < 4 or value.lower() in _NOT_A_VALUE or value.startswith(_REFERENCE):
        return False
    if PLACEHOLDER.search(value):
        return False
    if kind == "password":
        return True
    return len(value) >= 16 and not any(c.isspace() for c in value) and entropy(value) >= 3.5
