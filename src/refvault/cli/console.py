"""What every ``refvault`` command shares to talk to people: errors, the store, JSON and rich output.

Below every command module: :mod:`refvault.cli`'s own commands, ``serve``/``keys``
(:mod:`refvault.cli.serve`), ``refvault mcp`` (:mod:`refvault.cli.mcp`), ``refvault demo``
(:mod:`refvault.demo`) and ``refvault eval`` (:mod:`refvault.evaluation`) import these helpers, and this module
imports none of them. It loads click and refvault's small value modules; the vault and rich are imported when a
helper that needs them runs.

* :class:`CliError` prints ``error: <message>`` and exits 1; :class:`BadInput` (an
  :class:`~refvault.errors.InvalidArgument`) exits 2; :func:`cli_error` picks one for a
  :class:`~refvault.errors.RefvaultError`.
* :func:`open_store` opens a vault and names the store in its error; :func:`opened` is the command's store
  (``--store``, else ``$REFVAULT_STORE``, else ``./.refvault``), which must exist unless ``create`` (then
  ``created a new store at PATH`` goes to stderr); commands that only read open it ``read_only``. Given the
  command's ``scope``, an artifact not found names that scope and how to choose another (never whether the
  id exists elsewhere).
* :func:`print_json` prints the outermost object's fields in their defined order and sorts every nested
  dict's keys; :func:`descriptor_json` is ``Descriptor.to_dict()`` in that form.
* :func:`make_console` is a rich console, wide off a terminal; :func:`text` is caller-supplied text shown
  literally (no markup, no control characters); :func:`for_terminal` is artifact text with its control
  characters escaped (all but newlines and tabs), for a terminal.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click

from refvault.cli.options import SCOPE_PARTS, store_location
from refvault.errors import InvalidArgument, NotFound, RefvaultError, shown_id
from refvault.model import Descriptor, Scope

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from refvault.vault import Vault

__all__ = [
    "PIPE_WIDTH",
    "BadInput",
    "CliError",
    "cli_error",
    "descriptor_json",
    "error_message",
    "for_terminal",
    "human_size",
    "make_console",
    "is_new_store",
    "no_store",
    "not_found",
    "open_store",
    "opened",
    "plural",
    "print_json",
    "read_only_media",
    "text",
]

PIPE_WIDTH = 200


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 blob``, ``2 blobs``, ``1,024 bytes``; ``nouns`` for irregular plurals."""
    return f"{count:,} {noun if count == 1 else nouns or noun + 's'}"


# -- errors ------------------------------------------------------------------------


class CliError(click.ClickException):
    """A refvault error, shown as ``error: <message>``; exit code 1.

    ``error_type`` names it in ``--json`` output: the :class:`RefvaultError`
    subclass (``NotFound``, ``StorageError``, ...) or a CLI-level name.
    """

    def __init__(self, message: str, error_type: str = "Error") -> None:
        super().__init__(message)
        self.error_type = error_type

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


class BadInput(CliError):
    """A refvault :class:`~refvault.errors.InvalidArgument`; exit code 2, like click's usage errors."""

    exit_code = 2


def error_message(exc: BaseException) -> str:
    """The message of ``exc``, without the ``[Errno N]`` prefix of OS-level errors."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def cli_error(exc: RefvaultError, prefix: str = "") -> CliError:
    failure = BadInput if isinstance(exc, InvalidArgument) else CliError
    return failure(prefix + error_message(exc), type(exc).__name__)


def open_store(location: str | os.PathLike[str], *, read_only: bool = False, audit: bool = True) -> Vault:
    """``Vault.open(location)``; a failure becomes a :class:`CliError` that names the store.

    ``audit=False``: no persistent audit log (a store opened ``read_only`` keeps none either).
    """
    from refvault.vault import Vault

    try:
        return Vault.open(location, read_only=read_only, audit=audit)
    except RefvaultError as exc:
        raise cli_error(exc, f"cannot open store {os.fspath(location)}: ") from None


def no_store(location: str) -> CliError:
    """The error of a command that needs a store where there is none (exit 1, like "not found")."""
    return CliError(
        f"no refvault store at {location} (run 'refvault put' to create one, or pass --store)", "StoreNotFound"
    )


def is_new_store(location: str) -> bool:
    """Whether ``location`` is an embedded store's directory that holds no store yet (a file is not)."""
    return "://" not in location and not os.path.isfile(location) and not (Path(location) / "catalog.db").exists()


def read_only_media(ctx: click.Context) -> bool:
    """Whether the command's store is an embedded one this process cannot write (read-only media, permissions)."""
    location = store_location(ctx)
    return "://" not in location and os.path.isdir(location) and not os.access(location, os.W_OK)


def not_found(exc: NotFound, scope: Scope) -> CliError:
    """ "Not found" naming the scope the command used and how to choose another; nothing about other scopes."""
    options = "/".join(f"--{part}" for part in SCOPE_PARTS)
    variables = "/".join(f"$REFVAULT_{part.upper()}" for part in SCOPE_PARTS)
    return CliError(
        f"artifact {shown_id(exc.artifact_id)} not found in scope {scope.tenant}/{scope.user}/{scope.session}"
        f" (choose the scope with {options} or {variables})",
        type(exc).__name__,
    )


@contextmanager
def opened(
    ctx: click.Context, *, create: bool = False, read_only: bool = False, scope: Scope | None = None, audit: bool = True
) -> Iterator[Vault]:
    """The command's vault.

    Unless ``create``, a location without a store is an error (:func:`no_store`), not a new store; with
    ``create``, a new store is made and ``created a new store at PATH`` goes to stderr. ``read_only``
    (for the commands that only read) opens the store without changing its content: it works on
    read-only media (where nothing is written at all). With the command's ``scope``, a
    :class:`~refvault.errors.NotFound` raised in the block becomes :func:`not_found`.
    """
    location = store_location(ctx)
    new = is_new_store(location)
    if new and not create:
        raise no_store(location)
    with open_store(location, read_only=read_only, audit=audit) as vault:
        if new:
            click.echo(f"created a new store at {location}", err=True)
        try:
            yield vault
        except NotFound as exc:
            if scope is None:
                raise
            raise not_found(exc, scope) from None


# -- JSON output -------------------------------------------------------------------


def _sorted_keys(value: object) -> object:
    """``value`` with the keys of every dict in it sorted, as ``json.dumps(sort_keys=True)`` would."""
    if isinstance(value, Mapping):
        return {key: _sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list | tuple):
        return [_sorted_keys(item) for item in value]
    return value


def _top_level_in_order(value: object) -> object:
    """Keep the fields of the outermost object(s) in their defined order; sort everything nested."""
    if isinstance(value, Mapping):
        return {key: _sorted_keys(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_top_level_in_order(item) for item in value]
    return value


def descriptor_json(descriptor: Descriptor) -> dict[str, Any]:
    """``descriptor.to_dict()``: the ten fields in their defined order, the dicts inside with sorted keys.

    A fresh descriptor and the same one read back from the catalog can hold
    their nested dicts in different orders; this makes them print the same.
    """
    return {key: _sorted_keys(value) for key, value in descriptor.to_dict().items()}


def print_json(value: object) -> None:
    click.echo(json.dumps(_top_level_in_order(value), indent=2))


# -- human output ------------------------------------------------------------------


def make_console(*, stderr: bool = False, soft_wrap: bool = False) -> Console:
    """A rich console; off a terminal (and without ``$COLUMNS``) it is wide, so rows and hashes stay whole."""
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False, soft_wrap=soft_wrap)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PIPE_WIDTH  # keep table rows on one line for grep and friends
    return console


def text(value: object, style: str = "") -> Text:
    """Caller-supplied strings as literal text: no rich markup, no terminal control characters."""
    from rich.text import Text

    raw = "—" if value is None else str(value)
    safe = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in raw)
    return Text(safe, style=style)


# C0 and C1 control characters and DEL, except tab, newline and a carriage return that ends a line (CRLF).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")


def for_terminal(value: str) -> str:
    """``value`` with every control character but ``\\t``, ``\\n`` and CRLF's ``\\r`` escaped (``\\x1b``).

    Text from an artifact can hold escape sequences that act on a terminal (OSC 52 sets the clipboard,
    others retitle the window or hide text); escaped, they are shown, never run. Everything else is unchanged.
    """
    return _CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}", value)


def human_size(size: int) -> str:
    """``512 B``, ``1.5 KiB``, ``2.0 GiB``: a byte count for people."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
