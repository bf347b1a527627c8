"""What a run's decisions rested on: evidence records, substitutions, and the replay packet (values only).

A *run* is a scope's session. Each time a decision takes evidence through the gate with a name
(:func:`refvault.evidence.reread` with ``decision=``, or :func:`refvault.evidence.record`), the vault keeps an
:class:`EvidenceRecord` of it; each reacquisition (:func:`refvault.evidence.reacquire`) keeps one more,
``substituted`` (old id → new id, the reasons, the decision time, the budget it charged) or ``refused`` (and
why). The records are metadata only: ids, content hashes, reason codes, times. They are appended, never
changed, and each is also written to the tenant's tamper-evident audit chain in the same transaction.

:class:`ReplayPacket` (``vault.replay_packet(scope, session)``) lists every evidence reference the run's
decisions used, each with its availability *now* as the caller may see it (``available``, ``expired``,
``deleted``, ``revoked``): the same check a read makes, so a replay never bypasses policy.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from refvault.budgets import COUNTED
from refvault.errors import InvalidArgument
from refvault.model import format_time

__all__ = [
    "EVIDENCE_KINDS",
    "EvidenceKind",
    "EvidenceRecord",
    "EvidenceRequest",
    "ReplayEntry",
    "ReplayPacket",
    "Substitution",
]

EvidenceKind = Literal["used", "substituted", "refused"]
EVIDENCE_KINDS: tuple[EvidenceKind, ...] = ("used", "substituted", "refused")
MAX_DECISION = 256  # characters of a decision's name
MAX_EXPLANATION = 1024
MAX_REASONS = 16
MAX_RUN_RECORDS = 10_000  # records one replay packet lists
_CODE = re.compile(r"[a-z][a-z_]{0,39}")
DECISION_PATTERN = r"[^\x00-\x1f\x7f]+"  # a decision's name: no control characters
EXPLANATION_PATTERN = r"[^\x00]*"  # no NUL (no catalog stores it alike)


@dataclass(frozen=True, slots=True)
class EvidenceRequest:
    """What a caller asks the vault to record about one piece of evidence (see :class:`EvidenceRecord`).

    Validated on construction (:class:`~refvault.errors.InvalidArgument`): ``decision`` is 1-256 characters
    without control characters, ``decided_at`` an aware datetime, ``reasons`` at most 16 lower-case codes,
    ``explanation`` at most 1024 characters without NUL, ``charged`` non-negative integers by counted budget
    dimension (:data:`refvault.budgets.COUNTED`). The vault, not the caller, supplies
    the content hash (only of an artifact the caller may read) and the time it was recorded.
    """

    kind: EvidenceKind
    decision: str
    artifact_id: str
    decided_at: datetime
    satisfied: bool
    reasons: tuple[str, ...] = ()
    replaces: str | None = None
    explanation: str = ""
    charged: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in EVIDENCE_KINDS:
            raise InvalidArgument(f"kind must be one of {', '.join(EVIDENCE_KINDS)}")
        if (
            not isinstance(self.decision, str)
            or len(self.decision) > MAX_DECISION
            or not re.fullmatch(DECISION_PATTERN, self.decision)
        ):
            raise InvalidArgument(f"decision must name the decision in 1-{MAX_DECISION} characters (no control ones)")
        if not isinstance(self.decided_at, datetime) or self.decided_at.tzinfo is None:
            raise InvalidArgument("decided_at must be a timezone-aware datetime (the decision time)")
        try:
            object.__setattr__(self, "decided_at", self.decided_at.astimezone(UTC))
        except OverflowError:
            raise InvalidArgument("decided_at is out of range in UTC") from None
        if not isinstance(self.satisfied, bool):
            raise InvalidArgument("satisfied must be a bool")
        reasons = tuple(self.reasons) if isinstance(self.reasons, tuple | list) else None
        if (
            reasons is None
            or len(reasons) > MAX_REASONS
            or not all(isinstance(code, str) and _CODE.fullmatch(code) for code in reasons)
        ):
            raise InvalidArgument(f"reasons must be at most {MAX_REASONS} reason codes (refvault.evidence.REASONS)")
        object.__setattr__(self, "reasons", reasons)
        if (
            not isinstance(self.explanation, str)
            or len(self.explanation) > MAX_EXPLANATION
            or not re.fullmatch(EXPLANATION_PATTERN, self.explanation)
        ):
            raise InvalidArgument(f"explanation must be text of at most {MAX_EXPLANATION} characters (no NUL)")
        if not isinstance(self.charged, Mapping) or not all(
            k in COUNTED and type(v) is int and v >= 0 for k, v in self.charged.items()
        ):
            raise InvalidArgument(f"charged must map budget dimensions ({', '.join(COUNTED)}) to non-negative integers")
        object.__setattr__(self, "charged", dict(self.charged))
        if (self.kind == "substituted") != (self.replaces is not None):
            raise InvalidArgument("a substitution names the evidence it replaces (and only a substitution does)")


@dataclass(frozen=True, slots=True)
class EvidenceRecord:
    """One evidence reference a run's decision used (``used``), one reacquisition (``substituted``: ``artifact_id``
    is the new reference, ``replaces`` the old), or one refused reacquisition (``refused``: ``artifact_id`` is the
    evidence that could not be replaced, ``explanation`` says why).

    ``decided_at`` is the decision time the caller judged at (the gate reads no clock); ``recorded_at`` is when
    the vault stored the record. ``reasons`` are gate reason codes (:data:`refvault.evidence.REASONS`): why the
    evidence failed (for a substitution or refusal: the old evidence's), empty when it was satisfied.
    ``charged`` is what the reacquisition cost the run's budget, per dimension. ``seq`` orders a tenant's records.
    """

    seq: int
    tenant: str
    user: str
    session: str
    kind: EvidenceKind
    decision: str
    artifact_id: str
    content_hash: str | None
    decided_at: datetime
    recorded_at: datetime
    satisfied: bool
    reasons: tuple[str, ...] = ()
    replaces: str | None = None
    explanation: str = ""
    charged: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "kind": self.kind,
            "decision": self.decision,
            "artifact_id": self.artifact_id,
            "content_hash": self.content_hash,
            "decided_at": format_time(self.decided_at),
            "recorded_at": format_time(self.recorded_at),
            "satisfied": self.satisfied,
            "reasons": list(self.reasons),
            "replaces": self.replaces,
            "explanation": self.explanation,
            "charged": dict(self.charged),
            "session": self.session,
        }


@dataclass(frozen=True, slots=True)
class Substitution:
    """The outcome of :func:`refvault.evidence.reacquire`: ``status`` is ``substituted`` (a new reference was
    acquired; ``new_id`` names it and ``verdict`` is the gate's judgement of it, which may still fail) or
    ``refused`` (nothing was acquired; ``explanation`` says why: the decision needs the historical snapshot, or
    the old evidence failed for a reason a newer observation cannot fix). Either way ``record`` is the stored
    :class:`EvidenceRecord`."""

    status: Literal["substituted", "refused"]
    old_id: str
    new_id: str | None
    reasons: tuple[str, ...]
    explanation: str
    at: datetime
    charged: Mapping[str, int]
    record: EvidenceRecord
    verdict: Any = None  # refvault.evidence.Verdict of the new evidence (None when refused)

    @property
    def substituted(self) -> bool:
        return self.status == "substituted"

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "old_id": self.old_id,
            "new_id": self.new_id,
            "reasons": list(self.reasons),
            "explanation": self.explanation,
            "at": format_time(self.at),
            "charged": dict(self.charged),
            "verdict": None if self.verdict is None else self.verdict.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class ReplayEntry:
    """One evidence reference of a run, with the records that name it and whether a replay could read it now.

    ``availability`` is ``available``, ``expired``, ``deleted`` or ``revoked``; ``now`` carries the details
    (``allowed`` and ``rule_id`` when the policy would refuse the read, ``status`` current/stale/revoked, and
    ``at``/``rule`` for what removed it) exactly as :meth:`refvault.Vault.replay_status` gives them.
    """

    artifact_id: str
    content_hash: str | None
    decisions: tuple[str, ...]
    availability: str
    now: Mapping[str, Any]
    replaced_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "artifact_id": self.artifact_id,
            "content_hash": self.content_hash,
            "decisions": list(self.decisions),
            "availability": self.availability,
            "now": dict(self.now),
            "replaced_by": self.replaced_by,
        }


@dataclass(frozen=True, slots=True)
class ReplayPacket:
    """Everything needed to replay a run's decisions: every evidence reference they used (in first-use
    order, each once) with its availability now, and every record (uses, substitutions, refusals) in order.
    Metadata only; reading any of the references again goes through the ordinary, policy-checked reads."""

    tenant: str
    user: str
    session: str
    at: datetime
    evidence: tuple[ReplayEntry, ...]
    records: tuple[EvidenceRecord, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "at": format_time(self.at),
            "evidence": [entry.to_dict() for entry in self.evidence],
            "records": [record.to_dict() for record in self.records],
        }
