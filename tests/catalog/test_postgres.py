"""The PostgreSQL catalog on a real server: migrations, locking across processes, crashes, errors, cursor keys.

Blobs live in a shared directory (``FilesystemBlobStore``), and for the
capture/gc/crash tests also in S3 (a SeaweedFS gateway): these tests are about
the catalog's side of the capture protocol. Each test gets a fresh database.
Processes are started with ``python -c`` and released together ("ready" /
"go" on their pipes), so races are real, not simulated.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from refvault import Scope, Vault
from refvault import read as rv_read
from refvault.blobs.base import BlobKey
from refvault.catalog.base import Manifest, Publication
from refvault.catalog.schema import MIGRATIONS, blobs, migrations
from refvault.catalog.sql import SqlCatalog
from refvault.errors import InvalidArgument, InvalidCursor, StorageError
from refvault.ids import namespace_of
from refvault.read import records
from tests.conftest import Clock
from tests.servers import S3Endpoint, fresh_database, fresh_prefix

SCOPE = Scope("acme", "ana", "s1")

# Every child prints "ready", waits for a line on stdin, then runs its body.
PRELUDE = """
import os, sys, threading, time
from refvault import Scope, Vault
SCOPE = Scope("acme", "ana", "s1")
def ready():
    print("ready", flush=True)
    sys.stdin.readline()
"""


@pytest.fixture
def db(postgres_url: str) -> str:
    return fresh_database(postgres_url)


@pytest.fixture(params=["filesystem", "s3"])
def blob_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a test's blobs live: a shared directory, or a fresh prefix on the test S3 service."""
    if request.param == "filesystem":
        return str(tmp_path / "blobs")
    s3: S3Endpoint = request.getfixturevalue("s3_server")  # also puts its credentials in the environment
    return fresh_prefix(s3)


def _start(body: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run_together(body: str, argv: list[list[str]]) -> list[list[str]]:
    """Start one child per argument list, release them at once, return each one's output lines."""
    procs = [_start(body, *args) for args in argv]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = []
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-3000:]
            outputs.append(out.splitlines())
        return outputs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _applied(url: str) -> list[int]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return list(conn.scalars(sa.select(migrations.c.version).order_by(migrations.c.version)))
    finally:
        engine.dispose()


def _key(data: bytes, tenant: str = "acme") -> BlobKey:
    return BlobKey(namespace_of(tenant), hashlib.sha256(data).hexdigest())


# -- opening and migrations ------------------------------------------------------------


def test_migrations_are_idempotent_and_recorded_once(db: str) -> None:
    for _ in range(3):
        SqlCatalog(db).close()
    assert _applied(db) == sorted(version for version, _ in MIGRATIONS)  # every migration, once
    bare = "postgresql://" + db.split("://", 1)[1]  # plain postgresql:// means psycopg 3
    catalog = SqlCatalog(bare)
    try:
        assert catalog._engine.dialect.driver == "psycopg"
        assert isinstance(catalog._engine.pool, sa.pool.QueuePool)
    finally:
        catalog.close()


def test_a_database_written_by_a_newer_refvault_is_refused(db: str) -> None:
    SqlCatalog(db).close()
    engine = sa.create_engine(db)
    with engine.begin() as conn:
        conn.execute(migrations.insert().values(version=999, applied_us=0))
    engine.dispose()
    with pytest.raises(StorageError, match="newer refvault"):
        SqlCatalog(db)


def test_other_databases_and_drivers_are_refused() -> None:
    for url in ("mysql://u@h/db", "postgresql+psycopg2://u@h/db", "not a url"):
        with pytest.raises(InvalidArgument):
            SqlCatalog(url)


def test_processes_opening_a_fresh_database_at_once_migrate_it_once(db: str) -> None:
    body = """
    from refvault.catalog.sql import SqlCatalog
    ready()
    catalog = SqlCatalog(sys.argv[1])
    print("opened", catalog.get_setting("nothing"), flush=True)
    catalog.close()
    """
    outputs = _run_together(body, [[db]] * 6)
    assert all(lines == ["opened None"] for lines in outputs)
    assert _applied(db) == sorted(version for version, _ in MIGRATIONS)  # every migration, once


# -- capture -------------------------------------------------------------------------------


def _content(n: int) -> bytes:
    size = 1_000 if n % 2 else 100_000  # inline in the catalog, or a file in the blob store
    return hashlib.shake_256(f"content {n}".encode()).digest(size)


def test_idempotent_captures_from_several_processes_make_one_artifact_per_key(db: str, blob_location: str) -> None:
    body = """
    import hashlib
    url, blobs = sys.argv[1:3]
    def content(n):
        return hashlib.shake_256(f"content {n}".encode()).digest(1_000 if n % 2 else 100_000)
    with Vault.open(url, blobs=blobs) as vault:
        lines = []
        def worker(t):
            for n in range(10):
                d = vault.put(SCOPE, content(n), idempotency_key=f"key-{n}", filename="out.bin")
                lines.append(f"{n} {d.artifact_id} {d.content_hash}")
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        ready()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print("\\n".join(lines), flush=True)
    """
    blob_dir = blob_location
    Vault.open(db, blobs=blob_dir).close()  # the store exists; the race is about captures, not creation
    outputs = _run_together(body, [[db, blob_dir]] * 4)
    by_key: dict[int, set[str]] = {}
    for lines in outputs:
        assert len(lines) == 40
        for line in lines:
            n, artifact_id, content_hash = line.split()
            assert content_hash == "sha256:" + hashlib.sha256(_content(int(n))).hexdigest()
            by_key.setdefault(int(n), set()).add(artifact_id)
    assert all(len(ids) == 1 for ids in by_key.values()), by_key
    with Vault.open(db, blobs=blob_dir) as vault:
        listed = {d.artifact_id for d in vault.list(SCOPE)}
        assert listed == {next(iter(ids)) for ids in by_key.values()}
        for n, ids in by_key.items():
            assert vault.read_bytes(SCOPE, next(iter(ids))) == _content(n)
        assert vault.verify().ok


def test_group_commit_batches_puts_from_many_threads(db: str, tmp_path: Path) -> None:
    vault = Vault.open(db, blobs=tmp_path / "blobs")
    threads_n = 16
    batches: list[int] = []
    real_publish = vault.catalog.publish

    def publish(items: Any, make_visible: Any) -> Any:
        if not batches:  # hold the first batch until every other thread has queued its put
            deadline = time.monotonic() + 60
            while len(vault._committer._queue) < threads_n - 1 and time.monotonic() < deadline:
                time.sleep(0.01)
        batches.append(len(items))
        return real_publish(items, make_visible)

    vault.catalog.publish = publish  # type: ignore[method-assign]
    start = threading.Barrier(threads_n)
    results: dict[int, list[str]] = {}

    def worker(t: int) -> None:
        start.wait()
        ids = []
        for n in range(8):
            data = _content(n) if n < 2 else f"thread {t} item {n}".encode() * 50
            key = f"shared-{n}" if n < 2 else None  # every thread retries the same two captures
            ids.append(vault.put(SCOPE, data, idempotency_key=key).artifact_id)
        results[t] = ids

    try:
        workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()
        assert max(batches) > 1  # puts shared a transaction
        assert sum(batches) >= threads_n * 8
        assert len({results[t][0] for t in results}) == 1
        assert len({results[t][1] for t in results}) == 1
        listed = {d.artifact_id for d in vault.list(SCOPE)}
        assert listed == {aid for ids in results.values() for aid in ids}
        assert len(listed) == 2 + threads_n * 6
        assert vault.verify().ok
    finally:
        vault.close()


# -- gc against publish --------------------------------------------------------------------------


def test_collect_waits_for_a_publish_of_the_same_blob_and_keeps_it(db: str, blob_location: str) -> None:
    writer = Vault.open(db, blobs=blob_location, grace=0)
    collector = Vault.open(db, blobs=blob_location, grace=0)
    try:
        data = os.urandom(200_000)
        first = writer.put(SCOPE, data)
        writer.delete(SCOPE, first.artifact_id)  # the blob is unreferenced: gc may take it
        real_publish = writer.catalog.publish
        race: dict[str, Any] = {}

        def publish(items: Any, make_visible: Any) -> Any:
            def visible_then_gc() -> None:
                make_visible()
                thread = threading.Thread(target=lambda: race.setdefault("gc", collector.gc(grace=0)))
                thread.start()
                thread.join(0.5)
                race["waited"] = thread.is_alive()  # gc is blocked on the blob's lock
                race["thread"] = thread

            return real_publish(items, visible_then_gc)

        writer.catalog.publish = publish  # type: ignore[method-assign]
        second = writer.put(SCOPE, data)
        race["thread"].join(60)
        assert race["waited"] is True
        assert race["gc"].blobs_removed == 0
        assert writer.read_bytes(SCOPE, second.artifact_id) == data
        assert collector.verify().ok
    finally:
        writer.close()
        collector.close()


def test_gc_racing_publishes_never_leaves_a_reference_to_a_missing_blob(db: str, blob_location: str) -> None:
    writer = Vault.open(db, blobs=blob_location, grace=0)
    collector = Vault.open(db, blobs=blob_location, grace=0)
    try:
        for round_ in range(20):
            data = hashlib.shake_256(f"round {round_}".encode()).digest(100_000)
            old = writer.put(SCOPE, data)
            writer.delete(SCOPE, old.artifact_id)
            start = threading.Barrier(2)
            got: dict[str, Any] = {}

            def put(data: bytes = data, start: threading.Barrier = start, got: dict[str, Any] = got) -> None:
                start.wait()
                got["put"] = writer.put(SCOPE, data)

            def gc(start: threading.Barrier = start, got: dict[str, Any] = got) -> None:
                start.wait()
                got["gc"] = collector.gc(grace=0)

            threads = [threading.Thread(target=put), threading.Thread(target=gc)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert writer.read_bytes(SCOPE, got["put"].artifact_id) == data
            assert writer.blobs.exists(_key(data))
        report = collector.verify()
        assert report.ok, report.problems
    finally:
        writer.close()
        collector.close()


def test_an_orphan_from_a_killed_writer_is_collected_after_the_grace_only(db: str, blob_location: str) -> None:
    blob_dir = blob_location
    Vault.open(db, blobs=blob_dir).close()
    body = """
    from refvault.catalog.sql import SqlCatalog
    url, blobs = sys.argv[1:3]
    vault = Vault.open(url, blobs=blobs)
    real = SqlCatalog.publish
    def publish(self, items, make_visible):
        def visible_then_hang():
            make_visible()  # the bytes are durable at their final key; the manifest is not committed
            print("visible", items[0].blob.key.digest, flush=True)
            time.sleep(600)
        return real(self, items, visible_then_hang)
    SqlCatalog.publish = publish
    ready()
    vault.put(SCOPE, os.urandom(300_000))
    """
    proc = _start(body, db, str(blob_dir))
    try:
        assert proc.stdout is not None
        assert proc.stdin is not None
        assert proc.stdout.readline().strip() == "ready"
        proc.stdin.write("go\n")
        proc.stdin.flush()
        word, digest = proc.stdout.readline().split()
        assert word == "visible"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with Vault.open(db, blobs=blob_dir) as vault:
        key = BlobKey(namespace_of("acme"), digest)
        assert vault.blobs.exists(key)
        assert vault.list(SCOPE) == []  # the killed transaction published nothing
        assert not vault.catalog.has_blob(key)
        assert vault.gc().blobs_removed == 0  # young: within the grace period
        assert vault.blobs.exists(key)
        assert vault.gc(grace=0).blobs_removed == 1  # past its grace; the killed writer's locks went with it
        assert not vault.blobs.exists(key)
        assert vault.verify().ok


def test_idempotency_keys_of_a_batch_and_of_other_writers_agree(db: str, tmp_path: Path) -> None:
    first = SqlCatalog(db)
    second = SqlCatalog(db)
    try:
        from datetime import UTC, datetime

        from refvault.catalog.base import BlobRecord

        data = b"same capture"
        record = BlobRecord(_key(data), len(data), 1 << 20, b"", inline=data)

        def manifest(n: int) -> Manifest:
            return Manifest(
                artifact_id=f"art_{n:026d}",
                scope=SCOPE,
                digest=record.key.digest,
                size=len(data),
                media_type="application/octet-stream",
                disclosure="model",
                created_at=datetime(2026, 1, 1, tzinfo=UTC),
                idempotency_key="one",
            )

        # Two items of one batch with one key: the second replays the first.
        out = first.publish([Publication(manifest(1), record), Publication(manifest(2), record)], lambda: None)
        assert [m.artifact_id for m in out if isinstance(m, Manifest)] == [manifest(1).artifact_id] * 2
        # Another catalog (another process) replays it too.
        again = second.publish([Publication(manifest(3), record)], lambda: None)
        assert isinstance(again[0], Manifest)
        assert again[0].artifact_id == manifest(1).artifact_id
    finally:
        first.close()
        second.close()


# -- best effort and errors ---------------------------------------------------------------------


def test_recording_chunks_gives_up_quickly_behind_a_row_lock(db: str, tmp_path: Path) -> None:
    with Vault.open(db, blobs=tmp_path / "blobs") as vault:
        data = os.urandom(100_000)
        vault.put(SCOPE, data)
        key = _key(data)
        catalog = vault.catalog
        assert isinstance(catalog, SqlCatalog)
        engine = sa.create_engine(db)
        try:
            with engine.begin() as conn:
                conn.execute(
                    sa.select(blobs.c.digest).where(blobs.c.digest == key.digest).with_for_update()
                ).scalar_one()
                with pytest.raises(StorageError, match="LockNotAvailable"):
                    catalog.record_chunks(key, 1 << 20, b"\0" * 32)
            # A reader still gets verified bytes; the digests are derived and recorded now.
            assert vault.read_range(SCOPE, vault.list(SCOPE)[0].artifact_id, 10, 10) == data[10:20]
        finally:
            engine.dispose()


def test_database_errors_never_carry_sql_or_parameters(db: str) -> None:
    from datetime import UTC, datetime

    from refvault.catalog.base import ApiKey

    catalog = SqlCatalog(db)
    secret = "f00dfeedcafe" * 5

    def key(key_id: str) -> ApiKey:
        return ApiKey(key_id, secret, "acme", "ana", None, datetime.now(UTC), label="label-" + secret)

    try:
        catalog.add_api_key(key("k_one"))
        failures = []
        for bad in ("k_one", "k_" + secret * 2, "k_\x00" + secret):  # duplicate, too long, NUL
            with pytest.raises(StorageError) as caught:
                catalog.add_api_key(key(bad))
            failures.append(str(caught.value))
        with pytest.raises(InvalidArgument) as surrogate:
            catalog.add_api_key(key("k_\ud800" + secret))
        failures.append(str(surrogate.value))
        for message in failures:
            assert secret not in message
            assert "k_one" not in message
            assert "INSERT" not in message.upper()
            assert "\ud800" not in message
    finally:
        catalog.close()
    wrong = sa.make_url(db).set(password="hunter2-password", database="rv_absent")
    with pytest.raises(StorageError) as caught:
        SqlCatalog(wrong.render_as_string(hide_password=False))
    assert "hunter2" not in str(caught.value)


# -- the cursor key ring shared through the catalog ------------------------------------------------

ROWS = b"".join(b'{"n": %d, "tag": "row %d"}\n' % (i, i) for i in range(50))


def _cursor(vault: Vault, artifact_id: str) -> str:
    page = rv_read.query(vault, SCOPE, artifact_id, limit=5)
    cursor: str = page["next_cursor"]
    return cursor


def test_cursor_keys_are_shared_by_vaults_and_processes_on_one_database(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blob_dir = tmp_path / "blobs"
    clock = Clock()
    first = Vault.open(db, blobs=blob_dir, clock=clock)
    second = Vault.open(db, blobs=blob_dir, clock=clock)
    try:
        artifact_id = first.put(SCOPE, ROWS, media_type="application/x-ndjson").artifact_id
        old = _cursor(first, artifact_id)
        assert rv_read.query(second, SCOPE, artifact_id, cursor=old)["records"][0]["index"] == 5
        stored = first.catalog.get_setting("cursor-keys")
        assert stored is not None
        assert records._ring(first).current.key_id == records._ring(second).current.key_id

        # Another process rotates the ring and signs with the new key: accepted here at once.
        body = """
        from refvault import read
        url, blobs, artifact_id = sys.argv[1:4]
        with Vault.open(url, blobs=blobs) as vault:
            ready()
            read.rotate_cursor_keys(vault)
            print(read.query(vault, SCOPE, artifact_id, limit=5)["next_cursor"], flush=True)
        """
        [[rotated]] = _run_together(body, [[db, str(blob_dir), artifact_id]])
        assert first.catalog.get_setting("cursor-keys") != stored
        assert rv_read.query(first, SCOPE, artifact_id, cursor=rotated)["records"][0]["index"] == 5
        assert rv_read.query(second, SCOPE, artifact_id, cursor=old)["records"][0]["index"] == 5  # grace

        # A rotation in one vault is what the other signs with, once it looks (at most every `recheck` s).
        monkeypatch.setattr(records._Keys, "recheck", 0.0)
        rv_read.rotate_cursor_keys(second)
        assert records._ring(first).current.key_id == records._ring(second).current.key_id
        newest = _cursor(first, artifact_id)
        assert rv_read.query(second, SCOPE, artifact_id, cursor=newest)["records"][0]["index"] == 5

        # Past the grace period the first key no longer verifies, anywhere.
        clock.advance(hours=24, seconds=1)
        for vault in (first, second):
            with pytest.raises(InvalidCursor):
                rv_read.query(vault, SCOPE, artifact_id, cursor=old)
    finally:
        first.close()
        second.close()


def test_concurrent_rotations_lose_no_key(db: str, tmp_path: Path) -> None:
    vaults = [Vault.open(db, blobs=tmp_path / "blobs") for _ in range(4)]
    try:
        records._ring(vaults[0])
        start = threading.Barrier(len(vaults))

        def rotate(vault: Vault) -> None:
            start.wait()
            rv_read.rotate_cursor_keys(vault)

        threads = [threading.Thread(target=rotate, args=(vault,)) for vault in vaults]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        stored = vaults[0].catalog.get_setting("cursor-keys")
        assert stored is not None
        from refvault.read.cursors import KeyRing

        assert len(KeyRing.from_json(stored).keys) == 1 + len(vaults)  # every rotation kept, none overwritten
    finally:
        for vault in vaults:
            vault.close()
