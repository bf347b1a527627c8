"""``compute`` runs a function over snapshots and stores its result with lineage: ``derived_from`` the inputs, an
origin ``kernel.compute`` with their content hashes, so ``vault.lineage`` and ``vault.receipt`` show the
computation. Nothing is stored when the inputs, the function or its result are refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from refvault import Kernel, Vault
from refvault.errors import InvalidArgument, InvalidType, StaleHandle
from tests.kernel.conftest import SCOPE, stored_ids


def test_compute_records_lineage_and_a_receipt_naming_the_inputs(vault: Vault, kernel: Kernel) -> None:
    frame = kernel.snapshot("frame", pd.DataFrame({"x": [1, 2, 3]}))
    weights = kernel.snapshot("w", np.array([2, 2, 2]))
    result = kernel.compute(lambda f, w: int((f["x"].to_numpy() * w).sum()), frame, weights, name="dot")
    assert kernel.resolve(result).value == 12
    graph = vault.lineage(SCOPE, result.artifact_id, direction="up")
    assert {e[0] for e in graph.edges if e[1] == result.artifact_id} == {frame.artifact_id, weights.artifact_id}
    receipt = vault.receipt(SCOPE, result.artifact_id)
    assert receipt.kind == "computation"
    assert receipt.transformation == "kernel.compute"
    hashes = {s["artifact_id"]: s["content_hash"] for s in receipt.sources}
    assert hashes == {h.artifact_id: vault.describe(SCOPE, h.artifact_id).content_hash for h in (frame, weights)}
    assert receipt.counts["inputs"] == 2
    assert receipt.counts["bytes_out"] == receipt.size
    bound = vault.describe(SCOPE, result.artifact_id).source_version["kernel"]
    assert bound["function"].endswith("<lambda>")
    assert [i["artifact_id"] for i in bound["inputs"]] == [frame.artifact_id, weights.artifact_id]


def test_the_function_gets_fresh_values_and_cannot_change_the_inputs(kernel: Kernel) -> None:
    source = kernel.snapshot("s", {"rows": [1, 2]})

    def greedy(value: dict[str, Any]) -> int:
        value["rows"].append(3)
        return len(value["rows"])

    assert kernel.resolve(kernel.compute(greedy, source, name="n")).value == 3
    assert kernel.resolve(source).value == {"rows": [1, 2]}


def test_a_result_that_cannot_be_snapshotted_stores_nothing(vault: Vault, kernel: Kernel) -> None:
    source = kernel.snapshot("s", [1, 2])
    before = stored_ids(vault)
    with pytest.raises(InvalidType):
        kernel.compute(lambda v: set(v), source, name="bad")
    assert stored_ids(vault) == before


def test_a_persisted_result_needs_persisted_inputs_and_the_function_does_not_run(vault: Vault, kernel: Kernel) -> None:
    transient = kernel.snapshot("t", [1])
    durable = kernel.snapshot("d", [2], persist=True)
    ran: list[int] = []
    before = stored_ids(vault)
    with pytest.raises(InvalidArgument, match="persist"):
        kernel.compute(lambda a, b: ran.append(1), transient, durable, name="r", persist=True)
    assert ran == []
    assert stored_ids(vault) == before
    kept = kernel.compute(lambda b: [*b, 3], durable, name="r", persist=True)
    kernel.reset()
    assert kernel.resolve(kept).value == [2, 3]
    assert kernel.resolve(kept).stale


def test_a_stale_input_fails_before_the_function_runs(kernel: Kernel) -> None:
    source = kernel.snapshot("s", 1)
    kernel.reset()
    ran: list[int] = []
    with pytest.raises(StaleHandle):
        kernel.compute(lambda v: ran.append(v), source, name="r")
    assert ran == []


def test_a_durable_input_of_an_older_generation_is_used_and_recorded_as_stale(vault: Vault, kernel: Kernel) -> None:
    durable = kernel.snapshot("d", [5], persist=True)
    kernel.reset()
    result = kernel.compute(lambda v: v[0] * 2, durable, name="r")
    assert result.generation == 2
    assert kernel.resolve(result).value == 10
    bound = vault.describe(SCOPE, result.artifact_id).source_version["kernel"]
    assert bound["inputs"][0]["stale"] is True
    assert bound["inputs"][0]["generation"] == 1


def test_a_reset_while_the_function_runs_stores_nothing(vault: Vault, kernel: Kernel) -> None:
    source = kernel.snapshot("s", [1], persist=True)
    before = stored_ids(vault)

    def resetting(value: list[int]) -> list[int]:
        kernel.reset()
        return value

    with pytest.raises(StaleHandle, match="nothing was stored"):
        kernel.compute(resetting, source, name="r")
    assert stored_ids(vault) == before


@pytest.mark.parametrize("arguments", [(), tuple(range(65))])
def test_compute_takes_one_to_sixty_four_inputs(kernel: Kernel, arguments: tuple[int, ...]) -> None:
    handle = kernel.snapshot("s", 1)
    with pytest.raises(InvalidArgument):
        kernel.compute(lambda *v: 0, *[handle for _ in arguments], name="r")


def test_compute_over_the_same_handle_twice_names_it_once_in_lineage(vault: Vault, kernel: Kernel) -> None:
    source = kernel.snapshot("s", 3)
    result = kernel.compute(lambda a, b: a * b, source, source, name="sq")
    assert kernel.resolve(result).value == 9
    assert [s["artifact_id"] for s in vault.receipt(SCOPE, result.artifact_id).sources] == [source.artifact_id]


def test_compute_refuses_something_that_is_not_a_function(kernel: Kernel) -> None:
    handle = kernel.snapshot("s", 1)
    with pytest.raises(InvalidType):
        kernel.compute(42, handle, name="r")  # type: ignore[arg-type]


def test_a_function_that_raises_stores_nothing_and_its_error_propagates(vault: Vault, kernel: Kernel) -> None:
    source = kernel.snapshot("s", 1)
    before = stored_ids(vault)

    def failing(value: int) -> int:
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        kernel.compute(failing, source, name="r")
    assert stored_ids(vault) == before
