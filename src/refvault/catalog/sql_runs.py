"""The evidence records of runs over the catalog's engine (mixed into :class:`~refvault.catalog.sql.SqlCatalog`).

Each record is one row of ``refvault_evidence`` (migration 12), appended with its audit entry in one
transaction and never changed; a run's records are read by the ``(tenant, user, session, seq)`` index.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from refvault.catalog.audit_log import AuditEntry
from refvault.catalog.failures import translated
from refvault.catalog.macs import micros
from refvault.catalog.rows import from_us
from refvault.catalog.schema import evidence
from refvault.runs import EVIDENCE_KINDS, EvidenceKind, EvidenceRecord

__all__ = ["SqlRuns", "evidence_values", "record_of"]


class SqlRuns:
    """:meth:`add_evidence` and :meth:`evidence_records` (see the module docstring)."""

    if TYPE_CHECKING:

        def _write(self) -> sa.Connection: ...
        def _read(self) -> sa.Connection: ...
        def _append_audit(self, conn: sa.Connection, entries: Sequence[AuditEntry]) -> list[AuditEntry]: ...

    @translated
    def add_evidence(self, record: EvidenceRecord, *, audit: AuditEntry | None = None) -> EvidenceRecord:
        with self._write() as conn, conn.begin():
            seq = conn.execute(evidence.insert().values(**evidence_values(record))).inserted_primary_key
            if audit is not None:
                self._append_audit(conn, [audit])
        return replace(record, seq=int(seq[0]) if seq else 0)

    @translated
    def evidence_records(self, tenant: str, user: str, session: str, *, limit: int) -> list[EvidenceRecord]:
        where = sa.and_(evidence.c.tenant == tenant, evidence.c.user_name == user, evidence.c.session == session)
        with self._read() as conn:
            rows = conn.execute(sa.select(evidence).where(where).order_by(evidence.c.seq).limit(limit))
            return [record_of(row._mapping) for row in rows]


def evidence_values(record: EvidenceRecord) -> dict[str, Any]:
    """The column values of ``record`` (without ``seq``, which the table assigns)."""
    return {
        "tenant": record.tenant,
        "user_name": record.user,
        "session": record.session,
        "kind": record.kind,
        "decision": record.decision,
        "artifact_id": record.artifact_id,
        "content_hash": record.content_hash,
        "decided_us": micros(record.decided_at),
        "recorded_us": micros(record.recorded_at),
        "satisfied": record.satisfied,
        "reasons": ",".join(record.reasons),
        "replaces": record.replaces,
        "explanation": record.explanation,
        "charged": json.dumps(dict(record.charged), sort_keys=True),
    }


def record_of(row: Any) -> EvidenceRecord:
    """The record a row (a mapping of column values, ``seq`` included) holds."""
    kind: EvidenceKind = next((k for k in EVIDENCE_KINDS if k == row["kind"]), "used")
    charged = json.loads(row["charged"] or "{}")
    return EvidenceRecord(
        seq=int(row["seq"]),
        tenant=row["tenant"],
        user=row["user_name"],
        session=row["session"],
        kind=kind,
        decision=row["decision"],
        artifact_id=row["artifact_id"],
        content_hash=row["content_hash"],
        decided_at=from_us(row["decided_us"]),
        recorded_at=from_us(row["recorded_us"]),
        satisfied=bool(row["satisfied"]),
        reasons=tuple(code for code in row["reasons"].split(",") if code),
        replaces=row["replaces"],
        explanation=row["explanation"],
        charged={str(k): int(v) for k, v in charged.items()} if isinstance(charged, dict) else {},
    )
