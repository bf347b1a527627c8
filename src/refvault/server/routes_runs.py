"""A run's evidence over HTTP: recording what a decision used, and the replay packet.

* ``POST /v1/evidence``: :meth:`~refvault.Vault.record_evidence` in the caller's scope (its session is the
  run); the stored record (201).
* ``GET /v1/replay-packet``: :meth:`~refvault.Vault.replay_packet` of the caller's session: every evidence
  reference the run's decisions used, with its availability now.

Invariants: the run is always the caller's own scope (another session's packet needs a key allowed in that
session); a record names an artifact the caller cannot read without anything about it (no content hash),
exactly like an absent one; every answer is ids, hashes, codes and times, never artifact bytes.
"""

# No ``from __future__ import annotations``: FastAPI reads the routes' annotations at runtime.
from typing import Annotated, Literal

from fastapi import APIRouter, Body
from fastapi.responses import JSONResponse
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from refvault.ids import ARTIFACT_ID_PATTERN
from refvault.runs import (
    DECISION_PATTERN,
    EXPLANATION_PATTERN,
    MAX_DECISION,
    MAX_EXPLANATION,
    MAX_REASONS,
    EvidenceRecord,
    EvidenceRequest,
    ReplayPacket,
)
from refvault.server.auth import Caller
from refvault.server.schema import PROBLEM_RESPONSE, open_json
from refvault.server.service import Service
from refvault.server.threads import blocking

__all__ = ["Charged", "EvidenceBody", "SubstitutionBody", "UseBody", "router"]

router = APIRouter(responses={"default": PROBLEM_RESPONSE})

_ArtifactId = Annotated[str, Field(pattern=ARTIFACT_ID_PATTERN)]
_Code = Annotated[str, Field(pattern=r"^[a-z][a-z_]{0,39}$")]
_Amount = Annotated[int, Field(ge=0, le=2**53)] | None  # as far as a JSON number counts exactly


class Charged(BaseModel):
    """What a reacquisition charged the run's budget, per counted dimension (``refvault.budgets``)."""

    model_config = ConfigDict(extra="forbid")

    acquired_bytes: _Amount = None
    retained_bytes: _Amount = None
    read_calls: _Amount = None
    scanned_records: _Amount = None
    scanned_bytes: _Amount = None
    returned_tokens: _Amount = None
    recomputations: _Amount = None


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decision: Annotated[str, Field(min_length=1, max_length=MAX_DECISION, pattern=f"^{DECISION_PATTERN}$")]
    artifact_id: _ArtifactId
    decided_at: AwareDatetime
    satisfied: bool
    reasons: Annotated[list[_Code], Field(max_length=MAX_REASONS)] = []
    explanation: Annotated[str, Field(max_length=MAX_EXPLANATION, pattern=f"^{EXPLANATION_PATTERN}$")] = ""
    charged: Charged = Charged()


class UseBody(_Record):
    """A use (``used``) or a refused reacquisition (``refused``): names no evidence it replaces."""

    kind: Literal["used", "refused"]


class SubstitutionBody(_Record):
    """A substitution: ``artifact_id`` is the new evidence, ``replaces`` the old."""

    kind: Literal["substituted"]
    replaces: _ArtifactId


EvidenceBody = Annotated[UseBody | SubstitutionBody, Field(discriminator="kind")]
"""``POST /v1/evidence``: one record of what a decision of the caller's run used (``refvault.runs``)."""


@router.post("/evidence", status_code=201, tags=["runs"], responses={201: open_json("The stored evidence record")})
async def record_evidence(body: Annotated[EvidenceBody, Body()], scope: Caller, service: Service) -> JSONResponse:
    """Record what a decision of the caller's run used, a substitution, or a refused reacquisition."""
    request = EvidenceRequest(
        kind=body.kind,
        decision=body.decision,
        artifact_id=body.artifact_id,
        decided_at=body.decided_at,
        satisfied=body.satisfied,
        reasons=tuple(body.reasons),
        replaces=body.replaces if isinstance(body, SubstitutionBody) else None,
        explanation=body.explanation,
        charged=body.charged.model_dump(exclude_none=True),
    )
    stored: EvidenceRecord = await blocking(service.vault.record_evidence, scope, request)
    return JSONResponse(stored.to_dict(), status_code=201)


@router.get(
    "/replay-packet",
    tags=["runs"],
    responses={200: open_json("Every evidence reference the run used, with its availability now, and every record")},
)
async def replay_packet(scope: Caller, service: Service) -> JSONResponse:
    """The replay packet of the caller's session: what its decisions used, and whether each is available now."""
    packet: ReplayPacket = await blocking(service.vault.replay_packet, scope, scope.session)
    return JSONResponse(packet.to_dict())
