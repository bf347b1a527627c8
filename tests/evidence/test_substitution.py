"""Reacquiring evidence (``refvault.evidence.reacquire``) and the run's replay packet (``vault.replay_packet``).

* Evidence the gate refuses as too old is replaced by a newer observation when the decision permits it: the
  new reference is recorded with a substitution record (old id -> new id, the reasons, the decision time, the
  bytes the acquisition charged), judged at the same decision time.
* A decision that requires the historical snapshot refuses reacquisition (nothing acquired), and so does a
  failure a newer observation cannot answer; the refusal is recorded with its reason.
* The replay packet lists every evidence reference the run's decisions used, once each, with its availability
  now (available, expired, deleted, revoked) as the ordinary checks judge it: the policy still decides.
* Records are per run: another session, user or tenant sees none of them; every record is in the audit chain.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from refvault import Budget, Scope, Vault, read
from refvault.errors import InvalidArgument
from refvault.evidence import Requirement, reacquire, record, reread
from refvault.policy import Policy, Rule
from refvault.runs import EvidenceRequest
from tests.conftest import Clock

SOURCE = "infra.incident-events"
START, END = "2026-11-06T04:00:00Z", "2026-11-06T04:10:00Z"
DECIDED = datetime(2026, 11, 6, 6, 0, tzinfo=UTC)
NEED = Requirement(
    source=SOURCE,
    coverage={"region": "eu-west", "start_inclusive": START, "end_exclusive": END},
    max_age=timedelta(minutes=30),
)
RUN = Scope("acme", "ana", "run-1")


def _capture(vault: Vault, scope: Scope, observed: datetime, *, source: str = SOURCE, **extra: object) -> str:
    lines = [json.dumps({"event_id": i, "region": "eu-west", "severity": "warning"}) for i in range(20)]
    descriptor = vault.put(
        scope,
        ("\n".join(lines) + "\n").encode(),
        media_type="application/x-ndjson",
        source_version={"source_id": source, "observed_at": observed.isoformat()},
        completeness={
            "status": "complete",
            "coverage": {"region": "eu-west", "start_inclusive": START, "end_exclusive": END},
            "omissions": [],
        },
        **extra,  # type: ignore[arg-type]
    )
    return descriptor.artifact_id


def _query(vault: Vault, scope: Scope):  # type: ignore[no-untyped-def]
    return lambda artifact_id: read.query(
        vault, scope, artifact_id, where={"field": "severity", "op": "eq", "value": "critical"}
    )


def test_too_old_evidence_is_replaced_and_the_substitution_recorded(vault: Vault) -> None:
    old = _capture(vault, RUN, DECIDED - timedelta(hours=2))
    refused = reread(vault, RUN, old, NEED, at=DECIDED, decision="page-oncall")
    assert refused.codes == ("too_old",)
    calls: list[str] = []

    def acquire() -> str:
        calls.append("acquired")
        return _capture(vault, RUN, DECIDED - timedelta(minutes=5))

    outcome = reacquire(vault, RUN, refused, NEED, acquire=acquire, decision="page-oncall", read=_query(vault, RUN))
    assert calls == ["acquired"]
    assert outcome.substituted
    assert outcome.status == "substituted"
    assert outcome.old_id == old
    assert outcome.new_id not in (None, old)
    assert outcome.reasons == ("too_old",)
    assert outcome.at == DECIDED  # judged at the decision's own time, not the clock's
    assert outcome.verdict is not None
    assert outcome.verdict.satisfied
    new = vault.describe(RUN, outcome.new_id)
    assert outcome.charged == {"acquired_bytes": new.size}
    stored = outcome.record
    assert (stored.kind, stored.artifact_id, stored.replaces) == ("substituted", outcome.new_id, old)
    assert stored.content_hash == new.content_hash
    assert stored.decided_at == DECIDED
    assert stored.satisfied
    assert old in stored.explanation
    assert outcome.new_id in stored.explanation
    assert "too_old" in stored.explanation

    packet = vault.replay_packet(RUN, RUN.session)
    assert [r.kind for r in packet.records] == ["used", "substituted"]
    assert [e.artifact_id for e in packet.evidence] == [old, outcome.new_id]
    by_id = {e.artifact_id: e for e in packet.evidence}
    assert by_id[old].replaced_by == outcome.new_id
    assert by_id[outcome.new_id].replaced_by is None
    assert all(e.availability == "available" and e.decisions == ("page-oncall",) for e in packet.evidence)
    assert packet.to_dict()["evidence"][0]["replaced_by"] == outcome.new_id


def test_a_decision_that_needs_the_historical_snapshot_refuses_reacquisition(vault: Vault) -> None:
    historical = Requirement(source=SOURCE, coverage=NEED.coverage, max_age=NEED.max_age, historical=True)
    old = _capture(vault, RUN, DECIDED - timedelta(hours=2))
    refused = reread(vault, RUN, old, historical, at=DECIDED)
    before = [d.artifact_id for d in vault.list(RUN)]
    outcome = reacquire(
        vault, RUN, refused, historical, acquire=lambda: pytest.fail("nothing may be acquired"), decision="audit"
    )
    assert outcome.status == "refused"
    assert not outcome.substituted
    assert outcome.new_id is None
    assert "historical snapshot" in outcome.explanation
    assert outcome.charged == {}
    assert [d.artifact_id for d in vault.list(RUN)] == before
    assert (outcome.record.kind, outcome.record.artifact_id, outcome.record.reasons) == ("refused", old, ("too_old",))
    assert [r.kind for r in vault.replay_packet(RUN, RUN.session).records] == ["refused"]


def test_a_failure_a_newer_observation_cannot_answer_is_refused(vault: Vault) -> None:
    wrong = _capture(vault, RUN, DECIDED - timedelta(minutes=1), source="another.source")
    verdict = reread(vault, RUN, wrong, NEED, at=DECIDED)
    assert verdict.codes == ("wrong_source",)
    outcome = reacquire(vault, RUN, verdict, NEED, acquire=lambda: pytest.fail("not acquired"), decision="page")
    assert outcome.status == "refused"
    assert "wrong_source" in outcome.explanation


def test_satisfied_evidence_has_nothing_to_replace(vault: Vault) -> None:
    fresh = _capture(vault, RUN, DECIDED - timedelta(minutes=1))
    verdict = reread(vault, RUN, fresh, NEED, at=DECIDED)
    with pytest.raises(InvalidArgument, match="nothing to reacquire"):
        reacquire(vault, RUN, verdict, NEED, acquire=lambda: fresh, decision="page")
    assert vault.replay_packet(RUN, RUN.session).records == ()


def test_a_newer_observation_that_still_fails_is_recorded_as_such(vault: Vault) -> None:
    old = _capture(vault, RUN, DECIDED - timedelta(hours=3))
    verdict = reread(vault, RUN, old, NEED, at=DECIDED)
    outcome = reacquire(
        vault, RUN, verdict, NEED, acquire=lambda: _capture(vault, RUN, DECIDED - timedelta(hours=1)), decision="d"
    )
    assert outcome.substituted
    assert outcome.verdict is not None
    assert outcome.verdict.codes == ("too_old",)
    assert outcome.record.satisfied is False
    assert "still fails: too_old" in outcome.explanation


def test_the_replay_packet_says_what_is_available_now(vault: Vault, clock: Clock) -> None:
    vault.set_policy("acme", Policy([Rule("no-secrets", labels=frozenset({"secret"}))]))
    kept = _capture(vault, RUN, DECIDED)
    deleted = _capture(vault, RUN, DECIDED)
    revoked = _capture(vault, RUN, DECIDED)
    expiring = _capture(vault, RUN, DECIDED, expires_at=clock.now + timedelta(seconds=10))
    for artifact_id in (kept, deleted, revoked, expiring, kept):
        record(vault, RUN, reread(vault, RUN, artifact_id, NEED, at=DECIDED), decision="close-incident")
    record(vault, RUN, reread(vault, RUN, kept, NEED, at=DECIDED), decision="notify")
    vault.delete(RUN, deleted)
    vault.revoke_artifact(RUN, revoked, reason="wrong feed")
    clock.advance(seconds=11)

    packet = vault.replay_packet(RUN, RUN.session)
    assert len(packet.records) == 6
    states = {e.artifact_id: e.availability for e in packet.evidence}
    assert states == {kept: "available", deleted: "deleted", revoked: "revoked", expiring: "expired"}
    assert [e.artifact_id for e in packet.evidence] == [kept, deleted, revoked, expiring]  # first use, once each
    first = packet.evidence[0]
    assert first.decisions == ("close-incident", "notify")
    assert first.content_hash == vault.describe(RUN, kept).content_hash
    assert packet.evidence[1].now["at"] is not None  # when it was deleted


def test_replay_never_bypasses_the_policy(vault: Vault) -> None:
    secret = _capture(vault, RUN, DECIDED, labels={"secret"})
    record(vault, RUN, reread(vault, RUN, secret, NEED, at=DECIDED), decision="d")
    vault.set_policy("acme", Policy([Rule("no-secrets", labels=frozenset({"secret"}))]))
    (entry,) = vault.replay_packet(RUN, RUN.session).evidence
    assert entry.availability == "available"
    assert entry.now["allowed"] is False
    assert entry.now["rule_id"] == "no-secrets"


def test_a_runs_records_are_its_own(vault: Vault) -> None:
    mine = _capture(vault, RUN, DECIDED)
    record(vault, RUN, reread(vault, RUN, mine, NEED, at=DECIDED), decision="d")
    for other in (Scope("acme", "ana", "run-2"), Scope("acme", "bob", "run-1"), Scope("globex", "ana", "run-1")):
        packet = vault.replay_packet(other, "run-1" if other.session == "run-1" else other.session)
        assert packet.records == ()
        assert packet.evidence == ()
    assert len(vault.replay_packet(Scope("acme", "ana", "elsewhere"), "run-1").records) == 1  # same user, named run


def test_recording_anothers_artifact_learns_nothing_about_it(vault: Vault) -> None:
    theirs = _capture(vault, Scope("globex", "eve", "s"), DECIDED)
    stored = vault.record_evidence(
        RUN, EvidenceRequest(kind="used", decision="d", artifact_id=theirs, decided_at=DECIDED, satisfied=False)
    )
    assert stored.content_hash is None
    (entry,) = vault.replay_packet(RUN, RUN.session).evidence
    assert entry.availability == "deleted"
    assert entry.now == {"state": "deleted", "at": None, "rule": None}


def test_every_record_is_in_the_audit_chain(vault: Vault) -> None:
    old = _capture(vault, RUN, DECIDED - timedelta(hours=2))
    verdict = reread(vault, RUN, old, NEED, at=DECIDED, decision="page")
    reacquire(vault, RUN, verdict, NEED, acquire=lambda: _capture(vault, RUN, DECIDED), decision="page")
    entries = [e for e in vault.audit(RUN, limit=1000) if e.action == "evidence"]
    assert [e.detail for e in entries] == ["used", f"substituted: replaces {old}"]
    assert all(e.selection == "page" for e in entries)
    assert vault.verify_audit("acme").ok


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"decision": ""}, "decision"),
        ({"decision": "x" * 257}, "decision"),
        ({"decided_at": datetime(2026, 1, 1)}, "timezone-aware"),
        ({"reasons": ("Not A Code",)}, "reason codes"),
        ({"charged": {"acquired_bytes": -1}}, "non-negative"),
        ({"kind": "substituted"}, "replaces"),
        ({"kind": "deleted"}, "kind"),
    ],
)
def test_a_bad_record_is_refused_and_nothing_stored(vault: Vault, change: dict[str, object], message: str) -> None:
    artifact = _capture(vault, RUN, DECIDED)
    fields: dict[str, object] = {
        "kind": "used",
        "decision": "d",
        "artifact_id": artifact,
        "decided_at": DECIDED,
        "satisfied": True,
        **change,
    }
    with pytest.raises(InvalidArgument, match=message):
        vault.record_evidence(RUN, EvidenceRequest(**fields))  # type: ignore[arg-type]
    assert vault.replay_packet(RUN, RUN.session).records == ()


def test_a_substitution_records_what_it_charged_the_runs_budget(vault: Vault) -> None:
    vault.set_budget(RUN, Budget(acquired_bytes=100_000, read_calls=50))
    old = _capture(vault, RUN, DECIDED - timedelta(hours=2))
    verdict = reread(vault, RUN, old, NEED, at=DECIDED)
    before = vault.usage(RUN).spent
    outcome = reacquire(
        vault, RUN, verdict, NEED, acquire=lambda: _capture(vault, RUN, DECIDED), decision="d", read=_query(vault, RUN)
    )
    after = vault.usage(RUN).spent
    assert outcome.new_id is not None
    size = vault.describe(RUN, outcome.new_id).size
    assert outcome.charged["acquired_bytes"] == size
    assert outcome.charged["read_calls"] >= 1  # the query the decision rests on
    assert outcome.charged == {k: after[k] - before[k] for k in outcome.charged}
    assert outcome.record.charged == outcome.charged


def test_an_acquisition_the_budget_refuses_is_a_recorded_refusal(vault: Vault) -> None:
    old = _capture(vault, RUN, DECIDED - timedelta(hours=2))
    verdict = reread(vault, RUN, old, NEED, at=DECIDED)
    vault.set_budget(RUN, Budget(acquired_bytes=10))
    kept = [d.artifact_id for d in vault.list(RUN)]
    outcome = reacquire(vault, RUN, verdict, NEED, acquire=lambda: _capture(vault, RUN, DECIDED), decision="d")
    assert outcome.status == "refused"
    assert "budget" in outcome.explanation
    assert "acquired_bytes" in outcome.explanation
    assert [d.artifact_id for d in vault.list(RUN)] == kept  # nothing stored
    assert [r.kind for r in vault.replay_packet(RUN, RUN.session).records] == ["refused"]
