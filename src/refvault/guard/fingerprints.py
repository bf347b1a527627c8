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

Kernels are compiled by numba (``cache=True``: the first use in a fresh
environment compiles them once, about 8 s on a 2-core machine; later processes
load the cache in about 0.6 s) and release the GIL, so scans from several
threads run in parallel.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import numba
import numpy as np
import numpy.typing as npt

from refvault.errors import InvalidArgument

__all__ = ["FOLD", "FOLD_RUN", "FingerprintIndex", "Match", "Params", "base64_runs", "fold"]

U8 = npt.NDArray[np.uint8]
U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

PERIOD: Final = 12
"""K-grams with a period dividing this are not fingerprinted (runs, short repeats)."""
SEPARATOR: Final = 32
"""What folded text's separators are (a space); k-grams of which at least half are this get no fingerprint."""

MIN_MATCH_RANGE: Final = (32, 1 << 20)
_MAX_COORDINATE: Final = (1 << 32) - 1
_DUPLICATES_PER_QUERY: Final = 64
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


# -- kernels ---------------------------------------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True, inline="always")
def _fmix64(x: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    x ^= x >> np.uint64(33)
    return x


@numba.njit(cache=True, nogil=True)
def _fingerprint(
    buf: U8, starts: I64, k: int, w: int, base: np.uint64, key: np.uint64, out_pos: I64, out_hash: U64
) -> int:  # pragma: no cover - compiled
    """Winnow every piece ``buf[starts[i]:starts[i+1]]``; write selected positions and hashes; return the count.

    Windows are ordered by the rolling hash's high 32 bits (ties: rightmost); the selected k-grams'
    hashes are keyed and mixed. Returns -1 when ``out_pos`` is too small (the caller retries).
    (Unsigned indexes spare numba's negative-index fix-up: about 20% faster.)
    """
    top = np.uint64(0xFFFFFFFFFFFFFFFF)
    high = np.uint64(0xFFFFFFFF00000000)
    low = np.uint64(0xFFFFFFFF)
    span = k - PERIOD  # periodic: this many bytes in a row equal the byte PERIOD before them
    half = (k + 1) // 2  # separator-dense: this many separators
    is_sep = np.zeros(256, np.int64)  # a table is cheaper than a comparison here
    is_sep[SEPARATOR] = 1
    power = np.uint64(1)
    for _ in range(k):
        power *= base
    size = 1
    while size < w:
        size *= 2
    mask = size - 1
    ring_key = np.empty(size, np.uint64)
    ring_hash = np.empty(size, np.uint64)
    capacity = out_pos.size
    count = 0
    for piece in range(starts.size - 1):
        s = starts[piece]
        e = starts[piece + 1]
        if e - s < k + w - 1:
            continue
        h = np.uint64(0)
        run = 0  # how many bytes in a row equal the byte PERIOD before them
        seps = 0  # separators (spaces: folded text) in the current k-gram
        for i in range(s, s + k - 1):
            c = buf[np.uint64(i)]
            h = h * base + np.uint64(c)
            seps += is_sep[c]
            if i - s >= PERIOD:
                run = run + 1 if c == buf[i - PERIOD] else 0
        best = -1
        best_key = top
        last = -1
        for i in range(s + k - 1, e):
            c = buf[np.uint64(i)]
            h = h * base + np.uint64(c)
            seps += is_sep[c]
            if i - s >= k:
                gone = buf[np.uint64(i - k)]
                h -= np.uint64(gone) * power
                seps -= is_sep[gone]
            run = run + 1 if c == buf[np.uint64(i - PERIOD)] else 0
            rel = i - k + 1 - s
            kv = top if (run >= span) | (seps >= half) else (h & high) | (low - np.uint64(rel))
            ring_key[np.uint64(rel & mask)] = kv
            ring_hash[np.uint64(rel & mask)] = h
            j = rel - w + 1
            if best < j:  # the window's minimum left it: rescan
                best_key = top
                best = rel
                for t in range(j, rel + 1):
                    v = ring_key[np.uint64(t & mask)]
                    if v <= best_key:
                        best_key = v
                        best = t
            elif kv <= best_key:
                best_key = kv
                best = rel
            if j >= 0 and best != last and best_key != top:
                if count == capacity:
                    return -1
                out_pos[count] = s + best
                out_hash[count] = _fmix64(ring_hash[best & mask] ^ key)
                count += 1
                last = best
    return count


@numba.njit(cache=True, nogil=True)
def _sorted_run(hashes: U64, coords: I64, first_shift: int) -> tuple[U64, U32]:  # pragma: no cover - compiled
    """Entries ``(hash >> 32) << 32 | coord``, sorted (LSD radix sort, 11 bits a pass, from bit ``first_shift``:
    0 sorts by the whole entry, 32 by the hash only), with the hashes' low halves in the same order."""
    n = hashes.size
    keys = np.empty(n, np.uint64)
    low = np.empty(n, np.uint32)
    for i in range(n):
        keys[i] = ((hashes[i] >> np.uint64(32)) << np.uint64(32)) | np.uint64(coords[i])
        low[i] = np.uint32(hashes[i] & np.uint64(0xFFFFFFFF))
    other_keys = np.empty(n, np.uint64)
    other_low = np.empty(n, np.uint32)
    counts = np.empty(2049, np.int64)
    for shift in range(first_shift, 64, 11):
        counts[:] = 0
        for i in range(n):
            counts[((keys[i] >> np.uint64(shift)) & np.uint64(2047)) + 1] += 1
        for b in range(1, 2049):
            counts[b] += counts[b - 1]
        for i in range(n):
            b = (keys[i] >> np.uint64(shift)) & np.uint64(2047)
            o = counts[b]
            counts[b] = o + 1
            other_keys[o] = keys[i]
            other_low[o] = low[i]
        keys, other_keys = other_keys, keys
        low, other_low = other_low, low
    return keys, low


@numba.njit(cache=True, nogil=True)
def _merge(a_keys: U64, a_low: U32, b_keys: U64, b_low: U32) -> tuple[U64, U32]:  # pragma: no cover - compiled
    """Merge two sorted runs."""
    n = a_keys.size + b_keys.size
    keys = np.empty(n, np.uint64)
    low = np.empty(n, np.uint32)
    i = 0
    j = 0
    for o in range(n):
        if j >= b_keys.size or (i < a_keys.size and a_keys[i] <= b_keys[j]):
            keys[o] = a_keys[i]
            low[o] = a_low[i]
            i += 1
        else:
            keys[o] = b_keys[j]
            low[o] = b_low[j]
            j += 1
    return keys, low


@numba.njit(cache=True, nogil=True)
def _directory(keys: U64, bits: int) -> U32:  # pragma: no cover - compiled
    """``d[b]`` = first entry whose top ``bits`` bits are >= b (``d`` has ``2**bits + 1`` items)."""
    buckets = 1 << bits
    d = np.empty(buckets + 1, np.uint32)
    shift = np.uint64(64 - bits)
    b = 0
    for i in range(keys.size):
        bucket = np.int64(keys[i] >> shift) if bits > 0 else np.int64(0)
        while b <= bucket:
            d[b] = i
            b += 1
    while b <= buckets:
        d[b] = keys.size
        b += 1
    return d


@numba.njit(cache=True, nogil=True, inline="always")
def _filter_word_bits(hv: np.uint64, word_bits: int) -> tuple[np.uint64, np.uint64]:  # pragma: no cover
    """A blocked Bloom filter: one 64-bit word per hash, two bits in it (from bits independent of the word's)."""
    word = (hv & np.uint64(0xFFFFFFFF)) >> np.uint64(32 - word_bits)
    pattern = (np.uint64(1) << ((hv >> np.uint64(32)) & np.uint64(63))) | (
        np.uint64(1) << ((hv >> np.uint64(38)) & np.uint64(63))
    )
    return word, pattern


@numba.njit(cache=True, nogil=True, inline="always")
def _segment_filter_word_bits(hv: np.uint64, word_bits: int) -> tuple[np.uint64, np.uint64]:  # pragma: no cover
    """The same for a segment's own filter, from other bits (its misses are independent of the first's)."""
    word = hv & ((np.uint64(1) << np.uint64(word_bits)) - np.uint64(1))
    pattern = (np.uint64(1) << ((hv >> np.uint64(44)) & np.uint64(63))) | (
        np.uint64(1) << ((hv >> np.uint64(50)) & np.uint64(63))
    )
    return word, pattern


@numba.njit(cache=True, nogil=True)
def _filter_add(words: U64, word_bits: int, keys: U64, low: U32, own: bool) -> None:  # pragma: no cover
    """Add entries to the filter of all entries (``own`` False) or to a segment's own filter."""
    for i in range(low.size):
        hv = (keys[i] & np.uint64(0xFFFFFFFF00000000)) | np.uint64(low[i])
        if own:
            word, pattern = _segment_filter_word_bits(hv, word_bits)
        else:
            word, pattern = _filter_word_bits(hv, word_bits)
        words[word] |= pattern


@numba.njit(cache=True, nogil=True, inline="always")
def _lower_bound(keys: U64, lo: Any, hi: Any, target: np.uint64) -> Any:  # pragma: no cover - compiled
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, nogil=True)
def _lookup(
    words: U64,
    word_bits: int,
    seg_keys: Any,
    seg_low: Any,
    seg_dirs: Any,
    seg_filters: Any,
    seg_bits: I64,
    hashes: U64,
) -> tuple[I64, I64, I64]:  # pragma: no cover - compiled
    """(query, coordinate) of index entries whose 64-bit hash equals a query hash, and the hot queries.

    A hash held more than 64 times in a segment (boilerplate) is *hot* there: only its first 64 entries
    are returned, and the query is listed as rows (query, segment, first entry, end) in the third
    array so that :func:`_targeted` can look for it at the coordinates its neighbours point to.
    Only the queries that the filter of all entries (``words``) lets through go further (about 1 in 20
    of the hashes the index does not hold), and a segment is probed only if its own filter lets the
    query through. ``seg_bits[s]`` is segment s's (directory bits, filter word bits).
    """
    out_q = np.empty(64, np.int64)
    out_c = np.empty(64, np.int64)
    hot = np.empty(16, np.int64)
    n = 0
    n_hot = 0
    passing = np.empty(hashes.size, np.int64)
    n_passing = 0
    for q in range(hashes.size):
        word, pattern = _filter_word_bits(hashes[q], word_bits)
        if words[word] & pattern == pattern:
            passing[n_passing] = q
            n_passing += 1
    for s in range(seg_bits.shape[0]):  # segments outside: a typed-list access costs more than a probe
        keys = seg_keys[s]
        low = seg_low[s]
        directory = seg_dirs[s]
        seg_words = seg_filters[s]
        bits = seg_bits[s, 0]
        seg_word_bits = seg_bits[s, 1]
        for t in range(n_passing):
            q = passing[t]
            hv = hashes[q]
            word, pattern = _segment_filter_word_bits(hv, seg_word_bits)
            if seg_words[word] & pattern != pattern:
                continue
            hi = hv >> np.uint64(32)
            lo = np.uint32(hv & np.uint64(0xFFFFFFFF))
            bucket = np.int64(hv >> np.uint64(64 - bits)) if bits > 0 else np.int64(0)
            b0 = np.int64(directory[bucket])
            b1 = np.int64(directory[bucket + 1])
            first = _lower_bound(keys, b0, b1, hi << np.uint64(32))
            end = first
            while end < b1 and (keys[end] >> np.uint64(32)) == hi and end - first <= _DUPLICATES_PER_QUERY:
                end += 1
            if end - first > _DUPLICATES_PER_QUERY:
                end = _lower_bound(keys, end, b1, (hi << np.uint64(32)) | np.uint64(0xFFFFFFFF))
                while end < b1 and keys[end] >> np.uint64(32) == hi:
                    end += 1
                if n_hot + 4 > hot.size:
                    grown = np.empty(hot.size * 2, np.int64)
                    grown[:n_hot] = hot[:n_hot]
                    hot = grown
                hot[n_hot : n_hot + 4] = (q, s, first, end)
                n_hot += 4
            found = 0
            for i in range(first, end):
                if low[i] != lo:
                    continue
                if n == out_q.size:
                    grown_q = np.empty(n * 2, np.int64)
                    grown_c = np.empty(n * 2, np.int64)
                    grown_q[:n] = out_q
                    grown_c[:n] = out_c
                    out_q = grown_q
                    out_c = grown_c
                out_q[n] = q
                out_c[n] = np.int64(keys[i] & np.uint64(0xFFFFFFFF))
                n += 1
                found += 1
                if found == _DUPLICATES_PER_QUERY:
                    break
    return out_q[:n], out_c[:n], hot[:n_hot]


@numba.njit(cache=True, nogil=True)
def _targeted(
    seg_keys: Any, seg_low: Any, hot: I64, positions: I64, hashes: U64, where: I64, coord: I64, reach: int
) -> tuple[I64, I64]:  # pragma: no cover - compiled
    """Hits of hot queries at the coordinates that hits within ``reach`` of them point to.

    ``where``/``coord`` are the hits so far, sorted by ``where``. Each hot query at request position r
    is looked up at coordinate ``r - (where - coord)`` of each nearby hit: the one entry that continues
    that hit's diagonal, found by binary search among the hot hash's entries (sorted by coordinate).
    """
    out_q = np.empty(16, np.int64)
    out_c = np.empty(16, np.int64)
    n = 0
    for h in range(0, hot.size, 4):
        q = hot[h]
        keys = seg_keys[hot[h + 1]]
        low = seg_low[hot[h + 1]]
        run_lo = hot[h + 2]
        run_hi = hot[h + 3]
        r = positions[q]
        hv = hashes[q]
        lo = np.uint32(hv & np.uint64(0xFFFFFFFF))
        top = (hv >> np.uint64(32)) << np.uint64(32)
        j0 = np.searchsorted(where, r - reach)
        j1 = np.searchsorted(where, r + reach, side="right")
        last_x = -1
        for j in range(j0, j1):
            x = r - (where[j] - coord[j])
            if x < 0 or x > 0xFFFFFFFF or x == last_x:
                continue
            last_x = x
            i = _lower_bound(keys, run_lo, run_hi, top | np.uint64(x))
            while i < run_hi and keys[i] == (top | np.uint64(x)):
                if low[i] == lo:
                    if n == out_q.size:
                        grown_q = np.empty(n * 2, np.int64)
                        grown_c = np.empty(n * 2, np.int64)
                        grown_q[:n] = out_q
                        grown_c[:n] = out_c
                        out_q = grown_q
                        out_c = grown_c
                    out_q[n] = q
                    out_c[n] = x
                    n += 1
                    break
                i += 1
    return out_q[:n], out_c[:n]


@numba.njit(cache=True, nogil=True)
def _through_hot(
    seg_keys: Any,
    seg_low: Any,
    hot: I64,
    positions: I64,
    hashes: U64,
    query: I64,
    coord: I64,
    reach: int,
    rounds: int,
) -> tuple[I64, I64]:  # pragma: no cover - compiled
    """The hits plus those :func:`_targeted` finds, repeated while it finds new ones (at most ``rounds``)."""
    for _ in range(rounds):
        where = positions[query]
        order = np.argsort(where)
        extra_q, extra_c = _targeted(seg_keys, seg_low, hot, positions, hashes, where[order], coord[order], reach)
        if extra_q.size == 0:
            break
        pairs = np.unique(
            np.concatenate((query * (np.int64(1) << 32) + coord, extra_q * (np.int64(1) << 32) + extra_c))
        )
        if pairs.size == query.size:
            break
        query = pairs >> 32
        coord = pairs & np.int64(0xFFFFFFFF)
    return query, coord


@numba.njit(cache=True, nogil=True)
def _chains(
    buf: U8, starts: I64, where: I64, coord: I64, bases: I64, lengths: I64, k: int, w: int, min_match: int
) -> I64:  # pragma: no cover - compiled
    """Chains of hits whose extent reaches ``min_match``, as rows (piece, artifact, start, end, first, last, coord).

    ``coord`` is the protected coordinate of the first hit (``first`` in the request).

    A chain: hits in one piece, of one artifact, on one diagonal, each at most ``k`` after the previous.
    """
    n = where.size
    order_key = np.empty(n, np.int64)
    for i in range(n):
        # Sorted by diagonal (request position - coordinate), then position, a chain's hits are adjacent.
        order_key[i] = ((where[i] - coord[i] + (np.int64(1) << 32)) << np.int64(30)) | where[i]
    order = np.argsort(order_key)
    out = np.empty(7 * n, np.int64)
    rows = 0
    t = 0
    while t < n:
        i = order[t]
        first = where[i]
        last = first
        diag = first - coord[i]
        piece = np.searchsorted(starts, first, side="right") - 1
        owner = np.searchsorted(bases, coord[i], side="right") - 1
        t += 1
        while t < n:
            nxt = order[t]
            r = where[nxt]
            if r - coord[nxt] != diag or r - last > k or r >= starts[piece + 1]:
                break
            if np.searchsorted(bases, coord[nxt], side="right") - 1 != owner:
                break
            last = r
            t += 1
        start, end = _extent(buf, starts[piece], starts[piece + 1], first, last, k, w)
        origin = diag + bases[owner]  # request position of the artifact's byte 0
        start = max(start, origin)
        end = min(end, origin + lengths[owner])
        if end - start >= min_match:
            out[7 * rows : 7 * rows + 7] = (piece, owner, start, end, first, last, first - diag)
            rows += 1
    # A short chain (fewer than min_match verified bytes) inside a long one is explained by it (boilerplate
    # shared with another artifact, or repeated in the same one): drop it.
    keep = np.ones(rows, np.bool_)
    for a in range(rows):
        a_first = out[7 * a + 4]
        a_end = out[7 * a + 5] + k
        if a_end - a_first >= min_match:
            continue
        for b in range(rows):
            b_first = out[7 * b + 4]
            b_end = out[7 * b + 5] + k
            if b_end - b_first >= min_match and out[7 * b] == out[7 * a] and b_first <= a_first and a_end <= b_end:
                keep[a] = False
                break
    kept = 0
    for a in range(rows):
        if keep[a]:
            out[7 * kept : 7 * kept + 7] = out[7 * a : 7 * a + 7]
            kept += 1
    return out[: 7 * kept]


@numba.njit(cache=True, nogil=True)
def _extent(buf: U8, lo: int, hi: int, first: int, last: int, k: int, w: int) -> tuple[int, int]:  # pragma: no cover
    """An upper bound ``[start, end)`` of the verbatim span around a chain (see the module docstring)."""
    span = k - PERIOD  # a k-gram at q is periodic iff buf[j] == buf[j + PERIOD] for j in [q, q + span)
    # Left: every k-gram start in [start, first - w] is unselectable (periodic, or half separators), so start is
    # after the last selectable one there.
    start = lo
    q = first - w
    if q >= lo:
        run = 0  # equalities from q on
        while run < span and buf[q + run] == buf[q + run + PERIOD]:
            run += 1
        seps = 0  # separators in the k-gram at q
        for j in range(q, q + k):
            seps += buf[j] == SEPARATOR
        while True:
            if run < span and 2 * seps < k:
                start = q + 1
                break
            q -= 1
            if q < lo:
                break
            run = run + 1 if buf[q] == buf[q + PERIOD] else 0
            seps += (buf[q] == SEPARATOR) - (buf[q + k] == SEPARATOR)
    # Right: every k-gram start in [last + w, end - k] is unselectable, so end < the first selectable one + k.
    end = hi
    q = last + w
    if q + k <= hi:
        run = 0  # equalities ending at q + span - 1
        j = q + span - 1
        while run < span and buf[j - run] == buf[j - run + PERIOD]:
            run += 1
        seps = 0
        for t in range(q, q + k):
            seps += buf[t] == SEPARATOR
        while True:
            if run < span and 2 * seps < k:
                end = q + k - 1
                break
            q += 1
            if q + k > hi:
                break
            j = q + span - 1
            run = run + 1 if buf[j] == buf[j + PERIOD] else 0
            seps += (buf[q + k - 1] == SEPARATOR) - (buf[q - 1] == SEPARATOR)
    return start, end


_BASE64_CLASS = np.zeros(256, np.uint8)  # 1: base64 character (either alphabet, padding); 2: CR or LF; 3: space, tab
for _c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_=":
    _BASE64_CLASS[_c] = 1
_BASE64_CLASS[10] = _BASE64_CLASS[13] = 2
_BASE64_CLASS[32] = _BASE64_CLASS[9] = 3

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


@numba.njit(cache=True, nogil=True)
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


@numba.njit(cache=True, nogil=True)
def _indent(buf: U8, lo: int, i: int, classes: U8) -> int:  # pragma: no cover - compiled
    """Where the blank stretch holding ``buf[i]`` starts if it holds a line break (an indented line), else -1."""
    j = i
    newline = False
    while j > lo and classes[buf[j - 1]] >= 2:
        j -= 1
        newline = newline or classes[buf[j]] == 2
    return j if newline or classes[buf[i]] == 2 else -1


@numba.njit(cache=True, nogil=True)
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
            if n + 2 > out.size:
                grown = np.empty(out.size * 2, np.int64)
                grown[:n] = out[:n]
                out = grown
            out[n] = begin
            out[n + 1] = end
            n += 2
    return out[:n]


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
    _filter_add(words, filter_bits, keys, low, True)
    return _Segment(keys, low, _directory(keys, bits), bits, words, filter_bits)


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
                numba.typed.List([s.keys for s in self.segments]),
                numba.typed.List([s.low for s in self.segments]),
                numba.typed.List([s.directory for s in self.segments]),
                numba.typed.List([s.filter for s in self.segments]),
                np.array([(s.bits, s.filter_bits) for s in self.segments], np.int64).reshape(-1, 2),
            )
            self._typed = typed  # a race builds it twice, harmlessly
        return typed


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
            count = _fingerprint(buf, starts, k, w, self._base, self._key, pos, hashes)
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
            keys, low = _sorted_run(hashes, coords, 32 if self.unique else 0)
            total = sum(s.size for s in segments) + keys.size
            if total * _FILTER_BITS_PER_ENTRY > 64 << bits:
                # A new filter of 8 to 16 bits per entry; old snapshots keep the old one.
                bits = min(26, (total * _FILTER_BITS_PER_ENTRY // 64).bit_length())
                words = np.zeros(1 << bits, np.uint64)
                for s in segments:
                    _filter_add(words, bits, s.keys, s.low, False)
            # Setting bits in place is safe for concurrent scans: a stray bit only costs a probe.
            _filter_add(words, bits, keys, low, False)
            segments.append(_segment(keys, low))
            # Segment sizes shrink at least 4-fold from oldest to newest: O(log n) segments to probe,
            # each entry merged O(log n) times.
            while len(segments) >= 2 and segments[-2].size <= _MERGE_RATIO * segments[-1].size:
                b_seg = segments.pop()
                a_seg = segments.pop()
                segments.append(_segment(*_merge(a_seg.keys, a_seg.low, b_seg.keys, b_seg.low)))
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
                keys, low = _merge(keys, low, seg.keys[keep], seg.low[keep])
            segments = (_segment(keys, low),) if keys.size else ()
            words = np.zeros(1 << bits, np.uint64)  # the same size: sized for what is held at most
            _filter_add(words, bits, keys, low, False)
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
        query, coord, hot = _lookup(
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
            query, coord = _through_hot(
                seg_keys, seg_low, hot, found.positions, found.hashes, query, coord, p.k + p.w, _HOT_ROUNDS
            )
        rows = _chains(
            buf, starts, found.positions[query], coord, snap.bases, snap.lengths, p.k, p.w, p.min_match
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


def base64_runs(buf: U8, starts: I64, min_len: int) -> I64:
    """Flattened (start, end) pairs of base64-looking runs of at least ``min_len`` characters in each piece."""
    return _base64_runs(buf, starts, min_len, _BASE64_CLASS)


def warm_up() -> float:
    """Compile (or load from the cache) every kernel; return the seconds it took."""
    import time

    began = time.perf_counter()
    index = FingerprintIndex(Params.for_min_match(64))
    data = np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    index.add([("warm", data)])
    buf = np.frombuffer(data[100:1100], np.uint8)
    index.match(buf, np.array([0, buf.size], np.int64))
    base64_runs(buf, np.array([0, buf.size], np.int64), 86)
    return time.perf_counter() - began
