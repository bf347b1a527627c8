"""Compile the leak guard's kernels ahead of time: ``python -m refvault.guard.warm``.

Runs a small guard through every path that reaches a kernel (:func:`refvault.guard.compiling.compile_all`, what
the first guard of any process does too), so that later processes on this machine load every kernel from numba's
cache and compile nothing. The Makefile's install steps run it, and so do ``refvault demo`` and ``refvault eval``
before they start (so a first compile is said before their transcript; with the kernels cached this only loads
them).

Invariants: when it compiles, one line says so before and one after (:mod:`refvault.guard.compiling`); when
nothing needed compiling, ``main`` prints one line saying the kernels were already compiled, how long loading
took and where the cache is. It protects and scans generated letters only; it touches no store.
Warming for a read-only install has to run as the user who runs refvault (their cache directory is used
then) or with ``NUMBA_CACHE_DIR`` set to a directory they share.
"""

from __future__ import annotations

import sys
from typing import NamedTuple

from refvault.guard.compiling import compile_all, kernels
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


def warm() -> Warmed:
    """Compile (or load from the cache) every kernel of the leak guard in this process (:func:`compile_all`; a
    no-op if this process has made a guard already, which did it)."""
    seconds = compile_all(LeakGuard)
    compiled = loaded = 0
    cache_dir: str | None = None
    for dispatcher in kernels():
        stats = dispatcher.stats
        compiled += sum(stats.cache_misses.values()) > 0
        loaded += sum(stats.cache_hits.values()) > 0
        cache_dir = cache_dir or stats.cache_path
    return Warmed(seconds, compiled, loaded, cache_dir)


def main() -> int:
    """``python -m refvault.guard.warm``: warm; if nothing compiled (which says so itself), print that."""
    warmed = warm()
    if not warmed.compiled:
        print(warmed.summary(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
