"""The ``--store PATH`` option every refvault command takes, shared by the main CLI and the groups it attaches.

It depends on click only, so ``refvault.server.cli``, ``refvault.integrations.mcp.cli`` and
``refvault.evaluation`` can use it without importing :mod:`refvault.cli` (which imports them).
The value goes to ``ctx.meta[STORE_KEY]``, which a group's and its command's contexts share: given
on both, the command's (parsed last) wins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["STORE_KEY", "store_option"]

F = TypeVar("F", bound=Callable[..., Any])

STORE_KEY = "refvault.store"


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
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
        callback=_remember,
        help=help,
    )
