"""The one SQLAlchemy Core schema shared by SQLite and PostgreSQL, and its migrations.

Migrations are numbered functions applied in order inside one write
transaction; ``refvault_migrations`` records which ran. A database newer than
this code is refused rather than guessed at. Several processes may open a
fresh database at once: SQLite serialises them with its write lock,
PostgreSQL with an advisory lock taken first in the migration transaction
(see :mod:`refvault.catalog.sql`), so exactly one of them creates each table.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from refvault.budgets import COUNTED

__all__ = [
    "AUDIT_MIGRATION",
    "ID_CHARS",
    "ID_COLUMNS",
    "LABELS_MIGRATION",
    "MAC_MIGRATION",
    "MIGRATIONS",
    "api_keys",
    "artifacts",
    "audit",
    "audit_heads",
    "blobs",
    "budgets",
    "derivations",
    "evidence",
    "grants",
    "holds",
    "lineage",
    "marks",
    "metadata",
    "migrations",
    "settings",
]

metadata = sa.MetaData()

ID_CHARS = 32
"""The width of every artifact id column: ``art_`` and 28 characters (ids minted before the check characters
have 26; :mod:`refvault.ids`). Widened from 30 by migration 13."""

_Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

artifacts = sa.Table(
    "refvault_artifacts",
    metadata,
    sa.Column("seq", _Seq, primary_key=True, autoincrement=True),
    sa.Column("artifact_id", sa.String(ID_CHARS), nullable=False, unique=True),
    sa.Column("tenant", sa.String(128), nullable=False),
    sa.Column("user_name", sa.String(128), nullable=False),
    sa.Column("session", sa.String(128), nullable=False),
    sa.Column("namespace", sa.String(32), nullable=False),
    sa.Column("digest", sa.String(64), nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("media_type", sa.String(255), nullable=False),
    sa.Column("disclosure", sa.String(8), nullable=False),
    sa.Column("filename", sa.String(255)),
    sa.Column("tool_call_id", sa.String(256)),
    sa.Column("run_id", sa.String(256)),
    sa.Column("schema_version", sa.String(256)),
    sa.Column("created_us", sa.BigInteger, nullable=False),
    sa.Column("expires_us", sa.BigInteger),
    sa.Column("source_version", sa.Text, nullable=False),
    sa.Column("completeness", sa.Text, nullable=False),
    sa.Column("idempotency_key", sa.String(256)),
    # ``v1:<key id>:<hex HMAC-SHA256>`` of the row (refvault.catalog.macs); added by migration 4.
    sa.Column("mac", sa.String(128)),
    # The artifact's labels, a JSON sorted list (NULL: none), and the ids it was derived from, a JSON list
    # (NULL: none); both covered by the row's MAC. Added by migration 6.
    sa.Column("labels", sa.Text),
    sa.Column("derived_from", sa.Text),
    # How a derived artifact was made (refvault.copies), a JSON object (NULL: captured directly); covered by
    # the row's MAC. Added by migration 9.
    sa.Column("origin", sa.Text),
    sa.UniqueConstraint("tenant", "user_name", "session", "idempotency_key", name="uq_refvault_idempotency"),
    sa.Index("ix_refvault_artifacts_scope", "tenant", "user_name", "session", "created_us", "seq"),
    sa.Index("ix_refvault_artifacts_blob", "namespace", "digest"),
    sa.Index("ix_refvault_artifacts_expiry", "expires_us"),
)

blobs = sa.Table(
    "refvault_blobs",
    metadata,
    sa.Column("namespace", sa.String(32), primary_key=True),
    sa.Column("digest", sa.String(64), primary_key=True),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("chunk_size", sa.Integer, nullable=False),
    sa.Column("chunk_digests", sa.LargeBinary, nullable=False),
    sa.Column("inline_data", sa.LargeBinary),
    sa.Column("touched_us", sa.BigInteger, nullable=False),
    # The Merkle root (refvault.proofs) and the concatenated 32-byte root of each chunk's subtree; NULL for a
    # blob captured before migration 10 until its next full verification.
    sa.Column("merkle_root", sa.LargeBinary),
    sa.Column("chunk_roots", sa.LargeBinary),
)

# A derivative (e.g. the Parquet form of a record artifact) is a blob of its own, linked to the
# blob it was derived from. It lives exactly as long as its source blob: collecting the source
# drops the link, after which the derivative is unreferenced and collected in turn.
derivations = sa.Table(
    "refvault_derivations",
    metadata,
    sa.Column("namespace", sa.String(32), primary_key=True),
    sa.Column("source_digest", sa.String(64), primary_key=True),
    sa.Column("kind", sa.String(64), primary_key=True),
    sa.Column("derived_digest", sa.String(64), nullable=False),
    sa.Column("derived_size", sa.BigInteger, nullable=False),
    sa.Column("info", sa.Text, nullable=False),
    sa.Column("created_us", sa.BigInteger, nullable=False),
    sa.Column("mac", sa.String(128)),  # as refvault_artifacts.mac; added by migration 4
    sa.Index("ix_refvault_derivations_derived", "namespace", "derived_digest"),
)

# The HTTP service's API keys. Only the SHA-256 of a token is kept; ``sessions`` is the JSON list of
# sessions the key may act in, or NULL for every session of its user.
api_keys = sa.Table(
    "refvault_api_keys",
    metadata,
    sa.Column("key_id", sa.String(64), primary_key=True),
    sa.Column("secret_hash", sa.String(64), nullable=False),
    sa.Column("tenant", sa.String(128), nullable=False),
    sa.Column("user_name", sa.String(128), nullable=False),
    sa.Column("sessions", sa.Text),
    sa.Column("created_us", sa.BigInteger, nullable=False),
    sa.Column("revoked_us", sa.BigInteger),
    sa.Column("label", sa.String(256)),
    sa.Column("admin", sa.Boolean),  # NULL (older keys) and false: no admin right
    sa.Index("ix_refvault_api_keys_tenant", "tenant"),
)

# Small named values every process of a store shares (e.g. the cursor key ring), changed only by
# compare-and-set so concurrent writers agree on one value.
settings = sa.Table(
    "refvault_settings",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
    sa.Column("updated_us", sa.BigInteger, nullable=False),
)

# Sharing grants (refvault.vault.grants): an owner scope lets a principal of the same tenant read one
# artifact. ``grantee_sessions``, ``purposes`` and ``recipients`` are JSON sorted lists, or NULL for any;
# ``mac`` covers every other column (refvault.catalog.macs), so an edited grant is refused. Migration 7.
grants = sa.Table(
    "refvault_grants",
    metadata,
    sa.Column("grant_id", sa.String(40), primary_key=True),
    sa.Column("tenant", sa.String(128), nullable=False),
    sa.Column("owner_user", sa.String(128), nullable=False),
    sa.Column("owner_session", sa.String(128), nullable=False),
    sa.Column("artifact_id", sa.String(ID_CHARS), nullable=False),
    sa.Column("grantee_user", sa.String(128), nullable=False),
    sa.Column("grantee_sessions", sa.Text),
    sa.Column("purposes", sa.Text),
    sa.Column("recipients", sa.Text),
    sa.Column("disclosure", sa.String(8), nullable=False),
    sa.Column("created_us", sa.BigInteger, nullable=False),
    sa.Column("expires_us", sa.BigInteger),
    sa.Column("revoked_us", sa.BigInteger),
    sa.Column("mac", sa.String(128)),
    sa.Index("ix_refvault_grants_artifact", "tenant", "artifact_id"),
    sa.Index("ix_refvault_grants_grantee", "tenant", "grantee_user"),
)

# The audit log (refvault.catalog.audit_log): one hash chain per tenant, numbered 1..n by ``seq``; never
# payload. ``hash`` = SHA-256(prev_hash || canonical entry). Migration 5.
audit = sa.Table(
    "refvault_audit",
    metadata,
    sa.Column("tenant", sa.String(128), primary_key=True),
    sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("at_us", sa.BigInteger, nullable=False),
    sa.Column("user_name", sa.String(128), nullable=False),
    sa.Column("session", sa.String(128), nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("outcome", sa.String(64), nullable=False),
    sa.Column("artifact_id", sa.String(ID_CHARS)),
    sa.Column("purpose", sa.String(128)),
    sa.Column("recipient", sa.String(128)),
    sa.Column("grant_id", sa.String(40)),
    sa.Column("rule_id", sa.String(128)),
    sa.Column("selection", sa.String(256)),
    sa.Column("bytes", sa.BigInteger),
    sa.Column("records", sa.BigInteger),
    sa.Column("excerpt_hash", sa.String(64)),
    sa.Column("content_hash", sa.String(71)),
    sa.Column("detail", sa.String(128)),
    sa.Column("prev_hash", sa.String(64), nullable=False),
    sa.Column("hash", sa.String(64), nullable=False),
    sa.Index("ix_refvault_audit_artifact", "tenant", "artifact_id", "seq"),
    sqlite_with_rowid=False,  # rows live in the primary key's tree: one tree fewer to write per entry
)

# Each tenant's chain head: the last entry's seq and hash, the row an append locks (FOR UPDATE on PostgreSQL).
audit_heads = sa.Table(
    "refvault_audit_heads",
    metadata,
    sa.Column("tenant", sa.String(128), primary_key=True),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("hash", sa.String(64), nullable=False),
)

# The reverse index of ``derived_from`` (refvault.vault.copies): one row per (source, derived artifact),
# written in the transaction that publishes the derived artifact and kept after either is deleted, so the
# lineage of a deleted source still names its copies. The derived artifact's MAC'd manifest is the
# authority; this table only finds it. Migration 9.
lineage = sa.Table(
    "refvault_lineage",
    metadata,
    sa.Column("tenant", sa.String(128), primary_key=True),
    sa.Column("source_id", sa.String(ID_CHARS), primary_key=True),
    sa.Column("derived_id", sa.String(ID_CHARS), primary_key=True),
    sqlite_with_rowid=False,
)

# What happened to an artifact besides its bytes (refvault.copies.Mark): superseded, revoked, deleted or
# expired; one row per artifact, replaced only by a mark at least as final. Migration 9.
marks = sa.Table(
    "refvault_marks",
    metadata,
    sa.Column("tenant", sa.String(128), primary_key=True),
    sa.Column("artifact_id", sa.String(ID_CHARS), primary_key=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("at_us", sa.BigInteger, nullable=False),
    sa.Column("by_id", sa.String(ID_CHARS)),
    sa.Column("rule", sa.String(128)),
    sa.Column("reason_hash", sa.String(64)),
    sa.Column("content_hash", sa.String(71)),
    sa.Column("size", sa.BigInteger),
    sa.Column("user_name", sa.String(128)),
    sa.Column("session", sa.String(128)),
    sqlite_with_rowid=False,
)

# Holds (refvault.copies.Hold): while an artifact has one, deletion, expiry and retention leave it. Migration 9.
holds = sa.Table(
    "refvault_holds",
    metadata,
    sa.Column("tenant", sa.String(128), primary_key=True),
    sa.Column("artifact_id", sa.String(ID_CHARS), primary_key=True),
    sa.Column("hold_id", sa.String(40), primary_key=True),
    sa.Column("reason", sa.String(1024), nullable=False),
    sa.Column("at_us", sa.BigInteger, nullable=False),
    sa.Column("user_name", sa.String(128), nullable=False),
)

# The evidence a run's decisions used, and every reacquisition (refvault.runs.EvidenceRecord): appended,
# never changed; each also goes to the audit chain in the same transaction. Migration 12.
evidence = sa.Table(
    "refvault_evidence",
    metadata,
    sa.Column("seq", _Seq, primary_key=True, autoincrement=True),
    sa.Column("tenant", sa.String(128), nullable=False),
    sa.Column("user_name", sa.String(128), nullable=False),
    sa.Column("session", sa.String(128), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("decision", sa.String(256), nullable=False),
    sa.Column("artifact_id", sa.String(ID_CHARS), nullable=False),
    sa.Column("content_hash", sa.String(71)),
    sa.Column("decided_us", sa.BigInteger, nullable=False),
    sa.Column("recorded_us", sa.BigInteger, nullable=False),
    sa.Column("satisfied", sa.Boolean, nullable=False),
    sa.Column("reasons", sa.String(512), nullable=False),
    sa.Column("replaces", sa.String(ID_CHARS)),
    sa.Column("explanation", sa.String(1024), nullable=False),
    sa.Column("charged", sa.Text, nullable=False),
    sa.Index("ix_refvault_evidence_run", "tenant", "user_name", "session", "seq"),
)

# Run budgets (refvault.budgets): one row per run (tenant, user, session) with a limit and a spent counter per
# counted dimension (a NULL limit is unlimited). ``spent_*`` counts what servers reserved for the run; a
# reservation is one conditional UPDATE (spent + x <= limit), so the catalog never counts past a limit.
# ``seconds`` is a limit only (microseconds): wall time since ``started_us``. Migration 11.
budgets = sa.Table(
    "refvault_budgets",
    metadata,
    sa.Column("tenant", sa.String(128), primary_key=True),
    sa.Column("user_name", sa.String(128), primary_key=True),
    sa.Column("session", sa.String(128), primary_key=True),
    sa.Column("generation", sa.BigInteger, nullable=False),
    sa.Column("started_us", sa.BigInteger, nullable=False),
    sa.Column("limit_seconds_us", sa.BigInteger),
    *(sa.Column(f"limit_{name}", sa.BigInteger) for name in COUNTED),
    *(sa.Column(f"spent_{name}", sa.BigInteger, nullable=False, default=0) for name in COUNTED),
)

migrations = sa.Table(
    "refvault_migrations",
    metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("applied_us", sa.BigInteger, nullable=False),
)


def _v1(conn: sa.Connection) -> None:
    metadata.create_all(conn, tables=[artifacts, blobs])


def _v2(conn: sa.Connection) -> None:
    metadata.create_all(conn, tables=[derivations])


def _v3(conn: sa.Connection) -> None:
    metadata.create_all(conn, tables=[api_keys, settings])


def _v4(conn: sa.Connection) -> None:
    """Manifest MACs, on artifacts and derivations. A catalog created by this version got the columns
    from ``_v1``/``_v2``; the rows of an older one are MAC'd by
    :meth:`refvault.catalog.sql.SqlCatalog._migrate` in the same transaction."""
    inspector = sa.inspect(conn)
    for table in (artifacts, derivations):
        if "mac" not in {column["name"] for column in inspector.get_columns(table.name)}:
            conn.execute(sa.text(f"ALTER TABLE {table.name} ADD COLUMN mac VARCHAR(128)"))


def _v5(conn: sa.Connection) -> None:
    """The audit log and its per-tenant heads (:mod:`refvault.catalog.audit_log`)."""
    metadata.create_all(conn, tables=[audit, audit_heads])


def _v6(conn: sa.Connection) -> None:
    """Labels and ``derived_from`` on artifacts (NULL for every existing row: no labels, so their MACs still verify).

    A catalog created by this version got the columns from ``_v1``.
    """
    present = {column["name"] for column in sa.inspect(conn).get_columns(artifacts.name)}
    for name in ("labels", "derived_from"):
        if name not in present:
            conn.execute(sa.text(f"ALTER TABLE {artifacts.name} ADD COLUMN {name} TEXT"))


def _v7(conn: sa.Connection) -> None:
    """Sharing grants (:mod:`refvault.vault.grants`)."""
    metadata.create_all(conn, tables=[grants])


def _v8(conn: sa.Connection) -> None:
    """Admin API keys (``refvault keys create --admin``): NULL for every existing key, which stays a plain one.

    A catalog created by this version got the column from ``_v3``.
    """
    if "admin" not in {column["name"] for column in sa.inspect(conn).get_columns(api_keys.name)}:
        conn.execute(sa.text(f"ALTER TABLE {api_keys.name} ADD COLUMN admin BOOLEAN"))


def _v9(conn: sa.Connection) -> None:
    """Derived copies: the origin of a derived artifact, the lineage index, marks and holds (NULL origin for
    every existing row, so their MACs still verify). A catalog created by this version got the column from ``_v1``.
    """
    if "origin" not in {column["name"] for column in sa.inspect(conn).get_columns(artifacts.name)}:
        conn.execute(sa.text(f"ALTER TABLE {artifacts.name} ADD COLUMN origin TEXT"))
    metadata.create_all(conn, tables=[lineage, marks, holds])


def _v10(conn: sa.Connection) -> None:
    """Merkle roots on blobs (NULL for every existing blob until its next full verification). A catalog created
    by this version got the columns from ``_v1``."""
    present = {column["name"] for column in sa.inspect(conn).get_columns(blobs.name)}
    binary = conn.dialect.type_compiler_instance.process(sa.LargeBinary())
    for name in ("merkle_root", "chunk_roots"):
        if name not in present:
            conn.execute(sa.text(f"ALTER TABLE {blobs.name} ADD COLUMN {name} {binary}"))


def _v11(conn: sa.Connection) -> None:
    """Run budgets (:mod:`refvault.budgets`)."""
    metadata.create_all(conn, tables=[budgets])


def _v12(conn: sa.Connection) -> None:
    """Runs: the evidence records of decisions (a new table; nothing existing changes)."""
    metadata.create_all(conn, tables=[evidence])


# Every column that holds an artifact id: (table, column). Migration 13 widens them to ID_CHARS.
ID_COLUMNS = (
    ("refvault_artifacts", "artifact_id"),
    ("refvault_grants", "artifact_id"),
    ("refvault_audit", "artifact_id"),
    ("refvault_lineage", "source_id"),
    ("refvault_lineage", "derived_id"),
    ("refvault_marks", "artifact_id"),
    ("refvault_marks", "by_id"),
    ("refvault_holds", "artifact_id"),
    ("refvault_evidence", "artifact_id"),
    ("refvault_evidence", "replaces"),
)


def _v13(conn: sa.Connection) -> None:
    """Artifact ids with check characters (:mod:`refvault.ids`): every id column widened from 30 to 32
    characters. Rows are unchanged; SQLite does not enforce a VARCHAR's length, so only PostgreSQL alters."""
    if conn.dialect.name != "postgresql":
        return
    for table, column in ID_COLUMNS:
        conn.execute(sa.text(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE VARCHAR({ID_CHARS})"))


AUDIT_MIGRATION = 5
LABELS_MIGRATION = 6
MAC_MIGRATION = 4
MIGRATIONS: list[tuple[int, Callable[[sa.Connection], None]]] = [
    (1, _v1),
    (2, _v2),
    (3, _v3),
    (MAC_MIGRATION, _v4),
    (AUDIT_MIGRATION, _v5),
    (LABELS_MIGRATION, _v6),
    (7, _v7),
    (8, _v8),
    (9, _v9),
    (10, _v10),
    (11, _v11),
    (12, _v12),
    (13, _v13),
]
