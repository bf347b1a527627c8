"""Command-line wall times: the one-artifact commands, ``--help``, the demo (kernels cached and not) and the eval.

Run with ``.venv/bin/python bench/cli.py``; ``--quick`` runs fewer repetitions. Every time is the wall time of a
fresh ``refvault`` process (``.venv/bin/refvault``, as a user runs it), start to exit, measured beside the
baseline of the same run: an interpreter that starts and exits (``python -c pass``). Repetitions interleave the
commands and the baseline (the order rotates every repetition, after one discarded warm-up round); the table
shows medians, the ratio is the median of the per-repetition ratios (command / baseline), with its min..max.

1. The commands that touch one artifact, on a small store in a scratch directory under ``bench/.work/`` (a
   200-line text file and a 500-record JSON Lines file, put once beforehand): ``put`` of a small file (a new
   one each time), ``show``, ``cat``, ``read --lines 0 20``, ``query --where ... --limit 3``, ``ls``,
   ``verify``; and ``refvault --help``. Target: each <= 0.3 s on an idle machine.
2. ``refvault demo``, kernels cached: the machine's own numba cache, warmed first
   (``python -m refvault.guard.warm``, untimed).
3. ``refvault demo``, kernels not cached: ``NUMBA_CACHE_DIR`` set to a fresh empty directory under the work
   directory for each repetition (the machine's own cache is neither read nor touched), so the demo compiles
   the leak guard's kernels first, as on a fresh machine; and ``python -m refvault.guard.warm`` alone on an
   empty cache (what ``make demo``'s install step adds, once).
4. ``refvault eval`` (default seed and trials), kernels cached.

These are the times the documentation may state. On a busy machine every figure grows; the load average is
printed at the start and the end.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import (
    Measure,
    command_line,
    interleave,
    load_average,
    machine,
    make_parser,
    print_columns,
    total_time,
    work_dir,
)

BIN = Path(sys.executable).parent
REFVAULT = str(BIN / "refvault")
TARGET_S = 0.3
TEXT_LINES = 200
RECORDS = 500


@dataclass
class Timing:
    """One row: a command's wall times and the baseline's, from the same repetitions."""

    number: str
    label: str
    ours: list[float]
    base: list[float]
    target: float | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.ours)

    @property
    def ratios(self) -> list[float]:
        return [o / b for o, b in zip(self.ours, self.base, strict=True)]

    @property
    def verdict(self) -> str:
        if self.target is None:
            return "info"
        return "PASS" if self.median <= self.target else "MISS"

    def cells(self) -> tuple[str, ...]:
        ratios = self.ratios
        return (
            self.number,
            self.label,
            seconds(self.median),
            f"{seconds(min(self.ours))}..{seconds(max(self.ours))}",
            seconds(statistics.median(self.base)),
            f"{statistics.median(ratios):.1f}x",
            "-" if self.target is None else f"<= {self.target:g} s",
            self.verdict,
        )


def seconds(value: float) -> str:
    return f"{value:.3f} s" if value < 1 else f"{value:.1f} s"


def run(args: Sequence[str], env: dict[str, str] | None = None) -> float:
    """Wall seconds of one process, start to exit; it must exit 0."""
    began = time.perf_counter()
    done = subprocess.run(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - began
    if done.returncode:
        raise SystemExit(f"{' '.join(args)} exited {done.returncode}: {done.stderr.decode(errors='replace')[-2000:]}")
    return elapsed


def baseline(_: int) -> float:
    return run([sys.executable, "-c", "pass"])


def put_json(store: Path, path: Path, *extra: str) -> str:
    """Put ``path`` into ``store``; return the new artifact's id."""
    out = subprocess.run(
        [REFVAULT, "--store", str(store), "put", str(path), "--json", *extra], check=True, capture_output=True
    ).stdout
    return str(json.loads(out)["artifact_id"])


def small_store(work: Path) -> tuple[Path, str, str]:
    """A store with one text artifact and one JSON Lines artifact: (store, text id, records id)."""
    store = work / "store"
    text = work / "notes.txt"
    text.write_text(
        "".join(f"line {i}: the deploy of build {i * 7} finished in {i % 13} s\n" for i in range(TEXT_LINES))
    )
    records = work / "events.jsonl"
    levels = ("info", "warning", "error", "critical")
    records.write_text(
        "".join(
            json.dumps({"id": i, "severity": levels[i % 4], "region": f"r{i % 3}", "latency_ms": (i * 37) % 1000})
            + "\n"
            for i in range(RECORDS)
        )
    )
    text_id = put_json(store, text, "--media-type", "text/plain; charset=utf-8")
    records_id = put_json(store, records, "--media-type", "application/x-ndjson")
    return store, text_id, records_id


def one_artifact_rows(work: Path, reps: int) -> list[Timing]:
    store, text_id, records_id = small_store(work)
    at = ["--store", str(store)]
    where = json.dumps({"field": "severity", "op": "eq", "value": "critical"})
    commands: list[tuple[str, list[str]]] = [
        ("put (a 2 KB file)", []),  # filled in per repetition: a new file each time
        ("show", [REFVAULT, *at, "show", text_id]),
        ("cat", [REFVAULT, *at, "cat", text_id]),
        ("read --lines 0 20", [REFVAULT, *at, "read", text_id, "--lines", "0", "20"]),
        ("query --where ... --limit 3", [REFVAULT, *at, "query", records_id, "--where", where, "--limit", "3"]),
        ("ls", [REFVAULT, *at, "ls"]),
        ("verify", [REFVAULT, *at, "verify"]),
        ("--help", [REFVAULT, "--help"]),
    ]
    puts = work / "puts"
    puts.mkdir()

    def put(rep: int) -> float:
        path = puts / f"small-{rep + 1}.txt"
        path.write_text(f"repetition {rep}\n" + "a small tool output line\n" * 80)
        return run([REFVAULT, *at, "put", str(path)])

    def command(args: list[str]) -> Measure:
        return lambda _: run(args)

    contenders = [put, *(command(args) for _, args in commands[1:]), baseline]
    samples = interleave(reps, contenders, warmup=True)
    base = samples[-1]
    return [Timing(f"1.{i + 1}", label, samples[i], base, TARGET_S) for i, (label, _) in enumerate(commands)]


def demo_and_eval_rows(work: Path, reps: int, cold_reps: int, eval_reps: int) -> list[Timing]:
    demo = [REFVAULT, "demo"]
    env = dict(os.environ)  # the machine's own cache: $NUMBA_CACHE_DIR if set, else numba's default
    subprocess.run([sys.executable, "-m", "refvault.guard.warm"], env=env, check=True, stdout=subprocess.DEVNULL)
    warm_demo, warm_base = interleave(reps, [lambda _: run(demo, env), baseline])
    rows = [Timing("2", "demo, kernels cached", warm_demo, warm_base)]

    caches = work / "numba-caches"
    caches.mkdir()

    def fresh_cache(rep: int, kind: str) -> dict[str, str]:
        cache = caches / f"{kind}-{rep}"
        cache.mkdir()
        return {**env, "NUMBA_CACHE_DIR": str(cache)}

    def cold_demo(rep: int) -> float:
        return run(demo, fresh_cache(rep, "demo"))

    def cold_warm(rep: int) -> float:
        return run([sys.executable, "-m", "refvault.guard.warm"], fresh_cache(rep, "warm"))

    cold, install, cold_base = interleave(cold_reps, [cold_demo, cold_warm, baseline])
    rows.append(Timing("3", "demo, kernels not cached (compiles first)", cold, cold_base))
    rows.append(Timing("3a", "python -m refvault.guard.warm, empty cache", install, cold_base))

    evals, eval_base = interleave(eval_reps, [lambda _: run([REFVAULT, "eval"], env), baseline])
    rows.append(Timing("4", "eval (default seed, 2 trials)", evals, eval_base))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser(__doc__, quick="fewer repetitions (3 per command, 1 demo, 1 eval)", reps="repetitions")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    reps = args.reps or (3 if args.quick else 10)
    slow_reps = 1 if args.quick else 3
    print(f"refvault command-line benchmark: `{command_line('cli.py', argv)}`")
    print(machine())
    print(f"load average at start: {load_average()}", flush=True)
    with work_dir("cli", args.keep) as work:
        print("timing the one-artifact commands ...", file=sys.stderr, flush=True)
        rows = one_artifact_rows(work, reps)
        print("timing the demo and the eval ...", file=sys.stderr, flush=True)
        rows += demo_and_eval_rows(work, slow_reps, slow_reps, slow_reps)
    print()
    head = ("#", "command", "wall (median)", "min..max", "python -c pass", "ratio", "target", "")
    print_columns(head, [row.cells() for row in rows], right={2, 3, 4, 5})
    print()
    print(
        f"notes: {reps} repetitions of 1 (after a discarded warm-up round), {slow_reps} of 2-4; each a fresh process."
    )
    print("       1 on a store holding 2 artifacts (plus the puts so far); 3 uses an empty NUMBA_CACHE_DIR per run.")
    missed = [row for row in rows if row.verdict == "MISS"]
    print(
        f"targets: one-artifact commands and --help <= {TARGET_S:g} s: "
        + ("all met" if not missed else "MISSED " + ", ".join(row.label for row in missed))
    )
    print(total_time(began))
    return 1 if (missed and args.strict) else 0


if __name__ == "__main__":
    sys.exit(main())
