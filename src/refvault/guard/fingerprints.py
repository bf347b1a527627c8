"""Winnowed k-gram fingerprints of protected bytes, their index, and the matcher.

The scheme (Schleimer, Wilkerson and Aiken, "Winnowing", SIGMOD 2003):

* Every **k-gram** (``k`` consecutive bytes) has a rolling polynomial hash
  modulo 2^64 with a random odd base, drawn per :class:`FingerprintIndex`.
* A k-gram that repeats itself with a period dividing 12 (a run of one byte,
  ``"\\r\\n"`` or ``"ab"`` repeated, ``"00 "`` repeated, ...) carries no secret
  and gets no fingerprint; nor does one of which at least half the bytes are
  spaces (folded text: indentation, rules and boxes drawn with ``-``, ``|``,
  ``_``, which unrelated texts share). The tests look at the k-gram's own
  bytes only, so they decide the same for the same k-gram wherever it sits.
* Both sides are **folded** first (:func:`fold`): in text, ASCII letters to
  lower case and word separators to a space, so that a copy upper-cased or
  with its spaces turned into ``_`` is the same bytes.
* **Winnowing**: in every window of ``w`` consecutive k-gram positions the
  k-gram with the smallest hash (its high 32 bits; ties: the rightmost) is
  selected. The selection inside a window depends on the window's bytes only.
  A selected k-gram's fingerprint is its hash xored with a random key and
  finalised by MurmurHash3's ``fmix64``: base and key are per index, so a
  dumped index cannot be tested against guessed text outside the process.

The guarantee. Let ``t = w + k - 1``. A span of ``t`` or more bytes that is
verbatim (once folded) in a protected artifact and in the request contains at least one
whole window, and that window selects the same k-gram in both, so the span is
found (unless every k-gram of it is one of the unselectable k-grams above). The
guard uses ``w = min_match // 2`` and ``k = min_match - w + 1``, so
``t = min_match`` exactly: 64 gives ``k = 33``, ``w = 32``.

What is matched, and what is reported. The request is fingerprinted the same
way and each selected k-gram is looked up (all 64 bits must agree). Hits that
lie on one diagonal (same artifact, same offset between request and artifact)
and are at most ``k`` bytes apart form a **chain**: consecutive k-grams
overlap or touch, so every byte from the first hit to the end of the last is
hash-verified identical. The k-grams a span of ``t`` bytes or more selects
from windows inside it are selected in both, consecutively, so they form one
unbroken chain. The chain's **extent** is an upper bound on the verbatim span
around it: the span cannot start ``w`` or more selectable k-gram positions
before the chain's first hit (an earlier window would lie inside the span and
would have selected an earlier k-gram, which would be a hit), nor end
symmetrically after its last; it is also clipped to the request piece and to
the artifact's bounds. A chain is reported when its extent is at least
``min_match`` bytes. So: every verbatim span of ``min_match`` bytes or more is
reported, with ``matched`` between its length and its length + 2(w - 1); a
report always rests on at least ``k`` verified bytes; a span of fewer than
``k`` bytes is never reported, and one of ``k`` to ``min_match - 1`` bytes may
be (the index keeps no bytes, so nothing can tell it from a longer one). A
chain of fewer than ``min_match`` verified bytes lying inside one of more is
dropped (boilerplate shared by artifacts is explained by the long match).

Boilerplate. A fingerprint held more than 64 times in a segment (JSON keys
repeated in every record of many artifacts) is *hot*: a lookup returns its
first 64 entries only, and then looks it up again at the exact coordinates
that the diagonals of nearby hits predict (binary search: entries are sorted
by hash, then coordinate), so a leaked excerpt keeps one unbroken chain
through it. An excerpt made of hot fingerprints only is still found, but
named after at most 64 of the artifacts that hold it.

The index. Per selected k-gram one sorted 64-bit entry (the fingerprint's
high 32 bits and the k-gram's position in a global coordinate: each artifact
has a range) and the fingerprint's low 32 bits, 12 bytes; entries live in
segments (a new batch is a segment; segments merge when the newer one grows
to a quarter of the older, so there are O(log n) of them), each with a bucket
directory (about half a byte per entry) and a blocked Bloom filter (4 to 8
bits per entry), behind one Bloom filter of all entries (8 to 16 bits). A
lookup costs one filter probe; one in about 20 absent fingerprints goes on to
the segments. On text about ``2 / (w + 1)`` of the positions are selected, so
for ``min_match = 64`` the index is about 0.85 bytes per protected byte. It
never holds protected bytes.

The piece arm uses a second index with short k-grams (16 bytes), a ``budget``
(the entries of the most recently added bytes are kept, the oldest forgotten)
and ``unique`` lookups (a fingerprint held more than once names no one place,
so it does not count).

Kernels are compiled by numba (``cache=True``: the first use on a machine compiles
the kernels it reaches, once, and says so; later processes load them from the cache;
``python -m refvault.guard.warm`` compiles them all ahead of time; see
:mod:`refvault.guard.compiling`) and release the GIL, so scans from several
threads run in parallel. They live in :mod:`refvault.guard.kernels`; the fold in
:mod:`refvault.guard.folding`; the finder of base64-looking runs in :mod:`refvault.guard.base64_scan`.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import numpy as np

from refvault.errors import InvalidArgument
from refvault.guard.arrays import I64, U8, U32, U64
from refvault.guard.base64_scan import base64_runs
from refvault.guard.folding import FOLD, FOLD_RUN, fold
from refvault.guard.kernels import (
    PERIOD,
    SEPARATOR,
    bucket_directory,
    chains,
    diagonal_order,
    filter_add,
    lookup,
    merge_runs,
    sorted_run,
    through_hot,
    typed_append,
    typed_list,
    winnow,
)

__all__ = ["FOLD", "FOLD_RUN", "PERIOD", "SEPARATOR", "FingerprintIndex", "Match", "Params", "base64_runs", "fold"]

MIN_MATCH_RANGE: Final = (32, 1 << 20)
_MAX_COORDINATE: Final = (1 << 32) - 1
_MAX_SCAN: Final = 1 << 30
_HOT_ROUNDS: Final = 16
_BUCKET_TARGET: Final = 8  # directory: about this many entries per bucket
_FILTER_BITS_PER_ENTRY: Final = 8  # the filter of all entries has 8 to 16 bits per entry
_SEGMENT_FILTER_BITS_PER_ENTRY: Final = 4  # each segment's own, 4 to 8
_MERGE_RATIO: Final = 4


@dataclass(frozen=True, slots=True)
class Params:
    """``k`` (k-gram length), ``w`` (window) and the guarantee threshold ``t = w + k - 1`` for a ``min_match``."""

    min_match: int
    k: int
    w: int

    @classmethod
    def for_min_match(cls, min_match: int) -> Params:
        w = min_match // 2
        return cls(min_match=min_match, k=min_match - w + 1, w=w)

    @property
    def threshold(self) -> int:
        return self.w + self.k - 1


# -- the index -------------------------------------------------------------------------------------------------------


class _Segment(NamedTuple):
    keys: U64  # sorted: (hash >> 32) << 32 | coordinate
    low: U32  # the hashes' low 32 bits, in the same order
    directory: U32
    bits: int  # directory bits
    filter: U64  # which hashes this segment may hold: a blocked Bloom filter, 4 to 8 bits per entry
    filter_bits: int  # log2 of its words

    @property
    def size(self) -> int:
        return int(self.keys.size)

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.low.nbytes + self.directory.nbytes + self.filter.nbytes)


def _segment(keys: U64, low: U32) -> _Segment:
    bits = max(0, min(32, (max(1, keys.size) // _BUCKET_TARGET).bit_length() - 1))
    filter_bits = min(26, (keys.size * _SEGMENT_FILTER_BITS_PER_ENTRY // 64).bit_length())
    words = np.zeros(1 << filter_bits, np.uint64)
    filter_add(words, filter_bits, keys, low, True)
    return _Segment(keys, low, bucket_directory(keys, bits), bits, words, filter_bits)


class _Snapshot:
    """An immutable view of the index; scans use one while protect() builds the next."""

    __slots__ = ("_typed", "bases", "filter_bits", "filter_words", "lengths", "owners", "segments")

    def __init__(
        self,
        segments: tuple[_Segment, ...],
        filter_words: U64,
        filter_bits: int,
        bases: I64,
        lengths: I64,
        owners: tuple[str, ...],
    ) -> None:
        self.segments = segments
        self.filter_words = filter_words  # a blocked Bloom filter of every entry, 8 to 16 bits per entry
        self.filter_bits = filter_bits  # log2 of its words
        self.bases = bases  # coordinate of each artifact's byte 0 (ascending)
        self.lengths = lengths
        self.owners = owners  # artifact id of each entry of ``bases``
        self._typed: tuple[Any, Any, Any, Any, I64] | None = None

    def typed(self) -> tuple[Any, Any, Any, Any, I64]:
        """The segments' arrays as numba typed lists (built on the first scan of this snapshot)."""
        typed = self._typed
        if typed is None:
            typed = (
                _typed([s.keys for s in self.segments]),
                _typed([s.low for s in self.segments]),
                _typed([s.directory for s in self.segments]),
                _typed([s.filter for s in self.segments]),
                np.array([(s.bits, s.filter_bits) for s in self.segments], np.int64).reshape(-1, 2),
            )
            self._typed = typed  # a race builds it twice, harmlessly
        return typed


def _typed(arrays: list[Any]) -> Any:
    """The arrays (at least one) as a numba typed list."""
    items = typed_list(arrays[0])
    for array in arrays[1:]:
        typed_append(items, array)
    return items


class Match(NamedTuple):
    """A reported chain: piece, protected entry, and the matched extent ``[start, end)`` in the scanned buffer."""

    piece: int
    owner: str
    start: int
    end: int
    verified: int  # bytes from the chain's first hit to the end of its last (hash-verified)
    coord: int  # the protected coordinate of the chain's first verified byte (unique per index)


class Fingerprints(NamedTuple):
    positions: I64
    hashes: U64


class FingerprintIndex:
    """Fingerprints of protected bytes, with their artifact ids; never the bytes. Thread-safe."""

    def __init__(self, params: Params, *, budget: int | None = None, unique: bool = False) -> None:
        """``budget``: keep only the entries of the most recently added bytes, at least ``budget`` of them
        (once more than twice that is held, the oldest are forgotten down to it); None: keep everything.
        ``unique``: :meth:`match` uses only fingerprints the index holds exactly once (no boilerplate, no
        repeats), so that each chain names one protected place (the piece arm, which counts protected
        bytes); such an index never follows boilerplate by coordinate, so it sorts by hash only."""
        self.params = params
        self.budget = budget
        self.unique = unique
        self._base = np.uint64(secrets.randbits(64) | 1)
        self._key = np.uint64(secrets.randbits(64))
        self._build_lock = threading.Lock()
        self._next_coordinate = 0
        self._protected_bytes = 0
        self._artifacts = 0
        self._held: list[tuple[int, int]] = []  # with a budget: (end coordinate, bytes) of each entry held
        self._held_bytes = 0
        self._waiting: list[tuple[U64, I64]] = []  # fingerprints added, not yet sorted in: (hashes, coordinates)
        self._waiting_count = 0
        self._generation = 0  # changes whenever what the index holds changes
        self._snapshot = _Snapshot((), np.zeros(1, np.uint64), 0, np.zeros(0, np.int64), np.zeros(0, np.int64), ())

    # -- building --------------------------------------------------------------------------------------------------

    def fingerprint(self, buf: U8, starts: I64) -> Fingerprints:
        """Winnowed fingerprints of each piece ``buf[starts[i]:starts[i+1]]`` (positions are into ``buf``)."""
        k, w = self.params.k, self.params.w
        room = buf.size * 5 // (2 * w + 2) + 64  # selections are about 2 / (w + 1) of the positions
        while True:
            pos = np.empty(room, np.int64)
            hashes = np.empty(room, np.uint64)
            count = winnow(buf, starts, k, w, self._base, self._key, pos, hashes)
            if count >= 0:
                return Fingerprints(pos[:count], hashes[:count])
            room = buf.size + 1

    def add(self, items: Sequence[tuple[str, bytes]], *, counted: bool = True) -> int:
        """Index each ``(owner, data)``, folded (:func:`fold`); return the number of fingerprints added.

        ``counted`` False: further forms of owners already added (their Unicode normalisation), indexed
        the same way but not counted as artifacts or protected bytes. With a ``budget``, sorting the
        fingerprints into the index is left to the next :meth:`match`: many small adds in a row are
        sorted once, and what the budget drops meanwhile never is.
        """
        entries = list(items)
        if not entries:
            return 0
        lengths = np.fromiter((len(data) for _, data in entries), np.int64, len(entries))
        starts = np.zeros(len(entries) + 1, np.int64)
        np.cumsum(lengths, out=starts[1:])
        buf = fold(np.frombuffer(b"".join(data for _, data in entries), np.uint8), starts)
        found = self.fingerprint(buf, starts)  # outside the lock: hashing is the expensive part
        with self._build_lock:
            snap = self._snapshot
            # Each entry gets a coordinate range with a gap of k, so no chain runs from one into the next.
            bases = self._next_coordinate + starts[:-1] + np.arange(len(entries), dtype=np.int64) * self.params.k
            end = int(bases[-1] + lengths[-1])
            if end > _MAX_COORDINATE:
                raise InvalidArgument("a leak guard indexes at most 4 GiB of protected bytes")
            piece = np.searchsorted(starts, found.positions, side="right") - 1
            self._waiting.append((found.hashes, found.positions - starts[piece] + bases[piece]))
            self._waiting_count += int(found.positions.size)
            self._generation += 1
            self._snapshot = _Snapshot(
                snap.segments,
                snap.filter_words,
                snap.filter_bits,
                np.concatenate([snap.bases, bases]),
                np.concatenate([snap.lengths, lengths]),
                snap.owners + tuple(owner for owner, _ in entries),
            )
            self._next_coordinate = end + self.params.k
            if counted:
                self._protected_bytes += int(lengths.sum())
                self._artifacts += len(entries)
            if self.budget is not None:
                self._held += zip((bases + lengths).tolist(), lengths.tolist(), strict=True)
                self._held_bytes += int(lengths.sum())
            if self.budget is None:
                self._settle()
            elif self._held_bytes > 2 * self.budget:
                self._forget_oldest()  # what waits and is too old is dropped before it is ever sorted
        return int(found.positions.size)

    def _settled(self) -> _Snapshot:
        """The snapshot, with every fingerprint added so far sorted into it."""
        if self._waiting_count:
            with self._build_lock:
                self._settle()
        return self._snapshot

    def _settle(self) -> None:
        """Sort the waiting fingerprints into a new segment, merge, forget beyond the budget (build lock held)."""
        snap = self._snapshot
        segments = list(snap.segments)
        words, bits = snap.filter_words, snap.filter_bits
        if self._waiting_count:
            hashes = np.concatenate([h for h, _ in self._waiting])
            coords = np.concatenate([c for _, c in self._waiting])
            keys, low = sorted_run(hashes, coords, 32 if self.unique else 0)
            total = sum(s.size for s in segments) + keys.size
            if total * _FILTER_BITS_PER_ENTRY > 64 << bits:
                # A new filter of 8 to 16 bits per entry; old snapshots keep the old one.
                bits = min(26, (total * _FILTER_BITS_PER_ENTRY // 64).bit_length())
                words = np.zeros(1 << bits, np.uint64)
                for s in segments:
                    filter_add(words, bits, s.keys, s.low, False)
            # Setting bits in place is safe for concurrent scans: a stray bit only costs a probe.
            filter_add(words, bits, keys, low, False)
            segments.append(_segment(keys, low))
            # Segment sizes shrink at least 4-fold from oldest to newest: O(log n) segments to probe,
            # each entry merged O(log n) times.
            while len(segments) >= 2 and segments[-2].size <= _MERGE_RATIO * segments[-1].size:
                b_seg = segments.pop()
                a_seg = segments.pop()
                segments.append(_segment(*merge_runs(a_seg.keys, a_seg.low, b_seg.keys, b_seg.low)))
        self._waiting = []
        self._waiting_count = 0
        self._snapshot = _Snapshot(tuple(segments), words, bits, snap.bases, snap.lengths, snap.owners)
        self._generation += 1

    def _forget_oldest(self) -> None:
        """Drop the entries of the oldest bytes until ``budget`` are held (build lock held): the waiting ones
        before they are sorted, the sorted ones by merging what is kept into one segment (so the order of
        segments by size holds again)."""
        if self.budget is None:
            return
        drop = 0
        while drop < len(self._held) and self._held_bytes - self._held[drop][1] >= self.budget:
            self._held_bytes -= self._held[drop][1]
            drop += 1
        if not drop:
            return
        cutoff = self._held[drop - 1][0]
        del self._held[:drop]
        waiting = [(h[c >= cutoff], c[c >= cutoff]) for h, c in self._waiting]
        self._waiting = [(h, c) for h, c in waiting if c.size]
        self._waiting_count = sum(c.size for _, c in self._waiting)
        snap = self._snapshot
        segments: tuple[_Segment, ...] = ()
        words, bits = snap.filter_words, snap.filter_bits
        if snap.segments:
            keys, low = np.zeros(0, np.uint64), np.zeros(0, np.uint32)
            for seg in snap.segments:
                keep = (seg.keys & np.uint64(0xFFFFFFFF)) >= np.uint64(cutoff)
                keys, low = merge_runs(keys, low, seg.keys[keep], seg.low[keep])
            segments = (_segment(keys, low),) if keys.size else ()
            words = np.zeros(1 << bits, np.uint64)  # the same size: sized for what is held at most
            filter_add(words, bits, keys, low, False)
        first = int(np.searchsorted(snap.bases + snap.lengths, cutoff, side="right"))  # artifacts still held
        self._snapshot = _Snapshot(segments, words, bits, snap.bases[first:], snap.lengths[first:], snap.owners[first:])
        self._generation += 1

    # -- matching --------------------------------------------------------------------------------------------------

    def match(self, buf: U8, starts: I64, *, folded: bool = False) -> list[Match]:
        """Chains in ``buf`` (pieces as in :meth:`fingerprint`) whose extent reaches ``min_match``.

        ``buf`` is folded here (:func:`fold`), unless ``folded`` says it is already.
        """
        snap = self._settled()
        if not snap.segments or buf.size < self.params.threshold:
            return []
        if buf.size >= _MAX_SCAN:
            raise InvalidArgument("a leak guard scans at most 1 GiB at once")
        if not folded:
            buf = fold(buf, starts)
        found = self.fingerprint(buf, starts)
        if not found.positions.size:
            return []
        seg_keys, seg_low, seg_dirs, seg_filters, seg_bits = snap.typed()
        query, coord, hot = lookup(
            snap.filter_words, snap.filter_bits, seg_keys, seg_low, seg_dirs, seg_filters, seg_bits, found.hashes
        )
        if not query.size:
            return []
        p = self.params
        if self.unique:
            counts = np.bincount(query, minlength=found.hashes.size)
            counts[hot[0::4]] = 2
            keep = counts[query] == 1
            query, coord = query[keep], coord[keep]
            if not query.size:
                return []
        elif hot.size:
            # Hot (boilerplate) fingerprints: follow the diagonals of nearby hits through them, a few
            # fingerprints at a time, so that a leaked excerpt keeps one unbroken chain.
            query, coord = through_hot(
                seg_keys, seg_low, hot, found.positions, found.hashes, query, coord, p.k + p.w, _HOT_ROUNDS
            )
        where = found.positions[query]
        rows = chains(
            buf, starts, where, coord, diagonal_order(where, coord), snap.bases, snap.lengths, p.k, p.w, p.min_match
        ).reshape(-1, 7)
        return [
            Match(int(piece), snap.owners[int(owner)], int(start), int(end), int(last + p.k - first), int(at))
            for piece, owner, start, end, first, last, at in rows.tolist()
        ]

    # -- accounting ------------------------------------------------------------------------------------------------

    @property
    def generation(self) -> int:
        """A number that changes whenever what the index holds changes (read once what waits is sorted in)."""
        self._settled()
        return self._generation

    @property
    def artifact_count(self) -> int:
        return self._artifacts

    @property
    def fingerprint_count(self) -> int:
        return sum(s.size for s in self._settled().segments)

    @property
    def protected_bytes(self) -> int:
        return self._protected_bytes

    @property
    def nbytes(self) -> int:
        """Bytes the index holds: entries, directories, filter and the per-artifact table."""
        snap = self._settled()
        return (
            sum(s.nbytes for s in snap.segments)
            + int(snap.filter_words.nbytes)
            + int(snap.bases.nbytes + snap.lengths.nbytes)
        )

    @property
    def segment_count(self) -> int:
        return len(self._settled().segments)
