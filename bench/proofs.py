"""Merkle-proof benchmarks: what the root costs at capture, and what checking an excerpt costs a recipient.

Run with ``make bench`` (``.venv/bin/python bench/proofs.py``); ``--quick`` does a smaller run.

1. ``put`` of fresh random bytes (64 MiB; quick 16 MiB) with the Merkle root computed in the capture pass
   against the same ``put`` with the leaf hashing switched off (``refvault.vault.ingest.MERKLE = False``),
   interleaved in the same run (target >= 0.95x).
2. ``verify_excerpt`` of a 4 KiB excerpt of a 1 GiB artifact (quick: 64 MiB), captured for real on the
   repository's disk; its proof comes from ``Vault.read_proved``. The time per verification is reported
   against hashing the same 4 KiB with SHA-256 (information: the absolute target is < 1 ms).
3. ``read_proved`` of 4 KiB (the bytes and their proof) against ``read_range`` of the same 4 KiB (information).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from harness import (
    SCOPE,
    KiB,
    MiB,
    Row,
    command_line,
    drop,
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

from refvault import Vault, verify_excerpt
from refvault.vault import ingest

GiB = 1 << 30


def capture_rows(vault: Vault, size: int, reps: int) -> list[Row]:
    payload = os.urandom(size)

    def put(merkle: bool) -> float:
        data = payload[:-8] + os.urandom(8)  # fresh bytes each time: no dedup
        ingest.MERKLE = merkle
        try:
            seconds = timed(lambda: vault.put(SCOPE, data, media_type="application/octet-stream"))
        finally:
            ingest.MERKLE = True
        drop(vault)
        return size / MiB / seconds

    with_root, without = interleave(reps, [lambda _: put(True), lambda _: put(False)], warmup=True)
    label = f"put {size // MiB} MiB"
    return [Row("1", label, "MiB/s", "with root", with_root, "without", without, target=0.95)]


def write_big(vault: Vault, size: int) -> str:
    """A ``size``-byte artifact of pseudo-random bytes, streamed in (never whole in memory)."""
    seed = os.urandom(MiB)

    def pieces() -> object:
        for index in range(size // MiB):
            yield seed[index % 7 :] + seed[: index % 7]
        if size % MiB:
            yield seed[: size % MiB]

    return vault.put(SCOPE, pieces(), media_type="application/octet-stream").artifact_id


def excerpt_rows(vault: Vault, artifact_id: str, size: int, reps: int) -> list[Row]:
    root = vault.describe(SCOPE, artifact_id).retrieval["integrity"]["merkle_root"]
    rng = random.Random(7)
    offsets = [rng.randrange(0, size - 4 * KiB) for _ in range(max(reps, 1))]
    proved = [vault.read_proved(SCOPE, artifact_id, offset, 4 * KiB) for offset in offsets]
    proofs = [(p.data, p.offset, p.prove()) for p in proved]
    assert all(verify_excerpt(data, offset=o, proof=proof, root=root) for data, o, proof in proofs)
    loops = 200

    def verify(rep: int) -> float:
        data, offset, proof = proofs[rep % len(proofs)]
        began = time.perf_counter()
        for _ in range(loops):
            verify_excerpt(data, offset=offset, proof=proof, root=root)
        return (time.perf_counter() - began) * 1000 / loops

    def sha(rep: int) -> float:
        data = proofs[rep % len(proofs)][0]
        began = time.perf_counter()
        for _ in range(loops):
            hashlib.sha256(data).hexdigest()
        return (time.perf_counter() - began) * 1000 / loops

    def read_proved(rep: int) -> float:
        return timed_ms(lambda: vault.read_proved(SCOPE, artifact_id, offsets[rep % len(offsets)], 4 * KiB).prove())

    def read_range(rep: int) -> float:
        return timed_ms(lambda: vault.read_range(SCOPE, artifact_id, offsets[rep % len(offsets)], 4 * KiB))

    mine, base = interleave(reps, [verify, sha], warmup=True)
    proving, plain = interleave(reps, [read_proved, read_range], warmup=True)
    label = f"4 KiB of {size // MiB:,} MiB"
    return [
        Row("2", f"verify_excerpt, {label}", "ms", "verify_excerpt", mine, "SHA-256 4 KiB", base, kind="slowdown"),
        Row("3", f"read + proof, {label}", "ms", "read_proved", proving, "read_range", plain, kind="slowdown"),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser(__doc__, quick="16 MiB puts, a 64 MiB artifact", reps="timed repetitions (default 7)")
    args: argparse.Namespace = parser.parse_args(argv)
    reps = max(1, args.reps) if args.reps is not None else 5 if args.quick else 7
    put_size, big = (16 * MiB, 64 * MiB) if args.quick else (64 * MiB, GiB)
    began = time.perf_counter()
    print(f"refvault proofs benchmark: `{command_line('proofs.py', argv)}`")
    print(machine())
    print(f"load average at start: {load_average()}", flush=True)
    with work_dir("proofs", args.keep) as work:
        store: Path = work / "store"
        with Vault.open(store) as vault:
            print(f"timing {reps} interleaved capture repetitions ...", file=sys.stderr, flush=True)
            table = capture_rows(vault, put_size, reps)
            print(f"capturing a {big // MiB:,} MiB artifact ...", file=sys.stderr, flush=True)
            started = time.perf_counter()
            artifact_id = write_big(vault, big)
            built = time.perf_counter() - started
            table += excerpt_rows(vault, artifact_id, big, reps)
    print(f"method: {reps} interleaved repetitions after a discarded warm-up round; medians shown;")
    print("        1: ratio of throughputs (higher is better); 2, 3: ratio of latencies, ours / baseline")
    print(f"the {big // MiB:,} MiB artifact was captured in {built:.1f} s ({big / MiB / built:,.0f} MiB/s)")
    print()
    print_table(table)
    print()
    verify_ms = sorted(table[1].ours)[len(table[1].ours) // 2]
    verdict = "meets" if verify_ms < 1 else "MISSES"
    print(f"result: capture with the root runs at {table[0].ratio:.2f}x capture without it;")
    print(f"        verify_excerpt of 4 KiB takes {verify_ms:.3f} ms ({verdict} the < 1 ms target)")
    print(total_time(began))
    failed = missed(table) or verify_ms >= 1
    return 1 if args.strict and failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
