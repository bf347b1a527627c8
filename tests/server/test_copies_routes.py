"""The derived-copy routes of ``refvault serve`` (:mod:`refvault.server.routes_copies`), raw over HTTP, on an
embedded store and on S3 + PostgreSQL.

Each route answers with the status and body its schema documents (201 for a hold made, 204 for a mark or a
release, problems for errors: ``held`` 409, ``quota-exceeded`` 413); another tenant's or another user's attempt
at every route is the same 404 as an absent id (or, for ``replay-status``, the same ``deleted`` entry); and a
canary planted in the artifacts' content never comes back in any answer of these routes, errors included.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from refvault import Client, Scope
from refvault.limits import MAX_REPLAY_IDS
from refvault.policy import Policy, Quotas
from refvault.vault.copies import MAX_REASON
from tests.client.copies_live import BACKENDS, LiveCopies, live_copies

OWNER = Scope("acme", "ana", "s1")
JSONL = "application/x-ndjson"
CANARY = "CANARYroutes8w"
MISSING_ID = "art_" + "a" * 26
PROBLEM = "application/problem+json"


@pytest.fixture(scope="module", params=BACKENDS)
def live(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCopies]:
    with live_copies(request, tmp_path_factory.mktemp("copies-routes")) as server:
        yield server


def _records(count: int, seed: str) -> bytes:
    return b"".join(
        json.dumps({"n": n, "email": f"{seed}{n}@example.com", "note": f"{CANARY} {seed}"}).encode() + b"\n"
        for n in range(count)
    )


class Http:
    """Raw requests with one API key, in session ``s1``; every answer is kept for the canary check."""

    client = httpx.Client(timeout=60)  # shared: making a client (its TLS context) costs more than a request here

    def __init__(self, live: LiveCopies, token: str, seen: list[httpx.Response]) -> None:
        self.url, self.token, self.seen = live.url, token, seen

    def __call__(self, method: str, path: str, body: Any = None, **headers: str) -> httpx.Response:
        sent = {"Authorization": f"Bearer {self.token}", "Refvault-Session": "s1", **headers}
        if body is not None:
            sent["Content-Type"] = "application/json"
        content = None if body is None else json.dumps(body)
        answer = self.client.request(method, self.url + "/v1" + path, content=content, headers=sent)
        self.seen.append(answer)
        return answer


@pytest.fixture
def seen() -> list[httpx.Response]:
    return []


@pytest.fixture
def owner(live: LiveCopies, seen: list[httpx.Response]) -> Http:
    return Http(live, live.owner, seen)


@pytest.fixture
def chain(live: LiveCopies) -> dict[str, str]:
    """A source, a tool's output derived from it and a redaction of the output, each holding the canary."""
    with Client(live.url, live.owner) as client:
        source = client.put(OWNER, _records(4, "src"), media_type=JSONL, labels={"pii"}).artifact_id
        output = client.put(OWNER, _records(2, "out"), media_type=JSONL, derived_from=[source]).artifact_id
        redaction = client.redact(OWNER, output).artifact_id
    return {"source": source, "output": output, "redaction": redaction}


def assert_problem(answer: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == PROBLEM
    body: dict[str, Any] = answer.json()
    assert body["type"] == "urn:refvault:problem:" + slug
    assert body["status"] == status
    return body


def test_each_route_answers_with_its_documented_status_and_body(owner: Http, chain: dict[str, str]) -> None:
    source, output, redaction = chain["source"], chain["output"], chain["redaction"]

    made = owner("POST", f"/artifacts/{output}/redact", {"redactor": "pii.v1", "fields": None})
    assert made.status_code == 200, made.text
    assert made.json()["artifact_id"] == redaction  # made once: the same derivative
    assert owner("POST", f"/artifacts/{output}/redact").json()["artifact_id"] == redaction  # the body is optional
    receipt = owner("GET", f"/artifacts/{redaction}/receipt")
    assert receipt.status_code == 200
    assert receipt.json()["sources"][0]["artifact_id"] == output
    graph = owner("GET", f"/artifacts/{source}/lineage?direction=down&depth=1")
    assert graph.status_code == 200
    assert graph.json()["truncated"] is True
    assert {n["id"] for n in graph.json()["nodes"]} >= {source, output}
    assert owner("GET", f"/artifacts/{redaction}/lineage-status").json() == {
        "artifact_id": redaction,
        "status": "current",
    }
    held = owner("POST", f"/artifacts/{output}/holds", {"reason": "litigation"})
    assert held.status_code == 201
    hold_id = held.json()["hold_id"]
    assert owner("GET", f"/artifacts/{output}/holds").json() == {"items": [held.json()]}
    assert_problem(owner("DELETE", f"/artifacts/{output}"), 409, "held")
    report = owner("DELETE", f"/artifacts/{source}?cascade=true")
    assert report.status_code == 200
    assert {k["id"] for k in report.json()["kept"]} == {source, output}
    released = owner("DELETE", f"/artifacts/{output}/holds/{hold_id}")
    assert (released.status_code, released.content) == (204, b"")
    assert_problem(owner("DELETE", f"/artifacts/{output}/holds/{hold_id}"), 404, "not-found")
    newer = owner("POST", f"/artifacts/{output}/redact", {"redactor": "secrets.v1"}).json()["artifact_id"]
    superseded = owner("POST", f"/artifacts/{source}/supersede", {"by": newer, "reason": "replaced"})
    assert (superseded.status_code, superseded.content) == (204, b"")
    assert owner("GET", f"/artifacts/{output}/lineage-status").json()["status"] == "stale"
    revoked = owner("POST", f"/artifacts/{newer}/revoke", {"reason": "wrong"})
    assert (revoked.status_code, revoked.content) == (204, b"")
    assert_problem(owner("POST", f"/artifacts/{newer}/refresh"), 400, "invalid-argument")  # revoked
    assert_problem(owner("POST", f"/artifacts/{source}/refresh"), 400, "invalid-argument")  # not a redaction
    assert_problem(owner("GET", f"/artifacts/{source}/receipt"), 400, "invalid-argument")  # captured directly
    states = owner("POST", "/replay-status", {"ids": [source, newer, MISSING_ID]})
    assert states.status_code == 200
    assert states.json()[source]["status"] == "stale"
    assert states.json()[newer]["state"] == "revoked"
    assert states.json()[MISSING_ID] == {"state": "deleted", "at": None, "rule": None}


def test_request_bounds_are_enforced_as_the_schema_states(live: LiveCopies, owner: Http, chain: dict[str, str]) -> None:
    output = chain["output"]
    assert owner("POST", f"/artifacts/{output}/revoke", {"reason": "r" * MAX_REASON}).status_code == 204
    assert_problem(
        owner("POST", f"/artifacts/{output}/revoke", {"reason": "r" * (MAX_REASON + 1)}), 400, "invalid-argument"
    )
    assert_problem(owner("POST", f"/artifacts/{output}/holds", {"reason": ""}), 400, "invalid-argument")
    assert_problem(owner("POST", f"/artifacts/{output}/holds", {"reason": "x", "extra": 1}), 400, "invalid-argument")
    assert_problem(owner("POST", f"/artifacts/{output}/redact", {"redactor": "nope"}), 400, "invalid-argument")
    assert_problem(owner("POST", f"/artifacts/{output}/redact", {"fields": []}), 400, "invalid-argument")
    assert_problem(owner("GET", f"/artifacts/{output}/lineage?direction=sideways"), 400, "invalid-argument")
    assert_problem(owner("GET", f"/artifacts/{output}/lineage?depth=-1"), 400, "invalid-argument")
    assert owner("POST", "/replay-status", {"ids": [output] * MAX_REPLAY_IDS}).status_code == 200
    assert_problem(owner("POST", "/replay-status", {"ids": [output] * (MAX_REPLAY_IDS + 1)}), 400, "invalid-argument")
    assert_problem(owner("POST", "/replay-status", {"ids": ["not an id"]}), 400, "invalid-argument")
    bad_header = owner("POST", "/replay-status", {"ids": [output]}, **{"Refvault-Recipient": "everyone"})
    assert_problem(bad_header, 400, "invalid-argument")
    schema = httpx.get(live.url + "/openapi.json").json()
    copies = {path for path, item in schema["paths"].items() for op in item.values() if "copies" in op.get("tags", [])}
    assert copies == {
        "/v1/artifacts/{artifact_id}/redact",
        "/v1/artifacts/{artifact_id}/receipt",
        "/v1/artifacts/{artifact_id}/lineage",
        "/v1/artifacts/{artifact_id}/lineage-status",
        "/v1/artifacts/{artifact_id}/supersede",
        "/v1/artifacts/{artifact_id}/revoke",
        "/v1/artifacts/{artifact_id}/refresh",
        "/v1/artifacts/{artifact_id}/holds",
        "/v1/artifacts/{artifact_id}/holds/{hold_id}",
        "/v1/replay-status",
    }


def test_a_put_over_the_quota_is_a_413_and_stores_nothing(live: LiveCopies, owner: Http) -> None:
    admin = Http(live, live.admin, owner.seen)
    session = {"Refvault-Session": "quota"}
    policy = Policy(quotas=Quotas(session_bytes=100)).to_dict()
    assert admin("PUT", "/policy", policy, **{"Refvault-Session": "ops"}).status_code < 300
    try:
        capture = {**session, "Content-Type": "application/octet-stream"}
        refused = httpx.post(
            live.url + "/v1/artifacts",
            content=CANARY.encode() * 20,
            headers={"Authorization": f"Bearer {live.owner}", **capture},
        )
        owner.seen.append(refused)
        body = assert_problem(refused, 413, "quota-exceeded")
        assert body["error"] == "QuotaExceeded"
        assert owner("GET", "/artifacts", **session).json()["items"] == []
    finally:
        admin("DELETE", "/policy", **{"Refvault-Session": "ops"})


# -- isolation and canaries ----------------------------------------------------------------------------------


def _attempts(artifact_id: str, hold_id: str) -> list[tuple[str, str, Any]]:
    """Every derived-copy route (and the reporting delete) on ``artifact_id``, with a valid body."""
    return [
        ("POST", f"/artifacts/{artifact_id}/redact", {"redactor": "pii.v1"}),
        ("GET", f"/artifacts/{artifact_id}/receipt", None),
        ("GET", f"/artifacts/{artifact_id}/lineage", None),
        ("GET", f"/artifacts/{artifact_id}/lineage?direction=up&depth=2", None),
        ("GET", f"/artifacts/{artifact_id}/lineage-status", None),
        ("POST", f"/artifacts/{artifact_id}/supersede", {"by": artifact_id, "reason": "x"}),
        ("POST", f"/artifacts/{artifact_id}/revoke", {"reason": "x"}),
        ("POST", f"/artifacts/{artifact_id}/refresh", None),
        ("POST", f"/artifacts/{artifact_id}/holds", {"reason": "x"}),
        ("GET", f"/artifacts/{artifact_id}/holds", None),
        ("DELETE", f"/artifacts/{artifact_id}/holds/{hold_id}", None),
        ("DELETE", f"/artifacts/{artifact_id}/holds/hold_not-one", None),
        ("DELETE", f"/artifacts/{artifact_id}?cascade=true", None),
    ]


def _shown(answer: httpx.Response, artifact_id: str) -> tuple[int, str, str]:
    return answer.status_code, answer.headers.get("content-type", ""), answer.text.replace(artifact_id, "ID")


def test_another_tenant_or_user_gets_the_same_404_as_an_absent_id_at_every_route(
    live: LiveCopies, owner: Http, chain: dict[str, str], seen: list[httpx.Response]
) -> None:
    hold_id = owner("POST", f"/artifacts/{chain['output']}/holds", {"reason": "keep"}).json()["hold_id"]
    before = owner("GET", f"/artifacts/{chain['source']}/lineage").json()
    for token in (live.other_tenant, live.other_user):
        other = Http(live, token, seen)
        for target in (chain["output"], chain["redaction"]):
            for (method, path, body), (_, absent_path, absent_body) in zip(
                _attempts(target, hold_id), _attempts(MISSING_ID, hold_id), strict=True
            ):
                theirs = other(method, path, body)
                absent = other(method, absent_path, absent_body)
                assert theirs.status_code == 404, (method, path, theirs.text)
                assert _shown(theirs, target) == _shown(absent, MISSING_ID), (method, path)
                assert _shown(theirs, target) == _shown(owner(method, absent_path, absent_body), MISSING_ID)
            replay = other("POST", "/replay-status", {"ids": [target]}).json()
            assert replay == {target: {"state": "deleted", "at": None, "rule": None}}
    assert owner("GET", f"/artifacts/{chain['source']}/lineage").json() == before  # nothing changed
    assert [h["hold_id"] for h in owner("GET", f"/artifacts/{chain['output']}/holds").json()["items"]] == [hold_id]
    assert owner("DELETE", f"/artifacts/{chain['output']}/holds/{hold_id}").status_code == 204


def test_a_planted_canary_never_comes_back_from_these_routes(
    owner: Http, chain: dict[str, str], seen: list[httpx.Response]
) -> None:
    source, output, redaction = chain["source"], chain["output"], chain["redaction"]
    hold_id = owner("POST", f"/artifacts/{output}/holds", {"reason": "keep"}).json()["hold_id"]
    for artifact_id in (source, output, redaction):
        for method, path, body in _attempts(artifact_id, hold_id)[:6]:  # the reads, and the refused writes
            owner(method, path, body)
    owner("POST", f"/artifacts/{output}/redact", {"fields": ["email", "note"]})
    owner("POST", f"/artifacts/{source}/redact", {"fields": ["email"]})  # pii detection's fields mode
    owner("POST", "/replay-status", {"ids": [source, output, redaction, MISSING_ID]})
    owner("DELETE", f"/artifacts/{output}")  # held: a 409
    owner("DELETE", f"/artifacts/{source}?cascade=true")  # the report
    owner("GET", f"/artifacts/{source}/lineage")  # after: a 404
    owner("POST", "/replay-status", {"ids": [source, output, redaction]})
    owner("DELETE", f"/artifacts/{output}/holds/{hold_id}")
    owner("DELETE", f"/artifacts/{output}?cascade=true")
    assert len(seen) >= 25
    for answer in seen:
        raw = b"".join(f"{k}: {v}\n".encode() for k, v in answer.headers.items()) + answer.content
        assert CANARY.encode() not in raw, (answer.request.method, answer.request.url, answer.text[:300])
        assert b"@example.com" not in raw
