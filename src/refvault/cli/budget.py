"""``refvault usage`` and ``refvault budget set|clear``: a run's budget (:mod:`refvault.budgets`).

A run is a session (``--tenant``/``--user``/``--session``). ``budget set`` gives it limits per dimension
(``--read-calls 100 --scanned-bytes 10MB ...``; a dimension not given is unlimited); ``--restart`` starts
the run again with nothing spent. ``usage`` prints, per dimension, what the run spent and has left
(``--json``: as ``GET /v1/usage``). Other processes of the store apply a new budget within a second.
"""

from __future__ import annotations

from typing import Any

import click

from refvault.budgets import DIMENSIONS, Budget, Usage
from refvault.cli.console import opened, print_json
from refvault.cli.options import json_option, main_store_option, scope_options
from refvault.model import Scope

__all__ = ["budget", "usage"]


def _limit_options(func: Any) -> Any:
    for name in reversed(DIMENSIONS):
        kind: Any = click.FloatRange(min=0) if name == "seconds" else click.IntRange(min=0)
        func = click.option(
            f"--{name.replace('_', '-')}", name, type=kind, default=None, help=f"The run's limit of {name}."
        )(func)
    return func


def _show(found: Usage) -> None:
    scope = found.scope
    if found.budget is None:
        click.echo(f"run {scope.tenant}/{scope.user}/{scope.session} has no budget (nothing is counted)")
        return
    started = found.started_at.isoformat() if found.started_at is not None else "-"
    click.echo(f"run {scope.tenant}/{scope.user}/{scope.session}, budget started {started}")
    for name in DIMENSIONS:
        spent, left = found.spent[name], found.left[name]
        shown = f"{spent:.1f}" if name == "seconds" else f"{spent:,}"
        rest = "unlimited" if left is None else (f"{left:.1f} left" if name == "seconds" else f"{left:,} left")
        click.echo(f"  {name:<16} {shown:>14} spent  {rest}{'  EXHAUSTED' if left == 0 else ''}")


@click.command()
@scope_options
@main_store_option
@json_option
@click.pass_context
def usage(ctx: click.Context, tenant: str, user: str, session: str, as_json: bool) -> None:
    """What a run (a session) spent and has left of its budget, per dimension."""
    with opened(ctx) as vault:
        found = vault.usage(Scope(tenant, user, session))
    if as_json:
        print_json(found.to_json())
    else:
        _show(found)


@click.group()
def budget() -> None:
    """A run's budget: limits on bytes acquired and retained, read calls, records and bytes scanned, tokens
    returned, recomputations and seconds, each apart (a small prompt can hide an expensive scan)."""


@budget.command("set")
@_limit_options
@click.option("--restart", is_flag=True, help="Start the run again now, with nothing spent.")
@scope_options
@main_store_option
@json_option
@click.pass_context
def set_command(
    ctx: click.Context, /, restart: bool, tenant: str, user: str, session: str, as_json: bool, **limits: Any
) -> None:
    """Set a run's limits (a dimension not given is unlimited); what it spent is kept unless --restart."""
    chosen = Budget(**limits)
    with opened(ctx) as vault:
        found = vault.set_budget(Scope(tenant, user, session), chosen, restart=restart)
    if as_json:
        print_json(found.to_json())
    else:
        _show(found)


@budget.command("clear")
@scope_options
@main_store_option
@json_option
@click.pass_context
def clear_command(ctx: click.Context, tenant: str, user: str, session: str, as_json: bool) -> None:
    """Remove a run's budget (and what it counted): the run is unlimited again."""
    with opened(ctx) as vault:
        removed = vault.clear_budget(Scope(tenant, user, session))
    if as_json:
        print_json({"removed": removed})
    else:
        click.echo("removed the run's budget" if removed else "the run had no budget: nothing removed")
