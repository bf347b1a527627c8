"""Budget benchmark: what run budget accounting costs a 4 KiB verified read on the embedded store.

Run with ``.venv/bin/python bench/budgets.py`` (``--quick``: fewer reads per repetition).

1. ``vault.read_bytes`` of a 4 KiB text artifact in a run with a budget on every dimension (large enough never
   to run out: reservations from the catalog are leases, so reads are charged in memory) against, as the
   baseline, the same read in a run without a budget (one cached look). The two reads alternate one by one
   and each is timed apart; microseconds per read, the mean of a batch per repetition, after a warm-up round;
   ratio = ours / baseline (target: at most 1.05, accounting costs at most 5% of the read).
2. The noise floor: the read without a budget against itself (another run without one), same method.
3. For context: the budgeted read with its usage read back every 100 reads (``vault.usage`` returns the
   leases to the catalog, so the next read reserves again): what an agent loop that watches its usage pays.
4. The accounting alone, timed in the same run: the charge a budgeted read makes (``Ledger.charge_read``, 4 KiB)
   and the look an unbudgeted one makes, in microseconds, as a share of the read without a budget.
"""

from __future__ import annotations

import argparse
import statistics
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
FREE2 = Scope("bench", "user", "free-too")
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
        free2 = vault.put(FREE2, text, media_type="text/plain").artifact_id
        vault.set_budget(BUDGETED, BUDGET)

        def reads(scope: Scope, artifact_id: str, watch: bool = False) -> float:
            started = time.perf_counter()
            for i in range(batch):
                vault.read_bytes(scope, artifact_id)
                if watch and i % 100 == 99:
                    vault.usage(scope)
            return (time.perf_counter() - started) / batch * 1e6

        print(f"timing {reps} interleaved repetitions of {batch:,} reads ...", file=sys.stderr, flush=True)

        def paired(first: tuple[Scope, str], second: tuple[Scope, str]) -> tuple[list[float], list[float]]:
            """Reads of ``first`` and ``second`` alternated one by one (the order flipped every pair), each
            timed apart: load that drifts during a repetition falls on both alike. Mean us per read."""
            ones: list[float] = []
            twos: list[float] = []
            clock = time.perf_counter
            for rep in range(-1, reps):
                a = b = 0.0
                for i in range(batch):
                    order = (first, second) if (i + rep) % 2 else (second, first)
                    for scope, artifact_id in order:
                        began = clock()
                        vault.read_bytes(scope, artifact_id)
                        took = clock() - began
                        if scope is first[0]:
                            a += took
                        else:
                            b += took
                if rep >= 0:
                    ones.append(a / batch * 1e6)
                    twos.append(b / batch * 1e6)
            return ones, twos

        with_budget, without = paired((BUDGETED, budgeted), (FREE, free))
        again, without_again = paired((FREE2, free2), (FREE, free))
        (watched,) = interleave(reps, [lambda _: reads(BUDGETED, budgeted, True)], warmup=True)
        ledger = vault._budget_ledger()
        n = 20 * batch

        def charges(scope: Scope) -> float:
            started = time.perf_counter()
            for _ in range(n):
                ledger.charge_read(scope, text)
            return (time.perf_counter() - started) / n * 1e6

        charged, looked = (
            statistics.median(x) for x in interleave(reps, [lambda _: charges(BUDGETED), lambda _: charges(FREE)])
        )
        spent = vault.usage(BUDGETED).spent
    label = "4 KiB verified read"
    table = [
        Row("1", label, "us", "with a budget", with_budget, "no budget", without, kind="slowdown", target=1.05),
        Row("2", label, "us", "no budget (again)", again, "no budget", without_again, kind="slowdown"),
        Row("3", label, "us", "budget + usage/100", watched, "no budget", without, kind="slowdown"),
    ]
    print(f"method: {reps} repetitions of {batch:,} reads each after a discarded warm-up round; rows 1-2 alternate")
    print(
        "        the two reads one by one; ratio = median of per-repetition ratios of mean latencies, ours / baseline"
    )
    print()
    print_table(table)
    print()
    read_us = statistics.median(without)
    print(f"result: budget accounting makes a 4 KiB verified read {table[0].ratio:.3f}x as long")
    print(f"        the charge alone: {charged:.2f} us with a budget ({charged / read_us:.1%} of the read),")
    print(f"        {looked:.2f} us without one ({looked / read_us:.1%})")
    print(f"        (the run was charged {spent['read_calls']:,} read calls and {spent['scanned_bytes']:,} bytes)")
    print(total_time(began))
    return 1 if args.strict and missed(table) else 0


if __name__ == "__main__":
    sys.exit(main())
