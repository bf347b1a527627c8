"""The authority records of :class:`~refvault.catalog.sql.SqlCatalog` (mixed in): sharing grants (rows and
queries in :mod:`refvault.catalog.grant_rows`, each row MAC'd like a manifest) and the audit log (one hash
chain per tenant, in :mod:`refvault.catalog.audit_rows`), and the candidate ids a read searches when an id
looks mis-copied (:mod:`refvault.vault.miscopy`). Every method is one transaction or one read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import sqlalchemy as sa

from refvault import observe
from refvault.catalog import audit_rows, grant_rows
from refvault.catalog.audit_log import GENESIS, AuditEntry
from refvault.catalog.base import Grant
from refvault.catalog.failures import describe, translated
from refvault.catalog.grant_rows import grant_row, live, of_grantee, of_owner
from refvault.catalog.schema import artifacts, grants
from refvault.catalog.statements import scope_match
from refvault.errors import StorageError
from refvault.model import Scope

if TYPE_CHECKING:
    from refvault.catalog.macs import ManifestKeys

__all__ = ["SqlAuthority"]


class SqlAuthority:
    """Grant rows and the audit chain over the catalog's engine (see the module docstring)."""

    if TYPE_CHECKING:
        manifest_keys: ManifestKeys
        _engine: sa.Engine
        _audit_insert: str

        def _write(self) -> sa.Connection: ...
        def _read(self) -> sa.Connection: ...

    # -- the ids a mis-copied id is compared with (refvault.vault.miscopy) -----------------

    @translated
    def recent_ids(self, scope: Scope, limit: int) -> list[str]:
        newest = (artifacts.c.created_us.desc(), artifacts.c.seq.desc())  # in_scope's order
        query = sa.select(artifacts.c.artifact_id).where(scope_match(scope)).order_by(*newest).limit(limit)
        with self._read() as conn:
            return [str(found) for found in conn.execute(query).scalars()]

    # -- sharing grants (rows and queries: refvault.catalog.grant_rows) ------------------

    @translated
    def add_grant(self, grant: Grant) -> None:
        with self._write() as conn, conn.begin():
            conn.execute(grants.insert().values(**grant_row(grant, self.manifest_keys.sign(grant))))

    @translated
    def grants_for_artifact(self, owner: Scope, artifact_id: str) -> list[Grant]:
        with self._read() as conn:
            return grant_rows.select(conn, self.manifest_keys, of_owner(owner), grants.c.artifact_id == artifact_id)

    @translated
    def find_grant(self, grantee: Scope, artifact_id: str, now: datetime) -> list[Grant]:
        with self._read() as conn:
            found = grant_rows.select(
                conn, self.manifest_keys, of_grantee(grantee), grants.c.artifact_id == artifact_id, live(now)
            )
        return grant_rows.held(found, grantee, now)

    @translated
    def revoke_grant(self, owner: Scope, grant_id: str, at: datetime) -> Grant | None:
        with self._write() as conn, conn.begin():
            return grant_rows.revoke(conn, self.manifest_keys, owner, grant_id, at)

    @translated
    def shared_with(self, grantee: Scope, now: datetime) -> list[Grant]:
        with self._read() as conn:
            found = grant_rows.select(conn, self.manifest_keys, of_grantee(grantee), live(now), newest=True)
        return grant_rows.held(found, grantee, now)

    @translated
    def audit_grants(self) -> Iterator[tuple[str, str | None]]:
        with self._read() as conn:
            rows = conn.execute(sa.select(grants).order_by(grants.c.created_us, grants.c.grant_id)).all()
        return iter([(str(row.artifact_id), grant_rows.grant_fault(self.manifest_keys, row)) for row in rows])

    # -- the audit log (refvault.catalog.audit_rows) -------------------------------------

    @translated
    def append_audit(self, entries: Sequence[AuditEntry]) -> list[AuditEntry]:
        if not entries:
            return []
        with self._write() as conn, conn.begin():
            return self._append_audit(conn, entries)

    def _append_audit(self, conn: sa.Connection, entries: Sequence[AuditEntry]) -> list[AuditEntry]:
        with observe.timed("audit_append"):
            return audit_rows.append(conn, entries, self._engine.dialect.name, self._audit_insert)

    def audit_entries(
        self, tenant: str, *, after: int = 0, upto: int | None = None, artifact_id: str | None = None
    ) -> Iterator[AuditEntry]:
        """Streamed from one read (a server-side cursor on PostgreSQL), in batches."""
        query = audit_rows.entries_query(tenant, after, upto, artifact_id)
        try:
            with self._read() as conn:
                for row in conn.execution_options(stream_results=True, yield_per=5000).execute(query):
                    yield AuditEntry(*row)
        except sa.exc.SQLAlchemyError as exc:
            raise StorageError(f"the catalog failed: {describe(exc)}") from None

    @translated
    def audit_head(self, tenant: str) -> tuple[int, str]:
        with self._read() as conn:
            row = conn.execute(audit_rows.HEAD, {"tenant": tenant}).first()
        return (0, GENESIS) if row is None else (int(row.seq), str(row.hash))

    @translated
    def audit_tenants(self) -> list[str]:
        with self._read() as conn:
            return sorted(conn.scalars(audit_rows.tenants_query()))
