"""What the gateway does to an upstream's results besides storing their bytes: the rewrites and the messages.

Blocks that claim refvault's ``refvault:`` scheme are withheld
(:func:`withhold_claimed_links`), the upstream's ``serverInfo`` stamp is dropped
(:func:`without_server_stamp`), refusals and errors become ``isError`` results
whose text is bounded (:func:`error_result`, :func:`refusal`, :func:`bounded`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import mcp.types as types

from refvault.errors import MaterializationError
from refvault.mcp_tools import text_block

__all__ = [
    "MESSAGE_CHARS",
    "URI_SHOWN",
    "bounded",
    "contents_uri",
    "error_result",
    "is_json_media_type",
    "is_refvault_uri",
    "refusal",
    "text_of",
    "to_json",
    "withhold_claimed_links",
    "without_server_stamp",
]

logger = logging.getLogger("refvault.mcp")

MESSAGE_CHARS = 1000  # cap on upstream error text relayed to the client
URI_SHOWN = 256  # cap on an upstream URI or media type repeated in a note


def error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[text_block(message)], is_error=True)


def bounded(text: str, limit: int = MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def refusal(tool: str, server: str, exc: MaterializationError) -> str:
    return (
        f"refvault refused the result of tool {tool!r} from upstream server {server!r}: "
        f"{type(exc).__name__}: {exc}. The tool ran upstream, but none of its result is shown; "
        "calling it again with the same arguments will most likely be refused the same way."
    )


def to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def text_of(block: types.ContentBlock) -> str | None:
    """The text of a text block or an embedded text resource (what offloading considers), else None."""
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.EmbeddedResource) and isinstance(block.resource, types.TextResourceContents):
        return block.resource.text
    return None


def is_json_media_type(media_type: str) -> bool:
    main = media_type.split(";", 1)[0].strip().lower()
    return main == "application/json" or main.endswith("+json")


def is_refvault_uri(uri: str) -> bool:
    """Whether ``uri`` claims refvault's scheme (case-insensitively, as URI schemes compare)."""
    return uri.strip().lower().startswith("refvault:")


def withhold_claimed_links(result: types.CallToolResult, server: str) -> types.CallToolResult:
    """Replace upstream blocks that claim a ``refvault:`` URI with a note; they are not refvault's.

    Only refvault mints ``refvault://`` links, for what it stored itself. An upstream ``resource_link``
    (or embedded resource) under that scheme would look exactly like one of those, with whatever
    ``_meta`` (sha256, disclosure) the upstream made up, and could pass off any artifact id of the scope
    as its own output. Each such block becomes a text block (one for one, so content indices stay
    stable) saying it was withheld; its URI is not repeated.
    """
    content = list(result.content)
    withheld = False
    for index, block in enumerate(content):
        if isinstance(block, types.ResourceLink):
            uri, kind = block.uri, "resource_link"
        elif isinstance(block, types.EmbeddedResource):
            uri, kind = block.resource.uri, "embedded resource"
        else:
            continue
        if not is_refvault_uri(uri):
            continue
        content[index] = text_block(
            f"[refvault withheld a {kind} from upstream server {bounded(server, URI_SHOWN)!r}: it claims a "
            "refvault:// URI, but refvault mints those only for what it stores itself, so it is untrusted "
            "and not shown]"
        )
        withheld = True
    if not withheld:
        return result
    logger.warning("withheld block(s) claiming refvault:// URIs from upstream server %r", server)
    return result.model_copy(update={"content": content})


def without_server_stamp(result: types.CallToolResult) -> types.CallToolResult:
    """Drop the upstream's ``serverInfo`` stamp from ``_meta``: the gateway stamps its own."""
    meta = result.meta
    if not meta or types.SERVER_INFO_META_KEY not in meta:
        return result
    kept = {key: value for key, value in meta.items() if key != types.SERVER_INFO_META_KEY}
    return result.model_copy(update={"meta": kept or None})


def contents_uri(uri: str, requested: str) -> str:
    """The URI to show for materialised contents: the upstream's, unless it is long or a ``data:`` URL."""
    if len(uri) <= 2048 and not uri.strip().lower().startswith("data:"):
        return uri
    return requested
