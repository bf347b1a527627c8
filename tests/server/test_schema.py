"""Schemathesis against the app's own OpenAPI schema, with a valid key and session: no 5xx, and every
response (status, content type, body) matches what the schema documents.

Every generated case runs as generated (random ids: absent artifacts must be a clean 404), and the cases
of artifact operations run a second time against a real artifact (a text file, or records for queries),
so the success responses are checked too.

And the other way round: every request the schema calls valid is accepted (schemathesis's
``positive_data_acceptance``), against the real artifacts, apart from what no schema can say (one
parameter compared with another, the clock, the artifact's own field names, cursors the server issued),
which the schema states in words and :func:`schema_cannot_say` lists.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import duckdb
import pytest
import schemathesis
from hypothesis import HealthCheck, assume, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from refvault import Scope, Vault
from refvault.keys import create_key
from refvault.model import parse_time
from refvault.server.app import create_app

SCOPE = Scope("acme", "ana", "s1")
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
TEXT = b"".join(b"line %d: alpha beta\n" % n for n in range(200))
RECORDS = b"".join(
    b'{"n": %d, "name": "r%d", "even": %s}\n' % (n, n, b"true" if n % 2 else b"false") for n in range(50)
)


class Api:
    def __init__(self, vault: Vault, headers: dict[str, str], text_id: str, records_id: str) -> None:
        self.vault, self.headers, self.text_id, self.records_id = vault, headers, text_id, records_id


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with Vault.open(tmp_path_factory.mktemp("schema") / "store") as vault:
        token = create_key(vault, "acme", "ana")[1]
        text_id = vault.put(SCOPE, TEXT, media_type="text/plain").artifact_id
        records_id = vault.put(SCOPE, RECORDS, media_type="application/x-ndjson").artifact_id
        yield Api(vault, {"Authorization": f"Bearer {token}", "Refvault-Session": "s1"}, text_id, records_id)


@pytest.fixture(scope="module")
def api_schema(api: Api) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", create_app(api.vault, max_body=1 << 20))


OPERATIONS = [
    ("GET", "/v1/health"),
    ("GET", "/v1/ready"),
    ("GET", "/metrics"),
    ("POST", "/v1/artifacts"),
    ("GET", "/v1/artifacts"),
    ("GET", "/v1/artifacts/{artifact_id}"),
    ("GET", "/v1/artifacts/{artifact_id}/content"),
    ("GET", "/v1/artifacts/{artifact_id}/window"),
    ("GET", "/v1/artifacts/{artifact_id}/grep"),
    ("POST", "/v1/artifacts/{artifact_id}/query"),
    ("GET", "/v1/artifacts/{artifact_id}/records"),
    ("GET", "/v1/artifacts/{artifact_id}/proof"),
    ("GET", "/v1/artifacts/{artifact_id}/verify"),
    ("DELETE", "/v1/artifacts/{artifact_id}"),
    ("POST", "/v1/artifacts/{artifact_id}/declassify"),
    ("GET", "/v1/policy"),
    ("PUT", "/v1/policy"),
    ("DELETE", "/v1/policy"),
    ("GET", "/v1/usage"),
    ("PUT", "/v1/budget"),
    ("DELETE", "/v1/budget"),
    ("POST", "/v1/artifacts/{artifact_id}/links"),
    ("GET", "/v1/links/{token}"),
    ("DELETE", "/v1/links/{token}"),
    ("GET", "/v1/audit"),
    ("GET", "/v1/audit/head"),
    ("GET", "/v1/artifacts/{artifact_id}/disclosures"),
    ("POST", "/v1/artifacts/{artifact_id}/grants"),
    ("GET", "/v1/artifacts/{artifact_id}/grants"),
    ("DELETE", "/v1/grants/{grant_id}"),
    ("POST", "/v1/artifacts/{artifact_id}/redact"),
    ("GET", "/v1/artifacts/{artifact_id}/receipt"),
    ("GET", "/v1/artifacts/{artifact_id}/lineage"),
    ("GET", "/v1/artifacts/{artifact_id}/lineage-status"),
    ("POST", "/v1/artifacts/{artifact_id}/supersede"),
    ("POST", "/v1/artifacts/{artifact_id}/revoke"),
    ("POST", "/v1/artifacts/{artifact_id}/refresh"),
    ("POST", "/v1/artifacts/{artifact_id}/holds"),
    ("GET", "/v1/artifacts/{artifact_id}/holds"),
    ("DELETE", "/v1/artifacts/{artifact_id}/holds/{hold_id}"),
    ("POST", "/v1/replay-status"),
    ("POST", "/v1/evidence"),
    ("GET", "/v1/replay-packet"),
    ("POST", "/v1/console/sessions"),
]


# Schemathesis's pytest loader (``from_fixture``) does not run under pytest 9, so each operation's
# strategy is driven by Hypothesis directly.
@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_every_response_matches_the_schema(api_schema: Any, api: Api, method: str, path: str) -> None:
    operation = api_schema[path][method]

    @given(case=operation.as_strategy())
    @settings(max_examples=15, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def check(case: Any) -> None:
        case.call_and_validate(headers=api.headers, checks=CHECKS)
        parameters = case.path_parameters or {}
        if "artifact_id" not in parameters or method == "DELETE":
            return
        parameters["artifact_id"] = api.records_id if path.endswith(("/query", "/records")) else api.text_id
        for name in ("Refvault-Tenant", "Refvault-User"):
            (case.headers or {}).pop(name, None)
        case.call_and_validate(headers=api.headers, checks=CHECKS)

    check()


# A valid request may still meet a state the schema cannot know: an absent id (404), a range past the
# artifact's end (416), a key already used for other bytes (409). Every other 4xx is a refusal.
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "416", "429", "5xx"]


def schema_cannot_say(path: str, case: Any) -> bool:
    """True for a case whose refusal no schema can state; each rule is in the schema's descriptions."""
    query, body = case.query or {}, case.body if isinstance(case.body, dict) else {}
    if path.endswith("/window"):
        if "lines" in query and "bytes" in query:  # "Not with bytes"
            return True
        start, _, end = str(query.get("lines", "0,")).partition(",")
        return bool(end) and int(end) <= int(start)  # "END ... greater than START"
    if path.endswith("/grep"):
        pattern = str(query.get("pattern", ""))
        if str(query.get("regex", "false")).lower() != "true":
            return "\n" in pattern  # "A literal (no newline ...)"
        try:  # "an RE2 expression"
            duckdb.connect().execute("SELECT regexp_matches('', ?)", [pattern])
        except duckdb.Error:
            return True
        return False
    if path.endswith("/query"):  # the artifact's own fields; cursors the server issued; start <= end
        if any(body.get(name) is not None for name in ("where", "fields", "order", "cursor")):
            return True
        bounds = body.get("record_range")
        return bounds is not None and bounds[0] > bounds[1]
    if path.endswith("/links"):  # "[start, end) ... end past start", inside the artifact's bytes
        bounds = body.get("byte_range")
        return bounds is not None and (bounds[1] <= bounds[0] or bounds[1] > len(TEXT))
    if path.endswith("/grants") and case.method == "POST":  # "in the future"; "another user or session"
        expires = body.get("expires_at")
        if expires is not None and parse_time(expires) <= datetime.now(UTC):
            return True
        to = body.get("to") or {}
        sessions = to.get("sessions")
        return to.get("user") == SCOPE.user and (sessions is None or SCOPE.session in sessions)
    if path.endswith("/redact"):  # fields: "only for a JSON or JSON Lines artifact" (the real one is text)
        return body.get("fields") is not None
    if path == "/v1/artifacts" and case.method == "POST":  # expires_at in the future, created_at not
        metadata = json.loads((case.headers or {}).get("Refvault-Metadata") or "{}")
        now = datetime.now(UTC)
        expires, created = metadata.get("expires_at"), metadata.get("created_at")
        return (expires is not None and parse_time(expires) <= now) or (
            created is not None and parse_time(created) > now
        )
    return False


@pytest.fixture(scope="module")
def acceptance_schema(api: Api) -> Any:
    config = SchemathesisConfig.from_dict({"checks": {"positive_data_acceptance": {"expected-statuses": ACCEPTED}}})
    return schemathesis.openapi.from_asgi("/openapi.json", create_app(api.vault, max_body=1 << 20), config=config)


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_requests_valid_by_the_schema_are_accepted(acceptance_schema: Any, api: Api, method: str, path: str) -> None:
    operation = acceptance_schema[path][method]

    @given(case=operation.as_strategy())
    @settings(max_examples=40, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def check(case: Any) -> None:
        assume(not schema_cannot_say(path, case))
        parameters = case.path_parameters or {}
        # declassify keeps its generated id (absent: 404): the labels it may remove are the artifact's own; so do
        # receipt and refresh: the text artifact is neither derived nor a redaction
        own = path.endswith(("/declassify", "/receipt", "/refresh"))
        if "artifact_id" in parameters and method != "DELETE" and not own:
            parameters["artifact_id"] = api.records_id if path.endswith(("/query", "/records")) else api.text_id
        case.call_and_validate(headers=api.headers, checks=[positive_data_acceptance])

    check()


def test_the_schema_documents_every_operation(api_schema: Any) -> None:
    document = api_schema.raw_schema
    operations = {(method.upper(), path) for path, item in document["paths"].items() for method in item}
    assert operations == set(OPERATIONS)
    for path, item in document["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            assert "default" in responses, (method, path)
            problem = responses["default"]["content"]["application/problem+json"]["schema"]
            assert problem == {"$ref": "#/components/schemas/Problem"}
            assert "422" not in responses or "application/problem+json" in responses["422"]["content"]
    assert set(document["components"]["schemas"]["Problem"]["required"]) == {
        "type",
        "title",
        "status",
        "detail",
        "error",
    }


VALID_BODIES = {  # the operations whose body is required: a valid one, so only the absent id can refuse
    ("POST", "/v1/artifacts/{artifact_id}/links"): {"recipient": "user"},
    ("POST", "/v1/artifacts/{artifact_id}/grants"): {"to": {"user": "bob"}},
    ("POST", "/v1/artifacts/{artifact_id}/declassify"): {"remove": ["pii"], "reason": "reviewed"},
    ("POST", "/v1/artifacts/{artifact_id}/supersede"): {"by": "art_" + "b" * 26, "reason": "replaced"},
    ("POST", "/v1/artifacts/{artifact_id}/revoke"): {"reason": "wrong"},
    ("POST", "/v1/artifacts/{artifact_id}/holds"): {"reason": "litigation"},
}


def test_absent_ids_are_clean_404s_on_every_artifact_operation(api_schema: Any, api: Api) -> None:
    """The shape schemathesis relies on: an id that names nothing is a documented 404 problem, never a 5xx."""
    for operation in api_schema.get_all_operations():
        op = operation.ok()
        if "{artifact_id}" not in op.path:
            continue
        body = VALID_BODIES.get((op.method.upper(), op.path))
        extra = {} if body is None else {"body": body, "media_type": "application/json"}
        parameters = {"artifact_id": "art_" + "q" * 26}
        if "{hold_id}" in op.path:
            parameters["hold_id"] = "hold_" + "0" * 16
        case = op.Case(path_parameters=parameters, query={"pattern": "x"}, **extra)
        response = case.call(headers=api.headers)
        assert response.status_code == 404, (op.method, op.path, response.text)
        case.validate_response(response, checks=CHECKS)
