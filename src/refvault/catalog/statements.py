"""The catalog's SQL statements, built once (SQLAlchemy then reuses their compiled form), and PostgreSQL's
advisory lock ids (see :mod:`refvault.catalog.sql` for the locking protocol)."""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
from typing import Any

import sqlalchemy as sa

from refvault.blobs.base import BlobKey
from refvault.catalog.schema import api_keys, artifacts, blobs, derivations
from refvault.model import Scope

# Statements are built once: SQLAlchemy then reuses their compiled form, which keeps
# the write lock's hold time per put to the database work itself.
IN_SCOPE = sa.and_(
    artifacts.c.tenant == sa.bindparam("tenant"),
    artifacts.c.user_name == sa.bindparam("user_name"),
    artifacts.c.session == sa.bindparam("session"),
)
FIND = sa.select(artifacts).where(artifacts.c.artifact_id == sa.bindparam("artifact_id"), IN_SCOPE)
FIND_KEY = sa.select(artifacts).where(IN_SCOPE, artifacts.c.idempotency_key == sa.bindparam("idempotency_key"))
BLOB = sa.select(blobs).where(blobs.c.namespace == sa.bindparam("ns"), blobs.c.digest == sa.bindparam("dg"))
FIND_API_KEY = sa.select(api_keys).where(api_keys.c.key_id == sa.bindparam("key_id"))


def dialect_insert(dialect: str) -> Any:
    """``insert`` of the SQLAlchemy dialect ``dialect`` (with ``on_conflict_*``), imported on first use.

    Only the dialect a catalog runs on is loaded: a SQLite store never imports PostgreSQL's.
    """
    name = "postgresql" if dialect == "postgresql" else "sqlite"
    return importlib.import_module(f"sqlalchemy.dialects.{name}").insert


@functools.cache
def upsert_blob(dialect: str) -> sa.Executable:
    """A re-published blob has the same bytes: refresh its age, heal inline bytes, keep derived chunk digests.

    Built once per dialect (SQLAlchemy then reuses its compiled form).
    """
    statement = dialect_insert(dialect)(blobs)
    upsert: sa.Executable = statement.on_conflict_do_update(
        index_elements=[blobs.c.namespace, blobs.c.digest],
        set_={
            "touched_us": statement.excluded.touched_us,
            "inline_data": statement.excluded.inline_data,
            # a blob captured before its roots existed gains them from a later capture of the same bytes
            "merkle_root": sa.func.coalesce(blobs.c.merkle_root, statement.excluded.merkle_root),
            "chunk_roots": sa.func.coalesce(blobs.c.chunk_roots, statement.excluded.chunk_roots),
        },
    )
    return upsert


INSERT_ARTIFACT = artifacts.insert()
RELEASE_KEY = (
    artifacts.update()
    .where(artifacts.c.artifact_id == sa.bindparam("holder"))
    .values(idempotency_key=None, mac=sa.bindparam("new_mac"))
)
SET_MAC = (
    artifacts.update()
    .where(artifacts.c.seq == sa.bindparam("row_seq"), artifacts.c.mac == sa.bindparam("old_mac"))
    .values(mac=sa.bindparam("new_mac"))
)
ADOPT = artifacts.update().where(artifacts.c.seq == sa.bindparam("row_seq")).values(mac=sa.bindparam("new_mac"))
DERIVATION_ROW = sa.and_(
    derivations.c.namespace == sa.bindparam("pk_ns"),
    derivations.c.source_digest == sa.bindparam("pk_dg"),
    derivations.c.kind == sa.bindparam("pk_kind"),
)
ADOPT_DERIVATION = (
    derivations.update().where(DERIVATION_ROW, derivations.c.mac.is_(None)).values(mac=sa.bindparam("new_mac"))
)
SET_DERIVATION_MAC = (
    derivations.update()
    .where(DERIVATION_ROW, derivations.c.mac == sa.bindparam("old_mac"))
    .values(mac=sa.bindparam("new_mac"))
)
# The fixed advisory lock of manifest key changes (rotation, dropping retired keys) on PostgreSQL.
MANIFEST_KEYS_LOCK = 0x7266766D6B657973  # "rfvmkeys"
REMAC_BATCH = 500
RECORD_CHUNKS = (
    blobs.update()
    .where(blobs.c.namespace == sa.bindparam("ns"), blobs.c.digest == sa.bindparam("dg"))
    .values(chunk_size=sa.bindparam("chunk_size"), chunk_digests=sa.bindparam("chunk_digests"))
)
RECORD_MERKLE = (
    blobs.update()
    .where(
        blobs.c.namespace == sa.bindparam("ns"),
        blobs.c.digest == sa.bindparam("dg"),
        blobs.c.chunk_size == sa.bindparam("size_of_chunks"),
        blobs.c.merkle_root.is_(None),
    )
    .values(merkle_root=sa.bindparam("merkle_root"), chunk_roots=sa.bindparam("chunk_roots"))
)


def scope_params(scope: Scope) -> dict[str, str]:
    return {"tenant": scope.tenant, "user_name": scope.user, "session": scope.session}


def scope_match(scope: Scope) -> sa.ColumnElement[bool]:
    return sa.and_(
        artifacts.c.tenant == scope.tenant,
        artifacts.c.user_name == scope.user,
        artifacts.c.session == scope.session,
    )


def references(key: BlobKey) -> sa.ColumnElement[bool]:
    by_artifact = sa.exists().where(artifacts.c.namespace == key.namespace, artifacts.c.digest == key.digest)
    by_derivation = sa.exists().where(
        derivations.c.namespace == key.namespace, derivations.c.derived_digest == key.digest
    )
    return sa.or_(by_artifact, by_derivation)


DERIVATION = sa.select(derivations).where(
    derivations.c.namespace == sa.bindparam("ns"),
    derivations.c.source_digest == sa.bindparam("dg"),
    derivations.c.kind == sa.bindparam("kind"),
)


# -- PostgreSQL advisory locks ---------------------------------------------------------

# The fixed key of the migration lock (an arbitrary constant; "refvault" in ASCII).
MIGRATION_LOCK = 0x7265667661756C74
LOCK_KEYS = sa.text("SELECT pg_advisory_xact_lock(k) FROM unnest(CAST(:keys AS bigint[])) AS k")


def _lock_id(*parts: str) -> int:
    """A signed 64-bit advisory lock id for a tuple of strings (a collision only serialises two writers)."""
    raw = hashlib.sha256(json.dumps(parts).encode("ascii")).digest()  # json.dumps escapes to ASCII
    return int.from_bytes(raw[:8], "big", signed=True)


def blob_lock(key: BlobKey) -> int:
    return _lock_id("blob", key.namespace, key.digest)


def idempotency_lock(scope: Scope, key: str) -> int:
    return _lock_id("idempotency", scope.tenant, scope.user, scope.session, key)
