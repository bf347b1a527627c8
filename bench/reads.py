"""Record-read benchmarks: capture, derive and query one million incident-like records, against baselines.

Run with ``.venv/bin/python bench/reads.py`` (one million records, ~150 MB of JSON Lines);
``--quick`` does 100,000 records, ``--records N`` any count.

The records are generated deterministically (fixed seed) into a scratch directory
under ``bench/.work/`` and captured into an embedded store there. Every figure is
printed beside a baseline measured in the same run, on the same disk, with the same
bytes; repetitions interleave ours and the baselines (the order rotates every
repetition, after one discarded warm-up round for the latency figures); the table
shows medians, and the ratio is the median of the per-repetition ratios (with its
min..max spread). Absolute numbers on a shared machine are noise: the ratios are the
result.

Benchmarks:

1. Capture: ``vault.put`` from a file object vs raw write of the same bytes + fsync (MiB/s).
2. Derive: ``read.derive`` (the Parquet derivative, built once per artifact) vs raw
   read + SHA-256 of the same bytes, and vs parsing every line with ``json.loads`` (MiB/s of source).
3. A selective filter's first page (``severity == critical and region == eu-west``, 100
   records) vs the naive baseline: parse the JSON Lines in Python (``json.loads`` per
   line) and filter, per query (target: refvault >= 20x faster). 3a: the same naive
   baseline stopping as soon as it has 101 matches (the most it needs to know
   ``has_more``), for context.
4. Page 1,000 (reached by walking ``next_cursor``; the timed call is the one using the
   999th cursor) vs page 1 of a broad filter (``severity != critical``), in index
   order and ordered by ``latency_ms`` desc (target: page 1,000 <= 1.5x page 1).

Before timing, the answers are checked against the naive evaluation (first page, page 1,000).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from harness import (
    SCOPE,
    MiB,
    Row,
    command_line,
    drop,
    fsync_write,
    interleave,
    load_average,
    machine,
    make_parser,
    missed,
    print_table,
    timed,
    timed_ms,
    total_time,
    work_dir,
)

from refvault import read
from refvault.model import Scope
from refvault.vault.core import Vault

SEED = 20261129
PAGE = 1000  # the page reached through cursors

REGIONS = ["us-east", "us-west", "eu-west", "eu-central", "ap-south", "ap-northeast", "sa-east", "af-south"]
SERVICES = [
    "checkout", "payments", "search", "auth", "cart", "catalog", "ledger", "gateway", "profile", "orders",
    "inventory", "shipping", "pricing", "reviews", "mailer", "media", "billing", "quotes", "fraud", "ranker",
]  # fmt: skip
CODES = [200, 200, 200, 201, 204, 301, 400, 401, 403, 404, 409, 429, 500, 502, 503, 504]
MESSAGES = ["timeout", "conn reset", "slow query", "retry exhausted", "cache miss", "TLS error", "pool full", "ok"]

SELECTIVE: dict[str, Any] = {
    "and": [{"field": "severity", "op": "eq", "value": "critical"}, {"field": "region", "op": "eq", "value": "eu-west"}]
}
BROAD: dict[str, Any] = {"field": "severity", "op": "ne", "value": "critical"}
BY_LATENCY: list[dict[str, Any]] = [{"field": "latency_ms", "direction": "desc"}]


# -- the data --------------------------------------------------------------------------------------------------------


def generate(path: Path, count: int, seed: int = SEED) -> int:
    """Write ``count`` incident-like records as JSON Lines; returns the size in bytes. Same seed, same bytes."""
    rng = random.Random(seed)
    start = datetime(2026, 11, 1, tzinfo=UTC)
    size = 0
    with open(path, "wb") as out:
        batch: list[str] = []
        for i in range(count):
            roll = rng.random()
            severity = "critical" if roll < 0.01 else "error" if roll < 0.06 else "warning" if roll < 0.21 else "info"
            region = rng.choice(REGIONS)
            service = rng.choice(SERVICES)
            ts = start + timedelta(milliseconds=i * 250 + rng.randrange(250))
            record = {
                "event_id": f"{rng.getrandbits(32):08x}",
                "ts": ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z",
                "region": region,
                "service": service,
                "severity": severity,
                "latency_ms": round(rng.lognormvariate(3.0, 1.2), 3),
                "code": rng.choice(CODES),
                "host": f"h{rng.randrange(4096):04d}",
                "message": rng.choice(MESSAGES),
            }
            batch.append(json.dumps(record, separators=(",", ":")))
            if len(batch) == 10_000:
                size += out.write(("\n".join(batch) + "\n").encode())
                batch.clear()
        if batch:
            size += out.write(("\n".join(batch) + "\n").encode())
    return size


def selective(record: dict[str, Any]) -> bool:
    return bool(record.get("severity") == "critical" and record.get("region") == "eu-west")


def broad(record: dict[str, Any]) -> bool:
    return record.get("severity") is not None and record.get("severity") != "critical"


def parse_all(path: Path) -> None:
    """The parse baseline: ``json.loads`` every line."""
    with open(path, "rb") as source:
        for line in source:
            json.loads(line)


def naive_query(path: Path, predicate: Callable[[dict[str, Any]], bool], limit: int, *, early: bool) -> list[int]:
    """The naive baseline: parse every line with json.loads and filter; the first ``limit`` matching indexes.

    Without ``early`` the whole file is scanned (what a per-query parse-and-filter does to
    report its matches); with ``early`` it stops at ``limit + 1`` matches (enough for has_more).
    """
    found: list[int] = []
    with open(path, "rb") as source:
        for index, line in enumerate(source):
            if predicate(json.loads(line)):
                found.append(index)
                if early and len(found) > limit:
                    break
    return found[:limit]


# -- measurement and reporting ---------------------------------------------------------------------------------------


def read_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as source:
        while chunk := source.read(MiB):
            digest.update(chunk)
    return digest.hexdigest()


def indexes(response: dict[str, Any]) -> list[int]:
    return [item["index"] for item in response["records"]]


# -- the benchmarks --------------------------------------------------------------------------------------------------


@dataclass
class Config:
    records: int
    reps: int  # throughput repetitions (capture, derive)
    latency_reps: int  # query repetitions
    naive_reps: int  # repetitions that include a full naive parse


def bench_capture_derive(cfg: Config, work: Path, source: Path, size: int) -> list[Row]:
    data = source.read_bytes()
    raw_target = work / "raw-copy.jsonl"
    mib = size / MiB
    with Vault.open(work / "store-capture") as vault:

        def put(rep: int) -> float:
            scope = Scope(f"capture{rep + 1}", "user", "session")  # fresh tenant: no dedup against earlier reps
            with open(source, "rb") as stream:
                elapsed = timed(lambda: vault.put(scope, stream, media_type="application/x-ndjson"))
            drop(vault, scope)
            return mib / elapsed

        def raw_write(_rep: int) -> float:
            elapsed = timed(lambda: fsync_write(raw_target, data))
            raw_target.unlink()
            return mib / elapsed

        capture, raw = interleave(cfg.reps, [put, raw_write])

        def derive(rep: int) -> float:
            scope = Scope(f"derive{rep + 1}", "user", "session")
            with open(source, "rb") as stream:
                artifact_id = vault.put(scope, stream, media_type="application/x-ndjson").artifact_id
            began = time.perf_counter()
            records = read.derive(vault, scope, artifact_id)
            elapsed = time.perf_counter() - began
            assert records.count == cfg.records, (records.count, cfg.records)
            drop(vault, scope)
            return mib / elapsed

        def raw_read(_rep: int) -> float:
            return mib / timed(lambda: read_sha256(source))

        def parse(_rep: int) -> float:
            return mib / timed(lambda: parse_all(source))

        derived, raw_reads, parsed = interleave(cfg.reps, [derive, raw_read, parse])
    return [
        Row("1", f"capture {mib:,.0f} MiB JSONL", "MiB/s", "put", capture, "raw write+fsync", raw),
        Row("2", "derive (Parquet)", "MiB/s", "derive", derived, "raw read+sha256", raw_reads),
        Row("2a", "derive (Parquet)", "MiB/s", "derive", derived, "json.loads all", parsed),
    ]


def walk_to(vault: Vault, artifact_id: str, page: int, **query: Any) -> tuple[str, list[int]]:
    """The cursor that fetches page ``page`` (1-based), and the indexes of the page before it."""
    cursor: str | None = None
    response: dict[str, Any] = {}
    for _ in range(page - 1):
        response = read.query(vault, SCOPE, artifact_id, cursor=cursor, **query)
        assert response["scan_complete"], "the benchmark query stopped on a budget"
        assert response["has_more"], "the benchmark query ran out of pages"
        cursor = response["next_cursor"]
    assert cursor is not None
    return cursor, indexes(response)


def bench_queries(cfg: Config, work: Path, source: Path) -> list[Row]:
    rows: list[Row] = []
    with Vault.open(work / "store-query") as vault:
        with open(source, "rb") as stream:
            artifact_id = vault.put(SCOPE, stream, media_type="application/x-ndjson").artifact_id
        read.derive(vault, SCOPE, artifact_id)

        # -- 3: a selective filter's first page vs the naive parse-and-filter, checked against it first.
        def first_page() -> dict[str, Any]:
            return read.query(vault, SCOPE, artifact_id, where=SELECTIVE, limit=100)

        expected = naive_query(source, selective, 100, early=False)
        got = first_page()
        assert indexes(got) == expected, "refvault's first page differs from the naive answer"
        assert got["scan_complete"], "the selective query stopped on a budget"
        assert len(expected) == 100, "the selective query should fill its first page"
        print(f"  selective first page: {len(expected)} records, first index {expected[0]}", file=sys.stderr)

        ours, full, early = interleave(
            cfg.naive_reps,
            [
                lambda _rep: timed_ms(first_page),
                lambda _rep: timed_ms(lambda: naive_query(source, selective, 100, early=False)),
                lambda _rep: timed_ms(lambda: naive_query(source, selective, 100, early=True)),
            ],
            warmup=True,
        )
        first = "first page, selective"
        rows.append(Row("3", first, "ms", "query", ours, "naive full", full, kind="speedup", target=20.0))
        rows.append(Row("3a", first, "ms", "query", ours, "naive early-stop", early, kind="speedup"))

        # -- 4: page 1,000 through cursors vs page 1, in index order and ordered by latency.
        limit = min(100, int(cfg.records * 0.97) // PAGE)  # so that page 1,000 exists (99% match BROAD)
        label = f"page {PAGE:,} vs 1 (limit {limit})"
        with open(source, "rb") as stream:
            parsed = [(r.get("severity"), r.get("latency_ms")) for r in map(json.loads, stream)]
        for number, order, name in (("4", None, "index order"), ("4a", BY_LATENCY, "latency desc")):
            query: dict[str, Any] = {"where": BROAD, "limit": limit}
            if order is not None:
                query["order"] = order
            print(f"  walking {PAGE - 1} cursors ({name}) ...", file=sys.stderr, flush=True)
            cursor, _ = walk_to(vault, artifact_id, PAGE, **query)
            page_n = read.query(vault, SCOPE, artifact_id, cursor=cursor, **query)
            matching = [i for i, (severity, _) in enumerate(parsed) if severity is not None and severity != "critical"]
            if order is not None:  # latency desc, nulls last, index ascending
                matching.sort(key=lambda i: -parsed[i][1])  # stable: ties keep index order (no nulls here)
            start = (PAGE - 1) * limit
            assert indexes(page_n) == matching[start : start + limit], f"page {PAGE} ({name}) differs from naive"

            def page_one(_rep: int, query: dict[str, Any] = query) -> float:
                return timed_ms(lambda: read.query(vault, SCOPE, artifact_id, **query))

            def page_far(_rep: int, query: dict[str, Any] = query, cursor: str = cursor) -> float:
                return timed_ms(lambda: read.query(vault, SCOPE, artifact_id, cursor=cursor, **query))

            far, one = interleave(cfg.latency_reps, [page_far, page_one], warmup=True)
            row = Row(number, f"{label}, {name}", "ms", f"page {PAGE}", far, "page 1", one, kind="slowdown", target=1.5)
            rows.append(row)
    return rows


# -- main ------------------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = make_parser(
        __doc__, quick="100,000 records and fewer repetitions", reps="repetitions per figure (default 5, quick 3)"
    )
    parser.add_argument("--records", type=int, default=None, help="records to generate (default 1,000,000)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    records = args.records if args.records is not None else 100_000 if args.quick else 1_000_000
    if records < 2 * PAGE:
        raise SystemExit(f"--records must be at least {2 * PAGE} (page {PAGE} must exist)")
    reps = max(1, args.reps) if args.reps is not None else 3 if args.quick else 5
    cfg = Config(records=records, reps=reps, latency_reps=max(reps, 9 if args.quick else 15), naive_reps=reps)

    with work_dir("reads", args.keep) as work:
        print(f"refvault record-read benchmark: `{command_line('reads.py', argv)}`")
        print(machine())
        print(f"work dir: {work}")
        print(f"load average at start: {load_average()}", flush=True)
        began = time.perf_counter()
        source = work / "incidents.jsonl"
        print(f"generating {records:,} records (seed {SEED}) ...", file=sys.stderr, flush=True)
        size = generate(source, records)
        print(
            f"data: {records:,} incident-like records, {size / MiB:,.1f} MiB JSON Lines ({size / records:.0f} B/record)"
        )
        print(
            f"method: {cfg.reps} interleaved repetitions for throughput and naive-baseline figures, "
            f"{cfg.latency_reps} for page latencies (one discarded warm-up round for latencies); medians shown; "
            "ratio = median of per-repetition ratios",
            flush=True,
        )
        print(flush=True)
        rows: list[Row] = []
        print("running capture and derive ...", file=sys.stderr, flush=True)
        rows += bench_capture_derive(cfg, work, source, size)
        print("running queries ...", file=sys.stderr, flush=True)
        rows += bench_queries(cfg, work, source)
        print_table(rows)
        print()
        print("notes: 1 put streams from an open file (read, hash, chunked write, fsync, catalog commit); the raw")
        print("         baseline only writes bytes already in memory and fsyncs them.")
        print("       2 derive = one pass building the Parquet derivative (timed from a captured, not yet derived")
        print("         artifact); ratios are source MiB/s over the baseline's MiB/s.")
        print("       3 speedup = naive latency / refvault latency; the naive baseline parses the JSON Lines with")
        print("         json.loads per line and filters (3: whole file, 3a: stops at the 101st match).")
        print(f"       4 ratio = latency of page {PAGE:,} (cursor from walking the pages) / latency of page 1.")
        if records < 1_000_000:
            print("       the targets are set for 1,000,000 records: with fewer, the naive full scan (3) is")
            print("         proportionally cheaper while a first page costs about the same.")
        print(total_time(began))
    return 1 if args.strict and missed(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
