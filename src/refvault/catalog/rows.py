"""Catalog rows and the records they state: manifests, derivations, blobs, API keys (both directions).

Decoding here does not authenticate: :class:`~refvault.catalog.sql.SqlCatalog` checks every row's MAC
where it turns rows into manifests and derivations.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from refvault.blobs.base import BlobKey
from refvault.catalog.base import ApiKey, BlobRecord, Derivation, Manifest
from refvault.catalog.macs import micros
from refvault.copies import LineageRow
from refvault.model import Scope

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def from_us(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


def now_us() -> int:
    return time.time_ns() // 1000


def decode_manifest(row: Any) -> Manifest:
    """The manifest a row states (not yet authenticated: see :meth:`SqlCatalog._manifest`)."""
    return Manifest(
        artifact_id=row.artifact_id,
        scope=Scope(row.tenant, row.user_name, row.session),
        digest=row.digest,
        size=row.size,
        media_type=row.media_type,
        disclosure="model" if row.disclosure == "model" else "sealed",  # anything unexpected fails closed
        created_at=from_us(row.created_us),
        expires_at=None if row.expires_us is None else from_us(row.expires_us),
        filename=row.filename,
        tool_call_id=row.tool_call_id,
        run_id=row.run_id,
        schema_version=row.schema_version,
        source_version=json.loads(row.source_version),
        completeness=json.loads(row.completeness),
        idempotency_key=row.idempotency_key,
        labels=_labels_of(getattr(row, "labels", None)),
        derived_from=_ids_of(getattr(row, "derived_from", None)),
        origin=_origin_of(getattr(row, "origin", None)),
    )


def lineage_row(row: Any) -> LineageRow:
    """A lineage walk's view of a row (:class:`refvault.copies.LineageRow`; not authenticated)."""
    return LineageRow(
        artifact_id=row.artifact_id,
        user=row.user_name,
        session=row.session,
        digest=row.digest,
        size=row.size,
        derived_from=_ids_of(row.derived_from),
        origin=_origin_of(row.origin),
    )


def _origin_of(column: str | None) -> dict[str, Any] | None:
    """The origin column (a JSON object; NULL: captured directly). Anything but an object is unreadable."""
    if column is None:
        return None
    value = json.loads(column)
    if not isinstance(value, dict):
        raise ValueError("origin")
    return value


def _labels_of(column: str | None) -> frozenset[str]:
    """The labels column (a JSON list; NULL: none). Anything but a list of strings is unreadable."""
    if column is None:
        return frozenset()
    value = json.loads(column)
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise ValueError("labels")
    return frozenset(value)


def _ids_of(column: str | None) -> tuple[str, ...]:
    """The derived_from column (a JSON list of ids; NULL: none). Anything but a list of strings is unreadable."""
    if column is None:
        return ()
    value = json.loads(column)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError("derived_from")
    return tuple(value)


def labels_column(labels: frozenset[str]) -> str | None:
    """The labels column for ``labels``: a JSON sorted list, NULL for none."""
    return to_json(sorted(labels)) if labels else None


def decode_derivation(row: Any) -> Derivation:
    """The derivation a row states (not yet authenticated: see :meth:`SqlCatalog._derivation`)."""
    return Derivation(
        source=BlobKey(row.namespace, row.source_digest),
        kind=row.kind,
        digest=row.derived_digest,
        size=row.derived_size,
        info=json.loads(row.info),
    )


# What decoding a row edited behind refvault's back may raise (bad JSON, bad names, absurd times).
UNREADABLE = (ValueError, TypeError, OverflowError, RecursionError, KeyError)


def derivation_pk(row: Any) -> dict[str, Any]:
    return {"pk_ns": row.namespace, "pk_dg": row.source_digest, "pk_kind": row.kind}


def api_key_row(key: ApiKey) -> dict[str, Any]:
    return {
        "key_id": key.key_id,
        "secret_hash": key.secret_hash,
        "tenant": key.tenant,
        "user_name": key.user,
        "sessions": None if key.sessions is None else to_json(sorted(key.sessions)),
        "created_us": micros(key.created_at),
        "revoked_us": None if key.revoked_at is None else micros(key.revoked_at),
        "label": key.label,
        "admin": key.admin,
    }


def api_key_of(row: sa.Row[Any]) -> ApiKey:
    return ApiKey(
        key_id=row.key_id,
        secret_hash=row.secret_hash,
        tenant=row.tenant,
        user=row.user_name,
        sessions=None if row.sessions is None else frozenset(json.loads(row.sessions)),
        created_at=from_us(row.created_us),
        revoked_at=None if row.revoked_us is None else from_us(row.revoked_us),
        label=row.label,
        admin=bool(row.admin),
    )


def blob_row(blob: BlobRecord, now: int) -> dict[str, Any]:
    return {
        "namespace": blob.key.namespace,
        "digest": blob.key.digest,
        "size": blob.size,
        "chunk_size": blob.chunk_size,
        "chunk_digests": blob.chunk_digests,
        "inline_data": blob.inline,
        "merkle_root": blob.merkle_root,
        "chunk_roots": blob.chunk_roots,
        "touched_us": now,
    }


def to_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def artifact_row(m: Manifest, mac: str) -> dict[str, Any]:
    return {
        "mac": mac,
        "artifact_id": m.artifact_id,
        "tenant": m.scope.tenant,
        "user_name": m.scope.user,
        "session": m.scope.session,
        "namespace": m.key.namespace,
        "digest": m.digest,
        "size": m.size,
        "media_type": m.media_type,
        "disclosure": m.disclosure,
        "filename": m.filename,
        "tool_call_id": m.tool_call_id,
        "run_id": m.run_id,
        "schema_version": m.schema_version,
        "created_us": micros(m.created_at),
        "expires_us": None if m.expires_at is None else micros(m.expires_at),
        "source_version": to_json(m.source_version),
        "completeness": to_json(m.completeness),
        "idempotency_key": m.idempotency_key,
        "labels": labels_column(m.labels),
        "derived_from": to_json(list(m.derived_from)) if m.derived_from else None,
        "origin": None if m.origin is None else to_json(dict(m.origin)),
    }


def blob_record(row: sa.Row[Any]) -> BlobRecord:
    return BlobRecord(
        key=BlobKey(row.namespace, row.digest),
        size=row.size,
        chunk_size=row.chunk_size,
        chunk_digests=bytes(row.chunk_digests),
        inline=None if row.inline_data is None else bytes(row.inline_data),
        merkle_root=None if row.merkle_root is None else bytes(row.merkle_root),
        chunk_roots=None if row.chunk_roots is None else bytes(row.chunk_roots),
    )
