"""Where base64-looking runs are in a buffer (:func:`base64_runs`), for the decoding of encoded payloads."""

from __future__ import annotations

import numpy as np

from refvault.guard.arrays import I64, U8
from refvault.guard.compiling import kernel

__all__ = ["base64_runs"]

_BASE64_CLASS = np.zeros(256, np.uint8)  # 1: base64 character (either alphabet, padding); 2: CR or LF; 3: space, tab
for _c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_=":
    _BASE64_CLASS[_c] = 1
_BASE64_CLASS[10] = _BASE64_CLASS[13] = 2
_BASE64_CLASS[32] = _BASE64_CLASS[9] = 3


@kernel()
def _indent(buf: U8, lo: int, i: int, classes: U8) -> int:  # pragma: no cover - compiled
    """Where the blank stretch holding ``buf[i]`` starts if it holds a line break (an indented line), else -1."""
    j = i
    newline = False
    while j > lo and classes[buf[j - 1]] >= 2:
        j -= 1
        newline = newline or classes[buf[j]] == 2
    return j if newline or classes[buf[i]] == 2 else -1


@kernel()
def _base64_runs(buf: U8, starts: I64, min_len: int, classes: U8) -> I64:  # pragma: no cover - compiled
    """(start, end) pairs, flattened, of runs of base64 characters >= min_len characters.

    Line breaks inside a run are allowed, and so are spaces and tabs after a line break (indented
    lines: YAML block scalars, folded headers). Looks at every (min_len // 2)-th byte only: a long
    enough run of lines of at least that many characters covers at least one of them.
    """
    step = max(1, min_len // 2)
    out = np.empty(64, np.int64)
    n = 0
    for piece in range(starts.size - 1):
        s = starts[piece]
        e = starts[piece + 1]
        done = s  # bytes before this are classified
        i = s + step - 1
        while i < e:
            c = classes[buf[i]]
            if c == 0 or c == 3:
                i += step
                continue
            begin = i
            while begin > done:
                b = classes[buf[begin - 1]]
                if b == 1 or b == 2:
                    begin -= 1
                elif b == 3:
                    j = _indent(buf, done, begin - 1, classes)
                    if j < 0:
                        break
                    begin = j
                else:
                    break
            end = i + 1
            after_break = False
            while end < e:
                b = classes[buf[end]]
                if b == 1:
                    after_break = False
                elif b == 2:
                    after_break = True
                elif b != 3 or not after_break:
                    break
                end += 1
            done = end
            i = end + step
            while end > begin and classes[buf[end - 1]] >= 2:  # nor ends with one
                end -= 1
            if end - begin < min_len:
                continue
            while classes[buf[begin]] >= 2:  # a run does not start with a line break
                begin += 1
            chars = 0
            for j in range(begin, end):
                chars += classes[buf[j]] == 1
            if chars < min_len:
                continue
            if n + 2 > out.size:  # a loop, not a slice assignment: see refvault.guard.kernels
                grown = np.empty(out.size * 2, np.int64)
                for j in range(n):
                    grown[j] = out[j]
                out = grown
            out[n] = begin
            out[n + 1] = end
            n += 2
    return out[:n]


def base64_runs(buf: U8, starts: I64, min_len: int) -> I64:
    """Flattened (start, end) pairs of base64-looking runs of at least ``min_len`` characters in each piece."""
    return _base64_runs(buf, starts, min_len, _BASE64_CLASS)
