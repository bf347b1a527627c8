"""``refvault console``: open the web console on a store; ``refvault console login``: a sign-in link for a server.

::

    refvault console [--store PATH] [--host 127.0.0.1] [--port 8765] [--tenant acme] [--user oncall] [--no-open]
    refvault console login --url http://127.0.0.1:8765 [--key rvk_… | $REFVAULT_API_KEY] [--next /console/runs]

``refvault console`` is ``refvault serve`` on the embedded store (the group's ``--store``, else
``$REFVAULT_STORE``, else ``./.refvault``) plus an API key of its own for ``--tenant``/``--user`` (labelled
``refvault console``, revoked when the command ends) and a single-use sign-in link it opens in a browser once
the server answers (or prints, with ``--no-open``). The defaults are the demo's tenant and user, so
``refvault demo --store PATH`` then ``refvault console --store PATH`` shows the demo's run.

``refvault console login`` asks a running server for a single-use link (``POST /v1/console/sessions``, valid
60 seconds) and prints it: the way in over an SSH tunnel, like a notebook server's token link.
"""

from __future__ import annotations

import threading
import time
import webbrowser

import click

from refvault.cli.console import cli_error
from refvault.cli.options import store_option
from refvault.errors import RefvaultError

__all__ = ["console"]

_LABEL = "refvault console"


def _open_when_ready(base: str, link: str, open_browser: bool) -> None:
    """Wait (up to 60 s) for ``base``'s health endpoint, then open ``link`` in a browser or print it."""
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/v1/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    click.echo(f"console: {link}  (single use, valid 60 seconds)")
    if open_browser:
        webbrowser.open(link)


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@store_option("Embedded store directory (default: $REFVAULT_STORE, else ./.refvault).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8765, show_default=True, help="Port to listen on.")
@click.option("--tenant", default="acme", show_default=True, metavar="NAME", help="Whose artifacts to show.")
@click.option("--user", default="oncall", show_default=True, metavar="NAME", help="Whose artifacts to show.")
@click.option("--open/--no-open", "open_browser", default=True, show_default=True, help="Open a browser.")
@click.pass_context
def console(ctx: click.Context, host: str, port: int, tenant: str, user: str, open_browser: bool) -> None:
    """Serve the web console on a store and open it in a browser, signed in as TENANT/USER."""
    if ctx.invoked_subcommand is not None:
        return
    try:
        import jinja2  # noqa: F401
    except ImportError:
        raise click.ClickException("the console needs the server extra: pip install 'refvault[server]'") from None
    from refvault.cli.console import opened
    from refvault.cli.serve import serve
    from refvault.keys import create_key, revoke_key
    from refvault.server.console.signin import issue_link

    try:
        with opened(ctx, create=True) as vault:
            key, _ = create_key(vault, tenant, user, label=_LABEL)
            token = issue_link(vault, key.key_id, "/console")
    except RefvaultError as exc:
        raise cli_error(exc) from None
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{port}"
    link = f"{base}/console/link/{token}"
    threading.Thread(target=_open_when_ready, args=(base, link, open_browser), daemon=True).start()
    try:
        ctx.invoke(serve, host=host, port=port)
    finally:
        with opened(ctx) as vault:
            revoke_key(vault, key.key_id)


@console.command("login")
@click.option("--url", required=True, metavar="URL", help="The server's base URL, e.g. http://127.0.0.1:8765.")
@click.option(
    "--key", envvar="REFVAULT_API_KEY", required=True, metavar="TOKEN", help="An API key (or $REFVAULT_API_KEY)."
)
@click.option("--next", "next_path", default="/console", show_default=True, metavar="PATH", help="The page to open.")
def login(url: str, key: str, next_path: str) -> None:
    """Print a single-use console sign-in link (valid 60 seconds) for the server at URL."""
    from refvault.client import Client

    try:
        with Client(url, key) as client:
            click.echo(client.console_link(next_path))
    except RefvaultError as exc:
        raise cli_error(exc) from None
