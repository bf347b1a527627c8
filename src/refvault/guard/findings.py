"""What the guard reports: :class:`Finding`, the :data:`EVENT` it logs, the :data:`Policy` names and
the :func:`marker` a redacted span becomes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = ["EVENT", "Finding", "Policy", "marker"]

Policy = Literal["raise", "redact"]
EVENT: Final = "llm.context_leak"


def marker(artifact_id: str) -> str:
    """What a redacted span becomes."""
    return f"[refvault:{artifact_id}]"


@dataclass(frozen=True, slots=True)
class Finding:
    """Protected content (or an oversized payload) at one site of a request. Never holds the content.

    ``artifact_id`` is None for the size arm; ``matched`` is the bytes matched (content arm: an upper
    bound of the verbatim span, at least ``min_match``), the bytes of the artifact its pieces sent
    in this run would add up to (piece arm: at least ``piece_limit``) or the payload's size (size arm).
    """

    site: str
    artifact_id: str | None
    matched: int
    arm: Literal["content", "pieces", "size"]

    def to_dict(self) -> dict[str, Any]:
        return {"site": self.site, "artifact_id": self.artifact_id, "matched": self.matched, "arm": self.arm}
