"""``Toolbox(budget=...)``: the run of every scope the Toolbox serves gets the budget, and its read tools,
``load_artifacts`` and ``Ref`` resolution are charged to it: over budget an error observation naming
BudgetExceeded only (nothing of the artifact), a scan over budget an incomplete answer."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from refvault import Budget, Ref, Scope, Toolbox, Vault
from refvault.errors import InvalidArgument

SCOPE = Scope("acme", "ana", "agent")
OTHER = Scope("acme", "ana", "other")
SECRET = b"".join(b"row %d of the confidential notes\n" % i for i in range(2000))


@pytest.fixture
def vault() -> Iterator[Vault]:
    with Vault.open("memory://") as opened:
        yield opened


def _box(vault: Vault, budget: Budget) -> Toolbox:
    box = Toolbox(vault, budget=budget, guard=None)

    @box.tool
    def count_lines(doc: Ref) -> int:
        return doc.read().count(b"\n")

    return box


def test_the_toolbox_sets_its_budget_for_each_scope_it_serves(vault: Vault) -> None:
    artifact = vault.put(SCOPE, SECRET, media_type="text/plain").artifact_id
    box = _box(vault, Budget(read_calls=2))
    assert vault.usage(SCOPE).budget is None
    assert not box.call_sync("describe_artifact", {"artifact_id": artifact}, scope=SCOPE).is_error
    assert vault.usage(SCOPE).budget == Budget(read_calls=2)
    assert vault.usage(OTHER).budget is None  # a scope it has not served
    with pytest.raises(InvalidArgument):
        Toolbox(vault, budget={"read_calls": 2})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("read_artifact", {"lines": [0, 50]}),
        ("read_artifact", {"byte_range": [0, 500]}),
        ("load_artifacts", {}),
        ("count_lines", {}),
    ],
)
@pytest.mark.parametrize("dimension", ["read_calls", "scanned_bytes", "returned_tokens"])
def test_a_read_over_budget_is_an_error_that_shows_nothing(
    vault: Vault, tool: str, arguments: dict[str, object], dimension: str
) -> None:
    artifact = vault.put(SCOPE, SECRET, media_type="text/plain").artifact_id
    box = _box(vault, Budget(**{dimension: 0}))
    if tool == "load_artifacts":
        arguments = {"artifact_ids": [artifact]}
    elif tool == "count_lines":
        arguments = {"doc": artifact}
    else:
        arguments = {"artifact_id": artifact, **arguments}
    if tool == "count_lines" and dimension == "returned_tokens":
        dimension = "read_calls"  # a Ref's bytes go to the tool, not the model: its read call is what costs
        box = _box(vault, Budget(read_calls=0))
    observation = box.call_sync(tool, arguments, scope=SCOPE)
    text = observation.joined_text()
    assert "BudgetExceeded" in text or f"run's {dimension} budget" in text
    assert "confidential" not in text
    assert observation.is_error or tool == "load_artifacts"


def test_a_grep_over_budget_is_incomplete_not_an_error(vault: Vault) -> None:
    artifact = vault.put(SCOPE, SECRET, media_type="text/plain").artifact_id
    box = _box(vault, Budget(scanned_bytes=4000))
    observation = box.call_sync("read_artifact", {"artifact_id": artifact, "pattern": "row 1"}, scope=SCOPE)
    answer = json.loads(observation.content)
    assert not observation.is_error
    assert answer["scan_complete"] is False
    assert answer["stopped_by"] == "budget"


def test_a_query_over_budget_is_incomplete(vault: Vault) -> None:
    rows = b"".join(b'{"i": %d}\n' % i for i in range(3000))
    artifact = vault.put(SCOPE, rows, media_type="application/x-ndjson").artifact_id
    box = _box(vault, Budget(scanned_records=100))
    observation = box.call_sync("query_artifact", {"artifact_id": artifact, "limit": 1000}, scope=SCOPE)
    answer = json.loads(observation.content)
    assert answer["stopped_by"] == "budget"
    assert answer["scanned_records"] == 100


def test_a_capture_over_budget_stores_nothing(vault: Vault) -> None:
    box = Toolbox(vault, budget=Budget(acquired_bytes=10), guard=None)

    @box.tool
    def big() -> bytes:
        return b"x" * 1000

    observation = box.call_sync("big", {}, scope=SCOPE)
    assert "BudgetExceeded" in observation.joined_text() or observation.is_error
    assert vault.list(SCOPE) == []
