"""The ``refvault`` command group: its error handling, and every command attached to it.

The top of the CLI: it imports the command modules (:mod:`refvault.cli.artifacts`, :mod:`refvault.cli.reads`,
:mod:`refvault.cli.maintenance`, ``refvault demo``, ``refvault eval``, ``refvault mcp``, ``refvault serve`` and
``refvault keys``); none of them imports it back.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import click

from refvault import __version__
from refvault.cli.artifacts import cat, list_artifacts, put, rm, show
from refvault.cli.console import CliError, cli_error
from refvault.cli.maintenance import gc, manifest_key, verify
from refvault.cli.mcp import mcp as mcp_group
from refvault.cli.options import ARGS_KEY, JSON_KEY, main_store_option
from refvault.cli.reads import query_command, read_command
from refvault.cli.serve import keys as keys_group
from refvault.cli.serve import serve as serve_command
from refvault.demo.command import demo
from refvault.errors import RefvaultError
from refvault.evaluation import eval_command

__all__ = ["main"]


def _wants_json(ctx: click.Context) -> bool:
    """Whether the command line asked for ``--json``, even if parsing failed before the flag was read."""
    flag = ctx.meta.get(JSON_KEY)
    if flag is not None:
        return bool(flag)
    args: tuple[str, ...] = ctx.meta.get(ARGS_KEY, ())
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
        ctx.meta[ARGS_KEY] = tuple(args)
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
                raise cli_error(exc) from None
        except click.ClickException as exc:
            _report_json_error(ctx, exc)
            raise


# -- the group and its commands ----------------------------------------------------------


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@main_store_option
@click.version_option(__version__, prog_name="refvault")
def main() -> None:
    """Safe artifact references: store bytes once, read them back verified, by id.

    --store is accepted here and on every command; the command's value wins.
    """


for _command in (
    put,
    show,
    cat,
    read_command,
    query_command,
    list_artifacts,
    rm,
    verify,
    gc,
    demo,
    eval_command,
    mcp_group,
    serve_command,
    keys_group,
    manifest_key,
):
    main.add_command(_command)
