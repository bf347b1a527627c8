"""The one place where Ref arguments are resolved into a dispatch frame.

:func:`bind_refs` is the single production site of resolved values: it walks
the validated arguments of one tool call, resolves every :class:`Ref` in the
caller's scope, and admits it to that call's frame. ``refvault.devtools.ref_sites``
checks the source tree so that no second call site exists and the function is
never passed around as a value (``python -m refvault.devtools.ref_sites``).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from refvault.errors import BadRef, Expired, InvalidArgument, InvalidId, MisCopiedId, NotFound
from refvault.toolbox.ref import DispatchFrame, Ref

__all__ = ["MAX_DEPTH", "bind_refs"]

MAX_DEPTH = 32


def bind_refs(arguments: BaseModel, frame: DispatchFrame) -> list[str]:
    """Resolve every Ref in ``arguments`` into ``frame``; return their ids in order of first appearance.

    Nested lists, tuples, sets, dicts and models are walked up to
    :data:`MAX_DEPTH` levels; a cycle is refused. An id that is empty,
    malformed, unknown, expired or another scope's raises :class:`BadRef`:
    it names a well-formed id and nothing else, and says in fixed words that
    anything else is not an artifact id (never repeating it); an id that looks
    mis-copied raises :class:`~refvault.errors.MisCopiedId` instead (the id meant,
    when the vault finds exactly one in the caller's scope). Resolving the
    same id twice in one call is a no-op.
    """
    found: list[str] = []
    _walk(arguments, frame, found, depth=0, seen=set(), done=set())
    return found


def _walk(value: Any, frame: DispatchFrame, found: list[str], *, depth: int, seen: set[int], done: set[int]) -> None:
    if isinstance(value, Ref):
        _resolve(value.artifact_id, frame, found)
        return
    if isinstance(value, str | bytes | bytearray | int | float | bool) or value is None:
        return
    if id(value) in done:  # shared substructure: walked once, not once per path to it
        return
    if depth >= MAX_DEPTH:
        raise InvalidArgument(f"arguments are nested deeper than {MAX_DEPTH} levels")
    if id(value) in seen:
        raise InvalidArgument("arguments contain a cycle")
    seen.add(id(value))
    children: Iterable[Any]
    if isinstance(value, BaseModel):
        children = (getattr(value, name) for name in type(value).model_fields)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        children = (getattr(value, f.name) for f in dataclasses.fields(value))
    elif isinstance(value, Mapping):
        children = itertools.chain.from_iterable(value.items())  # keys can be Refs too
    elif isinstance(value, Collection):
        children = value
    else:
        children = ()
    for child in children:
        _walk(child, frame, found, depth=depth + 1, seen=seen, done=done)
    seen.discard(id(value))
    done.add(id(value))


def _resolve(artifact_id: str, frame: DispatchFrame, found: list[str]) -> None:
    if frame.is_resolved(artifact_id):
        return
    try:
        descriptor = frame.vault.describe(frame.scope, artifact_id, purpose=frame.purpose, recipient=frame.recipient)
    except MisCopiedId:
        raise  # says so, with the id meant when exactly one the caller may read is close (never the string given)
    except (InvalidId, NotFound, Expired):
        raise BadRef(artifact_id) from None
    frame.admit(artifact_id, descriptor)
    found.append(artifact_id)
