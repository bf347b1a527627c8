"""A run's evidence calls of :class:`~refvault.client.Client` (mixed in): recording what a decision used and the
replay packet, each the HTTP form of the :class:`~refvault.Vault` method of the same name
(:mod:`refvault.vault.runs`), with the same signature, return type and errors (the server runs the checks).

Values come back as :mod:`refvault.runs`'s own; an answer that does not parse as one is a
:class:`~refvault.errors.StorageError` naming the server, never repeating the answer.
"""

from __future__ import annotations

from typing import Any

from refvault.client_wire import ClientHost
from refvault.errors import InvalidArgument, StorageError
from refvault.model import Scope, format_time, parse_time
from refvault.runs import EVIDENCE_KINDS, EvidenceRecord, EvidenceRequest, ReplayEntry, ReplayPacket

__all__ = ["RunCalls"]


class RunCalls(ClientHost):
    """A run's evidence over HTTP (mixed into :class:`~refvault.client.Client`)."""

    def record_evidence(self, scope: Scope, request: EvidenceRequest) -> EvidenceRecord:
        """``POST /v1/evidence``: :meth:`Vault.record_evidence <refvault.Vault.record_evidence>` on the server."""
        if not isinstance(request, EvidenceRequest):
            raise InvalidArgument("request must be a refvault.runs.EvidenceRequest")
        body: dict[str, Any] = {
            "kind": request.kind,
            "decision": request.decision,
            "artifact_id": request.artifact_id,
            "decided_at": format_time(request.decided_at),
            "satisfied": request.satisfied,
            "reasons": list(request.reasons),
            "explanation": request.explanation,
            "charged": dict(request.charged),
        }
        if request.replaces is not None:
            body["replaces"] = request.replaces
        answer = self._json(self._call("POST", "/evidence", scope, json_body=body))
        try:
            return _record(answer, scope)
        except (KeyError, TypeError, ValueError) as exc:
            raise StorageError(f"the refvault server at {self.url} sent a malformed evidence record") from exc

    def replay_packet(self, scope: Scope, session: str) -> ReplayPacket:
        """``GET /v1/replay-packet`` in run ``session`` of ``scope``'s tenant and user (the key must allow that
        session): :meth:`Vault.replay_packet <refvault.Vault.replay_packet>` on the server."""
        run = Scope(scope.tenant, scope.user, session)
        answer = self._json(self._call("GET", "/replay-packet", run))
        try:
            records = tuple(_record(item, run) for item in answer["records"])
            evidence = tuple(
                ReplayEntry(
                    artifact_id=str(item["artifact_id"]),
                    content_hash=None if item["content_hash"] is None else str(item["content_hash"]),
                    decisions=tuple(str(d) for d in item["decisions"]),
                    availability=str(item["availability"]),
                    now=dict(item["now"]),
                    replaced_by=None if item["replaced_by"] is None else str(item["replaced_by"]),
                )
                for item in answer["evidence"]
            )
            return ReplayPacket(run.tenant, run.user, run.session, parse_time(answer["at"]), evidence, records)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StorageError(f"the refvault server at {self.url} sent a malformed replay packet") from exc


def _record(item: Any, scope: Scope) -> EvidenceRecord:
    kind = item["kind"]
    if kind not in EVIDENCE_KINDS:
        raise ValueError("kind")
    return EvidenceRecord(
        seq=int(item["seq"]),
        tenant=scope.tenant,
        user=scope.user,
        session=str(item["session"]),
        kind=kind,
        decision=str(item["decision"]),
        artifact_id=str(item["artifact_id"]),
        content_hash=None if item["content_hash"] is None else str(item["content_hash"]),
        decided_at=parse_time(item["decided_at"]),
        recorded_at=parse_time(item["recorded_at"]),
        satisfied=bool(item["satisfied"]),
        reasons=tuple(str(code) for code in item["reasons"]),
        replaces=None if item["replaces"] is None else str(item["replaces"]),
        explanation=str(item["explanation"]),
        charged={str(k): int(v) for k, v in dict(item["charged"]).items()},
    )
