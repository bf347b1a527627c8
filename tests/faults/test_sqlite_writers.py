"""Eight writer processes on one embedded (SQLite) store: nobody sees ``database is locked``.

Each process opens the same store directory (all at once, the store not yet created) and puts
``PUTS`` artifacts, some inline in the catalog, some as blobs; SQLite's single writer lock is waited
for (``busy_timeout``), never reported to a caller. Every put succeeds, and the store afterwards
holds exactly the artifacts the writers were given, each readable.
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

from refvault import Scope, Vault

WRITERS = 8
PUTS = 25


def _writer(store: str, number: int, start: object) -> list[tuple[str, str]]:
    """Open the store and put ``PUTS`` artifacts; return (artifact id, content hash) or the error met."""
    import hashlib

    start.wait()  # type: ignore[attr-defined]
    scope = Scope("acme", f"writer{number}", "s1")
    done: list[tuple[str, str]] = []
    try:
        with Vault.open(store) as vault:
            for i in range(PUTS):
                data = os.urandom(60_000 if i % 4 == 0 else 500)  # a blob, or inline in the catalog
                descriptor = vault.put(scope, data, idempotency_key=f"{number}-{i}")
                done.append((descriptor.artifact_id, "sha256:" + hashlib.sha256(data).hexdigest()))
    except Exception as exc:  # reported to the parent: what reached the caller
        done.append(("error", f"{type(exc).__name__}: {exc}"))
    return done


def test_eight_writer_processes_on_one_sqlite_store_all_succeed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    context = multiprocessing.get_context("forkserver")  # each writer a fresh process, refvault imported once
    context.set_forkserver_preload(["refvault", "refvault.vault.core", "refvault.catalog.sql"])
    with context.Manager() as manager:
        start = manager.Event()
        with context.Pool(WRITERS) as pool:
            pending = [pool.apply_async(_writer, (str(store), n, start)) for n in range(WRITERS)]
            start.set()
            results = [p.get(timeout=300) for p in pending]
    errors = [detail for result in results for artifact_id, detail in result if artifact_id == "error"]
    assert errors == []
    assert [len(result) for result in results] == [PUTS] * WRITERS
    with Vault.open(store) as vault:
        assert vault.verify().artifacts == WRITERS * PUTS
        for number, result in enumerate(results):
            scope = Scope("acme", f"writer{number}", "s1")
            assert {d.artifact_id for d in vault.list(scope)} == {artifact_id for artifact_id, _ in result}
            for artifact_id, content_hash in result:
                assert vault.describe(scope, artifact_id).content_hash == content_hash
