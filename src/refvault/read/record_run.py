"""Running a checked record selection: a page of records, within the query's time and scan budgets.

Part of :mod:`refvault.read.records` (see its docstring for the invariants). A
query stopped by its time or scan budget returns what it has, with
``scan_complete: false`` and a position to go on from: never a false "no matches".
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from refvault.errors import InvalidQuery, StorageError
from refvault.operations import RecordSet
from refvault.read.metering import ScanMeter
from refvault.read.record_engine import INDEX, Engine, ident
from refvault.read.record_select import Selection, Sql

__all__ = ["FIRST_SEGMENT", "Page", "Run", "page_tokens", "within_budget"]

FIRST_SEGMENT = 1 << 18  # records of the first segment an unordered scan reads (each next one is twice as long)


@dataclass(slots=True)
class Page:
    rows: list[tuple[int, dict[str, Any]]]
    scanned: int
    scan_complete: bool
    next_position: dict[str, Any] | None
    omissions: list[dict[str, Any]]


class _Interrupted(Exception):
    pass


class Run:
    """One query call: the selection, where a cursor left off, and the budgets."""

    def __init__(
        self,
        engine: Engine,
        view: str,
        records: RecordSet,
        selection: Selection,
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
        self.columns = ", ".join([INDEX, *(ident(name) for name in selection.fields)])
        self.kinds = [
            (name, records.fields[[n for n, _ in records.fields].index(name)][1]) for name in selection.fields
        ]

    def _fetch(self, sql: Sql, predicate: str, order_by: str, take: int) -> list[tuple[int, dict[str, Any]]]:
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

    def _where(self, sql: Sql, low: int, high: int) -> str:
        sql.params.extend([low, high])
        parts = [f"{INDEX} >= ? AND {INDEX} < ?"]
        if self.sel.where is not None:
            parts.append(sql.node(self.sel.where))
        return " AND ".join(parts)

    def by_index(self) -> Page:
        """Default order: scan forward in growing segments so budgets stop at a segment edge."""
        start = int(self.position.get("from", self.sel.start))
        if not self.sel.start <= start <= self.sel.end:
            start = self.sel.end
        end = self.sel.end if self.max_scan is None else min(self.sel.end, start + self.max_scan)
        rows: list[tuple[int, dict[str, Any]]] = []
        low, segment = start, FIRST_SEGMENT
        while low < end and len(rows) <= self.sel.limit:
            high = min(end, low + segment)
            sql = Sql(self.records)
            try:
                rows += self._fetch(sql, self._where(sql, low, high), INDEX, self.sel.limit + 1 - len(rows))
            except _Interrupted:
                break
            low, segment = high, segment * 2
        if len(rows) > self.sel.limit:
            rows = rows[: self.sel.limit]
            resume = rows[-1][0] + 1
            return Page(rows, resume - start, True, {"from": resume}, [])
        if low >= self.sel.end:
            return Page(rows, self.sel.end - start, True, None, [])
        reason = "scan budget" if low >= end and self.max_scan is not None else "time budget"
        omission = {"record_range": [low, self.sel.end], "reason": f"not scanned: the query stopped at its {reason}"}
        return Page(rows, low - start, False, {"from": low}, [omission])

    def ordered(self) -> Page:
        """A user order: one keyset query over the covered records (page N costs what page 1 costs)."""
        end = int(self.position.get("end", self.sel.end))
        if self.max_scan is not None and not self.position:
            end = min(self.sel.end, self.sel.start + self.max_scan)
        end = max(self.sel.start, min(end, self.sel.end))
        partial = end < self.sel.end
        sql = Sql(self.records)
        predicate = self._where(sql, self.sel.start, end)
        after = self.position.get("after")
        if after is not None:
            predicate += " AND " + sql.after(self.view, self.sel.order, int(after))
        order_by = ", ".join(
            f"{ident(name)} {'ASC NULLS FIRST' if direction == 'asc' else 'DESC NULLS LAST'}"
            for name, direction in self.sel.order
        )
        try:
            rows = self._fetch(sql, predicate, f"{order_by}, {INDEX} ASC", self.sel.limit + 1)
        except _Interrupted:
            omission = {
                "record_range": [self.sel.start, self.sel.end],
                "reason": "not answered: the ordered query stopped at its time budget; add a filter or a record_range",
            }
            return Page([], 0, False, None, [omission])
        omissions = []
        if partial:
            omissions.append({"record_range": [end, self.sel.end], "reason": "not scanned: the query's scan budget"})
        more = len(rows) > self.sel.limit
        rows = rows[: self.sel.limit]
        next_position = {"after": rows[-1][0], "end": end} if more else None
        return Page(rows, end - self.sel.start, not partial, next_position, omissions)


_SCAN_BUDGET = ("not scanned: the query stopped at its scan budget", "not scanned: the query's scan budget")
_RUN_SCAN = "not scanned: the run's scanned_records budget"
_RUN_TOKENS = "not returned: the run's returned_tokens budget"


def page_tokens(selection: Selection) -> int:
    """The tokens a query reserves for its page up front (more is asked for if its records need it)."""
    return selection.limit * 64


def within_budget(
    page: Page, meter: ScanMeter, max_scan: int | None, selection: Selection, position: Mapping[str, Any]
) -> str | None:
    """Fit ``page`` (read from ``position``, the cursor's; empty on a first page) to the run's budget and say
    what stopped it: ``"budget"``, ``"scan_limit"``, ``"time"`` or None (complete).

    A scan the run's scanned_records budget cut says so in its omission; records the run's returned_tokens
    budget has no room for are left out from the first that does not fit, with a position to go on from
    there (``scan_complete`` false): never a silent cut. A page the budget empties goes on from where it
    began (an ordered page: after the record its cursor named), never from the first record again.
    """
    stopped: str | None = None
    if not page.scan_complete:
        cut = meter.limit is not None and (max_scan is None or meter.limit < max_scan)
        for omission in page.omissions:
            if omission.get("reason") in _SCAN_BUDGET:
                stopped = "budget" if cut else "scan_limit"
                if cut:
                    omission["reason"] = _RUN_SCAN
        stopped = stopped or "time"
    if meter.tokens is None:
        return stopped
    kept = 0
    for index, record in page.rows:
        if not meter.tokens.take(json.dumps([index, record], sort_keys=True, separators=(",", ":"), default=str)):
            break
        kept += 1
    if kept == len(page.rows):
        return stopped
    resume = page.rows[kept][0]
    ordered = bool(selection.order)
    page.rows = page.rows[:kept]
    if ordered:
        end = selection.start + page.scanned
        after = page.rows[-1][0] if page.rows else position.get("after")
        page.next_position = {"end": end} if after is None else {"after": after, "end": end}
    else:
        page.next_position = {"from": resume}
    page.scan_complete = False
    page.omissions.append({"record_range": [resume, selection.end], "reason": _RUN_TOKENS})
    return "budget"


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
