"""Eight processes on one PostgreSQL catalog charging one run: together they never overspend its budget.

Each process reads the same artifact in a loop (and captures in another run) until its budget says no;
the reads and bytes they were allowed, summed over every process, stay within each limit (at most one
operation over: the bound the ledger documents; in fact within), and the catalog never counts past it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from refvault import Scope, Vault
from refvault.budgets import Budget
from tests.servers import fresh_database

RUN = Scope("acme", "ana", "run-1")
WRITES = Scope("acme", "ana", "run-2")
READS = 120
ACQUIRED = 50 * 100
PROCESSES = 8

CHILD = """
import sys
import pytest

from refvault import Scope, Vault
from refvault.errors import BudgetExceeded
url, blobs, artifact = sys.argv[1:4]
print("ready", flush=True)
sys.stdin.readline()
reads = writes = 0
with Vault.open(url, blobs=blobs) as vault:
    run, other = Scope("acme", "ana", "run-1"), Scope("acme", "ana", "run-2")
    while True:
        try:
            vault.read_bytes(run, artifact)
        except BudgetExceeded:
            break
        reads += 1
    while True:
        try:
            vault.put(other, b"x" * 50)
        except BudgetExceeded:
            break
        writes += 1
print(reads, writes, flush=True)
"""


@pytest.mark.slow
def test_eight_processes_never_overspend_one_run(postgres_url: str, tmp_path: Path) -> None:
    url = fresh_database(postgres_url)
    blobs = str(tmp_path / "blobs")
    with Vault.open(url, blobs=blobs) as vault:
        artifact = vault.put(RUN, b"shared bytes " * 40, media_type="text/plain").artifact_id
        vault.set_budget(RUN, Budget(read_calls=READS))
        vault.set_budget(WRITES, Budget(acquired_bytes=ACQUIRED))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(CHILD), url, blobs, artifact],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        counts = []
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-3000:]
            counts.append([int(n) for n in out.split()])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    reads = sum(r for r, _ in counts)
    writes = sum(w for _, w in counts)
    assert READS - PROCESSES <= reads <= READS  # never over; at most what the others still held is left
    assert writes * 50 <= ACQUIRED
    with Vault.open(url, blobs=blobs) as vault:
        usage = vault.usage(RUN)
        assert usage.spent["read_calls"] == reads  # every process returned what it reserved and did not use
        assert usage.left["read_calls"] == READS - reads
        assert vault.usage(WRITES).spent["acquired_bytes"] == writes * 50
        assert len(vault.list(WRITES)) == writes  # a refused put stored nothing
