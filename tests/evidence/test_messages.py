"""The gate's messages carry no canary from the records or the source_version."""

from __future__ import annotations

import json
import secrets
from datetime import timedelta

import pytest

from refvault import Vault, read
from refvault.evidence import Requirement, Verdict, check, reread
from tests.evidence.shapes import AT, COVERED, CRITICAL, END, NEED, SCOPE, SOURCE, _capture, _records


@pytest.fixture
def vault(embedded_vault: Vault) -> Vault:
    return embedded_vault


# -- messages carry metadata only --------------------------------------------------------------------------------------


def test_no_message_carries_a_canary_from_records_or_source_version(vault: Vault) -> None:
    canary = "CANARY" + secrets.token_hex(16)
    version = {
        "source_id": SOURCE,
        "snapshot_id": f"snap-{canary}",
        "observed_at": f"{canary} 04:39:50",  # unreadable: refused, and never quoted
        "collector": {"host": canary, "notes": [canary]},
    }
    coverage = {**COVERED, "detail": canary, "region": ["eu-west"]}
    artifact = _capture(
        vault,
        _records(60, critical=frozenset({5}), canary=canary),
        source_version=version,
        completeness={"status": "complete", "coverage": coverage, "omissions": []},
        tool_call_id=f"call_{canary[:20]}",
        schema_version="incident.v1",
        filename=f"{canary}.jsonl",
    )
    requirements = [
        NEED,
        Requirement("infra.other", coverage={"region": ["us-east", "eu-west"], **COVERED}, max_age=timedelta(0)),
        Requirement(
            SOURCE, coverage={"region": "eu-west", "start_inclusive": END, "end_exclusive": "2026-11-07T00:00:00Z"}
        ),
    ]
    seen: list[Verdict] = []
    for need in requirements:
        for query in (
            lambda: read.query(vault, SCOPE, artifact, where=CRITICAL),
            lambda: read.query(vault, SCOPE, artifact, record_range=[0, 10]),
            lambda: read.query(vault, SCOPE, artifact, max_scan=5),
        ):
            seen.append(reread(vault, SCOPE, artifact, need, at=AT, read=query))
        described = vault.describe(SCOPE, artifact)
        records = read.query(vault, SCOPE, artifact, where=CRITICAL)
        assert canary in json.dumps(records)  # the canary is really in what was read
        seen.append(check(need, described, at=AT + timedelta(days=400), read=records))
        seen.append(check(need, described, at=AT, read=read.preview(described, vault.read_bytes(SCOPE, artifact))))
    assert all(not verdict.satisfied for verdict in seen)
    assert {"too_old", "wrong_source", "coverage_not_met", "scan_incomplete", "cached_preview"} <= {
        code for verdict in seen for code in verdict.codes
    }
    for verdict in seen:
        assert canary not in json.dumps(verdict.to_dict())
