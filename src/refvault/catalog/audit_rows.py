"""The audit log in SQL (:class:`~refvault.catalog.sql.SqlCatalog`'s side of :mod:`refvault.catalog.audit_log`).

* :func:`append` runs inside a write transaction: for each tenant (in sorted order) it makes sure the
  tenant's head row exists (``INSERT ... ON CONFLICT DO NOTHING``), locks it (``SELECT ... FOR UPDATE`` on
  PostgreSQL; SQLite's write transaction already holds the one write lock), chains the entries after it,
  inserts them straight through the driver (entries are tuples in column order) and moves the head. So
  several processes over one database extend one chain: no gap, no duplicate ``seq``, no fork.
* :func:`entries_query` selects entries in :class:`AuditEntry` field order (``AuditEntry(*row)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from refvault.catalog.audit_log import FIELDS, GENESIS, AuditEntry, by_tenant, seal_all
from refvault.catalog.schema import audit, audit_heads
from refvault.catalog.statements import dialect_insert

__all__ = ["HEAD", "append", "entries_query", "insert_sql", "tenants_query"]

_ENTRIES = sa.select(*(audit.c.user_name if name == "user" else audit.c[name] for name in FIELDS))
_HEAD_FOR_UPDATE = (
    sa.select(audit_heads.c.seq, audit_heads.c.hash)
    .where(audit_heads.c.tenant == sa.bindparam("tenant"))
    .with_for_update()
)
_SET_HEAD = (
    audit_heads.update()
    .where(audit_heads.c.tenant == sa.bindparam("head_tenant"))
    .values(seq=sa.bindparam("new_seq"), hash=sa.bindparam("new_hash"))
)
HEAD = sa.select(audit_heads.c.seq, audit_heads.c.hash).where(audit_heads.c.tenant == sa.bindparam("tenant"))


def insert_sql(dialect: str) -> str:
    """The driver's INSERT of one audit entry, its parameters in AuditEntry's field order."""
    columns = ", ".join("user_name" if name == "user" else name for name in FIELDS)
    marker = "%s" if dialect == "postgresql" else "?"
    return f"INSERT INTO {audit.name} ({columns}) VALUES ({', '.join([marker] * len(FIELDS))})"


def append(conn: sa.Connection, entries: Sequence[AuditEntry], dialect: str, insert: str) -> list[AuditEntry]:
    """Inside a write transaction: chain ``entries`` after their tenants' heads and store them (see above)."""
    stored: list[AuditEntry] = []
    insert_head = dialect_insert(dialect)(audit_heads).on_conflict_do_nothing()
    for tenant, drafts in by_tenant(entries):
        conn.execute(insert_head, {"tenant": tenant, "seq": 0, "hash": GENESIS})
        head = conn.execute(_HEAD_FOR_UPDATE, {"tenant": tenant}).one()
        sealed = seal_all(drafts, (head.seq, head.hash))
        conn.exec_driver_sql(insert, list(sealed))
        conn.execute(_SET_HEAD, {"head_tenant": tenant, "new_seq": sealed[-1].seq, "new_hash": sealed[-1].hash})
        stored.extend(sealed)
    return stored


def entries_query(tenant: str, after: int, upto: int | None, artifact_id: str | None) -> sa.Select[Any]:
    """A tenant's entries with ``after < seq <= upto`` (of one artifact if given), in ``seq`` order."""
    query = _ENTRIES.where(audit.c.tenant == tenant, audit.c.seq > after)
    if upto is not None:
        query = query.where(audit.c.seq <= upto)
    if artifact_id is not None:
        query = query.where(audit.c.artifact_id == artifact_id)
    return query.order_by(audit.c.seq)


def tenants_query() -> sa.CompoundSelect[tuple[str]]:
    """Every tenant with a head row or an entry."""
    return sa.union(sa.select(audit_heads.c.tenant), sa.select(audit.c.tenant))
