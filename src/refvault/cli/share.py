"""``refvault share``, ``refvault grants`` and ``refvault revoke``: sharing grants of one artifact (owner only).

A grant lets another user (or another session) of the same tenant read one artifact by id, within its purposes,
recipients and expiry, checked at every read (:mod:`refvault.vault.grants`). ``share`` prints the grant (its id
``grt_...`` is what ``revoke`` takes); ``grants`` lists an artifact's grants, revoked and expired ones too.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import click

from refvault.cli.console import make_console, opened, print_json, text
from refvault.cli.options import Duration, json_option, main_store_option, scope_options
from refvault.ids import check_artifact_id
from refvault.model import Grant, Principal, Scope

__all__ = ["grants", "revoke", "share"]


@click.command()
@click.argument("artifact_id", metavar="ID")
@click.option("--to-user", required=True, metavar="USER", help="The user of this tenant to share with.")
@click.option(
    "--to-session",
    "sessions",
    multiple=True,
    metavar="SESSION",
    help="A session of that user the grant covers (repeatable; none: every session). --session is your own.",
)
@click.option("--purpose", "purposes", multiple=True, metavar="PURPOSE", help="A purpose it covers (repeatable).")
@click.option(
    "--recipient",
    "recipients",
    multiple=True,
    metavar="PATTERN",
    help="A recipient pattern it covers, e.g. 'model:*' (repeatable).",
)
@click.option("--expires-in", type=Duration(), metavar="DURATION", help="End the grant after this long (e.g. 1h).")
@click.option("--sealed", is_flag=True, help="The grantee's tools may resolve it by Ref; its model may not read it.")
@scope_options
@main_store_option
@json_option
@click.pass_context
def share(
    ctx: click.Context,
    artifact_id: str,
    to_user: str,
    sessions: tuple[str, ...],
    purposes: tuple[str, ...],
    recipients: tuple[str, ...],
    expires_in: timedelta | None,
    sealed: bool,
    tenant: str,
    user: str,
    session: str,
    as_json: bool,
) -> None:
    """Share artifact ID with another user (or session) of this tenant; print the grant.

    Without --purpose or --recipient the grant covers any; each read is checked against it when it happens.
    """
    scope = Scope(tenant, user, session)
    check_artifact_id(artifact_id)
    to = Principal(tenant, to_user, frozenset(sessions) if sessions else None)
    with opened(ctx, scope=scope) as vault:
        expires_at = None if expires_in is None else vault.clock() + expires_in
        grant = vault.share(
            scope,
            artifact_id,
            to=to,
            purposes=set(purposes) or None,
            recipients=set(recipients) or None,
            expires_at=expires_at,
            disclosure="sealed" if sealed else "model",
        )
    _show([grant], as_json, single=True)


@click.command()
@click.argument("artifact_id", metavar="ID")
@scope_options
@main_store_option
@json_option
@click.pass_context
def grants(ctx: click.Context, artifact_id: str, tenant: str, user: str, session: str, as_json: bool) -> None:
    """List the grants of artifact ID, oldest first (revoked and expired ones too)."""
    scope = Scope(tenant, user, session)
    check_artifact_id(artifact_id)
    with opened(ctx, read_only=True, scope=scope) as vault:
        found = vault.grants(scope, artifact_id)
    _show(found, as_json, single=False)


@click.command()
@click.argument("grant_id", metavar="GRANT_ID")
@scope_options
@main_store_option
@json_option
@click.pass_context
def revoke(ctx: click.Context, grant_id: str, tenant: str, user: str, session: str, as_json: bool) -> None:
    """Revoke grant GRANT_ID (grt_...): the grantee's next read is refused."""
    scope = Scope(tenant, user, session)
    with opened(ctx) as vault:  # a GrantNotFound says itself which grant (no artifact to name)
        revoked = vault.revoke(scope, grant_id)
    _show([revoked], as_json, single=True)


def _show(found: list[Grant], as_json: bool, *, single: bool) -> None:
    if as_json:
        print_json(found[0].to_dict() if single else {"grants": [g.to_dict() for g in found]})
        return
    console = make_console()
    if not found:
        console.print(text("no grants"))
    for grant in found:
        console.print(text(_line(grant.to_dict())))


def _line(g: dict[str, Any]) -> str:
    """One grant on one line: id, grantee, what it covers, until when, its state."""
    sessions = g["to"]["sessions"]
    who = g["to"]["user"] + ("" if sessions is None else "[" + ",".join(sessions) + "]")
    purposes = "any" if g["purposes"] is None else ",".join(g["purposes"])
    recipients = "any" if g["recipients"] is None else ",".join(g["recipients"])
    if g["revoked_at"]:
        state = "revoked " + g["revoked_at"]
    else:
        state = "until " + g["expires_at"] if g["expires_at"] else "no expiry"
    return (
        f"{g['grant_id']}  {g['artifact_id']}  to {who}  purposes {purposes}  recipients {recipients}  "
        f"disclosure {g['disclosure']}  {state}"
    )
