"""Encoded payloads: the digest of a base64 payload, and the decodings of base64 and hex runs."""

from __future__ import annotations

import hashlib
import re
from typing import Final

from refvault.guard.requests import decode_base64

__all__ = ["DATA_URL_HEAD", "base64_payloads", "hex_payloads", "payload_digest"]

DATA_URL_HEAD: Final = re.compile(r"data:[^,;]*(?:;[^,;]*)*;base64,", re.IGNORECASE)


def payload_digest(payload: str) -> bytes:
    """A digest of a base64 payload that ignores a data URL's head, the alphabet (URL-safe or not) and padding."""
    head = DATA_URL_HEAD.match(payload)
    body = payload[head.end() :] if head else payload
    normal = body.rstrip("=").replace("-", "+").replace("_", "/")
    return hashlib.blake2b(normal.encode("utf-8", "surrogatepass"), digest_size=16).digest()


INNER_PADDING: Final = re.compile(rb"=+(?=\s*[^=\s])")
NOT_ALPHABET: Final = b"\r\n \t="


def base64_payloads(run: bytes, threshold: int) -> list[bytes]:
    """Decodings of a base64-looking run that may hold a payload of ``threshold`` bytes or more.

    The run is split after inner padding (concatenated padded chunks; ``key=`` glued before the
    payload), and each part is decoded from each of its first four characters: a prefix glued to the
    payload (``blob/``, ``token-``) shifts its alignment by any amount.
    """
    out: list[bytes] = []
    pos = 0
    parts: list[bytes] = []
    for m in INNER_PADDING.finditer(run):
        parts.append(run[pos : m.end()])
        pos = m.end()
    parts.append(run[pos:])
    min_chars = -(-4 * threshold // 3)
    for part in parts:
        chars = part.translate(None, NOT_ALPHABET)
        if len(chars) < min_chars:
            continue
        for shift in range(4):
            if len(chars) - shift < min_chars:
                break
            payload = decode_base64(chars[shift:])
            if payload is not None and len(payload) >= threshold:
                out.append(payload)
    return out


HEX_RUN: Final = re.compile(rb"[0-9A-Fa-f](?:[0-9A-Fa-f\r\n\t ]*[0-9A-Fa-f])?")


def hex_payloads(run: bytes, threshold: int) -> list[bytes]:
    """Decodings of the hex runs (upper or lower case, line breaks allowed) of ``threshold`` bytes or more in a
    base64-looking run: from its first and from its second digit (a glued prefix may misalign it)."""
    out: list[bytes] = []
    need = 2 * threshold
    for m in HEX_RUN.finditer(run):
        if m.end() - m.start() < need:
            continue
        digits = m.group().translate(None, b"\r\n\t ")
        for shift in (0, 1):
            body = digits[shift : len(digits) - (len(digits) - shift) % 2]
            if len(body) >= need:
                out.append(bytes.fromhex(body.decode()))
    return out
