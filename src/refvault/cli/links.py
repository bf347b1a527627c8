"""``refvault link``: capability links to one artifact (``create``), and the rotation that kills them all."""

from __future__ import annotations

import re
from datetime import timedelta

import click

from refvault.cli.console import opened, print_json
from refvault.cli.options import Duration, json_option, main_store_option, scope_options
from refvault.ids import check_artifact_id
from refvault.model import Scope

__all__ = ["link"]

_RANGE = re.compile(r"(\d{1,19}):(\d{1,19})")


@click.group()
def link() -> None:
    """Capability links: a short-lived URL to one artifact for one recipient, with no API key.

    A link is served by 'refvault serve' over this store at /v1/links/<token>. It is checked again at
    every use (the artifact's expiry, the tenant's policy, a grant's revocation) and every refusal looks
    the same. The link's body is signed, not encrypted: it names the scope and the artifact id.
    """


@link.command("create")
@click.argument("artifact_id", metavar="ID")
@click.option("--recipient", required=True, help="Who the bytes go to: user, export, model:<name> or tool:<name>.")
@click.option("--purpose", default="default", show_default=True, help="Why they are read (checked by the policy).")
@click.option("--expires-in", type=Duration(), default="5m", show_default=True, metavar="DURATION", help="1s to 24h.")
@click.option("--range", "span", metavar="START:END", help="Only bytes [START, END) of the artifact.")
@click.option("--base-url", help="The 'refvault serve' address to prefix, e.g. http://127.0.0.1:8080.")
@scope_options
@main_store_option
@json_option
@click.pass_context
def create(
    ctx: click.Context,
    artifact_id: str,
    recipient: str,
    purpose: str,
    expires_in: timedelta,
    span: str | None,
    base_url: str | None,
    tenant: str,
    user: str,
    session: str,
    as_json: bool,
) -> None:
    """Print a capability link to artifact ID (its path, or the whole URL with --base-url)."""
    scope = Scope(tenant, user, session)
    check_artifact_id(artifact_id)
    byte_range = None
    if span is not None:
        match = _RANGE.fullmatch(span.strip())
        if match is None:
            raise click.BadParameter("expected START:END, two byte offsets, e.g. 0:4096", param_hint="--range")
        byte_range = (int(match.group(1)), int(match.group(2)))
    with opened(ctx, scope=scope) as vault:
        path = vault.link(
            scope, artifact_id, recipient=recipient, purpose=purpose, expires_in=expires_in, byte_range=byte_range
        )
    url = path if base_url is None else base_url.rstrip("/") + path
    if as_json:
        print_json({"url": url, "expires_in": int(expires_in.total_seconds())})
    else:
        click.echo(url)


@link.command("rotate-keys")
@main_store_option
@click.pass_context
def rotate_keys(ctx: click.Context) -> None:
    """Sign links with a fresh key: every link issued before stops working at once."""
    with opened(ctx) as vault:
        vault.rotate_link_keys()
    click.echo("link keys rotated: every earlier link is dead")
