"""The ``refvault`` console script: the command group, run the way a one-shot process should be.

A command that touches one artifact spends most of its time starting up and shutting down: importing
SQLAlchemy, click and rich, then tearing the interpreter down module by module. Two costs it does not need:

* **The cyclic garbage collector while modules load.** Everything an import creates lives as long as the
  process, so collecting it finds nothing. :func:`run` pauses the collector from the start; for a command of
  :data:`QUICK_COMMANDS` it stays paused (they are short and hold little: one descriptor, one window, one page,
  or chunks streamed and freed by reference counting), and for every other command the group freezes what is
  loaded and turns it back on before the command runs (``serve`` or ``verify`` of a large store collects as
  usual).
* **The interpreter's teardown.** After a quick command :func:`run` flushes stdout and stderr and leaves with
  :func:`os._exit`: by then the command has closed its vault (every command opens it in a ``with`` block), and
  these commands leave nothing to a finaliser (no temporary directory, no child process, no thread).

Every other command, and anything that fails before a command is chosen, exits the normal way. The exit code
is the one the command chose (0, 1, 2 or 130; see :mod:`refvault.cli.group`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys

from refvault.cli.group import QUICK_COMMANDS, main, quick_exit_requested

__all__ = ["QUICK_COMMANDS", "run"]


def run() -> None:
    """Run ``refvault`` with the command line of this process (the console script's entry point)."""
    gc.disable()
    try:
        main(prog_name="refvault")
    except SystemExit as done:
        if not quick_exit_requested():
            raise
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing left to say
                stream.flush()
        os._exit(code)
    finally:
        gc.enable()
