"""Text windows and grep: read exactly the part of a text artifact the model needs.

Invariants, each enforced here and tested in ``tests/read/test_windows.py``:

* **Scoped and verified.** Every byte comes through the vault (``vault.stream`` /
  ``vault.read_range``), so scope, expiry and integrity are checked on every call;
  damaged bytes raise :class:`~refvault.errors.IntegrityError` before any is returned.
* **Disclosure.** ``readable`` refuses ``sealed`` artifacts
  (:class:`~refvault.errors.SealedArtifact`); non-text media types are refused with
  :class:`~refvault.errors.UnsupportedRead` (they are used by reference).
* **Never split UTF-8.** A window starts and ends on character boundaries: byte
  windows move their start forward and their end backward (a window too short for
  the character at its start returns that one whole character). Invalid bytes are
  shown as U+FFFD, one per byte, and counted in ``invalid_utf8_bytes``.
* **Bounded memory.** Artifacts are streamed in 1 MiB verified chunks; lines are
  counted chunk by chunk; a window holds about ``4 * max_chars`` bytes; grep holds
  one batch of lines (a line longer than ``LONG_LINE_CHARS`` is handled in segments).
* **Honest coverage.** ``truncated`` says a window stopped before its requested end
  (``next`` continues it); grep's ``scan_complete`` is false whenever any line was
  not fully searched, ``truncated`` says the match cap was hit, and ``next`` resumes.
  Error messages never contain artifact content.

Lines are separated by ``\\n``. A window's ``text`` keeps the line terminators, so
windows walked through ``next`` concatenate to the exact decoded text. grep matches
each line without its terminator (``\\n`` or ``\\r\\n``).
"""

from __future__ import annotations

import base64
import codecs
import re
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from refvault import tracing
from refvault.contract import VaultContract
from refvault.errors import InvalidArgument, RefvaultError, UnsupportedRead
from refvault.limits import (
    DEFAULT_GREP_MATCHES,
    DEFAULT_GREP_SECONDS,
    DEFAULT_WINDOW_CHARS,
    LONG_LINE_CHARS,
    MATCH_CHARS,
    MAX_CHARS,
    MAX_MATCHES,
    MAX_PATTERN,
    MAX_SECONDS,
)
from refvault.model import Descriptor, Scope
from refvault.operations import GrepRequest, WindowRequest
from refvault.policy import DEFAULT_PURPOSE, DEFAULT_RECIPIENT
from refvault.read._access import acting, coverage, is_records, is_text, readable, whole_object_proof
from refvault.read.metering import ScanMeter, TokenMeter, charge
from refvault.vault.audit_trail import engine_read, excerpt_of
from refvault.vault.proving import verified_by

if TYPE_CHECKING:
    import duckdb

    from refvault.vault.core import Vault
    from refvault.vault.verified import ArtifactStream

__all__ = [
    "LONG_LINE_CHARS",
    "MATCH_CHARS",
    "MAX_CHARS",
    "MAX_MATCHES",
    "MAX_PATTERN",
    "MAX_SECONDS",
    "grep",
    "run_grep",
    "run_window",
    "window",
]

_BLOCK = 1 << 20
_ESCAPED = re.compile("[\udc80-\udcff]")  # invalid bytes after surrogateescape decoding
_REGEX_SQL = (
    "SELECT i - 1 FROM unnest(string_split(?, chr(10))) WITH ORDINALITY AS t(l, i) "
    "WHERE regexp_matches(l, ?) ORDER BY i"
)
_GREP_REPRESENTATION = (
    "lines matched in the stored bytes (decoded as UTF-8, CRLF as LF, clipped to MATCH_CHARS); the proof covers the "
    "whole object: prove one match with a byte window of its line"
)
_clock = time.monotonic  # tests replace it to drive the time budget deterministically


def _text_artifact(vault: Vault, scope: Scope, artifact_id: str, action: str) -> Descriptor:
    descriptor = readable(vault, scope, artifact_id)
    if not is_text(descriptor.media_type):
        hint = " (query its records with read.query instead)" if is_records(descriptor.media_type) else ""
        raise UnsupportedRead(
            f"cannot {action} artifact {descriptor.artifact_id}: its media type {descriptor.media_type} is not text; "
            f"it is used by reference (pass its id to a tool that takes a Ref parameter){hint}"
        )
    return descriptor


# -- UTF-8 helpers -------------------------------------------------------------------


def _decoder() -> codecs.IncrementalDecoder:
    return codecs.getincrementaldecoder("utf-8")("surrogateescape")


def _shown(text: str) -> tuple[str, int]:
    """Text decoded with surrogateescape, each escaped invalid byte shown as U+FFFD; and how many there were."""
    try:
        text.encode("utf-8")  # fast check: only escaped invalid bytes (lone surrogates) fail to encode
    except UnicodeEncodeError:
        return _ESCAPED.subn("\ufffd", text)
    return text, 0


def _byte_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))


def _char_at(buf: bytes, q: int) -> int:
    """Length of the valid multi-byte UTF-8 character starting at ``buf[q]``, or 0."""
    lead = buf[q]
    n = 2 if 0xC2 <= lead <= 0xDF else 3 if 0xE0 <= lead <= 0xEF else 4 if 0xF0 <= lead <= 0xF4 else 0
    if n == 0 or q + n > len(buf):
        return 0
    try:
        buf[q : q + n].decode("utf-8")
    except UnicodeDecodeError:
        return 0
    return n


def _straddling(buf: bytes, p: int) -> tuple[int, int] | None:
    """``(start, end)`` of the character that ``p`` falls inside, if ``p`` is not a character boundary.

    Invalid bytes are one-byte units, so only a valid multi-byte character can be
    split; it starts at most three bytes before ``p`` (UTF-8 is self-synchronising).
    """
    for q in range(max(0, p - 3), min(p, len(buf))):
        n = _char_at(buf, q)
        if n and q + n > p:
            return q, q + n
    return None


# -- window --------------------------------------------------------------------------


def window(
    vault: VaultContract,
    scope: Scope,
    artifact_id: str,
    *,
    lines: Sequence[int | None] | None = None,
    byte_range: Sequence[int] | None = None,
    max_chars: int = DEFAULT_WINDOW_CHARS,
    purpose: str = DEFAULT_PURPOSE,
    recipient: str = DEFAULT_RECIPIENT,
) -> dict[str, Any]:
    """A window of a text artifact: lines ``[start, end)`` or bytes ``[offset, offset + length)``.

    Pass ``lines`` or ``byte_range`` (neither: lines from 0 to the end). At most
    ``max_chars`` characters are returned (whole lines in a line window); a line
    longer than ``max_chars`` returns its head as a byte window (``unit: "bytes"``)
    whose ``next`` continues inside the line. ``next`` holds the arguments for the
    following window (None at the end of the artifact).
    """
    request = WindowRequest(
        lines=lines, byte_range=byte_range, max_chars=max_chars, purpose=purpose, recipient=recipient
    )
    return vault.read_selection(
        scope, artifact_id, request, lambda local: run_window(local, scope, artifact_id, request)
    )


@tracing.selection("refvault.window")
def run_window(vault: Vault, scope: Scope, artifact_id: str, request: WindowRequest) -> dict[str, Any]:
    """:func:`window` on an embedded vault (the engine a server runs for its clients).

    The result carries ``proof``, the inclusion proof (:mod:`refvault.proofs`) of the stored bytes the text
    was decoded from (``proof["offset"]``, ``proof["length"]``), and ``verified_by``. With
    ``invalid_utf8_bytes`` 0 those bytes are ``text.encode("utf-8")``; otherwise ``excerpt_base64`` holds them.
    """
    vault = acting(vault, request.purpose, request.recipient)
    with engine_read():  # the ledger records the text returned (below), not every byte read to find it
        descriptor = _text_artifact(vault, scope, artifact_id, "show a text window of")
        limit = request.max_chars
        if (byte_span := request.byte_span) is not None:
            body = _byte_window(vault, scope, descriptor, *byte_span, limit)
        else:
            body = _line_window(vault, scope, descriptor, *request.line_span, limit)
        proof = body.pop("_proof", None)
        span: tuple[int, int] = body.pop("_span")
        if proof is None:
            proof = vault.prove_range(scope, descriptor.artifact_id, span[0], span[1] - span[0])
        if body["invalid_utf8_bytes"]:
            raw = vault.read_range(scope, descriptor.artifact_id, span[0], span[1] - span[0])
            body["excerpt_base64"] = base64.b64encode(raw).decode("ascii")
    # the proof's head and tail are stored bytes that leave with the text: charged and recorded with it
    head, tail = base64.b64decode(proof["head"]), base64.b64decode(proof["tail"])
    scanned = descriptor.size if request.byte_span is None else body["end"] - body["start"] + len(head) + len(tail)
    tokens = vault.count_tokens(body["text"]) + vault.count_tokens(head + tail) if vault.budgeted(scope) else 0
    charge(vault, scope, read_calls=1, scanned_bytes=scanned, returned_tokens=tokens)  # before it is returned
    excerpt, size = excerpt_of(body["text"])  # of the text alone; ``bytes`` counts the proof's edges too
    selection = f"window {body['unit']} {body['start']}-{body['end']} proof edges {len(head)}+{len(tail)}"
    vault.audit_read(
        "window", scope, descriptor, selection=selection, excerpt_hash=excerpt, bytes=size + len(head) + len(tail)
    )
    proved = {"proof": proof, "verified_by": verified_by("stored bytes [proof.offset, proof.offset + proof.length)")}
    return {"status": "ok", **coverage(descriptor), "media_type": descriptor.media_type, **body, **proved}


def _body(
    unit: str, start: int, end: int, total: int, truncated: bool, nxt: dict[str, Any] | None, raw: str
) -> dict[str, Any]:
    text, invalid = _shown(raw)
    return {
        "unit": unit,
        "start": start,
        "end": end,
        "returned": end - start,
        "total": total,
        "truncated": truncated,
        "next": nxt,
        "text": text,
        "invalid_utf8_bytes": invalid,
    }


def _byte_window(vault: Vault, scope: Scope, d: Descriptor, offset: int, length: int, limit: int) -> dict[str, Any]:
    size = d.size
    offset = min(offset, size)
    wanted = min(offset + length, size)
    cap = 4 * limit + 8  # more bytes than ``limit`` characters can occupy
    target = min(wanted, offset + cap)
    lo, hi = max(0, offset - 3), min(size, target + 8)
    proved = vault.read_proved(scope, d.artifact_id, lo, hi - lo)
    buf = proved.data
    start = offset if (cut := _straddling(buf, offset - lo)) is None else cut[1] + lo
    end = target if (cut := _straddling(buf, target - lo)) is None else cut[0] + lo
    if end <= start < size:  # too short for the character at its start: return that one character
        end = start + max(1, _char_at(buf, start - lo))
    end = max(end, start)
    raw = buf[start - lo : end - lo].decode("utf-8", "surrogateescape")
    truncated = len(raw) > limit
    if len(raw) > limit:
        raw = raw[:limit]
        end = start + _byte_len(raw)
    if truncated:
        nxt: dict[str, Any] | None = {"byte_range": [end, wanted - end]}
    else:
        nxt = {"byte_range": [end, length]} if end < size else None
    body = _body("bytes", start, end, size, truncated, nxt, raw)
    return {**body, "_span": (start, end), "_proof": proved.prove(start, end - start)}


def _after_newlines(data: bytes, n: int) -> int | None:
    """Index just after the ``n``-th newline in ``data`` (0 for ``n == 0``), or None if it has fewer."""
    if n == 0:
        return 0
    if data.count(b"\n") < n:
        return None
    low, high = 1, len(data)  # bisect on C-speed counts: no per-line Python work, no per-line objects
    while low < high:
        middle = (low + high) // 2
        if data.count(b"\n", 0, middle) >= n:
            high = middle
        else:
            low = middle + 1
    return low


def _seek_line(stream: ArtifactStream, n: int) -> tuple[int | None, int]:
    """Byte offset just after the ``n``-th newline (where line ``n`` starts), or None; and newlines counted."""
    pos = seen = 0
    while n and (block := stream.read(_BLOCK)):
        found = _after_newlines(block, n - seen)
        if found is not None:
            return pos + found, n
        seen += block.count(b"\n")
        pos += len(block)
    return (0, 0) if n == 0 else (None, seen)


def _collect(stream: ArtifactStream, lines: int | None, cap: int) -> tuple[bytes, bool]:
    """From the stream position: the bytes of ``lines`` lines (None: to the end), at most ``cap``; capped?

    The stream is left just after the bytes returned.
    """
    out, origin = bytearray(), stream.tell()
    while len(out) < cap:
        block = stream.read(min(_BLOCK, cap - len(out)))
        if not block:
            return bytes(out), False
        if lines is not None:
            found = _after_newlines(block, lines)
            if found is not None:
                out += block[:found]
                stream.seek(origin + len(out))
                return bytes(out), False
            lines -= block.count(b"\n")
        out += block
    return bytes(out), True


def _count_rest(stream: ArtifactStream) -> tuple[int, int | None]:
    """Newlines from the stream position to the end, and the offset of the first one."""
    count, first, pos = 0, None, stream.tell()
    while block := stream.read(_BLOCK):
        if first is None and (i := block.find(b"\n")) >= 0:
            first = pos + i
        count += block.count(b"\n")
        pos += len(block)
    return count, first


def _ends_open(stream: ArtifactStream, size: int) -> int:
    """1 if the artifact's last line has no newline (so it counts as a line), else 0."""
    if size == 0:
        return 0
    stream.seek(size - 1)
    return 0 if stream.read(1) == b"\n" else 1


def _line_window(vault: Vault, scope: Scope, d: Descriptor, start: int, stop: int | None, limit: int) -> dict[str, Any]:
    size = d.size
    with vault.stream(scope, d.artifact_id) as stream:
        begin, seen = _seek_line(stream, start)
        if begin is None or begin >= size:
            total = seen + _ends_open(stream, size)
            return {**_body("lines", total, total, total, False, None, ""), "_span": (size, size)}
        stream.seek(begin)
        head, capped = _collect(stream, None if stop is None else stop - start, 4 * limit + 8)
        rest, first_newline = _count_rest(stream)
        total = start + head.count(b"\n") + rest + _ends_open(stream, size)
    raw = _decoder().decode(head, final=not capped)
    if not capped and len(raw) <= limit:
        end = start + raw.count("\n") + (0 if raw.endswith("\n") else 1)
        nxt = None if stop is None or end >= total else {"lines": [end, end + stop - start]}
        return {**_body("lines", start, end, total, False, nxt, raw), "_span": (begin, begin + _byte_len(raw))}
    cut = raw.rfind("\n", 0, limit) + 1
    if cut:
        end = start + raw.count("\n", 0, cut)
        body = _body("lines", start, end, total, True, {"lines": [end, stop]}, raw[:cut])
        return {**body, "_span": (begin, begin + _byte_len(raw[:cut]))}
    # One line longer than max_chars: its head, continued as a byte window inside the line.
    in_head = head.find(b"\n")
    line_end = begin + in_head + 1 if in_head >= 0 else size if first_newline is None else first_newline + 1
    end = begin + _byte_len(raw[:limit])
    body = _body("bytes", begin, end, size, True, {"byte_range": [end, line_end - end]}, raw[:limit])
    return {**body, "_span": (begin, end)}


# -- grep ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Piece:
    """Decoded lines from the artifact: whole lines (``segment`` None) or one segment of a long line."""

    line: int  # number of the (first) line
    text: str  # whole lines joined by "\n" without terminators, or one segment; invalid bytes as U+FFFD
    segment: int | None = None  # index of this segment within its line
    last: bool = True  # a segment that ends its line


def _clean(text: str) -> str:
    """Complete lines (the final newline already removed): drop CRLF carriage returns, show invalid bytes."""
    if text.endswith("\r"):
        text = text[:-1]
    return _shown(text.replace("\r\n", "\n"))[0]


def _pieces(stream: ArtifactStream, line: int, meter: ScanMeter) -> Iterator[_Piece]:
    """Decode from the stream position (the start of ``line``) in batches of whole lines, bounded in memory.

    Where the run's budget cut the bytes (``meter.cut``) the rest is not a line's end: it is not yielded.
    """
    decoder, carry, segment = _decoder(), "", 0
    while True:
        block = stream.read(_BLOCK)
        if not block and meter.cut:
            return
        text = carry + decoder.decode(block, final=not block)
        cut = text.rfind("\n")
        carry = text if cut < 0 else text[cut + 1 :]
        if cut >= 0:
            done: str | None = text[:cut]
            if segment:  # the first newline ends a long line
                ends = text.find("\n")
                yield _Piece(line, _clean(text[:ends]), segment)
                line, segment = line + 1, 0
                done = text[ends + 1 : cut] if ends < cut else None
            if done is not None:
                yield _Piece(line, _clean(done))
                line += done.count("\n") + 1
        if not block:
            if carry or segment:
                yield _Piece(line, _clean(carry), segment if segment else None)
            return
        if len(carry) > LONG_LINE_CHARS:
            yield _Piece(line, _shown(carry)[0], segment, last=False)
            carry, segment = "", segment + 1


def _match(line: int, text: str) -> dict[str, Any]:
    return {"line": line, "text": text[:MATCH_CHARS], "line_truncated": len(text) > MATCH_CHARS}


@dataclass
class _Scan:
    """One grep call's state: matches so far, where the scan stands, and why it stopped."""

    pattern: str
    regex: bool
    quota: int
    deadline: float
    con: duckdb.DuckDBPyConnection | None
    matches: list[dict[str, Any]] = field(default_factory=list)
    done_to: int = 0  # lines before this one are fully decided
    partial: int = 0  # lines a regex saw only in part
    stopped: bool = False  # time budget or match cap: the rest was not scanned
    truncated: bool = False
    head: str = ""  # start of the current long line
    hit: bool = False  # the current long line has matched
    tail: str = ""  # overlap carried between a long line's segments (literal search)
    tokens: TokenMeter | None = None  # the run's returned_tokens budget, when it has one
    by_budget: bool = False  # the run's budget stopped the scan

    def feed(self, piece: _Piece) -> None:
        if _clock() >= self.deadline:
            self.stopped = True
        elif piece.segment is None:
            self._lines(piece)
        else:
            self._segment(piece)

    def _lines(self, piece: _Piece) -> None:
        found = self._search(piece.text)
        if found is None:
            self.stopped = True  # interrupted by the time budget
            return
        texts = piece.text.split("\n") if found else []
        for index in found:
            if self._add(_match(piece.line + index, texts[index])):
                return
        self.done_to = piece.line + piece.text.count("\n") + 1

    def _segment(self, piece: _Piece) -> None:
        """One segment of a line too long to hold whole: literal search runs over every segment
        (overlapping by ``len(pattern) - 1``); a regex sees only the first segment, and the line counts as
        partial unless a match ends inside it."""
        if piece.segment == 0:
            self.head, self.hit, self.tail = piece.text[: MATCH_CHARS + 1], False, ""
        if not self.hit and self.regex and piece.segment:
            self.partial += piece.last  # counted once, when the unsearched line ends
        elif not self.hit:
            found = (
                self._regex(piece.text, _inside(self.pattern)) if self.regex else self._literal(self.tail + piece.text)
            )
            if found is None:
                self.stopped = True
                return
            if found:
                self.hit, self.done_to = True, piece.line + 1  # the line is decided
                if self._add({"line": piece.line, "text": self.head[:MATCH_CHARS], "line_truncated": True}):
                    return
        keep = len(self.pattern) - 1
        self.tail = (self.tail + piece.text)[-keep:] if keep else ""
        if piece.last:
            self.done_to = piece.line + 1

    def _add(self, match: dict[str, Any]) -> bool:
        """Record a match; True when the match cap is reached (the scan stops after this line) or the run's
        returned_tokens budget has no room for it (the scan stops before this line)."""
        if self.tokens is not None and not self.tokens.take(match["text"]):
            self.done_to, self.stopped, self.by_budget = match["line"], True, True
            return True
        self.matches.append(match)
        if len(self.matches) < self.quota:
            return False
        self.done_to, self.stopped, self.truncated = match["line"] + 1, True, True
        return True

    def _search(self, text: str) -> list[int] | None:
        """Indexes of the lines of ``text`` that match (None: interrupted by the time budget)."""
        return self._regex(text) if self.regex else self._literal(text)

    def _literal(self, text: str) -> list[int]:
        found: list[int] = []
        line, pos, at = 0, 0, text.find(self.pattern)
        while at >= 0 and len(found) < self.quota - len(self.matches):
            line += text.count("\n", pos, at)
            found.append(line)
            pos = text.find("\n", at)
            at = -1 if pos < 0 else text.find(self.pattern, pos)
        return found

    def _regex(self, text: str, pattern: str | None = None) -> list[int] | None:
        import duckdb

        assert self.con is not None
        timer = threading.Timer(max(0.0, self.deadline - _clock()), self.con.interrupt)
        timer.start()
        try:
            rows = self.con.execute(_REGEX_SQL, [text, pattern or self.pattern]).fetchall()
        except duckdb.InterruptException:
            return None
        except duckdb.Error:  # its message may quote the text: never pass it on
            raise RefvaultError(f"the regular expression {self.pattern!r} failed while scanning") from None
        finally:
            timer.cancel()
            timer.join()
        return [int(row[0]) for row in rows]


def _inside(pattern: str) -> str:
    """``pattern`` followed by one more character of any kind.

    Searching the first segment of a long line with it finds exactly the line's
    matches that end inside the segment: every assertion (``$``, ``\\b``) then sees
    the same neighbours as in the whole line, so a cut segment never fakes a match.
    """
    return f"(?:{pattern})(?s:.)"


def _connect(pattern: str) -> duckdb.DuckDBPyConnection:
    """A private in-memory DuckDB connection, after checking that RE2 accepts ``pattern``."""
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        con.execute("SELECT regexp_matches('', ?), regexp_matches('', ?)", [pattern, _inside(pattern)]).fetchall()
    except duckdb.Error as exc:  # checked against an empty string: the message can only quote the pattern
        con.close()
        reason = str(exc).split(":", 1)[-1].strip()[:200]
        raise InvalidArgument(f"invalid regular expression {pattern!r} (RE2 syntax): {reason}") from None
    return con


def grep(
    vault: VaultContract,
    scope: Scope,
    artifact_id: str,
    pattern: str,
    *,
    regex: bool = False,
    max_matches: int = DEFAULT_GREP_MATCHES,
    from_line: int = 0,
    max_seconds: float = DEFAULT_GREP_SECONDS,
    purpose: str = DEFAULT_PURPOSE,
    recipient: str = DEFAULT_RECIPIENT,
) -> dict[str, Any]:
    """Lines of a text artifact that contain ``pattern`` (case-sensitive), with zero-based line numbers.

    Literal substring by default; ``regex=True`` uses RE2 syntax (linear time, no
    backtracking) through DuckDB. The scan stops at ``max_matches`` (``truncated``)
    or after ``max_seconds`` (``scan_complete`` false); ``next`` holds the
    ``from_line`` to resume from. Absence of matches is claimed only when
    ``scan_complete`` is true.
    """
    request = GrepRequest(
        pattern,
        regex=regex,
        max_matches=max_matches,
        from_line=from_line,
        max_seconds=max_seconds,
        purpose=purpose,
        recipient=recipient,
    )
    return vault.read_selection(scope, artifact_id, request, lambda local: run_grep(local, scope, artifact_id, request))


@tracing.selection("refvault.grep")
def run_grep(vault: Vault, scope: Scope, artifact_id: str, request: GrepRequest) -> dict[str, Any]:
    """:func:`grep` on an embedded vault (the engine a server runs for its clients)."""
    vault = acting(vault, request.purpose, request.recipient)
    checked, regex, first = request.pattern, request.regex, request.from_line
    with engine_read():  # the ledger records the matches returned (below), not every line scanned
        descriptor = _text_artifact(vault, scope, artifact_id, "grep")
        con = _connect(checked) if regex else None
        try:
            tokens = request.max_matches * MATCH_CHARS  # the most its matches can cost
            meter = ScanMeter.start(vault, scope, descriptor.size, request.max_seconds, tokens=tokens)
            scan = _Scan(checked, regex, request.max_matches, _clock() + meter.seconds, con, done_to=first)
            scan.tokens = meter.tokens
            total = _run(vault, scope, descriptor, scan, first, meter)
        finally:
            if con is not None:
                con.close()
        meter.settle()
        proved = whole_object_proof(vault, scope, descriptor, _GREP_REPRESENTATION)
    complete = total is not None and scan.partial == 0
    scanned = scan.done_to - first if total is None else max(0, total - first)
    stopped_by = (
        None if complete else "budget" if scan.by_budget or meter.cut else "matches" if scan.truncated else "time"
    )
    # the matched lines' text, one per line: what left (never the pattern, which is the caller's text)
    excerpt, size = excerpt_of("\n".join(str(match["text"]) for match in scan.matches))
    vault.audit_read(
        "grep",
        scope,
        descriptor,
        selection=f"grep lines {first}-{first + scanned} matches={len(scan.matches)}",
        excerpt_hash=excerpt,
        bytes=size,
        records=len(scan.matches),
    )
    return {
        "status": "ok",
        **coverage(descriptor),
        "pattern": checked,
        "regex": regex,
        "from_line": first,
        "matches": scan.matches,
        "returned": len(scan.matches),
        "scanned_lines": scanned,
        "total_lines": total,
        "scan_complete": complete,
        "stopped_by": stopped_by,
        "scanned_bytes": meter.scanned,
        "partial_lines": scan.partial,
        "truncated": scan.truncated,
        "next": {"from_line": scan.done_to} if total is None else None,
        **proved,
    }


def _run(vault: Vault, scope: Scope, d: Descriptor, scan: _Scan, first: int, meter: ScanMeter) -> int | None:
    """Feed the artifact's lines from ``first`` to ``scan``; the total line count if the scan reached the end.

    The run's scanned_bytes budget caps the bytes read (``meter``): a scan it cuts stops, undecided lines unfed.
    """
    with vault.stream(scope, d.artifact_id) as opened:
        stream = meter.wrap(opened)
        begin, seen = _seek_line(stream, first)
        if meter.cut:
            return None
        if begin is None or begin >= d.size:
            return seen + _ends_open(stream, d.size)
        stream.seek(begin)
        line = first
        for piece in _pieces(stream, first, meter):
            scan.feed(piece)
            if scan.stopped:
                return None
            line = piece.line + (piece.text.count("\n") + 1 if piece.segment is None else int(piece.last))
        return None if meter.cut else line
