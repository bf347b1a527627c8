"""Required-evidence gate failures: every unfit piece of evidence must be refused, and nothing unfit committed.

The scripted decision is the incident's restart: it *commits* only if
:mod:`refvault.evidence` says the evidence is satisfied, else it defers with
the reasons. Each attempt offers evidence the eval built to be unfit in one
way (stale, expired, gone, incomplete capture, incomplete scan, an omission
inside the required coverage, a cached preview, damaged bytes, the wrong
source, coverage not met, another artifact's read, an observation after the
decision time, another tenant's artifact). *Caught*: refused, naming the
expected reason. An *unsupported commit* is a commit on evidence the eval
built to be unfit; it must never happen. Controls check the gate is not
simply closed: fresh complete evidence, and evidence re-acquired after a
stale refusal, must let the decision commit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from refvault import evidence, read
from refvault.evaluation.world import OTHER_REGION, REGION, World, flip, jsonl
from refvault.evidence import Verdict

__all__ = ["run"]

PROP = "gate"
CRITICAL = {"field": "severity", "op": "eq", "value": "critical"}


@dataclass(frozen=True, slots=True)
class _Case:
    name: str
    expected: str | None  # the reason code the gate must give; None for a control (must commit)
    judge: Callable[[], Verdict]


async def run(world: World) -> None:
    vault, owner = world.vault, world.owner
    need = world.requirement()
    data = jsonl(world.incident_records(50))
    big = jsonl(world.incident_records(2000))  # stored as a file, so it can be damaged
    now = world.now
    start, end = world.window()

    def complete(artifact_id: str, **options: Any) -> Callable[[], Mapping[str, Any]]:
        return lambda: world.read("query", lambda: read.query(vault, owner, artifact_id, where=CRITICAL, **options))

    def reread(artifact_id: str, *, at: Any = None, answer: Callable[[], Mapping[str, Any]] | None = None) -> Verdict:
        reading = answer or complete(artifact_id)
        return evidence.reread(vault, owner, artifact_id, need, at=at or now, read=reading)

    fresh = world.capture(data).artifact_id
    stale = world.capture(data, observed=now - timedelta(hours=2)).artifact_id
    retained = world.capture(data, expires_at=now + timedelta(minutes=10)).artifact_id
    vanishing = world.capture(data, expires_at=now + timedelta(minutes=10)).artifact_id
    elsewhere = {"region": OTHER_REGION, "reason": "collector partition"}
    partial = world.capture(data, status="partial", regions=(REGION, OTHER_REGION), omissions=(elsewhere,)).artifact_id
    unknown = world.capture(data, status="unknown").artifact_id
    inside = {"region": REGION, "start_inclusive": start, "end_exclusive": end, "reason": "shard 3 not collected"}
    holed = world.capture(data, status="partial", omissions=(inside,)).artifact_id
    damaged = world.capture(big).artifact_id
    wrong = world.capture(data, source="infra.deploy-events").artifact_id
    narrow = world.capture(data, regions=(OTHER_REGION,)).artifact_id
    other = world.capture(jsonl(world.incident_records(50))).artifact_id
    future = world.capture(data, observed=now + timedelta(minutes=3)).artifact_id
    foreign = world.capture(data, scope=world.others["another tenant"]).artifact_id

    def preview() -> Mapping[str, Any]:
        descriptor = vault.describe(owner, fresh)
        return read.preview(descriptor, vault.read_bytes(owner, fresh), max_chars=2000)

    def expired_gone() -> Verdict:
        with world.clock.moved(timedelta(minutes=11)):
            return reread(vanishing, at=now + timedelta(minutes=11))

    def tampered() -> Verdict:
        with world.damaged(damaged, flip):
            return reread(damaged)

    def reacquired() -> Verdict:
        refused = reread(stale)
        if refused.satisfied:
            return refused
        return reread(world.capture(data).artifact_id)  # a new snapshot: a new reference, judged again

    cases = [
        _Case("fresh, complete capture; complete scan (control)", None, lambda: reread(fresh)),
        _Case("re-acquired after a stale refusal (control: recovery)", None, reacquired),
        _Case("observed 2 h before the decision (max 30 min)", "too_old", lambda: reread(stale)),
        _Case(
            "judged after its retention deadline",
            "expired",
            lambda: evidence.check(need, vault.describe(owner, retained), at=now + timedelta(minutes=11)),
        ),
        _Case("expired and gone from the vault (injected clock)", "unavailable", expired_gone),
        _Case("partial capture (another region omitted)", "incomplete_capture", lambda: reread(partial)),
        _Case("capture status unknown", "incomplete_capture", lambda: reread(unknown)),
        _Case(
            "scan cut by max_scan",
            "scan_incomplete",
            lambda: reread(fresh, answer=complete(fresh, max_scan=10)),
        ),
        _Case("omission inside the required coverage", "omissions_in_required_coverage", lambda: reread(holed)),
        _Case("a cached preview instead of a re-read", "cached_preview", lambda: reread(fresh, answer=preview)),
        _Case("stored bytes damaged", "integrity_failure", tampered),
        _Case("another source", "wrong_source", lambda: reread(wrong)),
        _Case("another region than required", "coverage_not_met", lambda: reread(narrow)),
        _Case("a read of another artifact", "identity_mismatch", lambda: reread(fresh, answer=complete(other))),
        _Case("observed after the decision time", "observed_after_evaluation", lambda: reread(future)),
        _Case("another tenant's artifact", "unavailable", lambda: reread(foreign)),
    ]
    for case in cases:
        control = case.expected is None
        with world.attempt(PROP, "decision", case.name, control=control) as a:
            verdict = case.judge()
            a.committed = verdict.satisfied  # the scripted decision commits exactly when the gate is satisfied
            a.unsupported = a.committed and not control
            if control:
                a.ok = a.committed
                a.outcome = "committed" if a.committed else "refused: " + ", ".join(verdict.codes)
            else:
                a.ok = not a.committed and case.expected in verdict.codes
                a.outcome = "UNSUPPORTED COMMIT" if a.committed else "deferred: " + ", ".join(verdict.codes)
