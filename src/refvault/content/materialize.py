"""Materialise the binary parts of a tool result: store every one, hand back metadata-only references.

See :mod:`refvault.content` for the invariants this module keeps and where each is tested.
"""

from __future__ import annotations

import asyncio
import binascii
import copy
import hashlib
import json
import re
import unicodedata
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeVar, overload
from urllib.parse import unquote, urlsplit, urlunsplit

from refvault.content.encoded import find_encoded
from refvault.content.scrub import Scrubber
from refvault.content.sniff import MediaTypeFacts, classify, extension_for, name_for_type
from refvault.errors import (
    EmptyPart,
    IdempotencyConflict,
    InvalidArgument,
    InvalidMetadata,
    InvalidResult,
    MaterializationError,
    TooLarge,
)
from refvault.model import Descriptor, Disclosure, Scope, canonical_media_type, checked_disclosure, checked_label
from refvault.vault.aio import AsyncVault
from refvault.vault.vault import Vault

__all__ = ["Limits", "materialize"]

KiB = 1 << 10
MiB = 1 << 20

URI_SCHEME = "refvault://"
FILENAME_MAX = 128  # characters, extension kept
SOURCE_URI_MAX = 2048  # longer upstream URIs are not recorded
PROVENANCE_MAX = 1024
MAX_DEPTH = 100  # nesting of objects and arrays in a result; deeper is refused (structuredContent: omitted)
DECODE_CHUNK = 8 * MiB  # base64 characters decoded per call (bounds how long the GIL is held)
BINARY_KINDS = ("image", "audio")
KNOWN_KINDS = frozenset({"text", "image", "audio", "resource", "resource_link"})

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on one tool result. Anything over is refused with :class:`TooLarge`, never truncated.

    ``per_part`` and ``per_result`` count decoded bytes; ``max_parts`` counts
    binary parts (each is one durable write); ``structured_content`` bounds
    ``structuredContent`` after projection, in JSON characters (over it, the
    value is replaced by a ``refvault_omitted`` note rather than refused: the
    binary parts themselves were stored; a caller that offloads large values
    itself passes a large bound here).
    """

    per_part: int = 64 * MiB
    per_result: int = 128 * MiB
    structured_content: int = 64 * KiB
    max_parts: int = 1000

    def __post_init__(self) -> None:
        for name in ("per_part", "per_result", "structured_content", "max_parts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgument(f"Limits.{name} must be a positive integer")


@dataclass(frozen=True, slots=True)
class _Inline:
    """Where base64-encoded bytes were found inside a string of the result (an inline part)."""

    number: int  # its place among the result's inline parts, in result order
    found_in: str  # "content[3]", "structuredContent", "_meta", ...
    encoding: str  # "data_url" | "base64"


@dataclass(frozen=True, slots=True)
class _Part:
    """One binary part, checked and decoded, ready to store."""

    index: int  # the content block it is (typed) or was found in (inline); -1 outside content
    kind: str  # "image" | "audio" | "resource" | "inline"
    encoded: str
    data: bytes
    facts: MediaTypeFacts
    filename: str
    source_uri: str | None
    inline: _Inline | None = None

    @property
    def slot(self) -> int | str:
        """What names the part within its result: its content index, or ``inline.<number>``."""
        return self.index if self.inline is None else f"inline.{self.inline.number}"

    @property
    def label(self) -> str:
        return _label(self.index, self.kind, self.inline)


@dataclass(frozen=True, slots=True)
class _Located:
    """A binary part found in the result, before its bytes are decoded."""

    index: int
    kind: str
    encoded: str
    declared: str | None
    uri: object
    inline: _Inline | None = None

    @property
    def label(self) -> str:
        return _label(self.index, self.kind, self.inline)

    @property
    def content_index(self) -> int | None:
        return self.index if self.index >= 0 else None


def _label(index: int, kind: str, inline: _Inline | None) -> str:
    """How messages name a part: ``content part 3 (image)`` or ``inline part 0 (base64 in structuredContent)``."""
    if inline is None:
        return f"content part {index} ({kind})"
    return f"inline part {inline.number} ({inline.encoding} in {inline.found_in})"


# -- the entry point ------------------------------------------------------------------------------------------------


@overload
async def materialize(
    vault: Vault | AsyncVault,
    scope: Scope,
    result: Mapping[str, Any],
    *,
    provenance: str,
    tool_call_id: str,
    limits: Limits = ...,
    disclosure: Disclosure = ...,
    run_id: str | None = ...,
) -> dict[str, Any]: ...


@overload
async def materialize(
    vault: Vault | AsyncVault,
    scope: Scope,
    result: T,
    *,
    provenance: str,
    tool_call_id: str,
    limits: Limits = ...,
    disclosure: Disclosure = ...,
    run_id: str | None = ...,
) -> T: ...


async def materialize(
    vault: Vault | AsyncVault,
    scope: Scope,
    result: Any,
    *,
    provenance: str,
    tool_call_id: str,
    limits: Limits = Limits(),  # frozen, so one shared default is safe
    disclosure: Disclosure = "sealed",
    run_id: str | None = None,
) -> Any:
    """Store every image, audio and embedded blob part of ``result``; return its metadata-only projection.

    ``result`` is an ``mcp.types.CallToolResult`` or its wire-form dict; the
    return value is a new value of the same kind (the input is never mutated).
    Each binary block becomes a ``resource_link`` to ``refvault://<artifact_id>``;
    everything else stays, with any base64 of a stored part replaced by its URI.

    Raises :class:`~refvault.errors.InvalidArgument` for a bad scope or call
    argument, and a :class:`~refvault.errors.MaterializationError` (``permanent``:
    do not re-issue the tool call) for a refused or failed part. A retry with the
    same ``tool_call_id`` returns the same artifact ids and stores nothing new.
    """
    target = vault.vault if isinstance(vault, AsyncVault) else vault
    _check_call(target, scope, provenance, tool_call_id, run_id, disclosure, limits)
    # Everything CPU-bound (decoding, sniffing, the projection) runs off the event loop.
    wire, rebuild, parts = await asyncio.to_thread(_prepare, result, limits)
    if not parts:
        return await asyncio.to_thread(_unchanged, wire, rebuild)
    created_at = target.clock()
    stored: dict[int | str, Descriptor] = {}
    for part in parts:
        await _checkpoint()
        descriptor = await _store(
            target,
            scope,
            part,
            provenance=provenance,
            tool_call_id=tool_call_id,
            run_id=run_id,
            disclosure=disclosure,
            created_at=created_at,
            already=len(stored),
        )
        if not stored:
            # A retry replays the first part with the moment of its first capture: later parts share it.
            created_at = descriptor.created_at
        stored[part.slot] = descriptor
    await _checkpoint()
    del part
    parts = [replace(each, data=b"") for each in parts]  # the bytes are stored: let them go
    return await asyncio.to_thread(lambda: rebuild(_project(wire, parts, stored, limits)))


def _prepare(result: object, limits: Limits) -> tuple[dict[str, Any], Callable[[dict[str, Any]], Any], list[_Part]]:
    wire, rebuild = _wire_form(result)
    _check_part_count(wire, limits)
    return wire, rebuild, _preflight(wire, limits)


def _unchanged(wire: dict[str, Any], rebuild: Callable[[dict[str, Any]], Any]) -> Any:
    """A result with no binary part: an equal copy (a too-deep structuredContent becomes an omission note)."""
    copied = {
        key: (_too_deep_note() if key == "structuredContent" and _too_deep(value) else copy.deepcopy(value))
        for key, value in wire.items()
    }
    return rebuild(copied)


async def _checkpoint() -> None:
    """Let a pending cancellation land here, between writes, rather than mid-projection."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
    await asyncio.sleep(0)


async def _uninterrupted(work: Awaitable[T]) -> T:
    """Await ``work`` to its end even if cancelled meanwhile; then re-raise the cancellation.

    A write runs in a thread that cancellation cannot stop: reporting
    ``CancelledError`` while it goes on would let a part land after the caller
    was told the call was cancelled (and perhaps after it closed the vault).
    """
    task = asyncio.ensure_future(work)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = exc
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation is what the caller hears about
        raise cancelled
    return task.result()


# -- the two forms of a result --------------------------------------------------------------------------------------


def _wire_form(result: object) -> tuple[dict[str, Any], Callable[[dict[str, Any]], Any]]:
    """The result as a wire-form dict, and how to turn a projected dict back into the caller's kind."""
    if isinstance(result, Mapping):
        return dict(result), lambda projected: projected
    model = _call_tool_result_type()
    if model is None or not isinstance(result, model):
        raise InvalidResult("not a tool result: expected an mcp.types.CallToolResult or its wire-form dict")
    kind = type(result)

    def rebuild(projected: dict[str, Any]) -> Any:
        try:
            return kind.model_validate(projected)
        except (ValueError, RecursionError) as exc:  # pydantic's ValidationError is a ValueError
            raise InvalidResult(f"the projected result is not a valid {kind.__name__}: {type(exc).__name__}") from None

    try:
        dumped = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    except (ValueError, RecursionError) as exc:
        raise InvalidResult(f"the tool result cannot be read: {type(exc).__name__}") from None
    return dumped, rebuild


def _call_tool_result_type() -> type[Any] | None:
    """``mcp.types.CallToolResult``, imported only when a non-dict arrives (``mcp`` is an optional extra)."""
    try:
        from mcp.types import CallToolResult
    except ImportError:
        return None
    return CallToolResult


# -- checks before the first write ----------------------------------------------------------------------------------


def _check_call(
    vault: object,
    scope: object,
    provenance: object,
    tool_call_id: object,
    run_id: object,
    disclosure: object,
    limits: object,
) -> None:
    if not isinstance(vault, Vault):
        raise InvalidArgument("vault must be a refvault.Vault or AsyncVault")
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


def _check_part_count(wire: Mapping[str, Any], limits: Limits) -> None:
    """Refuse a result with more binary parts than ``limits.max_parts`` (each would be a durable write)."""
    content = wire.get("content")
    if not isinstance(content, list | tuple):
        return  # _preflight says what is wrong with it
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


def _preflight(wire: Mapping[str, Any], limits: Limits) -> list[_Part]:
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
    is checked before this (:func:`_check_part_count`), that of all parts here.
    """
    content = wire.get("content")
    if not isinstance(content, list | tuple):
        raise InvalidResult("not a tool result: 'content' must be a list of content blocks")
    for key, value in wire.items():
        if key != "structuredContent" and _too_deep(value, 0 if key == "content" else 1):
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


def _result_order(content: Sequence[Any]) -> Callable[[_Located], tuple[int, int, int]]:
    """Sort key: content blocks in order (a typed part before what its block holds inline), then the rest."""

    def key(found: _Located) -> tuple[int, int, int]:
        if found.inline is None:
            return (found.index, 0, 0)
        place = found.index if found.index >= 0 else len(content)
        return (place, 1, found.inline.number)

    return key


def _inline_parts(wire: Mapping[str, Any], typed: Sequence[_Located]) -> list[_Located]:
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
        if key == "content" or (key == "structuredContent" and _too_deep(value)):
            continue
        shown = key if isinstance(key, str) and _FIELD_NAME.fullmatch(key) else "a top-level field"
        places.append((-1, shown, value))
    copies = Scrubber([(found.encoded, "") for found in typed]) if typed else None
    parts: dict[str, _Located] = {}
    for index, found_in, value in places:
        for text in _strings(value):
            for span in find_encoded(text):
                if span.canonical in parts or (copies is not None and copies.traced(text[span.start : span.end])):
                    continue
                inline = _Inline(len(parts), found_in, span.kind)
                parts[span.canonical] = _Located(index, "inline", span.canonical, span.declared, None, inline)
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


def _too_deep(value: object, depth: int = 0) -> bool:
    """True if ``value`` nests objects and arrays more than ``MAX_DEPTH`` levels (checked without recursion)."""
    stack = [(value, depth)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, Mapping) else item if isinstance(item, list | tuple) else None
        if children is None:
            continue
        if level >= MAX_DEPTH:
            return True
        stack.extend((child, level + 1) for child in children if isinstance(child, Mapping | list | tuple))
    return False


def _too_deep_note() -> dict[str, str]:
    return {"refvault_omitted": f"structuredContent omitted: it is nested more than {MAX_DEPTH} levels deep"}


def _is_refvault_uri(value: object) -> bool:
    return isinstance(value, str) and value.strip().lower().startswith("refvault:")


def _locate(index: int, block: object) -> _Located | None:
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
        return _Located(index, kind, _base64_field(index, data), _declared(index, declared), None)
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
    return _Located(index, "resource", encoded, canonical, resource.get("uri"))


def _base64_field(index: int, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidResult(f"content part {index} carries no base64 string", content_index=index)
    return value


def _declared(index: int, value: str) -> str:
    try:
        return canonical_media_type(value)
    except InvalidMetadata as exc:
        raise InvalidResult(f"content part {index} has an invalid media type: {exc}", content_index=index) from None


def _decoded_size(found: _Located, limits: Limits) -> int:
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


def _decoded(found: _Located) -> _Part:
    data = _strict_b64decode(found.encoded, found.content_index, None if found.inline is None else found.label)
    if not data:
        raise EmptyPart(f"{found.label} holds no bytes", content_index=found.content_index)
    facts = classify(found.declared, data, found.kind)
    return _Part(found.index, found.kind, found.encoded, data, facts, "", None, found.inline)


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


def _named(parts: list[_Part], located: Sequence[_Located]) -> list[_Part]:
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
            name = _capped(name_for_type(name, part.facts.stored))
        source_uri = _source_uri(found.uri)
        if source_uri is not None and scrub.traced(source_uri):
            source_uri = None
        named.append(replace(part, filename=name, source_uri=source_uri))
    return named


# -- filenames and source URIs --------------------------------------------------------------------------------------

_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})
_WINDOWS_FORBIDDEN = re.compile(r'[<>:"|?*]')
_WINDOWS_DEVICES = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$", "CLOCK$"}
    | {f"{device}{n}" for device in ("COM", "LPT") for n in [*"0123456789", "\u00b9", "\u00b2", "\u00b3"]}
)


def safe_filename(uri: object) -> str | None:
    """A display filename from an upstream URI: the basename only, cleaned and capped; None if there is none.

    Query and fragment are dropped; percent-escapes are decoded before cleaning;
    control, format and private-use characters are removed; characters Windows
    forbids (``<>:"|?*``, ``:`` being its stream separator) become ``_``;
    trailing dots and spaces are removed; ``.``, ``..`` and Windows device names
    (``CON``, ``nul.png``, ``COM1.txt``...) are refused; at most 128 characters
    are kept, with the extension. Opaque URIs (``urn:``, ``data:``, ``mailto:``)
    name no file.
    """
    if not isinstance(uri, str) or not uri or len(uri) > SOURCE_URI_MAX:
        return None
    try:
        parts = urlsplit(uri)
    except ValueError:
        return None
    if parts.scheme and not parts.netloc and not parts.path.startswith("/"):
        return None  # opaque: urn:isbn:..., data:..., mailto:...
    path = unquote(parts.path, errors="replace")
    base = re.split(r"[/\\]", path)[-1]
    cleaned = "".join(ch for ch in base if unicodedata.category(ch) not in _UNSAFE_CATEGORIES)
    cleaned = _WINDOWS_FORBIDDEN.sub("_", unicodedata.normalize("NFC", cleaned)).strip().rstrip(". ")
    if not cleaned or cleaned.split(".")[0].rstrip(" ").upper() in _WINDOWS_DEVICES:
        return None
    return _capped(cleaned)


def _capped(name: str) -> str:
    if len(name) <= FILENAME_MAX:
        return name
    stem, dot, ext = name.rpartition(".")
    if dot and stem and 0 < len(ext) <= 16:
        return stem[: FILENAME_MAX - len(ext) - 1] + "." + ext
    return name[:FILENAME_MAX]


def _source_uri(uri: object) -> str | None:
    """What is recorded of an upstream URI: scheme, host and path only (no user, query or fragment).

    ``data:`` URIs are never recorded (they are the bytes themselves), nor are
    URIs over 2048 characters.
    """
    if not isinstance(uri, str) or not uri or len(uri) > SOURCE_URI_MAX:
        return None
    try:
        parts = urlsplit(uri.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme == "data":
        return None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port is not None else host
    kept = urlunsplit((scheme, netloc, parts.path, "", ""))
    kept = "".join(ch for ch in kept if unicodedata.category(ch) not in _UNSAFE_CATEGORIES)
    return kept or None


# -- storing --------------------------------------------------------------------------------------------------------


def idempotency_key(tool_call_id: str, content_index: int | str) -> str:
    """The key that makes a retried part replay: derived from (tool_call_id, content_index) only.

    An inline part's ``content_index`` is ``inline.<number>`` (its place among the result's inline parts).
    """
    digest = hashlib.sha256(b"refvault.materialize\x00" + tool_call_id.encode("ascii")).hexdigest()[:40]
    return f"materialize:{digest}:{content_index}"


async def _store(
    vault: Vault,
    scope: Scope,
    part: _Part,
    *,
    provenance: str,
    tool_call_id: str,
    run_id: str | None,
    disclosure: Disclosure,
    created_at: datetime,
    already: int,
) -> Descriptor:
    source_version: dict[str, Any] = {"provenance": provenance, **_where(part), **part.facts.as_json()}
    if part.source_uri is not None:
        source_version["source_uri"] = part.source_uri
    write = asyncio.to_thread(
        vault.put,
        scope,
        part.data,
        media_type=part.facts.stored,
        disclosure=disclosure,
        tool_call_id=tool_call_id,
        run_id=run_id,
        source_version=source_version,
        completeness={"status": "complete", "omissions": []},
        filename=part.filename,
        idempotency_key=idempotency_key(tool_call_id, part.slot),
        created_at=created_at,
    )
    try:
        return await _uninterrupted(write)
    except IdempotencyConflict as exc:
        raise MaterializationError(
            f"{_stored_label(part)} differs from what this tool_call_id stored before ({exc}); "
            "materialise each tool call under its own tool_call_id; do not re-issue the tool call",
            content_index=part.index if part.index >= 0 else None,
        ) from exc
    except Exception as exc:
        raise MaterializationError(
            f"storing {_stored_label(part)} failed ({type(exc).__name__}: {exc}); {already} earlier part(s) "
            "were stored and a retry with the same tool_call_id reuses them; do not re-issue the tool call",
            content_index=part.index if part.index >= 0 else None,
        ) from exc


def _stored_label(part: _Part) -> str:
    return f"content part {part.index}" if part.inline is None else part.label


def _where(part: _Part) -> dict[str, Any]:
    """Where a part was in its result (recorded in ``source_version`` and in the link's ``_meta``)."""
    if part.inline is None:
        return {"content_index": part.index, "content_type": part.kind}
    where: dict[str, Any] = {"content_index": part.index} if part.index >= 0 else {}
    return {
        **where,
        "content_type": "inline",
        "found_in": part.inline.found_in,
        "encoding": part.inline.encoding,
        "inline_index": part.inline.number,
    }


# -- projection -----------------------------------------------------------------------------------------------------


def _project(
    wire: Mapping[str, Any], parts: Sequence[_Part], stored: Mapping[int | str, Descriptor], limits: Limits
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
            projected[key] = _too_deep_note() if _too_deep(value) else _bounded(scrub(value), limits.structured_content)
        else:
            projected[scrub(key)] = scrub(value)
    return projected


def _link(block: Mapping[str, Any], part: _Part, descriptor: Descriptor, scrub: Scrubber) -> dict[str, Any]:
    artifact_id = descriptor.artifact_id
    meta: dict[str, Any] = {
        "sha256": descriptor.content_hash.removeprefix("sha256:"),
        **_where(part),
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
