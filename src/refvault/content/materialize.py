"""Materialise the binary parts of a tool result: store every one, hand back metadata-only references.

See :mod:`refvault.content` for the invariants this module keeps and where each is tested. The work is
split by stage: :mod:`~refvault.content.preflight` (checks and decoding before the first write),
:mod:`~refvault.content.projection` (the result with links), :mod:`~refvault.content.filenames`,
:mod:`~refvault.content.result_parts` (limits and the part records); this module stores the parts.
"""

from __future__ import annotations

import asyncio
import binascii  # noqa: F401  (tests reach the decoder's binascii through this module)
import copy
import hashlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar, overload

from refvault.content.filenames import safe_filename as safe_filename  # re-exported (tests import it from here)
from refvault.content.preflight import check_call, check_part_count
from refvault.content.preflight import preflight as _preflight
from refvault.content.projection import project as _project
from refvault.content.result_parts import Limits, Part, too_deep, too_deep_note, where_found
from refvault.contract import EmbeddedHandle, LocalVault
from refvault.errors import IdempotencyConflict, InvalidArgument, InvalidResult, MaterializationError
from refvault.model import Descriptor, Disclosure, Scope

__all__ = ["Limits", "materialize"]

T = TypeVar("T")

# -- the entry point ------------------------------------------------------------------------------------------------


@overload
async def materialize(
    vault: EmbeddedHandle,
    scope: Scope,
    result: Mapping[str, Any],
    *,
    provenance: str,
    tool_call_id: str,
    limits: Limits = ...,
    disclosure: Disclosure = ...,
    run_id: str | None = ...,
    labels: Iterable[str] = ...,
) -> dict[str, Any]: ...


@overload
async def materialize(
    vault: EmbeddedHandle,
    scope: Scope,
    result: T,
    *,
    provenance: str,
    tool_call_id: str,
    limits: Limits = ...,
    disclosure: Disclosure = ...,
    run_id: str | None = ...,
    labels: Iterable[str] = ...,
) -> T: ...


async def materialize(
    vault: EmbeddedHandle,
    scope: Scope,
    result: Any,
    *,
    provenance: str,
    tool_call_id: str,
    limits: Limits = Limits(),  # noqa: B008  (frozen, so one shared default is safe)
    disclosure: Disclosure = "sealed",
    run_id: str | None = None,
    labels: Iterable[str] = (),
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
    Every stored part carries ``labels`` (e.g. those a gateway's upstream is configured with).
    """
    if not isinstance(vault, EmbeddedHandle):  # a Vault or an AsyncVault (a Client is not: its writes are remote)
        raise InvalidArgument("vault must be a refvault.Vault or AsyncVault")
    target = vault.embedded_vault()
    check_call(scope, provenance, tool_call_id, run_id, disclosure, limits)
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
            labels=labels,
        )
        if not stored:
            # A retry replays the first part with the moment of its first capture: later parts share it.
            created_at = descriptor.created_at
        stored[part.slot] = descriptor
    await _checkpoint()
    del part
    parts = [replace(each, data=b"") for each in parts]  # the bytes are stored: let them go
    return await asyncio.to_thread(lambda: rebuild(_project(wire, parts, stored, limits)))


def _prepare(result: object, limits: Limits) -> tuple[dict[str, Any], Callable[[dict[str, Any]], Any], list[Part]]:
    wire, rebuild = _wire_form(result)
    check_part_count(wire, limits)
    return wire, rebuild, _preflight(wire, limits)


def _unchanged(wire: dict[str, Any], rebuild: Callable[[dict[str, Any]], Any]) -> Any:
    """A result with no binary part: an equal copy (a too-deep structuredContent becomes an omission note)."""
    copied = {
        key: (too_deep_note() if key == "structuredContent" and too_deep(value) else copy.deepcopy(value))
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


# -- storing --------------------------------------------------------------------------------------------------------


def idempotency_key(tool_call_id: str, content_index: int | str) -> str:
    """The key that makes a retried part replay: derived from (tool_call_id, content_index) only.

    An inline part's ``content_index`` is ``inline.<number>`` (its place among the result's inline parts).
    """
    digest = hashlib.sha256(b"refvault.materialize\x00" + tool_call_id.encode("ascii")).hexdigest()[:40]
    return f"materialize:{digest}:{content_index}"


async def _store(
    vault: LocalVault,
    scope: Scope,
    part: Part,
    *,
    provenance: str,
    tool_call_id: str,
    run_id: str | None,
    disclosure: Disclosure,
    created_at: datetime,
    already: int,
    labels: Iterable[str] = (),
) -> Descriptor:
    source_version: dict[str, Any] = {"provenance": provenance, **where_found(part), **part.facts.as_json()}
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
        labels=labels,
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


def _stored_label(part: Part) -> str:
    return f"content part {part.index}" if part.inline is None else part.label
