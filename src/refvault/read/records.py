"""Record artifacts: a Parquet derivative queried with DuckDB, structured selectors, signed keyset cursors.

Invariants, and where each is enforced and tested:

* **The exact bytes stay the artifact.** JSON Lines, a JSON array of
  objects, CSV and Parquet are captured as they are. A columnar derivative
  (Parquet with a ``__refvault_index__`` column holding each record's
  zero-based position in the source) is built once per blob, stored as a blob
  of its own with its own digest and a lineage link to the source
  (:meth:`~refvault.vault.Vault.put_derived`), and shared by every artifact
  with the same bytes in the tenant. Reads never reserialise the source.
* **Verified and scoped.** Every query checks scope, expiry and disclosure
  through the vault first; the derivative reaches DuckDB only through a
  private local copy whose bytes were verified against its digest when they
  were fetched (one copy per process, keyed by tenant namespace and digest).
* **Parameterised SQL only.** A selector is validated against the
  derivative's schema (unknown fields, ops or value types are
  :class:`~refvault.errors.InvalidQuery`) and compiled to SQL whose only
  identifiers are quoted schema names and whose values are bound parameters.
* **Values as the source wrote them, typed.** Dates and times stay strings,
  UUIDs stay strings, CSV cells are numbers only when written as plain
  decimal numbers, integers stay exact within 64 bits (CSV: 128). A
  JSON field that mixes integers and fractions is a double, as in most JSON
  parsers: integers beyond 2**53 are rounded in answers, while the artifact's
  bytes keep the exact text.
* **Two-valued logic.** Every comparison is false when the field is null or
  missing (``is_null`` excepted), so ``not`` means what it says. Nulls sort
  below every value; the record index is always the final tie-breaker.
* **Honest coverage.** ``scanned_records`` is what was examined,
  ``scan_complete`` says whether this page's answer is exact, and a query
  stopped by its time or scan budget returns what it has with
  ``scan_complete: false`` and a cursor to go on: never a false "no matches".
* **Cursors** (:mod:`refvault.read.cursors`) are HMAC-signed and bound to the
  artifact and content hash, the normalised selection except the page
  ``limit``, the caller's scope, an expiry and a keyset position (the index of
  the last record returned, so page N costs what page 1 costs). Scope is still
  checked on every use. The limit is left out on purpose: the position does
  not depend on it, so a caller may change the page size between pages with
  no gap or repeat (``tests/security/test_cursor_binding.py``).

Tested in ``tests/test_records.py`` and by the differential test against a
plain-Python evaluator (``tests/test_records_differential.py``).
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import decimal
import json
import math
import re
import shutil
import tempfile
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from refvault.catalog.base import Derivation
from refvault.errors import InvalidArgument, InvalidQuery, NotFound, StorageError, UnsupportedRead
from refvault.ids import namespace_of
from refvault.model import Descriptor, Scope
from refvault.read import cursors
from refvault.read._access import base_type, coverage, readable
from refvault.vault.vault import Vault

if TYPE_CHECKING:
    import duckdb

    from refvault.client import VaultLike

__all__ = [
    "INDEX",
    "MAX_LIMIT",
    "RecordSet",
    "capture_records",
    "derive",
    "derived_records",
    "query",
    "rotate_cursor_keys",
]

KIND = "records.parquet.v1"  # the derivation kind is KIND + ":" + source format (same bytes, other format: other kind)
INDEX = "__refvault_index__"
MAX_LIMIT = 1000
MAX_ORDER = 8
MAX_IN = 1000
MAX_DEPTH = 32
MAX_LEAVES = 256
MAX_QUERY_SECONDS = 600.0  # the largest max_seconds a query accepts
CURSOR_TTL = dt.timedelta(hours=1)
FIRST_SEGMENT = 1 << 18
PARQUET = "application/vnd.apache.parquet"

_FORMATS = {
    "application/x-ndjson": "ndjson",
    "application/json": "json",
    "text/csv": "csv",
    PARQUET: "parquet",
}
_OPS = ("eq", "ne", "lt", "lte", "gt", "gte", "in", "contains", "is_null")
_SQL_OPS = {"eq": "=", "ne": "<>", "lt": "<", "lte": "<=", "gt": ">", "gte": ">="}
_NUMBER = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT")
_FLOAT = ("FLOAT", "DOUBLE", "REAL", "DECIMAL")
_TEMPORAL = ("DATE", "TIME", "TIMESTAMP", "INTERVAL")
_CSV_TYPES = "['BIGINT', 'HUGEINT', 'DOUBLE', 'VARCHAR']"


@dataclass(frozen=True, slots=True)
class RecordSet:
    """What the derivative of a record artifact holds: its fields (name, DuckDB type) and record count."""

    artifact_id: str
    content_hash: str
    source_format: str
    count: int
    fields: tuple[tuple[str, str], ...]
    derived_hash: str

    def kind_of(self, name: str) -> str:
        """``number``, ``string``, ``bool``, ``temporal`` or ``other`` (nested or mixed values)."""
        for field_name, sql_type in self.fields:
            if field_name == name:
                return _kind(sql_type)
        raise InvalidQuery(f"unknown field {_shown(name)}; fields are: {_field_list(self)}")


def _kind(sql_type: str) -> str:
    base = sql_type.split("(", 1)[0].strip().upper()
    if base in _NUMBER or base in _FLOAT:
        return "number"
    if base == "VARCHAR":
        return "string"
    if base == "BOOLEAN":
        return "bool"
    if base.startswith(_TEMPORAL):
        return "temporal"
    return "other"


def _shown(name: object) -> str:
    text = repr(name)
    return text if len(text) <= 80 else text[:77] + "...'"


def _field_list(records: RecordSet) -> str:
    names = [name for name, _ in records.fields]
    listed = ", ".join(names[:50])
    return listed + (f" (+{len(names) - 50} more)" if len(names) > 50 else "")


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# -- the per-vault engine: DuckDB, scratch space and verified local copies ---------------


def _sql_path(path: Path) -> str:
    """A path as a SQL string literal (quotes doubled)."""
    return "'" + str(path).replace("'", "''") + "'"


@dataclass(slots=True)
class _Local:
    view: str
    path: Path
    size: int
    users: int = 0


class _Engine:
    """One DuckDB database per vault, a private scratch directory, and an LRU of verified local derivatives.

    A local copy is dropped when it is evicted while no query uses it, when
    ``gc`` has collected its blob (:meth:`after_gc`), and when the vault
    closes or the process exits (a finalizer removes the scratch directory).
    """

    STRIPES = 64

    def __init__(self, max_bytes: int = 4 << 30) -> None:
        import duckdb

        self.root = Path(tempfile.mkdtemp(prefix="refvault-records-"))  # mode 0700
        self.db = duckdb.connect(":memory:")
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._local: OrderedDict[tuple[str, str], _Local] = OrderedDict()
        self._stripes = [threading.Lock() for _ in range(self.STRIPES)]
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.root), True)

    def cursor(self) -> duckdb.DuckDBPyConnection:
        try:
            return self.db.cursor()
        except Exception as exc:  # duckdb.ConnectionException once closed
            raise StorageError(f"the record query engine is closed ({type(exc).__name__})") from None

    @contextlib.contextmanager
    def scratch(self) -> Iterator[Path]:
        path = Path(tempfile.mkdtemp(dir=self.root))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def once(self, key: tuple[str, str]) -> threading.Lock:
        """A lock serialising work on one key (striped: bounded however many keys there are)."""
        return self._stripes[hash(key) % self.STRIPES]

    @contextlib.contextmanager
    def view(self, vault: Vault, scope: Scope, artifact_id: str, derivation: Derivation) -> Iterator[str]:
        """A DuckDB view over a verified local copy of ``derivation`` (fetched once), held while in use."""
        key = (derivation.key.namespace, derivation.digest)
        with self.once(key):
            with self._lock:
                local = self._local.get(key)
                if local is not None:
                    self._local.move_to_end(key)
                    local.users += 1
            if local is None:
                local = self._fetch(vault, scope, artifact_id, derivation, key)
        try:
            yield local.view
        finally:
            with self._lock:
                local.users -= 1
                self._evict()

    def _fetch(
        self, vault: Vault, scope: Scope, artifact_id: str, derivation: Derivation, key: tuple[str, str]
    ) -> _Local:
        path = self.root / f"{key[0]}-{key[1]}.parquet"
        tmp = path.with_suffix(".part")
        _, stream = vault.open_derived(scope, artifact_id, derivation.kind)
        with stream, open(tmp, "wb") as out:
            for chunk in stream.iter_chunks():  # each chunk verified before it is handed out
                out.write(chunk)
        tmp.rename(path)
        local = _Local(f"rv_{key[0]}_{key[1]}", path, derivation.size, users=1)
        with self.cursor() as cur:
            cur.execute(f"CREATE OR REPLACE VIEW {local.view} AS SELECT * FROM read_parquet({_sql_path(path)})")
        with self._lock:
            self._local[key] = local
        return local

    def _evict(self, *, keep: Callable[[tuple[str, str]], bool] | None = None) -> None:
        """Drop idle copies: least recently used first while over budget, or every one ``keep`` rejects."""
        total = sum(local.size for local in self._local.values())
        for key, local in list(self._local.items()):
            over = total > self.max_bytes and keep is None
            if local.users or not (over or (keep is not None and not keep(key))):
                continue
            del self._local[key]
            total -= local.size
            with contextlib.suppress(Exception), self.db.cursor() as cur:
                cur.execute(f"DROP VIEW IF EXISTS {local.view}")
            local.path.unlink(missing_ok=True)

    def after_gc(self, vault: Vault) -> None:
        """Drop local copies of derivatives whose blobs ``gc`` collected (retention reaches the cache too)."""
        from refvault.blobs.base import BlobKey

        with self._lock:
            self._evict(keep=lambda key: vault.catalog.has_blob(BlobKey(*key)))

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a query still running is interrupted by the close
            self.db.interrupt()
        with contextlib.suppress(Exception):
            self.db.close()
        self._cleanup()


def _engine(vault: Vault) -> _Engine:
    return vault.attachment("refvault.read.records", _Engine)


class _Keys:
    """A vault's cursor key ring, shared by every process of its store; re-read when another process rotates it.

    * An embedded store (``vault.location``) keeps the ring in ``cursor-keys.json``,
      re-read whenever the file's mtime changes.
    * Any other store (PostgreSQL, memory) keeps it in the catalog setting
      ``cursor-keys``: created with ``swap_setting(expected=None)`` so concurrent
      creators agree on one ring, rotated by compare-and-set (retried on a race),
      and re-read when the stored text changed, checked at most every
      ``recheck`` seconds and at once when a cursor names an unknown key.
    """

    SETTING = "cursor-keys"
    recheck = 1.0  # seconds between checks of the catalog for a ring rotated elsewhere

    def __init__(self, vault: Vault) -> None:
        self._lock = threading.Lock()
        self._path = None if vault.location is None else vault.location / "cursor-keys.json"
        self._catalog = vault.catalog
        self._seen: int | None = None  # mtime of the file read last
        self._text: str | None = None  # the catalog setting read last
        self._checked = 0.0  # time.monotonic() of the last look at the catalog
        now = vault.clock()
        self._ring = self._load(now) if self._path is not None else self._load_shared(now)

    def _load(self, now: dt.datetime) -> cursors.KeyRing:
        assert self._path is not None
        ring = cursors.KeyRing.load_or_create(self._path, now=now)
        self._seen = self._path.stat().st_mtime_ns
        return ring

    def _load_shared(self, now: dt.datetime) -> cursors.KeyRing:
        for _ in range(5):
            text = self._catalog.get_setting(self.SETTING)
            if text is None:
                text = cursors.KeyRing.generate(now=now).to_json()
                if not self._catalog.swap_setting(self.SETTING, None, text):
                    continue  # another process created it first: read theirs
            return self._adopt(text)
        raise StorageError("the cursor key ring keeps changing while it is created")

    def _adopt(self, text: str) -> cursors.KeyRing:
        try:
            ring = cursors.KeyRing.from_json(text)
        except InvalidArgument:
            raise StorageError("the cursor key ring stored in the catalog is malformed") from None
        self._text = text
        self._checked = time.monotonic()
        return ring

    def ring(self, now: dt.datetime, *, refresh: bool = False) -> cursors.KeyRing:
        """The current ring; ``refresh`` looks for a rotation elsewhere now rather than within ``recheck`` s."""
        with self._lock:
            if self._path is not None:
                with contextlib.suppress(OSError):
                    if self._path.stat().st_mtime_ns != self._seen:  # rotated by another process
                        self._ring = self._load(now)
            elif refresh or time.monotonic() - self._checked >= self.recheck:
                text = self._catalog.get_setting(self.SETTING)
                self._checked = time.monotonic()
                if text is None:  # never created, or removed behind our back: start a ring everyone shares
                    self._ring = self._load_shared(now)
                elif text != self._text:
                    self._ring = self._adopt(text)
            return self._ring

    def rotate(self, now: dt.datetime) -> None:
        with self._lock:
            if self._path is not None:
                self._ring = self._ring.rotate(now=now)
                self._ring.save(self._path)
                self._seen = self._path.stat().st_mtime_ns
                return
            for _ in range(20):
                current = self._catalog.get_setting(self.SETTING)
                if current is None:
                    self._load_shared(now)
                    continue
                rotated = self._adopt(current).rotate(now=now).to_json()
                if self._catalog.swap_setting(self.SETTING, current, rotated):
                    self._ring = self._adopt(rotated)
                    return
                # another process rotated meanwhile: rotate what it stored
            raise StorageError("the cursor key ring keeps changing while it is rotated")


def _keys(vault: Vault) -> _Keys:
    return vault.attachment("refvault.read.cursor_keys", lambda: _Keys(vault))


def _ring(vault: Vault) -> cursors.KeyRing:
    return _keys(vault).ring(vault.clock())


def _checked_cursor(vault: Vault, cursor: object, binding: Mapping[str, str]) -> dict[str, Any]:
    """The position a cursor carries; a key unknown here is looked for once more in the shared ring."""
    from refvault.errors import InvalidCursor

    try:
        return cursors.check(_ring(vault), cursor, now=vault.clock(), binding=binding)
    except InvalidCursor as exc:
        if exc.reason != "unknown_key":
            raise
    ring = _keys(vault).ring(vault.clock(), refresh=True)  # signed after a rotation this process has not seen
    return cursors.check(ring, cursor, now=vault.clock(), binding=binding)


def rotate_cursor_keys(vault: Vault) -> None:
    """Start signing cursors with a fresh key; cursors signed with the old one keep working for the grace period.

    The new ring replaces ``cursor-keys.json`` of an embedded store, or the
    catalog's ``cursor-keys`` setting otherwise; other processes pick it up on
    their next query (within about a second, at once for a cursor it signed).
    """
    _keys(vault).rotate(vault.clock())


# -- deriving ------------------------------------------------------------------------------


def _format_of(descriptor: Descriptor) -> str:
    fmt = _FORMATS.get(base_type(descriptor.media_type))
    if fmt is None:
        raise UnsupportedRead(
            f"artifact {descriptor.artifact_id} ({base_type(descriptor.media_type)}) is not a record artifact; "
            "record queries take JSON Lines, a JSON array of objects, CSV or Parquet (use read_artifact for text)"
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


def derived_records(vault: VaultLike, scope: Scope, artifact_id: str) -> RecordSet | None:
    """What :func:`derive` would return, if the record form was already built; never builds it (None then)."""
    if not isinstance(vault, Vault):  # a refvault.client.Client: the server answers
        return vault.derived_records(scope, artifact_id)
    descriptor = vault.describe(scope, artifact_id)
    kind = kind_for(descriptor.media_type)
    derivation = None if kind is None else vault.derived(scope, artifact_id, kind)
    return None if derivation is None else _record_set(descriptor, derivation)


def derive(vault: VaultLike, scope: Scope, artifact_id: str) -> RecordSet:
    """Build (once) the Parquet derivative of a record artifact and return what it holds.

    The derivative is shared by every artifact with the same bytes in the
    tenant; a second call, from any process, finds it. Malformed input is
    :class:`~refvault.errors.UnsupportedRead` with a message that never quotes it.
    """
    if not isinstance(vault, Vault):  # a refvault.client.Client
        return vault.derive(scope, artifact_id)
    descriptor = readable(vault, scope, artifact_id)
    fmt = _format_of(descriptor)
    kind = f"{KIND}:{fmt}"
    derivation = vault.derived(scope, artifact_id, kind)
    if derivation is None:
        engine = _engine(vault)
        with engine.once((namespace_of(scope.tenant), descriptor.content_hash)):  # per tenant: no shared waits
            derivation = vault.derived(scope, artifact_id, kind) or _build(vault, scope, descriptor, fmt, engine)
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


def _build(vault: Vault, scope: Scope, descriptor: Descriptor, fmt: str, engine: _Engine) -> Derivation:
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
                row = cur.execute(f"SELECT count(*) FROM read_parquet({_sql_path(target)})").fetchone()
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
    path = _sql_path(source)
    if fmt == "csv":
        # text/csv is comma-separated (RFC 4180): no delimiter sniffing; booleans stay the text they are;
        # a column is a number only if every value is written as a plain decimal number.
        options = "header=true, delim=',', quote='\"', escape='\"'"
        detect = f"read_csv({path}, {options}, auto_type_candidates={_CSV_TYPES}, sample_size=-1)"
        columns = [(str(row[0]), str(row[1])) for row in cur.execute(f"DESCRIBE SELECT * FROM {detect}").fetchall()]
        numeric = [name for name, kind in columns if _kind(kind) == "number"]
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
        f"bool_and({_ident(name)} IS NULL OR regexp_full_match({_ident(name)}, '{_PLAIN_NUMBER}'))" for name in columns
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
    kind = _kind(detected)
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
    out = _sql_path(target)
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


def capture_records(vault: Vault, scope: Scope, table_or_frame: object, **put_options: Any) -> Descriptor:
    """Capture a pyarrow ``Table`` or pandas ``DataFrame`` snapshot as a Parquet record artifact.

    The Parquet bytes written here are the artifact; its derivative is built
    at once, so the first query pays nothing extra. ``put_options`` go to
    :meth:`~refvault.vault.Vault.put` (``media_type`` is always Parquet).
    """
    module = type(table_or_frame).__module__.split(".", 1)[0]
    if module not in ("pyarrow", "pandas"):
        raise InvalidArgument("capture_records takes a pyarrow.Table or a pandas.DataFrame")
    if "media_type" in put_options:
        raise InvalidArgument("capture_records always stores Parquet; do not pass media_type")
    engine = _engine(vault)
    with engine.scratch() as work:
        target = work / "records.parquet"
        import duckdb

        try:
            with engine.cursor() as cur:
                cur.register("refvault_source", table_or_frame)
                cur.execute(f"COPY refvault_source TO {_sql_path(target)} (FORMAT parquet, COMPRESSION zstd)")
        except (duckdb.Error, TypeError, ValueError) as exc:
            raise InvalidArgument(f"the table could not be written as Parquet ({type(exc).__name__})") from None
        with open(target, "rb") as data:
            descriptor = vault.put(scope, data, media_type=PARQUET, **put_options)
    if descriptor.disclosure == "model":
        derive(vault, scope, descriptor.artifact_id)
    return descriptor


# -- validating and compiling a selection --------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Selection:
    where: dict[str, Any] | None
    fields: tuple[str, ...]
    order: tuple[tuple[str, str], ...]
    limit: int
    start: int
    end: int

    def normalised(self, all_fields: bool) -> dict[str, Any]:
        return {
            "where": self.where,
            "fields": None if all_fields else list(self.fields),
            "order": [{"field": name, "direction": direction} for name, direction in self.order],
            "limit": self.limit,
            "record_range": [self.start, self.end],
        }


def _select(
    records: RecordSet,
    where: object,
    fields: object,
    order: object,
    limit: object,
    record_range: object,
) -> _Selection:
    leaves = [0]
    normal_where = None if where is None else _check_node(records, where, 0, leaves)
    return _Selection(
        where=normal_where,
        fields=_check_fields(records, fields),
        order=_check_order(records, order),
        limit=_check_limit(limit),
        **_check_range(records, record_range),
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_limit(limit: object) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise InvalidQuery(f"limit must be a positive integer (at most {MAX_LIMIT} records are returned per page)")
    return min(limit, MAX_LIMIT)


def _check_range(records: RecordSet, record_range: object) -> dict[str, int]:
    if record_range is None:
        return {"start": 0, "end": records.count}
    if (
        not isinstance(record_range, list | tuple)
        or len(record_range) != 2
        or not all(_is_int(v) and v >= 0 for v in record_range)
        or record_range[0] > record_range[1]
    ):
        raise InvalidQuery("record_range must be [start, end): two integers with 0 <= start <= end")
    return {"start": min(record_range[0], records.count), "end": min(record_range[1], records.count)}


def _check_fields(records: RecordSet, fields: object) -> tuple[str, ...]:
    if fields is None:
        return tuple(name for name, _ in records.fields)
    if not isinstance(fields, list | tuple) or not fields or not all(isinstance(f, str) for f in fields):
        raise InvalidQuery("fields must be a non-empty list of field names (or omitted for every field)")
    if len(set(fields)) != len(fields):
        raise InvalidQuery("fields lists a field twice")
    for name in fields:
        records.kind_of(name)
    return tuple(fields)


def _check_order(records: RecordSet, order: object) -> tuple[tuple[str, str], ...]:
    if order is None:
        return ()
    if not isinstance(order, list | tuple) or len(order) > MAX_ORDER:
        raise InvalidQuery(f'order must be a list of at most {MAX_ORDER} {{"field": ..., "direction": "asc"|"desc"}}')
    keys: list[tuple[str, str]] = []
    for item in order:
        if not isinstance(item, Mapping) or not set(item) <= {"field", "direction"} or "field" not in item:
            raise InvalidQuery('each order entry is {"field": name, "direction": "asc" or "desc"}')
        name, direction = item["field"], item.get("direction", "asc")
        if not isinstance(name, str) or direction not in ("asc", "desc"):
            raise InvalidQuery('each order entry is {"field": name, "direction": "asc" or "desc"}')
        if records.kind_of(name) == "other":
            raise InvalidQuery(f"field {_shown(name)} holds nested or mixed values and cannot be ordered by")
        if any(name == seen for seen, _ in keys):
            raise InvalidQuery(f"order names field {_shown(name)} twice")
        keys.append((name, direction))
    return tuple(keys)


def _check_node(records: RecordSet, node: object, depth: int, leaves: list[int]) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise InvalidQuery(f"the where selector is nested deeper than {MAX_DEPTH} levels")
    if not isinstance(node, Mapping) or not node:
        raise InvalidQuery(
            'a selector is {"field": f, "op": op, "value": v}, {"and": [...]}, {"or": [...]} or {"not": ...}'
        )
    if set(node) in ({"and"}, {"or"}):
        ((combinator, children),) = node.items()
        if not isinstance(children, list | tuple) or not children:
            raise InvalidQuery(f'"{combinator}" takes a non-empty list of selectors')
        return {combinator: [_check_node(records, child, depth + 1, leaves) for child in children]}
    if set(node) == {"not"}:
        return {"not": _check_node(records, node["not"], depth + 1, leaves)}
    leaves[0] += 1
    if leaves[0] > MAX_LEAVES:
        raise InvalidQuery(f"the where selector has more than {MAX_LEAVES} conditions")
    return _check_leaf(records, node)


def _check_leaf(records: RecordSet, node: Mapping[str, Any]) -> dict[str, Any]:
    if not {"field", "op"} <= set(node) <= {"field", "op", "value"}:
        raise InvalidQuery(
            'a condition is {"field": f, "op": op, "value": v}; '
            'combine conditions with {"and": [...]}, {"or": [...]}, {"not": ...}'
        )
    name, op = node["field"], node["op"]
    if not isinstance(name, str):
        raise InvalidQuery("a condition's field must be a field name (a string)")
    if op not in _OPS:
        raise InvalidQuery(f"unknown op {_shown(op)}; ops are: {', '.join(_OPS)}")
    kind = records.kind_of(name)
    if op == "is_null":
        value = node.get("value", True)
        if not isinstance(value, bool):
            raise InvalidQuery('"is_null" takes an optional boolean value (true: null or missing; false: present)')
        return {"field": name, "op": op, "value": value}
    if "value" not in node or node["value"] is None:
        raise InvalidQuery(f'op "{op}" needs a value; to test for a missing value use {{"op": "is_null"}}')
    value = node["value"]
    if kind == "other":
        raise InvalidQuery(f"field {_shown(name)} holds nested or mixed values; only is_null applies to it")
    if op == "contains":
        if kind != "string" or not isinstance(value, str):
            raise InvalidQuery('"contains" takes a string value and applies to text fields')
        return {"field": name, "op": op, "value": value}
    if op == "in":
        if not isinstance(value, list | tuple) or not 1 <= len(value) <= MAX_IN:
            raise InvalidQuery(f'"in" takes a list of 1 to {MAX_IN} values')
        return {"field": name, "op": op, "value": [_check_value(name, kind, v) for v in value]}
    return {"field": name, "op": op, "value": _check_value(name, kind, value)}


def _check_value(name: str, kind: str, value: object) -> Any:
    ok = {
        "number": (_is_int(value) and -(2**127) < value < 2**127)  # type: ignore[operator]
        or (isinstance(value, float) and math.isfinite(value)),
        "string": isinstance(value, str),
        "bool": isinstance(value, bool),
        "temporal": isinstance(value, str),
    }[kind]
    if not ok:
        wanted = {
            "number": "a number",
            "string": "a string",
            "bool": "true or false",
            "temporal": "an ISO date/time string",
        }
        raise InvalidQuery(f"field {_shown(name)} is compared with {wanted[kind]}, not {type(value).__name__}")
    return value


class _Sql:
    """Compiles a checked selection; values only ever travel as bound parameters."""

    def __init__(self, records: RecordSet) -> None:
        self.records = records
        self.types = dict(records.fields)
        self.params: list[Any] = []

    def bind(self, name: str, value: Any) -> str:
        self.params.append(value)
        if self.records.kind_of(name) == "temporal":
            return f"CAST(? AS {self.types[name]})"
        return "?"

    def node(self, node: Mapping[str, Any]) -> str:
        if "and" in node:
            return "(" + " AND ".join(self.node(child) for child in node["and"]) + ")"
        if "or" in node:
            return "(" + " OR ".join(self.node(child) for child in node["or"]) + ")"
        if "not" in node:
            return f"(NOT {self.node(node['not'])})"
        column, op, value = _ident(node["field"]), node["op"], node["value"]
        if op == "is_null":
            return f"({column} IS {'' if value else 'NOT '}NULL)"
        if op == "in":
            marks = ", ".join(self.bind(node["field"], v) for v in value)
            return f"coalesce({column} IN ({marks}), false)"
        if op == "contains":
            return f"coalesce(contains({column}, {self.bind(node['field'], value)}), false)"
        return f"coalesce({column} {_SQL_OPS[op]} {self.bind(node['field'], value)}, false)"

    def after(self, view: str, order: Sequence[tuple[str, str]], index: int) -> str:
        """Records strictly after record ``index`` in ``order`` (nulls lowest, the index last).

        The anchor's sort values are read by SQL from the derivative itself, never
        round-tripped through Python, so every type keeps its full precision.
        """
        alternatives = []
        for position in range(len(order) + 1):
            parts = [self._same(view, name, index) for name, _ in order[:position]]
            if position < len(order):
                name, direction = order[position]
                parts.append(self._beyond(view, name, direction, index))
            else:
                self.params.append(index)
                parts.append(f"{INDEX} > ?")
            alternatives.append("(" + " AND ".join(parts) + ")")
        return "(" + " OR ".join(alternatives) + ")"

    def _anchor(self, view: str, name: str, index: int) -> str:
        self.params.append(index)
        return f"(SELECT {_ident(name)} FROM {view} WHERE {INDEX} = ?)"

    def _same(self, view: str, name: str, index: int) -> str:
        return f"({_ident(name)} IS NOT DISTINCT FROM {self._anchor(view, name, index)})"

    def _beyond(self, view: str, name: str, direction: str, index: int) -> str:
        column = _ident(name)
        if direction == "asc":  # after the anchor: greater, or anything non-null after a null anchor
            anchor = self._anchor(view, name, index)
            again = self._anchor(view, name, index)
            return f"(coalesce({column} > {anchor}, false) OR ({again} IS NULL AND {column} IS NOT NULL))"
        anchor = self._anchor(view, name, index)  # desc: smaller, or null after a non-null anchor
        again = self._anchor(view, name, index)
        return f"(coalesce({column} < {anchor}, false) OR ({again} IS NOT NULL AND {column} IS NULL))"


# -- running a query -----------------------------------------------------------------------


def query(
    vault: VaultLike,
    scope: Scope,
    artifact_id: str,
    *,
    where: object = None,
    fields: object = None,
    order: object = None,
    limit: object = 100,
    record_range: object = None,
    cursor: object = None,
    max_seconds: float = 10.0,
    max_scan: int | None = None,
) -> dict[str, Any]:
    """Select records from a record artifact; the response says exactly what it covers.

    ``where`` is a structured selector, ``fields`` a projection, ``order`` a
    list of ``{"field", "direction"}``, ``limit`` the page size (at most
    1000), ``record_range`` ``[start, end)`` the records considered. Pass the
    ``next_cursor`` of a response (with the same selection; ``limit`` may differ) for the next page.
    ``max_seconds`` and ``max_scan`` bound the work of this call.
    """
    if not (isinstance(max_seconds, int | float) and 0 <= max_seconds <= MAX_QUERY_SECONDS):
        raise InvalidArgument(f"max_seconds must be between 0 and {MAX_QUERY_SECONDS:g}")
    if max_scan is not None and (not _is_int(max_scan) or max_scan < 1):
        raise InvalidArgument("max_scan must be a positive integer (or None)")
    if not isinstance(vault, Vault):  # a refvault.client.Client: the server runs the query
        return vault.query(
            scope,
            artifact_id,
            where=where,
            fields=fields,
            order=order,
            limit=limit,
            record_range=record_range,
            cursor=cursor,
            max_seconds=max_seconds,
            max_scan=max_scan,
        )
    descriptor = readable(vault, scope, artifact_id)
    records = derive(vault, scope, artifact_id)
    selection = _select(records, where, fields, order, limit, record_range)
    normal = selection.normalised(all_fields=fields is None)
    binding = {
        "artifact": f"{descriptor.artifact_id}:{descriptor.content_hash}",
        "query": cursors.digest({k: v for k, v in normal.items() if k != "limit"}),  # the page size is not bound
        "caller": cursors.digest([scope.tenant, scope.user, scope.session]),
    }
    ring = _ring(vault)
    position = {} if cursor is None else _checked_cursor(vault, cursor, binding)
    engine = _engine(vault)
    derivation = vault.derived(scope, artifact_id, f"{KIND}:{records.source_format}")
    if derivation is None:  # collected between derive() and now: the artifact itself is gone
        raise NotFound(artifact_id)
    with engine.view(vault, scope, artifact_id, derivation) as view:
        run = _Run(engine, view, records, selection, position, max_seconds, max_scan)
        page = run.ordered() if selection.order else run.by_index()
    vault.audit_read("query", scope, descriptor)
    next_cursor = None
    if page.next_position is not None:
        next_cursor = cursors.bind(
            ring, now=vault.clock(), ttl=CURSOR_TTL, binding=binding, position=page.next_position
        )
    source_version = descriptor.source_version
    snapshot = source_version.get("snapshot_id")
    return {
        "status": "ok" if page.scan_complete else "incomplete",
        **coverage(descriptor),
        "source_snapshot_id": None if snapshot is None else str(snapshot),
        "selection": normal,
        "scan_complete": page.scan_complete,
        "scanned_records": page.scanned,
        "returned_records": len(page.rows),
        "total_records": records.count,
        "has_more": page.next_position is not None,
        "next_cursor": next_cursor,
        "omissions": [*coverage(descriptor)["omissions"], *page.omissions],
        "records": [{"index": index, "record": record} for index, record in page.rows],
    }


@dataclass(slots=True)
class _Page:
    rows: list[tuple[int, dict[str, Any]]]
    scanned: int
    scan_complete: bool
    next_position: dict[str, Any] | None
    omissions: list[dict[str, Any]]


class _Interrupted(Exception):
    pass


class _Run:
    """One query call: the selection, where a cursor left off, and the budgets."""

    def __init__(
        self,
        engine: _Engine,
        view: str,
        records: RecordSet,
        selection: _Selection,
        position: Mapping[str, Any],
        max_seconds: float,
        max_scan: int | None,
    ) -> None:
        self.engine = engine
        self.view = view
        self.records = records
        self.sel = selection
        self.position = position
        self.deadline = time.monotonic() + max_seconds
        self.max_scan = max_scan
        self.columns = ", ".join([INDEX, *(_ident(name) for name in selection.fields)])
        self.kinds = [
            (name, records.fields[[n for n, _ in records.fields].index(name)][1]) for name in selection.fields
        ]

    def _fetch(self, sql: _Sql, predicate: str, order_by: str, take: int) -> list[tuple[int, dict[str, Any]]]:
        import duckdb

        text = f"SELECT {self.columns} FROM {self.view} WHERE {predicate} ORDER BY {order_by} LIMIT {take}"
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise _Interrupted
        with self.engine.cursor() as cur:
            timer = threading.Timer(remaining, cur.interrupt)
            timer.start()
            try:
                rows = cur.execute(text, sql.params).fetchall()
            except duckdb.InterruptException:
                raise _Interrupted from None
            except (duckdb.ConversionException, duckdb.InvalidInputException):
                raise InvalidQuery("a value in the selector cannot be converted to its field's type") from None
            except duckdb.ConnectionException:
                raise StorageError("the vault was closed while the query ran") from None
            finally:
                timer.cancel()
        return [(int(row[0]), self._record(row[1:])) for row in rows]

    def _record(self, values: Sequence[Any]) -> dict[str, Any]:
        return {name: _plain(value, sql_type) for (name, sql_type), value in zip(self.kinds, values, strict=True)}

    def _where(self, sql: _Sql, low: int, high: int) -> str:
        sql.params.extend([low, high])
        parts = [f"{INDEX} >= ? AND {INDEX} < ?"]
        if self.sel.where is not None:
            parts.append(sql.node(self.sel.where))
        return " AND ".join(parts)

    def by_index(self) -> _Page:
        """Default order: scan forward in growing segments so budgets stop at a segment edge."""
        start = int(self.position.get("from", self.sel.start))
        if not self.sel.start <= start <= self.sel.end:
            start = self.sel.end
        end = self.sel.end if self.max_scan is None else min(self.sel.end, start + self.max_scan)
        rows: list[tuple[int, dict[str, Any]]] = []
        low, segment = start, FIRST_SEGMENT
        while low < end and len(rows) <= self.sel.limit:
            high = min(end, low + segment)
            sql = _Sql(self.records)
            try:
                rows += self._fetch(sql, self._where(sql, low, high), INDEX, self.sel.limit + 1 - len(rows))
            except _Interrupted:
                break
            low, segment = high, segment * 2
        if len(rows) > self.sel.limit:
            rows = rows[: self.sel.limit]
            resume = rows[-1][0] + 1
            return _Page(rows, resume - start, True, {"from": resume}, [])
        if low >= self.sel.end:
            return _Page(rows, self.sel.end - start, True, None, [])
        reason = "scan budget" if low >= end and self.max_scan is not None else "time budget"
        omission = {"record_range": [low, self.sel.end], "reason": f"not scanned: the query stopped at its {reason}"}
        return _Page(rows, low - start, False, {"from": low}, [omission])

    def ordered(self) -> _Page:
        """A user order: one keyset query over the covered records (page N costs what page 1 costs)."""
        end = int(self.position.get("end", self.sel.end))
        if self.max_scan is not None and not self.position:
            end = min(self.sel.end, self.sel.start + self.max_scan)
        end = max(self.sel.start, min(end, self.sel.end))
        partial = end < self.sel.end
        sql = _Sql(self.records)
        predicate = self._where(sql, self.sel.start, end)
        after = self.position.get("after")
        if after is not None:
            predicate += " AND " + sql.after(self.view, self.sel.order, int(after))
        order_by = ", ".join(
            f"{_ident(name)} {'ASC NULLS FIRST' if direction == 'asc' else 'DESC NULLS LAST'}"
            for name, direction in self.sel.order
        )
        try:
            rows = self._fetch(sql, predicate, f"{order_by}, {INDEX} ASC", self.sel.limit + 1)
        except _Interrupted:
            omission = {
                "record_range": [self.sel.start, self.sel.end],
                "reason": "not answered: the ordered query stopped at its time budget; add a filter or a record_range",
            }
            return _Page([], 0, False, None, [omission])
        omissions = []
        if partial:
            omissions.append({"record_range": [end, self.sel.end], "reason": "not scanned: the query's scan budget"})
        more = len(rows) > self.sel.limit
        rows = rows[: self.sel.limit]
        next_position = {"after": rows[-1][0], "end": end} if more else None
        return _Page(rows, end - self.sel.start, not partial, next_position, omissions)


def _plain(value: Any, sql_type: str) -> Any:
    """A JSON-ready value: JSON columns parsed, times as ISO strings, decimals as strings, bytes by size only."""
    if value is None or isinstance(value, bool | int | str):
        if isinstance(value, str) and sql_type == "JSON":
            return json.loads(value)
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal) and sql_type.replace(" ", "").endswith(",0)"):
        return int(value)
    if isinstance(value, decimal.Decimal | uuid.UUID | dt.timedelta):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(value)} bytes>"
    if isinstance(value, Mapping):
        return {str(k): _plain(v, "") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, "") for v in value]
    return str(value)
