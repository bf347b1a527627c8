"""``GET /v1/artifacts/{id}/records`` is ``read.derive`` over HTTP, and the schema documents it."""

from __future__ import annotations

import json

from refvault import read
from tests.server.world import OWNER, World

# -- task 1: the record set over HTTP --------------------------------------------------------------


def test_the_records_endpoint_is_derive(world: World) -> None:
    records = world.ids["records"]
    answer = world.http.get(f"/v1/artifacts/{records}/records", headers=world.headers())
    assert answer.status_code == 200, answer.text
    local = read.derive(world.vault, OWNER, records)
    assert answer.json() == {
        "artifact_id": records,
        "content_hash": local.content_hash,
        "source_format": "ndjson",
        "count": 30,
        "fields": [
            {"name": "n", "type": "BIGINT", "kind": "number"},
            {"name": "word", "type": "VARCHAR", "kind": "string"},
        ],
        "derived_hash": local.derived_hash,
    }
    # Not a record artifact, a sealed one, one not yet derived (build=false): each as derive says.
    text = world.http.get(f"/v1/artifacts/{world.ids['text']}/records", headers=world.headers())
    assert text.status_code == 422
    assert text.json()["type"] == "urn:refvault:problem:unsupported-read"
    sealed = world.http.get(f"/v1/artifacts/{world.ids['sealed_records']}/records", headers=world.headers())
    assert sealed.status_code == 403
    assert sealed.json()["type"] == "urn:refvault:problem:sealed"
    assert (
        world.http.get(f"/v1/artifacts/{world.ids['text']}/records?build=false", headers=world.headers()).json() is None
    )
    fresh = world.vault.put(OWNER, b'{"a": 1}\n', media_type="application/x-ndjson").artifact_id
    assert world.http.get(f"/v1/artifacts/{fresh}/records?build=false", headers=world.headers()).json() is None
    assert world.http.get(f"/v1/artifacts/{fresh}/records", headers=world.headers()).json()["count"] == 1
    assert world.http.get(f"/v1/artifacts/{fresh}/records?build=false", headers=world.headers()).json()["count"] == 1
    schema = world.http.get("/openapi.json").json()
    documented = schema["paths"]["/v1/artifacts/{artifact_id}/records"]["get"]["responses"]["200"]
    assert "RecordSetModel" in json.dumps(documented)
    assert set(schema["components"]["schemas"]["RecordSetModel"]["required"]) >= {"count", "fields"}
