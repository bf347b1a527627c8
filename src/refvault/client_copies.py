"""The derived-copy calls of :class:`~refvault.client.Client` (mixed in): redaction, receipts, lineage, staleness,
holds and replay status, each the HTTP form of the :class:`~refvault.Vault` method of the same name
(:mod:`refvault.vault.copies`), with the same signature, return type and errors (the server runs the checks).

Values come back as :mod:`refvault.copies`'s own (:class:`~refvault.copies.Receipt`,
:class:`~refvault.copies.LineageGraph`, :class:`~refvault.copies.Hold`); an answer that does not parse as one
is a :class:`~refvault.errors.StorageError` naming the server, never repeating the answer. A receipt whose
``receipt_hash`` is not the hash of its own fields is refused the same way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import httpx

from refvault.client_wire import ClientHost
from refvault.copies import Hold, LineageGraph, LineageStatus, Receipt, canonical_json
from refvault.errors import InvalidArgument, InvalidMetadata, StorageError
from refvault.ids import check_artifact_id
from refvault.model import Descriptor, Scope, parse_time
from refvault.policy import DEFAULT_PURPOSE, DEFAULT_RECIPIENT

__all__ = ["CopyCalls"]

_Holds: TypeAlias = "list[Hold]"  # named here: inside Client, ``list`` is Client.list
_STATUSES = ("current", "stale", "revoked")


class CopyCalls(ClientHost):
    """Derived copies over HTTP (mixed into :class:`~refvault.client.Client`)."""

    if TYPE_CHECKING:

        def _descriptor(self, response: httpx.Response) -> Descriptor: ...

    def _malformed(self, what: str) -> StorageError:
        return StorageError(f"the refvault server at {self.url} sent a malformed {what}")

    # -- redaction derivatives and receipts ------------------------------------------------------

    def redact(
        self, scope: Scope, artifact_id: str, *, redactor: str = "pii.v1", fields: Sequence[str] | None = None
    ) -> Descriptor:
        """``POST /v1/artifacts/{id}/redact``: :meth:`Vault.redact <refvault.Vault.redact>` on the server (owner only;
        made once and reused); the derivative's descriptor."""
        body: dict[str, Any] = {"redactor": redactor, "fields": None}
        if fields is not None:
            if isinstance(fields, str | bytes) or not isinstance(fields, Iterable):
                raise InvalidArgument('fields must be a list of dotted JSON paths, e.g. ["user.email"]')
            body["fields"] = list(dict.fromkeys(fields))
        response = self._call("POST", self._path(artifact_id, "/redact"), scope, artifact_id, json_body=body)
        return self._descriptor(response)

    def receipt(self, scope: Scope, artifact_id: str) -> Receipt:
        """``GET /v1/artifacts/{id}/receipt``: :meth:`Vault.receipt <refvault.Vault.receipt>`."""
        answer = self._json(self._call("GET", self._path(artifact_id, "/receipt"), scope, artifact_id))
        try:
            if not isinstance(answer, dict):
                raise TypeError("not an object")
            found = Receipt.from_dict(answer)
        except (KeyError, TypeError, ValueError, InvalidMetadata):
            raise self._malformed("receipt") from None
        digest = "sha256:" + hashlib.sha256(canonical_json(found.body()).encode("ascii")).hexdigest()
        if found.receipt_hash != digest:  # what the server says it hashed is not what it sent
            raise self._malformed("receipt (its receipt_hash is not the hash of its fields)")
        return found

    def refresh(self, scope: Scope, artifact_id: str) -> Descriptor:
        """``POST /v1/artifacts/{id}/refresh``: :meth:`Vault.refresh <refvault.Vault.refresh>`."""
        return self._descriptor(self._call("POST", self._path(artifact_id, "/refresh"), scope, artifact_id))

    # -- lineage and staleness --------------------------------------------------------------------

    def lineage(
        self, scope: Scope, artifact_id: str, *, direction: str = "both", depth: int | None = None
    ) -> LineageGraph:
        """``GET /v1/artifacts/{id}/lineage``: :meth:`Vault.lineage <refvault.Vault.lineage>`."""
        if direction not in ("up", "down", "both"):
            raise InvalidArgument("direction is 'up', 'down' or 'both'")
        if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 0):
            raise InvalidArgument("depth is a whole number of levels (0 or more), or None for all")
        params: dict[str, Any] = {"direction": direction}
        if depth is not None:
            params["depth"] = depth
        answer = self._json(self._call("GET", self._path(artifact_id, "/lineage"), scope, artifact_id, params=params))
        try:
            if not isinstance(answer, dict):
                raise TypeError("not an object")
            return LineageGraph.from_dict(answer)
        except (KeyError, TypeError, ValueError):
            raise self._malformed("lineage graph") from None

    def lineage_status(self, scope: Scope, artifact_id: str) -> LineageStatus:
        """``GET /v1/artifacts/{id}/lineage-status``: :meth:`Vault.lineage_status <refvault.Vault.lineage_status>`."""
        answer = self._json(self._call("GET", self._path(artifact_id, "/lineage-status"), scope, artifact_id))
        status = answer.get("status") if isinstance(answer, dict) else None
        if status not in _STATUSES:
            raise self._malformed("lineage status")
        return cast(LineageStatus, status)

    def supersede(self, scope: Scope, old_id: str, new_id: str, *, reason: str) -> None:
        """``POST /v1/artifacts/{old_id}/supersede``: :meth:`Vault.supersede <refvault.Vault.supersede>`."""
        body = {"by": check_artifact_id(new_id), "reason": reason}
        self._call("POST", self._path(old_id, "/supersede"), scope, old_id, json_body=body)

    def revoke_artifact(self, scope: Scope, artifact_id: str, *, reason: str) -> None:
        """``POST /v1/artifacts/{id}/revoke``: :meth:`Vault.revoke_artifact <refvault.Vault.revoke_artifact>`."""
        self._call("POST", self._path(artifact_id, "/revoke"), scope, artifact_id, json_body={"reason": reason})

    # -- holds ------------------------------------------------------------------------------------

    def hold(self, scope: Scope, artifact_id: str, *, reason: str) -> Hold:
        """``POST /v1/artifacts/{id}/holds``: :meth:`Vault.hold <refvault.Vault.hold>`; the hold made."""
        response = self._call(
            "POST", self._path(artifact_id, "/holds"), scope, artifact_id, json_body={"reason": reason}
        )
        return self._hold(scope, self._json(response))

    def release(self, scope: Scope, artifact_id: str, hold_id: str) -> None:
        """``DELETE /v1/artifacts/{id}/holds/{hold_id}``: :meth:`Vault.release <refvault.Vault.release>`."""
        path = self._path(artifact_id, "/holds/" + _path_segment(hold_id))
        self._call("DELETE", path, scope, artifact_id)

    def holds(self, scope: Scope, artifact_id: str) -> _Holds:
        """``GET /v1/artifacts/{id}/holds``: :meth:`Vault.holds <refvault.Vault.holds>`, oldest first."""
        answer = self._json(self._call("GET", self._path(artifact_id, "/holds"), scope, artifact_id))
        if not isinstance(answer, dict) or not isinstance(answer.get("items"), list):
            raise self._malformed("hold list")
        return [self._hold(scope, item) for item in answer["items"]]

    def _hold(self, scope: Scope, answer: object) -> Hold:
        try:
            if not isinstance(answer, dict):
                raise TypeError("not an object")
            return Hold(
                tenant=scope.tenant,  # the server acts in the key's tenant only
                artifact_id=str(answer["artifact_id"]),
                hold_id=str(answer["hold_id"]),
                reason=str(answer["reason"]),
                at=parse_time(str(answer["at"])),
                user=str(answer["user"]),
            )
        except (KeyError, TypeError, ValueError, InvalidMetadata):
            raise self._malformed("hold") from None

    # -- replay -----------------------------------------------------------------------------------

    def replay_status(
        self,
        scope: Scope,
        ids: Sequence[str],
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> dict[str, dict[str, Any]]:
        """``POST /v1/replay-status``: :meth:`Vault.replay_status <refvault.Vault.replay_status>` for ``purpose``
        and ``recipient`` (sent as the read's ``Refvault-Purpose`` and ``Refvault-Recipient``)."""
        if isinstance(ids, str) or not isinstance(ids, Sequence):
            raise InvalidArgument("ids is a list of artifact ids")
        checked = [check_artifact_id(i) for i in ids]
        response = self._call(
            "POST", "/replay-status", scope, json_body={"ids": checked}, purpose=purpose, recipient=recipient
        )
        answer = self._json(response)
        if not isinstance(answer, dict) or not all(isinstance(v, dict) for v in answer.values()):
            raise self._malformed("replay status")
        return {str(k): dict(v) for k, v in answer.items()}


def _path_segment(hold_id: object) -> str:
    """A hold id as one path segment: what ``Vault.hold`` issues passes as it is; anything else is sent as a
    placeholder the server answers with the same not-found (never put into the URL)."""
    if isinstance(hold_id, str) and hold_id.startswith("hold_") and hold_id[5:].isalnum() and hold_id.isascii():
        return hold_id
    return "hold_invalid"
