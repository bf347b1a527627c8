"""A local estimate of what a text costs in model tokens: no tokenizer, no network, O(n) at C speed.

Used to decide when a tool result is too large for the model's context (the
Toolbox and the MCP gateway offload above a threshold) and by the evaluation's
context accounting.
"""

from __future__ import annotations

__all__ = ["estimate_tokens"]

_UPPER = bytes(range(0x41, 0x5B))
_LOWER = bytes(range(0x61, 0x7B))
_DIGIT = bytes(range(0x30, 0x3A))
_SPACE = b" \t\r\f\v"


def _class_table() -> bytes:
    table = bytearray(b"p" * 256)  # ASCII punctuation, symbols and control characters
    for byte in _UPPER:
        table[byte] = ord("U")
    for byte in _LOWER:
        table[byte] = ord("l")
    for byte in _DIGIT:
        table[byte] = ord("d")
    for byte in _SPACE:
        table[byte] = ord(" ")
    table[0x0A] = ord("n")
    for byte in range(0x80, 0x100):
        table[byte] = ord("h")  # any byte of a non-ASCII UTF-8 sequence (or an invalid byte)
    return bytes(table)


_CLASSES = _class_table()
_LETTER_RUNS = bytes.maketrans(b"lUdpnh ", b"aaxxxxx")
_DIGIT_RUNS = bytes.maketrans(b"lUdpnh ", b"xxaxxxx")
_TOKEN_CHUNK = 1 << 20


def _chunk_tokens(chunk: bytes) -> int:
    classes = chunk.translate(_CLASSES)
    letters = b"x" + classes.translate(_LETTER_RUNS)
    digits = b"x" + classes.translate(_DIGIT_RUNS)
    # Runs are separated by "x", so non-overlapping counts of "a" * k add up floor(len / k) per run.
    return (
        letters.count(b"xa")
        + letters.count(b"aaaaaa")
        + digits.count(b"xa")
        + digits.count(b"aaa")
        + classes.count(b" d")
        + classes.count(b"lU")
        + classes.count(b"UU")
        + classes.count(b"p")
        + classes.count(b"n")
        + (2 * classes.count(b"h") + 4) // 5
    )


def estimate_tokens(text: str | bytes) -> int:
    """Estimate how many tokens ``text`` costs a language model, without any tokenizer or network.

    The rule, over the UTF-8 bytes, in 1 MiB chunks (each chunk boundary can only
    add a token or two):

    * a run of ASCII letters costs ``1 + len // 6``, plus 1 at every lower-to-upper
      case change and 1 per pair of consecutive capitals (``camelCase``,
      ``CONSTANTS`` and base64 split there);
    * a run of ASCII digits costs ``1 + len // 3`` (tokenizers split numbers into
      groups of up to three digits), plus 1 if a space precedes it (that space is
      its own token);
    * every ASCII punctuation mark, symbol or control character costs 1, every
      newline costs 1, other whitespace is free;
    * non-ASCII text costs 2 tokens per 5 bytes of UTF-8 (about 1.2 per CJK
      character, 0.8 per Cyrillic, Greek or Arabic letter, 1.6 per emoji).

    Hence ``estimate_tokens(b) <= len(b)`` for bytes, and for a str ``s`` the
    estimate is at most ``len(s)`` when ``s`` is ASCII and at most ``2 * len(s)``
    always (cheap upper bounds for a caller deciding whether to estimate at all).

    Measured against the ``cl100k_base`` and ``o200k_base`` encodings (offline,
    bpe-openai 0.1.4, which embeds them; not a dependency) on 20-800 KB samples,
    the ratio estimate/actual was: English prose 1.38, Python 1.43, C 1.57, JSON
    Lines 1.37, indented JSON 1.26, JSON Schema 1.42, German 1.02 (cl100k) /
    1.16 (o200k), Chinese 1.22/1.45, Japanese 1.20/1.56, Korean 1.10/1.51,
    Russian 1.62/2.22, Arabic 0.99/1.78, Hindi 1.01/2.64, hex 1.04, base64
    0.94/0.99, space-separated integers 1.22. So it overestimates most text by
    about 40% (offloading a little early is the safe side) and was never below
    0.94 of either encoding. Other model families' tokenizers differ; treat the
    estimate as good to within a factor of about 1.6 for English, code and JSON,
    and 2.7 for other scripts.

    O(n) with a handful of C-level passes (``bytes.translate``/``count``/
    ``replace``) per chunk and no per-character Python loop.
    """
    total = 0
    if isinstance(text, str):
        for start in range(0, len(text), _TOKEN_CHUNK):
            total += _chunk_tokens(text[start : start + _TOKEN_CHUNK].encode("utf-8", "surrogatepass"))
        return total
    data = bytes(text)
    for start in range(0, len(data), _TOKEN_CHUNK):
        total += _chunk_tokens(data[start : start + _TOKEN_CHUNK])
    return total
