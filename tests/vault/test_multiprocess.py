"""Several processes share one embedded store (SQLite WAL + filesystem blobs)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
from pathlib import Path

from refvault import Scope, Vault

WRITER = textwrap.dedent(
    """
    import hashlib, sys
    from refvault import Scope, Vault
    store, worker = sys.argv[1], int(sys.argv[2])
    scope = Scope("acme", "ana", "shared")
    with Vault.open(store) as vault:
        for i in range(40):
            size = 2_000 if i % 2 else 70_000
            data = hashlib.shake_256(f"{worker}:{i}".encode()).digest(size)
            shared = b"same bytes in every process" * 2000
            d = vault.put(scope, data if i % 5 else shared, idempotency_key=f"w{worker}:{i}")
            print(d.artifact_id, d.content_hash, flush=True)
    """
)


def test_concurrent_processes_publish_everything_and_share_blobs(tmp_path: Path) -> None:
    store = tmp_path / "store"
    Vault.open(store).close()  # create the schema once, as a user would
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(store), str(n)], stdout=subprocess.PIPE, text=True)
        for n in range(4)
    ]
    acknowledged: dict[str, str] = {}
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        for line in out.splitlines():
            aid, digest = line.split()
            acknowledged[aid] = digest
    assert len(acknowledged) == 4 * 40
    scope = Scope("acme", "ana", "shared")
    with Vault.open(store) as vault:
        listed = {d.artifact_id: d.content_hash for d in vault.list(scope)}
        assert listed == acknowledged
        for aid, digest in acknowledged.items():
            assert "sha256:" + hashlib.sha256(vault.read_bytes(scope, aid)).hexdigest() == digest
        shared_digest = "sha256:" + hashlib.sha256(b"same bytes in every process" * 2000).hexdigest()
        assert sum(1 for d in listed.values() if d == shared_digest) == 4 * 8
        assert len({k for k in iter(vault.blobs.keys()) if "sha256:" + k.digest == shared_digest}) == 1
        assert vault.verify().ok
