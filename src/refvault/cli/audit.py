"""``refvault audit verify|head|show`` and ``refvault disclosures ID``: the store's audit log and disclosure ledger.

Operator commands: they open the store read-only and read every entry of a tenant (the Python
``Vault.audit`` gives a caller only its own view). ``verify`` exits 1 and names the first bad entry;
``--head SEQ:HASH`` (an earlier ``refvault audit head``, kept outside the store) also detects a cut tail.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from refvault.cli.console import make_console, opened, print_json, text
from refvault.cli.options import DEFAULT_SCOPE_NAME, json_option, main_store_option, scope_options
from refvault.ids import check_artifact_id
from refvault.model import Scope

__all__ = ["audit", "disclosures"]

_TENANT_HELP = "The tenant whose chain to read."


F = TypeVar("F", bound=Callable[..., Any])


def _tenant_option(*, required_default: bool) -> Callable[[F], F]:
    if required_default:
        return click.option(
            "--tenant",
            envvar="REFVAULT_TENANT",
            default=DEFAULT_SCOPE_NAME,
            show_default=True,
            show_envvar=True,
            metavar="NAME",
            help=_TENANT_HELP,
        )
    return click.option("--tenant", default=None, metavar="NAME", help=_TENANT_HELP + " Default: every tenant.")


@click.group()
def audit() -> None:
    """The audit log: one hash chain of entries per tenant (never content).

    Anchor 'refvault audit head' somewhere the store's writers cannot change: a cut tail is detected only
    against an anchored head ('refvault audit verify --tenant T --head SEQ:HASH').
    """


@audit.command("verify")
@_tenant_option(required_default=False)
@click.option("--head", "anchor", default=None, metavar="SEQ:HASH", help="A head anchored earlier (needs --tenant).")
@main_store_option
@json_option
@click.pass_context
def verify_command(ctx: click.Context, tenant: str | None, anchor: str | None, as_json: bool) -> None:
    """Recompute the audit chain(s); exit 1 naming the first edited, deleted, inserted or reordered entry."""
    with opened(ctx, read_only=True) as vault:
        report = vault.verify_audit(tenant, anchor)
    if as_json:
        print_json(
            {
                "ok": report.ok,
                "entries": report.entries,
                "tenant": report.tenant,
                "seq": report.seq,
                "kind": report.kind,
                "detail": report.detail,
            }
        )
    else:
        click.echo(report.detail)
        if report.ok and report.entries == 0 and tenant is not None:
            click.echo(f"note: tenant {tenant} has no audit entries in this store (check the name)", err=True)
    if not report.ok:
        ctx.exit(1)


@audit.command("head")
@_tenant_option(required_default=True)
@main_store_option
@json_option
@click.pass_context
def head_command(ctx: click.Context, tenant: str, as_json: bool) -> None:
    """Print the tenant's chain head as SEQ:HASH, to anchor outside the store."""
    with opened(ctx, read_only=True) as vault:
        seq, digest = vault.audit_head(tenant)
    if as_json:
        print_json({"tenant": tenant, "seq": seq, "hash": digest, "head": f"{seq}:{digest}"})
    else:
        click.echo(f"{seq}:{digest}")


_COLUMNS = ("seq", "at", "user", "session", "action", "outcome", "artifact_id", "recipient", "purpose", "selection")


@audit.command("show")
@_tenant_option(required_default=True)
@click.option("--artifact", "artifact_id", default=None, metavar="ID", help="Only entries about this artifact.")
@click.option("--after", default=0, show_default=True, type=click.IntRange(min=0), help="Entries after this seq.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 10_000), help="At most this many.")
@main_store_option
@json_option
@click.pass_context
def show_command(
    ctx: click.Context, tenant: str, artifact_id: str | None, after: int, limit: int, as_json: bool
) -> None:
    """Print the tenant's audit entries in chain order (an operator's view: every user and session)."""
    if artifact_id is not None:
        check_artifact_id(artifact_id)
    with opened(ctx, read_only=True) as vault:
        entries = []
        rows = vault.catalog.audit_entries(tenant, after=after, artifact_id=artifact_id)
        for entry in rows:
            entries.append(entry)
            if len(entries) >= limit:
                break
        close = getattr(rows, "close", None)
        if callable(close):
            close()
    if as_json:
        print_json([entry.to_json() for entry in entries])
        return
    from rich.table import Table

    table = Table(*_COLUMNS, box=None, pad_edge=False)
    for entry in entries:
        values = entry.to_json()
        table.add_row(*(text(values[name]) for name in _COLUMNS))
    make_console().print(table)


@click.command("disclosures")
@click.argument("artifact_id", metavar="ID")
@scope_options
@main_store_option
@json_option
@click.pass_context
def disclosures(ctx: click.Context, artifact_id: str, tenant: str, user: str, session: str, as_json: bool) -> None:
    """List every time bytes of artifact ID (one of the scope's own) left toward a recipient.

    Each line names the recipient, purpose, selection, bytes and records, and the SHA-256 of exactly the
    bytes disclosed. Deleting the artifact does not take back these copies.
    """
    scope = Scope(tenant, user, session)
    check_artifact_id(artifact_id)
    with opened(ctx, read_only=True, scope=scope) as vault:
        found = vault.disclosures(scope, artifact_id)
    rows = [item.to_json() for item in found]
    if as_json:
        print_json(rows)
        return
    from rich.table import Table

    columns = ("seq", "at", "action", "recipient", "purpose", "selection", "bytes", "records", "excerpt_hash")
    table = Table(*columns, box=None, pad_edge=False)
    for row in rows:
        table.add_row(*(text(row[name]) for name in columns))
    make_console().print(table)
