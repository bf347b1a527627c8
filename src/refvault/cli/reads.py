"""``refvault read`` and ``refvault query``: verified text windows, matching lines, and record pages."""

from __future__ import annotations

import errno
import json
import sys
from typing import Any

import click

from refvault.cli.console import (
    BadInput,
    CliError,
    error_message,
    for_terminal,
    opened,
    plural,
    print_json,
    read_only_media,
)
from refvault.cli.options import json_option, main_store_option, reader_options, scope_options
from refvault.errors import SealedArtifact, StorageError, UnsupportedRead, shown_id
from refvault.limits import DEFAULT_GREP_MATCHES, DEFAULT_WINDOW_CHARS, MAX_CHARS, MAX_FROM_LINE, MAX_LIMIT, MAX_MATCHES
from refvault.model import Descriptor, Scope, base_type, is_records

__all__ = ["query_command", "read_command"]


@click.command(name="read")
@click.argument("artifact_id", metavar="ID")
@click.option(
    "--lines", nargs=2, type=click.IntRange(min=0), metavar="START END", help="Lines [START, END), zero-based."
)
@click.option(
    "--bytes",
    "byte_range",
    type=click.Tuple([click.IntRange(min=0), click.IntRange(min=1)]),
    metavar="OFFSET LENGTH",
    help="Bytes [OFFSET, OFFSET+LENGTH).",
)
@click.option(
    "--from-line",
    type=click.IntRange(0, MAX_FROM_LINE),
    metavar="N",
    help="Start at line N (zero-based): with --grep, search from there; else the lines from N to the end.",
)
@click.option("--grep", "pattern", metavar="PATTERN", help="Print the lines containing PATTERN instead of a window.")
@click.option("--regex", is_flag=True, help="Treat PATTERN as a regular expression (RE2 syntax).")
@click.option(
    "--max-matches",
    type=click.IntRange(1, MAX_MATCHES),
    metavar="N",
    help=f"With --grep: stop after N matches (default {DEFAULT_GREP_MATCHES}, at most {MAX_MATCHES}).",
)
@click.option(
    "--max-chars",
    type=click.IntRange(1, MAX_CHARS),
    default=DEFAULT_WINDOW_CHARS,
    show_default=True,
    help=f"Cap on the characters of a window (at most {MAX_CHARS:,}).",
)
@reader_options
@scope_options
@main_store_option
@json_option
@click.pass_context
def read_command(
    ctx: click.Context,
    artifact_id: str,
    lines: tuple[int, int] | None,
    byte_range: tuple[int, int] | None,
    from_line: int | None,
    pattern: str | None,
    regex: bool,
    max_matches: int | None,
    max_chars: int,
    purpose: str,
    recipient: str,
    tenant: str,
    user: str,
    session: str,
    as_json: bool,
) -> None:
    """Print a verified window of text artifact ID, or the lines matching --grep.

    The coverage (what was returned of how much, and the options that
    continue) goes to stderr; --json prints the whole response, as the
    model's read tool sees it. On a terminal, control characters in the
    text (other than newlines and tabs) are shown escaped, e.g. \\x1b; piped,
    the text is written as it is. 'refvault cat ID' writes the raw bytes.

    Like the model's read, this refuses sealed artifacts (a model may only
    use them by reference); 'refvault cat ID' writes their bytes for an
    operator.
    """
    from refvault.read import windows

    _check_read_options(lines, byte_range, from_line, pattern, regex, max_matches)
    scope = Scope(tenant, user, session)
    with opened(ctx, read_only=True, scope=scope) as vault:
        try:
            if pattern is not None:
                answer = windows.grep(
                    vault,
                    scope,
                    artifact_id,
                    pattern,
                    regex=regex,
                    max_matches=max_matches or DEFAULT_GREP_MATCHES,
                    from_line=from_line or 0,
                    purpose=purpose,
                    recipient=recipient,
                )
            else:
                span: list[int | None] | None = [from_line, None] if from_line is not None else None
                answer = windows.window(
                    vault,
                    scope,
                    artifact_id,
                    lines=list(lines) if lines else span,
                    byte_range=list(byte_range) if byte_range else None,
                    max_chars=max_chars,
                    purpose=purpose,
                    recipient=recipient,
                )
        except UnsupportedRead:
            raise _not_text(vault.describe(scope, artifact_id, purpose=purpose, recipient=recipient)) from None
        except SealedArtifact as exc:
            shown = shown_id(exc.artifact_id)
            raise CliError(
                f"artifact {shown} is sealed: 'refvault read' shows what a model may read, and a model may only use"
                f" a sealed artifact by reference; 'refvault cat {shown}' writes its bytes for an operator",
                type(exc).__name__,
            ) from None
    if as_json:
        print_json(answer)
        return
    # On a terminal the text's control characters are escaped; piped, it is written as it is
    # (color=True: click.echo would otherwise strip ANSI sequences from piped output).
    shown_text = for_terminal if sys.stdout.isatty() else _as_is
    if pattern is not None:
        for match in answer["matches"]:
            click.echo(f"{match['line']}: {shown_text(match['text'])}", color=True)
        note = _grep_coverage(answer, max_matches or DEFAULT_GREP_MATCHES, "--grep --regex" if regex else "--grep")
    else:
        click.echo(shown_text(answer["text"]), nl=False, color=True)
        note = f"{answer['unit']} {answer['start']:,}-{answer['end']:,} of {answer['total']:,}"
        if answer.get("next"):
            extra = f" --max-chars {max_chars}" if max_chars != DEFAULT_WINDOW_CHARS else ""
            note += f"; continue with {_window_flags(answer['next'])}{extra}"
    click.echo(f"{note}; {_capture(answer)}", err=True)


def _as_is(value: str) -> str:
    return value


def _check_read_options(
    lines: tuple[int, int] | None,
    byte_range: tuple[int, int] | None,
    from_line: int | None,
    pattern: str | None,
    regex: bool,
    max_matches: int | None,
) -> None:
    """Refuse option combinations one of which would be ignored (a usage error, exit 2)."""
    chosen = [name for name, value in (("--lines", lines), ("--bytes", byte_range)) if value is not None]
    if from_line is not None and pattern is None:
        chosen.append("--from-line")
    if len(chosen) > 1:
        raise click.UsageError(f"{' and '.join(chosen)} cannot be combined: each chooses the window to print")
    if pattern is not None and chosen:
        raise click.UsageError(
            f"{chosen[0]} cannot be combined with --grep: --grep searches every line from --from-line N (default 0)"
        )
    if pattern is None:
        needs_grep = [name for name, value in (("--regex", regex), ("--max-matches", max_matches)) if value]
        if needs_grep:
            verb = "applies" if len(needs_grep) == 1 else "apply"
            raise click.UsageError(f"{' and '.join(needs_grep)} only {verb} with --grep PATTERN")
    if lines is not None and lines[1] <= lines[0]:
        raise click.UsageError(
            f"--lines {lines[0]} {lines[1]}: END must be greater than START (lines [START, END), zero-based;"
            " e.g. --lines 0 200), or use --from-line START for the lines from START to the end"
        )


def _window_flags(nxt: dict[str, Any]) -> str:
    """The options that read the window ``next`` describes: ``--lines A B``, ``--from-line A`` or ``--bytes O L``."""
    if "byte_range" in nxt:
        offset, length = nxt["byte_range"]
        return f"--bytes {offset} {length}"
    start, end = nxt["lines"]
    return f"--from-line {start}" if end is None else f"--lines {start} {end}"


def _grep_coverage(answer: dict[str, Any], max_matches: int, search: str) -> str:
    """What a grep covered, and (when it stopped early) the option that resumes it with the same ``search``."""
    found = plural(answer["returned"], "match", "matches")
    first = answer["from_line"]
    scanned = f"{plural(answer['scanned_lines'], 'line')}" + (f" from line {first:,}" if first else "")
    if answer["next"] is not None:
        resume = f"continue with --from-line {answer['next']['from_line']} (same {search})"
        if answer["truncated"]:
            return f"{found} in {scanned}, stopped at --max-matches {max_matches}; more may follow: {resume}"
        return f"{found} in {scanned}; the scan stopped at its time budget: INCOMPLETE, the rest may match: {resume}"
    if answer["scan_complete"]:
        return f"{found}: complete scan of {scanned}"
    partial = plural(answer["partial_lines"], "long line")
    return f"{found} in {scanned}; scan INCOMPLETE: {partial} searched only in part"


def _capture(answer: dict[str, Any]) -> str:
    """What the stored capture itself covers (not this read), in words a person reads without the docs."""
    status = answer["capture_status"]
    if status == "complete":
        said = "the stored capture is complete"
    elif status == "partial":
        said = "the stored capture is PARTIAL (its source was not captured whole)"
    else:
        said = "capture completeness not recorded"
    if answer["omissions"]:
        said += f"; omissions: {json.dumps(answer['omissions'])}"
    return said


def _not_text(descriptor: Descriptor) -> BadInput:
    """The refusal to read a non-text artifact, with what to do instead (never any of its content)."""
    artifact_id, media_type = descriptor.artifact_id, descriptor.media_type
    if is_records(media_type):
        return BadInput(
            f"artifact {artifact_id} holds records ({media_type}), not text: select them with"
            f" 'refvault query {artifact_id}'",
            "UnsupportedRead",
        )
    saved = f"'refvault cat {artifact_id} > FILE' writes its bytes"
    if base_type(media_type) == "application/octet-stream":
        return BadInput(
            f"artifact {artifact_id} is stored as application/octet-stream (unknown bytes), so it is not read as"
            f" text: {saved}; if they are text, store them again as text: refvault cat {artifact_id} |"
            " refvault put - --media-type 'text/plain; charset=utf-8'",
            "UnsupportedRead",
        )
    return BadInput(f"artifact {artifact_id} is binary ({media_type}), not text: {saved}", "UnsupportedRead")


@click.command(name="query")
@click.argument("artifact_id", metavar="ID")
@click.option(
    "--where", metavar="JSON", help='A selector, e.g. \'{"field": "severity", "op": "eq", "value": "critical"}\'.'
)
@click.option("--fields", metavar="A,B", help="Comma-separated fields to return (default: all).")
@click.option("--order", "order_by", multiple=True, metavar="FIELD[:desc]", help="Sort key; repeat for more.")
@click.option(
    "--limit", type=int, default=20, show_default=True, help=f"Records per page (1 to {MAX_LIMIT}; --cursor pages on)."
)
@click.option("--range", "record_range", nargs=2, type=int, metavar="START END", help="Records [START, END) only.")
@click.option("--cursor", metavar="CURSOR", help="next_cursor from the previous page (same selection).")
@reader_options
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
    purpose: str,
    recipient: str,
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

    if not 1 <= limit <= MAX_LIMIT:
        raise BadInput(
            f"--limit {limit}: a page holds 1 to {MAX_LIMIT} records; page on with --cursor (each page's stderr"
            " says how)"
        )
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
    # Like every reading command (opened read-only), it writes no audit entries: it changes nothing else.
    read_only = read_only_media(ctx)
    with opened(ctx, read_only=read_only, scope=scope, audit=False) as vault:
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
                purpose=purpose,
                recipient=recipient,
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
    note = f"{_coverage(answer, limit, ranged=record_range is not None)}; {_capture(answer)}"
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
