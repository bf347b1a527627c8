"""Freshness: observation times, offsets, max_age at its edges, expiry at the deadline and bad evaluation times."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from refvault.errors import InvalidArgument
from refvault.evidence import Requirement, check
from refvault.model import format_time
from tests.evidence.shapes import AT, END, NEED, OBSERVED, SOURCE, descriptor

# -- time: observation, evaluation, retention --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "observed",
    [
        "2026-11-06T04:39:50",  # naive: no UTC offset
        "yesterday",
        "",
        1762404000,
        ["2026-11-06T04:39:50Z"],
        {"at": "2026-11-06T04:39:50Z"},
        "0001-01-01T00:00:00+01:00",  # out of range once converted to UTC
    ],
)
def test_an_unreadable_observation_time_has_no_age_and_is_refused(observed: Any) -> None:
    """It used to fall back to ``created_at``: a capture stored just now of an old observation looked fresh."""
    verdict = check(NEED, descriptor(observed=observed, created=AT), at=AT)
    assert verdict.codes == ("too_old",)
    assert "cannot be established" in verdict.reasons[0].message


def test_an_observation_time_that_is_not_stated_falls_back_to_created_at() -> None:
    version = {"source_id": SOURCE}
    assert check(NEED, descriptor(source_version=version, created=AT), at=AT).satisfied
    assert check(NEED, descriptor(observed=None, created=AT), at=AT).satisfied
    old = descriptor(source_version=version, created=AT - timedelta(hours=2))
    assert check(NEED, old, at=AT).codes == ("too_old",)


def test_observation_times_in_other_offsets_are_the_same_instant() -> None:
    same = descriptor(observed="2026-11-06T05:39:50+01:00")
    assert check(Requirement(SOURCE, max_age=timedelta(0)), same, at=OBSERVED).satisfied
    later = descriptor(observed="2026-11-06T05:39:51+01:00")
    assert check(NEED, later, at=OBSERVED).codes == ("observed_after_evaluation",)


def test_max_age_zero_accepts_only_an_observation_at_the_evaluation_time() -> None:
    now = Requirement(SOURCE, max_age=timedelta(0))
    assert check(now, descriptor(), at=OBSERVED).satisfied
    assert check(now, descriptor(), at=OBSERVED + timedelta(microseconds=1)).codes == ("too_old",)


def test_an_artifact_is_expired_at_its_deadline_exactly() -> None:
    deadline = AT
    assert check(NEED, descriptor(expires=deadline), at=deadline).codes == ("expired",)
    assert check(NEED, descriptor(expires=deadline), at=deadline - timedelta(microseconds=1)).satisfied


def test_evaluation_times_out_of_range_or_naive_are_refused_cleanly() -> None:
    for at in (
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1))),
        datetime(2026, 11, 6, 4, 45),
        "2026-11-06T04:45:00",
        "0001-01-01T00:00:00+01:00",
    ):
        with pytest.raises(InvalidArgument):
            check(NEED, descriptor(), at=at)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        Requirement(SOURCE, coverage={"start_inclusive": "0001-01-01T00:00:00+01:00", "end_exclusive": END})
    tokyo = timezone(timedelta(hours=9))
    verdict = check(NEED, descriptor(), at=AT.astimezone(tokyo))
    assert verdict.satisfied
    assert verdict.evaluated_at == AT
    assert verdict.to_dict()["evaluated_at"] == format_time(AT)
