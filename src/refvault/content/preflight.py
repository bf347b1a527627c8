"""Checks before the first write: every binary part of a tool result located, bounded, decoded and named.

Nothing is stored until all of this has passed for every part (see :func:`preflight`).
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from refvault.content.encoded import find_encoded
from refvault.content.filenames import capped_filename, recorded_source_uri, safe_filename
from refvault.content.result_parts import (
    BINARY_KINDS,
    DECODE_CHUNK,
    KNOWN_KINDS,
    MAX_DEPTH,
    PROVENANCE_MAX,
    Inline,
    Limits,
    Located,
    Part,
    too_deep,
)
from refvault.content.scrub import Scrubber
from refvault.content.sniff import classify, extension_for, name_for_type
from refvault.errors import EmptyPart, InvalidArgument, InvalidMetadata, InvalidResult, TooLarge
from refvault.model import Scope, canonical_media_type, checked_disclosure, checked_label


def check_call(
    scope: object,
    provenance: object,
    tool_call_id: object,
    run_id: object,
    disclosure: object,
    limits: object,
) -> None:
    if not isinstance(scope, Scope):
        raise InvalidArgument("scope must be a refvault.Scope(tenant=..., user=..., session=...)")
    if not isinstance(provenance, str) or not 0 < len(provenance) <= PROVENANCE_MAX:
        raise InvalidMetadata(f"provenance must be a string of 1-{PROVENANCE_MAX} characters, e.g. 'mcp:server/tool'")
    if tool_call_id is None:
        raise InvalidMetadata("tool_call_id is required: it makes a retried materialisation store nothing new")
    checked_label("tool_call_id", tool_call_id)
    checked_label("run_id", run_id)
    checked_disclosure(disclosure)
    if not isinstance(limits, Limits):
        raise InvalidArgument("limits must be a refvault.content.Limits")


def check_part_count(wire: Mapping[str, Any], limits: Limits) -> None:
    """Refuse a result with more binary parts than ``limits.max_parts`` (each would be a durable write)."""
    content = wire.get("content")
    if not isinstance(content, list | tuple):
        return  # preflight says what is wrong with it
    count = sum(1 for block in content if _is_binary(block))
    if count > limits.max_parts:
        raise TooLarge(
            f"this result has {count} binary parts, over the limit of {limits.max_parts} parts per result; "
            "refused, nothing was stored"
        )


def _is_binary(block: object) -> bool:
    if not isinstance(block, Mapping):
        return False
    kind = block.get("type")
    if kind in BINARY_KINDS:
        return True
    resource = block.get("resource")
    return kind == "resource" and isinstance(resource, Mapping) and "blob" in resource


def preflight(wire: Mapping[str, Any], limits: Limits) -> list[Part]:
    """Check every binary part (cheap checks for all, then decoding for all); return them decoded, in order.

    The parts are the typed ones (image, audio and embedded blob blocks) and the
    inline ones: base64-encoded bytes inside any string of the result, as
    :func:`refvault.content.encoded.find_encoded` defines them (see
    :func:`_inline_parts`). Order: content blocks in order, each block's typed
    part before what was found inside it, then the other top-level fields.

    Also refused here, before any write: a result nested deeper than
    ``MAX_DEPTH`` outside ``structuredContent`` (which is omitted instead), a
    block of an unknown kind carrying ``data`` or ``blob``, and a block naming a
    ``refvault://`` URI (only refvault mints those). The number of typed parts
    is checked before this (:func:`check_part_count`), that of all parts here.
    """
    content = wire.get("content")
    if not isinstance(content, list | tuple):
        raise InvalidResult("not a tool result: 'content' must be a list of content blocks")
    for key, value in wire.items():
        if key != "structuredContent" and too_deep(value, 0 if key == "content" else 1):
            raise InvalidResult(f"the tool result's '{key}' is nested more than {MAX_DEPTH} levels deep; refused")
    typed = [found for index, block in enumerate(content) if (found := _locate(index, block)) is not None]
    inline = _inline_parts(wire, typed)
    if len(typed) + len(inline) > limits.max_parts:
        raise TooLarge(
            f"this result has {len(typed) + len(inline)} binary parts ({len(inline)} of them base64 inside its "
            f"strings), over the limit of {limits.max_parts} parts per result; refused, nothing was stored"
        )
    located = sorted([*typed, *inline], key=_result_order(content))
    total = 0
    for found in located:
        size = _decoded_size(found, limits)
        total += size
        if total > limits.per_result:
            raise TooLarge(
                f"the binary parts of this result exceed the per-result limit of {limits.per_result} bytes "
                f"(at {found.label}); refused, not truncated",
                content_index=found.content_index,
            )
    decoded = [_decoded(found) for found in located]
    return _named(decoded, located)


def _result_order(content: Sequence[Any]) -> Callable[[Located], tuple[int, int, int]]:
    """Sort key: content blocks in order (a typed part before what its block holds inline), then the rest."""

    def key(found: Located) -> tuple[int, int, int]:
        if found.inline is None:
            return (found.index, 0, 0)
        place = found.index if found.index >= 0 else len(content)
        return (place, 1, found.inline.number)

    return key


def _inline_parts(wire: Mapping[str, Any], typed: Sequence[Located]) -> list[Located]:
    """The base64-encoded bytes inside the result's strings that become parts of their own, in result order.

    Every string value is searched (dict keys are not: they are only scrubbed),
    except a typed part's own base64 (an image or audio block's ``data``, an
    embedded blob's ``blob``) and a ``structuredContent`` nested too deep (it is
    omitted). Order: content blocks in order, then the other top-level fields
    in the order the result has them; within a value depth first, in the
    value's own order; within a string left to right. A span that is a copy (or
    a piece) of a typed part's base64 is not a part: the scrubber replaces it
    with that part's URI. Spans decoding to the same bytes are one part.
    """
    places: list[tuple[int, str, Any]] = []
    for index, block in enumerate(wire["content"]):
        places.append((index, f"content[{index}]", _without_typed_payload(block)))
    for key, value in wire.items():
        if key == "content" or (key == "structuredContent" and too_deep(value)):
            continue
        shown = key if isinstance(key, str) and _FIELD_NAME.fullmatch(key) else "a top-level field"
        places.append((-1, shown, value))
    copies = Scrubber([(found.encoded, "") for found in typed]) if typed else None
    parts: dict[str, Located] = {}
    for index, found_in, value in places:
        for text in _strings(value):
            for span in find_encoded(text):
                if span.canonical in parts or (copies is not None and copies.traced(text[span.start : span.end])):
                    continue
                inline = Inline(len(parts), found_in, span.kind)
                parts[span.canonical] = Located(index, "inline", span.canonical, span.declared, None, inline)
    return list(parts.values())


_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")


def _without_typed_payload(block: object) -> object:
    """A content block without the base64 field that makes it a typed part (that part is located on its own)."""
    if not isinstance(block, Mapping):
        return block
    if block.get("type") in BINARY_KINDS:
        return {key: value for key, value in block.items() if key != "data"}
    resource = block.get("resource")
    if block.get("type") == "resource" and isinstance(resource, Mapping) and "blob" in resource:
        return {**block, "resource": {key: value for key, value in resource.items() if key != "blob"}}
    return block


def _strings(value: object) -> Iterator[str]:
    """Every string value inside ``value`` (not dict keys), depth first, in the value's own order."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, Mapping):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list | tuple):
            stack.extend(reversed(item))


def _is_refvault_uri(value: object) -> bool:
    return isinstance(value, str) and value.strip().lower().startswith("refvault:")


def _locate(index: int, block: object) -> Located | None:
    """The binary part a content block carries, or None (text, resource links and text resources pass through)."""
    if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
        raise InvalidResult(
            f"content part {index} is not a content block (an object with a 'type')", content_index=index
        )
    kind = block["type"]
    resource = block.get("resource")
    if _is_refvault_uri(block.get("uri")) or (isinstance(resource, Mapping) and _is_refvault_uri(resource.get("uri"))):
        raise InvalidResult(
            f"content part {index} ({kind}) names a refvault:// URI; only refvault mints those (a tool's own "
            "could name any artifact of the session as its output), so the result is refused",
            content_index=index,
        )
    if kind in BINARY_KINDS:
        data, declared = block.get("data"), block.get("mimeType")
        if not isinstance(declared, str):
            raise InvalidResult(f"content part {index} ({kind}) has no mimeType string", content_index=index)
        return Located(index, kind, _base64_field(index, data), _declared(index, declared), None)
    if kind not in KNOWN_KINDS:
        carried = "data" in block or "blob" in block or (isinstance(resource, Mapping) and "blob" in resource)
        if carried:
            raise InvalidResult(
                f"content part {index} is of an unknown kind ({kind[:40]!r}) and carries data or a blob; "
                "refused rather than passed on (its bytes could reach the model)",
                content_index=index,
            )
        return None
    if kind != "resource":
        return None
    if not isinstance(resource, Mapping):
        raise InvalidResult(f"content part {index} (resource) has no 'resource' object", content_index=index)
    if "blob" not in resource:
        if not isinstance(resource.get("text"), str):
            raise InvalidResult(
                f"content part {index} (resource) has neither a 'blob' nor a 'text' string", content_index=index
            )
        return None
    declared = resource.get("mimeType")
    if declared is not None and not isinstance(declared, str):
        raise InvalidResult(f"content part {index} (resource) has a mimeType that is not a string", content_index=index)
    encoded = _base64_field(index, resource["blob"])
    canonical = None if declared is None else _declared(index, declared)
    return Located(index, "resource", encoded, canonical, resource.get("uri"))


def _base64_field(index: int, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidResult(f"content part {index} carries no base64 string", content_index=index)
    return value


def _declared(index: int, value: str) -> str:
    try:
        return canonical_media_type(value)
    except InvalidMetadata as exc:
        raise InvalidResult(f"content part {index} has an invalid media type: {exc}", content_index=index) from None


def _decoded_size(found: Located, limits: Limits) -> int:
    """The exact decoded size of canonical base64, from its length alone (nothing decoded yet)."""
    encoded, index = found.encoded, found.content_index
    if not encoded:
        raise EmptyPart(f"{found.label} holds no bytes", content_index=index)
    if len(encoded) % 4:
        raise InvalidResult(
            f"content part {index} is not valid base64 (length not a multiple of 4)", content_index=index
        )
    padding = 2 if encoded.endswith("==") else 1 if encoded.endswith("=") else 0
    size = len(encoded) // 4 * 3 - padding
    if size > limits.per_part:
        raise TooLarge(
            f"{found.label} is {size} bytes, over the per-part limit of {limits.per_part} "
            "bytes; refused, not truncated",
            content_index=index,
        )
    return size


def _decoded(found: Located) -> Part:
    data = _strict_b64decode(found.encoded, found.content_index, None if found.inline is None else found.label)
    if not data:
        raise EmptyPart(f"{found.label} holds no bytes", content_index=found.content_index)
    facts = classify(found.declared, data, found.kind)
    return Part(found.index, found.kind, found.encoded, data, facts, "", None, found.inline)


def _strict_b64decode(encoded: str, index: int | None, label: str | None = None) -> bytes:
    """Standard-alphabet, padded, canonical base64 only: no whitespace, no URL-safe characters, no stray bits."""
    what = label or f"content part {index}"
    try:
        if len(encoded) <= DECODE_CHUNK:
            data = binascii.a2b_base64(encoded, strict_mode=True)
        else:  # in pieces (a multiple of 4 characters each), so no one call holds the GIL for long
            if "=" in encoded[:-2]:
                raise binascii.Error("padding before the end")
            data = b"".join(
                binascii.a2b_base64(encoded[start : start + DECODE_CHUNK], strict_mode=True)
                for start in range(0, len(encoded), DECODE_CHUNK)
            )
    except (binascii.Error, ValueError):
        raise InvalidResult(f"{what} is not valid base64", content_index=index) from None
    tail = len(data) % 3 or 3
    if binascii.b2a_base64(data[-tail:], newline=False).decode("ascii") != encoded[-4:]:
        raise InvalidResult(f"{what} is not canonical base64 (non-zero padding bits)", content_index=index)
    return data


def _named(parts: list[Part], located: Sequence[Located]) -> list[Part]:
    """Give each part its display name and recorded source URI: neither may carry any part's base64.

    A name or URI that holds a trace of a part's base64 is dropped (the name
    falls back to ``content-NNN.<ext>``); a declared media type that does is
    refused. A name's extension is made consistent with the stored type.
    """
    scrub = Scrubber([(part.encoded, "") for part in parts])
    named = []
    for part, found in zip(parts, located, strict=True):
        for media_type in {part.facts.declared, part.facts.stored} - {None}:
            if scrub.traced(str(media_type)):
                raise InvalidResult(
                    f"{part.label} declares a media type that carries the base64 of a part",
                    content_index=part.index if part.index >= 0 else None,
                )
        name = safe_filename(found.uri)
        if name is not None and scrub.traced(name):
            name = None
        if name is None and part.inline is not None:
            name = f"inline-{part.inline.number:03d}.{extension_for(part.facts.stored)}"
        elif name is None:
            name = f"content-{part.index:03d}.{extension_for(part.facts.stored)}"
        else:
            name = capped_filename(name_for_type(name, part.facts.stored))
        source_uri = recorded_source_uri(found.uri)
        if source_uri is not None and scrub.traced(source_uri):
            source_uri = None
        named.append(replace(part, filename=name, source_uri=source_uri))
    return named
