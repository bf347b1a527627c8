"""Run budgets over HTTP: ``GET /v1/usage`` (any key, its own run), ``PUT``/``DELETE /v1/budget`` (an admin key).

* **A run is a session.** The run is the tenant and user of the key and the session named by
  ``Refvault-Session``; an admin key may name another ``user`` of its tenant (query parameter), so an
  operator sets the budget of an agent's session, and the agent's own key cannot raise it.
* **Checked before it is stored**: a budget that does not parse is a 400 naming what is wrong, and the
  run's budget stays as it was. Over budget, every operation answers 429 ``budget-exceeded``.
"""

# No ``from __future__ import annotations``: FastAPI reads the routes' annotations at runtime.
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, Response
from fastapi.responses import JSONResponse

from refvault.budgets import DIMENSIONS, MAX_LIMIT, MAX_SECONDS, Budget
from refvault.errors import InvalidArgument
from refvault.model import Scope
from refvault.server.auth import NAME_PATTERN, Caller, admin_scope
from refvault.server.schema import PROBLEM_RESPONSE
from refvault.server.service import Service
from refvault.server.threads import blocking

__all__ = ["router"]

router = APIRouter(responses={"default": PROBLEM_RESPONSE})

Admin = Annotated[Scope, Depends(admin_scope)]
User = Annotated[str | None, Query(pattern=NAME_PATTERN, description="another user of the admin key's tenant")]
_COUNT = {"anyOf": [{"type": "null"}, {"type": "integer", "minimum": 0, "maximum": MAX_LIMIT}]}
_SECONDS = {"anyOf": [{"type": "null"}, {"type": "number", "minimum": 0, "maximum": MAX_SECONDS}]}
_BUDGET_BODY = {
    "type": "object",
    "properties": {name: _SECONDS if name == "seconds" else _COUNT for name in DIMENSIONS},
    "additionalProperties": False,
    "description": "The run's limits (absent or null: unlimited): refvault.Budget.",
}
_USAGE = {
    "description": "What the run spent and has left per dimension (refvault.Usage)",
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["scope", "budget", "spent", "left", "exhausted", "started_at"],
                "properties": {
                    "scope": {"type": "object"},
                    "budget": {"anyOf": [{"type": "null"}, {"type": "object"}]},
                    "spent": {"type": "object"},
                    "left": {"type": "object"},
                    "exhausted": {"type": "array", "items": {"type": "string"}},
                    "started_at": {"anyOf": [{"type": "null"}, {"type": "string"}]},
                },
            }
        }
    },
}


def _run(scope: Scope, user: str | None) -> Scope:
    try:
        return scope if user is None else Scope(scope.tenant, user, scope.session)
    except Exception:
        raise InvalidArgument("user must be a valid user name") from None


@router.get("/usage", tags=["budgets"], responses={200: _USAGE})
async def usage(scope: Caller, service: Service) -> JSONResponse:
    """What the caller's run (its session) spent and has left, per dimension, and when its budget started."""
    found = await blocking(service.vault.usage, scope)
    return JSONResponse(found.to_json())


@router.put("/budget", tags=["budgets"], responses={200: _USAGE})
async def set_budget(
    scope: Admin,
    service: Service,
    budget: Annotated[dict[str, Any], Body(json_schema_extra=_BUDGET_BODY)],
    user: User = None,
    restart: bool = False,
) -> JSONResponse:
    """Set the budget of the run (the key's user, or ``user``, in the session of ``Refvault-Session``).

    A run that had a budget keeps what it spent under the new limits unless ``restart``. Answers its usage.
    """
    parsed = Budget.from_json(budget)
    found = await blocking(service.vault.set_budget, _run(scope, user), parsed, restart=restart)
    return JSONResponse(found.to_json())


@router.delete("/budget", tags=["budgets"], status_code=204)
async def clear_budget(scope: Admin, service: Service, user: User = None) -> Response:
    """Remove the run's budget and what it counted (the run is unlimited again)."""
    await blocking(service.vault.clear_budget, _run(scope, user))
    return Response(status_code=204)
