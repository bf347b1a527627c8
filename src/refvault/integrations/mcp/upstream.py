"""The upstream MCP server the gateway stands in front of: where it is, what environment it gets, name clashes."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO
from urllib.parse import urlsplit

from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from refvault.errors import InvalidArgument

__all__ = ["ToolNameClash", "Upstream"]


class ToolNameClash(InvalidArgument):
    """The upstream server lists a tool under a name refvault reserves for its own tools."""

    def __init__(self, server: str, names: Sequence[str]) -> None:
        self.names = tuple(names)
        listed = ", ".join(repr(name) for name in names)
        super().__init__(
            f"upstream server {server!r} has tool(s) {listed} whose names refvault reserves for its own read "
            "tools; the gateway cannot serve both under one name (rename the upstream tool)"
        )


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where the upstream MCP server is: a command to run (stdio) or a URL (streamable HTTP).

    **Environment of a stdio upstream.** By default the command gets only the
    SDK's safe subset of this process's environment
    (:func:`mcp.client.stdio.get_default_environment`: ``HOME``, ``LOGNAME``,
    ``PATH``, ``SHELL``, ``TERM``, ``USER`` on POSIX) plus ``env``: the proxy's
    own credentials, tokens and ``REFVAULT_*`` settings are not handed to a
    server that did not ask for them. ``inherit_env=True`` passes this
    process's whole environment instead (``env`` still applies on top).
    """

    command: tuple[str, ...] = ()
    url: str | None = None
    env: Mapping[str, str] | None = None  # stdio only: variables set over the SDK's safe default subset
    cwd: str | None = None
    inherit_env: bool = False  # stdio only: pass this process's whole environment
    errlog: TextIO | None = None  # stdio only: the command's stderr (None: this process's stderr when connecting)

    def __post_init__(self) -> None:
        if bool(self.command) == (self.url is not None):
            raise InvalidArgument("give the upstream as exactly one of a command (stdio) or a URL (streamable HTTP)")
        if self.url is not None and urlsplit(self.url).scheme not in ("http", "https"):
            raise InvalidArgument("the upstream URL must start with http:// or https://")
        if self.url is not None and (self.env or self.inherit_env):
            raise InvalidArgument("environment variables apply to an upstream command (stdio), not to a URL")
        for name, value in (self.env or {}).items():
            if not isinstance(name, str) or not name or "=" in name or "\0" in name:
                raise InvalidArgument(f"invalid environment variable name {name!r}")
            if not isinstance(value, str) or "\0" in value:
                raise InvalidArgument(f"invalid value for environment variable {name!r}")

    def client(self) -> Client:
        """An unconnected SDK client for the upstream (no response cache: listings are always fresh)."""
        if self.url is not None:
            return Client(self.url, cache=None)
        parameters = StdioServerParameters(
            command=self.command[0], args=list(self.command[1:]), env=self.environment(), cwd=self.cwd
        )
        # The SDK's own default stderr is sys.stderr as it was when the SDK was imported: name it at connect time.
        errlog = self.errlog if self.errlog is not None else sys.stderr
        return Client(stdio_client(parameters, errlog=errlog), cache=None)

    def environment(self) -> dict[str, str] | None:
        """What ``StdioServerParameters.env`` gets: merged by the SDK over its safe default subset."""
        extra = dict(self.env or {})
        if self.inherit_env:
            return {**os.environ, **extra}
        return extra or None

    def describe(self) -> str:
        """For messages: the URL, or the command line."""
        return self.url if self.url is not None else " ".join(self.command)

    def fallback_name(self) -> str:
        """A name for provenance when the upstream does not identify itself."""
        if self.url is not None:
            return urlsplit(self.url).netloc or "upstream"
        return os.path.basename(self.command[0]) or "upstream"
