"""The values a tool call passes around: what a tool sees, returns, and what the model and the sinks get.

:class:`ToolContext` (a tool may declare it), :class:`Artifact` (a tool may
return it), :class:`Observation` (what goes back to the model),
:class:`ToolEvent` (one step of a run, by id only), :data:`DEFAULT` (an
argument left at the Toolbox's default) and :func:`artifact_summary` (what an
observation says of a captured artifact). All are importable from
:mod:`refvault.toolbox.toolbox` as before.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from refvault.model import Descriptor, Scope, pick

if TYPE_CHECKING:
    from refvault.contract import VaultContract

__all__ = ["DEFAULT", "Artifact", "Observation", "ToolContext", "ToolEvent", "artifact_summary"]


class _Default:
    """Marks an argument left at the Toolbox's default."""

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Any = _Default()


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may know about its call (declare a parameter of this type; it is not in the schema)."""

    scope: Scope
    run_id: str | None
    tool_call_id: str | None
    vault: VaultContract


@dataclass(frozen=True, slots=True)
class Artifact:
    """Return this (or plain ``bytes``) from a tool to capture output instead of sending it to the model."""

    data: bytes
    media_type: str = "application/octet-stream"
    filename: str | None = None
    disclosure: Literal["model", "sealed"] | None = None  # None: sealed if any Ref input was sealed

    def __repr__(self) -> str:
        return f"Artifact(<{len(self.data)} bytes>, media_type={self.media_type!r})"


@dataclass(frozen=True, slots=True)
class Observation:
    """What goes back to the model for one tool call."""

    tool_call_id: str | None
    content: str
    is_error: bool = False
    artifacts: tuple[Mapping[str, Any], ...] = ()
    parts: tuple[Mapping[str, Any], ...] = ()  # model content beyond text (load_artifacts: text and image parts)


@dataclass(frozen=True, slots=True)
class ToolEvent:
    """One step of a run, by id only: a tool started, finished or failed."""

    kind: Literal["tool_started", "tool_finished", "tool_failed"]
    tool: str
    run_id: str | None
    tool_call_id: str | None
    refs: tuple[str, ...] = ()
    artifacts: tuple[str, ...] = ()
    error_type: str | None = None
    at: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "tool": self.tool,
            "run_id": self.run_id,
            "tool_call_id": self.tool_call_id,
            "refs": list(self.refs),
            "artifacts": list(self.artifacts),
            "error_type": self.error_type,
            "at": self.at,
        }


def artifact_summary(descriptor: Descriptor) -> dict[str, Any]:
    """What an observation says of an artifact a tool call captured."""
    return pick(descriptor, ("artifact_id", "media_type", "size", "content_hash", "disclosure"))
