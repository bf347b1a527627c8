"""Omissions: one that may touch the required coverage always counts, whatever its container shape.

Coverage, omissions and ``source_version`` are caller-supplied JSON (the vault only checks that they are JSON), so
the gate must hold on any shape: none of these may yield a ``satisfied`` verdict.
"""

from __future__ import annotations

from typing import Any

import pytest

from refvault.evidence import check
from tests.evidence.shapes import (
    AT,
    END,
    LAX,
    START,
    descriptor,
    full_read,
)

# -- omissions -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "omission",
    [
        {"region": "EU-West"},
        {"region": " eu-west "},
        {"region": "eu-west\t"},
        {"region": ["us-east", "EU-WEST"]},
        {"region": ["eu-west", 3]},
        {"region": [["eu-west"]]},
        {"region": 3},
        {"region": []},
        {"region": None},
        {"region": {"name": "eu-west"}},
        {"Region": "eu-west"},
        {"shard": 3},
        {},
        "collector restarted",
        ["eu-west"],
        3,
        {"start_inclusive": START, "end_exclusive": "2026-11-06T04:00:01Z"},
        {"start_inclusive": "2026-11-06T04:09:59Z", "end_exclusive": "2026-11-06T05:00:00Z"},
        {"start_inclusive": "2026-11-06T05:05:00+01:00", "end_exclusive": "2026-11-06T05:06:00+01:00"},
        {"region": "eu-west", "start_inclusive": "2026-11-06T04:05:00", "end_exclusive": "2026-11-06T04:06:00"},
        {"region": "eu-west", "start_inclusive": "0001-01-01T00:00:00+01:00", "end_exclusive": END},
        {"region": "eu-west", "start_inclusive": "2026-11-06T04:06:00Z", "end_exclusive": "2026-11-06T04:05:00Z"},
        {"region": "eu-west", "start_inclusive": START},
    ],
)
def test_an_omission_that_may_touch_the_required_coverage_always_counts(omission: Any) -> None:
    verdict = check(LAX, descriptor(status="partial", omissions=[omission]), at=AT)
    assert verdict.codes == ("omissions_in_required_coverage",)
    # the same omission reported by a read (not by the capture) counts too
    assert check(LAX, descriptor(), at=AT, read=full_read(omissions=[omission])).codes == (
        "omissions_in_required_coverage",
    )


@pytest.mark.parametrize(
    "omission",
    [
        {"region": "us-east"},
        {"region": ["us-east", "ap-south"], "reason": "partition"},
        {"region": "eu-west", "start_inclusive": END, "end_exclusive": "2026-11-06T04:20:00Z"},
        {"region": "eu-west", "start_inclusive": "2026-11-06T03:00:00Z", "end_exclusive": START},
        {"start_inclusive": "2026-11-06T05:10:00+01:00", "end_exclusive": "2026-11-06T05:20:00+01:00"},
        {"region": "us-east", "start_inclusive": "garbage", "end_exclusive": END},
    ],
)
def test_an_omission_outside_the_required_coverage_does_not_count(omission: Any) -> None:
    assert check(LAX, descriptor(status="partial", omissions=[omission]), at=AT).satisfied


@pytest.mark.parametrize("omissions", ["us-east missing", {"region": "eu-west"}, 3, True, ("x",)])
def test_omissions_of_any_container_shape_count_and_never_crash(omissions: Any) -> None:
    """A descriptor built directly (not through the vault) or a read may hold omissions that are not a list."""
    verdict = check(LAX, descriptor(status="partial", omissions=omissions), at=AT)
    assert verdict.codes == ("omissions_in_required_coverage",)
    verdict = check(LAX, descriptor(), at=AT, read=full_read(omissions=omissions))
    assert verdict.codes == ("omissions_in_required_coverage",)


@pytest.mark.parametrize("nothing", [None, [], (), "", 0, False])
def test_empty_omissions_are_none(nothing: Any) -> None:
    assert check(LAX, descriptor(omissions=nothing), at=AT, read=full_read(omissions=nothing)).satisfied
