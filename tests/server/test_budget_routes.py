"""Run budgets over HTTP: an admin key sets a session's budget, any key reads its own usage, and every
operation through the client is charged by the server: over budget a 429 ``budget-exceeded`` with nothing
stored or returned, a scan over budget incomplete with ``stopped_by: "budget"``."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from refvault import Budget, BudgetExceeded, Client, Scope, Vault, errors, read
from refvault.budgets import MAX_SECONDS
from refvault.keys import create_key
from tests.servers import LiveServer, serve

TEXT = "".join(f"line {i} {'needle' if i % 50 == 0 else 'hay'}\n" for i in range(3000)).encode()
ROWS = "".join(json.dumps({"i": i}) + "\n" for i in range(2000)).encode()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, str]]:
    store = tmp_path_factory.mktemp("budget-routes") / "store"
    with Vault.open(store) as vault:
        _, admin = create_key(vault, "acme", "root", admin=True)
    with serve(store) as server:
        yield server, admin


def _scope(name: str) -> Scope:
    return Scope("acme", "ana", name.replace(" ", "-"))


def test_only_an_admin_key_sets_a_budget_and_any_key_reads_its_usage(world: tuple[LiveServer, str]) -> None:
    live, admin = world
    run = _scope("admin-only")
    with Client(live.url, live.token) as user, Client(live.url, admin) as root:
        with pytest.raises(errors.Forbidden):
            user.set_budget(run, Budget(read_calls=1))
        assert user.usage(run).budget is None  # the refused call changed nothing
        usage = root.set_budget(run, Budget(read_calls=2, seconds=3600), key_user="root")
        assert usage.budget == Budget(read_calls=2, seconds=3600)
        assert usage.started_at is not None
        artifact = user.put(run, b"hello").artifact_id
        user.read_bytes(run, artifact)
        seen = user.usage(run)
        assert seen.spent["read_calls"] == 1
        assert seen.left["read_calls"] == 1
        assert seen.spent["acquired_bytes"] == 5
        assert root.clear_budget(run, key_user="root")
        assert user.usage(run).budget is None


def test_a_bad_budget_is_a_400_and_changes_nothing(world: tuple[LiveServer, str]) -> None:
    live, admin = world
    headers = {"Authorization": f"Bearer {admin}", "Refvault-Session": "bad", "Content-Type": "application/json"}
    for body in ({"read_calls": -1}, {"tokens": 3}, {"seconds": 1e13}, {"seconds": 1e15}):
        answer = httpx.put(live.url + "/v1/budget", headers=headers, params={"user": "ana"}, content=json.dumps(body))
        assert answer.status_code in (400, 422)
    with Client(live.url, live.token) as user:
        assert user.usage(_scope("bad")).budget is None


def test_the_budget_schema_states_the_limits_the_server_takes(world: tuple[LiveServer, str]) -> None:
    live, _ = world
    schema = httpx.get(live.url + "/openapi.json").json()
    body = schema["paths"]["/v1/budget"]["put"]["requestBody"]["content"]["application/json"]["schema"]
    seconds = body["properties"]["seconds"]["anyOf"][1]
    assert seconds["maximum"] == MAX_SECONDS
    Budget(seconds=seconds["maximum"])  # the largest the schema allows is taken


Operation = Callable[[Client, Scope, dict[str, str]], Any]
OVER: dict[str, tuple[str, Operation]] = {
    "put": ("acquired_bytes", lambda c, s, i: c.put(s, b"x" * 100)),
    "read range": ("read_calls", lambda c, s, i: c.read_range(s, i["text"], 0, 100)),
    "window tokens": ("returned_tokens", lambda c, s, i: read.window(c, s, i["text"], byte_range=[0, 400])),
    "window": ("scanned_bytes", lambda c, s, i: read.window(c, s, i["text"], lines=[0, 5])),
    "grep": ("read_calls", lambda c, s, i: read.grep(c, s, i["text"], "needle")),
    "query": ("read_calls", lambda c, s, i: read.query(c, s, i["rows"])),
    "index rebuild": ("recomputations", lambda c, s, i: read.derive(c, s, i["rows"])),
}


@pytest.mark.parametrize("operation", sorted(OVER))
def test_an_operation_over_budget_is_a_429_with_nothing_stored_or_returned(
    world: tuple[LiveServer, str], operation: str
) -> None:
    live, admin = world
    dimension, call = OVER[operation]
    run = _scope(f"over-{operation}")
    with Client(live.url, live.token) as user, Client(live.url, admin) as root:
        ids = {
            "text": user.put(run, TEXT, media_type="text/plain").artifact_id,
            "rows": user.put(run, ROWS, media_type="application/x-ndjson").artifact_id,
        }
        root.set_budget(run, Budget(**{dimension: 10 if dimension == "acquired_bytes" else 0}), key_user="root")
        before = len(user.list(run))
        with pytest.raises(BudgetExceeded) as raised:
            call(user, run, ids)
        assert raised.value.dimension in ("", dimension)
        assert len(user.list(run)) == before
        assert user.usage(run).spent[dimension] == 0


@pytest.mark.parametrize(("scan", "dimension"), [("grep", "scanned_bytes"), ("query", "scanned_records")])
def test_a_scan_over_budget_is_incomplete_over_http(world: tuple[LiveServer, str], scan: str, dimension: str) -> None:
    live, admin = world
    run = _scope(f"scan-{scan}")
    with Client(live.url, live.token) as user, Client(live.url, admin) as root:
        text = user.put(run, TEXT, media_type="text/plain").artifact_id
        rows = user.put(run, ROWS, media_type="application/x-ndjson").artifact_id
        read.derive(user, run, rows)
        root.set_budget(run, Budget(**{dimension: 500}), key_user="root")
        answer = read.grep(user, run, text, "needle") if scan == "grep" else read.query(user, run, rows, limit=1000)
        assert answer["scan_complete"] is False
        assert answer["stopped_by"] == "budget"
        assert user.usage(run).spent[dimension] <= 500


def test_over_budget_is_problem_429_budget_exceeded(world: tuple[LiveServer, str]) -> None:
    live, admin = world
    run = _scope("raw")
    with Client(live.url, live.token) as user, Client(live.url, admin) as root:
        artifact = user.put(run, b"some bytes").artifact_id
        root.set_budget(run, Budget(read_calls=0), key_user="root")
    headers = {"Authorization": f"Bearer {live.token}", "Refvault-Session": run.session}
    answer = httpx.get(f"{live.url}/v1/artifacts/{artifact}/content", headers=headers)
    assert answer.status_code == 429
    assert answer.json()["type"].endswith("budget-exceeded")
    assert b"some bytes" not in answer.content
    usage = httpx.get(f"{live.url}/v1/usage", headers=headers).json()
    assert usage["exhausted"] == ["read_calls"]
    assert usage["budget"] == {"read_calls": 0}
