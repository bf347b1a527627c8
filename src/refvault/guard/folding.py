"""The byte fold of text (:data:`FOLD`), applied to text runs only (:func:`fold`)."""

from __future__ import annotations

from typing import Final

import numpy as np

from refvault.guard.arrays import I64, U8
from refvault.guard.compiling import kernel

__all__ = ["FOLD", "FOLD_RUN", "fold"]

FOLD: Final = np.arange(256, dtype=np.uint8)
r"""The byte fold of text: ASCII letters to lower case; ASCII whitespace and the word separators
``_ - . / \ , : ; | + ~`` to a space; every other byte as it is. One byte for one byte, so offsets and
lengths are those of the unfolded bytes."""
FOLD[ord("A") : ord("Z") + 1] += 32
for _c in b"\t\n\x0b\x0c\r _-./\\,:;|+~":
    FOLD[_c] = 32
FOLD.flags.writeable = False

FOLD_RUN: Final = 16
"""Only text is folded: bytes inside a run of at least this many text bytes (printable ASCII, whitespace,
well-formed UTF-8 sequences). Random binary holds such runs about once in 10**6 positions, so binary is
matched as it is; a text excerpt of 16 bytes or more is one such run wherever it is copied."""


@kernel()
def _fold(buf: U8, starts: I64, table: U8, min_run: int) -> U8:  # pragma: no cover - compiled
    """``buf`` with ``table`` applied to the bytes of text runs of at least ``min_run`` bytes (per piece)."""
    out = buf.copy()
    for piece in range(starts.size - 1):
        s = starts[piece]
        e = starts[piece + 1]
        run = s  # where the current text run began
        i = s
        while i <= e:
            size = 0  # bytes of the text character at i (0: not text, or the end)
            if i < e:
                c = buf[i]
                if 32 <= c < 127 or 9 <= c <= 13:
                    size = 1
                elif 0xC2 <= c <= 0xF4:
                    need = 1 if c < 0xE0 else (2 if c < 0xF0 else 3)
                    if i + need < e:
                        size = need + 1
                        for j in range(i + 1, i + need + 1):
                            if buf[j] & 0xC0 != 0x80:
                                size = 0
                                break
            if size == 0:
                if i - run >= min_run:
                    for j in range(run, i):
                        out[j] = table[buf[j]]
                i += 1
                run = i
            else:
                i += size
    return out


def fold(buf: U8, starts: I64) -> U8:
    """``buf`` (pieces as in :meth:`FingerprintIndex.fingerprint`) with its text runs folded by :data:`FOLD`."""
    return _fold(buf, starts, FOLD, FOLD_RUN)
