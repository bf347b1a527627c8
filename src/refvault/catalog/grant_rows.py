"""Sharing-grant rows (``refvault_grants``, migration 7) and the grants they state, both directions.

Decoding here does not authenticate: :class:`~refvault.catalog.sql.SqlCatalog` checks every row's MAC
(:meth:`~refvault.catalog.macs.ManifestKeys.fault`) where it turns a row into a :class:`Grant`, and a row
that fails is an :class:`~refvault.errors.IntegrityError` (:func:`~refvault.catalog.macs.grant_error`),
never a grant: an edited grant (a widened purpose, a later expiry, a cleared revocation) is refused.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from refvault.catalog.macs import ManifestKeys, grant_error, micros
from refvault.catalog.rows import UNREADABLE, from_us, to_json
from refvault.catalog.schema import grants
from refvault.model import Grant, Principal, Scope, checked_disclosure

__all__ = [
    "authentic",
    "grant_fault",
    "grant_of",
    "grant_row",
    "held",
    "live",
    "of_grantee",
    "of_owner",
    "remac",
    "revoke",
    "select",
    "use_retired",
]


def _names(value: frozenset[str] | None) -> str | None:
    return None if value is None else to_json(sorted(value))


def _set(value: str | None) -> frozenset[str] | None:
    if value is None:
        return None
    names = json.loads(value)
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError("not a list of names")
    return frozenset(names)


def grant_row(grant: Grant, mac: str) -> dict[str, Any]:
    """The row that stores ``grant`` with its ``mac``."""
    return {
        "grant_id": grant.grant_id,
        "tenant": grant.owner.tenant,
        "owner_user": grant.owner.user,
        "owner_session": grant.owner.session,
        "artifact_id": grant.artifact_id,
        "grantee_user": grant.to.user,
        "grantee_sessions": _names(grant.to.sessions),
        "purposes": _names(grant.purposes),
        "recipients": _names(grant.recipients),
        "disclosure": grant.disclosure,
        "created_us": micros(grant.created_at),
        "expires_us": None if grant.expires_at is None else micros(grant.expires_at),
        "revoked_us": None if grant.revoked_at is None else micros(grant.revoked_at),
        "mac": mac,
    }


def grant_of(row: Any) -> Grant:
    """The grant a row states (not yet authenticated). Raises one of :data:`UNREADABLE` for a mangled row."""
    return Grant(
        grant_id=row.grant_id,
        owner=Scope(row.tenant, row.owner_user, row.owner_session),
        artifact_id=row.artifact_id,
        to=Principal(row.tenant, row.grantee_user, _set(row.grantee_sessions)),
        purposes=_set(row.purposes),
        recipients=_set(row.recipients),
        disclosure=checked_disclosure(row.disclosure),
        created_at=from_us(row.created_us),
        expires_at=None if row.expires_us is None else from_us(row.expires_us),
        revoked_at=None if row.revoked_us is None else from_us(row.revoked_us),
    )


def of_owner(owner: Scope) -> sa.ColumnElement[bool]:
    return sa.and_(
        grants.c.tenant == owner.tenant, grants.c.owner_user == owner.user, grants.c.owner_session == owner.session
    )


def of_grantee(grantee: Scope) -> sa.ColumnElement[bool]:
    """Rows naming the grantee's tenant and user (its session is checked on the decoded grant)."""
    return sa.and_(grants.c.tenant == grantee.tenant, grants.c.grantee_user == grantee.user)


def live(now: datetime) -> sa.ColumnElement[bool]:
    """Rows not revoked and not expired at ``now`` (re-checked on the authenticated grant)."""
    return sa.and_(
        grants.c.revoked_us.is_(None), sa.or_(grants.c.expires_us.is_(None), grants.c.expires_us > micros(now))
    )


def grant_fault(keys: ManifestKeys, row: Any) -> str | None:
    """Why the row fails authentication (a short phrase, no values), or None if its MAC holds."""
    try:
        return keys.fault(grant_of(row), row.mac)
    except UNREADABLE:
        return "its grant row cannot be decoded"


def authentic(keys: ManifestKeys, row: Any) -> Grant:
    """The row's grant if its MAC authenticates it, else :class:`IntegrityError` (``kind="manifest"``)."""
    fault = grant_fault(keys, row)
    if fault is not None:
        raise grant_error(fault)
    return grant_of(row)


def select(
    conn: sa.Connection, keys: ManifestKeys, *where: sa.ColumnElement[bool], newest: bool = False
) -> list[Grant]:
    """The authenticated grants of the rows matching ``where``, oldest first (``newest``: newest first)."""
    order = (
        (grants.c.created_us.desc(), grants.c.grant_id.desc()) if newest else (grants.c.created_us, grants.c.grant_id)
    )
    return [authentic(keys, row) for row in conn.execute(sa.select(grants).where(*where).order_by(*order)).all()]


def held(found: list[Grant], grantee: Scope, now: datetime) -> list[Grant]:
    """The grants among ``found`` that ``grantee``'s session may use and that are active at ``now``."""
    return [g for g in found if g.to.allows(grantee) and g.active(now)]


def revoke(conn: sa.Connection, keys: ManifestKeys, owner: Scope, grant_id: str, at: datetime) -> Grant | None:
    """In ``conn``'s transaction: mark ``owner``'s live grant revoked at ``at`` and re-sign it; None if none."""
    row = conn.execute(
        sa.select(grants).where(of_owner(owner), grants.c.grant_id == grant_id, grants.c.revoked_us.is_(None))
    ).first()
    if row is None:
        return None
    revoked = replace(authentic(keys, row), revoked_at=at)
    result = conn.execute(
        grants.update()
        .where(grants.c.grant_id == grant_id, grants.c.mac == row.mac)
        .values(revoked_us=micros(at), mac=keys.sign(revoked))
    )
    return revoked if result.rowcount == 1 else None


def remac(conn: sa.Connection, keys: ManifestKeys, current: str) -> tuple[int, int]:
    """Re-MAC every authentic grant not signed with ``current``: (rows re-MAC'd, rows left as they fail)."""
    redone = failing = 0
    for row in conn.execute(sa.select(grants)).all():
        if grant_fault(keys, row) is not None:
            failing += 1
        elif keys.key_id(row.mac) != current:
            conn.execute(
                grants.update()
                .where(grants.c.grant_id == row.grant_id, grants.c.mac == row.mac)
                .values(mac=keys.sign(grant_of(row)))
            )
            redone += 1
    return redone, failing


def use_retired(conn: sa.Connection, keys: ManifestKeys, current: str) -> bool:
    """True if some authentic grant is still MAC'd with a key other than ``current``."""
    stale = sa.select(grants).where(sa.not_(grants.c.mac.startswith(f"v1:{current}:", autoescape=True)))
    return any(grant_fault(keys, row) is None for row in conn.execute(stale))
