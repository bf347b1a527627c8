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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar, overload
from urllib.parse import unquote, urlsplit

from refvault.content.sniff import MediaTypeFacts, classify, extension_for
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
SOURCE_URI_MAX = 2048  # longer upstream URIs are not recorded (they are often data: URLs)
PROVENANCE_MAX = 1024
MIN_SCRUBBED = 16  # base64 shorter than this is replaced only where a whole string equals it
WINDOW = 32  # runs sharing any 63-character span with a stored part's base64 are replaced
BINARY_KINDS = ("image", "audio")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on one tool result. Anything over is refused with :class:`TooLarge`, never truncated.

    ``per_part`` and ``per_result`` count decoded bytes; ``structured_content``
    bounds ``structuredContent`` after projection, in JSON characters (over it,
    the value is replaced by a ``refvault_omitted`` note rather than refused:
    the binary parts themselves were stored).
    """

    per_part: int = 64 * MiB
    per_result: int = 128 * MiB
    structured_content: int = 64 * KiB

    def __post_init__(self) -> None:
        for name in ("per_part", "per_result", "structured_content"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgument(f"Limits.{name} must be a positive integer")


@dataclass(frozen=True, slots=True)
class _Part:
    """One binary part, checked and decoded, ready to store."""

    index: int
    kind: str  # "image" | "audio" | "resource"
    encoded: str
    data: bytes
    facts: MediaTypeFacts
    filename: str
    source_uri: str | None


@dataclass(frozen=True, slots=True)
class _Located:
    """A binary part found in the result, before its bytes are decoded."""

    index: int
    kind: str
    encoded: str
    declared: str | None
    uri: object


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
    wire, rebuild = _wire_form(result)
    _check_call(target, scope, provenance, tool_call_id, run_id, disclosure, limits)
    parts = _preflight(wire, limits)
    if not parts:
        return rebuild(copy.deepcopy(wire))
    created_at = target.clock()
    stored: dict[int, Descriptor] = {}
    for part in parts:
        await _checkpoint()
        stored[part.index] = await _store(
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
    await _checkpoint()
    return rebuild(_project(wire, parts, stored, limits))


async def _checkpoint() -> None:
    """Let a pending cancellation land here, between writes, rather than mid-projection."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
    await asyncio.sleep(0)


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
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise InvalidResult(f"the projected result is not a valid {kind.__name__}: {type(exc).__name__}") from None

    return result.model_dump(by_alias=True, exclude_none=True, mode="json"), rebuild


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


def _preflight(wire: Mapping[str, Any], limits: Limits) -> list[_Part]:
    """Check every binary part (cheap checks for all, then decoding for all); return them decoded, in order."""
    content = wire.get("content")
    if not isinstance(content, list | tuple):
        raise InvalidResult("not a tool result: 'content' must be a list of content blocks")
    located = [found for index, block in enumerate(content) if (found := _locate(index, block)) is not None]
    total = 0
    for found in located:
        size = _decoded_size(found, limits)
        total += size
        if total > limits.per_result:
            raise TooLarge(
                f"the binary parts of this result exceed the per-result limit of {limits.per_result} bytes "
                f"(at content part {found.index}); refused, not truncated",
                content_index=found.index,
            )
    return [_decoded(found) for found in located]


def _locate(index: int, block: object) -> _Located | None:
    """The binary part a content block carries, or None (text, resource links, unknown kinds pass through)."""
    if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
        raise InvalidResult(
            f"content part {index} is not a content block (an object with a 'type')", content_index=index
        )
    kind = block["type"]
    if kind in BINARY_KINDS:
        data, declared = block.get("data"), block.get("mimeType")
        if not isinstance(declared, str):
            raise InvalidResult(f"content part {index} ({kind}) has no mimeType string", content_index=index)
        return _Located(index, kind, _base64_field(index, data), _declared(index, declared), None)
    if kind != "resource":
        return None
    resource = block.get("resource")
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
    encoded, index = found.encoded, found.index
    if not encoded:
        raise EmptyPart(f"content part {index} ({found.kind}) holds no bytes", content_index=index)
    if len(encoded) % 4:
        raise InvalidResult(
            f"content part {index} is not valid base64 (length not a multiple of 4)", content_index=index
        )
    padding = 2 if encoded.endswith("==") else 1 if encoded.endswith("=") else 0
    size = len(encoded) // 4 * 3 - padding
    if size > limits.per_part:
        raise TooLarge(
            f"content part {index} ({found.kind}) is {size} bytes, over the per-part limit of {limits.per_part} "
            "bytes; refused, not truncated",
            content_index=index,
        )
    return size


def _decoded(found: _Located) -> _Part:
    index = found.index
    data = _strict_b64decode(found.encoded, index)
    if not data:
        raise EmptyPart(f"content part {index} ({found.kind}) holds no bytes", content_index=index)
    facts = classify(found.declared, data)
    source_uri = found.uri if isinstance(found.uri, str) and len(found.uri) <= SOURCE_URI_MAX else None
    name = safe_filename(found.uri) or f"content-{index:03d}.{extension_for(facts.stored)}"
    return _Part(index, found.kind, found.encoded, data, facts, name, source_uri)


def _strict_b64decode(encoded: str, index: int) -> bytes:
    """Standard-alphabet, padded, canonical base64 only: no whitespace, no URL-safe characters, no stray bits."""
    try:
        data = binascii.a2b_base64(encoded, strict_mode=True)
    except (binascii.Error, ValueError):
        raise InvalidResult(f"content part {index} is not valid base64", content_index=index) from None
    tail = len(data) % 3 or 3
    if binascii.b2a_base64(data[-tail:], newline=False).decode("ascii") != encoded[-4:]:
        raise InvalidResult(
            f"content part {index} is not canonical base64 (non-zero padding bits)", content_index=index
        )
    return data


# -- filenames ------------------------------------------------------------------------------------------------------

_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


def safe_filename(uri: object) -> str | None:
    """A display filename from an upstream URI: the basename only, cleaned and capped; None if there is none.

    Query and fragment are dropped; percent-escapes are decoded before cleaning;
    control, format and private-use characters are removed; ``.`` and ``..``
    are refused; at most 128 characters are kept, with the extension. Opaque
    URIs (``urn:``, ``data:``, ``mailto:``) name no file.
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
    cleaned = "".join(ch for ch in base if unicodedata.category(ch) not in _UNSAFE_CATEGORIES).strip()
    if cleaned in {"", ".", ".."} or set(cleaned) == {"."}:
        return None
    return _capped(unicodedata.normalize("NFC", cleaned))


def _capped(name: str) -> str:
    if len(name) <= FILENAME_MAX:
        return name
    stem, dot, ext = name.rpartition(".")
    if dot and stem and 0 < len(ext) <= 16:
        return stem[: FILENAME_MAX - len(ext) - 1] + "." + ext
    return name[:FILENAME_MAX]


# -- storing --------------------------------------------------------------------------------------------------------


def idempotency_key(tool_call_id: str, content_index: int) -> str:
    """The key that makes a retried part replay: derived from (tool_call_id, content_index) only."""
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
    source_version: dict[str, Any] = {
        "provenance": provenance,
        "content_index": part.index,
        "content_type": part.kind,
        **part.facts.as_json(),
    }
    if part.source_uri is not None:
        source_version["source_uri"] = part.source_uri
    try:
        return await asyncio.to_thread(
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
            idempotency_key=idempotency_key(tool_call_id, part.index),
            created_at=created_at,
        )
    except IdempotencyConflict as exc:
        raise MaterializationError(
            f"content part {part.index} differs from what this tool_call_id stored before ({exc}); "
            "materialise each tool call under its own tool_call_id; do not re-issue the tool call",
            content_index=part.index,
        ) from exc
    except Exception as exc:
        raise MaterializationError(
            f"storing content part {part.index} failed ({type(exc).__name__}: {exc}); {already} earlier part(s) "
            "were stored and a retry with the same tool_call_id reuses them; do not re-issue the tool call",
            content_index=part.index,
        ) from exc


# -- projection -----------------------------------------------------------------------------------------------------


def _project(
    wire: Mapping[str, Any], parts: Sequence[_Part], stored: Mapping[int, Descriptor], limits: Limits
) -> dict[str, Any]:
    scrub = _Scrubber([(part.encoded, URI_SCHEME + stored[part.index].artifact_id) for part in parts])
    by_index = {part.index: part for part in parts}
    projected: dict[str, Any] = {}
    for key, value in wire.items():
        if key == "content":
            projected[key] = [
                _link(block, by_index[i], stored[i], scrub) if i in by_index else scrub(block)
                for i, block in enumerate(value)
            ]
        elif key == "structuredContent":
            projected[key] = _bounded(scrub(value), limits.structured_content)
        else:
            projected[scrub(key)] = scrub(value)
    return projected


def _link(block: Mapping[str, Any], part: _Part, descriptor: Descriptor, scrub: _Scrubber) -> dict[str, Any]:
    artifact_id = descriptor.artifact_id
    meta: dict[str, Any] = {
        "sha256": descriptor.content_hash.removeprefix("sha256:"),
        "content_index": part.index,
        "artifact_id": artifact_id,
        "content_type": part.kind,
        "disclosure": descriptor.disclosure,
        **part.facts.as_json(),
    }
    if part.source_uri is not None:
        meta["source_uri"] = scrub(part.source_uri)
    if isinstance(block.get("_meta"), Mapping):
        meta["upstream_meta"] = scrub(block["_meta"])
    how = (
        "sealed: usable by reference only (pass the id to a tool that accepts it)"
        if descriptor.disclosure == "sealed"
        else "read or load it by id with the refvault tools if its content is needed"
    )
    link: dict[str, Any] = {
        "type": "resource_link",
        "uri": URI_SCHEME + artifact_id,
        "name": descriptor.filename or part.filename,
        "mimeType": descriptor.media_type,
        "size": descriptor.size,
        "description": (
            f"{part.kind} content stored by refvault as {artifact_id} ({descriptor.media_type}, "
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


_DATA_URL = re.compile(r"data:[^,]{0,256}?;base64,(.*)", re.DOTALL | re.IGNORECASE)
_B64_SPAN = re.compile(rf"[A-Za-z0-9+/_\-]{{{MIN_SCRUBBED - 2},}}")  # a needle may end in "=="
_B64_RUN = re.compile(rf"[A-Za-z0-9+/_\-]{{{2 * WINDOW - 1},}}")


def _spellings(encoded: str) -> list[str]:
    """Other spellings of the same bytes a server might use: URL-safe alphabet, unpadded."""
    urlsafe = encoded.replace("+", "-").replace("/", "_")
    return [encoded, urlsafe, encoded.rstrip("="), urlsafe.rstrip("=")]


class _Scrubber:
    """Replaces every trace of a stored part's base64 in a JSON-like value by the part's ``refvault://`` URI.

    A string that *is* a part's base64, or a ``data:`` URL of it, becomes the
    URI; every occurrence inside a longer string is replaced; and any run of
    base64 characters sharing a span of 63 or more characters with a part's
    base64 (a truncated copy, a line of MIME-wrapped base64) is replaced whole.
    The URL-safe and unpadded spellings count too. Base64 shorter than 16
    characters (parts under 12 bytes) is replaced only where a whole string
    equals it: shorter needles would match ordinary text.

    The indexes of other spellings and of windows are built on first need, so
    a result whose other strings hold no long base64 run pays almost nothing.
    """

    def __init__(self, uris: Sequence[tuple[str, str]]) -> None:
        self.uris = uris  # (standard spelling, URI), first part first
        self._by_length: dict[int, list[tuple[str, str]]] = {}
        for encoded, uri in uris:  # by length, not by hash: hashing megabytes of base64 costs more than storing it
            self._by_length.setdefault(len(encoded), []).append((encoded, uri))
        self._exact: dict[str, str] | None = None
        self._windows: dict[str, str] | None = None

    @property
    def exact(self) -> dict[str, str]:
        """Every spelling of every part's base64 -> its URI."""
        if self._exact is None:
            self._exact = {}
            for encoded, uri in self.uris:
                self._exact.setdefault(encoded, uri)
                if len(encoded) >= MIN_SCRUBBED:
                    for spelling in _spellings(encoded):
                        self._exact.setdefault(spelling, uri)
        return self._exact

    @property
    def windows(self) -> dict[str, str]:
        """Every ``WINDOW``-character window at a multiple of ``WINDOW`` (and the last) of every spelling -> URI.

        A span of ``2 * WINDOW - 1`` characters or more shared with a spelling
        always contains one of these windows whole.
        """
        if self._windows is None:
            self._windows = {}
            for needle, uri in reversed(list(self.exact.items())):  # reversed: the first part wins a shared window
                bare = needle.rstrip("=")  # a run of base64 characters never includes the padding
                if len(bare) < WINDOW:
                    continue
                starts = [*range(0, len(bare) - WINDOW + 1, WINDOW), len(bare) - WINDOW]
                self._windows.update({bare[i : i + WINDOW]: uri for i in starts})
        return self._windows

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(k) if isinstance(k, str) else k: self(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self(v) for v in value)
        return copy.deepcopy(value)

    def text(self, value: str) -> str:
        for encoded, uri in self._by_length.get(len(value), ()):
            if value == encoded:
                return uri
        if len(value) < MIN_SCRUBBED or _B64_SPAN.search(value) is None:
            return value
        exact = self.exact
        whole = exact.get(value)
        if whole is not None:
            return whole
        data_url = _DATA_URL.fullmatch(value)
        if data_url is not None and data_url.group(1) in exact:
            return exact[data_url.group(1)]
        for needle, uri in sorted(exact.items(), key=lambda item: -len(item[0])):
            if len(needle) >= MIN_SCRUBBED and needle in value:
                value = value.replace(needle, uri)
        if len(value) < 2 * WINDOW - 1 or _B64_RUN.search(value) is None:
            return value
        return _B64_RUN.sub(self._run, value)

    def _run(self, match: re.Match[str]) -> str:
        run = match.group(0)
        windows = self.windows
        if not windows:
            return run
        for start in range(len(run) - WINDOW + 1):
            uri = windows.get(run[start : start + WINDOW])
            if uri is not None:
                return uri
        return run
