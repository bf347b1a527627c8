"""Coverage of any JSON shape: only an equal or wider coverage of the required region and interval satisfies.

Coverage, omissions and ``source_version`` are caller-supplied JSON (the vault only checks that they are JSON), so
the gate must hold on any shape: none of these may yield a ``satisfied`` verdict.
"""

from __future__ import annotations

from typing import Any

import pytest

from refvault import Vault
from refvault.evidence import check, reread
from tests.evidence.shapes import (
    AT,
    COVERED,
    END,
    NEED,
    SCOPE,
    START,
    _capture,
    _records,
    descriptor,
    full_read,
)


@pytest.fixture
def vault(embedded_vault: Vault) -> Vault:
    return embedded_vault


# -- controls: the gate is not simply closed -------------------------------------------------------------------------


def test_controls_a_fit_descriptor_and_a_full_read_satisfy() -> None:
    assert check(NEED, descriptor(), at=AT).satisfied
    assert check(NEED, descriptor(), at=AT, read=full_read()).satisfied
    assert check(NEED, descriptor(), at=AT, read={"offloaded": full_read()}).satisfied
    # an ordered page examines every record even when more matching records remain for later pages
    assert check(NEED, descriptor(), at=AT, read=full_read(has_more=True)).satisfied


# -- the capture's recorded coverage -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "coverage",
    [
        {**COVERED, "region": [["eu-west"]]},
        {**COVERED, "region": ["eu-west", 3]},
        {**COVERED, "region": 3},
        {**COVERED, "region": []},
        {**COVERED, "region": None},
        {**COVERED, "region": "EU-West"},
        {**COVERED, "region": " eu-west"},
        {**COVERED, "region": "eu-west,us-east"},
        {"region": "eu-west", "start_inclusive": START},
        {"region": "eu-west", "start_inclusive": "2026-11-06T04:00:00", "end_exclusive": "2026-11-06T04:10:00"},
        {"region": "eu-west", "start_inclusive": "2026-11-06T04:00:01Z", "end_exclusive": END},
        {"region": "eu-west", "start_inclusive": START, "end_exclusive": "2026-11-06T04:09:59.999999Z"},
        {"region": "eu-west", "start_inclusive": END, "end_exclusive": "2026-11-06T04:20:00Z"},
        {"region": "eu-west", "start_inclusive": END, "end_exclusive": START},
        {"region": "eu-west", "start_inclusive": "0001-01-01T00:00:00+01:00", "end_exclusive": END},
        {"region": "eu-west", "start_inclusive": 1762401600, "end_exclusive": 1762402200},
        ["eu-west", START, END],
        "eu-west 04:00-04:10",
        None,
    ],
)
def test_odd_coverage_shapes_never_satisfy(coverage: Any) -> None:
    verdict = check(NEED, descriptor(coverage=coverage), at=AT)
    assert not verdict.satisfied
    assert verdict.codes == ("coverage_not_met",)


@pytest.mark.parametrize(
    "coverage",
    [
        {**COVERED},
        {**COVERED, "region": ["us-east", "eu-west"]},
        {
            "region": "eu-west",
            "start_inclusive": "2026-11-06T05:00:00+01:00",
            "end_exclusive": "2026-11-06T00:10:00-04:00",
        },
        {"region": "eu-west", "start_inclusive": "2026-11-06T03:00:00Z", "end_exclusive": "2026-11-06T05:00:00Z"},
    ],
)
def test_equal_or_wider_coverage_in_any_offset_satisfies(coverage: Any) -> None:
    assert check(NEED, descriptor(coverage=coverage), at=AT).satisfied


def test_odd_coverage_shapes_are_storable_and_refused_through_the_vault(vault: Vault) -> None:
    """The shapes above are not hypothetical: the vault stores any JSON coverage."""
    for region in ([["eu-west"]], ["eu-west", 3], "EU-West"):
        coverage = {**COVERED, "region": region}
        artifact = _capture(vault, _records(5), completeness={"status": "complete", "coverage": coverage})
        assert reread(vault, SCOPE, artifact, NEED, at=AT).codes == ("coverage_not_met",)
