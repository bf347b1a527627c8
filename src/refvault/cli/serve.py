"""``refvault serve`` and ``refvault keys``: run the HTTP API and manage its API keys.

::

    refvault serve [--host 127.0.0.1] [--port 8765] [--workers N] [--max-body BYTES] [--auth-cache-seconds S]
                   [--header-timeout S] [--body-timeout S] [--uploads-per-key N] [--uploads-per-tenant N]
                   [--allowed-host HOST[:PORT|:*] ...] [--allowed-origin SCHEME://HOST[:PORT|:*] ...]
                   [--store PATH | --catalog URL --blobs s3://BUCKET/PREFIX [--s3-endpoint URL]]
    refvault keys create --tenant T --user U [--session S ...] [--label L]   prints the token, once
    refvault keys list [--tenant T]
    refvault keys revoke KEY_ID

The store follows :meth:`refvault.Vault.open`: ``--store`` (or the group's
``--store``), else ``--catalog``/``--blobs``/``--s3-endpoint``, else the
environment (``REFVAULT_STORE``, or ``REFVAULT_CATALOG`` + ``REFVAULT_BLOBS`` +
``REFVAULT_S3_ENDPOINT``), else the embedded ``./.refvault``. ``serve`` passes
the choice to every worker process through those same variables (each worker
opens its own vault) and creates the embedded store if it is missing.

Importing this module loads click only; FastAPI and uvicorn (the ``server``
extra) are imported when ``serve`` runs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import click

from refvault.cli.options import STORE_KEY, store_option
from refvault.server import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_MAX_BODY,
    DEFAULT_UPLOADS_PER_KEY,
    DEFAULT_UPLOADS_PER_TENANT,
)

if TYPE_CHECKING:
    from refvault.catalog.base import ApiKey
    from refvault.vault import Vault

__all__ = ["keys", "serve"]

F = TypeVar("F", bound=Callable[..., Any])

_STORE_ENV = ("REFVAULT_STORE",)
_REMOTE_ENV = ("REFVAULT_CATALOG", "REFVAULT_BLOBS", "REFVAULT_S3_ENDPOINT")
_INSTALL_HINT = "refvault serve needs the server extra: pip install 'refvault[server]'"


def _store_options(func: F) -> F:
    """``--store`` or ``--catalog``/``--blobs``/``--s3-endpoint``: which vault to open."""
    options = [
        store_option("Embedded store directory (default: $REFVAULT_STORE, else ./.refvault)."),
        click.option("--catalog", metavar="URL", help="PostgreSQL catalog URL (default: $REFVAULT_CATALOG)."),
        click.option("--blobs", metavar="URL", help="Blob store, s3://BUCKET/PREFIX (default: $REFVAULT_BLOBS)."),
        click.option("--s3-endpoint", metavar="URL", help="S3 endpoint URL (default: $REFVAULT_S3_ENDPOINT)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _select_store(ctx: click.Context, catalog: str | None, blobs: str | None, s3_endpoint: str | None) -> str:
    """Put the chosen store into this process's environment (workers inherit it); return a description of it."""
    store: str | None = ctx.meta.get(STORE_KEY)
    if store is not None and (catalog or blobs or s3_endpoint):
        raise click.UsageError("pass --store or --catalog/--blobs/--s3-endpoint, not both")
    if store is not None:
        for name in _REMOTE_ENV:
            os.environ.pop(name, None)
        os.environ["REFVAULT_STORE"] = store
    elif catalog or blobs or s3_endpoint:
        if not catalog or not blobs:
            raise click.UsageError("--catalog and --blobs go together (the catalog URL and s3://BUCKET/PREFIX)")
        os.environ.pop("REFVAULT_STORE", None)
        os.environ["REFVAULT_CATALOG"] = catalog
        os.environ["REFVAULT_BLOBS"] = blobs
        if s3_endpoint:
            os.environ["REFVAULT_S3_ENDPOINT"] = s3_endpoint
    if os.environ.get("REFVAULT_CATALOG"):
        return f"catalog {_redacted(os.environ['REFVAULT_CATALOG'])}, blobs {os.environ.get('REFVAULT_BLOBS', '')}"
    return os.path.abspath(os.environ.get("REFVAULT_STORE") or ".refvault")


def _redacted(url: str) -> str:
    """A URL without its password, for printing."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in credentials:
        return url
    return f"{scheme}://{credentials.split(':', 1)[0]}:***@{host}"


@contextmanager
def _vault(
    ctx: click.Context,
    catalog: str | None,
    blobs: str | None,
    s3_endpoint: str | None,
    *,
    create: bool = True,
    read_only: bool = False,
) -> Iterator[Vault]:
    """The chosen store. Unless ``create``, a directory without a store is an error, not a new store; a new one is
    announced on stderr (``created a new store at PATH``). ``read_only``: opened without writing anything."""
    from refvault.cli.console import CliError, is_new_store, open_store
    from refvault.vault import Vault

    description = _select_store(ctx, catalog, blobs, s3_endpoint)
    if os.environ.get("REFVAULT_CATALOG"):
        with Vault.open(read_only=read_only) as vault:
            yield vault
        return
    new = is_new_store(description)
    if new and not create:
        raise CliError(f"no refvault store at {description} (pass --store, or create a key first)", "StoreNotFound")
    with open_store(description, read_only=read_only) as vault:
        if new:
            click.echo(f"created a new store at {description}", err=True)
        yield vault


# -- serve ---------------------------------------------------------------------------------


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


@click.command(short_help="Serve the HTTP API (and MCP at /mcp).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8765, show_default=True, help="Port to listen on.")
@click.option("--workers", type=click.IntRange(1, 512), default=1, show_default=True, help="Worker processes.")
@click.option(
    "--max-body",
    type=click.IntRange(0),
    default=DEFAULT_MAX_BODY,
    show_default=True,
    metavar="BYTES",
    help="Largest capture body accepted (413 above it).",
)
@click.option(
    "--header-timeout",
    type=click.FloatRange(0, 3600, min_open=True),
    default=DEFAULT_HEADER_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="Close a connection whose request line and headers are not all in this long after it opened (or after the"
    " first byte of its next request).",
)
@click.option(
    "--body-timeout",
    type=click.FloatRange(0, 3600, min_open=True),
    default=DEFAULT_BODY_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="End a request whose body sends nothing for this long (408, nothing stored).",
)
@click.option(
    "--uploads-per-key",
    type=click.IntRange(1, 10_000),
    default=DEFAULT_UPLOADS_PER_KEY,
    show_default=True,
    metavar="N",
    help="Request bodies (captures, queries, /mcp messages) one API key may have in progress at once (429 past it).",
)
@click.option(
    "--uploads-per-tenant",
    type=click.IntRange(1, 10_000),
    default=DEFAULT_UPLOADS_PER_TENANT,
    show_default=True,
    metavar="N",
    help="The same for all the keys of one tenant together; captures get 8 threads per worker for each unit of it.",
)
@click.option(
    "--auth-cache-seconds",
    type=click.FloatRange(0, 3600),
    default=2.0,  # refvault.keys.DEFAULT_CACHE_SECONDS (not imported: this module loads click only)
    show_default=True,
    metavar="SECONDS",
    help="Trust a successful API key check this long per worker: a key revoked elsewhere works at most this much longer"
    " (0: check every request).",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="HOST[:PORT|:*]",
    help="Also accept this Host at /mcp (repeatable; DNS-rebinding check). Always accepted: 127.0.0.1, localhost"
    " and [::1] on any port, and the address a request arrived at.",
)
@click.option(
    "--allowed-origin",
    "allowed_origins",
    multiple=True,
    metavar="SCHEME://HOST[:PORT|:*]",
    help="Also accept this browser Origin at /mcp (repeatable). Always accepted: http:// and the hosts above;"
    " requests without Origin.",
)
@click.option("--access-log/--no-access-log", default=True, show_default=True, help="Log every request.")
@_store_options
@click.pass_context
def serve(
    ctx: click.Context,
    host: str,
    port: int,
    workers: int,
    max_body: int,
    header_timeout: float,
    body_timeout: float,
    uploads_per_key: int,
    uploads_per_tenant: int,
    auth_cache_seconds: float,
    allowed_hosts: tuple[str, ...],
    allowed_origins: tuple[str, ...],
    access_log: bool,
    catalog: str | None,
    blobs: str | None,
    s3_endpoint: str | None,
) -> None:
    """Serve the HTTP API v1 (OpenAPI at /openapi.json) over a vault; the embedded default with no arguments."""
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError:
        raise click.ClickException(_INSTALL_HINT) from None
    from refvault.errors import InvalidArgument
    from refvault.server.limits import (
        BODY_TIMEOUT_ENVVAR,
        HEADER_TIMEOUT_ENVVAR,
        UPLOADS_PER_KEY_ENVVAR,
        UPLOADS_PER_TENANT_ENVVAR,
        HeaderTimeoutProtocol,
    )
    from refvault.server.mcp import allow_list

    try:
        hosts, origins = allow_list(allowed_hosts, "host"), allow_list(allowed_origins, "origin")
    except InvalidArgument as exc:
        raise click.BadParameter(str(exc)) from None
    with _vault(ctx, catalog, blobs, s3_endpoint):
        pass  # open once here: creates the embedded store and runs migrations before workers race
    description = _select_store(ctx, catalog, blobs, s3_endpoint)
    os.environ["REFVAULT_MAX_BODY"] = str(max_body)
    os.environ[HEADER_TIMEOUT_ENVVAR] = repr(header_timeout)
    os.environ[BODY_TIMEOUT_ENVVAR] = repr(body_timeout)
    os.environ[UPLOADS_PER_KEY_ENVVAR] = str(uploads_per_key)
    os.environ[UPLOADS_PER_TENANT_ENVVAR] = str(uploads_per_tenant)
    os.environ["REFVAULT_AUTH_CACHE_SECONDS"] = repr(auth_cache_seconds)
    os.environ["REFVAULT_ALLOWED_HOSTS"] = ",".join(hosts)  # refvault.server.app.ALLOWED_HOSTS_ENVVAR
    os.environ["REFVAULT_ALLOWED_ORIGINS"] = ",".join(origins)
    url = _url(host, port)
    store_flag = ""
    if ctx.meta.get(STORE_KEY) is not None:
        store_flag = f"--store {ctx.meta[STORE_KEY]} "
    elif catalog:
        store_flag = "--catalog URL --blobs URL "
    click.echo(f"refvault {_version()} serving {url}/v1 (OpenAPI: {url}/openapi.json, MCP: {url}/mcp)")
    click.echo(f"store: {description}")
    click.echo(f"create an API key: refvault keys create {store_flag}--tenant TENANT --user USER")
    sys.stdout.flush()
    with _metrics_directory(workers):
        signal.signal(signal.SIGTERM, _exit_cleanly)  # uvicorn re-raises SIGTERM after its graceful shutdown
        uvicorn.run(
            "refvault.server.app:app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            access_log=access_log,
            log_level="info",
            http=HeaderTimeoutProtocol,  # uvicorn's "auto" protocol (httptools, else h11) with a header deadline
        )  # loop defaults to "auto": uvloop, which the server extra installs


def _exit_cleanly(sig: int, frame: object) -> None:
    """SIGTERM outside uvicorn's own handling (before it starts, or re-raised after its drain): exit 0."""
    raise SystemExit(0)


@contextmanager
def _metrics_directory(workers: int) -> Iterator[None]:
    """With several workers, a new directory for their metrics (prometheus_client's multiprocess mode), removed after.

    Named in ``PROMETHEUS_MULTIPROC_DIR`` before any worker starts (each worker's metrics write there and
    ``/metrics`` adds them up); one worker keeps its metrics in memory, without it.
    """
    name = "PROMETHEUS_MULTIPROC_DIR"  # refvault.server.metrics.MULTIPROC_ENVVAR
    if workers < 2:
        os.environ.pop(name, None)
        yield
        return
    directory = tempfile.mkdtemp(prefix="refvault-metrics-")
    os.environ[name] = directory
    try:
        yield
    finally:
        os.environ.pop(name, None)
        shutil.rmtree(directory, ignore_errors=True)


def _version() -> str:
    from refvault import __version__

    return __version__


# -- keys ----------------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def keys() -> None:
    """API keys of the HTTP service (stored hashed; a token is shown once, when created)."""


def _key_dict(key: ApiKey) -> dict[str, Any]:
    from refvault.model import format_time

    return {
        "key_id": key.key_id,
        "tenant": key.tenant,
        "user": key.user,
        "sessions": None if key.sessions is None else sorted(key.sessions),
        "label": key.label,
        "admin": key.admin,
        "created_at": format_time(key.created_at),
        "revoked_at": None if key.revoked_at is None else format_time(key.revoked_at),
    }


def _sessions_text(key: ApiKey) -> str:
    return "all sessions" if key.sessions is None else "sessions " + ", ".join(sorted(key.sessions))


@keys.command("create")
@click.option("--tenant", required=True, metavar="NAME", help="The key's tenant.")
@click.option("--user", required=True, metavar="NAME", help="The key's user.")
@click.option("--session", "sessions", multiple=True, metavar="NAME", help="Allow only this session (repeatable).")
@click.option("--label", metavar="TEXT", help="A note to recognise the key by (printable ASCII).")
@click.option("--admin", is_flag=True, help="The key may also set its tenant's disclosure policy over HTTP.")
@click.option("--json", "as_json", is_flag=True, help="Print the key and its token as JSON.")
@_store_options
@click.pass_context
def create(
    ctx: click.Context,
    tenant: str,
    user: str,
    sessions: tuple[str, ...],
    label: str | None,
    admin: bool,
    as_json: bool,
    catalog: str | None,
    blobs: str | None,
    s3_endpoint: str | None,
) -> None:
    """Create a key and print its token (stdout). The token is not stored: copy it now."""
    from refvault.keys import create_key

    with _vault(ctx, catalog, blobs, s3_endpoint) as vault:
        key, token = create_key(vault, tenant, user, sessions=list(sessions) or None, label=label, admin=admin)
    if as_json:
        click.echo(json.dumps({**_key_dict(key), "token": token}, indent=2))
        return
    click.echo(
        f"created {key.key_id} for tenant {key.tenant}, user {key.user} ({_sessions_text(key)}); "
        "the token below is shown only once:",
        err=True,
    )
    click.echo(token)


@keys.command("list")
@click.option("--tenant", metavar="NAME", help="Only this tenant's keys.")
@click.option("--json", "as_json", is_flag=True, help="Print the keys as a JSON array.")
@_store_options
@click.pass_context
def list_command(
    ctx: click.Context,
    tenant: str | None,
    as_json: bool,
    catalog: str | None,
    blobs: str | None,
    s3_endpoint: str | None,
) -> None:
    """List keys, oldest first (never their tokens)."""
    from refvault.keys import list_keys

    with _vault(ctx, catalog, blobs, s3_endpoint, create=False, read_only=True) as vault:
        found = list_keys(vault, tenant)
    if as_json:
        click.echo(json.dumps([_key_dict(key) for key in found], indent=2))
        return
    if not found:
        click.echo("no API keys", err=True)
    for key in found:
        row = _key_dict(key)
        state = f"revoked {row['revoked_at']}" if key.revoked_at else "active"
        label = f"  {key.label}" if key.label else ""
        admin = "  admin" if key.admin else ""
        click.echo(
            f"{key.key_id}  {key.tenant}/{key.user}  {_sessions_text(key)}  {row['created_at']}  {state}{admin}{label}"
        )


@keys.command("revoke")
@click.argument("key_id")
@_store_options
@click.pass_context
def revoke(ctx: click.Context, key_id: str, catalog: str | None, blobs: str | None, s3_endpoint: str | None) -> None:
    """Revoke a key: it never authenticates again."""
    from refvault.cli.console import CliError
    from refvault.keys import revoke_key

    with _vault(ctx, catalog, blobs, s3_endpoint, create=False) as vault:
        revoked = revoke_key(vault, key_id)
    if not revoked:
        raise CliError("no active API key with that id (unknown or already revoked)", "NotFound")
    click.echo(f"revoked {key_id}")
