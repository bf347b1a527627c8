"""Checks of the number-shaped candidates of ``pii.v1``: cards, phone numbers, IPv4 addresses.

The scan (:data:`~refvault.content.redactors.patterns.PII`) only yields exact shapes; these functions decide:

* **card** — 13-19 digits, plain or in groups of four with one separator (or 4-6-5 / 4-6-4), not continued
  by another group: :func:`~refvault.content.redactors.validators.card_ok` (Luhn, issuer prefix and length).
* **ipv4** — four dotted octets 0-255 that name a host, and not a version: not right after ``name/``
  (``Chrome/124.0.0.0``) or a version word (``firmware 2.4.1.0``).
* **phone** — ``NXX-NXX-XXXX`` with one separator (optionally after ``1``), always; a trunk-``0`` number of
  2-5 groups of 2-8 digits, 9-12 in all, with one separator (a ``/`` after the area code allowed); after a
  ``+``, 7-15 digits (a ``(0)`` not counted), trailing space-separated groups dropped while over 15; with the
  area code in parentheses, ``(NXX) NXX-XXXX`` or a trunk-``0`` number. Mixed separators (``01.02.2024 12``)
  and fewer than 9 digits in a national form (every dd-mm-yyyy date) are never phones; a plain run of digits
  is never a phone.
"""

from __future__ import annotations

import re

from refvault.content.redactors.validators import card_ok, ipv4_ok

__all__ = [
    "Span",
    "card_span",
    "ends_with_version_word",
    "intl_phone_span",
    "ipv4_span",
    "paren_phone_span",
    "trunk_phone_span",
]

Span = tuple[int, int, str]

_GROUP = re.compile(r"[0-9]+")
_NOT_DIGIT = re.compile(r"[^0-9]+")
_MAX_PHONE_GROUPS = 12
_PHONE_SEPS = frozenset({" ", "-", ".", "\u00a0", "\u202f"})  # no-break spaces: what word processors put there
_VERSION_WORD = re.compile(r"(?:version|firmware|build|release|ver)[\s:=\"']*$", re.ASCII | re.IGNORECASE)


def _groups(text: str, start: int, end: int) -> list[tuple[int, int]]:
    return [m.span() for m in _GROUP.finditer(text, start, end)]


def _product_version(text: str, start: int, words: bool) -> bool:
    """``Chrome/124.0.0.0``, ``firmware 2.4.1.0``: dotted numbers after ``name/`` or (``words``) a version word."""
    if start >= 2 and text[start - 1] == "/" and text[start - 2].isalnum():
        return True
    return words and _VERSION_WORD.search(text, max(0, start - 16), start) is not None


def ends_with_version_word(text: str) -> bool:
    """Whether ``text`` ends like the context that makes dotted numbers after it a version."""
    return _VERSION_WORD.search(text, max(0, len(text) - 16)) is not None


def ipv4_span(text: str, start: int, end: int, *, words: bool = True) -> Span | None:
    """Four dotted octets at ``text[start:end]`` that name a host and are no product's version.

    ``words=False`` ignores a version word before the candidate: a probe of raw JSON, where the word may be the
    key of the string holding the address (``"version": "10.0.0.1"``), which the string alone does not show.
    """
    if ipv4_ok(text[start:end].split(".")) and not _product_version(text, start, words):
        return (start, end, "ipv4")
    return None


def card_span(text: str, start: int, end: int) -> Span | None:
    """A card number (digits with or without one kind of separator) at ``text[start:end]``."""
    return (start, end, "card") if card_ok(_NOT_DIGIT.sub("", text[start:end])) else None


def trunk_phone_span(text: str, start: int, end: int) -> Span | None:
    """A trunk-``0`` national number at ``text[start:end]``: 9-12 digits, groups of 2-8, one separator."""
    groups = _groups(text, start, end)
    digits = sum(b - a for a, b in groups)
    if not 9 <= digits <= 12 or not all(2 <= b - a <= 8 for a, b in groups):
        return None
    seps = [text[groups[k][1] : groups[k + 1][0]] for k in range(len(groups) - 1)]
    rest = set(seps[1:]) if seps[0] == "/" else set(seps)
    return (start, end, "phone") if len(rest) <= 1 and rest <= _PHONE_SEPS else None


def intl_phone_span(text: str, start: int, end: int) -> Span | None:
    """``+CC ...`` at ``text[start:end]``: 7-15 digits, dropping trailing space-separated groups over 15."""
    groups = _groups(text, start, end)
    if len(groups) > _MAX_PHONE_GROUPS:
        return None
    while groups:
        digits = sum(b - a for a, b in groups)
        trunk = sum(1 for a, b in groups if text[a - 1 : b + 1] == "(0)")
        if 7 <= digits - trunk <= 15:
            return (start, groups[-1][1], "phone")
        if digits - trunk < 7 or len(groups) == 1 or not text[groups[-2][1] : groups[-1][0]].isspace():
            return None
        groups.pop()
    return None


def paren_phone_span(text: str, start: int, end: int) -> Span | None:
    """``(NXX) NXX-XXXX`` or ``(0AA) ...`` (9-12 digits, one separator after the parenthesis) at ``text[start:]``."""
    groups = _groups(text, start, end)
    if not 2 <= len(groups) <= _MAX_PHONE_GROUPS:
        return None
    lens = [b - a for a, b in groups]
    digits = "".join(text[a:b] for a, b in groups)
    seps = [text[groups[k][1] : groups[k + 1][0]] for k in range(1, len(groups) - 1)]
    us = lens[:3] == [3, 3, 4] and digits[0] in "23456789" and seps[0] in _PHONE_SEPS
    if us and (len(groups) == 3 or seps[1].isspace()):
        return (start, groups[2][1], "phone")
    if digits[0] == "0" and 9 <= len(digits) <= 12 and len(set(seps)) <= 1 and set(seps) <= _PHONE_SEPS:
        return (start, groups[-1][1], "phone")
    return None
