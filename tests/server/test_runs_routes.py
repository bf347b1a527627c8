"""A run's evidence over HTTP (:mod:`refvault.server.routes_runs` and :mod:`refvault.client_runs`), on an embedded
store and on S3 + PostgreSQL.

The gate's functions run unchanged on a :class:`~refvault.Client`: ``reread(..., decision=)`` records the use,
``reacquire`` the substitution, and ``GET /v1/replay-packet`` answers what the embedded vault answers for the
same run. A run is the caller's own session: another user's or tenant's key sees none of its records. A bad
record is a 400 with nothing stored; a canary in the artifacts never appears in any answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from refvault import Client, Scope
from refvault.evidence import Requirement, reacquire, reread
from tests.client.copies_live import BACKENDS, LiveCopies, live_copies

RUN = Scope("acme", "ana", "run-7")
CANARY = "CANARYruns5q"
DECIDED = datetime(2026, 11, 6, 6, 0, tzinfo=UTC)
NEED = Requirement(source="infra.events", max_age=timedelta(minutes=30))


@pytest.fixture(scope="module", params=BACKENDS)
def live(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCopies]:
    with live_copies(request, tmp_path_factory.mktemp("runs-routes")) as server:
        yield server


def _capture(client: Client, observed: datetime) -> str:
    return client.put(
        RUN,
        json.dumps({"note": CANARY}).encode() + b"\n",
        media_type="application/x-ndjson",
        source_version={"source_id": "infra.events", "observed_at": observed.isoformat()},
        completeness={"status": "complete", "coverage": {}, "omissions": []},
    ).artifact_id


def test_the_gate_records_and_replays_over_http(live: LiveCopies) -> None:
    with Client(live.url, live.owner) as client:
        old = _capture(client, DECIDED - timedelta(hours=2))
        verdict = reread(client, RUN, old, NEED, at=DECIDED, decision="page")
        assert verdict.codes == ("too_old",)
        outcome = reacquire(
            client,
            RUN,
            verdict,
            NEED,
            acquire=lambda: _capture(client, DECIDED - timedelta(minutes=1)),
            decision="page",
        )
        assert outcome.substituted
        assert outcome.verdict is not None
        assert outcome.verdict.satisfied
        assert outcome.record.replaces == old
        assert outcome.record.seq > 0
        packet = client.replay_packet(RUN, RUN.session)
        assert [r.kind for r in packet.records] == ["used", "substituted"]
        assert [(e.artifact_id, e.availability, e.replaced_by) for e in packet.evidence] == [
            (old, "available", outcome.new_id),
            (outcome.new_id, "available", None),
        ]
        client.delete(RUN, old)
        assert client.replay_packet(RUN, RUN.session).evidence[0].availability == "deleted"
    with live.open() as vault:
        embedded = vault.replay_packet(RUN, RUN.session)
    assert [r.to_dict() for r in embedded.records] == [r.to_dict() for r in packet.records]


def test_another_principal_sees_none_of_the_run(live: LiveCopies) -> None:
    with Client(live.url, live.owner) as client:
        mine = _capture(client, DECIDED)
        reread(client, RUN, mine, NEED, at=DECIDED, decision="d")
    for key, scope in (
        (live.other_user, Scope("acme", "bob", RUN.session)),
        (live.other_tenant, Scope("globex", "ana", RUN.session)),
    ):
        with Client(live.url, key) as other:
            packet = other.replay_packet(scope, RUN.session)
            assert packet.records == ()
            assert packet.evidence == ()


@pytest.mark.parametrize(
    "body",
    [
        {"kind": "used", "decision": "", "artifact_id": "art_" + "a" * 26, "decided_at": "2026-11-06T06:00:00Z"},
        {"kind": "used", "decision": "d", "artifact_id": "../etc", "decided_at": "2026-11-06T06:00:00Z"},
        {"kind": "substituted", "decision": "d", "artifact_id": "art_" + "a" * 26, "decided_at": "2026-11-06T06:00Z"},
        {"kind": "used", "decision": "d", "artifact_id": "art_" + "a" * 26, "decided_at": "2026-11-06T06:00:00"},
        {"kind": "used", "decision": "d", "artifact_id": "art_" + "a" * 26, "decided_at": "x", "extra": CANARY},
    ],
)
def test_a_bad_record_is_a_400_and_nothing_is_stored(live: LiveCopies, body: dict[str, object]) -> None:
    sent = {"satisfied": True, **body}
    answer = httpx.post(
        live.url + "/v1/evidence",
        json=sent,
        headers={"Authorization": f"Bearer {live.owner}", "Refvault-Session": "bad-records"},
        timeout=30,
    )
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert CANARY not in answer.text
    assert "../etc" not in answer.text
    with Client(live.url, live.owner) as client:
        assert client.replay_packet(RUN, "bad-records").records == ()
