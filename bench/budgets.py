"""Budget benchmark: what run budget accounting costs a 4 KiB verified read on the embedded store.

Run with ``.venv/bin/python bench/budgets.py`` (``--quick``: fewer reads per repetition).

1. ``vault.read_bytes`` of a 4 KiB text artifact in a run with a budget on every dimension (large enough never
   to run out: reservations from the catalog are leases, so reads are charged in memory) against, as the
   baseline, the same read in a run without a budget (one cached look). Microseconds per read, the mean of a
   batch of reads per repetition, interleaved repetitions after a discarded warm-up round;
   ratio = ours / baseline (target: at most 1.05, accounting costs at most 5% of the read).
2. For context: the budgeted read with its usage read back every 100 reads (``vault.usage`` returns the
   leases to the catalog, so the next read reserves again): what an agent loop that watches its usage pays.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from harness import (
    KiB,
    Row,
    command_line,
    interleave,
    load_average,
    machine,
    make_parser,
    missed,
    print_table,
    total_time,
    work_dir,
)

from refvault import Budget, Scope, Vault

FREE = Scope("bench", "user", "free")
BUDGETED = Scope("bench", "user", "budgeted")
BIG = 1 << 60
BUDGET = Budget(
    acquired_bytes=BIG,
    retained_bytes=BIG,
    read_calls=BIG,
    scanned_records=BIG,
    scanned_bytes=BIG,
    returned_tokens=BIG,
    recomputations=BIG,
    seconds=1e9,
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser(__doc__, quick="500 reads a repetition", reps="timed repetitions (default 15, quick 5)")
    args: argparse.Namespace = parser.parse_args(argv)
    batch = 500 if args.quick else 4000
    reps = max(1, args.reps) if args.reps is not None else 5 if args.quick else 15
    began = time.perf_counter()
    print(f"refvault budget benchmark: `{command_line('budgets.py', argv)}`")
    print(machine())
    print(f"load average at start: {load_average()}", flush=True)
    text = (b"a line of text for the budget benchmark\n" * 200)[: 4 * KiB]
    with work_dir("budgets", args.keep) as work, Vault.open(work / "store") as vault:
        free = vault.put(FREE, text, media_type="text/plain").artifact_id
        budgeted = vault.put(BUDGETED, text, media_type="text/plain").artifact_id
        vault.set_budget(BUDGETED, BUDGET)

        def reads(scope: Scope, artifact_id: str, watch: bool = False) -> float:
            started = time.perf_counter()
            for i in range(batch):
                vault.read_bytes(scope, artifact_id)
                if watch and i % 100 == 99:
                    vault.usage(scope)
            return (time.perf_counter() - started) / batch * 1e6

        print(f"timing {reps} interleaved repetitions of {batch:,} reads ...", file=sys.stderr, flush=True)
        with_budget, without, watched = interleave(
            reps,
            [
                lambda _: reads(BUDGETED, budgeted),
                lambda _: reads(FREE, free),
                lambda _: reads(BUDGETED, budgeted, True),
            ],
            warmup=True,
        )
        spent = vault.usage(BUDGETED).spent
    label = "4 KiB verified read"
    table = [
        Row("1", label, "us", "with a budget", with_budget, "no budget", without, kind="slowdown", target=1.05),
        Row("2", label, "us", "budget + usage/100", watched, "no budget", without, kind="slowdown"),
    ]
    print(f"method: {reps} interleaved repetitions of {batch:,} reads after a discarded warm-up round; medians;")
    print("        ratio = median of per-repetition ratios of mean latencies, ours / baseline (lower is better)")
    print()
    print_table(table)
    print()
    print(f"result: budget accounting makes a 4 KiB verified read {table[0].ratio:.3f}x as long")
    print(f"        (the run was charged {spent['read_calls']:,} read calls and {spent['scanned_bytes']:,} bytes)")
    print(total_time(began))
    return 1 if args.strict and missed(table) else 0


if __name__ == "__main__":
    sys.exit(main())
