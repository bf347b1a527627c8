"""``refvault read`` and ``refvault query``: verified text windows, matching lines, and record pages."""

from __future__ import annotations

import errno
import json
from typing import Any

import click

from refvault.cli.console import BadInput, CliError, error_message, opened, plural, print_json, read_only_media
from refvault.cli.options import json_option, main_store_option, scope_options
from refvault.errors import SealedArtifact, StorageError, UnsupportedRead, shown_id
from refvault.limits import DEFAULT_WINDOW_CHARS
from refvault.model import Descriptor, Scope, is_records

__all__ = ["query_command", "read_command"]


@click.command(name="read")
@click.argument("artifact_id", metavar="ID")
@click.option("--lines", nargs=2, type=int, metavar="START END", help="Lines [START, END), zero-based.")
@click.option(
    "--bytes", "byte_range", nargs=2, type=int, metavar="OFFSET LENGTH", help="Bytes [OFFSET, OFFSET+LENGTH)."
)
@click.option("--grep", "pattern", metavar="PATTERN", help="Print the lines containing PATTERN instead of a window.")
@click.option("--regex", is_flag=True, help="Treat PATTERN as a regular expression (RE2 syntax).")
@click.option(
    "--max-chars", type=int, default=DEFAULT_WINDOW_CHARS, show_default=True, help="Cap on the characters returned."
)
@scope_options
@main_store_option
@json_option
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

    This is the model-facing selective read (the read_artifact tool): like
    it, read refuses sealed artifacts, which a model may only use by
    reference. 'refvault cat ID' (an operator tool) writes their bytes.
    """
    from refvault.read import windows

    scope = Scope(tenant, user, session)
    with opened(ctx, read_only=True) as vault:
        try:
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
        except UnsupportedRead as exc:
            raise _not_text(exc, vault.describe(scope, artifact_id)) from None
        except SealedArtifact as exc:
            hint = f" ('refvault cat {shown_id(exc.artifact_id)}' writes its bytes for an operator)"
            raise CliError(f"{exc}{hint}", type(exc).__name__) from None
    if as_json:
        print_json(answer)
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


def _not_text(exc: UnsupportedRead, descriptor: Descriptor) -> BadInput:
    """The refusal to read a non-text artifact, with what to do instead (never any of its content)."""
    artifact_id = descriptor.artifact_id
    if is_records(descriptor.media_type):
        hint = f"; select its records with 'refvault query {artifact_id}'"
    else:
        hint = (
            f". 'refvault cat {artifact_id}' writes its bytes; if they are text, store them again with"
            f" --media-type: refvault cat {artifact_id} | refvault put - --media-type 'text/plain; charset=utf-8'"
        )
    return BadInput(f"{exc}{hint}", type(exc).__name__)


@click.command(name="query")
@click.argument("artifact_id", metavar="ID")
@click.option(
    "--where", metavar="JSON", help='A selector, e.g. \'{"field": "severity", "op": "eq", "value": "critical"}\'.'
)
@click.option("--fields", metavar="A,B", help="Comma-separated fields to return (default: all).")
@click.option("--order", "order_by", multiple=True, metavar="FIELD[:desc]", help="Sort key; repeat for more.")
@click.option("--limit", type=int, default=20, show_default=True, help="Records per page (at most 1000).")
@click.option("--range", "record_range", nargs=2, type=int, metavar="START END", help="Records [START, END) only.")
@click.option("--cursor", metavar="CURSOR", help="next_cursor from the previous page (same selection).")
@scope_options
@main_store_option
@json_option
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
    # A first query of an artifact stores its columnar derivative: read-only only where nothing can be written.
    read_only = read_only_media(ctx)
    with opened(ctx, read_only=read_only) as vault:
        try:
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
        except StorageError as exc:
            if not read_only or exc.errno not in (errno.EROFS, errno.EACCES):
                raise
            raise CliError(
                f"{error_message(exc)}: the store cannot be written here, and the first query of an artifact stores"
                " its columnar form (and the store's cursor keys); query it once where the store is writable",
                type(exc).__name__,
            ) from None
    if as_json:
        print_json(answer)
        return
    for row in answer["records"]:
        click.echo(json.dumps(row, ensure_ascii=False))
    note = f"{_coverage(answer, limit, ranged=record_range is not None)}; capture {answer['capture_status']}"
    if answer["omissions"]:
        note += f"; omissions: {json.dumps(answer['omissions'])}"
    if answer["next_cursor"]:
        note += f"\nnext page: --cursor {answer['next_cursor']}"
    click.echo(note, err=True)


def _coverage(answer: dict[str, Any], limit: int, *, ranged: bool) -> str:
    """What a page of records covers, in words that cannot be read as more than it is.

    "scan complete" only when the scan really covered every record of the selection: a page cut at
    ``--limit`` says so and that more may follow; a scan cut by its budget says INCOMPLETE.
    """
    shown = f"{plural(answer['returned_records'], 'record')} shown"
    scanned = f"{answer['scanned_records']:,} of {answer['total_records']:,} records"
    more = answer["next_cursor"] is not None
    if more and answer["scan_complete"]:
        return f"{shown}, stopped at the page limit ({limit}) with {scanned} scanned; more may follow"
    if more:
        return f"{shown}; the scan stopped at its budget with {scanned} scanned: INCOMPLETE, the rest may match"
    if answer["scan_complete"]:
        where = " in the range" if ranged else ""
        return f"{shown}: every match{where} (scan complete: {scanned} examined)"
    return f"{shown}; scan INCOMPLETE after {scanned} (see the omissions)"
