"""The compiled kernels of the fingerprint index: winnowing, sorted runs and their merge, the bucket
directory, the Bloom filters, the lookup (hot fingerprints followed by coordinate), chains and their extent.

See :mod:`refvault.guard.fingerprints` for the scheme and its guarantee. Compiled by numba with
``cache=True`` and ``nogil=True`` (:func:`refvault.guard.compiling.kernel`), on first use: a request compiles
only the kernels it reaches.

What keeps compiling cheap (measured with an empty ``NUMBA_CACHE_DIR``): no array slice assignment inside a
kernel (``a[i:j] = b`` makes numba compile its shape-mismatch error message, about 1.5 s, once per process;
loops and :func:`_grown` instead), and no numba ``argsort``/``unique`` (seconds each to compile; numpy does
them between kernel calls: :func:`diagonal_order`, :func:`through_hot`). ``inline="always"`` on the small helpers
costs nothing measurable either way, in compile time or in scan speed.
"""

from __future__ import annotations

from typing import Any, Final

import numba
import numpy as np

from refvault.guard.arrays import I64, U8, U32, U64
from refvault.guard.compiling import kernel

__all__ = [
    "PERIOD",
    "SEPARATOR",
    "bucket_directory",
    "chains",
    "diagonal_order",
    "filter_add",
    "lookup",
    "merge_runs",
    "sorted_run",
    "through_hot",
    "typed_append",
    "typed_list",
    "winnow",
]

PERIOD: Final = 12
"""K-grams with a period dividing this are not fingerprinted (runs, short repeats)."""
SEPARATOR: Final = 32
"""What folded text's separators are (a space); k-grams of which at least half are this get no fingerprint."""
_DUPLICATES_PER_QUERY: Final = 64


@kernel()
def _grown(a: I64, n: int) -> I64:  # pragma: no cover - compiled
    """A new array twice the size of ``a``, starting with ``a[:n]`` (a loop: see the module docstring)."""
    out = np.empty(2 * a.size, np.int64)
    for i in range(n):
        out[i] = a[i]
    return out


@kernel()
def typed_list(first: Any) -> Any:  # pragma: no cover - compiled
    """A numba typed list holding ``first`` (built by a cached kernel: ``numba.typed.List`` compiles its own
    helpers in every process, about 0.4 s)."""
    items = numba.typed.List()
    items.append(first)
    return items


@kernel()
def typed_append(items: Any, item: Any) -> None:  # pragma: no cover - compiled
    """Append ``item`` to a list made by :func:`typed_list`."""
    items.append(item)


@kernel(inline="always")
def _fmix64(x: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    x ^= x >> np.uint64(33)
    return x


@kernel()
def winnow(
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


@kernel()
def sorted_run(hashes: U64, coords: I64, first_shift: int) -> tuple[U64, U32]:  # pragma: no cover - compiled
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


@kernel()
def merge_runs(a_keys: U64, a_low: U32, b_keys: U64, b_low: U32) -> tuple[U64, U32]:  # pragma: no cover - compiled
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


@kernel()
def bucket_directory(keys: U64, bits: int) -> U32:  # pragma: no cover - compiled
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


@kernel(inline="always")
def _filter_word_bits(hv: np.uint64, word_bits: int) -> tuple[np.uint64, np.uint64]:  # pragma: no cover
    """A blocked Bloom filter: one 64-bit word per hash, two bits in it (from bits independent of the word's)."""
    word = (hv & np.uint64(0xFFFFFFFF)) >> np.uint64(32 - word_bits)
    pattern = (np.uint64(1) << ((hv >> np.uint64(32)) & np.uint64(63))) | (
        np.uint64(1) << ((hv >> np.uint64(38)) & np.uint64(63))
    )
    return word, pattern


@kernel(inline="always")
def _segment_filter_word_bits(hv: np.uint64, word_bits: int) -> tuple[np.uint64, np.uint64]:  # pragma: no cover
    """The same for a segment's own filter, from other bits (its misses are independent of the first's)."""
    word = hv & ((np.uint64(1) << np.uint64(word_bits)) - np.uint64(1))
    pattern = (np.uint64(1) << ((hv >> np.uint64(44)) & np.uint64(63))) | (
        np.uint64(1) << ((hv >> np.uint64(50)) & np.uint64(63))
    )
    return word, pattern


@kernel()
def filter_add(words: U64, word_bits: int, keys: U64, low: U32, own: bool) -> None:  # pragma: no cover
    """Add entries to the filter of all entries (``own`` False) or to a segment's own filter."""
    for i in range(low.size):
        hv = (keys[i] & np.uint64(0xFFFFFFFF00000000)) | np.uint64(low[i])
        if own:
            word, pattern = _segment_filter_word_bits(hv, word_bits)
        else:
            word, pattern = _filter_word_bits(hv, word_bits)
        words[word] |= pattern


@kernel(inline="always")
def _lower_bound(keys: U64, lo: Any, hi: Any, target: np.uint64) -> Any:  # pragma: no cover - compiled
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


@kernel()
def lookup(
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
                    hot = _grown(hot, n_hot)
                hot[n_hot] = q
                hot[n_hot + 1] = s
                hot[n_hot + 2] = first
                hot[n_hot + 3] = end
                n_hot += 4
            found = 0
            for i in range(first, end):
                if low[i] != lo:
                    continue
                if n == out_q.size:
                    out_q = _grown(out_q, n)
                    out_c = _grown(out_c, n)
                out_q[n] = q
                out_c[n] = np.int64(keys[i] & np.uint64(0xFFFFFFFF))
                n += 1
                found += 1
                if found == _DUPLICATES_PER_QUERY:
                    break
    return out_q[:n], out_c[:n], hot[:n_hot]


@kernel()
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
                        out_q = _grown(out_q, n)
                        out_c = _grown(out_c, n)
                    out_q[n] = q
                    out_c[n] = x
                    n += 1
                    break
                i += 1
    return out_q[:n], out_c[:n]


def through_hot(
    seg_keys: Any,
    seg_low: Any,
    hot: I64,
    positions: I64,
    hashes: U64,
    query: I64,
    coord: I64,
    reach: int,
    rounds: int,
) -> tuple[I64, I64]:
    """The hits plus those :func:`_targeted` finds, repeated while it finds new ones (at most ``rounds``).

    Sorting and de-duplicating are numpy's, between kernel calls (see the module docstring).
    """
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


def diagonal_order(where: I64, coord: I64) -> I64:
    """The order :func:`chains` takes: hits sorted by diagonal (request position - coordinate), then position,
    so that a chain's hits are adjacent."""
    return np.argsort(((where - coord + (np.int64(1) << 32)) << np.int64(30)) | where)


@kernel()
def chains(
    buf: U8,
    starts: I64,
    where: I64,
    coord: I64,
    order: I64,
    bases: I64,
    lengths: I64,
    k: int,
    w: int,
    min_match: int,
) -> I64:  # pragma: no cover - compiled
    """Chains of hits whose extent reaches ``min_match``, as rows (piece, artifact, start, end, first, last, coord).

    Hit i is at request position ``where[i]`` and protected coordinate ``coord[i]``; ``order`` is
    :func:`diagonal_order` of them. A row's ``coord`` is the protected coordinate of its first hit (``first`` in
    the request).

    A chain: hits in one piece, of one artifact, on one diagonal, each at most ``k`` after the previous.
    """
    n = where.size
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
            row = 7 * rows
            out[row] = piece
            out[row + 1] = owner
            out[row + 2] = start
            out[row + 3] = end
            out[row + 4] = first
            out[row + 5] = last
            out[row + 6] = first - diag
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
            for j in range(7):
                out[7 * kept + j] = out[7 * a + j]
            kept += 1
    return out[: 7 * kept]


@kernel()
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
