"""Artifact ids and the names that scope them.

Invariants (tested in ``tests/test_ids.py``, ``tests/security/test_fuzz.py`` and
``tests/security/test_isolation.py``):

* An artifact id is ``art_`` plus 28 lowercase base32 characters: 26 that encode
  128 bits from :mod:`secrets`, then 2 check characters (:func:`new_artifact_id`).
  It is minted by the server, never derived from the content, a path or any
  caller string, so it reveals nothing and cannot be guessed from the bytes.
* The check characters make the 28 symbols a codeword of a Reed-Solomon code
  over GF(32) with minimum distance 3: changing any one or two characters of a
  new id, swapping two neighbours, or making two such swaps never gives another
  codeword, so :func:`id_check` calls it ``"miscopied"`` with certainty. A
  character dropped or doubled changes the length; other pairs of edits (one
  dropped and one doubled, a swap and a change) are caught with probability
  about 1 - 1/1024.
* Ids minted before the check (``art_`` plus 26 characters, *legacy*) stay valid
  everywhere. A legacy id's last character carries 2 zero padding bits, so a
  26-character string whose last character has them set was never minted.
* Scope components (tenant, user, session) are 1-128 characters from
  ``[A-Za-z0-9._:@+-]``, starting with a letter, digit or underscore. They never
  reach a filesystem path: storage namespaces are hex digests of the tenant.
* Validation errors never echo the rejected value (it may be content).
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from typing import Literal, TypeGuard

from refvault.errors import InvalidId, InvalidScope, MisCopiedId

__all__ = [
    "ARTIFACT_ID_PATTERN",
    "IdCheck",
    "check_artifact_id",
    "check_name",
    "id_check",
    "id_distance",
    "is_artifact_id",
    "lookup_id",
    "namespace_of",
    "new_artifact_id",
]

ARTIFACT_ID_PATTERN = r"^art_[a-z2-7]{26}(?:[a-z2-7]{2})?$"
"""The shape of an artifact id: ``art_`` and 26 (legacy) or 28 (checked) characters from a-z, 2-7.

A JSON schema can say no more than this; :func:`is_artifact_id` also checks a new id's check characters."""

IdCheck = Literal["valid", "legacy", "miscopied", "invalid"]
"""What :func:`id_check` says of a string."""

_ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"
_VALUE = {c: i for i, c in enumerate(_ALPHABET)}
_NEW = re.compile(r"art_[a-z2-7]{28}")
_LEGACY = re.compile(r"art_[a-z2-7]{26}")
_NEAR = re.compile(r"[A-Za-z0-9_\-]{28,34}")  # URL-safe, and within 2 length edits of an id
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._:@+\-]{0,127}")

# GF(32) with the primitive polynomial x^5 + x^2 + 1: _EXP[i] = alpha^i, _LOG its inverse.
_EXP = [0] * 62
_LOG = [0] * 32
_x = 1
for _i in range(31):
    _EXP[_i] = _EXP[_i + 31] = _x
    _LOG[_x] = _i
    _x <<= 1
    if _x & 0b100000:
        _x ^= 0b100101
del _x, _i


def _mul(a: int, b: int) -> int:
    return 0 if a == 0 or b == 0 else _EXP[_LOG[a] + _LOG[b]]


def _syndromes(symbols: list[int]) -> tuple[int, int]:
    """``(sum c_i alpha^i, sum c_i alpha^2i)``: both zero exactly for a codeword (the narrow-sense Reed-Solomon
    code of length 28 over GF(32) with 2 check symbols)."""
    s1 = s2 = 0
    for i, c in enumerate(symbols):
        if c:
            s1 ^= _EXP[_LOG[c] + i]
            s2 ^= _EXP[(_LOG[c] + 2 * i) % 31]
    return s1, s2


def _check_symbols(body: list[int]) -> tuple[int, int]:
    """The two symbols at positions 26 and 27 that make ``body`` (26 symbols) a codeword.

    Parity-check columns (alpha^i, alpha^2i): any two (i != j < 31) are independent, so the code has
    minimum distance 3 (no error touching one or two positions has zero syndromes). A swap of the
    neighbours at i, i+1 adds d at both; two disjoint swaps cancel only if d1 alpha^i = d2 alpha^j and
    d1 alpha^2i = d2 alpha^2j, that is i = j: two swaps are detected too.
    """
    a, b = _syndromes(body)
    # c26 alpha^26 + c27 alpha^27 = a, c26 alpha^52 + c27 alpha^54 = b (Cramer's rule; minus is plus)
    p, q, r, t = _EXP[26], _EXP[27], _EXP[52 % 31], _EXP[54 % 31]
    inverse = _EXP[31 - _LOG[_mul(p, t) ^ _mul(q, r)]]
    c26 = _mul(_mul(a, t) ^ _mul(b, q), inverse)
    c27 = _mul(_mul(b, p) ^ _mul(a, r), inverse)
    return c26, c27


def new_artifact_id() -> str:
    """Mint a fresh opaque id: ``art_``, 128 random bits as 26 base32 characters, then 2 check characters."""
    body = base64.b32encode(secrets.token_bytes(16)).decode("ascii").rstrip("=").lower()
    c26, c27 = _check_symbols([_VALUE[c] for c in body])
    return "art_" + body + _ALPHABET[c26] + _ALPHABET[c27]


def id_check(value: object) -> IdCheck:
    """What ``value`` is as an artifact id, from the string alone (no lookup):

    * ``"valid"``: ``art_`` and 28 characters whose check characters agree (a new id);
    * ``"legacy"``: ``art_`` and 26 characters, as ids were minted before the check (zero padding bits);
    * ``"miscopied"``: a new-length id whose check fails, a legacy-length one with padding bits set (never
      minted), or a URL-safe string 28-34 characters long within :func:`id_distance` 2 of the shape of an
      id (``art_`` and 26 or 28 of a-z, 2-7): an id with a character changed, dropped, doubled or swapped;
    * ``"invalid"``: anything else (not a string, or nothing like an id).

    A valid or legacy id may still name nothing: only a lookup says that.
    """
    if not isinstance(value, str):
        return "invalid"
    if _NEW.fullmatch(value):
        symbols = [_VALUE[c] for c in value[4:]]
        return "valid" if _syndromes(symbols) == (0, 0) else "miscopied"
    if _LEGACY.fullmatch(value):
        return "legacy" if _VALUE[value[-1]] & 0b11 == 0 else "miscopied"
    if _NEAR.fullmatch(value) and _shape_distance(value) <= 2:
        return "miscopied"
    return "invalid"


def is_artifact_id(value: object) -> TypeGuard[str]:
    """True if ``value`` is a well-formed artifact id: a new id whose check agrees, or a legacy-length one.

    A legacy-length string with its padding bits set is well formed here (it is shown in messages like any
    id) though no server minted it; :func:`id_check` calls it ``"miscopied"``.
    """
    return isinstance(value, str) and (
        _LEGACY.fullmatch(value) is not None or (_NEW.fullmatch(value) is not None and id_check(value) == "valid")
    )


def check_artifact_id(value: object) -> str:
    """Return ``value`` if it is a well-formed artifact id (:func:`is_artifact_id`), else raise.

    A near miss (:func:`id_check` says ``"miscopied"``) raises :class:`~refvault.errors.MisCopiedId` without a
    suggestion (only a lookup in the caller's scope can suggest one); anything else :class:`InvalidId`.
    """
    if is_artifact_id(value):
        return value
    if id_check(value) == "miscopied":
        raise MisCopiedId(value if isinstance(value, str) else "")
    raise InvalidId("not a refvault artifact id: expected 'art_' followed by 28 characters a-z, 2-7")


def lookup_id(value: object) -> str:
    """Return ``value`` if looking it up in a scope makes sense, else raise :class:`InvalidId`.

    That is a well-formed id (:func:`is_artifact_id`) or a mis-copied one (:func:`id_check`): the lookup of a
    mis-copied id is what finds the id the caller meant (:mod:`refvault.vault.miscopy`). Either is at most 34
    characters from ``A-Za-z0-9_-``, safe in a URL path.
    """
    if isinstance(value, str) and (is_artifact_id(value) or id_check(value) == "miscopied"):
        return value
    raise InvalidId("not a refvault artifact id: expected 'art_' followed by 28 characters a-z, 2-7")


def id_distance(a: str, b: str, bound: int = 2) -> int:
    """The optimal-string-alignment (restricted Damerau-Levenshtein) distance of ``a`` and ``b``, if it is at
    most ``bound``; else ``bound + 1``. Each change, drop, doubling (an insertion) or adjacent swap counts 1.

    Filtered first: ``b`` cut in ``2 * bound + 1`` pieces, one of which ``a`` holds unchanged if the distance is
    within ``bound`` (for ids: about a microsecond when it is not). Then banded: cost O(len * bound), stopping as
    soon as every cell of a row is over ``bound``.
    """
    n, m = len(a), len(b)
    over = bound + 1
    if abs(n - m) > bound:
        return over
    pieces = 2 * bound + 1  # an edit spoils at most 2 adjacent pieces of b: one of them is in a unchanged
    if m >= 4 * pieces and not any(b[m * k // pieces : m * (k + 1) // pieces] in a for k in range(pieces)):
        return over
    before: list[int] = []
    previous = [j if j <= bound else over for j in range(m + 1)]
    for i in range(1, n + 1):
        current = [over] * (m + 1)
        if i <= bound:
            current[0] = i
        low, high = max(1, i - bound), min(m, i + bound)
        ai = a[i - 1]
        for j in range(low, high + 1):
            bj = b[j - 1]
            cell = previous[j - 1] + (ai != bj)
            cell = min(cell, previous[j] + 1, current[j - 1] + 1)
            if i > 1 and j > 1 and ai == b[j - 2] and a[i - 2] == bj and ai != bj:
                cell = min(cell, before[j - 2] + 1)
            current[j] = min(cell, over)
        if min(current[max(0, low - 1) : high + 1]) >= over:
            return over
        before, previous = previous, current
    return previous[m]


def _shape_distance(value: str) -> int:
    """The fewest edits (as :func:`id_distance` counts them) that turn ``value`` into some string of the shape of
    an id, capped at 3: an edit distance to the pattern ``art_`` then 26 or 28 of a-z, 2-7."""
    classes: list[str | None] = ["a", "r", "t", "_"] + [None] * 28  # None: any of a-z, 2-7

    def fits(ch: str, j: int) -> bool:
        wanted = classes[j]
        return ch in _VALUE if wanted is None else ch == wanted

    over, m = 3, len(classes)
    before: list[int] = []
    previous = [min(j, over) for j in range(m + 1)]
    for i in range(1, len(value) + 1):
        current = [min(i, over)] + [over] * m
        ch = value[i - 1]
        for j in range(max(1, i - 2), min(m, i + 2) + 1):  # a path within 2 edits keeps |i - j| <= 2
            cell = min(previous[j - 1] + (not fits(ch, j - 1)), previous[j] + 1, current[j - 1] + 1)
            if i > 1 and j > 1 and fits(ch, j - 2) and fits(value[i - 2], j - 1):
                cell = min(cell, before[j - 2] + 1)
            current[j] = min(cell, over)
        before, previous = previous, current
    return min(previous[30], previous[32])


def check_name(kind: str, value: object) -> str:
    """Return ``value`` if it is a valid tenant/user/session name, else raise :class:`InvalidScope`."""
    if not isinstance(value, str) or _NAME.fullmatch(value) is None:
        raise InvalidScope(
            f"invalid {kind}: use 1-128 characters from A-Z a-z 0-9 . _ : @ + -, "
            "starting with a letter, digit or underscore"
        )
    return value


def namespace_of(tenant: str) -> str:
    """The storage namespace of a tenant: 32 hex characters, safe as a path component.

    Blobs are deduplicated within a namespace only, so identical bytes stored by
    two tenants share nothing.
    """
    return hashlib.sha256(b"refvault.tenant\x00" + tenant.encode("utf-8")).hexdigest()[:32]
