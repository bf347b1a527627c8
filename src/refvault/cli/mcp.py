"""``refvault mcp``: serve refvault's own tools (``serve``), or an MCP server through refvault (``proxy``).

::

    refvault mcp serve [--store PATH] [--tenant/--user/--session NAME]   refvault's read tools, over stdio

``serve`` is for MCP hosts configured with a command: it serves the five
model-facing read tools and ``refvault://`` resources of an existing store
(it never creates one) in the one scope it was started with, over its
stdin/stdout (tests: ``tests/integrations/test_mcp_serve.py``).

    refvault mcp proxy [OPTIONS] -- COMMAND [ARGS...]    upstream over stdio (a command to run)
    refvault mcp proxy [OPTIONS] --url http://HOST/mcp   upstream over streamable HTTP

Downstream, the proxy serves MCP over its own stdin/stdout, or with
``--http PORT`` over streamable HTTP at ``http://127.0.0.1:PORT/mcp`` (loopback
only; ``--http 0`` picks a free port). The line saying what is served goes to
stderr. Options come before the upstream command (``--`` is optional but
clearer). Conventions follow :mod:`refvault.cli`: ``--store`` (else
``$REFVAULT_STORE``, else ``./.refvault``; created if missing, since the proxy
captures), ``--tenant/--user/--session`` (else ``$REFVAULT_TENANT`` etc., else
``local``), ``error: <message>`` on stderr with exit 2 for bad input and 1
otherwise. This module imports neither the MCP SDK nor the vault until the
command runs, so ``refvault --help`` works without the ``mcp`` extra.

An upstream COMMAND gets only the MCP SDK's safe subset of the environment
(``HOME``, ``LOGNAME``, ``PATH``, ``SHELL``, ``TERM``, ``USER``) plus each
``--env NAME`` (taken from this environment; skipped with a warning if unset)
or ``--env NAME=VALUE`` (beware: visible in the process list); ``--inherit-env``
passes the whole environment, the proxy's secrets and ``REFVAULT_*`` included.
SIGINT, SIGTERM (and, over stdio, SIGHUP) stop the proxy with exit status 0
after its upstream has been shut down.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

from refvault.cli.options import STORE_KEY, store_option
from refvault.limits import (
    DEFAULT_OFFLOAD_TOKENS,
    DEFAULT_PREVIEW_CHARS,
    MAX_MODEL_CONTEXT_TOKENS,
    MAX_PREVIEW_CHARS,
    MIN_MODEL_CONTEXT_TOKENS,
    MIN_PREVIEW_CHARS,
)

__all__ = ["mcp"]

F = TypeVar("F", bound=Callable[..., Any])


@click.group(name="mcp", context_settings={"help_option_names": ["-h", "--help"]})
def mcp() -> None:
    """Model Context Protocol: serve refvault's read tools, or run MCP servers behind refvault."""


def _scope_option(part: str) -> Callable[[F], F]:
    return click.option(
        f"--{part}",
        envvar=f"REFVAULT_{part.upper()}",
        default="local",
        show_default=True,
        show_envvar=True,
        metavar="NAME",
        help=f"The {part} of the scope every request runs in.",
    )


def _model_context_option(function: F) -> F:
    return click.option(
        "--model-context-tokens",
        type=click.IntRange(MIN_MODEL_CONTEXT_TOKENS, MAX_MODEL_CONTEXT_TOKENS),
        metavar="TOKENS",
        help="The served model's context window in tokens: scales the offload threshold, previews and the "
        "read tools' caps to it (default: the fixed caps, sized for a model of about 1M tokens).",
    )(function)


def _store_option(created: bool) -> Callable[[F], F]:
    made = "created if missing" if created else "must exist"
    return store_option(f"Store directory (default: $REFVAULT_STORE, else ./.refvault); {made}.")


@mcp.command(
    short_help="Serve refvault's read tools for a local store over stdio.",
    context_settings={"help_option_names": ["-h", "--help"]},
)
@_store_option(created=False)
@_scope_option("tenant")
@_scope_option("user")
@_scope_option("session")
@click.option(
    "--model",
    metavar="NAME",
    help="The model refvault's read tools read for (the tenant's policy judges the recipient model:NAME); "
    "default: the name the MCP client declares.",
)
@_model_context_option
@click.pass_context
def serve(
    ctx: click.Context, tenant: str, user: str, session: str, model: str | None, model_context_tokens: int | None
) -> None:
    """Serve refvault's model-facing tools and resources over stdio, for MCP hosts configured with a command.

    Tools: describe_artifact, list_artifacts, read_artifact, query_artifact and
    load_artifacts; resources: the scope's artifacts as refvault:// URIs. Every
    request runs in the one scope given here (--tenant/--user/--session); sealed
    artifacts are listed but their content is never served. SIGINT, SIGTERM and
    SIGHUP stop the server with exit status 0.
    """
    from refvault.cli.console import BadInput, opened, read_only_media
    from refvault.errors import InvalidArgument
    from refvault.model import Scope
    from refvault.policy import check_recipient

    try:
        scope = Scope(tenant, user, session)
        if model is not None:
            check_recipient("model:" + model)
    except InvalidArgument as exc:
        raise BadInput(str(exc), type(exc).__name__) from None
    gateway = _gateway_module()
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(levelname)s: %(message)s")
    with opened(ctx, read_only=read_only_media(ctx)) as vault:  # its reads only write caches where they can
        import anyio

        tools = gateway.ArtifactTools(vault, model=model, model_context_tokens=model_context_tokens)
        server = tools.server(lambda _: scope)
        line = f"refvault mcp serve: serving {scope} over stdio"
        try:
            anyio.run(lambda: gateway.serve_until_stopped(server, announce=lambda: gateway.stderr_line(line)))
        except KeyboardInterrupt:
            return


def _gateway_module() -> Any:
    """:mod:`refvault.integrations.mcp.gateway`, or a clear error naming the extra to install."""
    from refvault.cli.console import CliError

    try:
        from refvault.integrations.mcp import gateway
    except ImportError:
        raise CliError(
            "the MCP commands need the optional 'mcp' extra: pip install 'refvault[mcp]'", "MissingExtra"
        ) from None
    return gateway


@mcp.command(
    context_settings={"allow_interspersed_args": False, "help_option_names": ["-h", "--help"]},
    short_help="Serve an MCP server through refvault.",
)
@_store_option(created=True)
@_scope_option("tenant")
@_scope_option("user")
@_scope_option("session")
@click.option("--url", metavar="URL", help="The upstream server's streamable HTTP endpoint (instead of a COMMAND).")
@click.option(
    "--http",
    "http_port",
    type=click.IntRange(0, 65535),
    metavar="PORT",
    help="Serve streamable HTTP on 127.0.0.1:PORT (0: any free port) instead of stdio.",
)
@click.option(
    "--offload-tokens",
    type=click.IntRange(min=1),
    help="Text results estimated above this many tokens are stored and shown as a preview "
    f"(default: scaled to --model-context-tokens, else {DEFAULT_OFFLOAD_TOKENS:,}).",
)
@click.option(
    "--preview-chars",
    type=click.IntRange(MIN_PREVIEW_CHARS, MAX_PREVIEW_CHARS),
    help=f"Bound on each preview of offloaded text (default: scaled to --model-context-tokens, else "
    f"{DEFAULT_PREVIEW_CHARS:,}).",
)
@_model_context_option
@click.option(
    "--binary-disclosure",
    type=click.Choice(["sealed", "model"]),
    default="sealed",
    show_default=True,
    help="Disclosure of stored images, audio and blobs: sealed (by reference only) or model (readable).",
)
@click.option("--name", "server_name", metavar="NAME", help="The upstream's name in provenance (default: its own).")
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="NAME",
    help="A label every part stored from the upstream's results carries (repeatable), e.g. --label pii.",
)
@click.option(
    "--model",
    metavar="NAME",
    help="The model refvault's read tools read for (the tenant's policy judges the recipient model:NAME); "
    "default: the name the MCP client declares.",
)
@click.option(
    "--env",
    "env_vars",
    multiple=True,
    metavar="NAME[=VALUE]",
    help="Pass the environment variable NAME (from this environment, or set to VALUE) to the upstream "
    "COMMAND; repeatable. By default it gets only HOME, LOGNAME, PATH, SHELL, TERM and USER.",
)
@click.option(
    "--inherit-env",
    is_flag=True,
    help="Pass this process's whole environment to the upstream COMMAND (secrets and REFVAULT_* included).",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[--] [COMMAND [ARGS]...]")
@click.pass_context
def proxy(
    ctx: click.Context,
    tenant: str,
    user: str,
    session: str,
    url: str | None,
    http_port: int | None,
    offload_tokens: int | None,
    preview_chars: int | None,
    model_context_tokens: int | None,
    binary_disclosure: str,
    server_name: str | None,
    labels: tuple[str, ...],
    model: str | None,
    env_vars: tuple[str, ...],
    inherit_env: bool,
    command: tuple[str, ...],
) -> None:
    """Serve the MCP server COMMAND (or the one at --url) through refvault.

    Images, audio and embedded blobs in its tool results are stored and
    replaced by refvault:// resource links; oversized text is stored and
    replaced by a preview; refvault's read tools are added to its tools.

    The upstream COMMAND gets only a safe subset of this environment (the MCP
    SDK's default: HOME, LOGNAME, PATH, SHELL, TERM, USER) plus each --env
    variable; --inherit-env passes it all. The proxy's own credentials and
    REFVAULT_* settings are not passed unless asked for.
    """
    from refvault.cli.console import BadInput, CliError, is_new_store, open_store
    from refvault.errors import InvalidArgument, RefvaultError
    from refvault.model import Scope

    if command and url is not None:
        raise click.UsageError("give either --url or a COMMAND, not both")
    if not command and url is None:
        raise click.UsageError("give the upstream server: -- COMMAND [ARGS]... (stdio) or --url URL (HTTP)")
    gateway = _gateway_module()
    try:
        scope = Scope(tenant, user, session)
        options = gateway.GatewayOptions(
            offload_tokens=offload_tokens,
            preview_chars=preview_chars,
            binary_disclosure="model" if binary_disclosure == "model" else "sealed",
            server_name=server_name,
            labels=frozenset(labels),
            model=model,
            model_context_tokens=model_context_tokens,
        )
    except InvalidArgument as exc:
        raise BadInput(str(exc), type(exc).__name__) from None
    if url is not None and (env_vars or inherit_env):
        raise click.UsageError("--env and --inherit-env apply to an upstream COMMAND, not to --url")
    env = _environment(env_vars)
    try:
        upstream = gateway.Upstream(command=command, url=url, env=env, inherit_env=inherit_env)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    sock = None
    if http_port is not None:
        try:
            sock = gateway.bind_loopback(http_port)
        except OSError as exc:
            raise CliError(f"cannot listen on 127.0.0.1:{http_port}: {exc.strerror or exc}", "AddressInUse") from None
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(levelname)s: %(message)s")
    location = ctx.meta.get(STORE_KEY) or os.environ.get("REFVAULT_STORE") or "./.refvault"
    new = is_new_store(location)
    try:
        with open_store(location) as vault:
            if new:
                click.echo(f"created a new store at {location}", err=True)
            _run(gateway, vault, scope, upstream, options, sock)
    except RefvaultError as exc:
        raise CliError(str(exc), type(exc).__name__) from None
    finally:
        if sock is not None:
            sock.close()


def _environment(specs: tuple[str, ...]) -> dict[str, str]:
    """``--env`` values: ``NAME`` takes NAME from this environment (skipped, with a warning, if unset)."""
    env: dict[str, str] = {}
    for spec in specs:
        name, equals, value = spec.partition("=")
        if not name or "\0" in spec:
            raise click.BadParameter(f"{spec!r}: give NAME or NAME=VALUE", param_hint="'--env'")
        if equals:
            env[name] = value
        elif name in os.environ:
            env[name] = os.environ[name]
        else:
            click.echo(f"warning: --env {name}: not set in this environment; not passed", err=True)
    return env


def _run(gateway: Any, vault: Any, scope: Any, upstream: Any, options: Any, sock: Any) -> None:
    """Run the proxy until the client disconnects (stdio) or a stop signal (SIGINT, SIGTERM) arrives."""
    import anyio

    from refvault.cli.console import CliError

    served: list[str] = []

    def announce(line: str) -> None:
        served.append(line)
        gateway.stderr_line(line)

    try:
        anyio.run(lambda: gateway.run_proxy(vault, scope, upstream, options, http=sock, announce=announce))
    except KeyboardInterrupt:
        return
    except BaseException as exc:
        failure = _first_failure(exc)
        if isinstance(failure, gateway.ToolNameClash):
            raise CliError(str(failure), "ToolNameClash") from None
        if isinstance(failure, Exception):
            what = "stopped" if served else "could not connect to the upstream MCP server"
            raise CliError(
                f"the MCP proxy for {upstream.describe()} {what}: {type(failure).__name__}: {failure}",
                "UpstreamError",
            ) from None
        raise


def _first_failure(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (anyio task groups wrap what went wrong)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
