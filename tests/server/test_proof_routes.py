"""Proofs over HTTP: selective reads carry them, ``/proof`` serves one for any byte range, and they check out
with nothing but the JSON that arrived."""

from __future__ import annotations

import base64

from refvault import Budget, Scope, verify_excerpt
from refvault.proofs import LEAF_SIZE
from tests.conftest import payload
from tests.server.world import TEXT, World


def _root(world: World, artifact_id: str) -> str:
    described = world.http.get(f"/v1/artifacts/{artifact_id}", headers=world.headers()).json()
    return str(described["retrieval"]["integrity"]["merkle_root"])


def test_a_window_over_http_carries_a_proof_of_its_bytes(world: World) -> None:
    artifact_id = world.ids["text"]
    answer = world.http.get(f"/v1/artifacts/{artifact_id}/window?bytes=10,200", headers=world.headers())
    assert answer.status_code == 200
    result = answer.json()
    proof = result["proof"]
    excerpt = result["text"].encode("utf-8")
    assert excerpt == TEXT[proof["offset"] : proof["offset"] + proof["length"]]
    assert verify_excerpt(excerpt, offset=proof["offset"], proof=proof, root=_root(world, artifact_id))
    assert result["verified_by"]["component"] == "refvault.vault.verified"


def test_grep_and_query_over_http_carry_a_proof(world: World) -> None:
    grep = world.http.get(f"/v1/artifacts/{world.ids['text']}/grep?pattern=line%207", headers=world.headers()).json()
    assert verify_excerpt(TEXT, offset=0, proof=grep["proof"], root=_root(world, world.ids["text"]))
    query = world.http.post(f"/v1/artifacts/{world.ids['records']}/query", json={}, headers=world.headers()).json()
    assert query["proof"]["root"] == _root(world, world.ids["records"])


def test_the_proof_route_proves_any_byte_range(world: World) -> None:
    artifact_id = world.ids["text"]
    answer = world.http.get(f"/v1/artifacts/{artifact_id}/proof?offset=5&length=40", headers=world.headers())
    assert answer.status_code == 200
    body = answer.json()
    assert body["artifact_id"] == artifact_id
    assert verify_excerpt(TEXT[5:45], offset=5, proof=body["proof"], root=_root(world, artifact_id))
    assert not verify_excerpt(TEXT[6:46], offset=5, proof=body["proof"], root=_root(world, artifact_id))


def test_the_proof_route_is_scoped_like_every_read(world: World) -> None:
    artifact_id = world.ids["text"]
    foreign = world.http.get(
        f"/v1/artifacts/{artifact_id}/proof?offset=0&length=10", headers=world.headers(world.other_tenant)
    )
    assert foreign.status_code == 404
    bad = world.http.get(f"/v1/artifacts/{artifact_id}/proof?offset=-1", headers=world.headers())
    assert bad.status_code == 400


def test_the_proof_route_is_charged_to_the_callers_run(world: World) -> None:
    """The proof's head and tail are stored bytes: over budget a 429 with no proof; within it, charged."""
    run = Scope("acme", "ana", "proof-budget")
    artifact_id = world.vault.put(run, payload(3 * LEAF_SIZE, seed=31)).artifact_id
    world.vault.set_budget(run, Budget(read_calls=0))
    answer = world.http.get(
        f"/v1/artifacts/{artifact_id}/proof?offset={LEAF_SIZE - 1}&length=1", headers=world.headers(session=run.session)
    )
    assert answer.status_code == 429
    assert "head" not in answer.text
    world.vault.set_budget(run, Budget(read_calls=1))
    answer = world.http.get(
        f"/v1/artifacts/{artifact_id}/proof?offset={LEAF_SIZE - 1}&length=1", headers=world.headers(session=run.session)
    )
    assert answer.status_code == 200
    assert len(base64.b64decode(answer.json()["proof"]["head"])) == LEAF_SIZE - 1
    assert world.vault.usage(run).spent["scanned_bytes"] == LEAF_SIZE - 1
