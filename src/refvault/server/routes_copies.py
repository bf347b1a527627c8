"""Derived copies over HTTP: redaction, receipts, lineage, staleness, holds and replay status.

Each route is the :class:`~refvault.Vault` method of the same name (:mod:`refvault.vault.copies`) on the
app's vault, in a worker thread, in the caller's scope:

* ``POST /v1/artifacts/{id}/redact`` (:meth:`~refvault.Vault.redact`), ``POST …/refresh``
  (:meth:`~refvault.Vault.refresh`): the derivative's descriptor.
* ``GET …/receipt``, ``GET …/lineage``, ``GET …/lineage-status``: what a derived artifact was made from and
  whether it is still current (:meth:`~refvault.Vault.receipt`, :meth:`~refvault.Vault.lineage`,
  :meth:`~refvault.Vault.lineage_status`).
* ``POST …/supersede``, ``POST …/revoke``: lifecycle marks (204).
* ``POST``/``GET …/holds``, ``DELETE …/holds/{hold_id}``: holds, which block deletion and expiry.
* ``POST /v1/replay-status``: whether a replay could read each id now, for the read's ``Refvault-Purpose``
  and ``Refvault-Recipient``.

Invariants:

* **Absent and not-yours look the same.** A malformed id, an absent one, another tenant's and another user's
  artifact are one 404 ``not-found`` (the vault's checks: redact, refresh, supersede, revoke and holds are the
  owner's only; receipt and lineage follow the reads' own door, owner or grant). ``replay-status`` reports an
  id the caller cannot read exactly like one that never existed.
* **No content.** Every answer is ids, hashes, sizes, counts, kinds and marks: never artifact bytes. Reasons
  are kept as their SHA-256 (a hold keeps its reason, which its owner wrote).
"""

# No ``from __future__ import annotations``: FastAPI reads the routes' annotations at runtime.
import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from refvault.copies import Hold, LineageGraph, Receipt
from refvault.errors import NotFound
from refvault.ids import ARTIFACT_ID_PATTERN
from refvault.limits import MAX_LINEAGE_NODES, MAX_REPLAY_IDS
from refvault.model import Descriptor
from refvault.server.auth import Caller
from refvault.server.inputs import Reader, checked_id
from refvault.server.schema import PROBLEM_RESPONSE, DescriptorModel, open_json
from refvault.server.service import Service
from refvault.server.threads import blocking
from refvault.vault.copies import MAX_REASON

__all__ = [
    "HoldList",
    "HoldModel",
    "HoldRequest",
    "LineageModel",
    "LineageStatusModel",
    "ReceiptModel",
    "RedactRequest",
    "ReplayStatusRequest",
    "RevokeRequest",
    "SupersedeRequest",
    "router",
]

router = APIRouter(responses={"default": PROBLEM_RESPONSE})

MAX_FIELDS = 64  # field paths one redaction names, over HTTP
MAX_FIELD_PATH = 256
HOLD_ID = re.compile(r"hold_[0-9a-f]{16}")  # what Vault.hold issues

_ArtifactId = Annotated[str, Field(pattern=ARTIFACT_ID_PATTERN)]
_Reason = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_REASON,
        pattern=r"^[^\x00]*$",
        description=f"Why (1-{MAX_REASON} characters, no NUL).",
    ),
]


# -- request bodies ------------------------------------------------------------------------------


class RedactRequest(BaseModel):
    """``POST /v1/artifacts/{id}/redact``: which redactor, and (JSON and JSON Lines only) which fields."""

    model_config = ConfigDict(extra="forbid")

    redactor: Literal["pii.v1", "secrets.v1"] = "pii.v1"
    fields: (
        Annotated[
            list[Annotated[str, Field(min_length=1, max_length=MAX_FIELD_PATH)]],
            Field(min_length=1, max_length=MAX_FIELDS),
        ]
        | None
    ) = Field(
        None,
        description="Dotted JSON paths (e.g. user.email) whose values are redacted instead of detecting; only for a"
        " JSON or JSON Lines artifact. null: detect.",
    )


class SupersedeRequest(BaseModel):
    """``POST /v1/artifacts/{id}/supersede``: the caller's artifact that replaces it, and why."""

    model_config = ConfigDict(extra="forbid")

    by: _ArtifactId = Field(description="Another artifact of the caller's own scope.")
    reason: _Reason


class RevokeRequest(BaseModel):
    """``POST /v1/artifacts/{id}/revoke``: why the artifact (and so every copy of it) is no longer valid."""

    model_config = ConfigDict(extra="forbid")

    reason: _Reason


class HoldRequest(BaseModel):
    """``POST /v1/artifacts/{id}/holds``: why the artifact must be kept (stored with the hold)."""

    model_config = ConfigDict(extra="forbid")

    reason: _Reason


class ReplayStatusRequest(BaseModel):
    """``POST /v1/replay-status``: the artifact ids a replay would read."""

    model_config = ConfigDict(extra="forbid")

    ids: Annotated[list[_ArtifactId], Field(max_length=MAX_REPLAY_IDS)]


# -- response models (the schema's; responses are built directly) -----------------------------------


class ReceiptModel(BaseModel):
    """The protected receipt of a derived artifact (``Receipt.to_dict``)."""

    model_config = ConfigDict(title="Receipt")

    artifact_id: str
    content_hash: str
    size: int
    kind: str
    transformation: str
    version: str
    sources: list[dict[str, str | None]]
    policy_version: str | None
    counts: dict[str, Any]
    counts_changed: bool
    coverage_changed: bool
    created_at: str
    receipt_hash: str


class LineageNodeModel(BaseModel):
    """One node of a lineage graph (``LineageNode.to_dict``); optional fields are left out when empty."""

    model_config = ConfigDict(title="LineageNode")

    id: str
    kind: str
    status: Literal["current", "stale", "revoked"]
    depth: int
    internal: bool = False
    visible: bool = True
    state: str | None = None
    content_hash: str | None = None
    bytes: int | None = None
    transformation: str | None = None


class LineageEdgeModel(BaseModel):
    model_config = ConfigDict(title="LineageEdge")

    source: str
    derived: str
    kind: str


class LineageModel(BaseModel):
    """The lineage graph of an artifact (``LineageGraph.to_dict``)."""

    model_config = ConfigDict(title="LineageGraph")

    root: str
    nodes: list[LineageNodeModel]
    edges: list[LineageEdgeModel]
    truncated: bool


class LineageStatusModel(BaseModel):
    """Whether the artifact and every ancestor are current."""

    model_config = ConfigDict(title="LineageStatus")

    artifact_id: str
    status: Literal["current", "stale", "revoked"]


class HoldModel(BaseModel):
    """A hold on one artifact (``Hold.to_dict``)."""

    model_config = ConfigDict(title="Hold")

    hold_id: str
    artifact_id: str
    reason: str
    at: str
    user: str


class HoldList(BaseModel):
    """The holds on the artifact, oldest first."""

    items: list[HoldModel]


# -- routes --------------------------------------------------------------------------------------


@router.post("/artifacts/{artifact_id}/redact", response_model=DescriptorModel, tags=["copies"])
async def redact(
    artifact_id: str, scope: Caller, service: Service, body: Annotated[RedactRequest | None, Body()] = None
) -> JSONResponse:
    """A redaction derivative of the caller's own artifact; its descriptor (200: made now or reused, as it is made
    once per redactor and fields). Only the owner may; the body may be left out (``pii.v1``, detecting)."""
    redactor, fields = ("pii.v1", None) if body is None else (body.redactor, body.fields)
    descriptor: Descriptor = await blocking(
        service.vault.redact, scope, checked_id(artifact_id), redactor=redactor, fields=fields
    )
    return JSONResponse(descriptor.to_dict())


@router.get("/artifacts/{artifact_id}/receipt", response_model=ReceiptModel, tags=["copies"])
async def receipt(artifact_id: str, scope: Caller, service: Service) -> JSONResponse:
    """The receipt of a derived artifact the caller may read (one captured directly has none: 400)."""
    found: Receipt = await blocking(service.vault.receipt, scope, checked_id(artifact_id))
    return JSONResponse(found.to_dict())


@router.get("/artifacts/{artifact_id}/lineage", response_model=LineageModel, tags=["copies"])
async def lineage(
    artifact_id: str,
    scope: Caller,
    service: Service,
    direction: Literal["both", "up", "down"] = "both",
    depth: Annotated[
        int | None, Query(ge=0, le=MAX_LINEAGE_NODES, description="Levels each way; absent: all of it.")
    ] = None,
) -> JSONResponse:
    """The lineage graph of an artifact the caller may read: its ancestors (``up``), its copies (``down``) or both."""
    graph: LineageGraph = await blocking(
        service.vault.lineage, scope, checked_id(artifact_id), direction=direction, depth=depth
    )
    return JSONResponse(graph.to_dict())


@router.get("/artifacts/{artifact_id}/lineage-status", response_model=LineageStatusModel, tags=["copies"])
async def lineage_status(artifact_id: str, scope: Caller, service: Service) -> JSONResponse:
    """``current``, ``stale`` (it or an ancestor was superseded) or ``revoked`` (it or an ancestor was revoked,
    deleted or expired)."""
    checked = checked_id(artifact_id)
    status: str = await blocking(service.vault.lineage_status, scope, checked)
    return JSONResponse({"artifact_id": checked, "status": status})


@router.post("/artifacts/{artifact_id}/supersede", status_code=204, response_class=Response, tags=["copies"])
async def supersede(artifact_id: str, body: SupersedeRequest, scope: Caller, service: Service) -> Response:
    """Mark the caller's artifact superseded by ``by`` (also the caller's): it and its copies report ``stale``."""
    await blocking(service.vault.supersede, scope, checked_id(artifact_id), body.by, reason=body.reason)
    return Response(status_code=204)


@router.post("/artifacts/{artifact_id}/revoke", status_code=204, response_class=Response, tags=["copies"])
async def revoke_artifact(artifact_id: str, body: RevokeRequest, scope: Caller, service: Service) -> Response:
    """Mark the caller's artifact revoked: it stays readable, but it and every copy of it report ``revoked``."""
    await blocking(service.vault.revoke_artifact, scope, checked_id(artifact_id), reason=body.reason)
    return Response(status_code=204)


@router.post("/artifacts/{artifact_id}/refresh", response_model=DescriptorModel, tags=["copies"])
async def refresh(artifact_id: str, scope: Caller, service: Service) -> JSONResponse:
    """Recompute the caller's stale redaction from the artifact that superseded its source; the fresh descriptor
    (a current one is returned as it is; anything but a redaction, or a revoked one, is a 400)."""
    descriptor: Descriptor = await blocking(service.vault.refresh, scope, checked_id(artifact_id))
    return JSONResponse(descriptor.to_dict())


@router.post("/artifacts/{artifact_id}/holds", status_code=201, response_model=HoldModel, tags=["copies"])
async def hold(artifact_id: str, body: HoldRequest, scope: Caller, service: Service) -> JSONResponse:
    """Put a hold on the caller's artifact: until released, deleting it is a 409 ``held`` and it does not expire."""
    made: Hold = await blocking(service.vault.hold, scope, checked_id(artifact_id), reason=body.reason)
    return JSONResponse(made.to_dict(), status_code=201)


@router.get("/artifacts/{artifact_id}/holds", response_model=HoldList, tags=["copies"])
async def holds(artifact_id: str, scope: Caller, service: Service) -> JSONResponse:
    """The holds on the caller's artifact, oldest first."""
    found: list[Hold] = await blocking(service.vault.holds, scope, checked_id(artifact_id))
    return JSONResponse({"items": [h.to_dict() for h in found]})


@router.delete("/artifacts/{artifact_id}/holds/{hold_id}", status_code=204, response_class=Response, tags=["copies"])
async def release(artifact_id: str, hold_id: str, scope: Caller, service: Service) -> Response:
    """Release one hold on the caller's artifact. An unknown or malformed hold id is a 404 (never repeated)."""
    checked = checked_id(artifact_id)
    if HOLD_ID.fullmatch(hold_id) is None:
        await blocking(service.vault.holds, scope, checked)  # an absent artifact is its own 404, as everywhere
        raise NotFound("(not a hold id)")
    await blocking(service.vault.release, scope, checked, hold_id)
    return Response(status_code=204)


@router.post(
    "/replay-status",
    tags=["copies"],
    responses={200: open_json("For each id: its state (available, expired, deleted or revoked) and what it means")},
)
async def replay_status(body: ReplayStatusRequest, scope: Caller, service: Service, read_for: Reader) -> JSONResponse:
    """Whether a replay could read each id now, for the read's purpose and recipient (the policy still decides).

    An id the caller cannot read is ``deleted`` with no time, exactly like one that never existed.
    """
    found: dict[str, dict[str, Any]] = await blocking(
        service.vault.replay_status, scope, list(body.ids), **read_for.kwargs()
    )
    return JSONResponse(found)
