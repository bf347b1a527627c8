"""The values a kernel hands out: :class:`Handle` (travels through tools as JSON), :class:`Resolved` (what a
handle resolves to, with whether it is stale) and :class:`ResetReport`.

A handle is a claim, not a capability: it names a snapshot, and the kernel that made it checks every field
against what it recorded and against the binding stored (under the manifest MAC) with the artifact before it
resolves anything (:mod:`refvault.kernel.kernel`). Editing a handle's dict can only make it fail.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from refvault.errors import InvalidArgument
from refvault.ids import is_artifact_id
from refvault.kernel.codecs import KINDS, MEDIA_TYPES, Kind

__all__ = ["HANDLE_TYPE", "Handle", "ResetReport", "Resolved", "check_name", "is_kernel_id"]

HANDLE_TYPE = "refvault.kernel.snapshot"
"""The ``type`` of a handle's dict: how a tool tells a snapshot handle from other JSON."""
_KERNEL_ID = re.compile(r"krn_[a-z2-7]{26}")
_NAME = re.compile(r"[\x20-\x7e]{1,128}")
_FIELDS = ("type", "name", "artifact_id", "generation", "kernel_id", "persist", "media_type", "kind")


def is_kernel_id(value: object) -> bool:
    """True for a well-formed kernel id: ``krn_`` and 26 characters a-z, 2-7 (128 random bits)."""
    return isinstance(value, str) and _KERNEL_ID.fullmatch(value) is not None


def check_name(name: object) -> str:
    """A snapshot name: 1-128 printable ASCII characters (it is never repeated in an error message)."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise InvalidArgument("a snapshot name is 1-128 printable ASCII characters, e.g. 'df_clean'")
    return name


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclass(frozen=True, slots=True)
class Handle:
    """A reference to one frozen snapshot of one kernel, bound to the generation it was taken in.

    ``name`` is the caller's; ``artifact_id`` the snapshot's artifact; ``generation`` the kernel's generation
    when it was taken (1 for a new kernel, one more after each ``reset``); ``kernel_id`` the kernel that
    made it; ``persist`` whether it survives a reset; ``media_type`` and ``kind`` how it is stored
    (:mod:`refvault.kernel.codecs`). Every field is checked on construction (:class:`InvalidArgument`,
    the value not repeated). :meth:`to_dict` / :meth:`to_json` and back round-trip exactly.
    """

    name: str
    artifact_id: str
    generation: int
    kernel_id: str
    persist: bool
    media_type: str
    kind: Kind

    def __post_init__(self) -> None:
        check_name(self.name)
        if not is_artifact_id(self.artifact_id):
            raise InvalidArgument("a handle's artifact_id must be an artifact id (art_ and 26 characters a-z, 2-7)")
        if not _count(self.generation):
            raise InvalidArgument("a handle's generation must be a positive integer")
        if not is_kernel_id(self.kernel_id):
            raise InvalidArgument("a handle's kernel_id must be a kernel id (krn_ and 26 characters a-z, 2-7)")
        if not isinstance(self.persist, bool):
            raise InvalidArgument("a handle's persist must be true or false")
        if self.kind not in KINDS or MEDIA_TYPES[self.kind] != self.media_type:
            raise InvalidArgument(f"a handle's kind is one of {', '.join(KINDS)}, with its own media type")

    def to_dict(self) -> dict[str, Any]:
        """The handle as a plain JSON object (with ``"type": "refvault.kernel.snapshot"``)."""
        return {
            "type": HANDLE_TYPE,
            "name": self.name,
            "artifact_id": self.artifact_id,
            "generation": self.generation,
            "kernel_id": self.kernel_id,
            "persist": self.persist,
            "media_type": self.media_type,
            "kind": self.kind,
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as compact JSON text."""
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: object) -> Handle:
        """The handle a :meth:`to_dict` made; anything else (a missing or extra key, a wrong type) is
        :class:`InvalidArgument`. Parsing is not resolving: the kernel still checks it against its records."""
        if not isinstance(data, Mapping) or set(data) != set(_FIELDS) or data.get("type") != HANDLE_TYPE:
            raise InvalidArgument(
                f"not a kernel snapshot handle: expected an object with exactly the keys {', '.join(_FIELDS)} "
                f"and type {HANDLE_TYPE!r}"
            )
        return cls(
            name=data["name"],
            artifact_id=data["artifact_id"],
            generation=data["generation"],
            kernel_id=data["kernel_id"],
            persist=data["persist"],
            media_type=data["media_type"],
            kind=data["kind"],
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> Handle:
        """The handle :meth:`to_json` wrote (see :meth:`from_dict`)."""
        try:
            data = json.loads(text)
        except (TypeError, ValueError):
            raise InvalidArgument("not a kernel snapshot handle: the text is not JSON") from None
        return cls.from_dict(data)


@dataclass(frozen=True, slots=True)
class Resolved:
    """What :meth:`Kernel.resolve <refvault.kernel.Kernel.resolve>` returns: the snapshot's value and whether
    it is stale.

    ``state`` is ``"current"`` (taken in the kernel's current generation) or ``"durable"`` (taken with
    ``persist=True`` in an older generation: the kernel was reset since, and this is the value as it was
    then, not anything live). ``stale`` is True exactly for ``"durable"``; ``durable`` says whether the
    snapshot survives resets (its handle's ``persist``). ``value`` is a fresh object decoded from the
    verified stored bytes on every resolve: changing it changes no snapshot. The ``repr`` leads with the
    state, and :meth:`info` (for tools) carries ``stale`` and ``durable``.
    """

    state: Literal["current", "durable"]
    handle: Handle
    current_generation: int
    content_hash: str
    value: Any = field(repr=False, compare=False)

    @property
    def stale(self) -> bool:
        """True when the snapshot is from an older generation (a durable snapshot resolved after a reset)."""
        return self.state != "current"

    @property
    def durable(self) -> bool:
        """True when the snapshot was taken with ``persist=True`` (it survives resets)."""
        return self.handle.persist

    def info(self) -> dict[str, Any]:
        """Everything but the value, as plain JSON: ``stale``, ``durable``, the generations, the artifact."""
        return {
            "state": self.state,
            "stale": self.stale,
            "durable": self.durable,
            "generation": self.handle.generation,
            "current_generation": self.current_generation,
            "artifact_id": self.handle.artifact_id,
            "content_hash": self.content_hash,
            "kind": self.handle.kind,
        }

    def __repr__(self) -> str:
        label = "STALE (durable snapshot of an older generation)" if self.stale else "current"
        return (
            f"Resolved({label}: {self.handle.kind} {self.handle.artifact_id}, generation "
            f"{self.handle.generation} of {self.current_generation})"
        )


@dataclass(frozen=True, slots=True)
class ResetReport:
    """What :meth:`Kernel.reset <refvault.kernel.Kernel.reset>` did: the new ``generation``, the transient
    snapshots it ``deleted`` and those it ``kept`` because a hold is on them (their handles are stale all the
    same)."""

    generation: int
    deleted: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
