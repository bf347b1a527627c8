"""Who calls, and in which scope: every request of the HTTP API is authenticated first.

``Authorization: Bearer rvk_…`` is checked (:func:`refvault.keys.authenticate`, through the
process's :class:`~refvault.keys.KeyCache`: a revocation made elsewhere takes effect within
``auth_cache_seconds``, one made through this app's vault at once) before anything else is looked
at; every failure is the same 401 body. Tenant and user come from the key;
``Refvault-Tenant``/``Refvault-User`` may only repeat them (else 403), and ``Refvault-Session``
must be allowed by the key (else 403). :func:`session_scope` decides the scope for every surface:
the API's routes (the ``Caller`` dependency), its content fast path and ``/mcp``.
"""

# No ``from __future__ import annotations``: FastAPI reads the dependencies' annotations at runtime.
from typing import Annotated

from fastapi import Depends, Header, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from refvault.errors import Forbidden, InvalidArgument, InvalidScope, Unauthenticated
from refvault.keys import parse_token
from refvault.model import Principal, Scope
from refvault.server.problems import UNAUTHENTICATED_DETAIL
from refvault.server.service import Service
from refvault.server.threads import blocking

__all__ = ["NAME_PATTERN", "Caller", "admin_scope", "caller", "caller_key_id", "scope_of", "session_scope"]

NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._:@+\-]{0,127}$"  # a session name, as the schema states it

_bearer = HTTPBearer(auto_error=False, description="An API key: `rvk_<key_id>_<secret>`")


def session_scope(principal: Principal, session: str) -> Scope:
    """The scope a key acts in: its own tenant and user, and the ``Refvault-Session`` it names.

    :class:`~refvault.errors.InvalidArgument` for a malformed session name,
    :class:`~refvault.errors.Forbidden` for a session the key does not allow.
    Every surface (the API's routes, its content fast path, ``/mcp``) decides
    scope here and nowhere else.
    """
    try:
        scope = Scope(principal.tenant, principal.user, session)
    except InvalidScope:
        raise InvalidArgument("the Refvault-Session header must be a valid session name") from None
    if not principal.allows(scope):
        raise Forbidden("this API key may not act in the session named by Refvault-Session")
    return scope


async def caller(
    service: Service,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    tenant: Annotated[str | None, Header(alias="Refvault-Tenant")] = None,
    user: Annotated[str | None, Header(alias="Refvault-User")] = None,
) -> Principal:
    """The principal of the request's API key (401 without one), if the tenant and user headers agree (else 403)."""
    keys = service.keys
    token = credentials.credentials if credentials is not None else None
    principal = None if token is None else keys.cached(token)  # no thread hop for a recent key
    if principal is None and token is not None:
        principal = await blocking(keys.authenticate, token)
    if principal is None:
        raise Unauthenticated(UNAUTHENTICATED_DETAIL)
    if (tenant is not None and tenant != principal.tenant) or (user is not None and user != principal.user):
        raise Forbidden("Refvault-Tenant and Refvault-User must name the API key's own tenant and user")
    return principal


async def scope_of(
    principal: Annotated[Principal, Depends(caller)],
    session: Annotated[str, Header(alias="Refvault-Session", pattern=NAME_PATTERN)],
) -> Scope:
    """The scope the request acts in (:func:`session_scope`)."""
    return session_scope(principal, session)


Caller = Annotated[Scope, Depends(scope_of)]
"""A route parameter: the authenticated caller's scope."""


async def admin_scope(
    service: Service,
    scope: Caller,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
) -> Scope:
    """The caller's scope, if its API key is an admin key of its tenant (else 403; a non-admin key changes nothing)."""
    key_id = parse_token(credentials.credentials) if credentials is not None else None
    key = None if key_id is None else await blocking(service.vault.catalog.find_api_key, key_id)
    if key is None or not key.admin or key.revoked_at is not None or key.tenant != scope.tenant:
        raise Forbidden(
            "this API key may not administer its tenant: an admin key is made with 'refvault keys create --admin'"
        )
    return scope


async def caller_key_id(
    service: Service,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
) -> str:
    """The key id of the request's valid API key (401 without one): for routes that act as the key itself."""
    principal = await caller(service, credentials)
    key_id = parse_token(credentials.credentials) if credentials is not None else None
    if principal is None or key_id is None:  # pragma: no cover - caller() refused already
        raise Unauthenticated(UNAUTHENTICATED_DETAIL)
    return key_id
