"""The ``refvault`` command line: capture, inspect, read back, check and collect artifacts.

::

    refvault put FILE|-                     capture a file (or stdin) and print its descriptor
    refvault show ID                        print a descriptor
    refvault cat ID                         write the verified bytes to stdout
    refvault ls                             list the scope's artifacts, newest first
    refvault read ID [--lines A B|--grep P] a verified text window or the matching lines (--from-line N)
    refvault query ID [--where JSON ...]    select records; --cursor pages on
    refvault rm ID                          delete an artifact (its bytes go at the next gc)
    refvault verify                         re-hash every blob; exit 1 on any damage
    refvault gc [--grace S] [--dry-run]     remove expired artifacts and unreferenced bytes
    refvault migrate                        create the store, or bring its catalog up to this version
    refvault mcp proxy [--url URL | -- CMD] serve an MCP server through refvault (binary results by reference)
    refvault mcp serve                      the read tools of a local store over stdio, for MCP hosts
    refvault serve [--host H --port P]      the HTTP API v1 and /mcp (refvault[server]; 127.0.0.1:8765)
    refvault keys create|list|revoke        API keys of the HTTP service (only their SHA-256 is stored)
    refvault demo                           investigate an incident end to end (scripted model, real runtime)
    refvault eval [--seed N] [--trials N]   measure the safety properties; exit 1 on anything release-blocking

Conventions:

* ``--store PATH`` picks the store. It is accepted both before the command
  (``refvault --store X ls``) and on every command (``refvault ls --store X``);
  the command's value wins. Without it the store is ``$REFVAULT_STORE`` if
  set and non-empty, else ``./.refvault``. ``serve`` and ``keys`` also take
  ``--catalog postgresql://… --blobs s3://bucket/prefix --s3-endpoint URL``
  (``$REFVAULT_CATALOG``, ``$REFVAULT_BLOBS``, ``$REFVAULT_S3_ENDPOINT``).
* Only commands that write create a store: ``put``, ``migrate``, ``keys create``,
  ``serve``, ``mcp proxy`` (and ``demo --store``); they say ``created a new store
  at PATH`` on stderr. The others exit 1 with ``no refvault store at PATH`` when
  the location holds no ``catalog.db`` (a mistyped ``--store`` creates nothing).
  No command creates a store in a non-empty directory that holds none
  (:func:`refvault.vault.location.check_store_location`).
* Commands that only read (``ls``, ``show``, ``cat``, ``read``, ``query``,
  ``verify``, ``gc --dry-run``, ``keys list``, ``manifest-key show``) open the
  store read-only: they write nothing (no migration, no key file; SQLite's own
  ``-wal``/``-shm`` files come and go beside ``catalog.db``) and work on
  read-only media. A catalog written by an older refvault is upgraded by the
  first command that writes (``refvault migrate``).
* ``--tenant/--user/--session`` (on put, show, cat, ls, rm, read, query) form
  the read scope; they default to ``$REFVAULT_TENANT`` etc., else ``local``.
  "Not found" names the scope used (``not found in scope t/u/s``) and how to
  choose another, and never whether the id exists in another scope.
* ``read`` and ``query`` print what they cover, and the options that continue
  (``--from-line N``, ``--lines A B``, ``--bytes O L``, ``--cursor C``), on
  stderr. On a terminal, ``read`` shows control characters of the text (other
  than newlines and tabs) escaped, so an artifact cannot drive the terminal;
  piped, it writes the text as it is; ``cat`` always writes the raw bytes.
* ``--json`` on every command prints machine-readable output: descriptors as
  ``Descriptor.to_dict()``, lists as arrays, reports as objects. The outermost
  object (or each object of an outermost array) keeps its fields in their
  defined order; objects nested inside have sorted keys, so a descriptor
  prints byte-for-byte the same from put, show and ls.
* Errors print ``error: <message>`` on stderr and exit 2 for bad input
  (:class:`~refvault.errors.InvalidArgument` and usage errors), 1 for anything
  else (not found, damaged, no store); Ctrl-C (SIGINT) exits 130, and an
  interrupted capture publishes nothing. With ``--json`` the error is also printed on stdout as
  ``{"error": {"type": "NotFound", "message": "..."}}``. Messages never
  contain artifact content.
* The console script (:func:`refvault.cli.entry.run`, also ``python -m refvault.cli``) pauses the
  cyclic garbage collector while a command loads; a one-artifact command
  (:data:`~refvault.cli.group.QUICK_COMMANDS`) keeps it paused and ends with ``os._exit`` after
  flushing its output, every other command turns it back on and exits normally.
* Importing this package loads nothing: ``main`` and the helpers below are
  imported on first use. The commands load click and refvault's small value
  modules; the vault, its storage backends and rich are imported when a
  command runs, and ``demo``, ``eval``, ``mcp``, ``serve`` and ``keys`` only
  when they are invoked (``refvault.cli.group.LAZY_COMMANDS``).

Layout, bottom to top (a module imports only from those below it):

* :mod:`refvault.cli.options`: the shared options (``--store``, ``--json``,
  the scope), click only;
* :mod:`refvault.cli.console`: errors, opening the store, JSON and rich output;
* the commands: :mod:`refvault.cli.artifacts` (put, show, cat, ls, rm),
  :mod:`refvault.cli.reads` (read, query), :mod:`refvault.cli.maintenance`
  (verify, gc, manifest-key), and the groups other packages define with the
  same helpers: ``demo`` (:mod:`refvault.demo.command`), ``eval``
  (:mod:`refvault.evaluation.command`), ``mcp``
  (:mod:`refvault.cli.mcp`), ``serve`` and ``keys``
  (:mod:`refvault.cli.serve`);
* :mod:`refvault.cli.group`: the ``refvault`` group, which attaches them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from refvault.lazy import lazy_exports

if TYPE_CHECKING:
    from refvault.cli.artifacts import render_descriptor
    from refvault.cli.console import BadInput, CliError, descriptor_json, make_console, open_store, plural
    from refvault.cli.group import main
    from refvault.cli.options import Duration

__all__ = [
    "BadInput",
    "CliError",
    "Duration",
    "descriptor_json",
    "main",
    "make_console",
    "open_store",
    "plural",
    "render_descriptor",
]

_EXPORTS = {
    "BadInput": "refvault.cli.console",
    "CliError": "refvault.cli.console",
    "Duration": "refvault.cli.options",
    "descriptor_json": "refvault.cli.console",
    "main": "refvault.cli.group",
    "make_console": "refvault.cli.console",
    "open_store": "refvault.cli.console",
    "plural": "refvault.cli.console",
    "render_descriptor": "refvault.cli.artifacts",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
