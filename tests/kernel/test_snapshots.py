"""A snapshot is a frozen copy: mutating the live object after ``snapshot`` (or the value ``resolve`` returned)
changes nothing, for plain values, NumPy arrays, pandas DataFrames and pyarrow Tables; handles travel as JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from refvault import Handle, Kernel, Vault
from refvault.kernel import HANDLE_TYPE
from tests.kernel.conftest import SCOPE


def _mutate_dict(value: dict[str, Any]) -> None:
    value["rows"].append(4)
    value["name"] = "changed"


def _mutate_list(value: list[Any]) -> None:
    value[0]["k"] = "changed"
    value.append(None)


def _mutate_array(value: np.ndarray) -> None:
    value[0, 0] = -1.0


def _mutate_frame(value: pd.DataFrame) -> None:
    value.iloc[0, 0] = 100
    value["y"] = ["p", "q", "r"]


CASES: list[tuple[str, Callable[[], Any], Callable[[Any], None]]] = [
    ("dict", lambda: {"rows": [1, 2, 3], "name": "n", "nested": {"ok": True, "f": 1.5, "none": None}}, _mutate_dict),
    ("list", lambda: [{"k": "v"}, 2, "three", [4.0]], _mutate_list),
    ("ndarray", lambda: np.arange(6.0).reshape(2, 3), _mutate_array),
    ("dataframe", lambda: pd.DataFrame({"x": [1, 2, 3]}, index=pd.Index([7, 8, 9], name="i")), _mutate_frame),
]


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray):
        return bool(np.array_equal(a, b)) and a.dtype == b.dtype and a.shape == b.shape
    if isinstance(a, pd.DataFrame):
        return bool(a.equals(b)) and list(a.columns) == list(b.columns) and a.index.equals(b.index)
    return bool(a == b) and type(a) is type(b)


@pytest.mark.parametrize(("kind", "make", "mutate"), CASES, ids=[c[0] for c in CASES])
def test_mutating_the_object_after_snapshot_changes_nothing(
    kernel: Kernel, kind: str, make: Callable[[], Any], mutate: Callable[[Any], None]
) -> None:
    live = make()
    handle = kernel.snapshot("v", live)
    mutate(live)
    resolved = kernel.resolve(handle)
    assert _equal(resolved.value, make())
    assert not _equal(resolved.value, live)
    mutate(resolved.value)  # the resolved value is a fresh copy too
    assert _equal(kernel.resolve(handle).value, make())
    assert resolved.state == "current"
    assert not resolved.stale
    assert not resolved.durable


def test_a_pyarrow_table_snapshot_is_not_the_live_table(kernel: Kernel) -> None:
    live = pa.table({"x": [1, 2, 3], "s": ["a", "b", None]})
    handle = kernel.snapshot("t", live)
    live = live.append_column("y", pa.array([0, 0, 0]))  # tables are immutable: "mutation" makes a new one
    resolved = kernel.resolve(handle).value
    assert isinstance(resolved, pa.Table)
    assert resolved.equals(pa.table({"x": [1, 2, 3], "s": ["a", "b", None]}))
    assert resolved.column_names == ["x", "s"]


def test_a_numpy_array_that_shares_memory_with_the_snapshot_source_does_not_reach_it(kernel: Kernel) -> None:
    base = np.zeros(10, dtype=np.int32)
    view = base[2:5]
    handle = kernel.snapshot("view", view)
    base[:] = 9
    assert np.array_equal(kernel.resolve(handle).value, np.zeros(3, dtype=np.int32))


def test_every_snapshot_is_an_artifact_of_the_kernels_scope_with_its_media_type(vault: Vault, kernel: Kernel) -> None:
    handles = [
        kernel.snapshot("j", {"a": 1}),
        kernel.snapshot("n", np.ones(2)),
        kernel.snapshot("f", pd.DataFrame({"x": [1]})),
        kernel.snapshot("t", pa.table({"x": [1]})),
    ]
    assert [h.kind for h in handles] == ["json", "ndarray", "dataframe", "table"]
    for handle in handles:
        descriptor = vault.describe(SCOPE, handle.artifact_id)
        assert descriptor.media_type == handle.media_type
        bound = descriptor.source_version["kernel"]
        assert bound["id"] == kernel.kernel_id
        assert bound["generation"] == 1
        assert bound["name"] == handle.name
    assert vault.read_bytes(SCOPE, handles[0].artifact_id) == b'{"a":1}'
    assert vault.read_bytes(SCOPE, handles[1].artifact_id).startswith(b"\x93NUMPY")
    assert vault.read_bytes(SCOPE, handles[2].artifact_id)[:4] == b"PAR1"


def test_handles_round_trip_through_json(kernel: Kernel) -> None:
    handle = kernel.snapshot("df_clean", {"x": [1, 2]}, persist=True)
    text = json.dumps({"tool_arg": handle.to_dict()})
    back = Handle.from_dict(json.loads(text)["tool_arg"])
    assert back == handle
    assert Handle.from_json(handle.to_json()) == handle
    assert handle.to_dict()["type"] == HANDLE_TYPE
    assert kernel.resolve(json.loads(text)["tool_arg"]).value == {"x": [1, 2]}  # a dict resolves as well


def test_a_handle_is_frozen(kernel: Kernel) -> None:
    handle = kernel.snapshot("x", 1)
    with pytest.raises(AttributeError):
        handle.generation = 5  # type: ignore[misc]


def test_a_kernel_runs_on_an_async_vaults_vault_and_refuses_anything_else(vault: Vault) -> None:
    from refvault import AsyncVault
    from refvault.errors import InvalidArgument

    assert Kernel(AsyncVault(vault), SCOPE).vault is vault
    with pytest.raises(InvalidArgument):
        Kernel(object(), SCOPE)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        Kernel(vault, "acme/ana/s1")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", "x" * 129, "tab\there", 7])
def test_a_snapshot_name_is_one_to_128_printable_characters(vault: Vault, kernel: Kernel, name: object) -> None:
    from refvault.errors import InvalidArgument

    with pytest.raises(InvalidArgument):
        kernel.snapshot(name, 1)  # type: ignore[arg-type]
    assert vault.list(SCOPE) == []
