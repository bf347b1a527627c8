"""The artifact routes of the HTTP API v1: health, capture (streamed), list, describe, declassify, delete.

* **Streaming capture, bounded memory.** A capture's body is fed to ``Vault.put`` chunk by chunk
  from a worker thread (never held whole); ``max_body`` is enforced while streaming (413, nothing
  published).
* **One tenant cannot stall the others.** A capture holds one of its key's and tenant's upload
  places for its whole length and runs in a thread of the captures' own limiter
  (:class:`refvault.server.limits.Uploads`: 429 ``too-many-requests`` past the caps).
* **Absent and not-yours look the same.** A malformed id, an absent one and another scope's
  artifact are all 404 ``not-found`` bodies that differ only by the (well-formed) id the caller sent.
"""

# No ``from __future__ import annotations``: FastAPI reads the routes' annotations at runtime.
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect

from refvault.copies import DeletionReport
from refvault.errors import InvalidArgument
from refvault.limits import LIST_PAGE, MAX_LIST_PAGE, MAX_OFFSET
from refvault.model import Descriptor
from refvault.operations import ListPage
from refvault.server.auth import Caller
from refvault.server.inputs import (
    MAX_JSON_BODY,
    BodyTooLarge,
    Reader,
    body_pieces,
    bounded_body,
    capture_options,
    checked_id,
    declared_length,
    declassify_arguments,
)
from refvault.server.limits import key_id
from refvault.server.problems import problem
from refvault.server.schema import (
    IDEMPOTENCY_PARAMETER,
    METADATA_PARAMETER,
    PROBLEM_RESPONSE,
    ArtifactList,
    DescriptorModel,
    Health,
)
from refvault.server.service import Service
from refvault.server.threads import blocking

__all__ = ["router"]

router = APIRouter(responses={"default": PROBLEM_RESPONSE})


@router.get("/health", response_model=Health, tags=["service"])
async def health() -> JSONResponse:
    """Liveness; needs no key."""
    return JSONResponse({"status": "ok"})


@router.post(
    "/artifacts",
    status_code=201,
    response_model=DescriptorModel,
    tags=["artifacts"],
    responses={408: PROBLEM_RESPONSE, 429: PROBLEM_RESPONSE},
    openapi_extra={
        "requestBody": {
            "required": False,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        },
        "parameters": [METADATA_PARAMETER, IDEMPOTENCY_PARAMETER],
    },
)
async def capture(
    request: Request,
    scope: Caller,
    service: Service,
) -> Response:
    """Capture the raw request body (streamed); metadata in ``Refvault-Metadata`` (a JSON object)."""
    options = capture_options(request.headers.get("refvault-metadata"), request.headers.get("content-type"))
    idempotency_key = request.headers.get("idempotency-key")
    if idempotency_key is not None:
        options["idempotency_key"] = idempotency_key
    declared = declared_length(request.headers.get("content-length"))
    if declared is not None and declared > service.max_body:
        raise BodyTooLarge(service.max_body)
    pieces = request.stream().__aiter__()

    async def receive() -> bytes | None:
        try:
            return await pieces.__anext__()
        except StopAsyncIteration:
            return None

    with service.uploads.slot(key_id(request.headers.get("authorization")), scope.tenant):  # 429 past the caps
        try:
            descriptor = await service.uploads.run_capture(
                service.vault.put, scope, body_pieces(receive, service.max_body), **options
            )
        except ClientDisconnect:
            return problem(
                400, "invalid-argument", "Invalid argument", "the request body ended early", "InvalidArgument"
            )
    location = f"/v1/artifacts/{descriptor.artifact_id}"
    return JSONResponse(descriptor.to_dict(), status_code=201, headers={"Location": location})


@router.get("/artifacts", response_model=ArtifactList, tags=["artifacts"])
async def list_artifacts(
    scope: Caller,
    service: Service,
    read_for: Reader,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_PAGE)] = LIST_PAGE,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> JSONResponse:
    """The scope's unexpired artifacts, newest first, one page at a time (without those the policy refuses)."""
    page = ListPage(limit=limit, offset=offset)  # the query's bounds are the page's own (refvault.limits)
    descriptors = await blocking(service.vault.list, scope, **read_for.kwargs())
    items = [d.to_dict() for d in descriptors[page.offset : page.offset + page.limit]]
    return JSONResponse({"items": items, "next_offset": page.following(len(descriptors))})


@router.get("/artifacts/{artifact_id}", response_model=DescriptorModel, tags=["artifacts"])
async def describe(artifact_id: str, scope: Caller, service: Service, read_for: Reader) -> JSONResponse:
    """The artifact's descriptor."""
    checked = checked_id(artifact_id)
    descriptor: Descriptor = await blocking(service.vault.describe, scope, checked, **read_for.kwargs())
    return JSONResponse(descriptor.to_dict())


@router.post(
    "/artifacts/{artifact_id}/declassify",
    response_model=DescriptorModel,
    tags=["artifacts"],
    responses={413: PROBLEM_RESPONSE},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/DeclassifyRequest"}}},
        }
    },
)
async def declassify(artifact_id: str, request: Request, scope: Caller, service: Service) -> JSONResponse:
    """Remove labels from an artifact the caller owns (``Vault.declassify``); its new descriptor."""
    checked = checked_id(artifact_id)
    malformed: InvalidArgument | None = None
    try:
        remove, reason = declassify_arguments(await bounded_body(request, MAX_JSON_BODY))
    except InvalidArgument as exc:  # still looked up first: an absent id is the same 404 as everywhere
        malformed, remove, reason = exc, [], ""
    try:
        descriptor: Descriptor = await blocking(service.vault.declassify, scope, checked, remove=remove, reason=reason)
    except InvalidArgument:
        if malformed is not None:
            raise malformed from None
        raise
    return JSONResponse(descriptor.to_dict())


@router.delete("/artifacts/{artifact_id}", tags=["artifacts"])
async def delete(artifact_id: str, scope: Caller, service: Service, cascade: bool = False) -> JSONResponse:
    """Delete the artifact (with ``cascade=true``, every copy derived from it that the caller owns) and say what
    went, what stayed and why, and what cannot be erased (the disclosures already made). Bytes go at the next
    ``gc``, once nothing references them."""
    report: DeletionReport = await blocking(service.vault.delete, scope, checked_id(artifact_id), cascade=cascade)
    return JSONResponse(report.to_dict())
