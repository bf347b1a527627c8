"""The leak guard: protected bytes, the two arms, the policies and the event.

See :mod:`refvault.guard` for the invariants and :mod:`refvault.guard.fingerprints`
for the matching guarantee.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

import numpy as np

from refvault.errors import ContextLeak, InvalidArgument
from refvault.guard.fingerprints import MIN_MATCH_RANGE, FingerprintIndex, Match, Params, base64_runs
from refvault.guard.requests import Leaf, View, decode_base64, views, walk

if TYPE_CHECKING:
    from refvault.model import Scope

__all__ = ["EVENT", "Finding", "LeakGuard", "Policy", "marker"]

Policy = Literal["raise", "redact"]
EVENT: Final = "llm.context_leak"
_LOGGER: Final = logging.getLogger("refvault.guard")
_BATCH_BYTES: Final = 16 << 20  # protect_many hashes up to this much per kernel call
_MAX_ADMITTED: Final = 10_000  # payloads admitted past the size arm, most recent kept
_DATA_URL_HEAD: Final = re.compile(r"data:[^,;]*(?:;[^,;]*)*;base64,", re.IGNORECASE)


def marker(artifact_id: str) -> str:
    """What a redacted span becomes."""
    return f"[refvault:{artifact_id}]"


@dataclass(frozen=True, slots=True)
class Finding:
    """Protected content (or an oversized payload) at one site of a request. Never holds the content.

    ``artifact_id`` is None for the size arm; ``matched`` is the bytes matched (content arm: an upper
    bound of the verbatim span, at least ``min_match``) or the payload's size (size arm).
    """

    site: str
    artifact_id: str | None
    matched: int
    arm: Literal["content", "size"]

    def to_dict(self) -> dict[str, Any]:
        return {"site": self.site, "artifact_id": self.artifact_id, "matched": self.matched, "arm": self.arm}


class _Sealed(Protocol):
    @property
    def artifact_id(self) -> str: ...

    @property
    def disclosure(self) -> str: ...


class _VaultLike(Protocol):
    def list(self, scope: Scope) -> Sequence[_Sealed]: ...

    def read_bytes(self, scope: Scope, artifact_id: str) -> bytes: ...


@dataclass(slots=True)
class _LeafHits:
    """Content hits of one leaf: spans of its raw bytes to redact, and matched bytes per artifact."""

    leaf: Leaf
    raw: bytes
    spans: list[tuple[int, int, str]]
    whole: set[str]
    cover: dict[tuple[str, int], list[tuple[int, int]]]  # (artifact, piece) -> matched extents in that piece

    @property
    def matched(self) -> dict[str, int]:
        """Bytes matched per artifact: the most any one view of the leaf has (the union of its extents)."""
        best: dict[str, int] = {}
        for (owner, _), extents in self.cover.items():
            total, reach = 0, -1
            for start, end in sorted(extents):
                if end > reach:
                    total += end - max(start, reach)
                    reach = end
            best[owner] = max(best.get(owner, 0), total)
        return best


class _Piece:
    """What one stretch of the scanned buffer is: (part of) a view of a leaf."""

    __slots__ = ("data", "leaf", "offset", "origin", "view")

    def __init__(
        self, leaf: int, view: View, data: bytes, offset: int = 0, origin: tuple[int, int] | None = None
    ) -> None:
        self.leaf = leaf
        self.view = view
        self.data = data
        self.offset = offset  # where ``data`` starts in the view
        self.origin = origin  # a decoded base64 run: the raw span a hit redacts


class LeakGuard:
    """Refuses (or redacts) outgoing LLM requests that carry protected bytes or oversized tool payloads.

    ``min_match``: every verbatim span of at least this many protected bytes is found (32 to 2**20).
    ``size_threshold``: tool output, tool-call arguments and data payloads of at least this many bytes
    are flagged. ``policy``: ``"raise"`` (:class:`ContextLeak`) or ``"redact"`` (a redacted copy).
    """

    def __init__(self, min_match: int = 64, size_threshold: int = 128 * 1024, *, policy: Policy = "raise") -> None:
        if isinstance(min_match, bool) or not isinstance(min_match, int):
            raise InvalidArgument("min_match must be an integer")
        if not MIN_MATCH_RANGE[0] <= min_match <= MIN_MATCH_RANGE[1]:
            raise InvalidArgument(f"min_match must be between {MIN_MATCH_RANGE[0]} and {MIN_MATCH_RANGE[1]}")
        if isinstance(size_threshold, bool) or not isinstance(size_threshold, int) or size_threshold < 1:
            raise InvalidArgument("size_threshold must be a positive integer")
        if policy not in ("raise", "redact"):
            raise InvalidArgument("policy must be 'raise' or 'redact'")
        self.min_match = min_match
        self.size_threshold = size_threshold
        self.policy: Policy = policy
        self.params = Params.for_min_match(min_match)
        # A string of fewer characters has fewer than this * 4 UTF-8 bytes: neither arm can flag it.
        self._min_chars = max(1, min(self.params.threshold, size_threshold) // 4)
        self._index = FingerprintIndex(self.params)
        self._lock = threading.Lock()
        self._seen: set[tuple[str, bytes]] = set()  # in the index
        self._admitted: dict[bytes, None] = {}  # digests of payloads admitted past the size arm (insertion order)
        self._pending: dict[tuple[str, bytes], threading.Event] = {}  # being added by some thread

    # -- protecting ------------------------------------------------------------------------------------------------

    def protect(self, artifact_id: str, data: bytes | str) -> None:
        """Protect ``data`` (str: its UTF-8) under ``artifact_id``. Protecting the same bytes again is a no-op."""
        self.protect_many([(artifact_id, data)])

    def protect_many(self, items: Iterable[tuple[str, bytes | str]]) -> int:
        """Protect many ``(artifact_id, data)`` at once (hashed in large batches); return how many were new.

        Returns only once every item is in the index: bytes another thread is protecting right now are
        waited for (and protected here if that thread fails).
        """
        batch: list[tuple[str, bytes]] = []
        keys: list[tuple[str, bytes]] = []
        waits: list[tuple[threading.Event, tuple[str, bytes], str, bytes]] = []
        size = 0
        added = 0
        try:
            for artifact_id, data in items:
                raw = _checked(artifact_id, data)
                key = (artifact_id, hashlib.blake2b(raw, digest_size=16).digest())
                with self._lock:
                    if key in self._seen:
                        continue
                    pending = self._pending.get(key)
                    if pending is not None:
                        waits.append((pending, key, artifact_id, raw))
                        continue
                    self._pending[key] = threading.Event()
                batch.append((artifact_id, raw))
                keys.append(key)
                size += len(raw)
                added += 1
                if size >= _BATCH_BYTES:
                    self._add(batch, keys)
                    batch, keys, size = [], [], 0
            self._add(batch, keys)
        except BaseException:
            with self._lock:  # claimed but never added (an invalid item, say): let others go on
                for key in keys:
                    event = self._pending.pop(key, None)
                    if event is not None:
                        event.set()
            raise
        for event, key, artifact_id, raw in waits:
            event.wait()
            with self._lock:
                done = key in self._seen
            if not done:  # the other thread failed: protect them here
                added += self.protect_many([(artifact_id, raw)])
        return added

    def _add(self, batch: list[tuple[str, bytes]], keys: list[tuple[str, bytes]]) -> None:
        ok = False
        try:
            self._index.add(batch)
            ok = True
        finally:
            with self._lock:  # on failure not protected after all: a later protect() must try again
                for key in keys:
                    if ok:
                        self._seen.add(key)
                    event = self._pending.pop(key, None)
                    if event is not None:
                        event.set()

    def protect_scope(self, vault: _VaultLike, scope: Scope) -> int:
        """Protect every sealed artifact of ``scope`` (``vault.list`` / ``vault.read_bytes``); return their number."""
        sealed = [d.artifact_id for d in vault.list(scope) if d.disclosure == "sealed"]
        self.protect_many((artifact_id, vault.read_bytes(scope, artifact_id)) for artifact_id in sealed)
        return len(sealed)

    def exempt_payload(self, payload: str) -> None:
        """Let this exact base64 ``payload`` (as a field or in a data URL) past the size arm; the content arm stays.

        For content the model asked for on purpose: the Toolbox admits every
        image ``load_artifacts`` loads (a model-disclosed artifact, up to its own
        cap), so a framework that sends it as a data URL is not refused for its
        size. Matching ignores the base64 alphabet (standard or URL-safe) and
        padding; the most recent 10,000 payloads are remembered.
        """
        digest = _payload_digest(payload)
        with self._lock:
            self._admitted.pop(digest, None)
            self._admitted[digest] = None
            while len(self._admitted) > _MAX_ADMITTED:
                del self._admitted[next(iter(self._admitted))]

    # -- checking --------------------------------------------------------------------------------------------------

    def scan(self, request: object) -> list[Finding]:
        """Findings of both arms for ``request`` (a dict, list, str, bytes or SDK model); empty if it is clean."""
        leaves = _collect(request, self._min_chars)
        return self._findings(leaves, self._content(leaves))

    def check(self, request: object) -> object:
        """``request`` itself if clean; else raise :class:`ContextLeak` or return a redacted copy (per policy)."""
        leaves = _collect(request, self._min_chars)
        hits = self._content(leaves)
        findings = self._findings(leaves, hits)
        if not findings:
            return request
        if self.policy == "raise":
            self._log(findings)
            raise ContextLeak(findings)
        redacted = self._redact(request, leaves, hits, findings)
        self._log(findings)
        return redacted

    def redact_text(self, text: str) -> tuple[str, list[Finding]]:
        """``text`` with protected spans replaced by ``[refvault:<artifact_id>]``, and the findings (site ``text``).

        Returns ``text`` itself when nothing was found. Does not log (the caller decides).
        """
        leaves = [Leaf("text", "text", text, None)]
        hits = self._content(leaves)
        if not hits:
            return text, []
        findings = self._findings(leaves, hits)
        redacted = _redact_leaf(hits[0], None)
        for _ in range(2):
            again = self._content([Leaf("text", "text", redacted, None)])
            if not again:
                return redacted, findings
            redacted = _redact_leaf(again[0], None)
        return _whole_marker(hits[0]), findings

    # -- the arms --------------------------------------------------------------------------------------------------

    def _content(self, leaves: Sequence[Leaf]) -> dict[int, _LeafHits]:
        t = self.params.threshold
        raws: dict[int, bytes] = {}
        pieces: list[_Piece] = []
        for i, leaf in enumerate(leaves):
            value = leaf.value
            if value is None or len(value) * (1 if isinstance(value, bytes) else 4) < t:
                continue
            raw = value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")
            if len(raw) < t:
                continue
            raws[i] = raw
            for view in views(leaf, raw, t):
                if view.windows is None:
                    pieces.append(_Piece(i, view, view.data))
                else:
                    pieces.extend(_Piece(i, view, view.data[a:b], a) for a, b in view.windows if b - a >= t)
        if not pieces:
            return {}
        hits: dict[int, _LeafHits] = {}
        decoded = self._scan_pieces(pieces, leaves, raws, hits, find_base64=True)
        if decoded:
            self._scan_pieces(decoded, leaves, raws, hits, find_base64=False)
        return hits

    def _scan_pieces(
        self,
        pieces: list[_Piece],
        leaves: Sequence[Leaf],
        raws: dict[int, bytes],
        hits: dict[int, _LeafHits],
        *,
        find_base64: bool,
    ) -> list[_Piece]:
        """Match ``pieces``; record hits; return the decoded base64 runs found in their text (to scan next)."""
        buf_bytes = b"".join(p.data for p in pieces)
        buf = np.frombuffer(buf_bytes, np.uint8)
        starts = np.zeros(len(pieces) + 1, np.int64)
        np.cumsum([len(p.data) for p in pieces], out=starts[1:])
        for m in self._index.match(buf, starts):
            self._record(m, pieces[m.piece], int(starts[m.piece]), leaves, raws, hits)
        if not find_base64:
            return []
        min_len = -(-4 * self.params.threshold // 3)
        runs = base64_runs(buf, starts, min_len)
        decoded: list[_Piece] = []
        for j in range(0, runs.size, 2):
            start, end = int(runs[j]), int(runs[j + 1])
            index = int(np.searchsorted(starts, start, side="right")) - 1
            piece = pieces[index]
            if not piece.view.textual:
                continue
            lo = start - int(starts[index]) + piece.offset
            hi = end - int(starts[index]) + piece.offset
            mapping = piece.view.mapping
            origin = (mapping.start(lo), mapping.end(hi)) if mapping else (lo, hi)
            for payload in _base64_payloads(buf_bytes[start:end], self.params.threshold):
                decoded.append(_Piece(piece.leaf, View(payload, None, True, False), payload, 0, origin))
        return decoded

    @staticmethod
    def _record(
        m: Match, piece: _Piece, offset: int, leaves: Sequence[Leaf], raws: dict[int, bytes], hits: dict[int, _LeafHits]
    ) -> None:
        leaf = leaves[piece.leaf]
        entry = hits.get(piece.leaf)
        if entry is None:
            entry = hits[piece.leaf] = _LeafHits(leaf, raws[piece.leaf], [], set(), {})
        entry.cover.setdefault((m.owner, id(piece)), []).append((m.start, m.end))
        if leaf.kind == "data" or (piece.view.whole and piece.origin is None):
            entry.whole.add(m.owner)
        elif piece.origin is not None:
            entry.spans.append((piece.origin[0], piece.origin[1], m.owner))
        else:
            lo, hi = m.start - offset + piece.offset, m.end - offset + piece.offset
            mapping = piece.view.mapping
            if mapping is not None:
                lo, hi = mapping.start(lo), mapping.end(hi)
            entry.spans.append((lo, hi, m.owner))

    def _findings(self, leaves: Sequence[Leaf], hits: dict[int, _LeafHits]) -> list[Finding]:
        findings: list[Finding] = []
        for i, leaf in enumerate(leaves):
            entry = hits.get(i)
            if entry is not None:
                findings.extend(
                    Finding(leaf.site, owner, matched, "content") for owner, matched in entry.matched.items()
                )
            if leaf.size is not None and leaf.size >= self.size_threshold and not self._is_admitted(leaf):
                findings.append(Finding(leaf.site, None, leaf.size, "size"))
        return findings

    def _is_admitted(self, leaf: Leaf) -> bool:
        if leaf.kind != "data" or not isinstance(leaf.value, str) or not self._admitted:
            return False
        digest = _payload_digest(leaf.value)
        with self._lock:
            return digest in self._admitted

    # -- redaction and events --------------------------------------------------------------------------------------

    def _redact(
        self, request: object, leaves: Sequence[Leaf], hits: dict[int, _LeafHits], findings: list[Finding]
    ) -> object:
        oversized = {f.site: f.matched for f in findings if f.arm == "size"}
        by_site = {leaves[i].site: entry for i, entry in hits.items()}

        def replace(leaf: Leaf) -> object:
            if leaf.site in oversized:
                text = f"[refvault:omitted {oversized[leaf.site]} bytes]"
                if leaf.value is None:
                    return {"refvault": text}
                return text.encode() if isinstance(leaf.value, bytes) else text
            entry = by_site.get(leaf.site)
            if entry is None:
                return None
            return _redact_leaf(entry, leaf.value)

        redacted = walk(request, replace, rewrite=True, min_chars=self._min_chars)
        remaining = [f for f in self.scan(redacted) if f.arm == "content"]
        if remaining:  # cannot happen by construction; never send what the guard still sees
            raise ContextLeak(remaining)
        return redacted

    def _log(self, findings: Sequence[Finding]) -> None:
        _LOGGER.warning(
            EVENT,
            extra={"event": EVENT, "findings": [f.to_dict() for f in findings], "policy": self.policy},
        )

    # -- accounting ------------------------------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Counts only: artifacts, protected bytes, fingerprints, index bytes, segments, k, w."""
        return {
            "artifacts": self._index.artifact_count,
            "protected_bytes": self._index.protected_bytes,
            "fingerprints": self._index.fingerprint_count,
            "index_bytes": self._index.nbytes,
            "segments": self._index.segment_count,
            "k": self.params.k,
            "w": self.params.w,
        }

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"LeakGuard(min_match={self.min_match}, size_threshold={self.size_threshold}, policy={self.policy!r}, "
            f"artifacts={s['artifacts']}, protected_bytes={s['protected_bytes']}, "
            f"fingerprints={s['fingerprints']}, index_bytes={s['index_bytes']})"
        )

    def __reduce__(self) -> Any:
        raise TypeError("a LeakGuard cannot be pickled")


def _payload_digest(payload: str) -> bytes:
    """A digest of a base64 payload that ignores a data URL's head, the alphabet (URL-safe or not) and padding."""
    head = _DATA_URL_HEAD.match(payload)
    body = payload[head.end() :] if head else payload
    normal = body.rstrip("=").replace("-", "+").replace("_", "/")
    return hashlib.blake2b(normal.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _checked(artifact_id: str, data: bytes | str) -> bytes:
    if not isinstance(artifact_id, str) or not artifact_id:
        raise InvalidArgument("artifact_id must be a non-empty string")
    if isinstance(data, str):
        return data.encode("utf-8", "surrogatepass")
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise InvalidArgument("protected data must be bytes or str")


_INNER_PADDING: Final = re.compile(rb"=+(?=\s*[^=\s])")
_NOT_ALPHABET: Final = b"\r\n \t="


def _base64_payloads(run: bytes, threshold: int) -> list[bytes]:
    """Decodings of a base64-looking run that may hold a payload of ``threshold`` bytes or more.

    The run is split after inner padding (concatenated padded chunks; ``key=`` glued before the
    payload), and each part is decoded from each of its first four characters: a prefix glued to the
    payload (``blob/``, ``token-``) shifts its alignment by any amount.
    """
    out: list[bytes] = []
    pos = 0
    parts: list[bytes] = []
    for m in _INNER_PADDING.finditer(run):
        parts.append(run[pos : m.end()])
        pos = m.end()
    parts.append(run[pos:])
    min_chars = -(-4 * threshold // 3)
    for part in parts:
        chars = part.translate(None, _NOT_ALPHABET)
        if len(chars) < min_chars:
            continue
        for shift in range(4):
            if len(chars) - shift < min_chars:
                break
            payload = decode_base64(chars[shift:])
            if payload is not None and len(payload) >= threshold:
                out.append(payload)
    return out


def _collect(request: object, min_chars: int) -> list[Leaf]:
    leaves: list[Leaf] = []
    walk(request, leaves.append, min_chars=min_chars)
    return leaves


def _whole_marker(entry: _LeafHits) -> str:
    matched = entry.matched
    owners = sorted(matched, key=lambda o: -matched[o])
    return "".join(marker(o) for o in owners)


def _redact_leaf(entry: _LeafHits, original: str | bytes | None) -> Any:
    """The leaf with its protected spans replaced (the whole leaf for binary payloads)."""
    as_bytes = isinstance(original, bytes)
    if entry.whole or entry.leaf.kind == "data":
        text = _whole_marker(entry)
        return text.encode() if as_bytes else text
    raw = entry.raw
    spans = sorted(entry.spans)
    out: list[bytes] = []
    pos = 0
    i = 0
    while i < len(spans):
        start, end, owner = spans[i]
        best = end - start
        j = i + 1
        while j < len(spans) and spans[j][0] <= end:  # merge overlapping spans; the longest names the marker
            if spans[j][1] - spans[j][0] > best:
                best, owner = spans[j][1] - spans[j][0], spans[j][2]
            end = max(end, spans[j][1])
            j += 1
        if not as_bytes:  # widen to whole UTF-8 characters
            while start > 0 and raw[start] & 0xC0 == 0x80:
                start -= 1
            while end < len(raw) and raw[end] & 0xC0 == 0x80:
                end += 1
        start = max(start, pos)
        out.append(raw[pos:start])
        out.append(marker(owner).encode())
        pos = end
        i = j
    out.append(raw[pos:])
    result = b"".join(out)
    return result if as_bytes else result.decode("utf-8", "surrogatepass")
