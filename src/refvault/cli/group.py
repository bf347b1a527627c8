"""The ``refvault`` command group: its error handling, and every command attached to it.

The top of the CLI: it imports the command modules (:mod:`refvault.cli.artifacts`, :mod:`refvault.cli.reads`,
:mod:`refvault.cli.maintenance`); none of them imports it back. The commands that do not touch one
artifact (``refvault demo``, ``refvault eval``, ``refvault mcp``, ``refvault serve``, ``refvault keys``) are
named in :data:`LAZY_COMMANDS` and imported only when invoked (or listed by ``--help``), so a command such as
``refvault show`` loads neither the demo nor the MCP commands.

Exit codes: 0 success; 1 a refvault error (not found, damaged, no store, ...); 2 bad input or usage;
130 interrupted (Ctrl-C, SIGINT), after which nothing half-done is published.
"""

from __future__ import annotations

import contextvars
import gc as collector
import importlib
import itertools
import json
from typing import Any

import click

from refvault import __version__
from refvault.cli.artifacts import cat, declassify, list_artifacts, put, rm, show
from refvault.cli.console import CliError, cli_error
from refvault.cli.maintenance import gc, manifest_key, migrate, verify
from refvault.cli.options import ARGS_KEY, JSON_KEY, main_store_option
from refvault.cli.reads import query_command, read_command
from refvault.errors import RefvaultError

__all__ = ["LAZY_COMMANDS", "QUICK_COMMANDS", "SIGINT_EXIT", "main", "quick_exit_requested"]

SIGINT_EXIT = 130  # 128 + SIGINT, as shells report a command interrupted by Ctrl-C

# name -> (module, attribute): commands imported when first used.
LAZY_COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("refvault.demo.command", "demo"),
    "eval": ("refvault.evaluation.command", "eval_command"),
    "mcp": ("refvault.cli.mcp", "mcp"),
    "serve": ("refvault.cli.serve", "serve"),
    "keys": ("refvault.cli.serve", "keys"),
    "console": ("refvault.cli.web", "console"),
    "audit": ("refvault.cli.audit", "audit"),
    "disclosures": ("refvault.cli.audit", "disclosures"),
    "link": ("refvault.cli.links", "link"),
    "share": ("refvault.cli.share", "share"),
    "grants": ("refvault.cli.share", "grants"),
    "revoke": ("refvault.cli.share", "revoke"),
    "policy": ("refvault.cli.policy", "policy"),
    "usage": ("refvault.cli.budget", "usage"),
    "budget": ("refvault.cli.budget", "budget"),
    "redact": ("refvault.cli.copies", "redact"),
    "receipt": ("refvault.cli.copies", "receipt"),
    "lineage": ("refvault.cli.copies", "lineage"),
    "supersede": ("refvault.cli.copies", "supersede"),
    "revoke-artifact": ("refvault.cli.copies", "revoke_artifact"),
    "refresh": ("refvault.cli.copies", "refresh"),
    "hold": ("refvault.cli.copies", "hold"),
    "release": ("refvault.cli.copies", "release"),
    "holds": ("refvault.cli.copies", "holds"),
    "replay-status": ("refvault.cli.copies", "replay_status"),
    "replay-packet": ("refvault.cli.copies", "replay_packet"),
    "delete": ("refvault.cli.copies", "delete"),
    "export": ("refvault.cli.maintenance", "export"),
    "import": ("refvault.cli.maintenance", "import_command"),
}


# Commands that touch one artifact (or list one scope) and end soon: run with the cyclic collector paused and
# left with os._exit by the console script (refvault.cli.entry). Every other command runs as usual.
QUICK_COMMANDS = frozenset({"put", "show", "cat", "ls", "rm", "read", "query", "verify"})

_QUICK_EXIT: contextvars.ContextVar[bool] = contextvars.ContextVar("refvault_cli_quick_exit", default=False)


def quick_exit_requested() -> bool:
    """Whether the command that just ran is one of :data:`QUICK_COMMANDS` (and so may skip the teardown)."""
    return _QUICK_EXIT.get()


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
    """Turns every :class:`RefvaultError` into a :class:`CliError`; reports errors as JSON under ``--json``;
    exits :data:`SIGINT_EXIT` on Ctrl-C; imports the :data:`LAZY_COMMANDS` when they are asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in LAZY_COMMANDS:
            module, attribute = LAZY_COMMANDS[cmd_name]
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return super().get_command(ctx, cmd_name)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[ARGS_KEY] = tuple(args)
        try:
            return super().parse_args(ctx, args)
        except click.ClickException as exc:
            _report_json_error(ctx, exc)
            raise

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        quick = name in QUICK_COMMANDS
        _QUICK_EXIT.set(quick)
        if not quick and not collector.isenabled():  # paused for start-up by refvault.cli.entry
            collector.freeze()
            collector.enable()
        return name, command, rest

    def invoke(self, ctx: click.Context) -> Any:
        try:
            try:
                return super().invoke(ctx)
            except RefvaultError as exc:
                raise cli_error(exc) from None
            except KeyboardInterrupt:
                # click would print "Aborted!" and exit 1, the code of "not found": say what happened instead.
                click.echo("\ninterrupted: an unfinished capture is not published", err=True)
                raise click.exceptions.Exit(SIGINT_EXIT) from None
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
    declassify,
    verify,
    gc,
    migrate,
    manifest_key,
):
    main.add_command(_command)
