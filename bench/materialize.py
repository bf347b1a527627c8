"""Materialisation benchmarks (issue 5): binary tool content into the vault, against raw durable writes.

Run with ``.venv/bin/python bench/materialize.py``; ``--quick`` does fewer repetitions.

Every figure is printed beside a baseline measured in the same run, on the same
disk, with the same bytes. Repetitions interleave ours and the baseline (the
order rotates every repetition, after one discarded warm-up round); the table
shows medians, and the ratio is the median of the per-repetition ratios (with
its min..max spread). Absolute times on a shared machine are noise: the ratios
are the result.

Benchmarks:

1. A tool result (wire-form dict) carrying 10 images of 1 MiB each (random bytes
   behind a PNG header): ``await materialize(...)`` on an embedded store (a fresh
   ``tool_call_id`` and fresh bytes every repetition, so nothing deduplicates;
   sealed, the default) vs the raw ceiling on the same bytes: base64-decode each
   part, write it to a new file, ``fsync`` each file, then ``fsync`` the directory
   once. Target: materialise <= 1.3x the raw time.
   1a/1b (info): the same parts stored by plain sequential ``vault.put`` calls (after the
   same strict decode), to separate what ``materialize`` adds from what a durable put costs.
2. Proxy round-trip overhead vs calling the upstream MCP server directly: to be
   added by the gateway (see the marked place below).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import os
import secrets
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import interleave, load_average, work_dir

from refvault import Scope, Vault, __version__
from refvault.content import Limits, materialize

MiB = 1 << 20
SCOPE = Scope("bench", "user", "session")
PNG_HEADER = b"\x89PNG\r\n\x1a\n"


# -- the table -----------------------------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the table: our latency, its baseline, and the slowdown ``ours / base`` against a target."""

    number: str
    label: str
    unit: str
    ours_name: str
    ours: list[float]
    base_name: str
    base: list[float]
    target: float | None = None  # the most ``ours / base`` may be
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
        return "PASS" if self.ratio <= self.target else "MISS"

    def cells(self) -> tuple[str, ...]:
        return (
            self.number,
            self.label,
            f"{self.ours_name} {fmt(statistics.median(self.ours))} {self.unit}",
            f"{self.base_name} {fmt(statistics.median(self.base))} {self.unit}",
            f"{self.ratio:.2f}x",
            f"{min(self.ratios):.2f}..{max(self.ratios):.2f}",
            "-" if self.target is None else f"<= {self.target:g}x",
            self.verdict,
        )


def fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def print_table(rows: Sequence[Row]) -> None:
    head = ("#", "benchmark", "measured (median)", "baseline (median)", "ratio", "min..max", "target", "")
    body = [row.cells() for row in rows]
    widths = [max(len(line[i]) for line in (head, *body)) for i in range(len(head))]
    right = {2, 3, 4, 5}

    def line(cells: Sequence[str]) -> str:
        padded = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return "  ".join(padded).rstrip()

    print(line(head))
    print("  ".join("-" * w for w in widths))
    for cells in body:
        print(line(cells))


# -- 1. materialise vs raw decode + durable write ------------------------------------------------------------------


def image_result(parts: int, size: int) -> tuple[dict[str, Any], list[str]]:
    """A wire-form tool result with ``parts`` PNG-headed images of ``size`` bytes each, and their base64."""
    encoded = [base64.b64encode(PNG_HEADER + os.urandom(size - len(PNG_HEADER))).decode("ascii") for _ in range(parts)]
    blocks = [{"type": "image", "data": data, "mimeType": "image/png"} for data in encoded]
    return {"content": [{"type": "text", "text": "here are the screenshots"}, *blocks], "isError": False}, encoded


class RawDir:
    """The baseline: decode each part and write it durably as a plain file, nothing else on top."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def write_parts(self, encoded: Sequence[str]) -> None:
        """base64-decode, write + fsync each file, then fsync the directory."""
        for data in encoded:
            raw = base64.b64decode(data, validate=True)
            fd = os.open(
                secrets.token_hex(16), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=self.fd
            )
            try:
                view = memoryview(raw)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
        os.fsync(self.fd)

    def clear(self) -> None:
        for entry in os.scandir(self.root):
            os.unlink(entry.path)

    def close(self) -> None:
        os.close(self.fd)


def clear_vault(vault: Vault) -> None:
    """Drop every artifact and blob (outside the timed sections) so the store stays small."""
    for descriptor in vault.list(SCOPE):
        vault.delete(SCOPE, descriptor.artifact_id)
    vault.gc(grace=0)


@dataclass
class Config:
    reps: int
    parts: int = 10
    size: int = MiB


def bench_materialize(cfg: Config, work: Path) -> list[Row]:
    raw = RawDir(work / "raw")
    loop = asyncio.new_event_loop()
    current: dict[int, tuple[dict[str, Any], list[str]]] = {}

    def data_for(rep: int) -> tuple[dict[str, Any], list[str]]:  # the same bytes for all sides, fresh every rep
        if rep not in current:
            current.clear()
            current[rep] = image_result(cfg.parts, cfg.size)
        return current[rep]

    with Vault.open(work / "store") as vault:

        def ours(rep: int) -> float:
            result, _ = data_for(rep)
            call = f"call-{rep}-{secrets.token_hex(8)}"
            began = time.perf_counter()
            projected = loop.run_until_complete(
                materialize(
                    vault, SCOPE, result, provenance="mcp:bench/screenshots", tool_call_id=call, limits=Limits()
                )
            )
            elapsed = time.perf_counter() - began
            if sum(block["type"] == "resource_link" for block in projected["content"]) != cfg.parts:
                raise AssertionError("materialize did not store every part")
            clear_vault(vault)  # also makes the next contender's identical bytes a fresh blob
            return elapsed * 1000

        def puts(rep: int) -> float:
            _, encoded = data_for(rep)
            began = time.perf_counter()
            for data in encoded:
                vault.put(SCOPE, binascii.a2b_base64(data, strict_mode=True), media_type="image/png")
            elapsed = time.perf_counter() - began
            clear_vault(vault)
            return elapsed * 1000

        def base(rep: int) -> float:
            _, encoded = data_for(rep)
            began = time.perf_counter()
            raw.write_parts(encoded)
            elapsed = time.perf_counter() - began
            raw.clear()
            return elapsed * 1000

        mine, floor, theirs = interleave(cfg.reps, [ours, puts, base], warmup=True)
    loop.close()
    raw.close()
    label = f"{cfg.parts} x {cfg.size // MiB} MiB images, one result"
    return [
        Row("1", label, "ms", "materialize", mine, "b64decode+write+fsync", theirs, target=1.3),
        Row("1a", label, "ms", "decode+sequential put", floor, "b64decode+write+fsync", theirs),
        Row("1b", label, "ms", "materialize", mine, "decode+sequential put", floor),
    ]


# -- 2. proxy round-trip overhead ----------------------------------------------------------------------------------
#
# >>> PLACE FOR ROW 2 (the gateway helper adds it; not implemented here) <<<
# "proxy round-trip overhead": tools/call through `refvault mcp proxy` vs calling the upstream MCP server
# directly, in the same run. Add a `bench_proxy_round_trip(cfg, work) -> Row` here and append it in STEPS.


STEPS: list[Callable[[Config, Path], list[Row]]] = [bench_materialize]  # row 2 (proxy round-trip) joins here


# -- main ----------------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per benchmark (default 9, quick 3)")
    parser.add_argument("--keep", action="store_true", help="keep the working directory under bench/.work/")
    parser.add_argument("--strict", action="store_true", help="exit with status 1 if a target is missed")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = Config(reps=3 if args.quick else 9)
    if args.reps is not None:
        cfg.reps = max(1, args.reps)
    command = " ".join([".venv/bin/python bench/materialize.py", *(sys.argv[1:] if argv is None else argv)])
    with work_dir("materialize", args.keep) as work:
        print(f"refvault materialise benchmark: `{command}`")
        print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, refvault {__version__}")
        print(f"disk: {work}")
        print(
            f"method: {cfg.reps} interleaved repetitions per figure (order rotates, one warm-up round discarded); "
            "medians shown; ratio = median of per-repetition ratios (ours / baseline, latency: lower is better)"
        )
        print(f"load average at start: {load_average()}", flush=True)
        print(flush=True)
        began = time.perf_counter()
        rows: list[Row] = []
        for step in STEPS:
            print(f"running {step.__name__} ...", file=sys.stderr, flush=True)
            rows.extend(step(cfg, work))
        print_table(rows)
        print()
        print("notes: 1 materialize = strict base64 preflight of every part, sniffing, one durable put per part")
        print("         (temp write + fsync + rename + directory fsync + catalog commit) and the projection;")
        print("         baseline = base64-decode + write + fsync of each file + one directory fsync, no catalog.")
        print("       1a the floor materialize builds on: strict decode + one vault.put per part, in content order")
        print("         (each put: temp write + fsync, catalog commit, rename + directory fsync); info only.")
        print("       1b what materialize adds to that floor (preflight, sniffing, projection, asyncio); info only.")
        print(f"total time {time.perf_counter() - began:.0f} s; load average at end: {load_average()}")
    missed = [row for row in rows if row.verdict == "MISS"]
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
