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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from refvault.limits import DEFAULT_CAPS, ModelCaps
from refvault.model import Descriptor, Scope, pick

if TYPE_CHECKING:
    from refvault.contract import VaultContract

__all__ = [
    "DATA_ONLY",
    "DEFAULT",
    "Artifact",
    "Observation",
    "ToolContext",
    "ToolEvent",
    "artifact_summary",
    "joined_text",
]


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
    purpose: str = "default"  # the Toolbox's purpose: pass it to the reads the tool makes
    recipient: str = "user"  # who the tool's reads disclose to: model:<name> (read tools) or tool:<name>
    caps: ModelCaps = DEFAULT_CAPS  # what one result may hold for the model served (refvault.limits.caps_for_model)


@dataclass(frozen=True, slots=True)
class Artifact:
    """Return this (or plain ``bytes``) from a tool to capture output instead of sending it to the model.

    ``media_type=None`` (the default, and what plain ``bytes`` get) means "detect":
    :meth:`stored_media_type` names the bytes with
    :func:`refvault.content.text_kind.detect_media_type` (JSON Lines, JSON,
    CSV, text, a binary signature such as PNG, else ``application/octet-stream``;
    never an active type such as HTML or SVG). An explicit ``media_type`` is
    stored as given, never sniffed over. Either way the stored bytes are exactly
    ``data``; ``filename`` never chooses the type.
    """

    data: bytes
    media_type: str | None = None  # None: detected from the bytes (see stored_media_type)
    filename: str | None = None
    disclosure: Literal["model", "sealed"] | None = None  # None: sealed if any Ref input was sealed
    labels: Iterable[str] = ()  # added to the inputs' labels (a tool can add labels, never remove one)

    def stored_media_type(self) -> str:
        """The media type the artifact is stored under: the explicit one, else the one its bytes show."""
        if self.media_type is not None:
            return self.media_type
        from refvault.content.text_kind import detect_media_type  # lazily: only a capture needs the sniffers

        return detect_media_type(self.data, complete=True)

    def __repr__(self) -> str:
        return f"Artifact(<{len(self.data)} bytes>, media_type={self.media_type!r})"


DATA_ONLY = "data_only"
"""The marker on recovered content: every content block and read answer refvault's read tools hand a model
(``read_artifact``, ``query_artifact``, ``load_artifacts``) carries ``"data_only": true``, and their
:class:`Observation` has ``data_only=True``, which each framework adapter carries onto its own objects
where the framework has a field for it (MCP ``_meta``, LangChain ``extras``, Pydantic AI ``metadata``).
Retrieved material is data, never instructions."""


@dataclass(frozen=True, slots=True)
class Observation:
    """What goes back to the model for one tool call."""

    tool_call_id: str | None
    content: str
    is_error: bool = False
    artifacts: tuple[Mapping[str, Any], ...] = ()
    parts: tuple[Mapping[str, Any], ...] = ()  # model content beyond text (load_artifacts: text and image parts)
    data_only: bool = False  # recovered content (refvault's read tools): data for the model, never instructions

    def joined_text(self) -> str:
        """The content and every text part as one string, for a framework that takes one text per tool result.

        The Toolbox tells its guard this text is disclosed on purpose too (as it does the content and parts).
        """
        return joined_text(self.content, self.parts)


def joined_text(content: str, parts: Sequence[Mapping[str, Any]]) -> str:
    """``content`` and the text of every text part, separated by blank lines (:meth:`Observation.joined_text`)."""
    return "\n\n".join([content, *(str(p["text"]) for p in parts if p.get("type") == "text")])


@dataclass(frozen=True, slots=True)
class ToolEvent:
    """One step of a run, by id only: a tool started, finished or failed; or the model kept bringing back an
    artifact the context working set cleared (``context_thrash``, :class:`refvault.context.WorkingSet`)."""

    kind: Literal["tool_started", "tool_finished", "tool_failed", "context_thrash"]
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
    """What an observation says of an artifact a tool call captured (its labels too, when it carries any)."""
    summary = pick(descriptor, ("artifact_id", "media_type", "size", "content_hash", "disclosure"))
    if descriptor.labels:
        summary["labels"] = sorted(descriptor.labels)
    return summary
