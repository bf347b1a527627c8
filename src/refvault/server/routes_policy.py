"""A tenant's disclosure policy over HTTP: ``GET /v1/policy`` (any key of the tenant), ``PUT`` and ``DELETE``
(an admin key of the tenant: ``refvault keys create --admin``).

* **Only the key's own tenant.** The tenant is the key's; nothing in the request names another.
* **Only an admin key changes it.** Any other key gets 403 and nothing changes; an admin key reads nothing
  more than its user could (the policy is about disclosure, not ownership).
* **Checked before it is stored**: a policy that does not parse is a 400 naming what is wrong, and the
  tenant's policy stays as it was. Setting and removing it are audited (``set_policy``, by the caller).
"""

# No ``from __future__ import annotations``: FastAPI reads the routes' annotations at runtime.
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Response
from fastapi.responses import JSONResponse

from refvault.model import Scope
from refvault.policy import Policy
from refvault.server.auth import Caller, admin_scope
from refvault.server.schema import PROBLEM_RESPONSE
from refvault.server.service import Service
from refvault.server.threads import blocking

__all__ = ["router"]

router = APIRouter(responses={"default": PROBLEM_RESPONSE})

Admin = Annotated[Scope, Depends(admin_scope)]
_POLICY_BODY = {
    "type": "object",
    "required": ["rules"],
    "properties": {
        "version": {"type": "string", "minLength": 1, "maxLength": 64},
        "rules": {"type": "array", "maxItems": 256, "items": {"type": "object", "required": ["id"]}},
    },
    "description": "The policy as GET /v1/policy shows it: rules in order, the first that matches decides.",
}


_POLICY_ANSWER = {
    "description": "The tenant's disclosure policy (refvault.policy), or null when none is set",
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["policy"],
                "properties": {"policy": {"anyOf": [{"type": "null"}, {"type": "object"}]}},
            }
        }
    },
}


@router.get("/policy", tags=["policy"], responses={200: _POLICY_ANSWER})
async def policy(scope: Caller, service: Service) -> JSONResponse:
    """The disclosure policy of the caller's tenant: ``{"policy": {"version", "rules": [...]}}`` or ``null``.

    Any key of the tenant may read it; an admin key sets it (``PUT``/``DELETE /v1/policy``), as do
    ``refvault policy set`` and ``Vault.set_policy`` where the store is.
    """
    found = await blocking(service.vault.policy, scope.tenant)
    return JSONResponse({"policy": None if found is None else found.to_dict()})


@router.put("/policy", tags=["policy"], responses={200: _POLICY_ANSWER})
async def set_policy(
    scope: Admin,
    service: Service,
    policy: Annotated[dict[str, Any], Body(json_schema_extra=_POLICY_BODY)],
) -> JSONResponse:
    """Make the body the disclosure policy of the admin key's tenant; answers the policy as stored."""
    parsed = Policy.from_dict(policy)
    await blocking(service.vault.set_policy, scope.tenant, parsed, by=scope)
    return JSONResponse({"policy": parsed.to_dict()})


@router.delete("/policy", tags=["policy"], status_code=204)
async def remove_policy(scope: Admin, service: Service) -> Response:
    """Remove the disclosure policy of the admin key's tenant (every read is then allowed as without one)."""
    await blocking(service.vault.set_policy, scope.tenant, None, by=scope)
    return Response(status_code=204)
