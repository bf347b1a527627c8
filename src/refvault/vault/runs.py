"""A run's evidence (mixed into the vault): recording what each decision used, and the replay packet.

A run is a scope's session. :meth:`Runs.record_evidence` appends one :class:`~refvault.runs.EvidenceRecord`
(with an audit entry, in one transaction); :func:`refvault.evidence.reread` with ``decision=`` and
:func:`refvault.evidence.reacquire` call it. :meth:`Runs.replay_packet` lists what a run's decisions used,
each with its availability now, judged by :meth:`~refvault.Vault.replay_status` in the run's own scope: the
ordinary authority and policy checks, never a bypass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from refvault.errors import Expired, NotFound, PolicyDenied
from refvault.ids import check_artifact_id
from refvault.limits import MAX_REPLAY_IDS
from refvault.model import Scope
from refvault.policy import DEFAULT_PURPOSE, DEFAULT_RECIPIENT
from refvault.runs import MAX_RUN_RECORDS, EvidenceRecord, EvidenceRequest, ReplayEntry, ReplayPacket
from refvault.vault.audit_trail import WRITTEN, entry_of
from refvault.vault.copies.common import CopiesHost, checked_scope

__all__ = ["Runs"]


class Runs(CopiesHost):
    """:meth:`record_evidence` and :meth:`replay_packet` (mixed into :class:`refvault.Vault`)."""

    if TYPE_CHECKING:

        def replay_status(
            self, scope: Scope, ids: Sequence[str], *, purpose: str = ..., recipient: str = ...
        ) -> dict[str, dict[str, Any]]: ...

    def record_evidence(self, scope: Scope, request: EvidenceRequest) -> EvidenceRecord:
        """Append one evidence record to ``scope``'s run (its session); the stored record.

        The content hash recorded is the artifact's own, and only if ``scope`` may read the artifact now
        (else None: an id the caller cannot read is recorded without anything about it). Audited as
        ``evidence`` in the same transaction. Records are never changed or removed by the vault.
        """
        owner = checked_scope(scope)
        if not isinstance(request, EvidenceRequest):
            raise TypeError("request must be a refvault.runs.EvidenceRequest")
        artifact_id = check_artifact_id(request.artifact_id)
        replaces = None if request.replaces is None else check_artifact_id(request.replaces)
        with self._audited("evidence", owner, artifact_id) as facts:
            try:
                content_hash: str | None = (
                    "sha256:" + self._authorized(owner, artifact_id, DEFAULT_PURPOSE, DEFAULT_RECIPIENT).digest
                )
            except (NotFound, Expired, PolicyDenied):
                content_hash = None
            record = EvidenceRecord(
                seq=0,
                tenant=owner.tenant,
                user=owner.user,
                session=owner.session,
                kind=request.kind,
                decision=request.decision,
                artifact_id=artifact_id,
                content_hash=content_hash,
                decided_at=request.decided_at,
                recorded_at=self.clock(),
                satisfied=request.satisfied,
                reasons=request.reasons,
                replaces=replaces,
                explanation=request.explanation,
                charged=request.charged,
            )
            entry = None
            if self._audit_log is not None:
                self._audit_log.flush()
                detail = request.kind if replaces is None else f"{request.kind}: replaces {replaces}"
                entry = entry_of(
                    record.recorded_at,
                    "evidence",
                    owner,
                    artifact_id,
                    "ok",
                    {"detail": detail, "selection": request.decision, "content_hash": content_hash},
                )
            stored = self.catalog.add_evidence(record, audit=entry)
            facts[WRITTEN] = entry is not None
        return stored

    def replay_packet(self, scope: Scope, session: str) -> ReplayPacket:
        """Every evidence reference the decisions of run ``session`` (of ``scope``'s tenant and user) used, each
        once in first-use order with its availability now (``available``, ``expired``, ``deleted``,
        ``revoked``), and every record of the run in order.

        Availability is :meth:`replay_status` in the run's scope: the same authority and policy checks a read
        makes (an artifact the policy now refuses is ``available`` with ``allowed: False``), never a bypass.
        Metadata only. The packet lists at most 10,000 records.
        """
        run = Scope(checked_scope(scope).tenant, scope.user, session)
        with self._audited("replay_packet", run) as facts:
            records = self.catalog.evidence_records(run.tenant, run.user, run.session, limit=MAX_RUN_RECORDS)
            order: dict[str, list[str]] = {}
            hashes: dict[str, str | None] = {}
            replaced_by: dict[str, str] = {}
            for record in records:
                if record.replaces is not None:
                    order.setdefault(record.replaces, [])
                    replaced_by[record.replaces] = record.artifact_id
                decisions = order.setdefault(record.artifact_id, [])
                if record.decision not in decisions:
                    decisions.append(record.decision)
                if record.content_hash is not None:
                    hashes[record.artifact_id] = record.content_hash
            ids = list(order)
            now: dict[str, dict[str, Any]] = {}
            for start in range(0, len(ids), MAX_REPLAY_IDS):
                now.update(self.replay_status(run, ids[start : start + MAX_REPLAY_IDS]))
            evidence = tuple(
                ReplayEntry(
                    artifact_id=artifact_id,
                    content_hash=hashes.get(artifact_id),
                    decisions=tuple(order[artifact_id]),
                    availability=str(now[artifact_id]["state"]),
                    now=now[artifact_id],
                    replaced_by=replaced_by.get(artifact_id),
                )
                for artifact_id in ids
            )
            facts["records"] = len(records)
        return ReplayPacket(run.tenant, run.user, run.session, self.clock(), evidence, tuple(records))
