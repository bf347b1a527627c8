"""Limits and defaults of every operation, defined once.

The CLI, the HTTP server (and so its OpenAPI schema), the Python client, the
read functions, the toolbox's read tools and the MCP gateway all take their
defaults and ceilings from here, so a limit changes in one place. Each name
says which argument it bounds; the request types of :mod:`refvault.operations`
enforce them.

This module is at the bottom of the layers: it imports nothing of refvault.
"""

from __future__ import annotations

__all__ = [
    "CURSOR_TTL_SECONDS",
    "DEFAULT_GREP_MATCHES",
    "DEFAULT_GREP_SECONDS",
    "DEFAULT_OFFLOAD_TOKENS",
    "DEFAULT_PREVIEW_CHARS",
    "DEFAULT_QUERY_LIMIT",
    "DEFAULT_QUERY_SECONDS",
    "DEFAULT_WINDOW_CHARS",
    "LIST_PAGE",
    "LOAD_IMAGE_BYTES",
    "LOAD_TEXT_CHARS",
    "LONG_LINE_CHARS",
    "MATCH_CHARS",
    "MAX_CHARS",
    "MAX_DEPTH",
    "MAX_FROM_LINE",
    "MAX_IN",
    "MAX_LEAVES",
    "MAX_LIMIT",
    "MAX_LINEAGE_NODES",
    "MAX_LIST_PAGE",
    "MAX_LIST_SUMMARY",
    "MAX_LOAD_IDS",
    "MAX_MATCHES",
    "MAX_OFFSET",
    "MAX_ORDER",
    "MAX_PATTERN",
    "MAX_PREVIEW_CHARS",
    "MAX_QUERY_SECONDS",
    "MAX_REDACT_BYTES",
    "MAX_REPLAY_IDS",
    "MAX_SECONDS",
    "MIN_PREVIEW_CHARS",
    "SUMMARY_LIMIT",
]

# -- text windows (refvault.read.window) -------------------------------------------------------
DEFAULT_WINDOW_CHARS = 20_000  # characters a window returns unless asked for another number
MAX_CHARS = 200_000  # the most characters one window may return

# -- grep (refvault.read.grep) -------------------------------------------------------------------
DEFAULT_GREP_MATCHES = 100
MAX_MATCHES = 1000  # the most matches one grep call may return
MAX_PATTERN = 1000  # characters of a grep pattern
DEFAULT_GREP_SECONDS = 5.0
MAX_SECONDS = 60.0  # the largest time budget of one grep call
MAX_FROM_LINE = 2**63 - 1
MATCH_CHARS = 500  # characters of a matching line shown (the rest is cut, and said so)
LONG_LINE_CHARS = 1 << 22  # grep handles longer lines in segments; a regex sees only the first

# -- record queries (refvault.read.query) ------------------------------------------------------
DEFAULT_QUERY_LIMIT = 100  # records per page
MAX_LIMIT = 1000  # the most records one page returns (a larger limit is capped to it)
MAX_ORDER = 8  # fields in an order
MAX_IN = 1000  # values of one "in" condition
MAX_DEPTH = 32  # nesting of a where selector
MAX_LEAVES = 256  # conditions in a where selector
DEFAULT_QUERY_SECONDS = 10.0
MAX_QUERY_SECONDS = 600.0  # the largest max_seconds a query accepts
CURSOR_TTL_SECONDS = 3600  # how long a query cursor stays valid

# -- listing (Client.list, GET /v1/artifacts) --------------------------------------------------------
LIST_PAGE = 100  # artifacts per page of a listing, unless asked for another number
MAX_LIST_PAGE = 1000  # the most artifacts one page of a listing holds
MAX_OFFSET = 2**63 - 1

# -- the toolbox's model-facing tools ----------------------------------------------------------
SUMMARY_LIMIT = 20  # artifacts list_artifacts shows (and instructions name) unless asked for another number
MAX_LIST_SUMMARY = 50  # the most artifacts list_artifacts shows
MAX_LOAD_IDS = 10  # ids one load_artifacts call may load
LOAD_TEXT_CHARS = 20_000  # characters of one text artifact load_artifacts puts into the context
LOAD_IMAGE_BYTES = 5 * 1024 * 1024  # the largest image load_artifacts loads
DEFAULT_OFFLOAD_TOKENS = 20_000  # a tool result estimated above this many tokens is offloaded to the vault
DEFAULT_PREVIEW_CHARS = 4_000  # characters of the preview an offloaded result is replaced by
MIN_PREVIEW_CHARS = 256
MAX_PREVIEW_CHARS = 200_000

# -- derived copies (refvault.vault.copies) ---------------------------------------------------
MAX_REDACT_BYTES = 256 * 1024 * 1024  # the largest artifact a redaction reads (it is held whole while redacted)
MAX_LINEAGE_NODES = 100_000  # the most nodes one lineage walk or cascade visits
MAX_REPLAY_IDS = 1000  # ids one replay_status call checks
