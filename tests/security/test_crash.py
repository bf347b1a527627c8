"""Crash safety: SIGKILL writers at random moments, then check every invariant.

The invariant under test (DESIGN.md "Writing bytes safely", and the vault
package docstring): a crash at any point leaves at worst an orphan blob or
temporary, collected by ``gc`` after its grace period; never a published
reference to missing or partial bytes, and never a lost acknowledged put.

``tests/security/crash_writer.py`` runs in child processes that share one store and
capture artifacts in a loop, printing each acknowledged id. The parent kills
them at seeded random moments (while they open the store, during puts, during
deletes and concurrent ``gc``), restarts them on the same store, and finally runs
:func:`check_store`, which returns a list of violations. The children are forked
from a ``forkserver`` that has imported refvault already (a fresh interpreter per
kill would spend most of the run importing); each is a brand-new process. The same harness
and checker, run against a writer that commits manifests before their bytes
are in place, must report violations: that proves the checker can fail.

SIGKILL tests process crashes; the page cache survives them, so these tests
check ordering and atomicity, not fsync placement (power loss).
"""

from __future__ import annotations

import hashlib
import importlib.util
import multiprocessing
import os
import random
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import pytest

import refvault
from refvault.blobs.base import BlobKey
from refvault.errors import IntegrityError, NotFound
from refvault.ids import namespace_of

WRITER = Path(__file__).with_name("crash_writer.py")
SEED = 20240611
KILLS = 200
MIN_ACKS = 50  # the children must have done real work, even on a slow machine
BROKEN_MAX_KILLS = 60
SLOTS = 2  # concurrent children sharing the store
READY_TIMEOUT = 60.0
PRELOAD = ["refvault", "refvault.vault.core", "refvault.catalog.sql", "refvault.blobs.filesystem"]
OLD = 2 * 3600.0  # seconds: older than the default grace


def _load_writer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("crash_writer", WRITER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


writer = _load_writer()


class Ack(NamedTuple):
    artifact_id: str
    scope: refvault.Scope
    content_hash: str
    key: str | None
    tag: str


@dataclass
class Harvest:
    """What the children said before they died, and how the kill loop went."""

    acks: list[Ack] = field(default_factory=list)
    deleting: set[str] = field(default_factory=set)
    failed_puts: int = 0
    collected_blobs: int = 0  # orphans collected by the writers' own concurrent gc runs
    collected_temporaries: int = 0
    kills: int = 0
    children: int = 0
    unexpected_exits: list[str] = field(default_factory=list)

    def read(self, log: Path) -> None:
        """Parse one child's stdout; a torn last line (no newline) was never acknowledged."""
        for line in log.read_text().splitlines(keepends=True):
            if not line.endswith("\n"):
                break
            word, *rest = line.split()
            if word == "ack":
                artifact_id, tenant, user, session, content_hash, key, tag = rest
                scope = refvault.Scope(tenant, user, session)
                self.acks.append(Ack(artifact_id, scope, content_hash, None if key == "-" else key, tag))
            elif word == "del":
                self.deleting.add(rest[0])
            elif word == "gc":
                self.collected_blobs += int(rest[0])
                self.collected_temporaries += int(rest[1])
            elif word == "err":
                self.failed_puts += rest[0] == "put"


@dataclass
class Child:
    process: Any  # a multiprocessing process
    log: Path
    errors: Path
    started: float
    wait_ready: bool
    delay: float
    ready_at: float | None = None

    def ready(self) -> bool:
        if self.ready_at is None and self.log.read_bytes().startswith(b"ready\n"):
            self.ready_at = time.monotonic()
        return self.ready_at is not None

    def due(self, now: float) -> bool:
        if not self.wait_ready:
            return now >= self.started + self.delay
        return self.ready() and now >= (self.ready_at or now) + self.delay


def _context() -> Any:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def _spawn(store: Path, logs: Path, number: int, rng: random.Random, broken: bool) -> Child:
    from tests.security.crash_writer import forked_main

    log, errors = logs / f"child-{number}.out", logs / f"child-{number}.err"
    argv = [str(store), str(rng.randrange(2**32))]
    if broken:
        argv.append("--broken")
    log.touch()
    errors.touch()
    process = _context().Process(target=forked_main, args=(argv, str(log), str(errors)))
    process.start()
    roll = rng.random()
    if roll < 0.1:  # during Vault.open (WAL set-up, migration check, key file): a forked child gets there at once
        wait_ready, delay = False, rng.uniform(0.0, 0.05)
    elif roll < 0.85:
        wait_ready, delay = True, rng.uniform(0.0, 0.15)
    else:
        wait_ready, delay = True, rng.uniform(0.15, 0.6)
    return Child(process, log, errors, time.monotonic(), wait_ready, delay)


def run_kill_harness(
    store: Path,
    logs: Path,
    *,
    kills: int,
    rng: random.Random,
    slots: int = SLOTS,
    broken: bool = False,
    harvest: Harvest | None = None,
) -> Harvest:
    """Start ``slots`` writers on ``store``; SIGKILL each at a random moment and restart it, ``kills`` times."""
    harvest = harvest or Harvest()
    logs.mkdir(exist_ok=True)
    running: list[Child] = []
    started = 0
    try:
        while harvest.kills + len(running) < kills or running:
            while len(running) < slots and harvest.kills + len(running) < kills:
                running.append(_spawn(store, logs, harvest.children + started, rng, broken))
                started += 1
            now = time.monotonic()
            for child in list(running):
                if not child.process.is_alive():
                    stderr = child.errors.read_text()[-2000:]
                    harvest.unexpected_exits.append(f"child exited by itself ({child.process.exitcode}): {stderr}")
                elif child.due(now):
                    child.process.kill()  # SIGKILL
                    harvest.kills += 1
                elif not child.ready() and now - child.started > READY_TIMEOUT:
                    child.process.kill()
                    harvest.unexpected_exits.append("child never became ready")
                else:
                    continue
                child.process.join()
                child.process.close()
                harvest.read(child.log)
                running.remove(child)
            if harvest.unexpected_exits:
                break
            time.sleep(0.002)
    finally:
        for child in running:
            child.process.kill()
            child.process.join()
            child.process.close()
        harvest.children += started
    return harvest


# -- the checker -------------------------------------------------------------------


def _temporaries(store: Path) -> set[str]:
    return set(os.listdir(store / "tmp"))


def _blob_files(store: Path) -> set[str]:
    root = store / "blobs"
    return {str(Path(d, f).relative_to(root)) for d, _, files in os.walk(root) for f in files}


def _path(key: BlobKey) -> str:
    return f"{key.namespace}/{key.digest[:2]}/{key.digest}"


def _plant_orphans(vault: refvault.Vault, store: Path, *, age: float) -> tuple[BlobKey, str]:
    """An unreferenced published blob and an unpublished temporary, both ``age`` seconds old."""
    data = secrets.token_bytes(100 * 1024)
    blob_writer = vault.blobs.writer()
    blob_writer.write(data)
    key = BlobKey(namespace_of(writer.TENANTS[0]), hashlib.sha256(data).hexdigest())
    blob_writer.seal(key)
    blob_writer.publish(key)
    temp = secrets.token_hex(16) + ".tmp"
    (store / "tmp" / temp).write_bytes(data[:1000])
    then = time.time() - age
    for path in (store / "blobs" / _path(key), store / "tmp" / temp):
        os.utime(path, (then, then))
    return key, temp


def _check_artifacts(vault: refvault.Vault, expected: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """(1) Every listed artifact reads back verified and is exactly the bytes of its tag."""
    problems: list[str] = []
    listed: dict[str, str] = {}
    for where in writer.all_scopes():
        scope = refvault.Scope(*where)
        for descriptor in vault.list(scope):
            listed[descriptor.artifact_id] = descriptor.content_hash
            tag = descriptor.source_version.get("tag", "")
            try:
                data = vault.read_bytes(scope, descriptor.artifact_id)
            except IntegrityError as exc:
                problems.append(f"listed artifact unreadable: IntegrityError({exc.kind}): {exc}")
                continue
            if "sha256:" + hashlib.sha256(data).hexdigest() != descriptor.content_hash:
                problems.append(f"listed artifact {descriptor.artifact_id} does not hash to its content_hash")
            if tag not in expected:
                expected[tag] = writer.content_hash_of(tag)
            if expected[tag] != descriptor.content_hash or len(data) != descriptor.retrieval["size"]:
                problems.append(f"listed artifact {descriptor.artifact_id} is not the bytes captured as {tag!r}")
    for manifest in vault.catalog.manifests():
        if manifest.artifact_id not in listed:
            problems.append(f"artifact {manifest.artifact_id} is outside every scope the writers use")
    return problems, listed


def _check_acks(vault: refvault.Vault, acks: list[Ack], deleting: set[str], expected: dict[str, str]) -> list[str]:
    """(2) Every acknowledged put is present with the printed hash; a replayed key kept its first id."""
    problems: list[str] = []
    first_id: dict[tuple[refvault.Scope, str], str] = {}
    for ack in acks:
        if ack.tag not in expected:
            expected[ack.tag] = writer.content_hash_of(ack.tag)
        if ack.content_hash != expected[ack.tag]:
            problems.append(f"acknowledged {ack.artifact_id} has hash {ack.content_hash}, captured {ack.tag!r}")
        if ack.key is not None and first_id.setdefault((ack.scope, ack.key), ack.artifact_id) != ack.artifact_id:
            problems.append(f"idempotency key {ack.key} in {ack.scope} acknowledged two ids")
        if ack.artifact_id in deleting:
            continue
        try:
            found = vault.describe(ack.scope, ack.artifact_id)
        except NotFound:
            problems.append(f"acknowledged artifact {ack.artifact_id} is lost")
            continue
        if found.content_hash != ack.content_hash:
            problems.append(f"acknowledged artifact {ack.artifact_id} changed hash")
    return problems


def _check_verify(vault: refvault.Vault, when: str) -> list[str]:
    """(3) ``verify`` re-reads every blob and finds nothing missing or corrupt."""
    report = vault.verify()
    return [f"verify {when}: {p.kind} blob {p.digest} of {list(p.artifact_ids)}: {p.detail}" for p in report.problems]


def _check_gc(vault: refvault.Vault, store: Path, stats: dict[str, int]) -> list[str]:
    """(4) ``gc`` keeps young orphans until their grace has passed, then leaves no orphan at all."""
    problems: list[str] = []
    stats["orphan temporaries"] = len(_temporaries(store))
    stats["orphan blobs"] = len(set(vault.blobs.keys()) - {m.key for m in vault.catalog.manifests()})
    young_key, young_temp = _plant_orphans(vault, store, age=0.0)
    old_key, old_temp = _plant_orphans(vault, store, age=OLD)
    referenced = {m.key for m in vault.catalog.manifests()}
    orphans = {_path(k) for k in set(vault.blobs.keys()) - referenced} - {_path(old_key)}
    temporaries = _temporaries(store) - {old_temp}
    if not ({_path(young_key)} <= orphans and young_temp in temporaries):
        problems.append("planting young orphans failed")

    vault.gc()  # default grace (an hour): only the planted old orphans are old enough to go
    left_blobs, left_temps = _blob_files(store), _temporaries(store)
    problems += [f"gc removed orphan blob {p} younger than its grace" for p in sorted(orphans - left_blobs)]
    problems += [f"gc removed temporary {t} younger than its grace" for t in sorted(temporaries - left_temps)]
    if _path(old_key) in left_blobs or old_temp in left_temps:
        problems.append("gc kept an orphan older than its grace")

    vault.gc(grace=0)
    referenced = {m.key for m in vault.catalog.manifests()}
    keys = set(vault.blobs.keys())
    problems += [f"temporary {t} left after gc" for t in sorted(_temporaries(store))]
    problems += [f"unreferenced blob {_path(k)} left after gc" for k in sorted(keys - referenced)]
    problems += [f"stray file blobs/{p} left after gc" for p in sorted(_blob_files(store) - {_path(k) for k in keys})]
    problems += [f"unreferenced blob record {k} left after gc" for k in vault.catalog.unreferenced(0.0)]
    return problems


def check_store(store: Path, acks: list[Ack], deleting: set[str], stats: dict[str, int] | None = None) -> list[str]:
    """Check every crash invariant of ``store`` (no writer may be running); return the violations.

    ``stats``, if given, receives counts of what was checked and of the orphans the crashes left.
    """
    stats = {} if stats is None else stats
    expected: dict[str, str] = {}  # tag -> content hash, computed once
    with refvault.Vault.open(store) as vault:
        problems, listed = _check_artifacts(vault, expected)
        problems += _check_acks(vault, acks, deleting, expected)
        problems += _check_verify(vault, "after the crashes")
        stats["artifacts"] = len(listed)
        stats["acknowledged puts"] = len(acks)
        problems += _check_gc(vault, store, stats)
        problems += _check_verify(vault, "after gc")
        after = {m.artifact_id for m in vault.catalog.manifests()}
        if after != set(listed):
            problems.append(f"gc changed the artifacts ({len(listed)} before, {len(after)} after)")
    return problems


def _summary(problems: list[str]) -> str:
    return f"{len(problems)} violations:\n" + "\n".join(problems[:40])


# -- tests -------------------------------------------------------------------------


def _put_some(store: Path) -> list[Ack]:
    acks = []
    with refvault.Vault.open(store) as vault:
        for tag in ("fresh-a", "fresh-b", "pool-1", "pool-2", "pool-3"):
            scope = refvault.Scope(*writer.all_scopes()[0])
            d = vault.put(scope, writer.content_of(tag), source_version={"tag": tag})
            acks.append(Ack(d.artifact_id, scope, d.content_hash, None, tag))
    return acks


def test_checker_passes_a_clean_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    assert check_store(store, _put_some(store), set()) == []


@pytest.mark.parametrize(
    ("damage", "reported"),
    [
        ("lost_ack", "is lost"),
        ("wrong_ack_hash", "has hash"),
        ("missing_blob", "IntegrityError(missing)"),
        ("truncated_blob", "IntegrityError(corrupt)"),
        ("gc_ignores_grace", "younger than its grace"),
        ("gc_does_nothing", "left after gc"),
    ],
)
def test_checker_reports_each_kind_of_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str, reported: str
) -> None:
    store = tmp_path / "store"
    acks = _put_some(store)
    with refvault.Vault.open(store) as vault:
        files = [m.key for m in vault.catalog.manifests() if vault.blobs.exists(m.key)]
    assert files, "some test content must be file-backed"
    target = store / "blobs" / _path(files[0])
    collect = refvault.Vault.gc
    if damage == "lost_ack":
        acks.append(acks[0]._replace(artifact_id="art_" + "a" * 26))
    elif damage == "wrong_ack_hash":
        acks[0] = acks[0]._replace(content_hash=acks[1].content_hash)
    elif damage == "missing_blob":
        target.unlink()
    elif damage == "truncated_blob":
        target.chmod(0o640)
        os.truncate(target, target.stat().st_size // 2)
    elif damage == "gc_ignores_grace":
        monkeypatch.setattr(refvault.Vault, "gc", lambda self, grace=None: collect(self, grace=0))
    else:
        monkeypatch.setattr(refvault.Vault, "gc", lambda self, grace=None: refvault.GcReport(dry_run=False))
    problems = check_store(store, acks, set())
    assert any(reported in p for p in problems), _summary(problems)


@pytest.mark.slow
def test_random_sigkills_never_break_the_store(tmp_path: Path) -> None:
    store, started = tmp_path / "store", time.monotonic()
    harvest = run_kill_harness(store, tmp_path / "logs", kills=KILLS, rng=random.Random(SEED))
    assert not harvest.unexpected_exits, harvest.unexpected_exits
    killed = time.monotonic()
    stats: dict[str, int] = {}
    problems = check_store(store, harvest.acks, harvest.deleting, stats)
    print(
        f"\n{harvest.kills} kills of {harvest.children} children in {killed - started:.1f}s, "
        f"checked in {time.monotonic() - killed:.1f}s; {len({a.artifact_id for a in harvest.acks})} acknowledged ids, "
        f"{len(harvest.deleting)} deletes started, {harvest.failed_puts} puts failed cleanly; concurrent gc collected "
        f"{harvest.collected_blobs} blobs and {harvest.collected_temporaries} temporaries; {stats}"
    )
    assert harvest.kills >= 200
    assert len(harvest.acks) >= MIN_ACKS, "the children acknowledged too few puts to test anything"
    assert problems == [], _summary(problems)
    shutil.rmtree(store)  # hundreds of MB; keep only the logs


@pytest.mark.slow
def test_the_checker_catches_a_writer_that_publishes_the_manifest_first(tmp_path: Path) -> None:
    store, logs, rng = tmp_path / "store", tmp_path / "logs", random.Random(SEED + 1)
    harvest = Harvest()
    problems: list[str] = []
    while not problems and harvest.kills < BROKEN_MAX_KILLS:  # one child at a time, checked after every kill
        run_kill_harness(store, logs, kills=harvest.kills + 1, rng=rng, slots=1, broken=True, harvest=harvest)
        assert not harvest.unexpected_exits, harvest.unexpected_exits
        problems = check_store(store, harvest.acks, harvest.deleting)
    print(f"\nbroken writer detected after {harvest.kills} kills: {problems[:2]}")
    assert any("IntegrityError(missing)" in p for p in problems), _summary(problems)
