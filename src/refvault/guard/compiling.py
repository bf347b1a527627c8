"""How the guard's numba kernels are made (:func:`kernel`), compiled all at once (:func:`compile_all`), and the
two lines that say when they compile.

Every kernel of :mod:`~refvault.guard.kernels`, :mod:`~refvault.guard.folding` and
:mod:`~refvault.guard.base64_scan` is ``numba.njit(cache=True, nogil=True)``: numba compiles a kernel on its
first call (for the argument types it gets) and saves the machine code in its cache; later processes load it
from there (all of them in well under a second) instead of compiling again. ``nogil``: scans from several threads
run in parallel. ``python -m refvault.guard.warm`` compiles them all ahead of time (the Makefile's install steps
run it).

Invariants:

* **Once per machine, not per process.** The first :class:`~refvault.guard.LeakGuard` made in a process calls
  :func:`compile_all`, which runs every kernel once, before that guard does any work: a process that finds any
  kernel missing from the cache compiles all of them then, so no later process compiles a different subset.
  A process whose kernels are all cached only loads them (a fraction of a second), and says nothing. The run is
  plain Python started by that constructor, never from inside numba's compile event (that would re-enter its
  compiler).
* **Two lines around a compile, none otherwise.** The first time numba starts compiling one of these kernels
  in a process (it looked in its cache and found nothing for this source, this machine and these argument
  types; numba's ``numba:compile`` event), one line says so before any compiling:
  ``refvault: compiling the leak guard's kernels for this machine (once, about N s; cached in DIR)``. When
  :func:`compile_all` compiled anything, one line after it says ``refvault: compiled the leak guard's kernels in
  N s; cached in DIR``. Loading from the cache says nothing; nor do later compiles in the same process.
* **Where they are seen.** The lines are logged at WARNING on the ``refvault.guard`` logger when logging is
  configured for it (that logger or an ancestor has a handler), else written to stderr; never both.
* **Where the cache is** (numba's rule): ``$NUMBA_CACHE_DIR`` if set; else ``__pycache__`` beside the modules if
  it is writable; else the user's cache directory (``~/.cache/numba``). An install where none of these is
  writable still imports and works: the kernels are then compiled in every process, only those it uses
  (:func:`kernel` falls back to an uncached kernel and a guard does not compile them all), and the line says so
  and how to cache them.
"""

from __future__ import annotations

import base64
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

import numba
import numpy as np
from numba.core import event

__all__ = ["COMPILE_SECONDS", "LOGGER", "compile_all", "compiled_line", "kernel", "kernels", "notice"]

COMPILE_SECONDS: Final = 6
"""About how long compiling every kernel takes on an idle 2-core machine (``bench/guard.py`` measures it)."""
LOGGER: Final = logging.getLogger("refvault.guard")

_F = TypeVar("_F", bound=Callable[..., Any])
_kernels: list[Any] = []  # every kernel made by kernel(), in the order made
_ours: set[int] = set()  # their ids
_uncached: set[int] = set()  # the ids of those that found no writable cache directory
_lock = threading.Lock()
_announced = False
_compiles = 0  # compiles of these kernels started in this process
_all_lock = threading.RLock()  # held while compile_all runs; re-entered by the guard that run makes
_all_state: str = "todo"  # compile_all: "todo", "running" (in the thread holding _all_lock) or "done"
_all_seconds = 0.0  # how long compile_all's run took


def kernel(**options: Any) -> Callable[[_F], _F]:
    """``numba.njit(cache=True, nogil=True, **options)``, uncached if numba finds no writable cache directory."""

    def make(func: _F) -> _F:
        try:
            compiled = numba.njit(cache=True, nogil=True, **options)(func)
        except RuntimeError as exc:  # numba: "cannot cache function ...: no locator available for file ..."
            if "no locator available" not in str(exc):
                raise
            compiled = numba.njit(nogil=True, **options)(func)
            _uncached.add(id(compiled))
        _kernels.append(compiled)
        _ours.add(id(compiled))
        return cast(_F, compiled)

    return make


def kernels() -> tuple[Any, ...]:
    """Every kernel made so far (numba dispatchers: ``.stats`` has cache hits, misses and the cache path)."""
    return tuple(_kernels)


def notice(cache_dir: str | None) -> str:
    """The line said before the first compile; ``cache_dir`` None: the kernels cannot be cached."""
    if cache_dir is None:
        return (
            f"refvault: compiling the leak guard's kernels for this machine (about {COMPILE_SECONDS} s, in every "
            "process: no writable cache directory; set NUMBA_CACHE_DIR to a writable directory to compile them once)"
        )
    return (
        f"refvault: compiling the leak guard's kernels for this machine "
        f"(once, about {COMPILE_SECONDS} s; cached in {cache_dir})"
    )


def compiled_line(seconds: float, cache_dir: str | None) -> str:
    """The line said after :func:`compile_all` compiled kernels."""
    where = f"cached in {cache_dir}" if cache_dir else "not cached: no writable cache directory"
    return f"refvault: compiled the leak guard's kernels in {seconds:.1f} s; {where}"


def compile_all(make_guard: Callable[[], Any], *, when_uncached: bool = True) -> float:
    """Run every kernel once in this process (compiling those the cache lacks); the seconds that run took.

    ``make_guard`` makes a default :class:`~refvault.guard.LeakGuard`; the run protects and scans generated
    letters with it (two batches that merge, a small one, boilerplate held by many artifacts, a base64 run, the
    piece arm). Only the first call in a process runs; later calls (and the guard that run makes, which calls
    this again from its constructor) return at once; other threads wait for the run to end. Says
    :func:`compiled_line` after a run that compiled. ``when_uncached=False``: when the kernels cannot be cached,
    do nothing (a guard then compiles only what it uses, in every process).
    """
    global _all_state, _all_seconds
    if _all_state == "done" or (_uncached and not when_uncached):
        return _all_seconds
    with _all_lock:
        if _all_state != "todo":  # done by another thread meanwhile, or running in this one (re-entered)
            return _all_seconds
        _all_state = "running"
        try:
            before = _compiles
            began = time.perf_counter()
            _exercise(make_guard)
            _all_seconds = time.perf_counter() - began
        finally:
            _all_state = "done"
        if _compiles > before:
            cache_dir = None if _uncached else next((k.stats.cache_path for k in _kernels), None)
            _say(compiled_line(_all_seconds, cache_dir))
    return _all_seconds


def _exercise(make_guard: Callable[[], Any]) -> None:
    """One guard, every kernel: two batches of equal size (their index segments merge) and a small one (a second
    segment), boilerplate that 80 artifacts hold (hot fingerprints), an excerpt of it in a request beside a base64
    run, and the piece arm."""
    rng = np.random.default_rng(0)

    def letters(n: int) -> bytes:
        return rng.integers(97, 123, n, dtype=np.uint8).tobytes()

    boilerplate = letters(160)
    first = [(f"art_warm_a{i:03d}", boilerplate + letters(240)) for i in range(80)]
    guard = make_guard()
    guard.protect_many(first)
    guard.protect_many((f"art_warm_b{i:03d}", letters(400)) for i in range(80))
    guard.protect_many((f"art_warm_c{i:03d}", letters(400)) for i in range(10))  # a segment of its own
    excerpt = first[0][1][40:360].decode()
    encoded = base64.b64encode(letters(300)).decode()
    guard.scan({"messages": [{"role": "user", "content": f"{excerpt} and {encoded}"}]})


def _say(line: str) -> None:
    """Log ``line`` at WARNING if logging is configured for the guard's logger, else write it to stderr."""
    if LOGGER.hasHandlers():
        LOGGER.warning(line)
    else:
        print(line, file=sys.stderr, flush=True)


class _FirstCompile(event.Listener):
    """Counts compiles of these kernels; says :func:`notice` when numba starts the first one in this process.

    It only counts and writes a line: running a kernel (or compiling one) from inside numba's compile event
    would re-enter its compiler, so :func:`compile_all` does its work before, in plain Python.
    """

    def on_start(self, ev: event.Event) -> None:
        global _announced, _compiles
        dispatcher: Any = ev.data.get("dispatcher") if isinstance(ev.data, dict) else None
        if dispatcher is None or id(dispatcher) not in _ours:
            return
        with _lock:
            _compiles += 1
            if _announced:
                return
            _announced = True
        cache_dir = None if id(dispatcher) in _uncached else dispatcher.stats.cache_path
        _say(notice(cache_dir))

    def on_end(self, ev: event.Event) -> None:
        pass


event.register("numba:compile", _FirstCompile())  # type: ignore[no-untyped-call]
