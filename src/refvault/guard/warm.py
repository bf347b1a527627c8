"""Compile the leak guard's kernels ahead of time: ``python -m refvault.guard.warm``.

Runs a small guard through every path that reaches a kernel (protecting in two batches that merge, a scan that
meets boilerplate held by many artifacts, a base64 run, the piece arm), so that later processes on this machine
load every kernel from numba's cache and compile nothing. The Makefile's install steps run it, and so do
``refvault demo`` and ``refvault eval`` before they start (with the kernels cached this only loads them).

Invariants: when it compiles, the first compile says so first, in one line (:mod:`refvault.guard.compiling`);
``main`` then prints one line saying what it did (compiled how many kernels, or found them all cached), how long
it took and where the cache is. It protects and scans generated letters only; it touches no store.
Warming for a read-only install has to run as the user who runs refvault (their cache directory is used
then) or with ``NUMBA_CACHE_DIR`` set to a directory they share.
"""

from __future__ import annotations

import base64
import sys
import time
from typing import NamedTuple

import numpy as np

from refvault.guard.compiling import kernels
from refvault.guard.guard import LeakGuard

__all__ = ["Warmed", "main", "warm"]


class Warmed(NamedTuple):
    """What :func:`warm` did: seconds taken, kernels compiled and loaded from the cache, where the cache is."""

    seconds: float
    compiled: int
    loaded: int
    cache_dir: str | None

    def summary(self) -> str:
        """One line for a person."""
        where = f"cached in {self.cache_dir}" if self.cache_dir else "not cached: no writable cache directory"
        if self.compiled:
            return f"refvault: compiled the leak guard's kernels ({self.compiled}) in {self.seconds:.1f} s ({where})"
        return f"refvault: the leak guard's kernels were already compiled; loaded in {self.seconds:.1f} s ({where})"


def _exercise() -> None:
    """One guard, every kernel: two batches of equal size (their index segments merge) and a small one (a second
    segment), boilerplate that 80 artifacts hold (hot fingerprints), an excerpt of it in a request beside a base64
    run, and the piece arm."""
    rng = np.random.default_rng(0)

    def letters(n: int) -> bytes:
        return rng.integers(97, 123, n, dtype=np.uint8).tobytes()

    boilerplate = letters(160)
    first = [(f"art_warm_a{i:03d}", boilerplate + letters(240)) for i in range(80)]
    guard = LeakGuard()
    guard.protect_many(first)
    guard.protect_many((f"art_warm_b{i:03d}", letters(400)) for i in range(80))
    guard.protect_many((f"art_warm_c{i:03d}", letters(400)) for i in range(10))  # a segment of its own
    excerpt = first[0][1][40:360].decode()
    encoded = base64.b64encode(letters(300)).decode()
    request = {"messages": [{"role": "user", "content": f"{excerpt} and {encoded}"}]}
    guard.scan(request)


def warm() -> Warmed:
    """Compile (or load from the cache) every kernel of the leak guard in this process."""
    began = time.perf_counter()
    _exercise()
    seconds = time.perf_counter() - began
    compiled = loaded = 0
    cache_dir: str | None = None
    for dispatcher in kernels():
        stats = dispatcher.stats
        compiled += sum(stats.cache_misses.values()) > 0
        loaded += sum(stats.cache_hits.values()) > 0
        cache_dir = cache_dir or stats.cache_path
    return Warmed(seconds, compiled, loaded, cache_dir)


def main() -> int:
    """``python -m refvault.guard.warm``: warm, and print what it did."""
    print(warm().summary(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
