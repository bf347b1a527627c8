"""The ``refvault`` command line: capture, inspect, read back, check and collect artifacts.

::

    refvault [--store PATH] put FILE|-      capture a file (or stdin) and print its descriptor
    refvault show ID                        print a descriptor
    refvault cat ID                         write the verified bytes to stdout
    refvault ls                             list the scope's artifacts, newest first
    refvault rm ID                          delete an artifact (its bytes go at the next gc)
    refvault verify                         re-hash every blob; exit 1 on any damage
    refvault gc [--grace S] [--dry-run]     remove expired artifacts and unreferenced bytes
    refvault demo                           an end-to-end walk on a throwaway store

Conventions:

* ``--store`` (on the group) picks the store; without it ``Vault.open(None)``
  uses ``$REFVAULT_STORE``, else ``./.refvault``.
* ``--tenant/--user/--session`` (on put, show, cat, ls, rm) form the read
  scope; they default to ``$REFVAULT_TENANT`` etc., else ``local``.
* ``--json`` on every command prints machine-readable output: descriptors as
  ``Descriptor.to_dict()``, lists as arrays, reports as objects.
* Errors print ``error: <message>`` on stderr and exit 2 for bad input
  (:class:`~refvault.errors.InvalidArgument`), 1 for anything else refvault
  raises. Messages never contain artifact content.
* Importing this module loads only click and refvault's small value modules;
  the vault, its storage backends and rich are imported when a command runs.
"""

from __future__ import annotations

import base64
import json
import mimetypes
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click

from refvault import __version__
from refvault.errors import InvalidArgument, RefvaultError
from refvault.model import Descriptor, Scope, format_time

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.text import Text

    from refvault.vault.vault import GcReport, Vault, VerifyReport

__all__ = ["main", "render_descriptor"]

F = TypeVar("F", bound=Callable[..., Any])

SCOPE_PARTS = ("tenant", "user", "session")
DEFAULT_SCOPE_NAME = "local"
PIPE_WIDTH = 200

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


# -- errors ------------------------------------------------------------------------


class CliError(click.ClickException):
    """A refvault error, shown as ``error: <message>``; exit code 1."""

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


class BadInput(CliError):
    """A refvault :class:`~refvault.errors.InvalidArgument`; exit code 2, like click's usage errors."""

    exit_code = 2


class _Group(click.Group):
    """Turns every :class:`RefvaultError` a command raises into a :class:`CliError`."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RefvaultError as exc:
            failure = BadInput if isinstance(exc, InvalidArgument) else CliError
            raise failure(str(exc)) from None


# -- options -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Settings:
    store: str | None


def _json_option(func: F) -> F:
    option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
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

_DURATION = re.compile(r"(\d{1,12})([smhd])")
_SECONDS_PER_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class Duration(_DurationBase):
    """A positive duration such as ``30s``, ``15m``, ``2h`` or ``7d``."""

    name = "duration"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        match = _DURATION.fullmatch(str(value).strip().lower())
        if match is None:
            self.fail("expected a number followed by s, m, h or d, e.g. 30s, 15m, 2h or 7d", param, ctx)
        amount = int(match.group(1))
        if amount == 0:
            self.fail("must be longer than zero", param, ctx)
        seconds = amount * _SECONDS_PER_UNIT[match.group(2)]
        latest = datetime.max.replace(tzinfo=UTC) - datetime.now(UTC)
        if seconds >= latest.total_seconds():
            self.fail("is too far in the future", param, ctx)
        return timedelta(seconds=seconds)


def _guess_media_type(filename: str) -> str:
    suffix = Path(filename).suffix.lower()
    if suffix in _EXTRA_MEDIA_TYPES:
        return _EXTRA_MEDIA_TYPES[suffix]
    guessed, encoding = mimetypes.guess_type(filename)
    if encoding is not None:
        return _ENCODING_MEDIA_TYPES.get(encoding, "application/octet-stream")
    return guessed or "application/octet-stream"


@contextmanager
def _opened(ctx: click.Context) -> Iterator[Vault]:
    from refvault.vault.vault import Vault

    settings: _Settings = ctx.find_object(_Settings) or _Settings(None)
    with Vault.open(settings.store) as vault:
        yield vault


def _print_json(value: object) -> None:
    click.echo(json.dumps(value, indent=2))


# -- human output ------------------------------------------------------------------


def _console(*, stderr: bool = False) -> Console:
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False)
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


def render_descriptor(descriptor: Descriptor, *, title: str | None = None) -> RenderableType:
    """A rich panel with the fields of a descriptor people look for first."""
    from rich.panel import Panel
    from rich.table import Table

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    scope = descriptor.scope
    completeness = descriptor.completeness
    status = str(completeness.get("status", "unknown"))
    if completeness.get("records") is not None:
        status += f", {completeness['records']} records"
    omissions = completeness.get("omissions") or ()
    if omissions:
        status += f", {len(omissions)} omissions"
    rows: list[tuple[str, object]] = [
        ("artifact id", descriptor.artifact_id),
        ("content hash", descriptor.content_hash),
        ("media type", descriptor.media_type),
        ("size", f"{descriptor.size:,} bytes ({_size(descriptor.size)})"),
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
        _print_json(descriptor.to_dict())
    else:
        _console().print(render_descriptor(descriptor, title=title))


# -- commands ----------------------------------------------------------------------


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--store",
    type=click.Path(file_okay=False, dir_okay=True, path_type=str),
    default=None,
    metavar="PATH",
    help="Store directory (default: $REFVAULT_STORE, else ./.refvault).",
)
@click.version_option(__version__, prog_name="refvault")
@click.pass_context
def main(ctx: click.Context, store: str | None) -> None:
    """Safe artifact references: store bytes once, read them back verified, by id."""
    ctx.obj = _Settings(store)


@main.command()
@click.argument("source", metavar="FILE|-", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--media-type", help="Media type (default: guessed from the file name, else application/octet-stream).")
@click.option("--filename", help="Display file name to record (default: the FILE's base name; none for stdin).")
@click.option("--sealed", is_flag=True, help="Reachable only by reference: model-facing reads refuse it.")
@click.option("--expires-in", type=Duration(), metavar="DURATION", help="Retention deadline, e.g. 30s, 15m, 2h, 7d.")
@click.option("--tool-call-id", help="Provenance: the tool call that produced the bytes.")
@click.option("--idempotency-key", help="A retried put with the same key in the same scope returns the same id.")
@_scope_options
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
    """Capture FILE (or stdin, with -) and print its descriptor."""
    scope = Scope(tenant, user, session)
    from_stdin = source == "-"
    if filename is None and not from_stdin:
        filename = Path(source).name
    if media_type is None:
        media_type = "application/octet-stream" if from_stdin else _guess_media_type(source)
    expires_at = None if expires_in is None else datetime.now(UTC) + expires_in
    with _opened(ctx) as vault, _input(source) as data:
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
    with open(source, "rb") as file:
        yield file


@main.command()
@click.argument("artifact_id", metavar="ID")
@_scope_options
@_json_option
@click.pass_context
def show(ctx: click.Context, artifact_id: str, tenant: str, user: str, session: str, as_json: bool) -> None:
    """Print the descriptor of artifact ID."""
    scope = Scope(tenant, user, session)
    with _opened(ctx) as vault:
        descriptor = vault.describe(scope, artifact_id)
    _show_descriptor(descriptor, as_json)


@main.command()
@click.argument("artifact_id", metavar="ID")
@_scope_options
@_json_option
@click.pass_context
def cat(ctx: click.Context, artifact_id: str, tenant: str, user: str, session: str, as_json: bool) -> None:
    """Write the bytes of artifact ID to stdout, verified chunk by chunk.

    Each chunk is checked against its digest before any of it is written; on
    damage the command stops with an error. With --json, print one object with
    the id, content hash, size and the bytes in base64 (streamed too).
    """
    scope = Scope(tenant, user, session)
    out = sys.stdout.buffer
    with _opened(ctx) as vault:
        descriptor = vault.describe(scope, artifact_id) if as_json else None
        with vault.stream(scope, artifact_id) as stream:
            chunks = stream.iter_chunks()
            if descriptor is None:
                for chunk in chunks:
                    out.write(chunk)
            else:
                _write_base64_json(out, descriptor, chunks)
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


@main.command(name="ls")
@_scope_options
@_json_option
@click.pass_context
def list_artifacts(ctx: click.Context, tenant: str, user: str, session: str, as_json: bool) -> None:
    """List the scope's unexpired artifacts, newest first."""
    scope = Scope(tenant, user, session)
    with _opened(ctx) as vault:
        descriptors = vault.list(scope)
    if as_json:
        _print_json([d.to_dict() for d in descriptors])
        return
    console = _console()
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
@_json_option
@click.pass_context
def rm(ctx: click.Context, artifact_id: str, tenant: str, user: str, session: str, as_json: bool) -> None:
    """Delete artifact ID. Its bytes are removed by a later gc once nothing references them."""
    scope = Scope(tenant, user, session)
    with _opened(ctx) as vault:
        vault.delete(scope, artifact_id)
    if as_json:
        _print_json({"artifact_id": artifact_id, "deleted": True})
    else:
        _console().print(_text(f"deleted {artifact_id}"))


@main.command()
@_json_option
@click.pass_context
def verify(ctx: click.Context, as_json: bool) -> None:
    """Re-read and re-hash every blob in the store; exit 1 if any is missing or corrupt."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("verifying"), BarColumn(), DownloadColumn(binary_units=True), TimeRemainingColumn())
    console = _console(stderr=True)
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
        _console().print(_verify_summary(report))
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
        f"{report.blobs_checked} blobs ({_size(report.bytes_checked)}) checked for {report.artifacts} artifacts; "
        f"{report.unreferenced} unreferenced"
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
    headline = _text(f"{len(report.problems)} damaged blobs: {counts}", "bold red")
    return Group(headline, table)


@main.command()
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Keep unreferenced bytes younger than this (default: the vault's, 3600).",
)
@click.option("--dry-run", is_flag=True, help="Report what would be removed; remove nothing.")
@_json_option
@click.pass_context
def gc(ctx: click.Context, grace: float | None, dry_run: bool, as_json: bool) -> None:
    """Remove expired artifacts, then bytes and temporaries nothing references."""
    with _opened(ctx) as vault:
        report = vault.gc(grace=grace, dry_run=dry_run)
    if as_json:
        _print_json(_gc_dict(report))
    else:
        _console().print(_gc_summary(report))


def _gc_dict(report: GcReport) -> dict[str, Any]:
    return {
        "dry_run": report.dry_run,
        "expired": list(report.expired),
        "blobs_removed": report.blobs_removed,
        "temporaries_removed": report.temporaries_removed,
    }


def _gc_summary(report: GcReport) -> RenderableType:
    from rich.console import Group

    verb = "would remove" if report.dry_run else "removed"
    lines: list[RenderableType] = [
        _text(f"{verb} {len(report.expired)} expired artifacts", "bold"),
        *(_text(f"  {artifact_id}") for artifact_id in report.expired),
        _text(f"{verb} {report.blobs_removed} unreferenced blobs"),
        _text(f"{verb} {report.temporaries_removed} temporaries"),
    ]
    return Group(*lines)


@main.command()
@_json_option
@click.pass_context
def demo(ctx: click.Context, as_json: bool) -> None:
    """Walk through capture, dedup, isolation, verify and read-back on a fresh store.

    The store is a temporary directory, removed afterwards, unless --store is given.
    """
    from refvault.demo import run_demo

    settings: _Settings = ctx.find_object(_Settings) or _Settings(None)
    code = run_demo(settings.store, as_json)
    if code:
        ctx.exit(code)
