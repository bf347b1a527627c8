"""The ``refvault`` command line: capture, inspect, read back, check and collect artifacts.

::

    refvault put FILE|-                     capture a file (or stdin) and print its descriptor
    refvault show ID                        print a descriptor
    refvault cat ID                         write the verified bytes to stdout
    refvault ls                             list the scope's artifacts, newest first
    refvault read ID [--lines A B|--grep P] a verified text window or the matching lines
    refvault query ID [--where JSON ...]    select records; --cursor pages on
    refvault rm ID                          delete an artifact (its bytes go at the next gc)
    refvault verify                         re-hash every blob; exit 1 on any damage
    refvault gc [--grace S] [--dry-run]     remove expired artifacts and unreferenced bytes
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
* Only ``put`` (and ``demo --store``) create a store. The other commands exit 1
  with ``no refvault store at PATH`` when the location holds no ``catalog.db``.
* ``--tenant/--user/--session`` (on put, show, cat, ls, rm) form the read
  scope; they default to ``$REFVAULT_TENANT`` etc., else ``local``.
* ``--json`` on every command prints machine-readable output: descriptors as
  ``Descriptor.to_dict()``, lists as arrays, reports as objects. The outermost
  object (or each object of an outermost array) keeps its fields in their
  defined order; objects nested inside have sorted keys, so a descriptor
  prints byte-for-byte the same from put, show and ls.
* Errors print ``error: <message>`` on stderr and exit 2 for bad input
  (:class:`~refvault.errors.InvalidArgument` and usage errors), 1 for anything
  else. With ``--json`` the error is also printed on stdout as
  ``{"error": {"type": "NotFound", "message": "..."}}``. Messages never
  contain artifact content.
* Importing this module loads only click and refvault's small value modules;
  the vault, its storage backends and rich are imported when a command runs.
"""

from __future__ import annotations

import base64
import itertools
import json
import mimetypes
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click

from refvault import __version__
from refvault._store_option import STORE_KEY, store_option
from refvault.errors import InvalidArgument, RefvaultError
from refvault.ids import check_artifact_id
from refvault.model import Descriptor, Scope, format_time

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.text import Text

    from refvault.vault.vault import GcReport, Vault, VerifyReport

__all__ = ["descriptor_json", "main", "make_console", "open_store", "plural", "render_descriptor"]

F = TypeVar("F", bound=Callable[..., Any])

SCOPE_PARTS = ("tenant", "user", "session")
DEFAULT_SCOPE_NAME = "local"
DEFAULT_STORE = "./.refvault"
STORE_ENVVAR = "REFVAULT_STORE"
PIPE_WIDTH = 200

# ``ctx.meta`` is shared by the group's context and the command's: options record what they saw there.
_JSON_KEY = "refvault.json"
_ARGS_KEY = "refvault.args"

# Types the stdlib table does not know but refvault's readers do (records, lines).
_EXTRA_MEDIA_TYPES = {
    ".jsonl": "application/x-ndjson",
    ".ndjson": "application/x-ndjson",
    ".parquet": "application/vnd.apache.parquet",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
}
# A compressed file's bytes are the compressed stream, not the inner type.
_ENCODING_MEDIA_TYPES = {
    "gzip": "application/gzip",
    "bzip2": "application/x-bzip2",
    "xz": "application/x-xz",
    "compress": "application/x-compress",
    "br": "application/x-brotli",
}


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


def _message(exc: BaseException) -> str:
    """The message of ``exc``, without the ``[Errno N]`` prefix of OS-level errors."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def _cli_error(exc: RefvaultError, prefix: str = "") -> CliError:
    failure = BadInput if isinstance(exc, InvalidArgument) else CliError
    return failure(prefix + _message(exc), type(exc).__name__)


def _wants_json(ctx: click.Context) -> bool:
    """Whether the command line asked for ``--json``, even if parsing failed before the flag was read."""
    flag = ctx.meta.get(_JSON_KEY)
    if flag is not None:
        return bool(flag)
    args: tuple[str, ...] = ctx.meta.get(_ARGS_KEY, ())
    return "--json" in itertools.takewhile(lambda arg: arg != "--", args)


def _report_json_error(ctx: click.Context, exc: click.ClickException) -> None:
    """Under ``--json``, also print the error as JSON on stdout; the human line still goes to stderr."""
    if not _wants_json(ctx):
        return
    if isinstance(exc, CliError):
        error_type = exc.error_type
    elif isinstance(exc, click.UsageError):
        error_type = "UsageError"
    else:
        error_type = type(exc).__name__
    error = {"type": error_type, "message": exc.format_message()}
    click.echo(json.dumps({"error": error}, indent=2))


class _Group(click.Group):
    """Turns every :class:`RefvaultError` into a :class:`CliError`; reports errors as JSON under ``--json``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_ARGS_KEY] = tuple(args)
        try:
            return super().parse_args(ctx, args)
        except click.ClickException as exc:
            _report_json_error(ctx, exc)
            raise

    def invoke(self, ctx: click.Context) -> Any:
        try:
            try:
                return super().invoke(ctx)
            except RefvaultError as exc:
                raise _cli_error(exc) from None
        except click.ClickException as exc:
            _report_json_error(ctx, exc)
            raise


# -- options -----------------------------------------------------------------------


def _remember(key: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is not None:
            ctx.meta[key] = value
        return value

    return callback


def _store_option(func: F) -> F:
    """``--store``, on the group and on every command; the last one parsed (the command's) wins."""
    return store_option(f"Store directory (default: ${STORE_ENVVAR}, else {DEFAULT_STORE}).")(func)


def _json_option(func: F) -> F:
    option = click.option(
        "--json", "as_json", is_flag=True, callback=_remember(_JSON_KEY), help="Print machine-readable JSON."
    )
    return option(func)


def _scope_options(func: F) -> F:
    for part in reversed(SCOPE_PARTS):
        option = click.option(
            f"--{part}",
            envvar=f"REFVAULT_{part.upper()}",
            default=DEFAULT_SCOPE_NAME,
            show_default=True,
            show_envvar=True,
            metavar="NAME",
            help=f"The {part} of the read scope.",
        )
        func = option(func)
    return func


if TYPE_CHECKING:
    _DurationBase = click.ParamType[timedelta]
else:  # click < 8.5 has no generic ParamType
    _DurationBase = click.ParamType

_DURATION = re.compile(r"(\d+)([smhd])")
_SECONDS_PER_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class Duration(_DurationBase):
    """A positive duration such as ``30s``, ``15m``, ``2h`` or ``7d``."""

    name = "duration"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        text = str(value).strip().lower()
        match = _DURATION.fullmatch(text)
        if match is None:
            self.fail("expected a number followed by s, m, h or d, e.g. 30s, 15m, 2h or 7d", param, ctx)
        digits = match.group(1).lstrip("0")
        if not digits:
            self.fail(f"{text} must be longer than zero", param, ctx)
        latest = datetime.max.replace(tzinfo=UTC) - datetime.now(UTC)
        # More than 12 digits is past year 9999 in any unit; checking first keeps int() cheap.
        if len(digits) > 12 or int(digits) * _SECONDS_PER_UNIT[match.group(2)] >= latest.total_seconds():
            self.fail(f"{text} is too far in the future (the deadline must be before year 10000)", param, ctx)
        return timedelta(seconds=int(digits) * _SECONDS_PER_UNIT[match.group(2)])


def _guess_media_type(filename: str) -> str:
    suffix = Path(filename).suffix.lower()
    if suffix in _EXTRA_MEDIA_TYPES:
        return _EXTRA_MEDIA_TYPES[suffix]
    guessed, encoding = mimetypes.guess_type(filename)
    if encoding is not None:
        return _ENCODING_MEDIA_TYPES.get(encoding, "application/octet-stream")
    return guessed or "application/octet-stream"


# -- the store ---------------------------------------------------------------------


def _explicit_store(ctx: click.Context) -> str | None:
    """The ``--store`` given on the command line (the command's, else the group's), if any."""
    store: str | None = ctx.meta.get(STORE_KEY)
    return store


def _store_location(ctx: click.Context) -> str:
    """``--store``, else ``$REFVAULT_STORE`` if set and non-empty, else ``./.refvault``."""
    return _explicit_store(ctx) or os.environ.get(STORE_ENVVAR) or DEFAULT_STORE


def open_store(location: str | os.PathLike[str]) -> Vault:
    """``Vault.open(location)``; a failure becomes a :class:`CliError` that names the store."""
    from refvault.vault.vault import Vault

    try:
        return Vault.open(location)
    except RefvaultError as exc:
        raise _cli_error(exc, f"cannot open store {os.fspath(location)}: ") from None


@contextmanager
def _opened(ctx: click.Context, *, create: bool = False) -> Iterator[Vault]:
    """The command's vault. Unless ``create``, a location without a store is an error, not a new store."""
    location = _store_location(ctx)
    if not create and "://" not in location and not (Path(location) / "catalog.db").exists():
        raise CliError(
            f"no refvault store at {location} (run 'refvault put' to create one, or pass --store)", "StoreNotFound"
        )
    with open_store(location) as vault:
        yield vault


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


def _print_json(value: object) -> None:
    click.echo(json.dumps(_top_level_in_order(value), indent=2))


# -- human output ------------------------------------------------------------------


def make_console(*, stderr: bool = False, soft_wrap: bool = False) -> Console:
    """A rich console; off a terminal (and without ``$COLUMNS``) it is wide, so rows and hashes stay whole."""
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False, soft_wrap=soft_wrap)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PIPE_WIDTH  # keep table rows on one line for grep and friends
    return console


def _text(value: object, style: str = "") -> Text:
    """Caller-supplied strings as literal text: no rich markup, no terminal control characters."""
    from rich.text import Text

    raw = "—" if value is None else str(value)
    safe = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in raw)
    return Text(safe, style=style)


def _size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _compact_json(value: Mapping[str, Any]) -> str | None:
    return json.dumps(value, sort_keys=True) if value else None


def _when(moment: datetime | None) -> str:
    return "never" if moment is None else format_time(moment)[:19].replace("T", " ") + "Z"


_HASH_WIDTH = len("sha256:") + 64


def render_descriptor(descriptor: Descriptor, *, title: str | None = None) -> RenderableType:
    """A rich panel with the fields of a descriptor people look for first.

    The value column never gets narrower than a content hash while the
    console is wide enough (91 columns), so ``sha256:<64 hex>`` stays on one
    line; on narrower consoles values fold.
    """
    from rich.panel import Panel
    from rich.table import Table

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold", min_width=_HASH_WIDTH)
    scope = descriptor.scope
    completeness = descriptor.completeness
    status = str(completeness.get("status", "unknown"))
    if completeness.get("records") is not None:
        status += f", {plural(completeness['records'], 'record')}"
    omissions = completeness.get("omissions") or ()
    if omissions:
        status += f", {plural(len(omissions), 'omission')}"
    rows: list[tuple[str, object]] = [
        ("artifact id", descriptor.artifact_id),
        ("content hash", descriptor.content_hash),
        ("media type", descriptor.media_type),
        ("size", f"{plural(descriptor.size, 'byte')} ({_size(descriptor.size)})"),
        ("filename", descriptor.filename),
        ("disclosure", descriptor.disclosure),
        ("created", format_time(descriptor.created_at)),
        ("expires", "never" if descriptor.expires_at is None else format_time(descriptor.expires_at)),
        ("scope", f"{scope['tenant']} / {scope['user']} / {scope['session']}"),
        ("run id", scope.get("run_id")),
        ("tool call id", descriptor.tool_call_id),
        ("schema version", descriptor.schema_version),
        ("completeness", status),
        ("source version", _compact_json(descriptor.to_dict()["source_version"])),
        ("selectors", ", ".join(descriptor.retrieval.get("selectors", ()))),
    ]
    for label, value in rows:
        grid.add_row(label, _text(value))
    return Panel(grid, title=_text(title or descriptor.artifact_id, "bold"), expand=False)


def _show_descriptor(descriptor: Descriptor, as_json: bool, *, title: str | None = None) -> None:
    if as_json:
        _print_json(descriptor_json(descriptor))
    else:
        make_console().print(render_descriptor(descriptor, title=title))


# -- commands ----------------------------------------------------------------------


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@_store_option
@click.version_option(__version__, prog_name="refvault")
def main() -> None:
    """Safe artifact references: store bytes once, read them back verified, by id.

    --store is accepted here and on every command; the command's value wins.
    """


@main.command()
@click.argument("source", metavar="FILE|-", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--media-type", help="Media type (default: guessed from the file name, else application/octet-stream).")
@click.option("--filename", help="Display file name to record (default: the FILE's base name; none for stdin).")
@click.option(
    "--sealed",
    is_flag=True,
    help="Store as sealed: for use by reference only (by tools); model-facing read tools refuse sealed artifacts.",
)
@click.option("--expires-in", type=Duration(), metavar="DURATION", help="Retention deadline, e.g. 30s, 15m, 2h, 7d.")
@click.option("--tool-call-id", help="Provenance: the tool call that produced the bytes.")
@click.option("--idempotency-key", help="A retried put with the same key in the same scope returns the same id.")
@_scope_options
@_store_option
@_json_option
@click.pass_context
def put(
    ctx: click.Context,
    source: str,
    media_type: str | None,
    filename: str | None,
    sealed: bool,
    expires_in: timedelta | None,
    tool_call_id: str | None,
    idempotency_key: str | None,
    tenant: str,
    user: str,
    session: str,
    as_json: bool,
) -> None:
    """Capture FILE (or stdin, with -) and print its descriptor.

    Creates the store if there is none at the location yet.
    """
    scope = Scope(tenant, user, session)
    from_stdin = source == "-"
    if filename is None and not from_stdin:
        filename = Path(source).name
    if media_type is None:
        media_type = "application/octet-stream" if from_stdin else _guess_media_type(source)
    expires_at = None if expires_in is None else datetime.now(UTC) + expires_in
    with _input(source) as data, _opened(ctx, create=True) as vault:
        descriptor = vault.put(
            scope,
            data,
            media_type=media_type,
            filename=filename,
            disclosure="sealed" if sealed else "model",
            expires_at=expires_at,
            tool_call_id=tool_call_id,
            idempotency_key=idempotency_key,
        )
    _show_descriptor(descriptor, as_json, title="captured")


@contextmanager
def _input(source: str) -> Iterator[IO[bytes]]:
    if source == "-":
        yield sys.stdin.buffer
        return
    try:
        file = open(source, "rb")  # noqa: SIM115 - closed below; only the open itself is guarded
    except OSError as exc:
        raise CliError(f"cannot read {source}: {_message(exc)}", "InputError") from None
    with file:
        yield file


@main.command()
@click.argument("artifact_id", metavar="ID")
@_scope_options
@_store_option
@_json_option
@click.pass_context
def show(ctx: click.Context, artifact_id: str, tenant: str, user: str, session: str, as_json: bool) -> None:
    """Print the descriptor of artifact ID."""
    scope = Scope(tenant, user, session)
    check_artifact_id(artifact_id)
    with _opened(ctx) as vault:
        descriptor = vault.describe(scope, artifact_id)
    _show_descriptor(descriptor, as_json)


@main.command()
@click.argument("artifact_id", metavar="ID")
@_scope_options
@_store_option
@_json_option
@click.pass_context
def cat(ctx: click.Context, artifact_id: str, tenant: str, user: str, session: str, as_json: bool) -> None:
    """Write the bytes of artifact ID to stdout, verified chunk by chunk.

    Each chunk is checked against its digest before any of it is written; on
    damage the command stops with an error. With --json, print one object with
    the id, content hash, size and the bytes in base64; the whole artifact is
    verified first, so the output is either complete JSON or only the error.

    Sealed artifacts are written too: the CLI is an operator tool. (Only
    model-facing read tools refuse sealed artifacts.)
    """
    scope = Scope(tenant, user, session)
    check_artifact_id(artifact_id)
    out = sys.stdout.buffer
    with _opened(ctx) as vault:
        descriptor = vault.describe(scope, artifact_id) if as_json else None
        with vault.stream(scope, artifact_id) as stream:
            if descriptor is None:
                for chunk in stream.iter_chunks():
                    out.write(chunk)
            else:
                for _ in stream.iter_chunks():  # verify every chunk before printing any JSON
                    pass
                stream.seek(0)
                _write_base64_json(out, descriptor, stream.iter_chunks())
    out.flush()


def _write_base64_json(out: IO[bytes], descriptor: Descriptor, chunks: Iterator[bytes]) -> None:
    head = {
        "artifact_id": descriptor.artifact_id,
        "content_hash": descriptor.content_hash,
        "media_type": descriptor.media_type,
        "size": descriptor.size,
        "encoding": "base64",
    }
    out.write(json.dumps(head)[:-1].encode("ascii") + b', "content": "')
    carry = b""
    for chunk in chunks:
        data = carry + chunk
        whole = len(data) - len(data) % 3  # base64 of a multiple of 3 bytes has no padding
        out.write(base64.b64encode(data[:whole]))
        carry = data[whole:]
    out.write(base64.b64encode(carry) + b'"}\n')


@main.command(name="read")
@click.argument("artifact_id", metavar="ID")
@click.option("--lines", nargs=2, type=int, metavar="START END", help="Lines [START, END), zero-based.")
@click.option(
    "--bytes", "byte_range", nargs=2, type=int, metavar="OFFSET LENGTH", help="Bytes [OFFSET, OFFSET+LENGTH)."
)
@click.option("--grep", "pattern", metavar="PATTERN", help="Print the lines containing PATTERN instead of a window.")
@click.option("--regex", is_flag=True, help="Treat PATTERN as a regular expression (RE2 syntax).")
@click.option("--max-chars", type=int, default=20_000, show_default=True, help="Cap on the characters returned.")
@_scope_options
@_store_option
@_json_option
@click.pass_context
def read_command(
    ctx: click.Context,
    artifact_id: str,
    lines: tuple[int, int] | None,
    byte_range: tuple[int, int] | None,
    pattern: str | None,
    regex: bool,
    max_chars: int,
    tenant: str,
    user: str,
    session: str,
    as_json: bool,
) -> None:
    """Print a verified window of text artifact ID, or the lines matching --grep.

    The coverage (what was returned of how much, and how to continue) goes to
    stderr; --json prints the whole response, as the model's read tool sees it.
    """
    from refvault.read import windows

    scope = Scope(tenant, user, session)
    with _opened(ctx) as vault:
        if pattern is not None:
            answer = windows.grep(vault, scope, artifact_id, pattern, regex=regex)
        else:
            answer = windows.window(
                vault,
                scope,
                artifact_id,
                lines=list(lines) if lines else None,
                byte_range=list(byte_range) if byte_range else None,
                max_chars=max_chars,
            )
    if as_json:
        _print_json(answer)
        return
    if pattern is not None:
        for match in answer["matches"]:
            click.echo(f"{match['line']}: {match['text']}")
        complete = "complete" if answer["scan_complete"] else "incomplete"
        note = f"{plural(answer['returned'], 'match', 'matches')}, {complete} scan of {answer['scanned_lines']:,} lines"
    else:
        click.echo(answer["text"], nl=False)
        note = f"{answer['unit']} {answer['start']}-{answer['end']} of {answer['total']:,}"
    if answer.get("next"):
        note += f"; continue with {json.dumps(answer['next'])}"
    click.echo(note, err=True)


@main.command(name="query")
@click.argument("artifact_id", metavar="ID")
@click.option(
    "--where", metavar="JSON", help='A selector, e.g. \'{"field": "severity", "op": "eq", "value": "critical"}\'.'
)
@click.option("--fields", metavar="A,B", help="Comma-separated fields to return (default: all).")
@click.option("--order", "order_by", multiple=True, metavar="FIELD[:desc]", help="Sort key; repeat for more.")
@click.option("--limit", type=int, default=20, show_default=True, help="Records per page (at most 1000).")
@click.option("--range", "record_range", nargs=2, type=int, metavar="START END", help="Records [START, END) only.")
@click.option("--cursor", metavar="CURSOR", help="next_cursor from the previous page (same selection).")
@_scope_options
@_store_option
@_json_option
@click.pass_context
def query_command(
    ctx: click.Context,
    artifact_id: str,
    where: str | None,
    fields: str | None,
    order_by: tuple[str, ...],
    limit: int,
    record_range: tuple[int, int] | None,
    cursor: str | None,
    tenant: str,
    user: str,
    session: str,
    as_json: bool,
) -> None:
    """Select records from record artifact ID (JSON Lines, JSON array, CSV, Parquet).

    Prints the records as JSON lines ({"index": ..., "record": ...}) and, on
    stderr, what the page covers and the cursor for the next one.
    """
    from refvault.read import records

    scope = Scope(tenant, user, session)
    try:
        selector = None if where is None else json.loads(where)
    except ValueError:
        raise BadInput('--where must be JSON, e.g. \'{"field": "code", "op": "gt", "value": 499}\'') from None
    order = [
        {
            "field": key.removesuffix(":desc").removesuffix(":asc"),
            "direction": "desc" if key.endswith(":desc") else "asc",
        }
        for key in order_by
    ]
    with _opened(ctx) as vault:
        answer = records.query(
            vault,
            scope,
            artifact_id,
            where=selector,
            fields=fields.split(",") if fields else None,
            order=order or None,
            limit=limit,
            record_range=list(record_range) if record_range else None,
            cursor=cursor,
        )
    if as_json:
        _print_json(answer)
        return
    for row in answer["records"]:
        click.echo(json.dumps(row, ensure_ascii=False))
    scan = "complete" if answer["scan_complete"] else "INCOMPLETE"
    note = (
        f"{answer['returned_records']} of {answer['total_records']:,} records; "
        f"scanned {answer['scanned_records']:,} ({scan}); capture {answer['capture_status']}"
    )
    if answer["omissions"]:
        note += f"; omissions: {json.dumps(answer['omissions'])}"
    if answer["next_cursor"]:
        note += f"\nnext page: --cursor {answer['next_cursor']}"
    click.echo(note, err=True)


@main.command(name="ls")
@_scope_options
@_store_option
@_json_option
@click.pass_context
def list_artifacts(ctx: click.Context, tenant: str, user: str, session: str, as_json: bool) -> None:
    """List the scope's unexpired artifacts, newest first."""
    scope = Scope(tenant, user, session)
    with _opened(ctx) as vault:
        descriptors = vault.list(scope)
    if as_json:
        _print_json([descriptor_json(d) for d in descriptors])
        return
    console = make_console()
    if not descriptors:
        console.print(_text(f"no artifacts in {tenant} / {user} / {session}", "dim"))
        return
    console.print(_artifact_table(descriptors))


def _artifact_table(descriptors: list[Descriptor]) -> RenderableType:
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("id", no_wrap=True)
    table.add_column("created", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("media type", overflow="fold", min_width=12)
    table.add_column("disclosure", no_wrap=True)
    table.add_column("filename", overflow="fold", min_width=10)
    for d in descriptors:
        table.add_row(
            _text(d.artifact_id),
            _text(_when(d.created_at)),
            _text(_size(d.size)),
            _text(d.media_type),
            _text(d.disclosure, "yellow" if d.disclosure == "sealed" else ""),
            _text(d.filename),
        )
    return table


@main.command()
@click.argument("artifact_id", metavar="ID")
@_scope_options
@_store_option
@_json_option
@click.pass_context
def rm(ctx: click.Context, artifact_id: str, tenant: str, user: str, session: str, as_json: bool) -> None:
    """Delete artifact ID. Its bytes are removed by a later gc once nothing references them."""
    scope = Scope(tenant, user, session)
    check_artifact_id(artifact_id)
    with _opened(ctx) as vault:
        vault.delete(scope, artifact_id)
    if as_json:
        _print_json({"artifact_id": artifact_id, "deleted": True})
    else:
        make_console().print(_text(f"deleted {artifact_id}"))


@main.command()
@_store_option
@_json_option
@click.pass_context
def verify(ctx: click.Context, as_json: bool) -> None:
    """Check every manifest row's MAC and re-hash every blob; exit 1 on any problem.

    Problems: a row that fails its MAC (manifest), a row whose blob key is in
    another tenant's namespace (misplaced), a blob that is missing or corrupt.
    """
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("verifying"), BarColumn(), DownloadColumn(binary_units=True), TimeRemainingColumn())
    console = make_console(stderr=True)
    # A bar only where someone watches: pipes and logs get no control codes or stray lines.
    bar = Progress(*columns, console=console, transient=True, disable=not console.is_terminal)
    with _opened(ctx) as vault, bar:
        task = bar.add_task("verify", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        report = vault.verify(progress=progress)
    if as_json:
        _print_json(_verify_dict(report))
    else:
        make_console().print(_verify_summary(report))
    if not report.ok:
        ctx.exit(1)


def _verify_dict(report: VerifyReport) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "blobs_checked": report.blobs_checked,
        "bytes_checked": report.bytes_checked,
        "artifacts": report.artifacts,
        "unreferenced": report.unreferenced,
        "problems": [
            {"kind": p.kind, "digest": p.digest, "detail": p.detail, "artifact_ids": list(p.artifact_ids)}
            for p in report.problems
        ],
    }


def _verify_summary(report: VerifyReport) -> RenderableType:
    from rich.console import Group
    from rich.table import Table

    counts = (
        f"{plural(report.blobs_checked, 'blob')} ({_size(report.bytes_checked)}) checked for "
        f"{plural(report.artifacts, 'artifact')}; {report.unreferenced:,} unreferenced"
    )
    if report.ok:
        return _text(f"ok: {counts}", "green")
    table = Table(header_style="bold")
    table.add_column("kind", style="red")
    table.add_column("blob", no_wrap=True)
    table.add_column("artifacts", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for p in report.problems:
        table.add_row(_text(p.kind), _text(p.digest[:16]), _text("\n".join(p.artifact_ids)), _text(p.detail))
    damaged = sum(p.kind in ("missing", "corrupt") for p in report.problems)
    altered = len(report.problems) - damaged
    found = [plural(damaged, "damaged blob")] if damaged else []
    found += [plural(altered, "altered manifest row")] if altered else []
    headline = _text(f"{', '.join(found)}: {counts}", "bold red")
    return Group(headline, table)


# -- the manifest key ---------------------------------------------------------------


@click.group(name="manifest-key", context_settings={"help_option_names": ["-h", "--help"]})
def manifest_key() -> None:
    """The key every manifest row is MAC'd with, kept outside the catalog.

    \b
    An embedded store keeps it in manifest-keys.json (0600) in the store directory.
    A postgresql:// store reads it from $REFVAULT_MANIFEST_KEY_FILE (a file made by
    'refvault manifest-key new') or $REFVAULT_MANIFEST_KEY (its text); every process
    of the store must use the same one.
    """


@manifest_key.command("new")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@_json_option
def manifest_key_new(path: Path, as_json: bool) -> None:
    """Create a key file (0600) for a scale-out store; refuses to overwrite one."""
    from refvault.catalog.macs import ENV_KEY_FILE, ManifestKeys

    keys = ManifestKeys.create_file(path)
    if as_json:
        _print_json({"path": str(path), "key_id": keys.current_id})
        return
    make_console().print(
        _text(f"created {path} (key {keys.current_id}): set ${ENV_KEY_FILE}={path} for every process of the store")
    )


@manifest_key.command("show")
@_store_option
@_json_option
@click.pass_context
def manifest_key_show(ctx: click.Context, as_json: bool) -> None:
    """Where the store's manifest key ring comes from, and its key ids (never a secret)."""
    with _opened(ctx) as vault:
        keys = vault.catalog.manifest_keys
        info = {
            "source": keys.source,
            "current": keys.current_id,
            "retired": sorted(set(keys.key_ids) - {keys.current_id}),
        }
    if as_json:
        _print_json(info)
        return
    retired = ", ".join(info["retired"]) or "none"
    make_console().print(_text(f"{info['source']}: current key {info['current']}; retired: {retired}"))


@manifest_key.command("rotate")
@click.option("--drop-retired", is_flag=True, help="Then remove the retired keys (rows still MAC'd with one fail).")
@_store_option
@_json_option
@click.pass_context
def manifest_key_rotate(ctx: click.Context, drop_retired: bool, as_json: bool) -> None:
    """Make a fresh key current and MAC every authentic row again with it.

    Old keys keep verifying unless --drop-retired. Rows that fail their MAC are left
    as they are (see 'refvault verify'); exit 1 if there are any, or if a retired key
    could not be dropped because a row still uses it.
    """
    with _opened(ctx) as vault:
        done = vault.rotate_manifest_key(drop_retired=drop_retired)
    dropped = None if done.dropped is None else list(done.dropped)
    if as_json:
        _print_json({"key_id": done.key_id, "remacd": done.remacd, "failing": done.failing, "dropped": dropped})
    else:
        console = make_console()
        console.print(_text(f"current key {done.key_id}: {plural(done.remacd, 'row')} MAC'd again", "bold"))
        if drop_retired:
            console.print(
                _text(
                    f"dropped: {', '.join(dropped) or 'none'}"
                    if dropped is not None
                    else "retired keys kept: a row still uses one (run again)"
                )
            )
        if done.failing:
            console.print(
                _text(f"{plural(done.failing, 'row')} fail their MAC and were left: run 'refvault verify'", "bold red")
            )
    if done.failing or dropped is None:
        ctx.exit(1)


@main.command()
@click.option(
    "--grace",
    type=click.FloatRange(min=0, max=100 * 365 * 86400),
    default=None,
    metavar="SECONDS",
    help="Keep unreferenced bytes younger than this (default: the vault's, 3600).",
)
@click.option("--dry-run", is_flag=True, help="Report what would be removed; remove nothing.")
@_store_option
@_json_option
@click.pass_context
def gc(ctx: click.Context, grace: float | None, dry_run: bool, as_json: bool) -> None:
    """Remove expired artifacts, then bytes and temporaries nothing references.

    Exits 1 if any unreferenced blob could not be removed.
    """
    with _opened(ctx) as vault:
        report = vault.gc(grace=grace, dry_run=dry_run)
    if as_json:
        _print_json(_gc_dict(report))
    else:
        make_console().print(_gc_summary(report))
    if report.failures:
        ctx.exit(1)


def _gc_dict(report: GcReport) -> dict[str, Any]:
    return {
        "dry_run": report.dry_run,
        "expired": list(report.expired),
        "blobs_removed": report.blobs_removed,
        "temporaries_removed": report.temporaries_removed,
        "failures": report.failures,
    }


def _gc_summary(report: GcReport) -> RenderableType:
    from rich.console import Group

    verb = "would remove" if report.dry_run else "removed"
    lines: list[RenderableType] = [
        _text(f"{verb} {plural(len(report.expired), 'expired artifact')}", "bold"),
        *(_text(f"  {artifact_id}") for artifact_id in report.expired),
        _text(f"{verb} {plural(report.blobs_removed, 'unreferenced blob')}"),
        _text(f"{verb} {plural(report.temporaries_removed, 'temporary', 'temporaries')}"),
    ]
    if report.failures:
        lines.append(_text(f"could not remove {plural(report.failures, 'blob')} (see permissions)", "bold red"))
    return Group(*lines)


@main.command()
@_store_option
@_json_option
@click.pass_context
def demo(ctx: click.Context, as_json: bool) -> None:
    """Investigate an incident end to end: a scripted model over the real runtime.

    \b
    1. capture     a diagnostic tool captures 12,840 eu-west events as an
                   artifact; the model gets a preview (id, coverage,
                   omissions), not the records
    2. absence     severity = critical: 0 matches, scan complete; the
                   evidence gate allows that bounded conclusion, not a wider one
    3. pinned      a re-capture under the same filename is a new artifact; a
                   read by the first id still returns the original bytes
    4. screenshot  an MCP tool's PNG, through the gateway, reaches the model
                   as a refvault:// link, never as base64
    5. runbook     a sealed runbook is summarised by reference and enters no
                   request; a tool echoing it is stopped by the leak guard
    6. restart     a partition leaves us-east out: the capture is partial,
                   the evidence gate refuses the restart, the model defers it

    Only the model's decisions are scripted; the Toolbox, vault, reads, MCP
    gateway, guard and evidence gate are the real ones. Prints a transcript
    and an evidence report (--json: the same as one JSON document).

    The store is a temporary directory, removed afterwards, unless --store is
    given (kept). Step 4 needs the mcp extra (pip install 'refvault[mcp]')
    and a source checkout (it runs examples/incident_mcp_server.py). Exits 1
    if any step's check fails.
    """
    from refvault.demo import run_demo

    code = run_demo(_explicit_store(ctx), as_json, open_vault=open_store)
    if code:
        ctx.exit(code)


def _attach_integrations() -> None:
    from refvault.evaluation import eval_command
    from refvault.integrations.mcp.cli import mcp as mcp_group
    from refvault.server.cli import keys as keys_group
    from refvault.server.cli import serve as serve_command

    main.add_command(eval_command)
    main.add_command(mcp_group)
    main.add_command(serve_command)
    main.add_command(keys_group)
    main.add_command(manifest_key)


_attach_integrations()
