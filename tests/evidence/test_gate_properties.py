"""Property tests: a satisfied verdict only ever rests on fit evidence, and the gate is total on any JSON.

Coverage, omissions and ``source_version`` are caller-supplied JSON (the vault only checks that they are JSON), so
the gate must hold on any shape: none of these may yield a ``satisfied`` verdict.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refvault.evidence import REASONS, Requirement, check
from refvault.model import format_time
from tests.evidence.shapes import (
    AT,
    COVERED,
    END,
    LAX,
    NEED,
    OBSERVED,
    SOURCE,
    START,
    descriptor,
    full_read,
)

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- properties --------------------------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
times = st.sampled_from(
    [
        START,
        END,
        "2026-11-06T04:05:00Z",
        "2026-11-06T05:05:00+01:00",
        "2026-11-06T04:05:00",
        "junk",
        "2026-11-06T03:00:00Z",
    ]
)
region_names = st.sampled_from(["eu-west", "EU-West", " eu-west ", "us-east", "ap-south", ""])
regions = region_names | st.lists(region_names | st.integers(), max_size=3) | json_values
omission_entries = (
    st.fixed_dictionaries(
        {},
        optional={
            "region": regions,
            "start_inclusive": times,
            "end_exclusive": times,
            "reason": st.text(max_size=8),
            "shard": json_values,
        },
    )
    | json_values
)
omission_lists = st.lists(omission_entries, max_size=3) | json_values


def _folded(value: str) -> str:
    return " ".join(value.split()).casefold()


def _instant(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _ruled_out(omission: object) -> bool:
    """An independent oracle: is this omission *provably* outside eu-west, 04:00-04:10?"""
    if not isinstance(omission, dict):
        return False
    region = omission.get("region")
    names = [region] if isinstance(region, str) else region
    readable = "region" in omission and isinstance(names, list) and names and all(isinstance(n, str) for n in names)
    if readable and "eu-west" not in {_folded(n) for n in names}:
        return True
    start, end = _instant(omission.get("start_inclusive")), _instant(omission.get("end_exclusive"))
    if start is not None and end is not None and start < end:
        need_start, need_end = _instant(START), _instant(END)
        assert need_start is not None
        assert need_end is not None
        return end <= need_start or need_end <= start
    return False


def _as_list(omissions: object) -> list[object]:
    if isinstance(omissions, list | tuple):
        return list(omissions)
    return [omissions] if omissions else []


@FAST
@given(
    status=st.sampled_from(["complete", "partial", "unknown", "COMPLETE", "complete ", None, 1]),
    region=regions,
    start=times,
    end=times,
    omissions=omission_lists,
    read_omissions=omission_lists,
    observed=st.one_of(times, json_values),
    require_complete=st.booleans(),
)
def test_a_satisfied_verdict_only_ever_rests_on_fit_evidence(
    status: Any,
    region: Any,
    start: Any,
    end: Any,
    omissions: Any,
    read_omissions: Any,
    observed: Any,
    require_complete: bool,
) -> None:
    need = Requirement(SOURCE, coverage=COVERED, max_age=timedelta(hours=1), require_complete=require_complete)
    coverage = {"region": region, "start_inclusive": start, "end_exclusive": end}
    given = descriptor(status=status, coverage=coverage, omissions=omissions, observed=observed)
    verdict = check(need, given, at=AT, read=full_read(omissions=read_omissions))
    assert all(code in REASONS for code in verdict.codes)
    if not verdict.satisfied:
        return
    if require_complete:
        assert status == "complete"
    names = [region] if isinstance(region, str) else region
    assert isinstance(names, list)
    assert "eu-west" in names  # exact names only, to be counted as covered
    covered_start, covered_end = _instant(start), _instant(end)
    assert covered_start is not None
    assert covered_end is not None
    assert covered_start <= datetime(2026, 11, 6, 4, tzinfo=UTC)
    assert datetime(2026, 11, 6, 4, 10, tzinfo=UTC) <= covered_end
    observed_at = _instant(observed if observed is not None else format_time(OBSERVED))
    assert observed_at is not None
    assert AT - timedelta(hours=1) <= observed_at <= AT
    for omission in [*_as_list(omissions), *_as_list(read_omissions)]:
        assert _ruled_out(omission), omission


@FAST
@given(
    name=st.lists(st.booleans(), min_size=7, max_size=7).map(
        lambda upper: "".join(c.upper() if u else c for c, u in zip("eu-west", upper, strict=True))
    ),
    before=st.text(alphabet=" \t\n", max_size=2),
    after=st.text(alphabet=" \t\n", max_size=2),
)
def test_any_case_or_spacing_of_a_required_region_in_an_omission_counts(name: str, before: str, after: str) -> None:
    omission = {"region": before + name + after, "reason": "partition"}
    assert check(LAX, descriptor(status="partial", omissions=[omission]), at=AT).codes == (
        "omissions_in_required_coverage",
    )


@FAST
@given(source_version=st.dictionaries(st.text(max_size=12), json_values, max_size=5), read=json_values)
def test_the_gate_is_total_on_any_json_it_is_given(source_version: dict[str, Any], read: Any) -> None:
    for verdict in (
        check(NEED, descriptor(source_version=source_version), at=AT),
        check(NEED, descriptor(), at=AT, read=read if isinstance(read, dict) else {"offloaded": read}),
    ):
        assert all(code in REASONS for code in verdict.codes)
        json.dumps(verdict.to_dict())
