"""The evidence gate: may this artifact, read this way, support this decision, judged at this moment?

::

    from refvault.evidence import Requirement, check, reread

    need = Requirement(
        source="infra.incident-events",
        coverage={"region": ["eu-west", "us-east"], "start_inclusive": "2026-11-06T04:00:00Z",
                  "end_exclusive": "2026-11-06T04:10:00Z"},
        max_age=timedelta(minutes=30),
    )
    verdict = reread(vault, scope, artifact_id, need, at=decision_time,
                     read=lambda: refvault.read.query(vault, scope, artifact_id, where=...))
    verdict.satisfied      # True, or False with verdict.reasons: each a code and a message

A content hash proves the bytes are the ones captured; it does not prove they
are fit for a decision. The gate answers the second question from trusted
state only. Invariants (tested in ``tests/evidence/test_gate.py``):

* **Explicit time.** Every judgement takes ``at``, a timezone-aware moment
  supplied by the caller; nothing here reads a clock, so a verdict is
  reproducible.
* **Every reason, not the first.** A verdict lists every failed condition,
  each with a stable code (:data:`REASONS`) and a message made of metadata
  only (ids, field names, coverage values, times); never artifact content.
* **Applicability** (:func:`check`): the capture's ``source_version.source_id``
  is the required source (``wrong_source``); with ``require_complete`` its
  capture status is ``complete`` (``incomplete_capture``); its recorded
  coverage includes the required coverage (``coverage_not_met``): listed
  values (a region, several regions) by containment, a
  ``start_inclusive``/``end_exclusive`` window by interval containment; no
  omission, of the capture or of the read, touches the required coverage
  (``omissions_in_required_coverage``; an omission naming none of the
  required dimensions, or naming one by a value that is not a string or a
  list of strings, cannot be ruled out, so it counts; names are compared
  without regard to case or surrounding space); the observation is at most
  ``max_age`` old at ``at`` (``too_old``; observed at
  ``source_version.observed_at``, else, when that is not stated,
  ``created_at``; one stated but unreadable, e.g. without a UTC offset, has no
  establishable age and is ``too_old`` too; an observation after ``at`` is
  ``observed_after_evaluation``); it is not past its retention deadline
  (``expired``: retention is not freshness, so both are checked); its lineage status
  (``retrieval.lineage.status``, which a vault's ``describe`` gives a copy or a marked artifact)
  is not ``stale`` (``stale_evidence``: it or a source was superseded) or ``revoked``
  (``revoked_evidence``: it or a source was revoked, deleted or expired) unless the requirement
  allows it (``allow_stale``, ``allow_revoked``).
* **The read it rests on.** A read response must belong to exactly this
  artifact and bytes (``identity_mismatch`` otherwise: a second capture under
  the same filename is a different artifact); its scan must be complete
  (``scan_incomplete``); what a finished read did not examine (outside its
  ``record_range``, before the cursor or ``from_line`` it continued from) is
  an omission of the read; a preview (or a window, which scans nothing) is a
  selection of what was captured, not a read, so it never satisfies a
  required re-read (``cached_preview``).
* **Re-reading** (:func:`reread`): describes the artifact again, re-hashes
  every byte (``integrity_failure`` if they do not match), and runs the given
  read now, so nothing cached stands in for it; an artifact that is gone or
  out of scope is ``unavailable``.
* **A run's evidence** (:func:`record`, ``reread(..., decision=)``, :func:`reacquire`): what a named
  decision used is recorded in the run (the scope's session) through ``vault.record_evidence``, with the
  vault's own content hash; a refusal for a reason in :data:`SUBSTITUTABLE` may be answered by a newer
  observation, judged at the same decision time and recorded as a substitution (old id → new id, reasons,
  what it charged), unless the requirement is ``historical``: then, as for any other reason, reacquisition
  is refused and the refusal recorded. ``vault.replay_packet`` lists it all with availability now.
* **Data only.** The gate reads descriptor fields and the coverage fields of
  read responses (``artifact_id``, ``content_hash``, ``scan_complete``,
  ``omissions``, the scanned and total counts, ``has_more``, the selection's
  ``record_range``); it never looks at records or text, so nothing in
  retrieved content can change a verdict or act as an instruction. A read
  given to :func:`check` is taken as the caller's own read result: only
  :func:`reread` runs the read itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeGuard

from refvault.budgets import COUNTED, Usage
from refvault.errors import (
    BudgetExceeded,
    Expired,
    IntegrityError,
    InvalidArgument,
    InvalidId,
    InvalidMetadata,
    NotFound,
)
from refvault.model import Descriptor, Scope, format_time, parse_time
from refvault.runs import MAX_EXPLANATION, EvidenceRecord, EvidenceRequest, Substitution

if TYPE_CHECKING:
    from refvault.contract import VaultContract

__all__ = [
    "REASONS",
    "SUBSTITUTABLE",
    "Reason",
    "Requirement",
    "Verdict",
    "check",
    "reacquire",
    "record",
    "reread",
]

WINDOW = ("start_inclusive", "end_exclusive")
SHOWN = 8  # coverage values named in one message

REASONS = (
    "wrong_source",
    "incomplete_capture",
    "coverage_not_met",
    "omissions_in_required_coverage",
    "too_old",
    "observed_after_evaluation",
    "expired",
    "identity_mismatch",
    "scan_incomplete",
    "cached_preview",
    "integrity_failure",
    "unavailable",
    "stale_evidence",
    "revoked_evidence",
)


@dataclass(frozen=True, slots=True)
class Requirement:
    """What a decision needs from its evidence.

    ``source``: the required ``source_version.source_id``. ``coverage``: the
    dimensions the evidence must cover: each key a string or a list of strings
    (all of them required), except ``start_inclusive``/``end_exclusive``, a time
    window (ISO 8601 strings or aware datetimes) the capture's window must
    contain. ``max_age``: the oldest observation the decision accepts.
    ``require_complete``: the capture must say ``complete``. ``allow_stale`` / ``allow_revoked``: the
    decision accepts evidence whose lineage status (``retrieval.lineage.status``: the artifact or one it
    was derived from was superseded / revoked, deleted or expired) is ``stale`` / ``revoked``; by
    default it does not.
    """

    source: str
    coverage: Mapping[str, Any] = field(default_factory=dict)
    max_age: timedelta = timedelta(hours=1)
    require_complete: bool = True
    allow_stale: bool = False
    allow_revoked: bool = False
    historical: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not self.source:
            raise InvalidArgument("Requirement.source must be a non-empty string (a source_version.source_id)")
        if not isinstance(self.max_age, timedelta) or self.max_age < timedelta(0):
            raise InvalidArgument("Requirement.max_age must be a non-negative timedelta")
        if not isinstance(self.coverage, Mapping):
            raise InvalidArgument("Requirement.coverage must be a mapping of dimension to value(s)")
        if (WINDOW[0] in self.coverage) != (WINDOW[1] in self.coverage):
            raise InvalidArgument("Requirement.coverage needs both start_inclusive and end_exclusive, or neither")
        for key, value in self.coverage.items():
            if key in WINDOW:
                _moment(value, f"Requirement.coverage.{key}")
            elif not _values(value):
                raise InvalidArgument(f"Requirement.coverage.{key} must be a string or a non-empty list of strings")
        if WINDOW[0] in self.coverage and _window(self.coverage) is None:
            raise InvalidArgument("Requirement.coverage: start_inclusive must be before end_exclusive")

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "coverage": {key: _jsonable(value) for key, value in self.coverage.items()},
            "max_age_seconds": self.max_age.total_seconds(),
            "require_complete": self.require_complete,
            "allow_stale": self.allow_stale,
            "allow_revoked": self.allow_revoked,
            "historical": self.historical,
        }


@dataclass(frozen=True, slots=True)
class Reason:
    """One condition the evidence fails: a code from :data:`REASONS` and a message of metadata only."""

    code: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True, slots=True)
class Verdict:
    """The gate's answer for one artifact at one moment: satisfied, or every reason it is not."""

    artifact_id: str
    content_hash: str | None
    evaluated_at: datetime
    reasons: tuple[Reason, ...] = ()

    @property
    def satisfied(self) -> bool:
        return not self.reasons

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(reason.code for reason in self.reasons)

    def to_dict(self) -> dict[str, Any]:
        return {
            "artifact_id": self.artifact_id,
            "content_hash": self.content_hash,
            "evaluated_at": format_time(self.evaluated_at),
            "satisfied": self.satisfied,
            "reasons": [reason.to_dict() for reason in self.reasons],
        }


def check(
    requirement: Requirement, descriptor: Descriptor, *, at: datetime, read: Mapping[str, Any] | None = None
) -> Verdict:
    """Judge ``descriptor`` (and the read response ``read`` the decision rests on, if any) at ``at``."""
    moment = _moment(at, "at")
    reasons = [*_applicability(requirement, descriptor, moment)]
    if read is not None:
        reasons.extend(_read_reasons(requirement, descriptor, read))
    return Verdict(descriptor.artifact_id, descriptor.content_hash, moment, tuple(reasons))


def reread(
    vault: VaultContract,
    scope: Scope,
    artifact_id: str,
    requirement: Requirement,
    *,
    at: datetime,
    read: Callable[[], Mapping[str, Any]] | None = None,
    decision: str | None = None,
) -> Verdict:
    """Describe, re-hash and (with ``read``) re-read the artifact now, then :func:`check` what came back.

    ``read`` performs the selective read the decision rests on (e.g. a
    ``refvault.read.query`` of this artifact); it is called after the bytes
    were verified. Integrity failures and missing or out-of-scope artifacts
    become reasons, not exceptions; any other error propagates. With ``decision`` (its name), the verdict
    is recorded as evidence that decision used (:func:`record`), satisfied or not.
    """
    verdict = _reread(vault, scope, artifact_id, requirement, at=at, read=read)
    if decision is not None:
        record(vault, scope, verdict, decision=decision)
    return verdict


def _reread(
    vault: VaultContract,
    scope: Scope,
    artifact_id: str,
    requirement: Requirement,
    *,
    at: datetime,
    read: Callable[[], Mapping[str, Any]] | None,
) -> Verdict:
    moment = _moment(at, "at")
    shown = artifact_id[:64] if isinstance(artifact_id, str) else "?"
    try:
        descriptor = vault.describe(scope, artifact_id)
    except (NotFound, InvalidId, Expired) as exc:
        return Verdict(shown, None, moment, (Reason("unavailable", _unavailable(shown, exc)),))
    try:
        vault.verify_artifact(scope, descriptor.artifact_id)
        response = None if read is None else read()
    except IntegrityError:
        message = f"artifact {descriptor.artifact_id}: its bytes no longer match {descriptor.content_hash}"
        reasons = (*_applicability(requirement, descriptor, moment), Reason("integrity_failure", message))
        return Verdict(descriptor.artifact_id, descriptor.content_hash, moment, reasons)
    except (NotFound, Expired) as exc:
        reason = Reason("unavailable", _unavailable(descriptor.artifact_id, exc))
        return Verdict(descriptor.artifact_id, descriptor.content_hash, moment, (reason,))
    return check(requirement, descriptor, at=moment, read=response)


# -- a run's evidence: recording it, and reacquiring it ---------------------------------------------------------------

SUBSTITUTABLE = frozenset({"too_old", "expired", "stale_evidence", "revoked_evidence", "unavailable"})
"""Reason codes a newer observation can answer: the evidence is too old, past retention, superseded,
revoked or gone. Any other failure (wrong source, coverage, an incomplete scan) is not about age."""


def record(vault: VaultContract, scope: Scope, verdict: Verdict, *, decision: str) -> EvidenceRecord:
    """Record that ``decision`` (a name) of ``scope``'s run used the evidence ``verdict`` judged, satisfied or
    not (``vault.record_evidence``); the stored :class:`~refvault.runs.EvidenceRecord`.

    The content hash recorded is the vault's own for the artifact, never the verdict's.
    """
    request = EvidenceRequest(
        kind="used",
        decision=decision,
        artifact_id=verdict.artifact_id,
        decided_at=verdict.evaluated_at,
        satisfied=verdict.satisfied,
        reasons=verdict.codes,
    )
    return vault.record_evidence(scope, request)


def reacquire(
    vault: VaultContract,
    scope: Scope,
    verdict: Verdict,
    requirement: Requirement,
    *,
    acquire: Callable[[], str | Descriptor],
    decision: str,
    read: Callable[[str], Mapping[str, Any]] | None = None,
) -> Substitution:
    """Replace evidence the gate refused as too old (or expired, superseded, revoked, gone) by a newer
    observation, and record the substitution; or refuse, and record why.

    ``verdict`` is the gate's refusal of the old evidence; ``acquire`` captures the newer observation (e.g.
    calls the tool again) and returns its artifact id or descriptor; ``read`` (given the new id) performs the
    selective read the decision rests on, as in :func:`reread`. The new evidence is judged by :func:`reread`
    at the same decision time (``verdict.evaluated_at``), so a substitution never moves the decision.

    Refused, with nothing acquired, when the requirement is ``historical`` (the decision needs the snapshot
    as it was) or when none of the old verdict's reasons is one a newer observation answers
    (:data:`SUBSTITUTABLE`). Either way one :class:`~refvault.runs.EvidenceRecord` is stored (``substituted``:
    old id → new id, the old reasons, the decision time, what the acquisition charged the run's budget; or
    ``refused``) and returned in the :class:`~refvault.runs.Substitution`. ``charged`` is, when the run has a
    budget, what its usage grew by while acquiring and judging the new evidence, per counted dimension
    (else the bytes acquired). An acquisition the run's budget refuses (:class:`~refvault.errors.BudgetExceeded`,
    nothing stored) is a recorded refusal too. A satisfied verdict has nothing to
    replace (:class:`~refvault.errors.InvalidArgument`).
    """
    if not isinstance(verdict, Verdict) or not isinstance(requirement, Requirement):
        raise InvalidArgument("reacquire takes the gate's Verdict on the old evidence and the decision's Requirement")
    if verdict.satisfied:
        raise InvalidArgument(f"the evidence {verdict.artifact_id} satisfies the decision: nothing to reacquire")
    at = verdict.evaluated_at
    fixable = [code for code in verdict.codes if code in SUBSTITUTABLE]
    refusal = None
    if requirement.historical:
        refusal = (
            f"decision {decision!r} requires the historical snapshot: a newer observation cannot stand in "
            f"for {verdict.artifact_id}"
        )
    elif not fixable:
        refusal = f"a newer observation does not answer {_listed(list(verdict.codes))}"
    if refusal is not None:
        return _refuse(vault, scope, verdict, decision, refusal)
    before = vault.usage(scope)
    try:
        acquired = acquire()
    except BudgetExceeded as exc:  # nothing was stored: the run cannot pay for a newer observation
        refusal = f"the run's budget refused the acquisition ({exc.dimension or 'a budget dimension'} exhausted)"
        return _refuse(vault, scope, verdict, decision, refusal)
    new_id = acquired.artifact_id if isinstance(acquired, Descriptor) else acquired
    if not isinstance(new_id, str) or new_id == verdict.artifact_id:
        raise InvalidArgument("acquire must return the id (or descriptor) of a new artifact")
    reading = None if read is None else (lambda: read(new_id))
    new_verdict = _reread(vault, scope, new_id, requirement, at=at, read=reading)
    charged = _charged(vault, scope, new_id, before)
    outcome = "satisfies the decision" if new_verdict.satisfied else f"still fails: {_listed(list(new_verdict.codes))}"
    explanation = (
        f"{verdict.artifact_id} was refused ({_listed(fixable)}); decision {decision!r} permits newer observations, "
        f"so {new_id} was acquired, which {outcome}"
    )[:MAX_EXPLANATION]
    substituted = EvidenceRequest(
        kind="substituted",
        decision=decision,
        artifact_id=new_id,
        decided_at=at,
        satisfied=new_verdict.satisfied,
        reasons=verdict.codes,
        replaces=verdict.artifact_id,
        explanation=explanation,
        charged=charged,
    )
    stored = vault.record_evidence(scope, substituted)
    return Substitution(
        "substituted", verdict.artifact_id, new_id, verdict.codes, explanation, at, charged, stored, new_verdict
    )


def _refuse(vault: VaultContract, scope: Scope, verdict: Verdict, decision: str, refusal: str) -> Substitution:
    """Record a refused reacquisition of the evidence ``verdict`` judged, and say so."""
    refused = EvidenceRequest(
        kind="refused",
        decision=decision,
        artifact_id=verdict.artifact_id,
        decided_at=verdict.evaluated_at,
        satisfied=False,
        reasons=verdict.codes,
        explanation=refusal,
    )
    stored = vault.record_evidence(scope, refused)
    return Substitution("refused", verdict.artifact_id, None, verdict.codes, refusal, verdict.evaluated_at, {}, stored)


def _charged(vault: VaultContract, scope: Scope, new_id: str, before: Usage) -> dict[str, int]:
    """What acquiring and judging ``new_id`` cost the run: with a budget, what its usage grew by in every
    counted dimension (the acquisition, the re-hash, the read); without one, the bytes acquired."""
    if before.budget is not None:
        after = vault.usage(scope)
        grown = {name: int(after.spent[name] - before.spent[name]) for name in COUNTED}
        return {name: amount for name, amount in grown.items() if amount > 0}
    try:
        return {"acquired_bytes": vault.describe(scope, new_id).size}
    except (NotFound, InvalidId, Expired):
        return {"acquired_bytes": 0}


# -- the conditions --------------------------------------------------------------------------------------------------


def _applicability(requirement: Requirement, descriptor: Descriptor, at: datetime) -> Iterable[Reason]:
    artifact = descriptor.artifact_id
    source = descriptor.source_version.get("source_id")
    if source != requirement.source:
        got = "no source_id" if source is None else f"source {_shown(source)}"
        yield Reason("wrong_source", f"artifact {artifact} has {got}; the decision needs {requirement.source}")
    status = descriptor.completeness.get("status", "unknown")
    if requirement.require_complete and status != "complete":
        yield Reason(
            "incomplete_capture", f"artifact {artifact} is a {_shown(status)} capture; the decision needs complete"
        )
    missing = _uncovered(requirement.coverage, descriptor.completeness.get("coverage"))
    if missing:
        yield Reason("coverage_not_met", f"artifact {artifact} does not cover {'; '.join(missing)}")
    touching = _touching(requirement.coverage, _entries(descriptor.completeness.get("omissions")))
    if touching:
        yield Reason(
            "omissions_in_required_coverage",
            f"artifact {artifact} omits part of the required coverage: {'; '.join(touching)}",
        )
    observed = _observed(descriptor)
    if observed is None:
        yield Reason(
            "too_old",
            f"artifact {artifact} has a source_version.observed_at that is not a time with a UTC offset, so its "
            f"age at {format_time(at)} cannot be established; the decision accepts at most {_age(requirement.max_age)}",
        )
    elif observed > at:
        yield Reason(
            "observed_after_evaluation",
            f"artifact {artifact} was observed at {format_time(observed)}, after the evaluation time {format_time(at)}",
        )
    elif at - observed > requirement.max_age:
        yield Reason(
            "too_old",
            f"artifact {artifact} was observed at {format_time(observed)}, {_age(at - observed)} before "
            f"{format_time(at)}; the decision accepts at most {_age(requirement.max_age)}",
        )
    if descriptor.expires_at is not None and descriptor.expires_at <= at:
        yield Reason("expired", f"artifact {artifact} expired at {format_time(descriptor.expires_at)}")
    lineage = descriptor.retrieval.get("lineage")
    status = lineage.get("status") if isinstance(lineage, Mapping) else None
    if status == "stale" and not requirement.allow_stale:
        newer = lineage.get("superseded_by") if isinstance(lineage, Mapping) else None
        by = f" by {_shown(newer)}" if isinstance(newer, str) else " (or an artifact it derives from was)"
        yield Reason(
            "stale_evidence",
            f"artifact {artifact} was superseded{by}; the decision does not accept stale evidence",
        )
    elif status == "revoked" and not requirement.allow_revoked:
        yield Reason(
            "revoked_evidence",
            f"artifact {artifact} (or an artifact it derives from) was revoked, deleted or expired; "
            "the decision does not accept revoked evidence",
        )


def _read_reasons(requirement: Requirement, descriptor: Descriptor, read: Mapping[str, Any]) -> Iterable[Reason]:
    artifact = descriptor.artifact_id
    body = read.get("offloaded", read) if isinstance(read, Mapping) else read
    if not isinstance(body, Mapping) or "scan_complete" not in body:
        yield Reason(
            "cached_preview",
            f"the read given for artifact {artifact} is a preview, a cached summary or a window, not a scan of "
            "the capture: run a query or grep of it again",
        )
        return
    if body.get("artifact_id") != artifact or body.get("content_hash") != descriptor.content_hash:
        yield Reason(
            "identity_mismatch",
            f"the read given is of artifact {_shown(body.get('artifact_id'))} "
            f"({_shown(body.get('content_hash'))}), not of artifact {artifact} ({descriptor.content_hash})",
        )
    read_of = artifact if body.get("artifact_id") == artifact else _shown(body.get("artifact_id"))  # what was read
    if body.get("scan_complete") is not True:
        yield Reason(
            "scan_incomplete",
            f"the read of artifact {read_of} did not finish scanning: continue it with its cursor",
        )
    capture_omissions = _entries(descriptor.completeness.get("omissions"))
    extra = [o for o in _entries(body.get("omissions")) if o not in capture_omissions]
    touching = _touching(requirement.coverage, extra)
    unexamined = _unexamined(body)
    if unexamined is not None:
        touching.append(unexamined)  # names none of the required dimensions: it cannot be ruled out
    if touching:
        yield Reason(
            "omissions_in_required_coverage",
            f"the read of artifact {read_of} omits part of the required coverage: {'; '.join(touching)}",
        )


# -- coverage ----------------------------------------------------------------------------------------------------------


def _uncovered(required: Mapping[str, Any], recorded: object) -> list[str]:
    """What of ``required`` the capture's recorded coverage does not include, described."""
    have = recorded if isinstance(recorded, Mapping) else {}
    missing: list[str] = []
    for key, value in required.items():
        if key in WINDOW:
            continue
        absent = [v for v in _values(value) if v not in set(_values(have.get(key)))]
        if absent:
            missing.append(f"{key} {_listed(absent)}")
    if WINDOW[0] in required:
        need = _window(required)
        window = _window(have)
        assert need is not None  # validated by Requirement
        if window is None or not (window[0] <= need[0] and need[1] <= window[1]):
            missing.append(f"the window {format_time(need[0])} to {format_time(need[1])}")
    return missing


def _touching(required: Mapping[str, Any], omissions: Iterable[object]) -> list[str]:
    """Descriptions of the omissions that may fall inside the required coverage."""
    found: list[str] = []
    for omission in omissions:
        if not isinstance(omission, Mapping):
            found.append("an omission without dimensions")
            continue
        shared = [key for key in omission if key in required and key not in WINDOW]
        window = _window(omission) if WINDOW[0] in required else None
        overlaps = all(_may_overlap(omission[key], required[key]) for key in shared)
        if window is not None:
            need = _window(required)
            assert need is not None
            overlaps = overlaps and window[0] < need[1] and need[0] < window[1]
        if not shared and window is None:
            overlaps = True  # it names none of the required dimensions: it cannot be ruled out
        if overlaps:
            described = ", ".join(f"{key} {_shown(omission[key])}" for key in list(omission)[:SHOWN])
            found.append(described or "an omission without dimensions")
    return found


def _may_overlap(omitted: object, required: object) -> bool:
    """Whether an omission's value of a dimension may name a required value: unreadable values may (they
    cannot be ruled out), and names are compared without regard to case or surrounding space."""
    named = _values(omitted)
    return not named or bool({_folded(v) for v in named} & {_folded(v) for v in _values(required)})


def _folded(value: str) -> str:
    return " ".join(value.split()).casefold()


def _entries(omissions: object) -> list[object]:
    """A capture's or a read's ``omissions`` as a list: a list as it is, nothing as none, anything else as one."""
    if isinstance(omissions, list | tuple):
        return list(omissions)
    return [omissions] if omissions else []


def _unexamined(body: Mapping[str, Any]) -> str | None:
    """How much of the capture a read did not examine: a ``record_range`` narrower than the capture, or a read
    that ended (no more pages) having examined fewer records or lines than the capture holds (it continued from
    a cursor or a ``from_line``). None when it examined everything, or does not say."""
    for unit, scanned_key, total_key in (
        ("records", "scanned_records", "total_records"),
        ("lines", "scanned_lines", "total_lines"),
    ):
        scanned, total = body.get(scanned_key), body.get(total_key)
        if not (_count(scanned) and _count(total)):
            continue
        selection = body.get("selection")
        span = selection.get("record_range") if isinstance(selection, Mapping) else None
        narrowed = (
            isinstance(span, list | tuple)
            and len(span) == 2
            and all(_count(v) for v in span)
            and (span[0] > 0 or span[1] < total)
        )
        if narrowed or (body.get("has_more") is not True and scanned < total):
            return (
                f"only {scanned:,} of {total:,} {unit} were examined by this read (a record range, a page "
                "continued from a cursor, or a from_line)"
            )
    return None


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _values(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return list(value)
    return []


def _window(mapping: Mapping[str, Any]) -> tuple[datetime, datetime] | None:
    try:
        start, end = (_moment(mapping.get(key), key) for key in WINDOW)
    except (InvalidArgument, InvalidMetadata):
        return None
    return (start, end) if start < end else None


def _moment(value: object, name: str) -> datetime:
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidArgument(f"{name} must be a timezone-aware datetime (the gate reads no clock)")
        try:
            return value.astimezone(UTC)
        except OverflowError:
            raise InvalidArgument(f"{name} is out of range once converted to UTC") from None
    if isinstance(value, str):
        try:
            return parse_time(value)
        except (ValueError, OverflowError, InvalidMetadata):
            raise InvalidArgument(f"{name} must be an ISO 8601 time with a UTC offset") from None
    raise InvalidArgument(f"{name} must be a timezone-aware datetime or an ISO 8601 string")


def _observed(descriptor: Descriptor) -> datetime | None:
    """``source_version.observed_at``; ``created_at`` when it is not stated; None when stated but unreadable
    (a naive time, garbage): then the observation's age cannot be established."""
    observed = descriptor.source_version.get("observed_at")
    if observed is None:
        return descriptor.created_at
    try:
        return _moment(observed, "source_version.observed_at")
    except InvalidArgument:
        return None


# -- wording -----------------------------------------------------------------------------------------------------------


def _unavailable(artifact_id: str, exc: Exception) -> str:
    return f"artifact {artifact_id} cannot be read in this scope ({type(exc).__name__})"


def _age(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds % 3600 == 0 and seconds >= 3600:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0 and seconds >= 60:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def _shown(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:80] + "…"


def _listed(values: list[str]) -> str:
    shown = ", ".join(_shown(v) for v in values[:SHOWN])
    return shown + (f" and {len(values) - SHOWN} more" if len(values) > SHOWN else "")


def _jsonable(value: object) -> object:
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, tuple):
        return list(value)
    return value
