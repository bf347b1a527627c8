"""Sharing grants: an owner lets another principal of its tenant read one artifact, within bounds.

:meth:`refvault.Vault.share` makes a :class:`~refvault.model.Grant`; :meth:`~refvault.Vault.grants` lists an
artifact's grants; :meth:`~refvault.Vault.revoke` ends one. The read door
(:func:`refvault.vault.authority.authorize`) asks :func:`usable` when the caller is not the owner.

Invariants, each tested in ``tests/vault/test_grants.py`` and ``tests/security/test_grant_matrix.py``:

* **Only the owner shares, lists grants and revokes.** The artifact is looked up in the caller's own
  scope only (never through another grant): anyone else gets the same :class:`NotFound` as for an
  absent id. A grant of a grant does not exist.
* **The tenant is the isolation boundary.** ``to.tenant`` must be the owner's tenant
  (:class:`InvalidArgument` otherwise, before anything is looked up or written); a grant to a principal
  that covers the owner's own scope is refused too.
* **Checked at every use.** A grantee's read succeeds only while a grant to its principal (tenant,
  user, and a session ``to.sessions`` allows) is unrevoked and unexpired, and covers the read's
  purpose (``purposes``: exact names, None = any) and recipient (``recipients``: glob patterns matched
  with :func:`fnmatch.fnmatchcase`, None = any). Every read looks the grant up again: each stream chunk
  (:func:`refvault.vault.authority.rechecker`) and each cursor page (which goes through the door again), so a
  revoke or an expiry stops the next chunk or page. Outside a grant, a read is :class:`NotFound`, identical to absent.
* **A grant never widens disclosure.** The grantee reads through a view of the manifest
  (:func:`grantee_view`): ``disclosure`` is ``sealed`` if the artifact or the grant is sealed, and the
  descriptor's ``scope`` mapping says ``shared: True`` and the ``grant_id`` (the descriptor keeps its ten
  top-level fields). The view is never stored.
* **Grants are trusted state.** The catalog MACs every grant row like a manifest row
  (:mod:`refvault.catalog.macs`): an edited grant (widened purpose, later expiry, revocation cleared in
  place) is an :class:`IntegrityError`, never honoured. A MAC proves authorship, not freshness: an earlier
  authentic row put back whole (a grant as it was before its revoke) verifies; the audit records the revoke.
"""

from __future__ import annotations

import base64
import re
import secrets
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import datetime
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

from refvault.catalog.base import Catalog, Manifest
from refvault.errors import Expired, GrantNotFound, InvalidArgument, NotFound, shown_id
from refvault.ids import check_artifact_id, check_name
from refvault.model import Disclosure, Grant, Principal, Scope, checked_disclosure, checked_expiry, format_time
from refvault.policy import check_purpose
from refvault.vault.reports import Problem

__all__ = [
    "GRANT_ID_PATTERN",
    "Sharing",
    "check_grant_id",
    "covers",
    "grant_problems",
    "grantee_view",
    "is_grant_id",
    "make_grant",
    "new_grant_id",
    "owned",
    "shared_manifests",
    "usable",
]

GRANT_ID_PATTERN = r"^grt_[a-z2-7]{26}$"
_GRANT_ID = re.compile(GRANT_ID_PATTERN)
_NAME = re.compile(r"[\x21-\x7e]{1,128}")  # a recipient pattern: 1-128 visible ASCII characters
MAX_NAMES = 64


def new_grant_id() -> str:
    """A fresh opaque grant id: ``grt_`` and 128 random bits in base32."""
    return "grt_" + base64.b32encode(secrets.token_bytes(16)).decode("ascii").rstrip("=").lower()


def is_grant_id(value: object) -> bool:
    return isinstance(value, str) and _GRANT_ID.fullmatch(value) is not None


def check_grant_id(value: object) -> str:
    """``value`` if it is a well-formed grant id, else :class:`InvalidArgument` (never echoing it)."""
    if not isinstance(value, str) or _GRANT_ID.fullmatch(value) is None:
        raise InvalidArgument("not a refvault grant id: expected 'grt_' followed by 26 characters a-z, 2-7")
    return value


def _names(kind: str, values: Iterable[str] | None) -> frozenset[str] | None:
    """A set of purposes or recipient patterns (None: any); never echoes a rejected value."""
    if values is None:
        return None
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise InvalidArgument(f"{kind} must be a set of strings (or None for any), e.g. {{'support'}}")
    names = list(values)
    if not names:
        raise InvalidArgument(f"{kind} may not be empty: give None to allow any")
    if len(names) > MAX_NAMES:
        raise InvalidArgument(f"{kind} holds at most {MAX_NAMES} names")
    for name in names:
        if kind == "purposes":
            check_purpose(name)
        elif not isinstance(name, str) or _NAME.fullmatch(name) is None:
            raise InvalidArgument(
                "each recipient pattern is 1-128 visible ASCII characters (no spaces), e.g. 'model:*'"
            )
    return frozenset(names)


def _principal(to: object, owner: Scope) -> Principal:
    if not isinstance(to, Principal):
        raise InvalidArgument("to must be a refvault.Principal(tenant=..., user=..., sessions=...)")
    if to.tenant != owner.tenant:
        raise InvalidArgument("a grant never crosses tenants: to.tenant must be the owner's tenant")
    sessions: object = to.sessions  # typed a frozenset, but a caller may hand anything
    if sessions is not None:
        if isinstance(sessions, str) or not isinstance(sessions, Iterable) or not sessions:
            raise InvalidArgument("to.sessions must be a non-empty set of session names, or None for every session")
        to = replace(to, sessions=frozenset(check_name("session", s) for s in sessions))
    if to.allows(owner):
        raise InvalidArgument("the artifact's own scope already reads it: share it with another user or session")
    return to


def make_grant(
    owner: Scope,
    artifact_id: str,
    *,
    to: object,
    purposes: Iterable[str] | None,
    recipients: Iterable[str] | None,
    expires_at: object,
    disclosure: object,
    now: datetime,
) -> Grant:
    """A new grant of ``owner``'s artifact, every argument checked (:class:`InvalidArgument`); nothing is stored."""
    principal = _principal(to, owner)
    try:
        shown: Disclosure = checked_disclosure(disclosure)
        until = checked_expiry(expires_at, now)
    except InvalidArgument as exc:
        raise InvalidArgument(str(exc).replace("expires_at", "the grant's expires_at")) from None
    return Grant(
        grant_id=new_grant_id(),
        owner=owner,
        artifact_id=check_artifact_id(artifact_id),
        to=principal,
        purposes=_names("purposes", purposes),
        recipients=_names("recipients", recipients),
        disclosure=shown,
        created_at=now,
        expires_at=until,
    )


def owned(catalog: Catalog, owner: Scope, artifact_id: str, now: datetime) -> Manifest:
    """The manifest of ``owner``'s own artifact (never a shared one): :class:`NotFound`, or :class:`Expired`."""
    manifest = catalog.find(owner, check_artifact_id(artifact_id))
    if manifest is None:
        raise NotFound(artifact_id)
    if manifest.expires_at is not None and now >= manifest.expires_at:
        raise Expired(manifest.artifact_id, format_time(manifest.expires_at))
    return manifest


def covers(grant: Grant, purpose: str | None, recipient: str | None) -> bool:
    """Whether ``grant`` allows a read for ``purpose`` toward ``recipient`` (None: not asked; activity apart)."""
    if purpose is not None and grant.purposes is not None and purpose not in grant.purposes:
        return False
    if recipient is None or grant.recipients is None:
        return True
    return any(fnmatchcase(recipient, pattern) for pattern in grant.recipients)


def grantee_view(manifest: Manifest, grant: Grant) -> Manifest:
    """The manifest as the grantee reads it: sealed if the grant is, and marked with the grant's id."""
    sealed = "sealed" if grant.disclosure == "sealed" else manifest.disclosure
    return replace(manifest, disclosure=sealed, grant_id=grant.grant_id)


def usable(
    catalog: Catalog, scope: Scope, artifact_id: str, now: datetime, *, purpose: str, recipient: str
) -> tuple[Manifest, Grant] | None:
    """The grantee's view of the artifact and the oldest live grant that covers this read, or None.

    Never raises for "no grant" (the caller answers :class:`NotFound`); a grant row that fails its
    MAC is an :class:`~refvault.errors.IntegrityError`. Artifact expiry is the caller's to check.
    """
    for grant in catalog.find_grant(scope, artifact_id, now):
        if not covers(grant, purpose, recipient):
            continue
        manifest = catalog.find(grant.owner, artifact_id)
        if manifest is None:  # deleted: the grant names nothing any more
            return None
        return grantee_view(manifest, grant), grant
    return None


def shared_manifests(
    catalog: Catalog, scope: Scope, now: datetime, *, purpose: str | None = None, recipient: str | None = None
) -> list[Manifest]:
    """The grantee views of every unexpired artifact shared with ``scope``, one per artifact (its oldest
    covering grant), newest grant first. With ``purpose``/``recipient``, only grants that cover them."""
    seen: dict[str, Manifest] = {}
    for grant in reversed(catalog.shared_with(scope, now)):  # oldest first: the oldest covering grant wins
        if grant.artifact_id in seen:
            continue
        if not covers(grant, purpose, recipient):
            continue
        manifest = catalog.find(grant.owner, grant.artifact_id)
        if manifest is None or (manifest.expires_at is not None and now >= manifest.expires_at):
            continue
        seen[grant.artifact_id] = grantee_view(manifest, grant)
    return list(reversed(seen.values()))


def grant_problems(catalog: Catalog) -> list[Problem]:
    """``verify``'s findings on grant rows: each that fails its MAC is a ``manifest`` problem naming its artifact."""
    return [
        Problem(
            "manifest",
            "",
            f"a sharing grant of artifact {shown_id(aid)} failed verification: {fault}",
            (shown_id(aid),),
        )
        for aid, fault in catalog.audit_grants()
        if fault is not None
    ]


class Sharing:
    """The sharing methods of :class:`refvault.Vault` (mixed in): :meth:`share`, :meth:`grants`, :meth:`revoke`.

    Each is audited like every vault operation (``share``, ``grants``, ``revoke``, with ``grant_id``).
    """

    if TYPE_CHECKING:
        catalog: Catalog
        clock: Callable[[], datetime]

        def _audited(
            self, action: str, scope: object, artifact_id: object = None
        ) -> AbstractContextManager[dict[str, Any]]: ...

    def share(
        self,
        scope: Scope,
        artifact_id: str,
        *,
        to: Principal,
        purposes: Iterable[str] | None = None,
        recipients: Iterable[str] | None = None,
        expires_at: datetime | None = None,
        disclosure: Disclosure = "model",
    ) -> Grant:
        """Let ``to`` (a principal of the same tenant) read this artifact of ``scope``'s; the grant made.

        ``purposes`` (exact names) and ``recipients`` (glob patterns such as ``model:*``) bound the
        reads the grant covers (None: any); ``expires_at`` (aware, in the future) ends it;
        ``disclosure="sealed"`` lets the grantee's tools resolve it by ``Ref`` but never its model
        read it. Only the owner shares (anyone else: :class:`NotFound`, as for an absent id; an
        expired artifact: :class:`Expired`); ``to`` of another tenant, or covering ``scope`` itself,
        is :class:`InvalidArgument`, checked before anything is looked up.
        """
        with self._audited("share", scope, artifact_id) as facts:
            now = self.clock()
            grant = make_grant(
                _owner(scope),
                artifact_id,
                to=to,
                purposes=purposes,
                recipients=recipients,
                expires_at=expires_at,
                disclosure=disclosure,
                now=now,
            )
            manifest = owned(self.catalog, grant.owner, grant.artifact_id, now)
            self.catalog.add_grant(grant)
            facts.update(grant_id=grant.grant_id, content_hash="sha256:" + manifest.digest)
        return grant

    def grants(self, scope: Scope, artifact_id: str) -> list[Grant]:
        """Every grant the owner ``scope`` gave on this artifact (revoked and expired ones too), oldest first.

        Only the owner may ask (anyone else: :class:`NotFound`, as for an absent id).
        """
        with self._audited("grants", scope, artifact_id):
            owner = _owner(scope)
            manifest = owned(self.catalog, owner, artifact_id, self.clock())
            return self.catalog.grants_for_artifact(owner, manifest.artifact_id)

    def revoke(self, scope: Scope, grant_id: str) -> Grant:
        """End a grant the owner ``scope`` gave, at once: the grantee's next read, chunk or page is refused.

        Returns the revoked grant. A grant id that is unknown, another scope's or already revoked is
        :class:`~refvault.errors.GrantNotFound` (one message for each).
        """
        with self._audited("revoke", scope) as facts:
            owner = _owner(scope)
            facts["grant_id"] = check_grant_id(grant_id)
            revoked = self.catalog.revoke_grant(owner, grant_id, self.clock())
            if revoked is None:
                raise GrantNotFound(grant_id)
            facts["artifact_id"] = revoked.artifact_id
        return revoked


def _owner(scope: object) -> Scope:
    if not isinstance(scope, Scope):
        raise InvalidArgument("scope must be a refvault.Scope(tenant=..., user=..., session=...)")
    return scope
