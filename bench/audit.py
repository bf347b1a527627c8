"""Audit benchmarks: what the persistent audit log and the disclosure ledger cost a read, and how fast a chain verifies.

Run with ``.venv/bin/python bench/audit.py`` (also in ``make bench``); ``--quick`` does a smaller run.

1. Verified 4 KiB ``read_bytes`` on an embedded store with a ten-rule policy, the audit log and the ledger
   on (every read appends an entry with the SHA-256 of the bytes returned, batched by the background
   appender; the time includes flushing them) against the same reads on a store with no policy and
   ``audit=False``, same run, same disk, interleaved repetitions. Target: at most 10 % slower
   (ratio of medians <= 1.10).
2. ``verify_audit`` of one tenant's chain of 100,000 entries in the SQLite catalog (rows streamed in seq
   order, every hash recomputed). Target: >= 100,000 entries/s.
"""

from __future__ import annotations

import os
import secrets
import statistics
import sys
import time
from collections.abc import Sequence

from harness import SCOPE, KiB, command_line, interleave, machine, make_parser, total_time, work_dir

from refvault import Vault
from refvault.catalog.audit_log import AuditEntry
from refvault.policy import Policy, Rule

READ_TARGET = 1.10
VERIFY_TARGET = 100_000


def ten_rules() -> Policy:
    """Ten rules that a plain artifact read by its owner matches none of (so every rule is checked, then allow)."""
    rules = [Rule(id=f"deny-secret-{n}", labels=frozenset({f"secret{n}"}), action="deny") for n in range(5)]
    rules += [Rule(id=f"deny-model-{n}", recipients=(f"model:blocked{n}*",), action="deny") for n in range(5)]
    return Policy(rules=tuple(rules), version="bench")


def reads(vault: Vault, ids: Sequence[str], count: int) -> float:
    """Seconds for ``count`` verified 4 KiB reads (and, with the audit on, storing their entries)."""
    began = time.perf_counter()
    for n in range(count):
        vault.read_bytes(SCOPE, ids[n % len(ids)])
    vault.flush_audit()
    return time.perf_counter() - began


def bench_reads(root: str, count: int, reps: int) -> dict[str, float]:
    """Reads/s of four stores, interleaved: none, policy only, audit only, policy + audit (the target's pair)."""
    stores: dict[str, tuple[Vault, list[str]]] = {}
    for name, audit, policy in [
        ("none", False, False),
        ("policy", False, True),
        ("audit", True, False),
        ("both", True, True),
    ]:
        vault = Vault.open(os.path.join(root, name), audit=audit)
        if policy:
            vault.set_policy(SCOPE.tenant, ten_rules())
        stores[name] = (vault, [vault.put(SCOPE, secrets.token_bytes(4 * KiB)).artifact_id for _ in range(64)])
    try:
        names = list(stores)
        samples = interleave(reps, [lambda _, name=name: reads(*stores[name], count) for name in names], warmup=True)
        assert stores["both"][0].verify_audit(SCOPE.tenant).ok
    finally:
        for vault, _ in stores.values():
            vault.close()
    return {name: count / statistics.median(times) for name, times in zip(names, samples, strict=True)}


def bench_verify(root: str, entries: int) -> float:
    with Vault.open(os.path.join(root, "chain")) as vault:
        batch = 5000
        for start in range(0, entries, batch):
            vault.catalog.append_audit(
                [
                    AuditEntry(
                        seq=0,
                        at_us=1_700_000_000_000_000 + n,
                        tenant="bench",
                        user="user",
                        session="session",
                        action="read",
                        outcome="ok",
                        artifact_id="art_" + "a" * 26,
                        purpose="default",
                        recipient="user",
                        selection=f"bytes 0-{n}",
                        bytes=4096,
                        excerpt_hash=f"{n:064x}",
                        content_hash="sha256:" + "b" * 64,
                    )
                    for n in range(start, min(entries, start + batch))
                ]
            )
        began = time.perf_counter()
        report = vault.verify_audit("bench")
        elapsed = time.perf_counter() - began
    assert report.ok, report.detail
    assert report.entries == entries
    return entries / elapsed


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser(__doc__, quick="fewer reads and entries", reps="repetitions of the read comparison")
    args = parser.parse_args(argv)
    count = 2000 if args.quick else 5000
    entries = 100_000
    reps = max(1, args.reps) if args.reps is not None else 3 if args.quick else 7
    began = time.perf_counter()
    print(command_line("audit.py", argv))
    print(machine())
    with work_dir("audit", args.keep) as root:
        rates = bench_reads(str(root), count, reps)
        rate = bench_verify(str(root), entries)
    ratio = rates["none"] / rates["both"]
    read_ok = ratio <= READ_TARGET
    verify_ok = rate >= VERIFY_TARGET
    print("verified 4 KiB reads/s (medians of interleaved repetitions):")
    for name, label in [
        ("none", "no policy, audit=False"),
        ("policy", "ten-rule policy only"),
        ("audit", "audit + ledger only"),
        ("both", "ten-rule policy + audit + ledger"),
    ]:
        print(f"  {label:36} {rates[name]:>9,.0f}/s  time x{rates['none'] / rates[name]:.3f}")
    print(
        f"  policy + audit + ledger vs none: time ratio {ratio:.3f} (target <= {READ_TARGET:.2f}): "
        f"{'ok' if read_ok else 'MISSED'}"
    )
    print(f"audit verify, {entries:,} entries (SQLite): {rate:,.0f} entries/s")
    print(f"  target >= {VERIFY_TARGET:,}/s: {'ok' if verify_ok else 'MISSED'}")
    print(total_time(began))
    return 1 if args.strict and not (read_ok and verify_ok) else 0


if __name__ == "__main__":
    sys.exit(main())
