"""``GET /metrics`` (``refvault.server.metrics``): counters move for real requests, labels never carry an id, a
scope value, a key id or content, and ``refvault serve --workers 2`` adds every worker's samples up.

The metrics are the process's own, shared by every app a test makes, so each test compares before and after.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from refvault import Scope, Vault
from refvault.budgets import Budget
from refvault.errors import BudgetExceeded, ContextLeak, IntegrityError
from refvault.guard import LeakGuard
from refvault.keys import create_key, list_keys
from refvault.server.app import create_app
from tests.conftest import Tamper
from tests.servers import serve

CANARY_TENANT = "tenantcanary7q"
CANARY_USER = "usercanary4k"
CANARY_SESSION = "sessioncanary9z"
CANARY_CONTENT = b"CONTENTCANARY-3f9a1c-never-in-metrics " * 40
CONTENT_ROUTE = "/v1/artifacts/{artifact_id}/content"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    """Every sample of a scrape, by name and labels."""
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
def http(vault: Vault) -> Iterator[TestClient]:
    with TestClient(create_app(vault, max_body=1 << 20), raise_server_exceptions=False) as client:
        yield client


def scrape(http: TestClient) -> Samples:
    response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return samples(response.text)


def test_requests_are_counted_by_route_template_method_and_status(http: TestClient, vault: Vault) -> None:
    token = create_key(vault, "acme", "ana")[1]
    headers = {"Authorization": f"Bearer {token}", "Refvault-Session": "s1"}
    before = scrape(http)
    created = http.post("/v1/artifacts", content=b"hello metrics", headers=headers)
    assert created.status_code == 201
    artifact_id = created.json()["artifact_id"]
    for _ in range(3):  # the first by the route, the next by the fast path (the key is in the cache by then)
        assert http.get(f"/v1/artifacts/{artifact_id}/content", headers=headers).content == b"hello metrics"
    assert http.get("/v1/artifacts/art_aaaaaaaaaaaaaaaaaaaaaaaaaa", headers=headers).status_code == 404
    assert http.get("/v1/no-such-endpoint").status_code == 404
    after = scrape(http)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("refvault_http_requests_total", route="/v1/artifacts", method="POST", status="201") == 1
    assert moved("refvault_http_requests_total", route=CONTENT_ROUTE, method="GET", status="200") == 3
    assert moved("refvault_http_requests_total", route="/v1/artifacts/{artifact_id}", method="GET", status="404") == 1
    assert moved("refvault_http_requests_total", route="(unmatched)", method="GET", status="404") == 1
    assert moved("refvault_http_request_duration_seconds_count", route=CONTENT_ROUTE, method="GET") == 3
    assert moved("refvault_http_request_body_bytes_total", route="/v1/artifacts") == len(b"hello metrics")
    assert moved("refvault_http_response_body_bytes_total", route=CONTENT_ROUTE) == 3 * len(b"hello metrics")
    assert moved("refvault_catalog_connection_checkouts_total") > 0  # the embedded catalog's pool


def test_no_label_carries_an_id_a_scope_value_a_key_id_or_content(http: TestClient, vault: Vault) -> None:
    token = create_key(vault, CANARY_TENANT, CANARY_USER)[1]
    key_id = list_keys(vault, CANARY_TENANT)[0].key_id
    headers = {"Authorization": f"Bearer {token}", "Refvault-Session": CANARY_SESSION}
    artifact_id = http.post("/v1/artifacts", content=CANARY_CONTENT, headers=headers).json()["artifact_id"]
    for path in (
        f"/v1/artifacts/{artifact_id}",
        f"/v1/artifacts/{artifact_id}/content",
        f"/v1/artifacts/{artifact_id}/content",
        f"/v1/artifacts/{artifact_id}/window",
        f"/v1/artifacts/{artifact_id}/verify",
        f"/v1/{CANARY_TENANT}/{artifact_id}",  # no route: the path must not become a label
    ):
        http.get(path, headers=headers)
    http.request("X" + CANARY_SESSION.upper(), f"/v1/artifacts/{artifact_id}", headers=headers)  # an unknown method
    text = http.get("/metrics").text
    assert "refvault_http_requests_total" in text
    for canary in (artifact_id, CANARY_TENANT, CANARY_USER, CANARY_SESSION, key_id, token, "CONTENTCANARY"):
        assert canary not in text
        assert canary.lower() not in text.lower()
    assert 'method="other"' in text


def test_vault_events_are_counted_with_fixed_reasons(http: TestClient, vault: Vault, tamper: Tamper) -> None:
    scope = Scope("acme", "ana", "events")
    before = scrape(http)
    damaged = vault.put(scope, b"x" * 100, media_type="text/plain")
    key = vault.catalog.find(scope, damaged.artifact_id).key  # type: ignore[union-attr]
    tamper.set_inline(key, b"y" * 100)
    with pytest.raises(IntegrityError):
        vault.read_bytes(scope, damaged.artifact_id)
    vault.set_budget(scope, Budget(read_calls=1))
    kept = vault.put(scope, b"z" * 10)
    vault.read_bytes(scope, kept.artifact_id)
    with pytest.raises(BudgetExceeded):
        vault.read_bytes(scope, kept.artifact_id)
    guard = LeakGuard(32)
    guard.protect(kept.artifact_id, CANARY_CONTENT)
    with pytest.raises(ContextLeak):
        guard.check({"messages": [{"role": "user", "content": CANARY_CONTENT.decode()}]})
    after = scrape(http)
    assert value(after, "refvault_integrity_failures_total", kind="corrupt") > value(
        before, "refvault_integrity_failures_total", kind="corrupt"
    )
    refusals = "refvault_budget_refusals_total"
    assert value(after, refusals, dimension="read_calls") == value(before, refusals, dimension="read_calls") + 1
    stops = "refvault_guard_stops_total"
    assert value(after, stops, reason="content") == value(before, stops, reason="content") + 1
    assert value(after, "refvault_audit_append_seconds_count") > value(before, "refvault_audit_append_seconds_count")
    assert "CONTENTCANARY" not in http.get("/metrics").text


def test_an_app_made_without_metrics_serves_and_counts_none(vault: Vault) -> None:
    _, token = create_key(vault, "acme", "ana")
    with TestClient(create_app(vault, metrics=False)) as quiet:
        assert quiet.get("/metrics").status_code == 404
        headers = {"Authorization": f"Bearer {token}", "Refvault-Session": "s1"}
        assert quiet.get("/v1/artifacts", headers=headers).status_code == 200


@pytest.mark.slow
def test_workers_add_up_through_refvault_serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = tmp_path / "tmp"
    runs.mkdir()
    monkeypatch.setenv("TMPDIR", str(runs))  # where ``serve`` makes its metrics directory
    with serve(tmp_path / "store", "--workers", "2") as server:
        (directory,) = runs.glob("refvault-metrics-*")
        assert server.process is not None
        n = 40
        for _ in range(n):  # a new connection each: the workers take turns accepting
            with httpx.Client() as client:
                assert client.get(server.url + "/v1/ready").status_code == 200
        pids = {path.stem.rsplit("_", 1)[-1] for path in directory.glob("*.db")}
        assert len(pids) >= 2  # both workers write their samples there
        totals = set()
        for _ in range(6):  # whichever worker answers the scrape, it adds up both
            with httpx.Client() as client:
                found = samples(client.get(server.url + "/metrics").text)
            totals.add(value(found, "refvault_http_requests_total", route="/v1/ready", method="GET", status="200"))
        assert totals == {n}
    assert not directory.exists()  # removed when serve stops
    assert not os.environ.get("PROMETHEUS_MULTIPROC_DIR")
