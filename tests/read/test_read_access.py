"""Model reads and scopes: identical bytes across tenants share nothing, sealed inputs and their outputs are refused,
errors and audit carry ids only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from refvault import Ref, Scope, Toolbox, Vault, read
from refvault.errors import InvalidQuery, NotFound, SealedArtifact
from refvault.read.records import derivation_of
from tests.read.record_helpers import CANARY, NDJSON, _ndjson


def test_cross_tenant_identical_bytes_share_nothing_and_look_absent(vault: Vault) -> None:
    acme, other = Scope("acme", "ana", "s1"), Scope("globex", "gus", "s9")
    data = _ndjson([{"secret": CANARY, "n": i} for i in range(5)])
    mine = vault.put(acme, data, media_type=NDJSON).artifact_id
    read.query(vault, acme, mine)
    theirs = vault.put(other, data, media_type=NDJSON).artifact_id
    assert derivation_of(vault, other, theirs) is None  # the acme derivative is not visible to globex
    absent = "art_" + "a" * 26
    messages = []
    for artifact_id in (mine, absent):
        with pytest.raises(NotFound) as caught:
            read.query(vault, other, artifact_id)
        messages.append(str(caught.value).replace(artifact_id, "ID"))
    assert messages[0] == messages[1]
    assert read.query(vault, other, theirs)["total_records"] == 5
    assert read.derive(vault, other, theirs).derived_hash == read.derive(vault, acme, mine).derived_hash
    assert derivation_of(vault, other, theirs).key.namespace != derivation_of(vault, acme, mine).key.namespace  # type: ignore[union-attr]


def test_sealed_artifacts_are_refused_by_every_model_read_even_with_a_model_twin(vault: Vault) -> None:
    scope = Scope("acme", "ana", "s1")
    data = _ndjson([{"secret": CANARY}])
    public = vault.put(scope, data, media_type=NDJSON).artifact_id
    read.query(vault, scope, public)  # the shared derivative exists
    sealed = vault.put(scope, data, media_type=NDJSON, disclosure="sealed").artifact_id
    calls: list[Callable[[], object]] = [
        lambda: read.query(vault, scope, sealed),
        lambda: read.derive(vault, scope, sealed),
        lambda: read.window(vault, scope, sealed),
        lambda: read.grep(vault, scope, sealed, "CANARY"),
    ]
    for call in calls:
        with pytest.raises(SealedArtifact) as caught:
            call()
        assert CANARY not in str(caught.value)
    box = Toolbox(vault)
    for name, arguments in (
        ("query_artifact", {"artifact_id": sealed}),
        ("read_artifact", {"artifact_id": sealed, "pattern": "CANARY"}),
        ("describe_artifact", {"artifact_id": sealed}),
        ("load_artifacts", {"artifact_ids": [sealed]}),
    ):
        observation = box.call_sync(name, arguments, scope=scope)
        assert CANARY not in observation.content
        if name == "describe_artifact":  # metadata only: no record schema of a sealed artifact
            assert "records" not in json.loads(observation.content)
        else:
            assert "sealed" in observation.content


def test_offloaded_records_of_a_sealed_input_cannot_be_queried_by_the_model(vault: Vault) -> None:
    scope = Scope("acme", "ana", "s1")
    secret = vault.put(scope, f"{CANARY}\n".encode(), media_type="text/plain", disclosure="sealed").artifact_id
    box = Toolbox(vault)

    @box.tool
    def expand(doc: Ref) -> list[dict[str, Any]]:
        """Expand a document into records."""
        return [{"line": doc.text(), "n": i} for i in range(5_000)]

    shown = json.loads(box.call_sync("expand", {"doc": secret}, scope=scope).content)["offloaded"]
    assert shown["disclosure"] == "sealed"
    assert CANARY not in json.dumps(shown)
    refused = box.call_sync("query_artifact", {"artifact_id": shown["artifact_id"]}, scope=scope)
    assert refused.is_error
    assert "sealed" in refused.content
    assert CANARY not in refused.content
    assert derivation_of(vault, scope, shown["artifact_id"]) is None  # nothing was derived from it


def test_error_and_audit_records_carry_ids_not_content(vault: Vault) -> None:
    scope = Scope("acme", "ana", "s1")
    records: list[Any] = []
    vault.add_audit_sink(records.append)
    artifact_id = vault.put(scope, _ndjson([{"k": CANARY}]), media_type=NDJSON).artifact_id
    read.query(vault, scope, artifact_id, where={"field": "k", "op": "contains", "value": "CANARY"})
    with pytest.raises(InvalidQuery) as caught:
        read.query(vault, scope, artifact_id, where={"field": "k", "op": "gt", "value": 3})
    assert CANARY not in str(caught.value)
    assert any(r.action == "query" for r in records)
    assert CANARY not in repr(records)
