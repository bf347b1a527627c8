"""Schema migrations as the catalog opens, and trust on upgrade: the open that adds the MAC columns MACs every row.

:class:`~refvault.catalog.sql.SqlCatalog` runs :func:`migrate` in one write transaction, under the migration lock;
a catalog opened read-only runs :func:`check_current` instead, which writes nothing.
"""

from __future__ import annotations

import sqlalchemy as sa

from refvault.catalog.macs import ManifestKeys
from refvault.catalog.rows import UNREADABLE, decode_derivation, decode_manifest, derivation_pk, now_us
from refvault.catalog.schema import MAC_MIGRATION, MIGRATIONS, artifacts, derivations, migrations
from refvault.catalog.statements import ADOPT, ADOPT_DERIVATION, REMAC_BATCH
from refvault.errors import StorageError


def check_current(conn: sa.Connection) -> None:
    """For a catalog opened read-only (nothing migrates): :class:`StorageError` unless its schema is this version's."""
    if not sa.inspect(conn).has_table(migrations.name):
        raise StorageError("the catalog holds no refvault tables")
    applied = set(conn.scalars(sa.select(migrations.c.version)))
    newest = max(version for version, _ in MIGRATIONS)
    if applied and max(applied) > newest:
        raise StorageError("the catalog was written by a newer refvault; upgrade refvault to open it")
    if not {version for version, _ in MIGRATIONS} <= applied:
        raise StorageError(
            "the catalog was written by an older refvault and was opened read-only: "
            "upgrade it once by opening it for writing (refvault migrate)"
        )


def migrate(conn: sa.Connection, keys: ManifestKeys) -> None:
    """Apply the migrations ``conn``'s database lacks; MAC its rows with ``keys`` if this adds the MAC columns."""
    migrations.create(conn, checkfirst=True)
    applied = set(conn.scalars(sa.select(migrations.c.version)))
    newest = max(version for version, _ in MIGRATIONS)
    if applied and max(applied) > newest:
        raise StorageError("the catalog was written by a newer refvault; upgrade refvault to open it")
    # Trust on upgrade: rows are adopted only by the open that adds the MAC columns.
    adopt = set() if MAC_MIGRATION in applied else without_mac_column(conn)
    for version, step in MIGRATIONS:
        if version not in applied:
            step(conn)
            conn.execute(migrations.insert().values(version=version, applied_us=now_us()))
    if artifacts.name in adopt:
        _adopt(conn, keys)
    if derivations.name in adopt:
        _adopt_derivations(conn, keys)


def _adopt(conn: sa.Connection, keys: ManifestKeys) -> None:
    """MAC every row of a catalog written before manifest MACs, as it stands (in the migration transaction).

    A row that cannot be decoded, or whose blob namespace is not its tenant's, is left without a MAC (it fails).
    """
    after = 0
    while True:
        rows = conn.execute(
            sa.select(artifacts).where(artifacts.c.seq > after).order_by(artifacts.c.seq).limit(REMAC_BATCH)
        ).all()
        if not rows:
            return
        after = rows[-1].seq
        updates = []
        for row in rows:
            try:
                manifest = decode_manifest(row)
            except UNREADABLE:
                continue
            if row.namespace == manifest.key.namespace:
                updates.append({"row_seq": row.seq, "new_mac": keys.sign(manifest)})
        if updates:
            conn.execute(ADOPT, updates)


def _adopt_derivations(conn: sa.Connection, keys: ManifestKeys) -> None:
    """MAC every derivation of a catalog written before MACs (one per record artifact's blob: few)."""
    updates = []
    for row in conn.execute(sa.select(derivations)).all():
        try:
            derivation = decode_derivation(row)
        except UNREADABLE:
            continue
        updates.append({**derivation_pk(row), "new_mac": keys.sign(derivation)})
    if updates:
        conn.execute(ADOPT_DERIVATION, updates)


def without_mac_column(conn: sa.Connection) -> set[str]:
    """The tables (of artifacts and derivations) that exist and have no ``mac`` column yet."""
    inspector = sa.inspect(conn)
    missing = set()
    for table in (artifacts, derivations):
        # a fresh catalog: its tables are created with the column, and hold no rows to adopt
        columns = inspector.get_columns(table.name) if inspector.has_table(table.name) else [{"name": "mac"}]
        if not any(column["name"] == "mac" for column in columns):
            missing.add(table.name)
    return missing
