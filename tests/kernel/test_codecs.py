"""What can be snapshotted, and how exactly it comes back: plain values as JSON with their types, DataFrames and
Tables through Parquet with their index and dtypes, arrays as ``.npy``; everything else is refused with
:class:`InvalidType` and nothing is stored; pickle is never used."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from refvault import Kernel, Vault
from refvault.errors import InvalidType
from refvault.kernel.codecs import MAX_DEPTH, decode, encode
from tests.kernel.conftest import stored_ids


def _cycle() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


def _deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


REFUSED = {
    "tuple": (1, 2),
    "set": {1},
    "bytes": b"raw",
    "datetime": datetime(2026, 1, 1, tzinfo=UTC),
    "decimal": Decimal("1.5"),
    "object": object(),
    "nan": float("nan"),
    "inf": [float("inf")],
    "int-key": {1: "a"},
    "numpy-scalar": np.float64(1.5),
    "numpy-scalar-inside": {"x": np.int64(3)},
    "object-array": np.array([{"a": 1}, None], dtype=object),
    "object-field": np.zeros(2, dtype=[("a", "i4"), ("o", "O")]),
    "masked-array": np.ma.masked_array([1, 2], mask=[0, 1]),
    "series": pd.Series([1, 2]),
    "frame-of-objects": pd.DataFrame({"o": [object(), object()]}),
    "duplicate-columns": pd.DataFrame([[1, 2]], columns=["a", "a"]),
    "record-batch": pa.record_batch({"x": [1]}),
    "cycle": _cycle(),
    "too-deep": _deep(MAX_DEPTH + 5),
    "lone-surrogate": "\ud800",
    "function": len,
}


@pytest.mark.parametrize("value", list(REFUSED.values()), ids=list(REFUSED))
def test_a_value_that_has_no_safe_form_is_refused_and_nothing_is_stored(
    vault: Vault, kernel: Kernel, value: object
) -> None:
    before = stored_ids(vault)
    with pytest.raises(InvalidType):
        kernel.snapshot("v", value)
    assert stored_ids(vault) == before


def test_the_refusal_names_the_type_not_the_content() -> None:
    class Secretive:
        def __repr__(self) -> str:
            return "hunter2"

    with pytest.raises(InvalidType) as caught:
        encode({"k": Secretive()})
    assert "hunter2" not in str(caught.value)
    assert "Secretive" in str(caught.value)


def test_an_object_dtype_array_is_refused_because_it_would_need_pickle() -> None:
    with pytest.raises(InvalidType, match="pickle"):
        encode(np.array(["a", 1], dtype=object))


@pytest.mark.parametrize(
    "value",
    [
        {"a": [1, 2.5, "x", None, True, False], "b": {"c": {}}, "big": 10**40, "neg0": -0.0, "u": "ünï"},
        [],
        "text",
        0,
        None,
        [[[]]],
        _deep(MAX_DEPTH - 1),
    ],
)
def test_plain_values_come_back_equal_and_of_the_same_types(value: object) -> None:
    encoded = encode(value)
    assert encoded.kind == "json"
    back = decode("json", encoded.data)
    assert back == value
    assert repr(back) == repr(value)  # bool stays bool, int stays int, -0.0 stays -0.0


def test_a_list_shared_twice_is_stored_as_two_equal_lists() -> None:
    shared = [1, 2]
    assert decode("json", encode({"a": shared, "b": shared}).data) == {"a": [1, 2], "b": [1, 2]}


def test_a_dataframe_comes_back_with_its_index_and_dtypes() -> None:
    frame = pd.DataFrame(
        {
            "n": [1, 2, 3],
            "s": ["x", "y", None],
            "c": pd.Categorical(["p", "q", "p"]),
            "t": pd.to_datetime(["2026-01-01", "2026-01-02", "2026-01-03"]).tz_localize("UTC"),
            "i": pd.array([1, None, 3], dtype="Int64"),
            "f": [1.5, float("nan"), 2.0],
        },
        index=pd.Index([10, 20, 30], name="row"),
    )
    back = decode("dataframe", encode(frame).data)
    pd.testing.assert_frame_equal(back, frame)


def test_a_table_comes_back_with_its_schema() -> None:
    table = pa.table(
        {
            "u": pa.array([1, 2], pa.uint32()),
            "d": pa.array([1, 2], pa.duration("ms")),
            "l": pa.array([[1], [2, 3]]),
            "m": pa.array([{"k": 1}, {"k": 2}]),
            "e": pa.array(["a", "b"]).dictionary_encode(),
        }
    )
    back = decode("table", encode(table).data)
    assert back.equals(table)
    assert back.schema.equals(table.schema)


def test_an_array_comes_back_with_its_dtype_shape_and_order() -> None:
    array = np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4))
    back = decode("ndarray", encode(array).data)
    assert back.dtype == np.int16
    assert back.shape == (3, 4)
    assert np.array_equal(back, array)
    structured = np.array([(1, 2.0)], dtype=[("a", "i4"), ("b", "f8")])
    assert decode("ndarray", encode(structured).data) == structured


def test_pickle_is_never_used_to_snapshot_or_resolve(kernel: Kernel, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("pickle was used")

    import _pickle

    for module in (pickle, _pickle):
        for name in ("dumps", "dump", "loads", "load"):
            monkeypatch.setattr(module, name, refused)
    monkeypatch.setattr(pickle, "Pickler", refused)
    monkeypatch.setattr(pickle, "Unpickler", refused)
    values = [{"a": [1]}, np.arange(3), pd.DataFrame({"x": [1, 2]}), pa.table({"x": [1]})]
    for value in values:
        handle = kernel.snapshot("v", value)
        kernel.resolve(handle)
