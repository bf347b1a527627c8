"""Deriving record artifacts: the Parquet derivative of JSON Lines, a JSON array, CSV or Parquet, built once.

Part of :mod:`refvault.read.records` (see its docstring for the invariants). The
exact bytes stay the artifact; the derivative (with an ``__refvault_index__``
column) is stored as a blob of its own, linked to the source's blob, and shared
by every artifact with the same bytes in the tenant.
"""

from __future__ import annotations

import contextlib
import csv
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from refvault import tracing
from refvault.errors import BudgetExceeded, InvalidArgument, UnsupportedRead
from refvault.ids import namespace_of
from refvault.model import Descriptor, Scope
from refvault.operations import RecordSet, field_kind
from refvault.read._access import base_type, readable
from refvault.read.metering import charge
from refvault.read.record_engine import INDEX, Engine, engine_of, ident, sql_path
from refvault.vault.budgeting import uncharged

if TYPE_CHECKING:
    import duckdb

    from refvault.catalog.base import Derivation
    from refvault.vault.core import Vault

__all__ = ["KIND", "PARQUET", "capture_records", "derivation_of", "kind_for", "run_derive", "run_derived_records"]

KIND = "records.parquet.v1"  # the derivation kind is KIND + ":" + source format (same bytes, other format: other kind)
PARQUET = "application/vnd.apache.parquet"

_FORMATS = {
    "application/x-ndjson": "ndjson",
    "application/json": "json",
    "text/csv": "csv",
    PARQUET: "parquet",
}
_CSV_TYPES = "['BIGINT', 'HUGEINT', 'DOUBLE', 'VARCHAR']"


def _format_of(descriptor: Descriptor) -> str:
    fmt = _FORMATS.get(base_type(descriptor.media_type))
    if fmt is None:
        raise UnsupportedRead(
            f"artifact {descriptor.artifact_id} ({base_type(descriptor.media_type)}) is not a record artifact; "
            "record queries take JSON Lines, a JSON array of objects, CSV or Parquet"
            " (text is read in windows or by grep)"
        )
    return fmt


def kind_for(media_type: str) -> str | None:
    """The derivation kind of a record media type (None for other media types)."""
    fmt = _FORMATS.get(base_type(media_type))
    return None if fmt is None else f"{KIND}:{fmt}"


def derivation_of(vault: Vault, scope: Scope, artifact_id: str) -> Derivation | None:
    """The record derivative recorded for an artifact visible in ``scope``, if one was built."""
    kind = kind_for(vault.describe(scope, artifact_id).media_type)
    return None if kind is None else vault.derived(scope, artifact_id, kind)


@tracing.selection("refvault.records")
def run_derived_records(vault: Vault, scope: Scope, artifact_id: str) -> RecordSet | None:
    """:func:`~refvault.read.records.derived_records` on an embedded vault: never builds (None if not built)."""
    descriptor = vault.describe(scope, artifact_id)
    kind = kind_for(descriptor.media_type)
    derivation = None if kind is None else vault.derived(scope, artifact_id, kind)
    return None if derivation is None else _record_set(descriptor, derivation)


@tracing.selection("refvault.records")
def run_derive(vault: Vault, scope: Scope, artifact_id: str) -> RecordSet:
    """:func:`~refvault.read.records.derive` on an embedded vault: build the derivative once, say what it holds."""
    descriptor = readable(vault, scope, artifact_id)
    fmt = _format_of(descriptor)
    kind = f"{KIND}:{fmt}"
    derivation = vault.derived(scope, artifact_id, kind)
    if derivation is None:
        engine = engine_of(vault)
        with engine.once((namespace_of(scope.tenant), descriptor.content_hash)):  # per tenant: no shared waits
            derivation = vault.derived(scope, artifact_id, kind)
            if derivation is None:
                charge(vault, scope, recomputations=1)  # the run's budget: before the index is built
                with uncharged():  # the build reads the source as a recomputation, not as a read call
                    derivation = _build(vault, scope, descriptor, fmt, engine)
    return _record_set(descriptor, derivation)


def _record_set(descriptor: Descriptor, derivation: Derivation) -> RecordSet:
    info = derivation.info
    return RecordSet(
        artifact_id=descriptor.artifact_id,
        content_hash=descriptor.content_hash,
        source_format=str(info["format"]),
        count=int(info["count"]),
        fields=tuple((str(name), str(sql_type)) for name, sql_type in info["fields"]),
        derived_hash="sha256:" + derivation.digest,
    )


def _build(vault: Vault, scope: Scope, descriptor: Descriptor, fmt: str, engine: Engine) -> Derivation:
    import duckdb

    with engine.scratch() as work:
        source = work / "source"
        with vault.stream(scope, descriptor.artifact_id) as stream, open(source, "wb") as out:
            for chunk in stream.iter_chunks():
                out.write(chunk)
        target = work / "derived.parquet"
        try:
            with engine.cursor() as cur:
                fields = _convert(cur, fmt, source, target, empty=_is_empty(fmt, source))
                row = cur.execute(f"SELECT count(*) FROM read_parquet({sql_path(target)})").fetchone()
                count = 0 if row is None else int(row[0])
        except duckdb.Error as exc:
            # DuckDB's messages quote the offending input: only the error class leaves.
            raise UnsupportedRead(
                f"artifact {descriptor.artifact_id} could not be read as {_FORMAT_NAMES[fmt]} "
                f"({type(exc).__name__}); record queries need well-formed records"
            ) from None
        info = {"format": fmt, "count": count, "fields": [list(pair) for pair in fields], "version": 1}
        with open(target, "rb") as data:
            return vault.put_derived(scope, descriptor.artifact_id, f"{KIND}:{fmt}", data, info)


_FORMAT_NAMES = {
    "ndjson": "JSON Lines (one JSON object per line)",
    "json": "a JSON array of objects",
    "csv": "CSV with a header row",
    "parquet": "Parquet",
}


def _is_empty(fmt: str, source: Path) -> bool:
    """No records at all: an empty file, or a JSON document that is just ``[]``."""
    size = source.stat().st_size
    if size == 0:
        return True
    return fmt == "json" and size <= 4096 and source.read_bytes().strip() == b"[]"


def _source_sql(cur: duckdb.DuckDBPyConnection, fmt: str, source: Path) -> str:
    path = sql_path(source)
    if fmt == "csv":
        # text/csv is comma-separated (RFC 4180): no delimiter sniffing; booleans stay the text they are;
        # a column is a number only if every value is written as a plain decimal number.
        options = "header=true, delim=',', quote='\"', escape='\"'"
        detect = f"read_csv({path}, {options}, auto_type_candidates={_CSV_TYPES}, sample_size=-1)"
        columns = [(str(row[0]), str(row[1])) for row in cur.execute(f"DESCRIBE SELECT * FROM {detect}").fetchall()]
        numeric = [name for name, kind in columns if field_kind(kind) == "number"]
        as_text = _not_plain_numbers(cur, f"read_csv({path}, {options}, all_varchar=true)", numeric)
        types = ", ".join(
            f"'{name.replace(chr(39), chr(39) * 2)}': '{'VARCHAR' if name in as_text else _stored_type(kind)}'"
            for name, kind in columns
        )
        return f"read_csv({path}, {options}, types={{{types}}}, auto_type_candidates={_CSV_TYPES}, sample_size=-1)"
    if fmt == "parquet":
        return f"read_parquet({path})"
    layout = "newline_delimited" if fmt == "ndjson" else "array"
    detect = f"read_json({path}, format='{layout}', records=true, sample_size=-1, maximum_depth=2)"
    columns = cur.execute(f"DESCRIBE SELECT * FROM {detect}").fetchall()
    spec = ", ".join(
        f"'{str(name).replace(chr(39), chr(39) * 2)}': '{_stored_type(str(kind))}'" for name, kind, *_ in columns
    )
    return f"read_json({path}, format='{layout}', records=true, columns={{{spec}}})"


_PLAIN_NUMBER = r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$"


def _not_plain_numbers(cur: duckdb.DuckDBPyConnection, text_relation: str, columns: list[str]) -> set[str]:
    """Columns DuckDB would read as numbers although some value is not a plain number (``0x10``, ``007``)."""
    if not columns:
        return set()
    checks = ", ".join(
        f"bool_and({ident(name)} IS NULL OR regexp_full_match({ident(name)}, '{_PLAIN_NUMBER}'))" for name in columns
    )
    row = cur.execute(f"SELECT {checks} FROM {text_relation}").fetchone()
    return {name for name, plain in zip(columns, row or (), strict=False) if plain is False}


def _stored_type(detected: str) -> str:
    """The column type a JSON field is stored as.

    Dates and times stay the strings the source holds (detection must not
    rewrite values); nested values (objects, arrays) stay whole JSON values;
    128-bit and unsigned 64-bit integers, which Parquet cannot hold as
    integers, become DECIMAL(38, 0) so they stay exact.
    """
    kind = field_kind(detected)
    if kind == "temporal" or detected == "UUID":  # strings that happen to parse: keep them strings
        return "VARCHAR"
    if kind == "other":
        return "JSON"
    if detected in ("HUGEINT", "UHUGEINT", "UBIGINT"):
        return "DECIMAL(38,0)"
    return detected


def _convert(
    cur: duckdb.DuckDBPyConnection, fmt: str, source: Path, target: Path, *, empty: bool
) -> list[tuple[str, str]]:
    out = sql_path(target)
    if empty and fmt in ("ndjson", "csv", "json"):
        cur.execute(f"COPY (SELECT 0::BIGINT AS {INDEX} WHERE false) TO {out} (FORMAT parquet)")
        return []
    relation = _source_sql(cur, fmt, source)
    fields = [(str(row[0]), str(row[1])) for row in cur.execute(f"DESCRIBE SELECT * FROM {relation}").fetchall()]
    _check_names(cur, fmt, source, [name for name, _ in fields])
    if any(name == INDEX for name, _ in fields):
        raise UnsupportedRead(f"a field is named {INDEX}, which refvault reserves for the record index")
    # preserve_insertion_order (DuckDB's default) keeps source order, so row_number() is the record's position.
    cur.execute(
        f"COPY (SELECT (row_number() OVER ()) - 1 AS {INDEX}, * FROM {relation}) "
        f"TO {out} (FORMAT parquet, ROW_GROUP_SIZE 65536, COMPRESSION zstd)"
    )
    return fields


_RENAMED = re.compile(r".+_\d+")


def _check_names(cur: duckdb.DuckDBPyConnection, fmt: str, source: Path, detected: list[str]) -> None:
    """Refuse field names that differ only in letter case.

    DuckDB resolves names case-insensitively and would silently rename the
    second (``A`` becomes ``A_1``). A renamed column always ends in ``_<n>``,
    so the exact key set is only read when such a name appears.
    """
    if not any(_RENAMED.fullmatch(name) for name in detected):
        return
    path = str(source).replace("'", "''")
    if fmt == "csv":
        with open(source, newline="", encoding="utf-8", errors="replace") as text:
            actual = set(next(csv.reader(text), []))
    elif fmt == "parquet":
        rows = cur.execute(f"SELECT DISTINCT path_in_schema FROM parquet_metadata('{path}')").fetchall()
        actual = {str(row[0]).split(", ", 1)[0] for row in rows}
    else:
        layout = "newline_delimited" if fmt == "ndjson" else "array"
        keys = f"SELECT DISTINCT unnest(json_keys(json)) FROM read_json_objects('{path}', format='{layout}')"
        actual = {str(row[0]) for row in cur.execute(keys).fetchall()}
    if actual != set(detected):
        raise UnsupportedRead(
            "the records have field names that differ only in letter case (like 'a' and 'A'); "
            "record queries need names that differ in more than case (read the artifact as text instead)"
        )


DATAFRAMES_EXTRA = 'for pandas DataFrames install the dataframes extra: pip install "refvault[dataframes]"'


def capture_records(vault: Vault, scope: Scope, table_or_frame: object, **put_options: Any) -> Descriptor:
    """Capture a pyarrow ``Table`` or pandas ``DataFrame`` snapshot as a Parquet record artifact.

    The Parquet bytes written here are the artifact; its derivative is built
    at once, so the first query pays nothing extra. ``put_options`` go to
    :meth:`~refvault.vault.Vault.put` (``media_type`` is always Parquet). A DataFrame needs pandas, the
    ``dataframes`` extra (``pip install "refvault[dataframes]"``); any other value is an
    :class:`~refvault.errors.InvalidArgument` that names it.
    """
    module = type(table_or_frame).__module__.split(".", 1)[0]
    if module not in ("pyarrow", "pandas"):
        raise InvalidArgument(f"capture_records takes a pyarrow.Table or a pandas.DataFrame; {DATAFRAMES_EXTRA}")
    if "media_type" in put_options:
        raise InvalidArgument("capture_records always stores Parquet; do not pass media_type")
    engine = engine_of(vault)
    with engine.scratch() as work:
        target = work / "records.parquet"
        import duckdb

        try:
            with engine.cursor() as cur:
                cur.register("refvault_source", table_or_frame)
                cur.execute(f"COPY refvault_source TO {sql_path(target)} (FORMAT parquet, COMPRESSION zstd)")
        except (duckdb.Error, TypeError, ValueError) as exc:
            raise InvalidArgument(f"the table could not be written as Parquet ({type(exc).__name__})") from None
        with open(target, "rb") as data:
            descriptor = vault.put(scope, data, media_type=PARQUET, **put_options)
    if descriptor.disclosure == "model":
        with contextlib.suppress(BudgetExceeded):  # no recomputation left: the first query builds it
            run_derive(vault, scope, descriptor.artifact_id)
    return descriptor
