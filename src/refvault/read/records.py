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

This module holds the public entry points; the work is done by
:mod:`~refvault.read.record_derive` (building the derivative),
:mod:`~refvault.read.record_select` (checking and compiling a selection),
:mod:`~refvault.read.record_run` (running it within its budgets),
:mod:`~refvault.read.record_engine` (DuckDB and the verified local copies) and
:mod:`~refvault.read.record_keys` (the cursor key ring). Each entry point takes
any vault of the contract (:class:`refvault.contract.VaultContract`): an embedded
vault runs the engine itself, a client has its server run it.

Tested in ``tests/read/test_records.py`` and by the differential test against a
plain-Python evaluator (``tests/read/test_records_differential.py``).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING, Any

from refvault import tracing
from refvault.contract import VaultContract
from refvault.errors import NotFound
from refvault.limits import CURSOR_TTL_SECONDS, DEFAULT_QUERY_LIMIT, DEFAULT_QUERY_SECONDS, MAX_LIMIT
from refvault.limits import MAX_DEPTH as MAX_DEPTH
from refvault.limits import MAX_IN as MAX_IN
from refvault.limits import MAX_LEAVES as MAX_LEAVES
from refvault.limits import MAX_ORDER as MAX_ORDER
from refvault.limits import MAX_QUERY_SECONDS as MAX_QUERY_SECONDS
from refvault.model import Scope
from refvault.operations import QueryRequest, RecordSet, RecordSetRequest
from refvault.policy import DEFAULT_PURPOSE, DEFAULT_RECIPIENT
from refvault.read import cursors
from refvault.read._access import acting, coverage, readable, whole_object_proof
from refvault.read.metering import ScanMeter
from refvault.read.record_derive import KIND, capture_records, run_derive, run_derived_records
from refvault.read.record_derive import PARQUET as PARQUET
from refvault.read.record_derive import derivation_of as derivation_of
from refvault.read.record_derive import kind_for as kind_for
from refvault.read.record_engine import INDEX, Engine, engine_of
from refvault.read.record_keys import Keys, checked_cursor, ring_of, rotate_cursor_keys
from refvault.read.record_run import FIRST_SEGMENT as FIRST_SEGMENT
from refvault.read.record_run import Run, page_tokens, within_budget
from refvault.read.record_select import select
from refvault.vault.audit_trail import engine_read, excerpt_of

if TYPE_CHECKING:
    from refvault.vault.core import Vault

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

# Names other modules and tests import from here, kept where they were.
_Engine = Engine
_engine = engine_of
_Keys = Keys
_ring = ring_of
_RECORDS_REPRESENTATION = (
    "records parsed from the stored bytes (JSON values, not bytes); the proof covers the whole object they were "
    "parsed from: check it with the whole artifact"
)
CURSOR_TTL = dt.timedelta(seconds=CURSOR_TTL_SECONDS)


def derived_records(
    vault: VaultContract,
    scope: Scope,
    artifact_id: str,
    *,
    purpose: str = DEFAULT_PURPOSE,
    recipient: str = DEFAULT_RECIPIENT,
) -> RecordSet | None:
    """What :func:`derive` would return, if the record form was already built; never builds it (None then)."""
    request = RecordSetRequest(build=False, purpose=purpose, recipient=recipient)
    return vault.read_selection(
        scope,
        artifact_id,
        request,
        lambda local: run_derived_records(acting(local, purpose, recipient), scope, artifact_id),
    )


def derive(
    vault: VaultContract,
    scope: Scope,
    artifact_id: str,
    *,
    purpose: str = DEFAULT_PURPOSE,
    recipient: str = DEFAULT_RECIPIENT,
) -> RecordSet:
    """Build (once) the Parquet derivative of a record artifact and return what it holds.

    The derivative is shared by every artifact with the same bytes in the
    tenant; a second call, from any process, finds it. Malformed input is
    :class:`~refvault.errors.UnsupportedRead` with a message that never quotes it.
    """
    request = RecordSetRequest(build=True, purpose=purpose, recipient=recipient)
    record_set = vault.read_selection(
        scope, artifact_id, request, lambda local: run_derive(acting(local, purpose, recipient), scope, artifact_id)
    )
    assert record_set is not None  # built when asked to (a client raises StorageError otherwise)
    return record_set


def query(
    vault: VaultContract,
    scope: Scope,
    artifact_id: str,
    *,
    where: object = None,
    fields: object = None,
    order: object = None,
    limit: object = DEFAULT_QUERY_LIMIT,
    record_range: object = None,
    cursor: object = None,
    max_seconds: float = DEFAULT_QUERY_SECONDS,
    max_scan: int | None = None,
    purpose: str = DEFAULT_PURPOSE,
    recipient: str = DEFAULT_RECIPIENT,
) -> dict[str, Any]:
    """Select records from a record artifact; the response says exactly what it covers.

    ``where`` is a structured selector, ``fields`` a projection, ``order`` a
    list of ``{"field", "direction"}``, ``limit`` the page size (at most
    1000), ``record_range`` ``[start, end)`` the records considered. Pass the
    ``next_cursor`` of a response (with the same selection; ``limit`` may differ) for the next page.
    ``max_seconds`` and ``max_scan`` bound the work of this call.
    """
    request = QueryRequest(
        where=where,
        fields=fields,
        order=order,
        limit=limit,
        record_range=record_range,
        cursor=cursor,
        max_seconds=max_seconds,
        max_scan=max_scan,
        purpose=purpose,
        recipient=recipient,
    )
    return vault.read_selection(
        scope, artifact_id, request, lambda local: run_query(local, scope, artifact_id, request)
    )


@tracing.selection("refvault.query")
def run_query(vault: Vault, scope: Scope, artifact_id: str, request: QueryRequest) -> dict[str, Any]:
    """:func:`query` on an embedded vault (the engine a server runs for its clients).

    Every page, the first and each cursor's, goes through the vault's one door with the
    request's purpose and recipient (a cursor carries no authority of its own).
    """
    vault = acting(vault, request.purpose, request.recipient)
    with engine_read():  # the ledger records the page returned (below), not what was read to derive it
        descriptor = readable(vault, scope, artifact_id)
        records = run_derive(vault, scope, artifact_id)
        selection = select(records, request.where, request.fields, request.order, request.limit, request.record_range)
        normal = selection.normalised(all_fields=request.fields is None)
        binding = {
            "artifact": f"{descriptor.artifact_id}:{descriptor.content_hash}",
            "query": cursors.digest({k: v for k, v in normal.items() if k != "limit"}),  # the page size is not bound
            "caller": cursors.digest([scope.tenant, scope.user, scope.session]),
        }
        ring = ring_of(vault)
        position = {} if request.cursor is None else checked_cursor(vault, request.cursor, binding)
        engine = engine_of(vault)
        derivation = vault.derived(scope, artifact_id, f"{KIND}:{records.source_format}")
        if derivation is None:  # collected between derive() and now: the artifact itself is gone
            raise NotFound(artifact_id)
        wanted = selection.end - selection.start  # the most this page can scan; and return: its limit's worth
        meter = ScanMeter.start(
            vault, scope, wanted, request.max_seconds, dimension="scanned_records", tokens=page_tokens(selection)
        )
        max_scan = request.max_scan if meter.limit is None else min(request.max_scan or wanted, meter.limit)
        with engine.view(vault, scope, artifact_id, derivation) as view:
            run = Run(engine, view, records, selection, position, meter.seconds, max_scan)
            page = run.ordered() if selection.order else run.by_index()
        stopped_by = within_budget(page, meter, request.max_scan, selection, position)
        meter.settle(records=page.scanned)
        proved = whole_object_proof(vault, scope, descriptor, _RECORDS_REPRESENTATION)
    rows_text = json.dumps(
        [[index, record] for index, record in page.rows], sort_keys=True, separators=(",", ":"), default=str
    )
    excerpt, size = excerpt_of(rows_text)  # of the page's records as canonical JSON: what left, never the query
    vault.audit_read(
        "query",
        scope,
        descriptor,
        selection=f"query {'next page' if request.cursor is not None else 'first page'} records={len(page.rows)}",
        excerpt_hash=excerpt,
        bytes=size,
        records=len(page.rows),
    )
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
        "stopped_by": stopped_by,
        "scanned_records": page.scanned,
        "returned_records": len(page.rows),
        "total_records": records.count,
        "has_more": page.next_position is not None,
        "next_cursor": next_cursor,
        "omissions": [*coverage(descriptor)["omissions"], *page.omissions],
        "records": [{"index": index, "record": record} for index, record in page.rows],
        **proved,
    }
