"""Capability links over HTTP: ``POST /v1/artifacts/{id}/links`` issues one, ``GET /v1/links/{token}`` follows it.

* **Issuing needs a key, following does not.** The issuer's key must be able to read the artifact for the
  link's purpose and recipient now (:meth:`refvault.Vault.link`); the link alone then fetches those bytes for
  up to 24 hours, re-checked at every use (:mod:`refvault.vault.links`).
* **Every refusal is one answer.** A malformed, tampered, expired, revoked, rotated or out-of-range link gets the
  same 404 body, whatever the reason (``tests/security/test_link_refusals.py``).
* **Revoking needs a key of the issuing tenant.** ``DELETE /v1/links/{token}`` answers ``{"revoked": true}``
  when this request revoked it, ``false`` when it opened nothing already; from then on the link gets the same
  404 as any other refusal (:meth:`refvault.Vault.revoke_link`).
* **The token stays out of other places.** Answers carry ``Cache-Control: no-store`` and
  ``Referrer-Policy: no-referrer``, plus the content endpoint's safety headers (``nosniff``, a sandboxing CSP,
  ``attachment`` for active types).
"""

# No ``from __future__ import annotations``: FastAPI reads the routes' annotations at runtime.
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from refvault.errors import IntegrityError
from refvault.server.auth import Caller
from refvault.server.content import PIECE, content_safety_headers, verified_pieces
from refvault.server.inputs import PURPOSE_PATTERN, RECIPIENT_PATTERN, checked_id
from refvault.server.schema import PROBLEM_RESPONSE
from refvault.server.service import Service
from refvault.server.threads import blocking
from refvault.vault.core import Vault
from refvault.vault.links import MAX_LINK_TTL, OpenedLink

__all__ = ["LinkCreated", "LinkRequest", "LinkRevoked", "router"]

router = APIRouter(responses={"default": PROBLEM_RESPONSE})

_NO_TRACE = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}


class LinkRequest(BaseModel):
    """``POST /v1/artifacts/{id}/links``: for whom, why, how long, and optionally which bytes."""

    model_config = ConfigDict(extra="forbid")

    recipient: Annotated[str, Field(pattern=RECIPIENT_PATTERN, description="user, export, model:<name>, tool:<name>")]
    purpose: Annotated[str, Field(pattern=PURPOSE_PATTERN)] = "default"
    expires_in: Annotated[int, Field(ge=1, le=int(MAX_LINK_TTL.total_seconds()), description="seconds")] = 300
    byte_range: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=2, max_length=2)] | None = Field(
        None,
        description="[start, end) of the artifact: end exclusive, past start and at most the artifact's size; "
        "null: the whole artifact",
    )


class LinkCreated(BaseModel):
    """A link: ``url`` fetches the bytes without a key until ``expires_in`` seconds have passed."""

    url: str
    path: str
    expires_in: int


class LinkRevoked(BaseModel):
    """Whether this request revoked the link (false: it was revoked already, or opened nothing anyway)."""

    revoked: bool


@router.delete("/links/{token}", response_model=LinkRevoked, tags=["links"])
async def revoke_link(token: str, scope: Caller, service: Service) -> Response:
    """Revoke one link issued in the caller's tenant: every later use gets the same 404 as an absent artifact."""
    revoked = await blocking(service.vault.revoke_link, scope, token)
    return JSONResponse({"revoked": revoked}, headers=_NO_TRACE)


@router.post(
    "/artifacts/{artifact_id}/links",
    status_code=201,
    response_model=LinkCreated,
    tags=["links"],
)
async def create_link(
    artifact_id: str, body: LinkRequest, scope: Caller, service: Service, request: Request
) -> Response:
    """Issue a capability link to the artifact (or a byte range) for one recipient; the key must be able to read it."""
    span = None if body.byte_range is None else (body.byte_range[0], body.byte_range[1])
    path = await blocking(
        service.vault.link,
        scope,
        checked_id(artifact_id),
        recipient=body.recipient,
        purpose=body.purpose,
        expires_in=timedelta(seconds=body.expires_in),
        byte_range=span,
    )
    url = str(request.base_url).rstrip("/") + path
    return JSONResponse({"url": url, "path": path, "expires_in": body.expires_in}, status_code=201, headers=_NO_TRACE)


@router.get(
    "/links/{token}",
    response_class=Response,
    tags=["links"],
    responses={200: {"description": "The verified bytes the link names", "content": {"*/*": {"schema": {}}}}},
)
async def follow_link(token: str, service: Service) -> Response:
    """The bytes a capability link names, re-checked now; no API key. Every refusal is the same 404."""
    opened, first = await blocking(_open, service.vault, token)
    headers = {
        "Content-Type": opened.descriptor.media_type,
        "Content-Length": str(opened.end - opened.start),
        **content_safety_headers(opened.descriptor),
        **_NO_TRACE,
    }
    if opened.start == 0 and opened.end == opened.descriptor.size:  # a range link names nothing beyond its range
        headers["ETag"] = '"' + opened.descriptor.content_hash.removeprefix("sha256:") + '"'

    remaining = opened.end - opened.start - len(first)
    if remaining <= 0:
        return Response(first, status_code=200, headers=headers)
    return StreamingResponse(verified_pieces(opened.stream, first, remaining), status_code=200, headers=headers)


def _open(vault: Vault, token: str) -> tuple[OpenedLink, bytes]:
    """Redeem the link and read its first verified piece (in a worker thread); closes the stream if done."""
    opened = vault.open_link(token)
    done = True
    try:
        first = opened.stream.read(min(PIECE, opened.end - opened.start))
        if len(first) < min(PIECE, opened.end - opened.start):
            raise IntegrityError("the artifact ended before its recorded size")  # pragma: no cover - sizes are verified
        done = opened.end - opened.start - len(first) <= 0
        return opened, first
    finally:
        if done:
            opened.stream.close()
