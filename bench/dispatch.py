"""Dispatch benchmarks: what the Toolbox adds to a tool call, against calling the function directly.

Run with ``.venv/bin/python bench/dispatch.py``; ``--quick`` does a smaller run, ``--profile``
adds a cProfile breakdown of the dispatch paths.

Every figure is printed beside a baseline measured in the same run. Repetitions
interleave ours and the baseline (the order rotates every repetition) so that
drift hits both alike; one discarded warm-up repetition comes first. Each
sample times a loop of calls and reports microseconds per call; the table shows
medians, "added" is the median of the per-repetition differences (ours -
baseline, with its min..max spread) and the ratio is the median of the
per-repetition ratios. Absolute numbers on a shared 2-core machine are noisy.

Benchmarks:

1. A tool without refs (``def add(a: int, b: int) -> int``) dispatched with
   ``box.call_sync(name, args, scope=..., run_id=..., tool_call_id=...)`` vs
   calling ``add(1, 2)`` directly (target < 50 us added per call), with the
   arguments as a JSON string (what a model sends) and as a dict.
2. The same through ``await box.call(...)``: for an ``async def`` tool (vs
   ``await add_async(1, 2)``) and for the sync tool, which the dispatcher runs on a
   worker thread (``asyncio.to_thread``); that row is also shown against a bare
   ``await asyncio.to_thread(add, 1, 2)``, the floor of any thread hop.
3. A tool taking a 1 MiB ``Ref`` (``len(doc.read())``) vs the same body with the
   bytes already in memory: the ratio, and how much of the added time is the
   verified read (``vault.read_bytes`` timed alone in the same run) vs the rest of
   the dispatch (including ``vault.describe``, the lookup the dispatcher makes to
   resolve the Ref). For context: the verified read vs a raw read + SHA-256 of the
   blob file, and a body that hashes every byte instead of taking ``len``.

Each sample uses a fresh Toolbox (so the trajectory it keeps does not grow across
the run) and checks that its last observation is not an error. The store is an
embedded one (``Vault.open(path)``) in a temporary directory under ``bench/.work/``;
reads are warm-cache.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import hashlib
import json
import os
import pstats
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import (
    SCOPE,
    Measure,
    MiB,
    blob_path,
    command_line,
    fmt,
    interleave,
    load_average,
    machine,
    make_parser,
    print_columns,
    read_verified,
    total_time,
    work_dir,
)

from refvault.toolbox import Observation, Ref, Toolbox
from refvault.vault.core import Vault

TARGET_ADDED_US = 50.0
ARGS_JSON = '{"a": 1, "b": 2}'
ARGS_DICT = {"a": 1, "b": 2}


# -- the tools and their bodies --------------------------------------------------------------------------------------


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def add_async(a: int, b: int) -> int:
    """Add two integers, asynchronously."""
    return a + b


def size_body(data: bytes) -> int:
    return len(data)


def digest_body(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def size(doc: Ref) -> int:
    """The size of a document in bytes."""
    return size_body(doc.read())


def digest(doc: Ref) -> str:
    """The SHA-256 of a document."""
    return digest_body(doc.read())


def new_box(vault: Vault) -> Toolbox:
    box = Toolbox(vault)
    for fn in (add, add_async, size, digest):
        box.tool(fn)
    return box


def checked(obs: Observation, expected: str) -> None:
    if obs.is_error or obs.content != expected:
        raise AssertionError(f"the dispatch did not do the work: {obs!r}")


# -- measurement and reporting ---------------------------------------------------------------------------------------


def per_call(calls: int, began: float) -> float:
    return (time.perf_counter() - began) / calls * 1e6


@dataclass
class Row:
    """One line of the table: our per-call time, its baseline, what we add and how that compares with the target."""

    number: str
    label: str
    ours_name: str
    ours: list[float]
    base_name: str
    base: list[float]
    target: float | None = None  # maximum microseconds added per call
    added: list[float] = field(init=False)
    ratios: list[float] = field(init=False)

    def __post_init__(self) -> None:
        self.added = [o - b for o, b in zip(self.ours, self.base, strict=True)]
        self.ratios = [o / b for o, b in zip(self.ours, self.base, strict=True)]

    @property
    def verdict(self) -> str:
        if self.target is None:
            return "info"
        return "PASS" if statistics.median(self.added) < self.target else "MISS"


def fmt_ratio(value: float) -> str:
    return f"{value:,.0f}x" if value >= 100 else f"{value:.2f}x"


def print_table(rows: Sequence[Row]) -> None:
    head = ("#", "benchmark", "measured (median)", "baseline (median)", "added", "min..max", "ratio", "target", "")
    body = [
        (
            row.number,
            row.label,
            f"{row.ours_name} {fmt(statistics.median(row.ours))} us",
            f"{row.base_name} {fmt(statistics.median(row.base))} us",
            f"{'+' if statistics.median(row.added) >= 0 else ''}{fmt(statistics.median(row.added))} us",
            f"{fmt(min(row.added))}..{fmt(max(row.added))}",
            fmt_ratio(statistics.median(row.ratios)),
            "-" if row.target is None else f"< {row.target:g} us added",
            row.verdict,
        )
        for row in rows
    ]
    print_columns(head, body, right={2, 3, 4, 5, 6})


# -- the benchmarks --------------------------------------------------------------------------------------------------


@dataclass
class Config:
    reps: int
    calls: int  # dispatches per sample on the in-thread paths
    thread_calls: int  # dispatches per sample on paths that hop to a worker thread
    ref_calls: int  # 1 MiB Ref dispatches per sample


class Bench:
    """The shared state of one run: the vault, one event loop for the async paths, and the samples."""

    def __init__(self, cfg: Config, vault: Vault, loop: asyncio.AbstractEventLoop) -> None:
        self.cfg = cfg
        self.vault = vault
        self.loop = loop

    def run(self, coroutine: Callable[[], Awaitable[float]]) -> float:
        return self.loop.run_until_complete(coroutine())

    # -- 1 and 2: no refs ------------------------------------------------------------------------

    def sync_dispatch(self, arguments: str | dict[str, int]) -> Measure:
        calls = self.cfg.calls

        def measure(rep: int) -> float:
            box = new_box(self.vault)
            run_id = f"run-{rep}"
            call_sync = box.call_sync
            began = time.perf_counter()
            for _ in range(calls):
                obs = call_sync("add", arguments, scope=SCOPE, run_id=run_id, tool_call_id="call_1")
            elapsed = per_call(calls, began)
            checked(obs, "3")
            return elapsed

        return measure

    def async_dispatch(self, name: str, arguments: str | dict[str, int], calls: int) -> Measure:
        def measure(rep: int) -> float:
            box = new_box(self.vault)
            run_id = f"run-{rep}"

            async def loop() -> float:
                began = time.perf_counter()
                for _ in range(calls):
                    obs = await box.call(name, arguments, scope=SCOPE, run_id=run_id, tool_call_id="call_1")
                elapsed = per_call(calls, began)
                checked(obs, "3")
                return elapsed

            return self.run(loop)

        return measure

    def direct(self, _rep: int) -> float:
        calls = self.cfg.calls
        began = time.perf_counter()
        for _ in range(calls):
            result = add(1, 2)
        elapsed = per_call(calls, began)
        assert result == 3
        return elapsed

    def direct_in_loop(self, _rep: int) -> float:
        calls = self.cfg.calls

        async def loop() -> float:
            began = time.perf_counter()
            for _ in range(calls):
                result = add(1, 2)
            elapsed = per_call(calls, began)
            assert result == 3
            return elapsed

        return self.run(loop)

    def direct_await(self, _rep: int) -> float:
        calls = self.cfg.calls

        async def loop() -> float:
            began = time.perf_counter()
            for _ in range(calls):
                result = await add_async(1, 2)
            elapsed = per_call(calls, began)
            assert result == 3
            return elapsed

        return self.run(loop)

    def bare_thread_hop(self, _rep: int) -> float:
        calls = self.cfg.thread_calls

        async def loop() -> float:
            began = time.perf_counter()
            for _ in range(calls):
                result = await asyncio.to_thread(add, 1, 2)
            elapsed = per_call(calls, began)
            assert result == 3
            return elapsed

        return self.run(loop)

    def no_refs(self) -> list[Row]:
        c = self.cfg
        contenders: list[Measure] = [
            self.direct,  # 0
            self.sync_dispatch(ARGS_JSON),  # 1
            self.sync_dispatch(ARGS_DICT),  # 2
            self.direct_await,  # 3
            self.async_dispatch("add_async", ARGS_JSON, c.calls),  # 4
            self.async_dispatch("add_async", ARGS_DICT, c.calls),  # 5
            self.direct_in_loop,  # 6
            self.bare_thread_hop,  # 7
            self.async_dispatch("add", ARGS_JSON, c.thread_calls),  # 8
            self.async_dispatch("add", ARGS_DICT, c.thread_calls),  # 9
        ]
        s = interleave(c.reps, contenders, warmup=True)
        t = TARGET_ADDED_US
        return [
            Row("1", "no refs, call_sync, JSON args", "call_sync", s[1], "add()", s[0], t),
            Row("1a", "no refs, call_sync, dict args", "call_sync", s[2], "add()", s[0], t),
            Row("1b", "no refs, call_sync: JSON vs dict", "JSON", s[1], "dict", s[2]),
            Row("2", "async tool, await call, JSON args", "call", s[4], "await add_async()", s[3], t),
            Row("2a", "async tool, await call, dict args", "call", s[5], "await add_async()", s[3], t),
            Row("2b", "sync tool, await call, JSON args", "call", s[8], "add() in loop", s[6], t),
            Row("2c", "sync tool, await call, dict args", "call", s[9], "add() in loop", s[6], t),
            Row("2d", "sync tool, await call, JSON args", "call", s[8], "await to_thread(add)", s[7]),
            Row("2e", "bare thread hop (floor of 2b/2c)", "await to_thread(add)", s[7], "add() in loop", s[6]),
        ]

    # -- 3: a 1 MiB Ref ------------------------------------------------------------------------------

    def ref_rows(self, store: Path) -> tuple[list[Row], dict[str, list[float]]]:
        calls = self.cfg.ref_calls
        data = os.urandom(MiB)
        artifact_id = self.vault.put(SCOPE, data, media_type="application/octet-stream").artifact_id
        path = blob_path(store, self.vault, SCOPE, artifact_id)
        content_hash = hashlib.sha256(data).hexdigest()
        assert path.stat().st_size == MiB, "the 1 MiB artifact is not stored as a blob file"
        arguments = json.dumps({"doc": artifact_id})
        vault = self.vault

        def dispatch(name: str, expected: str) -> Measure:
            def measure(rep: int) -> float:
                box = new_box(vault)
                run_id = f"run-{rep}"
                began = time.perf_counter()
                for _ in range(calls):
                    obs = box.call_sync(name, arguments, scope=SCOPE, run_id=run_id, tool_call_id="call_1")
                elapsed = per_call(calls, began)
                checked(obs, expected)
                return elapsed

            return measure

        def in_memory(body: Callable[[bytes], object], expected: str) -> Measure:
            def measure(_rep: int) -> float:
                began = time.perf_counter()
                for _ in range(calls):
                    result = body(data)
                elapsed = per_call(calls, began)
                assert str(result) == expected
                return elapsed

            return measure

        def verified_read(_rep: int) -> float:
            began = time.perf_counter()
            for _ in range(calls):
                got = vault.read_bytes(SCOPE, artifact_id)
            elapsed = per_call(calls, began)
            assert len(got) == MiB
            return elapsed

        def describe(_rep: int) -> float:
            began = time.perf_counter()
            for _ in range(calls):
                descriptor = vault.describe(SCOPE, artifact_id)
            elapsed = per_call(calls, began)
            assert descriptor.size == MiB
            return elapsed

        def raw_read(_rep: int) -> float:
            began = time.perf_counter()
            for _ in range(calls):
                read_verified(path, content_hash)
            return per_call(calls, began)

        contenders: list[Measure] = [
            dispatch("size", str(MiB)),  # 0
            in_memory(size_body, str(MiB)),  # 1
            verified_read,  # 2
            describe,  # 3
            raw_read,  # 4
            dispatch("digest", content_hash),  # 5
            in_memory(digest_body, content_hash),  # 6
        ]
        s = interleave(self.cfg.reps, contenders, warmup=True)
        rows = [
            Row("3", "1 MiB Ref tool, len(doc.read())", "call_sync", s[0], "len(bytes)", s[1]),
            Row("3a", "1 MiB verified read alone", "read_bytes", s[2], "raw read+sha256", s[4]),
            Row("3b", "1 MiB Ref tool, sha256(doc.read())", "call_sync", s[5], "sha256(bytes)", s[6]),
        ]
        parts = {"dispatch": s[0], "body": s[1], "read": s[2], "describe": s[3], "raw": s[4]}
        return rows, parts


def print_ref_breakdown(parts: dict[str, list[float]], no_ref_overhead: float) -> None:
    """Split the time a 1 MiB Ref dispatch adds into the verified read and the rest (per-repetition, then median)."""
    added = [d - b for d, b in zip(parts["dispatch"], parts["body"], strict=True)]
    read_share = [r / a for r, a in zip(parts["read"], added, strict=True)]
    rest = [a - r for a, r in zip(added, parts["read"], strict=True)]
    describe = statistics.median(parts["describe"])
    read = statistics.median(parts["read"])
    raw = statistics.median(parts["raw"])
    rest_median = statistics.median(rest)
    unaccounted = rest_median - describe - no_ref_overhead
    total = statistics.median(added)
    print("3 breakdown: what a 1 MiB Ref dispatch adds over the in-memory body, per call (medians)")
    lines = [
        ("added by the dispatch (3)", total, ""),
        ("  verified read: vault.read_bytes alone", read, f"{statistics.median(read_share):.0%} of it"),
        ("    of which a raw read + sha256 of the blob file", raw, "the floor of any verified read"),
        ("    of which the vault's own work (catalog lookups, checks)", read - raw, ""),
        ("  rest of the dispatch", rest_median, f"{1 - statistics.median(read_share):.0%} of it"),
        ("    of which vault.describe (resolving the Ref)", describe, ""),
        ("    of which the no-ref dispatch overhead (1)", no_ref_overhead, ""),
        ("    unaccounted (frame, Ref plumbing, noise)", unaccounted, ""),
    ]
    width = max(len(label) for label, _, _ in lines)
    for label, value, note in lines:
        print(f"  {label.ljust(width)}  {fmt(value):>7} us  {note}".rstrip())


# -- profile ---------------------------------------------------------------------------------------------------------


def print_profile(label: str, calls: int, run: Callable[[], object], top: int = 14) -> None:
    """cProfile ``run`` and print where the time goes, per dispatch (profiling inflates every figure)."""
    profiler = cProfile.Profile()
    began = time.perf_counter()
    profiler.runcall(run)
    wall = per_call(calls, began)
    stats = pstats.Stats(profiler)
    entries = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for _cc, _nc, tt, _ct, _callers in entries.values())
    print(f"profile: {label} -- {calls} dispatches, {fmt(wall)} us per dispatch under the profiler")
    print(f"  {'own us/call':>11}  {'cum us/call':>11}  {'share':>5}  {'calls/disp':>10}  function")
    rows = sorted(entries.items(), key=lambda item: item[1][2], reverse=True)[:top]
    for (filename, lineno, name), (_cc, nc, tt, ct, _callers) in rows:
        where = name if filename == "~" else f"{short_path(filename)}:{lineno}({name})"
        share = tt / total if total else 0.0
        own, cum = tt / calls * 1e6, ct / calls * 1e6
        print(f"  {fmt(own):>11}  {fmt(cum):>11}  {share:>5.0%}  {nc / calls:>10.1f}  {where}")
    print()


def short_path(filename: str) -> str:
    for marker in ("/src/refvault/", "/site-packages/", "/lib/python3."):
        if marker in filename:
            tail = filename.split(marker, 1)[1]
            return ("refvault/" + tail) if marker == "/src/refvault/" else tail.split("/", 1)[-1]
    return os.path.basename(filename)


def profile_all(bench: Bench, ref_arguments: str) -> None:
    cfg = bench.cfg
    box = new_box(bench.vault)

    def sync_loop() -> None:
        for _ in range(cfg.calls):
            box.call_sync("add", ARGS_JSON, scope=SCOPE, run_id="profile", tool_call_id="call_1")

    def async_loop(name: str, calls: int) -> Callable[[], None]:
        async def loop() -> None:
            for _ in range(calls):
                await box.call(name, ARGS_JSON, scope=SCOPE, run_id="profile", tool_call_id="call_1")

        return lambda: bench.loop.run_until_complete(loop())

    def ref_loop() -> None:
        for _ in range(cfg.ref_calls):
            box.call_sync("size", ref_arguments, scope=SCOPE, run_id="profile", tool_call_id="call_1")

    print_profile("call_sync, no refs, JSON args (1)", cfg.calls, sync_loop)
    print_profile("await call, async tool, JSON args (2)", cfg.calls, async_loop("add_async", cfg.calls))
    print_profile(
        "await call, sync tool, JSON args (2b; main thread only)",
        cfg.thread_calls,
        async_loop("add", cfg.thread_calls),
    )
    print_profile("call_sync, 1 MiB Ref, len (3)", cfg.ref_calls, ref_loop)


# -- main ------------------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = make_parser(
        __doc__, quick="fewer repetitions and calls per sample", reps="repetitions per benchmark (default 7, quick 3)"
    )
    parser.add_argument("--profile", action="store_true", help="also print a cProfile breakdown of each path")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quick:
        cfg = Config(reps=3, calls=3000, thread_calls=600, ref_calls=30)
    else:
        cfg = Config(reps=7, calls=10000, thread_calls=2000, ref_calls=100)
    if args.reps is not None:
        cfg.reps = max(1, args.reps)

    with work_dir("dispatch", args.keep) as work:
        print(f"refvault dispatch benchmark: `{command_line('dispatch.py', argv)}`")
        print(machine())
        print(f"store: embedded, {work / 'store'}")
        print(
            f"method: {cfg.reps} interleaved repetitions (order rotates, one warm-up discarded); each sample is "
            f"{cfg.calls} calls ({cfg.thread_calls} on thread-hop paths, {cfg.ref_calls} with a 1 MiB Ref); "
            "medians shown; added = median of per-repetition differences; ratio = median of per-repetition ratios"
        )
        print(f"load average at start: {load_average()}", flush=True)
        print(flush=True)
        began = time.perf_counter()
        loop = asyncio.new_event_loop()
        rows: list[Row] = []
        missed: list[Row] = []
        try:
            with Vault.open(work / "store") as vault:
                bench = Bench(cfg, vault, loop)
                print("running the no-ref dispatch benchmarks ...", file=sys.stderr, flush=True)
                rows.extend(bench.no_refs())
                print("running the 1 MiB Ref benchmarks ...", file=sys.stderr, flush=True)
                ref_rows, parts = bench.ref_rows(work / "store")
                rows.extend(ref_rows)
                print_table(rows)
                print()
                print_ref_breakdown(parts, statistics.median(rows[0].added))
                print()
                print("notes: 1/1a call_sync runs a sync tool inline; 2/2a await call runs an async tool inline.")
                print("       2b/2c await call runs a sync tool on the loop's default executor (asyncio.to_thread),")
                print("       so it pays a thread hop (2e) that no dispatcher running sync tools off-loop can avoid;")
                print("       2d is what the Toolbox adds on top of that hop.")
                print("       3 re-reads and re-verifies the artifact on every call (each call is a new dispatch).")
                missed = [row for row in rows if row.verdict == "MISS"]
                if missed and not args.profile:
                    print("       a target was missed: rerun with --profile for a cProfile breakdown")
                print(total_time(began))
                if args.profile:
                    print()
                    artifact = vault.list(SCOPE)[0].artifact_id
                    profile_all(bench, json.dumps({"doc": artifact}))
        finally:
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
