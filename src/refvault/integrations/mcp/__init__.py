"""refvault for the Model Context Protocol: ``refvault mcp proxy``, a gateway in front of any MCP server.

The gateway lives in :mod:`refvault.integrations.mcp.gateway` (its invariants are
stated there); the command line in :mod:`refvault.cli.mcp`. Both
need the optional ``mcp`` extra (the official MCP Python SDK), imported only
when a name below is first used.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__all__ = ["Gateway", "GatewayOptions", "ToolNameClash", "Upstream", "open_gateway", "run_proxy"]

if TYPE_CHECKING:
    from refvault.integrations.mcp.gateway import (
        Gateway,
        GatewayOptions,
        ToolNameClash,
        Upstream,
        open_gateway,
        run_proxy,
    )


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(import_module("refvault.integrations.mcp.gateway"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
