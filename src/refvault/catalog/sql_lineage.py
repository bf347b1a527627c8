"""The derived-copy records of :class:`~refvault.catalog.sql.SqlCatalog` (mixed in): the lineage index, marks,
holds, removals and byte totals (:mod:`refvault.copies`). Every method is one transaction or one read.

Lists of ids are read in batches of :data:`BATCH` (an ``IN`` list each), so a 100,000-node lineage walk is a
few hundred indexed reads, never one per node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from refvault.blobs.base import BlobKey
from refvault.catalog.audit_log import AuditEntry
from refvault.catalog.base import Derivation, Manifest
from refvault.catalog.failures import translated
from refvault.catalog.macs import micros
from refvault.catalog.rows import from_us, lineage_row
from refvault.catalog.schema import artifacts, derivations, grants, holds, lineage, marks
from refvault.copies import Hold, LineageRow, Mark, mark_rank
from refvault.model import Scope

if TYPE_CHECKING:
    from refvault.catalog.macs import ManifestKeys

__all__ = ["BATCH", "SqlLineage", "lineage_rows"]

BATCH = 500
_LINEAGE_COLUMNS = ("artifact_id", "tenant", "user_name", "session", "digest", "size", "derived_from", "origin")


def _batches(ids: Sequence[str]) -> list[list[str]]:
    unique = list(dict.fromkeys(ids))
    return [unique[i : i + BATCH] for i in range(0, len(unique), BATCH)]


def lineage_rows(manifests: Sequence[Manifest]) -> list[dict[str, str]]:
    """The reverse-index rows of newly published manifests: one per (source, derived artifact)."""
    return [
        {"tenant": m.scope.tenant, "source_id": source, "derived_id": m.artifact_id}
        for m in manifests
        for source in dict.fromkeys(m.derived_from)
    ]


def _mark(row: Any) -> Mark:
    return Mark(
        tenant=row.tenant,
        artifact_id=row.artifact_id,
        state=row.state,
        at=from_us(row.at_us),
        by=row.by_id,
        rule=row.rule,
        reason_hash=row.reason_hash,
        content_hash=row.content_hash,
        size=row.size,
        owner=None if row.user_name is None else Scope(row.tenant, row.user_name, row.session),
    )


def _mark_row(mark: Mark) -> dict[str, Any]:
    return {
        "tenant": mark.tenant,
        "artifact_id": mark.artifact_id,
        "state": mark.state,
        "at_us": micros(mark.at),
        "by_id": mark.by,
        "rule": mark.rule,
        "reason_hash": mark.reason_hash,
        "content_hash": mark.content_hash,
        "size": mark.size,
        "user_name": None if mark.owner is None else mark.owner.user,
        "session": None if mark.owner is None else mark.owner.session,
    }


class SqlLineage:
    """Lineage index, marks, holds and removals over the catalog's engine (see the module docstring)."""

    if TYPE_CHECKING:
        manifest_keys: ManifestKeys
        _postgres: bool

        def _write(self) -> sa.Connection: ...
        def _read(self) -> sa.Connection: ...
        def _manifest(self, row: Any) -> Manifest: ...
        def _derivation(self, row: Any) -> Derivation: ...
        def _append_audit(self, conn: sa.Connection, entries: Sequence[AuditEntry]) -> list[AuditEntry]: ...

    @translated
    def by_ids(self, tenant: str, ids: Sequence[str]) -> dict[str, Manifest]:
        found: dict[str, Manifest] = {}
        with self._read() as conn:
            for batch in _batches(ids):  # by the unique id index alone (a tenant condition can make the
                # planner scan the tenant's rows by its scope index instead, once per batch); tenant checked here
                for row in conn.execute(sa.select(artifacts).where(artifacts.c.artifact_id.in_(batch))).all():
                    if row.tenant == tenant:
                        found[row.artifact_id] = self._manifest(row)
        return found

    @translated
    def lineage_rows(self, tenant: str, ids: Sequence[str]) -> dict[str, LineageRow]:
        columns = [artifacts.c[name] for name in _LINEAGE_COLUMNS]
        found: dict[str, LineageRow] = {}
        with self._read() as conn:
            for batch in _batches(ids):  # by the unique id index alone, as by_ids; the tenant checked here
                for row in conn.execute(sa.select(*columns).where(artifacts.c.artifact_id.in_(batch))).all():
                    if row.tenant == tenant:
                        found[row.artifact_id] = lineage_row(row)
        return found

    @translated
    def derived_ids(self, tenant: str, sources: Sequence[str]) -> list[tuple[str, str]]:
        edges: list[tuple[str, str]] = []
        with self._read() as conn:
            for batch in _batches(sources):
                where = sa.and_(lineage.c.tenant == tenant, lineage.c.source_id.in_(batch))
                statement = sa.select(lineage.c.source_id, lineage.c.derived_id).where(where)
                edges.extend((row.source_id, row.derived_id) for row in conn.execute(statement))
        return sorted(edges)

    @translated
    def marks(self, tenant: str, ids: Sequence[str]) -> dict[str, Mark]:
        found: dict[str, Mark] = {}
        with self._read() as conn:
            for batch in _batches(ids):
                where = sa.and_(marks.c.tenant == tenant, marks.c.artifact_id.in_(batch))
                found.update((row.artifact_id, _mark(row)) for row in conn.execute(sa.select(marks).where(where)))
        return found

    def _put_mark(self, conn: sa.Connection, mark: Mark) -> Mark:
        key = sa.and_(marks.c.tenant == mark.tenant, marks.c.artifact_id == mark.artifact_id)
        statement = sa.select(marks).where(key)
        row = conn.execute(statement.with_for_update() if self._postgres else statement).first()
        if row is None:
            conn.execute(marks.insert().values(**_mark_row(mark)))
            return mark
        held = _mark(row)
        if mark_rank(mark.state) < mark_rank(held.state):
            return held
        conn.execute(marks.update().where(key).values(**_mark_row(mark)))
        return mark

    @translated
    def set_mark(self, mark: Mark, *, audit: AuditEntry | None = None) -> Mark:
        with self._write() as conn, conn.begin():
            kept = self._put_mark(conn, mark)
            if audit is not None:
                self._append_audit(conn, [audit])
            return kept

    @translated
    def holds(self, tenant: str, ids: Sequence[str]) -> list[Hold]:
        found: list[Hold] = []
        with self._read() as conn:
            for batch in _batches(ids):
                where = sa.and_(holds.c.tenant == tenant, holds.c.artifact_id.in_(batch))
                for row in conn.execute(sa.select(holds).where(where).order_by(holds.c.at_us, holds.c.hold_id)):
                    found.append(
                        Hold(row.tenant, row.artifact_id, row.hold_id, row.reason, from_us(row.at_us), row.user_name)
                    )
        return found

    @translated
    def add_hold(self, hold: Hold, *, audit: AuditEntry | None = None) -> None:
        with self._write() as conn, conn.begin():
            conn.execute(
                holds.insert().values(
                    tenant=hold.tenant,
                    artifact_id=hold.artifact_id,
                    hold_id=hold.hold_id,
                    reason=hold.reason,
                    at_us=micros(hold.at),
                    user_name=hold.user,
                )
            )
            if audit is not None:
                self._append_audit(conn, [audit])

    @translated
    def release_hold(self, tenant: str, artifact_id: str, hold_id: str, *, audit: AuditEntry | None = None) -> bool:
        where = sa.and_(holds.c.tenant == tenant, holds.c.artifact_id == artifact_id, holds.c.hold_id == hold_id)
        with self._write() as conn, conn.begin():
            gone = bool(conn.execute(holds.delete().where(where)).rowcount)
            if gone and audit is not None:
                self._append_audit(conn, [audit])
            return gone

    @translated
    def remove(
        self, removals: Sequence[tuple[Scope, str]], states: Sequence[Mark], audit: Sequence[AuditEntry]
    ) -> list[str]:
        """In one write transaction: delete each ``(owner scope, id)`` row that has no hold, mark it (its mark
        in ``states``), revoke its grants, and append the audit entries about the ids deleted. The ids deleted."""
        by_id = {m.artifact_id: m for m in states}
        deleted: list[str] = []
        with self._write() as conn, conn.begin():
            for scope, artifact_id in removals:
                held = conn.execute(
                    sa.select(holds.c.hold_id)
                    .where(holds.c.tenant == scope.tenant, holds.c.artifact_id == artifact_id)
                    .limit(1)
                ).first()
                if held is not None:
                    continue
                where = sa.and_(
                    artifacts.c.artifact_id == artifact_id,
                    artifacts.c.tenant == scope.tenant,
                    artifacts.c.user_name == scope.user,
                    artifacts.c.session == scope.session,
                )
                if not conn.execute(artifacts.delete().where(where)).rowcount:
                    continue
                deleted.append(artifact_id)
                mark = by_id.get(artifact_id)
                if mark is not None:
                    self._put_mark(conn, mark)
            if deleted:
                entries = [e for e in audit if e.artifact_id is None or e.artifact_id in set(deleted)]
                if entries:
                    self._append_audit(conn, entries)
            return deleted

    @translated
    def live_grants(self, tenant: str, ids: Sequence[str]) -> list[str]:
        found: list[str] = []
        with self._read() as conn:
            for batch in _batches(ids):
                where = sa.and_(
                    grants.c.tenant == tenant, grants.c.artifact_id.in_(batch), grants.c.revoked_us.is_(None)
                )
                found.extend(conn.scalars(sa.select(grants.c.grant_id).where(where)))
        return sorted(found)

    @translated
    def derivations_of_many(self, sources: Sequence[BlobKey]) -> dict[BlobKey, list[Derivation]]:
        """:meth:`derivations_of` of many blobs in a few batched reads (a lineage walk's internal copies)."""
        found: dict[BlobKey, list[Derivation]] = {}
        by_namespace: dict[str, list[str]] = {}
        for key in sources:
            by_namespace.setdefault(key.namespace, []).append(key.digest)
        with self._read() as conn:
            for namespace, digests in by_namespace.items():
                for batch in _batches(digests):
                    where = sa.and_(derivations.c.namespace == namespace, derivations.c.source_digest.in_(batch))
                    for row in conn.execute(sa.select(derivations).where(where).order_by(derivations.c.kind)):
                        derivation = self._derivation(row)
                        found.setdefault(derivation.source, []).append(derivation)
        return found

    @translated
    def is_referenced_by_artifact(self, key: BlobKey) -> bool:
        by_artifact = sa.exists().where(artifacts.c.namespace == key.namespace, artifacts.c.digest == key.digest)
        with self._read() as conn:
            return bool(conn.execute(sa.select(by_artifact)).scalar())

    @translated
    def sessions(self, tenant: str, user: str, *, limit: int) -> list[str]:
        newest = sa.func.max(artifacts.c.seq)
        with self._read() as conn:
            rows = conn.execute(
                sa.select(artifacts.c.session)
                .where(artifacts.c.tenant == tenant, artifacts.c.user_name == user)
                .group_by(artifacts.c.session)
                .order_by(newest.desc())
                .limit(limit)
            ).all()
        return [str(row.session) for row in rows]

    @translated
    def stored_bytes(self, tenant: str, user: str | None = None, session: str | None = None) -> int:
        where = [artifacts.c.tenant == tenant]
        if user is not None:
            where.append(artifacts.c.user_name == user)
        if session is not None:
            where.append(artifacts.c.session == session)
        with self._read() as conn:
            total = conn.execute(sa.select(sa.func.coalesce(sa.func.sum(artifacts.c.size), 0)).where(*where)).scalar()
        return int(total or 0)
