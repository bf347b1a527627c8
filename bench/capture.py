"""Capture-path benchmarks: refvault against raw file I/O (and Google ADK) on the same disk.

Run with ``make bench`` (``.venv/bin/python bench/capture.py``); ``--quick`` does a smaller run.

Every figure is printed beside a baseline measured in the same run, on the same
disk, with the same bytes. Repetitions interleave ours and the baseline (the
order alternates every repetition) so that drift hits both alike; the table
shows medians, and the ratio is the median of the per-repetition ratios (with
its min..max spread). Absolute numbers on a shared 2-core machine are noisy:
the ratios are the result.

Benchmarks:

1. 64 MiB ``put`` vs raw temp-write + fsync + rename (target >= 0.85x).
2. 64 MiB verified ``read_bytes`` vs raw read + SHA-256 of the same file (target >= 0.8x).
3. 1 MiB put+read pairs vs the raw ceiling (temp-write + fsync + rename + directory
   fsync, then read + SHA-256; target >= 0.8x), and vs ADK's ``FileArtifactService``
   save+load (target >= 1.1x ADK). ADK does not fsync anything, so it is not durable.
4. 16 threads x 4 KiB puts on one shared vault vs 16 threads each doing raw
   temp-write + fsync + rename + directory fsync (target >= 2x), plus single-threaded
   4 KiB puts/s for context.

Payloads are fresh random bytes for every put (refvault dedups identical bytes
within a tenant, which would otherwise make it look faster than it is). Reads
are warm-cache for both sides.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import platform
import secrets
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import Measure, blob_path, interleave, load_average, work_dir

from refvault import __version__
from refvault.model import Scope
from refvault.vault.commit import GroupCommit
from refvault.vault.vault import Vault

KiB = 1 << 10
MiB = 1 << 20
SCOPE = Scope("bench", "user", "session")


# -- the raw baselines ---------------------------------------------------------------------------------------------


class RawDir:
    """The baseline: plain files in one directory, written the durable way with nothing else on top."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def put(self, data: bytes, *, dir_fsync: bool) -> str:
        """Temp-write + fsync + rename (+ fsync of the directory); returns the final name."""
        temp = secrets.token_hex(16) + ".tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=self.fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        name = secrets.token_hex(32)
        os.replace(temp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        if dir_fsync:
            os.fsync(self.fd)
        return name

    def read_verified(self, name: str, digest: str) -> bytes:
        """Read the whole file and check its SHA-256."""
        return read_verified(self.root / name, digest)

    def clear(self) -> None:
        for entry in os.scandir(self.root):
            os.unlink(entry.path)

    def close(self) -> None:
        os.close(self.fd)


def read_verified(path: Path, digest: str) -> bytes:
    with open(path, "rb", buffering=0) as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != digest:
        raise AssertionError(f"raw read of {path} does not match its digest")
    return data


def payloads(count: int, size: int) -> list[bytes]:
    return [os.urandom(size) for _ in range(count)]


def clear_vault(vault: Vault) -> None:
    """Drop every artifact and blob (outside the timed sections) so stores stay small between repetitions."""
    for descriptor in vault.list(SCOPE):
        vault.delete(SCOPE, descriptor.artifact_id)
    vault.gc(grace=0)


def run_threads(workers: int, batches: Sequence[Sequence[bytes]], work: Callable[[bytes], object]) -> float:
    """Run ``work`` over each batch on its own thread, all released together; return elapsed seconds."""
    assert len(batches) == workers
    start = threading.Barrier(workers + 1)
    errors: list[BaseException] = []

    def run(batch: Sequence[bytes]) -> None:
        start.wait()
        try:
            for item in batch:
                work(item)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(batch,)) for batch in batches]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise errors[0]
    return elapsed


# -- measurement and reporting -------------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the table: our figure, its baseline, and how the ratio compares with the target."""

    number: str
    label: str
    unit: str
    ours_name: str
    ours: list[float]
    base_name: str
    base: list[float]
    target: float | None = None
    ratios: list[float] = field(init=False)

    def __post_init__(self) -> None:
        self.ratios = [o / b for o, b in zip(self.ours, self.base, strict=True)]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def verdict(self) -> str:
        if self.target is None:
            return "info"
        return "PASS" if self.ratio >= self.target else "MISS"


def fmt(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def print_table(rows: Sequence[Row]) -> None:
    head = ("#", "benchmark", "measured (median)", "baseline (median)", "ratio", "min..max", "target", "")
    body = [
        (
            row.number,
            row.label,
            f"{row.ours_name} {fmt(statistics.median(row.ours))} {row.unit}",
            f"{row.base_name} {fmt(statistics.median(row.base))} {row.unit}",
            f"{row.ratio:.2f}x",
            f"{min(row.ratios):.2f}..{max(row.ratios):.2f}",
            "-" if row.target is None else f">= {row.target:g}x",
            row.verdict,
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in (head, *body)) for i in range(len(head))]
    right = {2, 3, 4, 5}

    def line(cells: Sequence[str]) -> str:
        padded = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return "  ".join(padded).rstrip()

    print(line(head))
    print("  ".join("-" * w for w in widths))
    for cells in body:
        print(line(cells))


def filesystem_of(path: Path) -> str:
    """``device (fstype)`` of the mount holding ``path``, from /proc/mounts (Linux)."""
    best = ("?", "?", "")
    with contextlib.suppress(OSError), open("/proc/mounts") as mounts:
        for entry in mounts:
            device, mount, fstype = entry.split()[:3]
            if (str(path) + "/").startswith(mount.rstrip("/") + "/") and len(mount) >= len(best[2]):
                best = (device, fstype, mount)
    return f"{best[0]} ({best[1]}) mounted on {best[2] or '?'}"


def adk_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("google-adk")
    except Exception:
        return None


# -- the benchmarks ------------------------------------------------------------------------------------------------


@dataclass
class Config:
    reps: int
    big: int  # bytes for benchmarks 1 and 2
    pairs: int  # 1 MiB put+read pairs per repetition
    threads: int
    small_total: int  # 4 KiB puts per repetition, over all threads
    single_total: int  # single-threaded 4 KiB puts per repetition


def bench_big_put(cfg: Config, work: Path) -> Row:
    store = work / "store-big-put"
    raw = RawDir(work / "raw-big-put")
    current: dict[int, bytes] = {}

    def data_for(rep: int) -> bytes:  # the same bytes for both sides in a repetition, fresh every repetition
        if rep not in current:
            current.clear()
            current[rep] = os.urandom(cfg.big)
        return current[rep]

    with Vault.open(store) as vault:
        vault.put(SCOPE, os.urandom(cfg.big))  # warm-up: connections, directories, writer thread
        raw.put(os.urandom(cfg.big), dir_fsync=False)
        clear_vault(vault)
        raw.clear()

        def ours(rep: int) -> float:
            data = data_for(rep)
            began = time.perf_counter()
            vault.put(SCOPE, data)
            elapsed = time.perf_counter() - began
            clear_vault(vault)
            return len(data) / MiB / elapsed

        def base(rep: int) -> float:
            data = data_for(rep)
            began = time.perf_counter()
            raw.put(data, dir_fsync=False)
            elapsed = time.perf_counter() - began
            raw.clear()
            return len(data) / MiB / elapsed

        mine, theirs = interleave(cfg.reps, [ours, base])
    raw.close()
    size = cfg.big // MiB
    return Row("1", f"{size} MiB put", "MiB/s", "put", mine, "raw write+fsync+rename", theirs, 0.85)


def bench_big_read(cfg: Config, work: Path) -> Row:
    store = work / "store-big-read"
    with Vault.open(store) as vault:
        data = os.urandom(cfg.big)
        artifact = vault.put(SCOPE, data)
        path = blob_path(store, vault, SCOPE, artifact.artifact_id)
        digest = hashlib.sha256(data).hexdigest()
        assert path.stat().st_size == len(data)
        del data
        vault.read_bytes(SCOPE, artifact.artifact_id)  # warm the page cache for both sides
        read_verified(path, digest)

        def ours(_rep: int) -> float:
            began = time.perf_counter()
            got = vault.read_bytes(SCOPE, artifact.artifact_id)
            elapsed = time.perf_counter() - began
            return len(got) / MiB / elapsed

        def base(_rep: int) -> float:
            began = time.perf_counter()
            got = read_verified(path, digest)
            elapsed = time.perf_counter() - began
            return len(got) / MiB / elapsed

        mine, theirs = interleave(cfg.reps, [ours, base])
    size = cfg.big // MiB
    return Row("2", f"{size} MiB verified read", "MiB/s", "read_bytes", mine, "raw read+sha256", theirs, 0.8)


class AdkPairs:
    """Google ADK's FileArtifactService doing save+load, driven from one event loop."""

    def __init__(self, root: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from google.adk.artifacts.file_artifact_service import FileArtifactService
            from google.genai import types

        self._types = types
        self.service = FileArtifactService(root_dir=root)
        self.loop = asyncio.new_event_loop()

    async def _pairs(self, rep: int, items: Sequence[bytes]) -> None:
        for index, data in enumerate(items):
            filename = f"r{rep}-{index}.bin"
            part = self._types.Part.from_bytes(data=data, mime_type="application/octet-stream")
            await self.service.save_artifact(
                app_name="bench", user_id="user", session_id="session", filename=filename, artifact=part
            )
            loaded = await self.service.load_artifact(
                app_name="bench", user_id="user", session_id="session", filename=filename
            )
            if loaded is None or loaded.inline_data is None or len(loaded.inline_data.data or b"") != len(data):
                raise AssertionError("ADK returned the wrong artifact")

    def run(self, rep: int, items: Sequence[bytes]) -> None:
        self.loop.run_until_complete(self._pairs(rep, items))

    def close(self) -> None:
        self.loop.close()


def bench_pairs(cfg: Config, work: Path) -> list[Row]:
    store = work / "store-pairs"
    raw = RawDir(work / "raw-pairs")
    adk_root = work / "adk-pairs"
    try:
        adk: AdkPairs | None = AdkPairs(adk_root)
    except ImportError as exc:
        print(f"note: google-adk is not importable ({exc}); skipping the ADK comparison", file=sys.stderr)
        adk = None
    current: dict[int, list[bytes]] = {}

    def data_for(rep: int) -> list[bytes]:
        if rep not in current:
            current.clear()
            current[rep] = payloads(cfg.pairs, MiB)
        return current[rep]

    with Vault.open(store) as vault:
        for data in payloads(3, MiB):  # warm-up
            vault.read_bytes(SCOPE, vault.put(SCOPE, data).artifact_id)
            raw.read_verified(raw.put(data, dir_fsync=True), hashlib.sha256(data).hexdigest())
        if adk is not None:
            adk.run(-1, payloads(3, MiB))

        def ours(rep: int) -> float:
            items = data_for(rep)
            began = time.perf_counter()
            for data in items:
                vault.read_bytes(SCOPE, vault.put(SCOPE, data).artifact_id)
            return len(items) / (time.perf_counter() - began)

        def base(rep: int) -> float:
            items = data_for(rep)
            began = time.perf_counter()
            for data in items:
                name = raw.put(data, dir_fsync=True)
                raw.read_verified(name, hashlib.sha256(data).hexdigest())
            return len(items) / (time.perf_counter() - began)

        def theirs(rep: int) -> float:
            assert adk is not None
            items = data_for(rep)
            began = time.perf_counter()
            adk.run(rep, items)
            return len(items) / (time.perf_counter() - began)

        contenders: list[Measure] = [ours, base] if adk is None else [ours, base, theirs]
        samples = interleave(cfg.reps, contenders)
    raw.close()
    label = "1 MiB put+read pairs"
    rows = [Row("3", label, "pairs/s", "ours", samples[0], "raw ceiling", samples[1], 0.8)]
    if adk is not None:
        adk.close()
        rows.append(Row("3a", label, "pairs/s", "ours", samples[0], "ADK FileArtifactService", samples[2], 1.1))
        rows.append(Row("3b", label, "pairs/s", "raw ceiling", samples[1], "ADK FileArtifactService", samples[2]))
    return rows


def bench_small(cfg: Config, work: Path) -> list[Row]:
    store = work / "store-small"
    raw = RawDir(work / "raw-small")
    per_thread = cfg.small_total // cfg.threads

    with Vault.open(store) as vault, Vault.open(work / "store-unbatched") as unbatched:
        # The same vault with group commit switched off: one catalog transaction (one fsync) per put.
        unbatched._committer = GroupCommit(unbatched.catalog, max_batch=1)
        for data in payloads(50, 4 * KiB):  # warm-up
            vault.put(SCOPE, data)
            unbatched.put(SCOPE, data)
            raw.put(data, dir_fsync=True)

        def put(data: bytes) -> None:
            vault.put(SCOPE, data)

        def unbatched_put(data: bytes) -> None:
            unbatched.put(SCOPE, data)

        def raw_put(data: bytes) -> None:
            raw.put(data, dir_fsync=True)

        def threaded(work_fn: Callable[[bytes], object]) -> Measure:
            def measure(_rep: int) -> float:
                batches = [payloads(per_thread, 4 * KiB) for _ in range(cfg.threads)]
                return per_thread * cfg.threads / run_threads(cfg.threads, batches, work_fn)

            return measure

        def single(work_fn: Callable[[bytes], object]) -> Measure:
            def measure(_rep: int) -> float:
                return cfg.single_total / run_threads(1, [payloads(cfg.single_total, 4 * KiB)], work_fn)

            return measure

        many = interleave(cfg.reps, [threaded(put), threaded(raw_put), threaded(unbatched_put)])
        one = interleave(cfg.reps, [single(put), single(raw_put)])
    raw.close()
    n = cfg.threads
    return [
        Row("4", f"{n} threads x 4 KiB puts", "puts/s", "put", many[0], "raw, 1 fsync/put", many[1], 2.0),
        Row("4a", "1 thread x 4 KiB puts", "puts/s", "put", one[0], "raw, 1 fsync/put", one[1]),
        Row("4b", f"{n} threads x 4 KiB puts", "puts/s", "group commit", many[0], "1 transaction/put", many[2]),
    ]


# -- main ----------------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and smaller payloads")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per benchmark (default 7, quick 3)")
    parser.add_argument("--keep", action="store_true", help="keep the working directory under bench/.work/")
    parser.add_argument("--strict", action="store_true", help="exit with status 1 if a target is missed")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quick:
        cfg = Config(reps=3, big=32 * MiB, pairs=20, threads=16, small_total=800, single_total=200)
    else:
        cfg = Config(reps=7, big=64 * MiB, pairs=40, threads=16, small_total=2000, single_total=500)
    if args.reps is not None:
        cfg.reps = max(1, args.reps)

    with work_dir("run", args.keep) as work:
        command = "make bench" if not args.quick else ".venv/bin/python bench/capture.py --quick"
        print(f"refvault capture benchmark: `{command}` (runs .venv/bin/python bench/capture.py)")
        print(
            f"machine: {os.cpu_count()} cores, {platform.system()} {platform.release()} {platform.machine()}, "
            f"Python {platform.python_version()}, refvault {__version__}, google-adk {adk_version() or 'absent'}"
        )
        print(f"disk: {work} on {filesystem_of(work)}")
        print(
            f"method: {cfg.reps} interleaved repetitions per figure (order alternates); medians shown; "
            "ratio = median of per-repetition ratios (ours / baseline, throughput)"
        )
        print(f"load average at start: {load_average()}", flush=True)
        print(flush=True)
        rows: list[Row] = []
        began = time.perf_counter()
        for step in (bench_big_put, bench_big_read, bench_pairs, bench_small):
            print(f"running {step.__name__} ...", file=sys.stderr, flush=True)
            result: Any = step(cfg, work)
            rows.extend(result if isinstance(result, list) else [result])
        print_table(rows)
        print()
        print("notes: 1 raw = temp-write + fsync + rename (as the issue states; no directory fsync).")
        print("       3 raw ceiling = temp-write + fsync + rename + directory fsync, then read + SHA-256.")
        print("       3a/3b ADK FileArtifactService never fsyncs: its saves are not durable; ours and raw are.")
        print("       4 raw = each of the threads doing temp-write + fsync + rename + directory fsync per file.")
        print(f"total time {time.perf_counter() - began:.0f} s; load average at end: {load_average()}")
        print("       (the 16-thread benchmark loads the machine itself; a high load at start means other work")
        print("        shared the disk and cores, and the figures are less trustworthy: rerun on a quiet machine)")
    missed = [row for row in rows if row.verdict == "MISS"]
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
