"""Migration 13: every artifact id column holds a checked id (32 characters), on a catalog made before it too."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from refvault import Scope, Vault
from refvault.catalog.schema import ID_CHARS, ID_COLUMNS, migrations
from refvault.catalog.sql import SqlCatalog
from tests.servers import fresh_database


def _widths(url: str) -> dict[tuple[str, str], int]:
    engine = sa.create_engine(url)
    try:
        inspector = sa.inspect(engine)
        return {
            (table, column["name"]): column["type"].length
            for table in {t for t, _ in ID_COLUMNS}
            for column in inspector.get_columns(table)
            if (table, column["name"]) in ID_COLUMNS
        }
    finally:
        engine.dispose()


def test_a_catalog_from_before_the_check_characters_is_widened_and_stores_new_ids(
    postgres_url: str, tmp_path: Path
) -> None:
    db = fresh_database(postgres_url)
    SqlCatalog(db).close()
    assert set(_widths(db).values()) == {ID_CHARS}
    engine = sa.create_engine(db)  # as migration 12 left it: 30 characters, and no record of migration 13
    with engine.begin() as conn:
        for table, column in ID_COLUMNS:
            conn.execute(sa.text(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE VARCHAR(30)"))
        conn.execute(migrations.delete().where(migrations.c.version == 13))
    engine.dispose()
    assert set(_widths(db).values()) == {30}
    SqlCatalog(db).close()
    assert set(_widths(db).values()) == {ID_CHARS}
    with Vault.open(db, blobs=str(tmp_path / "blobs")) as vault:
        scope = Scope("acme", "ana", "s1")
        stored = vault.put(scope, b"a checked id\n")
        assert len(stored.artifact_id) == 32
        assert vault.read_bytes(scope, stored.artifact_id) == b"a checked id\n"
