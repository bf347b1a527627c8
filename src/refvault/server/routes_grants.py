"""Sharing grants over HTTP: ``POST``/``GET /v1/artifacts/{id}/grants`` and ``DELETE /v1/grants/{grant_id}``.

* **Only the owner.** The caller's scope (its key and ``Refvault-Session``) must own the artifact
  (:meth:`refvault.Vault.share`, :meth:`~refvault.Vault.grants`, :meth:`~refvault.Vault.revoke`); anyone
  else gets the same 404 as for an absent artifact (or, for a grant id, one 404 for unknown, another
  scope's and already revoked).
* **Never across tenants.** The grantee is a user (and optionally sessions) of the caller's own tenant;
  naming another tenant is a 400, checked before anything is looked up.
* **The grantee reads with its own key.** A grant is not a bearer token: the grantee reads the artifact
  by id through the usual routes, each read checked against the grant at that moment.
"""

# No ``from __future__ import annotations``: FastAPI reads the routes' annotations at runtime.
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from refvault.errors import GrantNotFound
from refvault.model import Grant, Principal
from refvault.server.auth import NAME_PATTERN, Caller
from refvault.server.inputs import checked_id
from refvault.server.schema import PROBLEM_RESPONSE
from refvault.server.service import Service
from refvault.server.threads import blocking
from refvault.vault.grants import is_grant_id

__all__ = ["GrantList", "GrantModel", "GrantRequest", "Grantee", "router"]

router = APIRouter(responses={"default": PROBLEM_RESPONSE})

_Name = Annotated[str, Field(min_length=1, max_length=128, pattern=NAME_PATTERN)]
_Purpose = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")]
_Pattern = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[!-~]{1,128}$")]


class Grantee(BaseModel):
    """Who the grant is to: a user of the caller's own tenant (a grant never crosses tenants), in the given
    sessions (null: every session). It may not cover the caller's own scope (the same user with no sessions,
    or with the caller's session)."""

    model_config = ConfigDict(extra="forbid")

    user: _Name
    sessions: Annotated[list[_Name], Field(min_length=1, max_length=64)] | None = None


class GrantRequest(BaseModel):
    """``POST /v1/artifacts/{id}/grants``: to whom, for which purposes and recipients, until when, how disclosed."""

    model_config = ConfigDict(extra="forbid")

    to: Grantee
    purposes: Annotated[list[_Purpose], Field(min_length=1, max_length=64)] | None = Field(
        None, description="Exact purposes the grant covers; null: any"
    )
    recipients: Annotated[list[_Pattern], Field(min_length=1, max_length=64)] | None = Field(
        None, description="Recipient glob patterns the grant covers (e.g. 'model:*'); null: any"
    )
    expires_at: datetime | None = Field(None, description="A moment with a UTC offset, in the future; null: no end")
    disclosure: Literal["model", "sealed"] = "model"


class _Owner(BaseModel):
    user: str
    session: str


class _To(BaseModel):
    user: str
    sessions: list[str] | None


class GrantModel(BaseModel):
    """A sharing grant (``Grant.to_dict``)."""

    model_config = ConfigDict(title="Grant")

    grant_id: str
    tenant: str
    owner: _Owner
    artifact_id: str
    to: _To
    purposes: list[str] | None
    recipients: list[str] | None
    disclosure: Literal["model", "sealed"]
    created_at: str
    expires_at: str | None
    revoked_at: str | None


class GrantList(BaseModel):
    """Every grant the owner gave on the artifact, revoked and expired ones too, oldest first."""

    items: list[GrantModel]


@router.post("/artifacts/{artifact_id}/grants", status_code=201, response_model=GrantModel, tags=["grants"])
async def share(artifact_id: str, body: GrantRequest, scope: Caller, service: Service) -> JSONResponse:
    """Share the caller's artifact with another user (or session) of its tenant; the grant made."""
    to = Principal(
        scope.tenant,
        body.to.user,
        None if body.to.sessions is None else frozenset(body.to.sessions),
    )
    options: dict[str, Any] = {
        "to": to,
        "purposes": None if body.purposes is None else set(body.purposes),
        "recipients": None if body.recipients is None else set(body.recipients),
        "expires_at": body.expires_at,
        "disclosure": body.disclosure,
    }
    grant: Grant = await blocking(service.vault.share, scope, checked_id(artifact_id), **options)
    return JSONResponse(grant.to_dict(), status_code=201)


@router.get("/artifacts/{artifact_id}/grants", response_model=GrantList, tags=["grants"])
async def grants(artifact_id: str, scope: Caller, service: Service) -> JSONResponse:
    """Every grant the caller gave on its artifact, oldest first."""
    found: list[Grant] = await blocking(service.vault.grants, scope, checked_id(artifact_id))
    return JSONResponse({"items": [grant.to_dict() for grant in found]})


@router.delete("/grants/{grant_id}", response_model=GrantModel, tags=["grants"])
async def revoke(grant_id: str, scope: Caller, service: Service) -> JSONResponse:
    """Revoke one of the caller's grants at once; the revoked grant. Unknown, another scope's, already revoked
    and malformed grant ids are one 404."""
    if not is_grant_id(grant_id):
        raise GrantNotFound(grant_id)
    revoked: Grant = await blocking(service.vault.revoke, scope, grant_id)
    return JSONResponse(revoked.to_dict())
