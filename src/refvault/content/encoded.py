"""Base64-encoded bytes inside text: exactly what counts, found in one place.

:func:`refvault.content.materialize` stores every span found here and puts the
artifact's ``refvault://`` URI in its place (the MCP gateway runs every result
through it); :mod:`refvault.read.previews` shows a placeholder naming media type
and size instead (:func:`placeholder`). Both call :func:`find_encoded`, so what one
recognises the other does too. Tested in ``tests/security/test_gateway_base64.py``.

**What counts.** Each is an :class:`Encoded` span of a string:

* **A data: URL**, ``data:[<media type>][;<parameter>]*;base64,<payload>``
  (``data:`` and ``base64`` in any case; the media type and each of at most 16
  parameters at most 256 characters, without comma, semicolon or whitespace)
  whose payload is at least ``MIN_DATA_URL_CHARS`` (16) characters of the
  standard (``+/``) or the URL-safe (``-_``) base64 alphabet, not both, and
  *decodes cleanly* (below). Any declared media type counts: a data: URL is
  bytes by its own syntax, never prose. The span runs from ``data:`` to the
  end of the payload's padding.
* **A bare run**: at least ``MIN_RUN_CHARS`` (128) characters of the standard
  alphabet (``A-Z a-z 0-9 + /``) and up to two ``=``, delimited on both sides
  by characters of neither alphabet (so never a piece of a URL-safe token) and
  outside any data: URL, that

  - *decodes cleanly*;
  - *looks like base64*, not like a word, number, path or digest: it holds an
    upper-case letter, a lower-case letter and a digit, and is not only
    hexadecimal digits;
  - decodes to *binary*: its first ``HEAD_BYTES`` (4 KiB) are sniffed as a
    media type that is not text (:func:`~refvault.content.sniff.sniff_media_type`),
    or are not UTF-8 text (invalid UTF-8, or holding a control character
    other than tab, line feed, form feed, carriage return and escape).

  Base64 of *text* (a JSON document, a message, a Kubernetes secret's value) is
  not binary and stays. So do ids, short tokens and digests: the longest common
  digest, SHA-512, is 88 characters in base64, and in hex (128 characters) has
  no upper-case letter.

**Decodes cleanly**: with URL-safe letters read as standard ones, the payload
is valid base64 whose padding, if any, completes the last group exactly (a
length of 1 modulo 4 never decodes), and canonical: the bits the last character
carries beyond the last byte are zero. So a span decodes to exactly one byte
string, whose standard padded spelling (:attr:`Encoded.canonical`) is what the
scrubber then replaces wherever it occurs (:class:`~refvault.content.scrub.Scrubber`).

**Low-information payloads never count**: fewer than 4 distinct characters
(``AAAA...``, zero bytes) carry nothing and match ordinary text; the scrubber
never replaces such spans either (``MIN_DISTINCT``).

**Not recognised**, so left as they are: base64 broken by whitespace or line
breaks (MIME-style wrapping), percent-encoded, split over several strings or
over a string's ends, or in another encoding (hex, base32, base85, ...); bytes
compressed or encrypted *and then* spelt in one of those ways; base64 of bytes
that are text. Finding spans costs time linear in the text (regular
expressions anchored at run starts, and at most 4 KiB decoded per span).
"""

from __future__ import annotations

import binascii
import codecs
import re
import string
from dataclasses import dataclass
from typing import Literal

from refvault.content.scrub import MIN_DISTINCT
from refvault.content.sniff import OCTET_STREAM, sniff_media_type
from refvault.errors import InvalidMetadata
from refvault.model import base_type, canonical_media_type, is_text

__all__ = [
    "HEAD_BYTES",
    "MIN_DATA_URL_CHARS",
    "MIN_RUN_CHARS",
    "Encoded",
    "binary_media_type",
    "find_encoded",
    "mask",
    "placeholder",
]

MIN_RUN_CHARS = 128  # a bare run: 96 bytes or more
MIN_DATA_URL_CHARS = 16  # a data: URL's payload: 12 bytes or more
HEAD_BYTES = 4096  # how much of a span is decoded to judge it (sniffing looks at as much)
_HEAD_CHARS = (HEAD_BYTES + 2) // 3 * 4  # base64 characters holding the first HEAD_BYTES bytes (a multiple of 4)
_MEDIA_SHOWN = 64  # most characters of a media type a placeholder repeats

_DATA_URL = re.compile(
    r"data:([^,;\s]{0,256})((?:;[^,;\s]{0,256}){0,16});base64,([A-Za-z0-9+/_-]*)(=*)",
    re.IGNORECASE,
)
_STANDARD = frozenset(string.ascii_letters + string.digits + "+/")
_RUN = re.compile(rf"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/]{{{MIN_RUN_CHARS},}}(=*)(?![A-Za-z0-9+/_-])")
_ALPHABET_MASK = bytes(0x61 if chr(byte) in _STANDARD else 0x20 for byte in range(256))  # alphabet -> "a"
_LONG_RUN = b"a" * MIN_RUN_CHARS
_URLSAFE = str.maketrans("-_", "+/")
_VALUES = {ch: value for value, ch in enumerate(string.ascii_uppercase + string.ascii_lowercase + string.digits + "+/")}
_HEX = frozenset(string.hexdigits)
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class Encoded:
    """One span of base64-encoded bytes in a string (see the module docstring for what counts)."""

    start: int  # where the span starts in the string: at "data:" for a data: URL
    end: int  # where it ends: after the payload's padding
    kind: Literal["data_url", "base64"]
    canonical: str  # the payload's standard, padded spelling (what it decodes from)
    declared: str | None  # the media type a data: URL declares (canonical), else None
    detected: str | None  # the media type the first bytes carry (a bare run: never None; binary)

    @property
    def size(self) -> int:
        """How many bytes the span decodes to."""
        return len(self.canonical) // 4 * 3 - len(self.canonical) + len(self.canonical.rstrip("="))

    @property
    def media_type(self) -> str:
        """The declared media type if any, else the detected one, else ``application/octet-stream``."""
        return self.declared or self.detected or OCTET_STREAM


def find_encoded(text: str) -> list[Encoded]:
    """Every span of base64-encoded bytes in ``text`` that counts, left to right, none overlapping."""
    if len(text) < MIN_DATA_URL_CHARS:
        return []
    # Cheap C-speed passes first: most text holds neither a data: URL nor a long enough run.
    raw = text.encode("utf-8", "surrogatepass")
    urls = b"data:" in raw.lower()
    runs = len(text) >= MIN_RUN_CHARS and _LONG_RUN in raw.translate(_ALPHABET_MASK)
    found: list[Encoded] = []
    for match in _DATA_URL.finditer(text) if urls else ():
        payload = match.group(3) + match.group(4)
        if len(match.group(3)) < MIN_DATA_URL_CHARS:
            continue
        canonical = _clean(payload)
        if canonical is None or _low_information(canonical):
            continue
        declared, detected = _declared(match.group(1), match.group(2)), sniff_media_type(_head(canonical))
        found.append(Encoded(match.start(), match.end(), "data_url", canonical, declared, detected))
    if runs:
        spans = [(each.start, each.end) for each in found]
        for match in _RUN.finditer(text):
            if any(start < match.end() and match.start() < end for start, end in spans):
                continue
            run = match.group()
            if not _looks_like_base64(run):
                continue
            canonical = _clean(run)
            if canonical is None or _low_information(canonical):
                continue
            head = _head(canonical)
            detected = binary_media_type(head, whole=len(canonical) <= _HEAD_CHARS)
            if detected is not None:
                found.append(Encoded(match.start(), match.end(), "base64", canonical, None, detected))
        found.sort(key=lambda each: each.start)
    return found


def binary_media_type(head: bytes, *, whole: bool = True) -> str | None:
    """The media type of bytes that are binary, judged by their first bytes ``head``; None for text.

    Binary: sniffed as a media type that is not text, else not UTF-8 text (invalid
    UTF-8, or a control character other than tab, line feed, form feed, carriage
    return and escape). ``whole=False`` says ``head`` is a prefix, so a character
    cut at its end is not held against it. Binary bytes sniffed as nothing are
    ``application/octet-stream``.
    """
    if len(head) > HEAD_BYTES:
        head, whole = bytes(head[:HEAD_BYTES]), False
    sniffed = sniff_media_type(head)
    if sniffed is not None and not is_text(sniffed):
        return sniffed
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=whole)
    except UnicodeDecodeError:
        return OCTET_STREAM
    if _CONTROL.search(head) is not None:
        return OCTET_STREAM
    return None


def placeholder(found: Encoded) -> str:
    """What a preview shows instead of a span: its media type and decoded size, never its base64."""
    media_type = base_type(found.media_type)
    if len(media_type) > _MEDIA_SHOWN:
        media_type = OCTET_STREAM
    return f"[base64 omitted: {media_type}, {found.size} bytes]"


def mask(text: str) -> tuple[str, int]:
    """``text`` with every span :func:`find_encoded` finds replaced by its :func:`placeholder`; how many were."""
    found = find_encoded(text)
    if not found:
        return text, 0
    pieces: list[str] = []
    cursor = 0
    for each in found:
        pieces += [text[cursor : each.start], placeholder(each)]
        cursor = each.end
    pieces.append(text[cursor:])
    return "".join(pieces), len(found)


def _clean(payload: str) -> str | None:
    """The standard padded spelling of a payload that decodes cleanly (module docstring), else None."""
    body = payload.rstrip("=")
    padding = len(payload) - len(body)
    if padding > 2 or len(body) % 4 == 1 or (padding and (len(body) + padding) % 4):
        return None
    if "-" in body or "_" in body:
        if "+" in body or "/" in body:
            return None  # both alphabets: not one encoding
        body = body.translate(_URLSAFE)
    remainder = len(body) % 4
    if remainder and _VALUES[body[-1]] & (0b1111 if remainder == 2 else 0b11):
        return None  # bits beyond the last byte: not canonical
    return body + "=" * (-len(body) % 4)


def _head(canonical: str) -> bytes:
    """The first bytes a canonical spelling decodes to (at most ``HEAD_BYTES`` and a little)."""
    return binascii.a2b_base64(canonical[:_HEAD_CHARS], strict_mode=True)


def _looks_like_base64(run: str) -> bool:
    probe = run[:4096]
    return (
        any(ch.isupper() for ch in probe)
        and any(ch.islower() for ch in probe)
        and any(ch.isdigit() for ch in probe)
        and not _HEX.issuperset(run.rstrip("="))
    )


def _low_information(canonical: str) -> bool:
    return len(set(canonical[:256])) < MIN_DISTINCT and len(set(canonical)) < MIN_DISTINCT


def _declared(media_type: str, parameters: str) -> str | None:
    """A data: URL's declared media type with its parameters, canonical (without them if they are not
    ``name=value``); None if it declares none, or nothing valid."""
    if not media_type:
        return None
    for candidate in (media_type + parameters, media_type):
        try:
            return canonical_media_type(candidate)
        except InvalidMetadata:
            continue
    return None
