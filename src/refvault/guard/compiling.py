"""How the guard's numba kernels are made (:func:`kernel`), and the one line that says when they compile.

Every kernel of :mod:`~refvault.guard.kernels`, :mod:`~refvault.guard.folding` and
:mod:`~refvault.guard.base64_scan` is ``numba.njit(cache=True, nogil=True)``: numba compiles a kernel on its
first call (for the argument types it gets) and saves the machine code in its cache; later processes load it
from there (all of them in well under a second) instead of compiling again. ``nogil``: scans from several threads
run in parallel. ``python -m refvault.guard.warm`` compiles them all ahead of time (the Makefile's install steps
run it).

Invariants:

* **The first compile in a process is announced, once, before it starts.** The first time numba starts
  compiling one of these kernels (it looked in its cache and found nothing for this source, this machine and
  these argument types; numba's ``numba:compile`` event), one line says so before any compiling:
  ``refvault: compiling the leak guard's kernels for this machine (once, about N s; cached in DIR)``. Loading
  from the cache says nothing; nor do later compiles in the same process.
* **One line, where it is seen.** The line is logged at WARNING on the ``refvault.guard`` logger when logging is
  configured for it (that logger or an ancestor has a handler), else written to stderr; never both.
* **Where the cache is** (numba's rule): ``$NUMBA_CACHE_DIR`` if set; else ``__pycache__`` beside the modules if
  it is writable; else the user's cache directory (``~/.cache/numba``). An install where none of these is
  writable still imports and works: the kernels are then compiled in every process (:func:`kernel` falls back
  to an uncached kernel), and the line says so and how to cache them.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

import numba
from numba.core import event

__all__ = ["COMPILE_SECONDS", "LOGGER", "kernel", "kernels", "notice"]

COMPILE_SECONDS: Final = 6
"""About how long compiling every kernel takes on an idle 2-core machine (``bench/guard.py`` measures it)."""
LOGGER: Final = logging.getLogger("refvault.guard")

_F = TypeVar("_F", bound=Callable[..., Any])
_kernels: list[Any] = []  # every kernel made by kernel(), in the order made
_ours: set[int] = set()  # their ids
_uncached: set[int] = set()  # the ids of those that found no writable cache directory
_lock = threading.Lock()
_announced = False


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


def _say(line: str) -> None:
    """Log ``line`` at WARNING if logging is configured for the guard's logger, else write it to stderr."""
    if LOGGER.hasHandlers():
        LOGGER.warning(line)
    else:
        print(line, file=sys.stderr, flush=True)


class _FirstCompile(event.Listener):
    """Says :func:`notice` when numba starts compiling one of these kernels for the first time in this process."""

    def on_start(self, ev: event.Event) -> None:
        global _announced
        dispatcher: Any = ev.data.get("dispatcher") if isinstance(ev.data, dict) else None
        if dispatcher is None or id(dispatcher) not in _ours:
            return
        with _lock:
            if _announced:
                return
            _announced = True
        cache_dir = None if id(dispatcher) in _uncached else dispatcher.stats.cache_path
        _say(notice(cache_dir))

    def on_end(self, ev: event.Event) -> None:
        pass


event.register("numba:compile", _FirstCompile())  # type: ignore[no-untyped-call]
