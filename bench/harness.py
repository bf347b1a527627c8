"""What the benchmarks share: interleaved repetitions, a scratch directory, the run's header and footer,
timing, the raw-I/O baselines, and the table of figures beside their baselines.

Absolute times on shared machines are noise; each benchmark measures its
figure and its baseline in the same run, interleaved, and reports ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import platform
import secrets
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Literal

from refvault import Scope, Vault, __version__
from refvault.ids import namespace_of

WORK_ROOT = Path(__file__).resolve().parent / ".work"
KiB = 1 << 10
MiB = 1 << 20
SCOPE = Scope("bench", "user", "session")

# A throughput or latency measurement for one repetition (its index is passed in).
Measure = Callable[[int], float]


# -- running ---------------------------------------------------------------------------------------------------------


def interleave(reps: int, contenders: Sequence[Measure], *, warmup: bool = False) -> list[list[float]]:
    """Call each contender once per repetition, rotating the order; return each contender's samples.

    With ``warmup``, a first round (repetition -1) runs and its samples are discarded.
    """
    samples: list[list[float]] = [[] for _ in contenders]
    order = list(range(len(contenders)))
    for rep in range(-1 if warmup else 0, reps):
        shift = rep % len(order)
        for index in order[shift:] + order[:shift]:
            value = contenders[index](rep)
            if rep >= 0:
                samples[index].append(value)
    return samples


def timed(call: Callable[[], object]) -> float:
    """Seconds one call of ``call`` takes."""
    began = time.perf_counter()
    call()
    return time.perf_counter() - began


def timed_ms(call: Callable[[], object]) -> float:
    """Milliseconds one call of ``call`` takes."""
    return timed(call) * 1000


@contextlib.contextmanager
def work_dir(prefix: str, keep: bool) -> Iterator[Path]:
    """A fresh directory under bench/.work/ (same disk as the repository), removed unless ``keep``."""
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    path = WORK_ROOT / f"{prefix}-{os.getpid()}-{secrets.token_hex(4)}"
    path.mkdir()
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


def make_parser(doc: str | None, *, quick: str, reps: str) -> argparse.ArgumentParser:
    """The options every benchmark takes: ``--quick``, ``--reps``, ``--keep`` and ``--strict``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--reps", type=int, default=None, help=reps)
    parser.add_argument("--keep", action="store_true", help="keep the working directory under bench/.work/")
    parser.add_argument("--strict", action="store_true", help="exit with status 1 if a target is missed")
    return parser


def command_line(script: str, argv: Sequence[str] | None) -> str:
    """The command that ran this benchmark, as one would type it from the repository root."""
    args = list(sys.argv[1:] if argv is None else argv)
    return " ".join([f".venv/bin/python bench/{script}", *args])


# -- the machine -----------------------------------------------------------------------------------------------------


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def machine(*extra: str) -> str:
    """``machine: cores, OS, Python, refvault`` (and ``extra`` items), the second line of every report."""
    items = [
        f"{os.cpu_count()} cores",
        f"{platform.system()} {platform.release()} {platform.machine()}",
        f"Python {platform.python_version()}",
        f"refvault {__version__}",
        *extra,
    ]
    return "machine: " + ", ".join(items)


def total_time(began: float) -> str:
    """The closing line: wall time since ``began`` (a ``perf_counter`` reading) and the load average."""
    return f"total time {time.perf_counter() - began:.0f} s; load average at end: {load_average()}"


# -- raw baselines and store housekeeping ----------------------------------------------------------------------------


def fsync_write(path: str | Path, data: bytes, *, dir_fd: int | None = None) -> None:
    """Write ``data`` to a new file at ``path`` (relative to ``dir_fd`` if given) and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def read_verified(path: Path, digest: str) -> bytes:
    """Read a whole file and check its SHA-256 (hex) against ``digest``."""
    with open(path, "rb", buffering=0) as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != digest:
        raise AssertionError(f"raw read of {path} does not match its digest")
    return data


def blob_path(store: Path, vault: Vault, scope: Scope, artifact_id: str) -> Path:
    """Where the filesystem blob store keeps an artifact's bytes."""
    digest = vault.describe(scope, artifact_id).content_hash.removeprefix("sha256:")
    return store / "blobs" / namespace_of(scope.tenant) / digest[:2] / digest


def drop(vault: Vault, scope: Scope = SCOPE) -> None:
    """Delete every artifact of ``scope`` and collect the blobs (outside the timed sections)."""
    for descriptor in vault.list(scope):
        vault.delete(scope, descriptor.artifact_id)
    vault.gc(grace=0)


# -- reporting -------------------------------------------------------------------------------------------------------

# How a row's ratio is taken and compared with its target:
#   throughput  ours / base (rates), higher is better, PASS when ratio >= target;
#   speedup     base / ours (latencies), higher is better, PASS when ratio >= target;
#   slowdown    ours / base (latencies), lower is better, PASS when ratio <= target.
Kind = Literal["throughput", "speedup", "slowdown"]


@dataclass
class Row:
    """One line of the table: our figure, its baseline, and how the ratio compares with the target.

    The ratio is the median of the per-repetition ratios (``kind`` says which way round).
    """

    number: str
    label: str
    unit: str
    ours_name: str
    ours: list[float]
    base_name: str
    base: list[float]
    _: KW_ONLY
    kind: Kind = "throughput"
    target: float | None = None
    ratios: list[float] = field(init=False)

    def __post_init__(self) -> None:
        pairs = zip(self.ours, self.base, strict=True)
        self.ratios = [b / o if self.kind == "speedup" else o / b for o, b in pairs]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def verdict(self) -> str:
        if self.target is None:
            return "info"
        ok = self.ratio <= self.target if self.kind == "slowdown" else self.ratio >= self.target
        return "PASS" if ok else "MISS"

    @property
    def target_text(self) -> str:
        if self.target is None:
            return "-"
        return f"<= {self.target:g}x" if self.kind == "slowdown" else f">= {self.target:g}x"

    def cells(self) -> tuple[str, ...]:
        return (
            self.number,
            self.label,
            f"{self.ours_name} {fmt(statistics.median(self.ours))} {self.unit}",
            f"{self.base_name} {fmt(statistics.median(self.base))} {self.unit}",
            f"{self.ratio:.2f}x",
            f"{min(self.ratios):.2f}..{max(self.ratios):.2f}",
            self.target_text,
            self.verdict,
        )


def missed(rows: Sequence[Row]) -> list[Row]:
    return [row for row in rows if row.verdict == "MISS"]


def fmt(value: float) -> str:
    """Three significant figures or so: ``1,234``, ``56.7``, ``8.90`` (``-`` kept for differences)."""
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def print_columns(head: Sequence[str], body: Sequence[Sequence[str]], right: set[int]) -> None:
    """Print a header, a rule and the rows, columns two spaces apart; the columns in ``right`` align right."""
    widths = [max(len(line[i]) for line in (head, *body)) for i in range(len(head))]

    def line(cells: Sequence[str]) -> str:
        padded = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return "  ".join(padded).rstrip()

    print(line(head))
    print("  ".join("-" * w for w in widths))
    for cells in body:
        print(line(cells))


def print_table(rows: Sequence[Row]) -> None:
    head = ("#", "benchmark", "measured (median)", "baseline (median)", "ratio", "min..max", "target", "")
    print_columns(head, [row.cells() for row in rows], right={2, 3, 4, 5})
