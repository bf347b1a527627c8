"""The options every ``refvault`` command shares, and where their values are kept: click only.

This is the lowest module of the CLI: :mod:`refvault.cli.console` and every command module above it, the
``serve``/``keys`` commands (:mod:`refvault.cli.serve`), ``refvault mcp`` (:mod:`refvault.cli.mcp`),
``refvault demo`` and ``refvault eval`` take their options from here. It imports click and nothing of refvault.

``--store`` values go to ``ctx.meta[STORE_KEY]``, which a group's and its command's contexts share: given on
both, the command's (parsed last) wins.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import click

__all__ = [
    "ARGS_KEY",
    "DEFAULT_SCOPE_NAME",
    "DEFAULT_STORE",
    "JSON_KEY",
    "SCOPE_PARTS",
    "STORE_ENVVAR",
    "STORE_KEY",
    "Duration",
    "explicit_store",
    "json_option",
    "main_store_option",
    "reader_options",
    "scope_options",
    "store_location",
    "store_option",
]

F = TypeVar("F", bound=Callable[..., Any])

SCOPE_PARTS = ("tenant", "user", "session")
DEFAULT_SCOPE_NAME = "local"
DEFAULT_STORE = "./.refvault"
STORE_ENVVAR = "REFVAULT_STORE"

# ``ctx.meta`` is shared by the group's context and the command's: options record what they saw there.
JSON_KEY = "refvault.json"
ARGS_KEY = "refvault.args"

STORE_KEY = "refvault.store"


def _remember_store(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value is not None:
        ctx.meta[STORE_KEY] = value
    return value


def store_option(help: str) -> Callable[[F], F]:
    """The ``--store`` option with this ``help`` text; read the value with ``ctx.meta.get(STORE_KEY)``."""
    return click.option(
        "--store",
        type=click.Path(file_okay=False, dir_okay=True, path_type=str),
        default=None,
        metavar="PATH",
        expose_value=False,
        callback=_remember_store,
        help=help,
    )


# -- options -----------------------------------------------------------------------


def _remember(key: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is not None:
            ctx.meta[key] = value
        return value

    return callback


def main_store_option(func: F) -> F:
    """``--store``, on the group and on every command; the last one parsed (the command's) wins."""
    return store_option(f"Store directory (default: ${STORE_ENVVAR}, else {DEFAULT_STORE}).")(func)


def json_option(func: F) -> F:
    option = click.option(
        "--json", "as_json", is_flag=True, callback=_remember(JSON_KEY), help="Print machine-readable JSON."
    )
    return option(func)


def scope_options(func: F) -> F:
    for part in reversed(SCOPE_PARTS):
        option = click.option(
            f"--{part}",
            envvar=f"REFVAULT_{part.upper()}",
            default=DEFAULT_SCOPE_NAME,
            show_default=True,
            show_envvar=True,
            metavar="NAME",
            help=f"The {part} of the read scope.",
        )
        func = option(func)
    return func


def reader_options(func: F) -> F:
    """``--purpose`` and ``--recipient`` of a read: why, and who the bytes go to (the tenant's policy decides)."""
    recipient = click.option(
        "--recipient",
        envvar="REFVAULT_RECIPIENT",
        default="user",
        show_default=True,
        show_envvar=True,
        metavar="WHO",
        help="Who the bytes go to: user, export, model:<name> or tool:<name>.",
    )
    purpose = click.option(
        "--purpose",
        envvar="REFVAULT_PURPOSE",
        default="default",
        show_default=True,
        show_envvar=True,
        metavar="PURPOSE",
        help="Why the bytes are read (the tenant's policy decides by it).",
    )
    return purpose(recipient(func))


if TYPE_CHECKING:
    _DurationBase = click.ParamType[timedelta]
else:  # click < 8.5 has no generic ParamType
    _DurationBase = click.ParamType

_DURATION = re.compile(r"(\d+)([smhd])")
_SECONDS_PER_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class Duration(_DurationBase):
    """A positive duration such as ``30s``, ``15m``, ``2h`` or ``7d``."""

    name = "duration"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        text = str(value).strip().lower()
        match = _DURATION.fullmatch(text)
        if match is None:
            self.fail("expected a number followed by s, m, h or d, e.g. 30s, 15m, 2h or 7d", param, ctx)
        digits = match.group(1).lstrip("0")
        if not digits:
            self.fail(f"{text} must be longer than zero", param, ctx)
        latest = datetime.max.replace(tzinfo=UTC) - datetime.now(UTC)
        # More than 12 digits is past year 9999 in any unit; checking first keeps int() cheap.
        if len(digits) > 12 or int(digits) * _SECONDS_PER_UNIT[match.group(2)] >= latest.total_seconds():
            self.fail(f"{text} is too far in the future (the deadline must be before year 10000)", param, ctx)
        return timedelta(seconds=int(digits) * _SECONDS_PER_UNIT[match.group(2)])


# -- the store ---------------------------------------------------------------------


def explicit_store(ctx: click.Context) -> str | None:
    """The ``--store`` given on the command line (the command's, else the group's), if any."""
    store: str | None = ctx.meta.get(STORE_KEY)
    return store


def store_location(ctx: click.Context) -> str:
    """``--store``, else ``$REFVAULT_STORE`` if set and non-empty, else ``./.refvault``."""
    return explicit_store(ctx) or os.environ.get(STORE_ENVVAR) or DEFAULT_STORE
