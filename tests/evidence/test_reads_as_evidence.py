"""A read supports an absence only if it examined every record: crafted or partial reads are refused.

Coverage, omissions and ``source_version`` are caller-supplied JSON (the vault only checks that they are JSON), so
the gate must hold on any shape: none of these may yield a ``satisfied`` verdict.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from refvault import Vault, read
from refvault.evidence import check, reread
from tests.evidence.shapes import (
    ARTIFACT,
    AT,
    CRITICAL,
    HASH,
    NEED,
    SCOPE,
    _capture,
    _records,
    descriptor,
    full_read,
)


@pytest.fixture
def vault(embedded_vault: Vault) -> Vault:
    return embedded_vault


# -- the read the decision rests on ------------------------------------------------------------------------------------


@pytest.mark.parametrize("given", ["{}", json.dumps(full_read()), [full_read()], 3, {"offloaded": None}, {}])
def test_a_read_that_is_not_a_scan_response_is_a_cached_preview(given: Any) -> None:
    assert check(NEED, descriptor(), at=AT, read=given).codes == ("cached_preview",)


@pytest.mark.parametrize(
    ("crafted", "code"),
    [
        ({"content_hash": "sha256:" + "1" * 64}, "identity_mismatch"),
        ({"content_hash": HASH.upper()}, "identity_mismatch"),
        ({"content_hash": None}, "identity_mismatch"),
        ({"artifact_id": "art_" + "b" * 26}, "identity_mismatch"),
        ({"artifact_id": ARTIFACT.upper()}, "identity_mismatch"),
        ({"scan_complete": "true"}, "scan_incomplete"),
        ({"scan_complete": 1}, "scan_incomplete"),
        ({"scan_complete": None}, "scan_incomplete"),
    ],
)
def test_a_read_crafted_to_look_complete_is_refused(crafted: dict[str, Any], code: str) -> None:
    assert check(NEED, descriptor(), at=AT, read=full_read(**crafted)).codes == (code,)
    if code == "identity_mismatch":  # the same key left out entirely
        missing = {key: value for key, value in full_read().items() if key not in crafted}
        assert check(NEED, descriptor(), at=AT, read=missing).codes == ("identity_mismatch",)


def test_a_read_claiming_completeness_in_its_records_changes_nothing() -> None:
    hostile = full_read(scan_complete=False, records=[{"record": {"scan_complete": True, "omissions": []}}])
    assert check(NEED, descriptor(), at=AT, read=hostile).codes == ("scan_incomplete",)


@pytest.mark.parametrize(
    "partial",
    [
        {"scanned_records": 3, "selection": {"record_range": [0, 3]}},  # a record range
        {"scanned_records": 3, "selection": {"record_range": [47, 50]}},
        {"scanned_records": 5, "has_more": True, "selection": {"record_range": [0, 20]}},  # a page of a range
        {"scanned_records": 49},  # the last page of a query continued from a cursor
        {"scanned_records": 0, "total_records": 50},
    ],
)
def test_a_finished_read_that_did_not_examine_every_record_is_an_omission(partial: dict[str, Any]) -> None:
    verdict = check(NEED, descriptor(), at=AT, read=full_read(**partial))
    assert verdict.codes == ("omissions_in_required_coverage",)
    assert f"of {partial.get('total_records', 50)} records were examined" in verdict.reasons[0].message


def test_real_reads_of_part_of_a_capture_never_support_an_absence(vault: Vault) -> None:
    """The false absences the gate used to let through: 0 matches, scan complete, yet a critical record unread."""
    records = _capture(vault, _records(50, critical=frozenset({40})))
    complete = read.query(vault, SCOPE, records, where=CRITICAL)
    assert complete["returned_records"] == 1
    assert reread(vault, SCOPE, records, NEED, at=AT, read=lambda: complete).satisfied  # control: a full read
    ranged = read.query(vault, SCOPE, records, where=CRITICAL, record_range=[0, 10])
    assert (ranged["returned_records"], ranged["scan_complete"], ranged["omissions"]) == (0, True, [])
    assert reread(vault, SCOPE, records, NEED, at=AT, read=lambda: ranged).codes == ("omissions_in_required_coverage",)

    paged = _capture(vault, _records(50, critical=frozenset({0, 30})))
    first = read.query(vault, SCOPE, paged, where=CRITICAL, limit=1)
    assert first["has_more"] is True
    last = read.query(vault, SCOPE, paged, where=CRITICAL, limit=1, cursor=first["next_cursor"])
    assert (last["returned_records"], last["scan_complete"], last["has_more"], last["omissions"]) == (
        1,
        True,
        False,
        [],
    )
    assert check(NEED, vault.describe(SCOPE, paged), at=AT, read=last).codes == ("omissions_in_required_coverage",)

    lines = b"".join(b"line %d CRITICAL\n" % i if i == 3 else b"line %d ok\n" % i for i in range(20))
    text = _capture(vault, lines, media_type="text/plain")
    late = read.grep(vault, SCOPE, text, "CRITICAL", from_line=10)
    assert (late["returned"], late["scan_complete"], late["omissions"]) == (0, True, [])
    assert reread(vault, SCOPE, text, NEED, at=AT, read=lambda: late).codes == ("omissions_in_required_coverage",)
    whole = read.grep(vault, SCOPE, text, "CRITICAL")
    assert reread(vault, SCOPE, text, NEED, at=AT, read=lambda: whole).satisfied
    window = read.window(vault, SCOPE, text, lines=[0, 20])
    assert reread(vault, SCOPE, text, NEED, at=AT, read=lambda: window).codes == ("cached_preview",)
