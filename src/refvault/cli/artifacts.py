"""``refvault put``, ``show``, ``cat``, ``ls`` and ``rm``: capture artifacts, inspect and read them, delete them."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click

from refvault.cli.console import (
    CliError,
    descriptor_json,
    error_message,
    human_size,
    make_console,
    opened,
    plural,
    print_json,
    text,
)
from refvault.cli.options import Duration, json_option, main_store_option, reader_options, scope_options
from refvault.ids import check_artifact_id
from refvault.model import Descriptor, Scope, format_time

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = ["cat", "declassify", "list_artifacts", "put", "render_descriptor", "rm", "show"]

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


def _guess_media_type(filename: str) -> str:
    suffix = Path(filename).suffix.lower()
    if suffix in _EXTRA_MEDIA_TYPES:
        return _EXTRA_MEDIA_TYPES[suffix]
    import mimetypes  # only put guesses: the other commands do not load the system's type tables

    guessed, encoding = mimetypes.guess_type(filename)
    if encoding is not None:
        return _ENCODING_MEDIA_TYPES.get(encoding, "application/octet-stream")
    return guessed or "application/octet-stream"


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
        ("size", f"{plural(descriptor.size, 'byte')} ({human_size(descriptor.size)})"),
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
        ("labels", ", ".join(sorted(descriptor.labels)) or None),
    ]
    for label, value in rows:
        grid.add_row(label, text(value))
    return Panel(grid, title=text(title or descriptor.artifact_id, "bold"), expand=False)


def _show_descriptor(descriptor: Descriptor, as_json: bool, *, title: str | None = None) -> None:
    if as_json:
        print_json(descriptor_json(descriptor))
    else:
        make_console().print(render_descriptor(descriptor, title=title))


@click.command()
@click.argument("source", metavar="FILE|-", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option(
    "--media-type",
    help="Media type; always wins. Default: a specific type the file name gives (.png, .json, .jsonl, .csv, ...);"
    " else detected from the first 64 KiB: JSON Lines, a JSON array of objects or CSV (queryable records),"
    " other UTF-8 text (text/plain; charset=utf-8), a known binary format; else application/octet-stream.",
)
@click.option("--filename", help="Display file name to record (default: the FILE's base name; none for stdin).")
@click.option(
    "--sealed",
    is_flag=True,
    help="Store as sealed: for use by reference only (by tools); model-facing read tools refuse sealed artifacts.",
)
@click.option("--expires-in", type=Duration(), metavar="DURATION", help="Retention deadline, e.g. 30s, 15m, 2h, 7d.")
@click.option("--tool-call-id", help="Provenance: the tool call that produced the bytes.")
@click.option("--idempotency-key", help="A retried put with the same key in the same scope returns the same id.")
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="NAME",
    help="A label the artifact carries (repeatable): pii, secret, confidential, or any lowercase name."
    " Only 'refvault declassify' removes one.",
)
@click.option(
    "-q", "--quiet", is_flag=True, help="Print only the new artifact's id (for scripts: id=$(refvault put -q FILE))."
)
@scope_options
@main_store_option
@json_option
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
    labels: tuple[str, ...],
    quiet: bool,
    tenant: str,
    user: str,
    session: str,
    as_json: bool,
) -> None:
    """Capture FILE (or stdin, with -) and print its descriptor (its id only, with -q).

    Creates the store if there is none at the location yet.
    """
    scope = Scope(tenant, user, session)
    from_stdin = source == "-"
    if filename is None and not from_stdin:
        filename = Path(source).name
    hint = None if from_stdin else _guess_media_type(source)
    expires_at = None if expires_in is None else datetime.now(UTC) + expires_in
    with _input(source) as stream, opened(ctx, create=True) as vault:
        data: IO[bytes] | Iterator[bytes] = stream
        if media_type is None:
            media_type, data = _detected(stream, hint)
        descriptor = vault.put(
            scope,
            data,
            media_type=media_type,
            filename=filename,
            disclosure="sealed" if sealed else "model",
            expires_at=expires_at,
            tool_call_id=tool_call_id,
            idempotency_key=idempotency_key,
            labels=labels,
        )
    if descriptor.size == 0:  # most often a pipeline whose first command failed: stored, but said
        click.echo(f"warning: the input was empty; {descriptor.artifact_id} holds 0 bytes", err=True)
    if quiet and not as_json:
        click.echo(descriptor.artifact_id)
    else:
        _show_descriptor(descriptor, as_json, title="captured")


_PEEK = 1 << 20  # the first piece read from the input: its first 64 KiB are sniffed, then it is stored first


def _detected(stream: IO[bytes], hint: str | None) -> tuple[str, Iterator[bytes]]:
    """The media type of input with none given, and the input's bytes, unchanged and still streamed, to store.

    Reads one bounded piece ahead (never the whole input); ``hint`` is the type
    the file name suggests (see :func:`refvault.content.text_kind.detect_media_type`).
    """
    from refvault.content.text_kind import SNIFF_BYTES, detect_media_type

    first = stream.read(_PEEK)
    media_type = detect_media_type(first[:SNIFF_BYTES], complete=len(first) <= SNIFF_BYTES, hint=hint)

    def pieces() -> Iterator[bytes]:
        yield first
        while piece := stream.read(_PEEK):
            yield piece

    return media_type, pieces()


@contextmanager
def _input(source: str) -> Iterator[IO[bytes]]:
    if source == "-":
        yield sys.stdin.buffer
        return
    try:
        file = open(source, "rb")  # noqa: SIM115 - closed below; only the open itself is guarded
    except OSError as exc:
        raise CliError(f"cannot read {source}: {error_message(exc)}", "InputError") from None
    with file:
        yield file


@click.command()
@click.argument("artifact_id", metavar="ID")
@reader_options
@scope_options
@main_store_option
@json_option
@click.pass_context
def show(
    ctx: click.Context,
    artifact_id: str,
    purpose: str,
    recipient: str,
    tenant: str,
    user: str,
    session: str,
    as_json: bool,
) -> None:
    """Print the descriptor of artifact ID."""
    scope = Scope(tenant, user, session)
    check_artifact_id(artifact_id)
    with opened(ctx, read_only=True, scope=scope) as vault:
        descriptor = vault.describe(scope, artifact_id, purpose=purpose, recipient=recipient)
    _show_descriptor(descriptor, as_json)


@click.command()
@click.argument("artifact_id", metavar="ID")
@reader_options
@scope_options
@main_store_option
@json_option
@click.pass_context
def cat(
    ctx: click.Context,
    artifact_id: str,
    purpose: str,
    recipient: str,
    tenant: str,
    user: str,
    session: str,
    as_json: bool,
) -> None:
    """Write the bytes of artifact ID to stdout, verified chunk by chunk.

    Each chunk is checked against its digest before any of it is written; on
    damage the command stops with an error. With --json, print one object with
    the id, content hash, size and the bytes in base64; the whole artifact is
    verified first, so the output is either complete JSON or only the error.

    Sealed artifacts are written too: the CLI is an operator tool. 'refvault
    read' is the model-facing selective read (what the read_artifact tool
    gives a model): it refuses sealed artifacts, which a model may only use
    by reference.
    """
    scope = Scope(tenant, user, session)
    check_artifact_id(artifact_id)
    out = sys.stdout.buffer
    with opened(ctx, read_only=True, scope=scope) as vault:
        reader = {"purpose": purpose, "recipient": recipient}
        descriptor = vault.describe(scope, artifact_id, **reader) if as_json else None
        with vault.stream(scope, artifact_id, **reader) as stream:
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


@click.command(name="ls")
@scope_options
@main_store_option
@json_option
@click.pass_context
def list_artifacts(ctx: click.Context, tenant: str, user: str, session: str, as_json: bool) -> None:
    """List the scope's unexpired artifacts, newest first."""
    scope = Scope(tenant, user, session)
    with opened(ctx, read_only=True) as vault:
        descriptors = vault.list(scope)
    if as_json:
        print_json([descriptor_json(d) for d in descriptors])
        return
    console = make_console()
    if not descriptors:
        console.print(text(f"no artifacts in {tenant} / {user} / {session}", "dim"))
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
            text(d.artifact_id),
            text(_when(d.created_at)),
            text(human_size(d.size)),
            text(d.media_type),
            text(d.disclosure, "yellow" if d.disclosure == "sealed" else ""),
            text(d.filename),
        )
    return table


@click.command()
@click.argument("artifact_id", metavar="ID")
@scope_options
@main_store_option
@json_option
@click.pass_context
def rm(ctx: click.Context, artifact_id: str, tenant: str, user: str, session: str, as_json: bool) -> None:
    """Delete artifact ID. Its bytes are removed by a later gc once nothing references them."""
    scope = Scope(tenant, user, session)
    check_artifact_id(artifact_id)
    with opened(ctx, scope=scope) as vault:
        vault.delete(scope, artifact_id)
    if as_json:
        print_json({"artifact_id": artifact_id, "deleted": True})
    else:
        make_console().print(text(f"deleted {artifact_id}"))


@click.command()
@click.argument("artifact_id", metavar="ID")
@click.option(
    "--remove", "remove", multiple=True, required=True, metavar="NAME", help="A label to remove (repeatable)."
)
@click.option("--reason", required=True, help="Why the labels go (the audit keeps its SHA-256, not the text).")
@scope_options
@main_store_option
@json_option
@click.pass_context
def declassify(
    ctx: click.Context,
    artifact_id: str,
    remove: tuple[str, ...],
    reason: str,
    tenant: str,
    user: str,
    session: str,
    as_json: bool,
) -> None:
    """Remove labels from artifact ID (owner only; audited) and print its descriptor."""
    scope = Scope(tenant, user, session)
    check_artifact_id(artifact_id)
    with opened(ctx, scope=scope) as vault:
        descriptor = vault.declassify(scope, artifact_id, remove=set(remove), reason=reason)
    _show_descriptor(descriptor, as_json, title="declassified")
