"""Evidence shapes shared by the gate's tests: the requirement, descriptors and reads built directly, captures
through a vault, and the hypothesis strategies.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from refvault import Scope, Vault
from refvault.evidence import Requirement
from refvault.model import Descriptor, format_time

SOURCE = "infra.incident-events"
START, END = "2026-11-06T04:00:00Z", "2026-11-06T04:10:00Z"
OBSERVED = datetime(2026, 11, 6, 4, 39, 50, tzinfo=UTC)
AT = OBSERVED + timedelta(minutes=5)
ARTIFACT = "art_" + "a" * 26
HASH = "sha256:" + "0" * 64
COVERED = {"region": "eu-west", "start_inclusive": START, "end_exclusive": END}
NEED = Requirement(SOURCE, coverage=COVERED, max_age=timedelta(hours=1))
LAX = Requirement(SOURCE, coverage=COVERED, max_age=timedelta(hours=1), require_complete=False)
CRITICAL = {"field": "severity", "op": "eq", "value": "critical"}


_UNSET: Any = object()


def descriptor(
    *,
    status: Any = "complete",
    coverage: Any = _UNSET,
    omissions: Any = (),
    source_version: Any = _UNSET,
    observed: Any = _UNSET,
    created: datetime = OBSERVED,
    expires: datetime | None = None,
) -> Descriptor:
    """A descriptor built directly (as one received over HTTP could be): any JSON in its caller-supplied fields."""
    version = (
        {"source_id": SOURCE, "observed_at": format_time(OBSERVED)} if source_version is _UNSET else source_version
    )
    if observed is not _UNSET:
        version = {**version, "observed_at": observed}
    return Descriptor(
        artifact_id=ARTIFACT,
        content_hash=HASH,
        tool_call_id=None,
        schema_version=None,
        created_at=created,
        source_version=version,
        completeness={
            "status": status,
            "coverage": dict(COVERED) if coverage is _UNSET else coverage,
            "omissions": list(omissions) if isinstance(omissions, tuple) else omissions,
        },
        scope={"tenant": "t", "user": "u", "session": "s"},
        expires_at=expires,
        retrieval={"media_type": "application/x-ndjson", "size": 1, "disclosure": "model"},
    )


def full_read(**extra: Any) -> dict[str, Any]:
    """A read response that examined all 50 records of the artifact (the shape ``read.query`` returns)."""
    return {
        "artifact_id": ARTIFACT,
        "content_hash": HASH,
        "scan_complete": True,
        "scanned_records": 50,
        "total_records": 50,
        "has_more": False,
        "selection": {"record_range": [0, 50]},
        "omissions": [],
        **extra,
    }


SCOPE = Scope("acme", "ana", "incident-1")


def _records(count: int, *, critical: frozenset[int] = frozenset(), canary: str = "") -> bytes:
    lines = [
        json.dumps({"i": i, "severity": "critical" if i in critical else "info", "note": canary}) for i in range(count)
    ]
    return ("\n".join(lines) + "\n").encode()


def _capture(vault: Vault, data: bytes, **fields: Any) -> str:
    return vault.put(
        SCOPE,
        data,
        media_type=fields.pop("media_type", "application/x-ndjson"),
        source_version=fields.pop("source_version", {"source_id": SOURCE, "observed_at": format_time(OBSERVED)}),
        completeness=fields.pop("completeness", {"status": "complete", "coverage": COVERED, "omissions": []}),
        **fields,
    ).artifact_id
