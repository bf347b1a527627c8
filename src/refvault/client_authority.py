"""The authority calls of :class:`~refvault.client.Client` (mixed in): capability links, sharing grants, the
audit log, the disclosure ledger and the tenant's policy, each the HTTP form of the :class:`~refvault.Vault`
method of the same name, with the same checks and errors (the server runs them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, TypeAlias

from refvault.budgets import Budget, Usage
from refvault.catalog.audit_log import FIELDS as _AUDIT_FIELDS
from refvault.catalog.audit_log import AuditEntry, DisclosureEntry
from refvault.client_wire import ClientHost, moment
from refvault.errors import InvalidArgument, InvalidMetadata, StorageError
from refvault.ids import check_artifact_id
from refvault.model import Disclosure, Grant, Principal, Scope
from refvault.policy import Policy

__all__ = ["AuthorityCalls"]

_Grants: TypeAlias = "list[Grant]"  # named here: inside Client, ``list`` is Client.list
_AuditEntries: TypeAlias = "list[AuditEntry]"
_Disclosures: TypeAlias = "list[DisclosureEntry]"


def _audit_entry(item: Any) -> AuditEntry:
    """An entry from its JSON (``at`` is derived from ``at_us`` and not part of the entry)."""
    if not isinstance(item, dict):
        raise TypeError("not an object")
    return AuditEntry(*(item[name] for name in _AUDIT_FIELDS))


_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")


class AuthorityCalls(ClientHost):
    """Links, grants, audit, ledger and policy over HTTP (mixed into :class:`~refvault.client.Client`)."""

    def link(
        self,
        scope: Scope,
        artifact_id: str,
        *,
        recipient: str,
        purpose: str = "default",
        expires_in: timedelta = timedelta(minutes=5),
        byte_range: tuple[int, int] | None = None,
    ) -> str:
        """A capability link (an absolute URL on the server, no API key needed) to the artifact or ``byte_range``
        for ``recipient``, valid ``expires_in`` (1 s to 24 h); see :meth:`Vault.link <refvault.Vault.link>`."""
        if not isinstance(expires_in, timedelta):
            raise InvalidArgument("expires_in must be a timedelta from 1 second to 24 hours")
        seconds = expires_in.total_seconds()
        if seconds != int(seconds):
            raise InvalidArgument("expires_in must be a whole number of seconds over HTTP")
        body: dict[str, Any] = {"recipient": recipient, "purpose": purpose, "expires_in": int(seconds)}
        if byte_range is not None:
            body["byte_range"] = list(byte_range)
        answer = self._json(self._call("POST", self._path(artifact_id, "/links"), scope, artifact_id, json_body=body))
        if not isinstance(answer, dict) or not isinstance(answer.get("url"), str):
            raise StorageError(f"the refvault server at {self.url} sent a malformed link")
        return str(answer["url"])

    def revoke_link(self, scope: Scope, link: str) -> bool:
        """``DELETE /v1/links/{token}``: :meth:`Vault.revoke_link <refvault.Vault.revoke_link>` (a link given as its
        token, path or URL); True if this call revoked it, False if it opened nothing already."""
        token = link.rsplit("/v1/links/", 1)[-1]
        if not token or any(c not in _TOKEN_CHARS for c in token):
            return False  # no link this store signed: nothing to revoke
        answer = self._json(self._call("DELETE", "/links/" + token, scope))
        if not isinstance(answer, dict) or not isinstance(answer.get("revoked"), bool):
            raise StorageError(f"the refvault server at {self.url} sent a malformed answer")
        return bool(answer["revoked"])

    # -- sharing grants (POST/GET /v1/artifacts/{id}/grants, DELETE /v1/grants/{grant_id}) --------------

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
        """Share the caller's artifact with ``to``; the same checks and errors as :meth:`Vault.share
        <refvault.Vault.share>`, run by the server."""
        if not isinstance(to, Principal):
            raise InvalidArgument("to must be a refvault.Principal(tenant=..., user=..., sessions=...)")
        if isinstance(scope, Scope) and to.tenant != scope.tenant:  # the server shares in the key's tenant only
            raise InvalidArgument("a grant never crosses tenants: to.tenant must be the owner's tenant")
        names = {"purposes": purposes, "recipients": recipients}
        for name, value in names.items():
            if value is not None and (isinstance(value, str) or not isinstance(value, Iterable)):
                raise InvalidArgument(f"{name} must be a set of strings (or None for any)")
        body: dict[str, Any] = {
            "to": {
                "user": to.user,
                "sessions": None if to.sessions is None else sorted(to.sessions),
            },
            **{name: None if value is None else sorted(value) for name, value in names.items()},
            "expires_at": moment("expires_at", expires_at),
            "disclosure": disclosure,
        }
        response = self._call("POST", self._path(artifact_id, "/grants"), scope, artifact_id, json_body=body)
        return self._grant(self._json(response))

    def grants(self, scope: Scope, artifact_id: str) -> _Grants:
        """Every grant the caller gave on its artifact, oldest first (:meth:`Vault.grants <refvault.Vault.grants>`)."""
        answer = self._json(self._call("GET", self._path(artifact_id, "/grants"), scope, artifact_id))
        if not isinstance(answer, dict) or not isinstance(answer.get("items"), list):
            raise StorageError(f"the refvault server at {self.url} sent a malformed grant list")
        return [self._grant(item) for item in answer["items"]]

    def revoke(self, scope: Scope, grant_id: str) -> Grant:
        """Revoke one of the caller's grants; the revoked grant (:meth:`Vault.revoke <refvault.Vault.revoke>`)."""
        if not isinstance(grant_id, str) or not re.fullmatch(r"grt_[a-z2-7]{26}", grant_id):
            raise InvalidArgument("not a refvault grant id: expected 'grt_' followed by 26 characters a-z, 2-7")
        return self._grant(self._json(self._call("DELETE", f"/grants/{grant_id}", scope, grant_id)))

    def _grant(self, answer: object) -> Grant:
        try:
            if not isinstance(answer, dict):
                raise InvalidMetadata("not an object")
            return Grant.from_dict(answer)
        except InvalidMetadata:
            raise StorageError(f"the refvault server at {self.url} sent a malformed grant") from None

    # -- the audit log and the disclosure ledger (the caller's own view) ------------------

    def audit(self, scope: Scope, *, artifact_id: str | None = None, after: int = 0, limit: int = 100) -> _AuditEntries:
        """``GET /v1/audit``: :meth:`Vault.audit <refvault.Vault.audit>` on the server, for the key's scope."""
        params: dict[str, Any] = {"after": after, "limit": limit}
        if artifact_id is not None:
            params["artifact_id"] = check_artifact_id(artifact_id)
        answer = self._json(self._call("GET", "/audit", scope, artifact_id, params=params))
        try:
            return [_audit_entry(item) for item in answer["items"]]
        except (KeyError, TypeError, ValueError):
            raise StorageError(f"the refvault server at {self.url} sent a malformed audit page") from None

    def audit_head(self, scope: Scope) -> tuple[int, str]:
        """``GET /v1/audit/head``: the chain head (seq, hash) of the key's tenant, to anchor elsewhere."""
        answer = self._json(self._call("GET", "/audit/head", scope))
        try:
            return int(answer["seq"]), str(answer["hash"])
        except (KeyError, TypeError, ValueError):
            raise StorageError(f"the refvault server at {self.url} sent a malformed audit head") from None

    def disclosures(self, scope: Scope, artifact_id: str) -> _Disclosures:
        """``GET /v1/artifacts/{id}/disclosures``: :meth:`Vault.disclosures <refvault.Vault.disclosures>`."""
        answer = self._json(self._call("GET", self._path(artifact_id, "/disclosures"), scope, artifact_id))
        try:
            return [
                DisclosureEntry(**{**item, "at": datetime.fromisoformat(item["at"].replace("Z", "+00:00"))})
                for item in answer["items"]
            ]
        except (KeyError, TypeError, ValueError, AttributeError):
            raise StorageError(f"the refvault server at {self.url} sent a malformed disclosure list") from None

    def policy(self, scope: Scope) -> Policy | None:
        """The disclosure policy of ``scope``'s tenant (``GET /v1/policy``), or None when none is set.

        Any key of the tenant reads it; :meth:`set_policy` (an admin key) changes it.
        """
        answer = self._json(self._call("GET", "/policy", scope))
        if not isinstance(answer, dict) or "policy" not in answer:
            raise StorageError(f"the refvault server at {self.url} sent a malformed policy")
        if answer["policy"] is None:
            return None
        try:
            return Policy.from_dict(answer["policy"])
        except InvalidArgument:
            raise StorageError(f"the refvault server at {self.url} sent a malformed policy") from None

    def set_policy(self, scope: Scope, policy: Policy | None) -> None:
        """Make ``policy`` the disclosure policy of ``scope``'s tenant (None: remove it): ``PUT``/``DELETE /v1/policy``.

        Needs an admin key of the tenant (``refvault keys create --admin``): any other key gets
        :class:`~refvault.errors.Forbidden` and nothing changes. Audited as ``set_policy`` by ``scope``.
        """
        if policy is None:
            self._call("DELETE", "/policy", scope)
            return
        if not isinstance(policy, Policy):
            raise InvalidArgument("policy must be a refvault.policy.Policy (or None to remove the tenant's policy)")
        self._call("PUT", "/policy", scope, json_body=policy.to_dict())

    # -- run budgets (refvault.budgets) ----------------------------------------------------------

    def usage(self, scope: Scope) -> Usage:
        """What ``scope``'s run spent and has left (``GET /v1/usage``); as :meth:`refvault.Vault.usage`."""
        try:
            return Usage.from_json(scope, self._json(self._call("GET", "/usage", scope)))
        except InvalidArgument:
            raise StorageError(f"the refvault server at {self.url} sent a malformed usage") from None

    def set_budget(self, scope: Scope, budget: Budget, *, restart: bool = False, key_user: str | None = None) -> Usage:
        """Set ``scope``'s run budget (``PUT /v1/budget``, an admin key of the tenant; else
        :class:`~refvault.errors.Forbidden` and nothing changes); its usage after. ``key_user``: the admin
        key's own user, when it sets the budget of another user's session."""
        if not isinstance(budget, Budget):
            raise InvalidArgument("budget must be a refvault.Budget(...)")
        params = {"user": scope.user, "restart": "true" if restart else "false"}
        caller = _as(scope, key_user)
        answer = self._json(self._call("PUT", "/budget", caller, params=params, json_body=budget.to_json()))
        try:
            return Usage.from_json(scope, answer)
        except InvalidArgument:
            raise StorageError(f"the refvault server at {self.url} sent a malformed usage") from None

    def clear_budget(self, scope: Scope, *, key_user: str | None = None) -> bool:
        """Remove ``scope``'s run budget (``DELETE /v1/budget``, an admin key); True once it has none."""
        self._call("DELETE", "/budget", _as(scope, key_user), params={"user": scope.user})
        return True


def _as(scope: Scope, key_user: str | None) -> Scope:
    """The scope an admin key acts in to change ``scope``'s run: its own user, the run's session."""
    return scope if key_user is None else Scope(scope.tenant, key_user, scope.session)
