"""What a demo run records: each step's transcript and check, the conclusions the evidence gate judged, the run.

:mod:`refvault.demo.scenario` fills these in; :mod:`refvault.demo.report` prints them (or their ``to_dict``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from refvault.model import Descriptor
from refvault.scripted import Decision, ScriptedRun, Turn

__all__ = ["Check", "Conclusion", "Investigation", "Step"]


@dataclass(slots=True)
class Check:
    """A step's explicit check: whether it holds, a sentence saying what was checked, and the facts."""

    ok: bool
    detail: str
    facts: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "detail": self.detail, "facts": self.facts}


@dataclass(slots=True)
class Step:
    """One step, in order: what the harness did, what the user asked, the model's turns; then the check."""

    number: int
    name: str
    title: str
    entries: list[tuple[str, Any]] = field(default_factory=list)  # ("harness"|"user", text) or ("turn", Turn)
    check: Check = field(default_factory=lambda: Check(False, "the step did not run"))

    @property
    def turns(self) -> list[Turn]:
        return [entry for kind, entry in self.entries if kind == "turn"]

    def note(self, text: str) -> None:
        """Record something the harness (not the model) did."""
        self.entries.append(("harness", text))

    async def converse(self, run: ScriptedRun, text: str | None, decisions: Sequence[Decision]) -> list[Turn]:
        """:meth:`ScriptedRun.converse`, recorded in this step."""
        if text is not None:
            self.entries.append(("user", text))
        turns = await run.converse(text, decisions)
        self.entries.extend(("turn", turn) for turn in turns)
        return turns

    def to_dict(self) -> dict[str, Any]:
        transcript = [
            {"kind": "turn", **entry.to_dict()} if kind == "turn" else {"kind": kind, "text": entry}
            for kind, entry in self.entries
        ]
        return {
            "number": self.number,
            "name": self.name,
            "title": self.title,
            "ok": self.check.ok,
            "transcript": transcript,
            "check": self.check.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class Conclusion:
    """A claim, whether the evidence gate allows it, and the gate's verdict (reasons when refused)."""

    claim: str
    step: int
    verdict: dict[str, Any]

    @property
    def allowed(self) -> bool:
        return bool(self.verdict["satisfied"])

    def to_dict(self) -> dict[str, Any]:
        return {"claim": self.claim, "step": self.step, "allowed": self.allowed, "verdict": self.verdict}


@dataclass(slots=True)
class Investigation:
    """Everything the demo did and found."""

    steps: list[Step] = field(default_factory=list)
    artifacts: list[Descriptor] = field(default_factory=list)
    conclusions: list[Conclusion] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    guard: dict[str, int] = field(default_factory=dict)
    guard_events: list[dict[str, Any]] = field(default_factory=list)  # the guard's llm.context_leak log records

    @property
    def ok(self) -> bool:
        return len(self.steps) == 6 and all(step.check.ok for step in self.steps)
