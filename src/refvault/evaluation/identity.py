"""Identity substitution: every way of passing one observation off as another must be detected.

Each attempt swaps identities somewhere between capture and decision: a
second capture under the same filename, a read of one artifact presented as
evidence for another, a cursor replayed on another artifact or selection, a
retried capture with other bytes under the same idempotency key, stored bytes
flipped, swapped for another capture's, truncated, a damaged record
derivative, and a tool handed a Ref to damaged bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import partial

from refvault import evidence, read
from refvault.errors import IdempotencyConflict, IntegrityError, InvalidCursor
from refvault.evaluation.tools import call_tool, make_toolbox
from refvault.evaluation.world import World, flip, jsonl
from refvault.read.records import kind_for

__all__ = ["run"]

PROP = "identity"
CRITICAL = {"field": "severity", "op": "eq", "value": "critical"}


def _refused(call: Callable[[], object], error: type[Exception]) -> str | None:
    """The name of what ``call`` raised if it is ``error``; None if it returned (the substitution went through)."""
    try:
        call()
    except error as exc:
        reason = getattr(exc, "reason", None)
        return type(exc).__name__ + (f" ({reason})" if reason else "")
    return None


async def run(world: World) -> None:
    vault, owner = world.vault, world.owner
    need = world.requirement()
    first_data = jsonl(world.incident_records(2000))
    first = world.capture(first_data, filename="incident.jsonl")
    second = world.capture(jsonl(world.incident_records(2000)), filename="incident.jsonl")

    with world.attempt(PROP, "recapture", "second capture under the same filename; pinned read of the first") as a:
        data = world.read("read_bytes", lambda: vault.read_bytes(owner, first.artifact_id), model_facing=False)
        same = "sha256:" + hashlib.sha256(data).hexdigest() == first.content_hash and data == first_data
        a.ok = second.artifact_id != first.artifact_id and same
        a.outcome = "new id; the first id still reads its own bytes" if a.ok else "observations mixed under one id"

    with world.attempt(PROP, "evidence", "a read of the second capture presented as evidence for the first") as a:
        answer = world.read("query", lambda: read.query(vault, owner, second.artifact_id, where=CRITICAL))
        verdict = evidence.check(need, vault.describe(owner, first.artifact_id), at=world.now, read=answer)
        a.ok = "identity_mismatch" in verdict.codes
        a.outcome = ", ".join(verdict.codes) or "accepted"

    with world.attempt(PROP, "evidence", "a read of the first relabelled with the second's id") as a:
        answer = world.read("query", lambda: read.query(vault, owner, first.artifact_id, where=CRITICAL))
        forged = {**answer, "artifact_id": second.artifact_id}
        verdict = evidence.check(need, vault.describe(owner, second.artifact_id), at=world.now, read=forged)
        a.ok = "identity_mismatch" in verdict.codes
        a.outcome = ", ".join(verdict.codes) or "accepted"

    page = world.read("query", lambda: read.query(vault, owner, first.artifact_id, limit=5))
    cursor = page["next_cursor"]
    with world.attempt(PROP, "cursor", "a cursor of the first capture replayed on the second") as a:
        outcome = _refused(
            lambda: world.read("query", lambda: read.query(vault, owner, second.artifact_id, limit=5, cursor=cursor)),
            InvalidCursor,
        )
        a.ok, a.outcome = outcome is not None, outcome or "accepted"

    with world.attempt(PROP, "cursor", "a cursor replayed with another selection") as a:
        other = {"field": "severity", "op": "eq", "value": "warning"}
        outcome = _refused(
            lambda: world.read(
                "query", lambda: read.query(vault, owner, first.artifact_id, where=other, limit=5, cursor=cursor)
            ),
            InvalidCursor,
        )
        a.ok, a.outcome = outcome is not None, outcome or "accepted"

    with world.attempt(PROP, "capture", "a retried capture with other bytes under the same idempotency key") as a:
        key = f"call_diag/{world.rng.getrandbits(32):08x}"
        world.capture(first_data, filename="incident.jsonl", idempotency_key=key)
        outcome = _refused(
            lambda: world.capture(flip(first_data), filename="incident.jsonl", idempotency_key=key),
            IdempotencyConflict,
        )
        a.ok, a.outcome = outcome is not None, outcome or "second bytes accepted under the first capture"

    await _damaged_reads(world, first.artifact_id, first_data)
    _derivative(world)


async def _damaged_reads(world: World, artifact_id: str, data: bytes) -> None:
    vault, owner = world.vault, world.owner
    need = world.requirement()

    def read_all() -> None:
        with vault.stream(owner, artifact_id) as stream:
            stream.read()

    direct: list[tuple[str, Callable[[], object]]] = [
        ("read_bytes", lambda: vault.read_bytes(owner, artifact_id)),
        ("stream", read_all),
        ("read_range", lambda: vault.read_range(owner, artifact_id, len(data) // 2 - 100, 200)),
        ("window", lambda: read.window(vault, owner, artifact_id, lines=[0, 50])),
    ]
    with world.damaged(artifact_id, flip):
        for op, call in direct:
            with world.attempt(PROP, "stored bytes", f"one stored byte flipped: {op}") as a:
                outcome = _refused(partial(world.read, op, call, model_facing=False), IntegrityError)
                a.ok, a.outcome = outcome is not None, outcome or "damaged bytes returned"
        with world.attempt(PROP, "stored bytes", "one stored byte flipped: evidence re-read") as a:
            verdict = evidence.reread(vault, owner, artifact_id, need, at=world.now)
            a.ok = "integrity_failure" in verdict.codes
            a.outcome = ", ".join(verdict.codes) or "accepted"
        with world.attempt(PROP, "stored bytes", "one stored byte flipped: a tool given it as a Ref") as a:
            box = make_toolbox(world, "checksum")
            run_id = f"run_identity_{world.trial}"
            observation = await call_tool(
                world, box, "checksum", {"doc": artifact_id}, scope=owner, run_id=run_id, call_id="call_checksum"
            )
            a.ok = observation.is_error and "IntegrityError" in observation.content
            a.outcome = "the tool failed with IntegrityError" if a.ok else "the tool received bytes"

    swapped = data.replace(b'"severity":"warning"', b'"severity":"WARNING"', 1)
    assert len(swapped) == len(data)
    world.capture(swapped, filename="incident.jsonl")  # another capture's bytes, the same size
    for name, damage in (
        ("stored bytes swapped for another capture's", lambda _: swapped),
        ("stored bytes truncated", lambda b: b[:-100]),
    ):
        with world.damaged(artifact_id, damage), world.attempt(PROP, "stored bytes", name) as a:
            outcome = _refused(
                lambda: world.read("read_bytes", lambda: vault.read_bytes(owner, artifact_id), model_facing=False),
                IntegrityError,
            )
            a.ok, a.outcome = outcome is not None, outcome or "damaged bytes returned"


def _derivative(world: World) -> None:
    """Damage the Parquet form of a record artifact (built, not yet fetched): the query must refuse it."""
    vault, owner = world.vault, world.owner
    records = world.capture(jsonl(world.incident_records(3000)), filename="events.jsonl")
    read.derive(vault, owner, records.artifact_id)
    kind = kind_for(records.media_type)
    assert kind is not None
    derivation = vault.derived(owner, records.artifact_id, kind)
    assert derivation is not None
    with world.damaged_key(derivation.key, flip), world.attempt(PROP, "stored bytes", "record derivative damaged") as a:
        outcome = _refused(
            lambda: world.read("query", lambda: read.query(vault, owner, records.artifact_id, where=CRITICAL)),
            IntegrityError,
        )
        a.ok, a.outcome = outcome is not None, outcome or "answered from damaged bytes"
