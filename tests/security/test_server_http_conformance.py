"""HTTP conformance of ``refvault serve``'s API: what a peer's own suite (schemathesis, a browser) relies on.

* Every 405 lists in ``Allow`` every method its path supports (it used to name only the method of the
  first route that matched: ``/v1/artifacts`` omitted ``GET``, ``/v1/artifacts/{id}`` omitted ``DELETE``).
* The OpenAPI schema states each limit the server enforces, from the same constants: for each, a value
  at the bound is valid by the schema and accepted, one past it is invalid by the schema and refused
  (before, valid-by-schema requests were refused: grep's pattern length, ``max_seconds``, a zero-length
  ``bytes`` window, the JSON of ``Refvault-Metadata``...). ``tests/server/test_schema.py`` lets
  schemathesis look for the rest.
* Content a browser would run (HTML, SVG, XML, JavaScript, and any type not known to be passive) is
  served as an attachment under a sandboxing Content-Security-Policy, with ``nosniff`` on everything,
  identically by the route and by its fast path.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from http import HTTPMethod
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator

from refvault import Scope, Vault
from refvault.keys import create_key
from refvault.model import RECORD_MEDIA_TYPES
from refvault.read.records import MAX_ORDER, MAX_QUERY_SECONDS
from refvault.read.windows import MAX_CHARS, MAX_MATCHES, MAX_PATTERN, MAX_SECONDS
from refvault.server import app as app_module
from refvault.server.app import CONTENT_SECURITY_POLICY, create_app
from tests.server.test_app import assert_problem
from tests.server.test_fast_paths import _answer

SCOPE = Scope("acme", "ana", "s1")
MISSING_ID = "art_" + "a" * 26
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
WIDE = MAX_ORDER + 2  # fields in the wide record artifact: enough to sort by one key too many
FUTURE = "2999-01-01T00:00:00Z"


@dataclass
class World:
    vault: Vault
    http: TestClient
    headers: dict[str, str]
    text: str
    records: str
    png: str


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with Vault.open(tmp_path_factory.mktemp("conformance") / "store") as vault:
        token = create_key(vault, "acme", "ana")[1]
        row = {f"f{n}": n for n in range(WIDE)}
        rows = b"".join(json.dumps({**row, "f0": i}).encode() + b"\n" for i in range(5))
        with TestClient(create_app(vault, max_body=1 << 20), raise_server_exceptions=False) as http:
            yield World(
                vault=vault,
                http=http,
                headers={"Authorization": f"Bearer {token}", "Refvault-Session": SCOPE.session},
                text=vault.put(
                    SCOPE, b"".join(b"line %d\n" % n for n in range(50)), media_type="text/plain"
                ).artifact_id,
                records=vault.put(SCOPE, rows, media_type="application/x-ndjson").artifact_id,
                png=vault.put(SCOPE, PNG, media_type="image/png").artifact_id,
            )


@pytest.fixture(scope="module")
def document(world: World) -> dict[str, Any]:
    schema: dict[str, Any] = world.http.get("/openapi.json").json()
    return schema


# -- 405 ---------------------------------------------------------------------------------------


def test_every_405_lists_every_method_of_its_path(world: World, document: dict[str, Any]) -> None:
    tried = 0
    for template, item in document["paths"].items():
        path = template.replace("{artifact_id}", MISSING_ID)
        supported = {method.upper() for method in item}
        for method in set(HTTPMethod) - {HTTPMethod.CONNECT} - supported:
            response = world.http.request(method.value, path, headers=world.headers)
            assert response.status_code == 405, (method, template, response.status_code)
            assert set(response.headers["allow"].split(", ")) == supported, (method, template)
            if method != HTTPMethod.HEAD:  # a HEAD answer has no body
                assert_problem(response, 405, "method-not-allowed")
            tried += 1
    assert tried >= 6 * len(document["paths"])
    for path, supported in [("/v1/artifacts", {"GET", "POST"}), (f"/v1/artifacts/{MISSING_ID}", {"GET", "DELETE"})]:
        assert set(world.http.put(path).headers["allow"].split(", ")) == supported  # the two the issue names


# -- limits: the schema states each, the server enforces exactly it ---------------------------------


def query_parameter(document: dict[str, Any], path: str, name: str) -> dict[str, Any]:
    for parameter in document["paths"][path]["get"]["parameters"]:
        if parameter["name"] == name:
            found: dict[str, Any] = parameter
            return found
    raise AssertionError(f"{path} documents no parameter {name}")


def validator(document: dict[str, Any], schema: dict[str, Any]) -> Draft202012Validator:
    """A validator of ``schema`` whose ``#/components/...`` references resolve in ``document``."""
    return Draft202012Validator({**schema, "components": document["components"]})


# (operation path, parameter, accepted value at the bound, refused value one past it)
PARAMETER_BOUNDS = [
    ("grep", "pattern", "e" * MAX_PATTERN, "e" * (MAX_PATTERN + 1)),
    ("grep", "pattern", "e", ""),
    ("grep", "max_seconds", MAX_SECONDS, math.nextafter(MAX_SECONDS, math.inf)),
    ("grep", "max_seconds", 0.0, math.nextafter(0.0, -math.inf)),
    ("grep", "max_matches", MAX_MATCHES, MAX_MATCHES + 1),
    ("grep", "max_matches", 1, 0),
    ("grep", "from_line", 2**63 - 1, 2**63),
    ("window", "max_chars", MAX_CHARS, MAX_CHARS + 1),
    ("window", "max_chars", 1, 0),
    ("window", "bytes", "0,1", "0,0"),
    ("window", "bytes", "1,9", "1,"),
    ("window", "lines", "0,1", "0,x"),
]


@pytest.mark.parametrize(("read", "name", "accepted", "refused"), PARAMETER_BOUNDS)
def test_each_read_parameter_bound_is_stated_and_enforced(
    world: World, document: dict[str, Any], read: str, name: str, accepted: object, refused: object
) -> None:
    path = f"/v1/artifacts/{{artifact_id}}/{read}"
    schema = validator(document, query_parameter(document, path, name)["schema"])
    assert schema.is_valid(accepted)
    assert not schema.is_valid(refused)
    url = path.replace("{artifact_id}", world.text)
    base = {"pattern": "line"} if read == "grep" else {}
    assert (
        world.http.get(
            url,
            params={**base, name: repr(accepted) if isinstance(accepted, float) else accepted},
            headers=world.headers,
        ).status_code
        == 200
    )
    answer = world.http.get(
        url, params={**base, name: repr(refused) if isinstance(refused, float) else refused}, headers=world.headers
    )
    assert_problem(answer, 400, "invalid-argument")


def test_a_window_takes_lines_or_bytes_not_both(world: World, document: dict[str, Any]) -> None:
    path = "/v1/artifacts/{artifact_id}/window"
    assert "Not with bytes" in query_parameter(document, path, "lines")["description"]
    assert "Not with lines" in query_parameter(document, path, "bytes")["description"]
    assert "not both" in document["paths"][path]["get"]["description"]
    url = path.replace("{artifact_id}", world.text)
    for params in ({"lines": "0,2"}, {"bytes": "0,2"}, {}):
        assert world.http.get(url, params=params, headers=world.headers).status_code == 200
    both = world.http.get(url, params={"lines": "0,2", "bytes": "0,2"}, headers=world.headers)
    assert_problem(both, 400, "invalid-argument")


ORDER = [{"field": f"f{n}", "direction": "desc"} for n in range(MAX_ORDER + 1)]
# (query body at the bound, accepted; one past it, refused)
QUERY_BOUNDS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"max_seconds": MAX_QUERY_SECONDS}, {"max_seconds": math.nextafter(MAX_QUERY_SECONDS, math.inf)}),
    ({"max_seconds": 0}, {"max_seconds": -0.5}),
    ({"limit": 1}, {"limit": 0}),
    ({"limit": 2.0}, {"limit": 2.5}),  # JSON Schema's integer includes 2.0
    ({"max_scan": 1}, {"max_scan": 0}),
    ({"record_range": [0, 0]}, {"record_range": [0, 0, 1]}),
    ({"record_range": [1.0, 3]}, {"record_range": [-1, 3]}),
    ({"fields": ["f1"]}, {"fields": []}),
    ({"fields": ["f1", "f2"]}, {"fields": ["f1", "f1"]}),
    ({"order": ORDER[:MAX_ORDER]}, {"order": ORDER}),
    ({"order": [{"field": "f1"}]}, {"order": [{"field": "f1", "direction": "up"}]}),
    ({"where": None}, {"colour": "red"}),
]


@pytest.mark.parametrize(("accepted", "refused"), QUERY_BOUNDS)
def test_each_query_bound_is_stated_and_enforced(
    world: World, document: dict[str, Any], accepted: dict[str, Any], refused: dict[str, Any]
) -> None:
    schema = validator(document, {"$ref": "#/components/schemas/QueryRequest"})
    assert schema.is_valid(accepted)
    assert not schema.is_valid(refused)
    url = f"/v1/artifacts/{world.records}/query"
    assert world.http.post(url, json=accepted, headers=world.headers).status_code == 200
    answer = world.http.post(url, json=refused, headers=world.headers)
    assert answer.status_code == 400, answer.text


# (Refvault-Metadata at the bound, accepted; one past it, refused)
METADATA_BOUNDS: list[tuple[dict[str, Any], object]] = [
    ({"filename": "f" * 255}, {"filename": "f" * 256}),
    ({"filename": ".x"}, {"filename": ".."}),
    ({"filename": "a b.txt"}, {"filename": "a/b.txt"}),
    ({"filename": "x"}, {"filename": "x\x7f"}),
    ({"tool_call_id": "~" * 256}, {"tool_call_id": "~" * 257}),
    ({"run_id": " "}, {"run_id": ""}),
    ({"schema_version": "v1"}, {"schema_version": "v\u00e9"}),
    ({"disclosure": "sealed"}, {"disclosure": "public"}),
    ({"disclosure": None, "media_type": None}, {"filename": 3}),
    ({"media_type": "text/plain; charset=utf-8"}, {"media_type": "text"}),
    ({"media_type": "a" * 127 + "/b"}, {"media_type": "a" * 128 + "/b"}),
    ({"completeness": {"status": "complete"}}, {"completeness": {"status": "complete", "omissions": ["x"]}}),
    ({"completeness": {"records": 0, "coverage": "all"}}, {"completeness": {"records": -1}}),
    ({"completeness": {"records": 3.0}}, {"completeness": {"status": None}}),
    ({"source_version": {"v": 1}}, {"source_version": [1]}),
    ({"expires_at": FUTURE}, {"expires_at": 12}),
    ({}, {"colour": "red"}),
    ({}, ["filename"]),
]


@pytest.mark.parametrize(("accepted", "refused"), METADATA_BOUNDS)
def test_each_metadata_bound_is_stated_and_enforced(
    world: World, document: dict[str, Any], accepted: dict[str, Any], refused: object
) -> None:
    parameters = document["paths"]["/v1/artifacts"]["post"]["parameters"]
    header = next(p for p in parameters if p["name"] == "Refvault-Metadata")
    schema = validator(document, header["content"]["application/json"]["schema"])
    assert schema.is_valid(accepted)
    assert not schema.is_valid(refused)
    before = len(world.vault.list(SCOPE))
    sent = {**world.headers, "Content-Type": "text/plain"}
    created = world.http.post(
        "/v1/artifacts", content=b"x", headers={**sent, "Refvault-Metadata": json.dumps(accepted)}
    )
    assert created.status_code == 201, created.text
    answer = world.http.post("/v1/artifacts", content=b"y", headers={**sent, "Refvault-Metadata": json.dumps(refused)})
    assert_problem(answer, 400, "invalid-metadata")
    assert len(world.vault.list(SCOPE)) == before + 1  # nothing stored for the refused one


def test_idempotency_key_bound_is_stated_and_enforced(world: World, document: dict[str, Any]) -> None:
    parameters = document["paths"]["/v1/artifacts"]["post"]["parameters"]
    schema = validator(document, next(p for p in parameters if p["name"] == "Idempotency-Key")["schema"])
    assert schema.is_valid("k" * 256)
    assert not schema.is_valid("k" * 257)
    sent = {**world.headers, "Content-Type": "text/plain"}
    assert world.http.post("/v1/artifacts", content=b"k", headers={**sent, "Idempotency-Key": "k" * 256}).is_success
    refused = world.http.post("/v1/artifacts", content=b"k", headers={**sent, "Idempotency-Key": "k" * 257})
    assert_problem(refused, 400, "invalid-metadata")


def test_reads_of_the_wrong_kind_of_artifact_are_documented_422s(world: World, document: dict[str, Any]) -> None:
    paths = document["paths"]
    for read in ("window", "grep"):
        assert "not text" in paths[f"/v1/artifacts/{{artifact_id}}/{read}"]["get"]["responses"]["422"]["description"]
        answer = world.http.get(f"/v1/artifacts/{world.png}/{read}", params={"pattern": "x"}, headers=world.headers)
        assert_problem(answer, 422, "unsupported-read")
    for method, read in (("post", "query"), ("get", "records")):
        described = paths[f"/v1/artifacts/{{artifact_id}}/{read}"][method]["responses"]["422"]["description"]
        assert all(media_type in described for media_type in RECORD_MEDIA_TYPES)
        answer = world.http.request(method.upper(), f"/v1/artifacts/{world.text}/{read}", headers=world.headers)
        assert_problem(answer, 422, "unsupported-read")


# -- active content ----------------------------------------------------------------------------

ACTIVE = [
    "text/html",
    "text/html; charset=utf-8",
    "application/xhtml+xml",
    "image/svg+xml",
    "text/xml",
    "application/xml",
    "application/rss+xml",
    "text/javascript",
    "application/javascript",
    "application/ecmascript",
    "application/pdf",
    "application/octet-stream",
    "application/x-something-new",
]
PASSIVE = ["text/plain", "application/json", "text/csv", "image/png", "audio/mpeg"]
PAGE = b"<html><body><script>alert(document.domain)</script></body></html>"


def content(world: World, media_type: str, filename: str | None = None, **headers: str) -> httpx.Response:
    artifact_id = world.vault.put(SCOPE, PAGE, media_type=media_type, filename=filename).artifact_id
    return world.http.get(f"/v1/artifacts/{artifact_id}/content", headers={**world.headers, **headers})


@pytest.mark.parametrize("media_type", ACTIVE)
def test_active_content_is_an_attachment_under_a_sandbox(world: World, media_type: str) -> None:
    for response in (content(world, media_type, "page.html"), content(world, media_type, None, Range="bytes=0-9")):
        assert response.status_code in (200, 206)
        assert response.headers["content-disposition"].startswith("attachment; filename=")
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY == "sandbox; default-src 'none'"
        assert response.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("media_type", PASSIVE)
def test_passive_content_is_inline_but_still_sandboxed(world: World, media_type: str) -> None:
    response = content(world, media_type, "data.bin")
    assert response.status_code == 200
    assert "content-disposition" not in response.headers
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert response.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize(
    ("filename", "sent"),
    [
        ("page.html", 'attachment; filename="page.html"'),
        ('we"ird; name=x.svg', 'attachment; filename="we_ird_name_x.svg"'),
        ("r\u00e9sum\u00e9.html", 'attachment; filename="r_sum_.html"'),
        (".htaccess", 'attachment; filename="htaccess"'),
        ("...", None),  # nothing left: the artifact id
        (None, None),
    ],
)
def test_the_attachment_name_is_safe(world: World, filename: str | None, sent: str | None) -> None:
    artifact_id = world.vault.put(SCOPE, PAGE, media_type="text/html", filename=filename).artifact_id
    response = world.http.get(f"/v1/artifacts/{artifact_id}/content", headers=world.headers)
    assert response.headers["content-disposition"] == (sent or f'attachment; filename="{artifact_id}"')


def test_the_fast_path_sends_the_same_safety_headers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_scope = app_module._FastContent._scope
    taken: list[bool] = []

    def spy(self: Any, scope: Any) -> Any:
        found = real_scope(self, scope)
        taken.append(found is not None)
        return found

    monkeypatch.setattr(app_module._FastContent, "_scope", spy)
    with Vault.open(tmp_path / "store") as vault:
        _, token = create_key(vault, "acme", "ana")
        auth = {"Authorization": f"Bearer {token}", "Refvault-Session": "s1"}
        ids = [
            vault.put(SCOPE, PAGE, media_type=media_type, filename="x.html").artifact_id
            for media_type in ("text/html", "image/svg+xml", "text/plain")
        ]
        cases = [
            (f"/v1/artifacts/{i}/content", headers) for i in ids for headers in (auth, {**auth, "Range": "bytes=2-"})
        ]
        answers = {}
        for name, seconds in (("route", 0.0), ("fast", 3600.0)):
            with TestClient(create_app(vault, auth_cache_seconds=seconds), raise_server_exceptions=False) as client:
                assert client.get("/v1/artifacts", headers=auth).status_code == 200  # the key is now cached
                taken.clear()
                answers[name] = [_answer(client, path, headers) for path, headers in cases]
                assert taken == [name == "fast"] * len(cases)  # which path answered
        assert answers["fast"] == answers["route"]
        sent = [dict(headers) for _, headers, _ in answers["fast"]]
        assert [h.get("content-disposition") for h in sent] == ['attachment; filename="x.html"'] * 4 + [None] * 2
        assert all(h["content-security-policy"] == CONTENT_SECURITY_POLICY for h in sent)
