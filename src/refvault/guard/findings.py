"""What the guard reports: :class:`Finding`, the :data:`EVENT` it logs, the :data:`Policy` names and
the :func:`marker` a redacted span becomes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = ["EVENT", "Finding", "Policy", "event_line", "marker"]

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
    ``rule_id`` names the tenant's disclosure-policy rule that denies the artifact to the request's
    recipient, when one does (:mod:`refvault.policy`).
    """

    site: str
    artifact_id: str | None
    matched: int
    arm: Literal["content", "pieces", "size"]
    rule_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        found = {"site": self.site, "artifact_id": self.artifact_id, "matched": self.matched, "arm": self.arm}
        if self.rule_id is not None:
            found["rule_id"] = self.rule_id
        return found


_SHOWN_ARTIFACTS = 5
_SHOWN_SITES = 3


def event_line(findings: Sequence[Finding], policy: Policy) -> str:
    """The one human line the guard logs (at WARNING, with :data:`EVENT` and the findings as fields).

    It names artifact ids, sites and sizes only, never content: ``refvault guard: request blocked as
    intended: it carried protected artifact art_... (messages[3].content); nothing was sent``.
    """
    by_artifact: dict[str, list[str]] = {}
    rules: dict[str, str] = {}
    extra: list[str] = []
    for f in findings:
        if f.artifact_id is None:
            extra.append(f"a {f.matched:,}-byte payload over the guard's size limit ({f.site})")
        else:
            by_artifact.setdefault(f.artifact_id, []).append(f.site)
            if f.rule_id is not None:
                rules[f.artifact_id] = f.rule_id
    parts = []
    for artifact_id, sites in list(by_artifact.items())[:_SHOWN_ARTIFACTS]:
        shown = ", ".join(sites[:_SHOWN_SITES]) + (
            f", +{len(sites) - _SHOWN_SITES} more" if len(sites) > _SHOWN_SITES else ""
        )
        rule = f", denied to this recipient by policy rule {rules[artifact_id]}" if artifact_id in rules else ""
        parts.append(f"{artifact_id} ({shown}{rule})")
    if len(by_artifact) > _SHOWN_ARTIFACTS:
        parts.append(f"+{len(by_artifact) - _SHOWN_ARTIFACTS} more artifacts")
    what = "; ".join(
        ([f"protected artifact{'s' if len(by_artifact) > 1 else ''} " + ", ".join(parts)] if parts else []) + extra
    )
    if policy == "redact":
        return f"refvault guard: request redacted as intended: {what} replaced by markers before it was sent"
    return f"refvault guard: request blocked as intended: it carried {what}; nothing was sent"
