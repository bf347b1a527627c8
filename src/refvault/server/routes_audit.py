"""The audit log and the disclosure ledger over HTTP, for the caller's own view (no admin key needed).

* ``GET /v1/audit`` — :meth:`refvault.Vault.audit`: the caller's own entries (its key's user, the
  ``Refvault-Session`` session) and every entry about an artifact it owns; ``artifact_id`` narrows to one
  artifact it owns (else the same 404 as an absent one). Paged by ``after`` (the last seq seen) and ``limit``.
* ``GET /v1/audit/head`` — the caller's tenant's chain head (``SEQ:HASH``), to anchor outside the store.
* ``GET /v1/artifacts/{id}/disclosures`` — :meth:`refvault.Vault.disclosures`: the ledger of an artifact the
  caller owns.

Entries hold ids, names, counts and hashes, never content. Verifying the whole chain is an operator's job
(``refvault audit verify`` where the store is): a key sees only part of its tenant's chain.
"""

# No ``from __future__ import annotations``: FastAPI reads the routes' annotations at runtime.
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from refvault.catalog.audit_log import AuditEntry, DisclosureEntry
from refvault.server.auth import Caller
from refvault.server.inputs import checked_id
from refvault.server.schema import PROBLEM_RESPONSE, open_json
from refvault.server.service import Service
from refvault.server.threads import blocking
from refvault.vault.audit_trail import AUDIT_PAGE_MAX

__all__ = ["disclosure_json", "entry_json", "router"]

router = APIRouter(responses={"default": PROBLEM_RESPONSE})


def entry_json(entry: AuditEntry) -> dict[str, Any]:
    """An entry as JSON: every field, and ``at`` as an ISO 8601 time beside ``at_us``."""
    return entry.to_json()


def disclosure_json(item: DisclosureEntry) -> dict[str, Any]:
    return item.to_json()


@router.get("/audit", tags=["audit"], responses={200: open_json("Audit entries, oldest first")})
async def audit_entries(
    scope: Caller,
    service: Service,
    artifact_id: Annotated[str | None, Query(max_length=64)] = None,
    after: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=AUDIT_PAGE_MAX)] = 100,
) -> JSONResponse:
    """The caller's view of its tenant's audit log (see the module docstring); ``next_after`` pages on."""
    named = None if artifact_id is None else checked_id(artifact_id)
    entries = await blocking(service.vault.audit, scope, artifact_id=named, after=after, limit=limit)
    items = [entry_json(entry) for entry in entries]
    return JSONResponse({"items": items, "next_after": entries[-1].seq if len(entries) == limit else None})


@router.get("/audit/head", tags=["audit"], responses={200: open_json("The tenant's chain head")})
async def audit_head(scope: Caller, service: Service) -> JSONResponse:
    """The caller's tenant's chain head: anchor ``head`` elsewhere to detect a cut tail later."""
    seq, digest = await blocking(service.vault.audit_head, scope.tenant)
    return JSONResponse({"tenant": scope.tenant, "seq": seq, "hash": digest, "head": f"{seq}:{digest}"})


@router.get(
    "/artifacts/{artifact_id}/disclosures",
    tags=["audit"],
    responses={200: open_json("Every disclosure of the artifact, oldest first")},
)
async def artifact_disclosures(artifact_id: str, scope: Caller, service: Service) -> JSONResponse:
    """The disclosure ledger of an artifact the caller owns: recipient, purpose, selection, excerpt hash."""
    found = await blocking(service.vault.disclosures, scope, checked_id(artifact_id))
    return JSONResponse({"items": [disclosure_json(item) for item in found]})
