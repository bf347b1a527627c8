"""``refvault policy set FILE`` and ``refvault policy show``: a tenant's disclosure policy (:mod:`refvault.policy`).

The policy is stored with the store (every process of it applies it; one that set it elsewhere within a
couple of seconds) and decides every read of the tenant by the artifact's labels, the read's purpose and
its recipient. ``set`` reads TOML (``version = "..."`` and one ``[[rules]]`` table per rule, in order) and
checks all of it before anything is stored; ``set --clear`` removes the policy. ``show`` prints it as TOML
(``--json``: as JSON). Setting a policy is audited (``set_policy``).
"""

from __future__ import annotations

from pathlib import Path

import click

from refvault.cli.console import CliError, error_message, opened, print_json
from refvault.cli.options import DEFAULT_SCOPE_NAME, json_option, main_store_option
from refvault.policy import Policy

__all__ = ["policy"]

_TENANT = click.option(
    "--tenant",
    envvar="REFVAULT_TENANT",
    default=DEFAULT_SCOPE_NAME,
    show_default=True,
    show_envvar=True,
    metavar="NAME",
    help="The tenant whose policy it is.",
)


@click.group()
def policy() -> None:
    """A tenant's disclosure policy: which labels may go to which recipient, for which purpose.

    Rules are tried in order and the first that matches decides (allow, deny, or redact, which refuses
    until redacted copies exist); no match allows. A refusal tells the artifact's owner the rule id and
    is, to anyone else, the same 'not found' as an absent artifact.
    """


@policy.command("set")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path), metavar="FILE.toml")
@click.option("--clear", is_flag=True, help="Remove the tenant's policy (every read is then allowed by policy).")
@_TENANT
@main_store_option
@json_option
@click.pass_context
def set_command(ctx: click.Context, file: Path | None, clear: bool, tenant: str, as_json: bool) -> None:
    """Make the policy in FILE.toml the tenant's (checked whole before anything is stored)."""
    if clear == (file is not None):
        raise click.UsageError("give FILE.toml, or --clear to remove the tenant's policy (not both)")
    chosen: Policy | None = None
    if file is not None:
        try:
            source = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"cannot read {file}: {error_message(exc)}", "InputError") from None
        chosen = Policy.from_toml(source)
    with opened(ctx) as vault:
        had = vault.policy(tenant) is not None
        vault.set_policy(tenant, chosen)
    if as_json:
        print_json({"tenant": tenant, "policy": None if chosen is None else chosen.to_dict()})
    elif chosen is None:
        click.echo(
            f"removed the policy of tenant {tenant}" if had else f"tenant {tenant} had no policy: nothing removed"
        )
    else:
        count = len(chosen.rules)
        click.echo(f"set the policy of tenant {tenant}: version {chosen.version}, {count} rule{'s' * (count != 1)}")


@policy.command("show")
@_TENANT
@main_store_option
@json_option
@click.pass_context
def show_command(ctx: click.Context, tenant: str, as_json: bool) -> None:
    """Print the tenant's policy as TOML (nothing is printed to stdout when none is set)."""
    with opened(ctx, read_only=True) as vault:
        found = vault.policy(tenant)
    if as_json:
        print_json({"tenant": tenant, "policy": None if found is None else found.to_dict()})
    elif found is None:
        click.echo(f"tenant {tenant} has no policy: every read is allowed by policy", err=True)
    else:
        click.echo(found.to_toml(), nl=False)
