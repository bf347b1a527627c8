"""The projection of a tool result once its parts are stored: links in place of bytes, URIs in place of base64."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from refvault.content.result_parts import URI_SCHEME, Limits, Part, too_deep, too_deep_note, where_found
from refvault.content.scrub import Scrubber
from refvault.model import Descriptor


def project(
    wire: Mapping[str, Any], parts: Sequence[Part], stored: Mapping[int | str, Descriptor], limits: Limits
) -> dict[str, Any]:
    """The result with typed parts as links, every copy of any part's base64 replaced by its URI.

    Inline parts are replaced where they were (by the scrubber, which finds them as
    copies) and get a ``resource_link`` each, appended to ``content`` in part order:
    the blocks that were there keep their indices.
    """
    scrub = Scrubber([(part.encoded, URI_SCHEME + stored[part.slot].artifact_id) for part in parts])
    by_index = {part.index: part for part in parts if part.inline is None}
    appended = [_link({}, part, stored[part.slot], scrub) for part in parts if part.inline is not None]
    projected: dict[str, Any] = {}
    for key, value in wire.items():
        if key == "content":
            projected[key] = [
                _link(block, by_index[i], stored[i], scrub) if i in by_index else scrub(block)
                for i, block in enumerate(value)
            ] + appended
        elif key == "structuredContent":
            projected[key] = too_deep_note() if too_deep(value) else _bounded(scrub(value), limits.structured_content)
        else:
            projected[scrub(key)] = scrub(value)
    return projected


def _link(block: Mapping[str, Any], part: Part, descriptor: Descriptor, scrub: Scrubber) -> dict[str, Any]:
    artifact_id = descriptor.artifact_id
    meta: dict[str, Any] = {
        "sha256": descriptor.content_hash.removeprefix("sha256:"),
        **where_found(part),
        "artifact_id": artifact_id,
        "disclosure": descriptor.disclosure,
        **part.facts.as_json(),
    }
    if part.source_uri is not None:
        meta["source_uri"] = part.source_uri
    if isinstance(block.get("_meta"), Mapping):
        meta["upstream_meta"] = scrub(block["_meta"])
    resource = block.get("resource")
    if isinstance(resource, Mapping) and isinstance(resource.get("_meta"), Mapping):
        meta["upstream_resource_meta"] = scrub(resource["_meta"])
    how = (
        "sealed: usable by reference only (pass the id to a tool that accepts it)"
        if descriptor.disclosure == "sealed"
        else "read or load it by id with the refvault tools if its content is needed"
    )
    what = (
        f"{part.kind} content"
        if part.inline is None
        else f"base64 data ({'a data: URL' if part.inline.encoding == 'data_url' else 'a base64 string'}) "
        f"in {part.inline.found_in}, now shown there as its refvault:// URI,"
    )
    link: dict[str, Any] = {
        "type": "resource_link",
        "uri": URI_SCHEME + artifact_id,
        "name": descriptor.filename or part.filename,
        "mimeType": descriptor.media_type,
        "size": descriptor.size,
        "description": (
            f"{what} stored by refvault as {artifact_id} ({descriptor.media_type}, "
            f"{descriptor.size} bytes); the bytes are not shown here; {how}"
        ),
        "_meta": meta,
    }
    if "annotations" in block:
        link["annotations"] = scrub(block["annotations"])
    return link


def _bounded(value: Any, limit: int) -> Any:
    """``structuredContent`` as projected, or a note saying why it was omitted."""
    try:
        size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return {"refvault_omitted": "structuredContent omitted: it is not JSON-serialisable"}
    if size <= limit:
        return value
    return {
        "refvault_omitted": (
            f"structuredContent omitted: {size} JSON characters after projection, over the limit of {limit}; "
            "the binary parts of this result are stored by refvault (see its resource_link blocks)"
        )
    }
