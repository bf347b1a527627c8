"""Migration benchmark: ``migrate_store`` (embedded -> embedded) MB/s beside a plain copy of the same bytes.

Run with ``.venv/bin/python bench/migrate.py`` (also in ``make bench``); ``--quick`` moves fewer bytes.

The source holds ``count`` artifacts of 1 MiB (random bytes, so nothing dedupes). ``migrate_store`` streams each
blob from the source, hashes it, writes and seals it at the destination, publishes its manifest (re-MAC'd with the
destination's key) in batches, then copies the audit chain. The plain copy copies the same blob files with
``shutil.copyfile`` and fsyncs each, with no hashing and no catalog: the floor of what any move costs on this disk.
Interleaved repetitions, fresh destinations each time; medians. No target: the ratio says what verification and
the catalog cost on top of the bytes.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from harness import SCOPE, MiB, command_line, machine, make_parser, total_time, work_dir

from refvault import Vault
from refvault.vault.transfer import migrate_store


def fill(root: Path, count: int) -> int:
    with Vault.open(root / "source") as vault:
        for _ in range(count):
            vault.put(SCOPE, os.urandom(MiB))
    return count * MiB


def migrate_once(root: Path, n: int) -> float:
    began = time.perf_counter()
    with Vault.open(root / "source", read_only=True) as source, Vault.open(root / f"m{n}", audit=False) as dest:
        migrate_store(source, dest)
    return time.perf_counter() - began


def copy_once(root: Path, n: int) -> float:
    files = sorted(p for p in (root / "source" / "blobs").rglob("*") if p.is_file())
    target = root / f"c{n}"
    target.mkdir()
    began = time.perf_counter()
    for number, path in enumerate(files):
        copied = target / str(number)
        shutil.copyfile(path, copied)
        fd = os.open(copied, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return time.perf_counter() - began


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser(__doc__, quick="fewer bytes", reps="interleaved repetitions")
    args = parser.parse_args(argv)
    count = 32 if args.quick else 128
    reps = max(1, args.reps) if args.reps is not None else 2 if args.quick else 3
    began = time.perf_counter()
    print(command_line("migrate.py", argv))
    print(machine())
    with work_dir("migrate", args.keep) as root:
        size = fill(root, count)
        migrated, copied = [], []
        for n in range(reps):
            copied.append(copy_once(root, n))
            migrated.append(migrate_once(root, n))
    mb = size / 1e6
    plain = mb / statistics.median(copied)
    moved = mb / statistics.median(migrated)
    print(f"{count} artifacts of 1 MiB ({mb:,.0f} MB), medians of {reps} interleaved repetitions:")
    print(f"  plain copy (copyfile + fsync)          {plain:>8,.0f} MB/s")
    print(f"  migrate_store (verified, re-MAC'd)     {moved:>8,.0f} MB/s  time x{plain / moved:.2f}")
    print(total_time(began))
    return 0


if __name__ == "__main__":
    sys.exit(main())
