"""Review of the evidence gate (issue 9): adversarial shapes that must never yield a ``satisfied`` verdict.

Coverage, omissions and ``source_version`` are caller-supplied JSON (the vault only checks that they are JSON,
that ``omissions`` is a list and that ``complete`` carries none), and a read response is whatever the caller's
read returned. The gate must stay total (a verdict, never a crash) and fail closed on every shape it cannot
read: nested or mixed lists, numbers, case and whitespace variants of a region, naive or out-of-range times,
omissions of any container shape, reads that did not examine the whole capture (a record range, a cursor's
later page, a ``from_line``), responses that are not mappings. Messages carry metadata only: a canary planted
in records or in ``source_version`` fields other than ``source_id`` never reaches one.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refvault import Scope, Vault, read
from refvault.errors import InvalidArgument
from refvault.evidence import REASONS, Requirement, Verdict, check, reread
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
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

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


@pytest.fixture
def vault(tmp_path: Path) -> Iterator[Vault]:
    with Vault.open(tmp_path / "store") as opened:
        yield opened


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
