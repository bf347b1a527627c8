"""How a kernel snapshot turns a value into bytes and back: JSON, Parquet or ``.npy``; never pickle.

==============  =====================================  ==============================================
kind            what it takes                          stored as
==============  =====================================  ==============================================
``json``        dict (str keys), list, str, int,       JSON (``application/json``), UTF-8
                finite float, bool, None, nested
``dataframe``   a ``pandas.DataFrame``                 Parquet (``application/vnd.apache.parquet``)
                                                       with its pandas metadata (index, dtypes)
``table``       a ``pyarrow.Table``                    Parquet with its Arrow schema
``ndarray``     a ``numpy.ndarray`` without objects    ``.npy`` (``application/x-npy``), written and
                                                       read with ``allow_pickle=False``
==============  =====================================  ==============================================

Invariants (``tests/kernel/test_codecs.py``):

* **Exact types, nothing guessed.** JSON takes exactly those built-in types (a tuple, a set, a subclass
  such as ``numpy.float64``, a non-string key, NaN or infinity is refused): what is resolved compares equal
  to what was snapshotted and has the same types. Anything else is :class:`~refvault.errors.InvalidType`,
  before a byte is stored.
* **Never pickle.** An array whose dtype holds Python objects is refused (``.npy`` would need pickle), and
  so is a table with a pickle-based Arrow extension type. Every read uses ``allow_pickle=False``.
* **Lazy.** numpy, pandas and pyarrow are imported only when a value of theirs is snapshotted or resolved:
  a value of a library that is not imported cannot be one of its objects (``sys.modules`` decides).
  numpy is a core dependency; pandas comes with the ``dataframes`` extra; pyarrow (needed for DataFrames
  and Tables) with the ``dev`` extra, or ``pip install pyarrow``.
"""

from __future__ import annotations

import importlib
import io
import json
import math
import sys
from dataclasses import dataclass
from typing import Any, Literal

from refvault.errors import InvalidType

__all__ = ["KINDS", "MEDIA_TYPES", "MAX_DEPTH", "Encoded", "Kind", "decode", "encode"]

Kind = Literal["json", "dataframe", "table", "ndarray"]
PARQUET = "application/vnd.apache.parquet"
MEDIA_TYPES: dict[str, str] = {
    "json": "application/json",
    "dataframe": PARQUET,
    "table": PARQUET,
    "ndarray": "application/x-npy",
}
"""The media type each kind is stored as."""
KINDS: tuple[Kind, ...] = ("json", "dataframe", "table", "ndarray")
MAX_DEPTH = 256
"""The deepest a JSON value may nest (lists and dicts)."""
PYARROW_HINT = "it is stored as Parquet, which needs pyarrow (the dev extra has it; or pip install pyarrow)"


@dataclass(frozen=True, slots=True)
class Encoded:
    """A value as a snapshot stores it: its kind, media type and bytes."""

    kind: Kind
    media_type: str
    data: bytes


def _loaded(name: str) -> Any:
    """The module ``name`` if it is imported already (an object of it can exist only then), else None."""
    return sys.modules.get(name)


def encode(value: object) -> Encoded:
    """``value`` as bytes of its kind (see the module docstring); :class:`InvalidType` if it has none."""
    np = _loaded("numpy")
    if np is not None and isinstance(value, np.generic | np.ndarray):
        if type(value) is not np.ndarray:
            raise InvalidType(
                f"a {_name(value)} cannot be snapshotted: pass a plain numpy.ndarray (np.asarray(x)), "
                "or a Python value (x.item() for a NumPy scalar)"
            )
        return Encoded("ndarray", MEDIA_TYPES["ndarray"], _npy(np, value))
    pd = _loaded("pandas")
    if pd is not None and isinstance(value, pd.DataFrame):
        pa = _pyarrow("a pandas DataFrame")
        try:
            table = pa.Table.from_pandas(value)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise InvalidType(
                f"this DataFrame cannot be snapshotted without pickle ({type(exc).__name__}): "
                "every column must hold values Arrow can store (numbers, text, bytes, times, lists, dicts), "
                "and column names must be unique"
            ) from None
        return Encoded("dataframe", PARQUET, _parquet(pa, table))
    pa = _loaded("pyarrow")
    if pa is not None and isinstance(value, pa.Table):
        return Encoded("table", PARQUET, _parquet(pa, value))
    return Encoded("json", MEDIA_TYPES["json"], _json(value))


def decode(kind: str, data: bytes) -> Any:
    """The value ``data`` holds, as :func:`encode` wrote it for ``kind`` (a fresh object on every call)."""
    if kind == "json":
        return json.loads(data)
    if kind == "ndarray":
        import numpy as np

        return np.load(io.BytesIO(data), allow_pickle=False)
    if kind in ("dataframe", "table"):
        pa = _pyarrow("a DataFrame or Table snapshot")
        table = importlib.import_module("pyarrow.parquet").read_table(pa.BufferReader(data))
        return table.to_pandas() if kind == "dataframe" else table
    raise InvalidType("unknown snapshot kind")


def _name(value: object) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def _pyarrow(what: str) -> Any:
    try:
        return importlib.import_module("pyarrow")
    except ImportError:
        raise InvalidType(f"{what} cannot be snapshotted here: {PYARROW_HINT}") from None


def _npy(np: Any, array: Any) -> bytes:
    if array.dtype.hasobject:
        raise InvalidType(
            "an array of Python objects (dtype object) cannot be snapshotted: .npy would need pickle; "
            "convert it to a numeric or string dtype, or to a list"
        )
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


def _parquet(pa: Any, table: Any) -> bytes:
    pickled = getattr(pa, "PyExtensionType", None)
    if pickled is not None and any(_holds(field.type, pickled, pa) for field in table.schema):
        raise InvalidType("this table has a pickle-based Arrow extension type; it cannot be snapshotted")
    out = io.BytesIO()
    try:
        importlib.import_module("pyarrow.parquet").write_table(table, out, compression="zstd")
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise InvalidType(
            f"this table cannot be stored as Parquet ({type(exc).__name__}): a column's type has no "
            "Parquet form (a union, for instance)"
        ) from None
    return out.getvalue()


def _holds(kind: Any, pickled: type, pa: Any) -> bool:
    """True if the Arrow type ``kind`` is, or nests, an instance of ``pickled``."""
    if isinstance(kind, pickled):
        return True
    if isinstance(kind, pa.ExtensionType):
        return _holds(kind.storage_type, pickled, pa)
    return any(_holds(kind.field(i).type, pickled, pa) for i in range(kind.num_fields))


_SCALARS = (str, int, float, bool, type(None))


def _json(value: object) -> bytes:
    """``value`` as JSON if it is made only of the plain types (checked iteratively: no recursion limit)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    seen: set[int] = set()  # a list or dict reached twice is walked once (json.dumps refuses a cycle)
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind in _SCALARS:
            if isinstance(item, float) and not math.isfinite(item):
                raise InvalidType("NaN and infinity have no JSON form: snapshot a finite float, or None")
            continue
        if kind is not list and kind is not dict:
            raise InvalidType(
                f"a {_name(item)} cannot be snapshotted: snapshots take dict (str keys), list, str, int, float, "
                "bool and None, a pandas DataFrame, a pyarrow Table or a numpy array (never pickle)"
            )
        if depth >= MAX_DEPTH:
            raise InvalidType(f"the value nests deeper than {MAX_DEPTH} levels (or contains itself)")
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, dict):
            if any(type(key) is not str for key in item):
                raise InvalidType("a dict key is not a str: JSON keys are strings (convert them first)")
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidType("a string holds a lone surrogate: it is not valid Unicode text") from None
    except (ValueError, RecursionError):
        raise InvalidType(f"the value contains itself, or nests deeper than {MAX_DEPTH} levels") from None
