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
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from refvault.ids import ARTIFACT_ID_PATTERN
from refvault.runs import MAX_DECISION, MAX_EXPLANATION, MAX_REASONS, EvidenceRecord, EvidenceRequest, ReplayPacket
from refvault.server.auth import Caller
from refvault.server.schema import PROBLEM_RESPONSE, open_json
from refvault.server.service import Service
from refvault.server.threads import blocking

__all__ = ["EvidenceBody", "router"]

router = APIRouter(responses={"default": PROBLEM_RESPONSE})

_ArtifactId = Annotated[str, Field(pattern=ARTIFACT_ID_PATTERN)]
_Code = Annotated[str, Field(pattern=r"^[a-z][a-z_]{0,39}$")]


class EvidenceBody(BaseModel):
    """``POST /v1/evidence``: one record of what a decision of the caller's run used (``refvault.runs``)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["used", "substituted", "refused"]
    decision: Annotated[str, Field(min_length=1, max_length=MAX_DECISION)]
    artifact_id: _ArtifactId
    decided_at: datetime
    satisfied: bool
    reasons: Annotated[list[_Code], Field(max_length=MAX_REASONS)] = []
    replaces: _ArtifactId | None = None
    explanation: Annotated[str, Field(max_length=MAX_EXPLANATION)] = ""
    charged: dict[Annotated[str, Field(pattern=r"^[a-z][a-z_]{0,31}$")], Annotated[int, Field(ge=0)]] = {}


@router.post("/evidence", status_code=201, tags=["runs"], responses={201: open_json("The stored evidence record")})
async def record_evidence(body: EvidenceBody, scope: Caller, service: Service) -> JSONResponse:
    """Record what a decision of the caller's run used, a substitution, or a refused reacquisition."""
    request = EvidenceRequest(
        kind=body.kind,
        decision=body.decision,
        artifact_id=body.artifact_id,
        decided_at=body.decided_at,
        satisfied=body.satisfied,
        reasons=tuple(body.reasons),
        replaces=body.replaces,
        explanation=body.explanation,
        charged=dict(body.charged),
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
