"""Crash safety of cascade deletion: SIGKILL a writer that builds trees of copies and cascade-deletes them.

The invariant (``refvault.vault.copies``: "a cascade is one transaction"): whatever moment a process dies at,
the store holds a whole cascade or none of it. After every kill the store is reopened and checked
(:func:`check_cascades`):

1. every artifact marked deleted by ``cascade:<root>`` has none of that root's same-owner descendants still
   live, and the root itself is gone;
2. no live artifact has an ancestor that a cascade deleted;
3. every artifact gone from the catalog that lineage names has its mark (the row and its mark commit together);
4. ``verify()`` and ``verify_audit()`` are clean;
5. a re-run of the cascade on every live top (a root, or what a torn cascade left) completes and leaves nothing
   live, and ``gc(grace=0)`` then leaves no blob and no temporary, and ``verify()`` is still clean.

Writers are forked from a ``forkserver`` that has imported refvault already (a fresh interpreter per kill
would spend most of the time budget importing); each is a brand-new single-threaded process, killed with
SIGKILL at a random moment after it opened the store (or while it opens it). One writer runs at a time, so
every check sees a store no process is writing.

The same loop, run against a deliberately broken writer whose catalog deletes a tree row by row in separate
transactions (:func:`install_row_by_row`), must report a violation: that proves the checker can fail.
SIGKILL tests process crashes, not power loss (the page cache survives).
"""

from __future__ import annotations

import itertools
import multiprocessing
import random
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import refvault

SCOPE = refvault.Scope("acme", "ana", "s1")
SEED = 20261203
KILLS = 60
BROKEN_MAX_KILLS = 40
READY_TIMEOUT = 30.0
ROW_PAUSE = 0.02  # seconds between the broken writer's separate removals
PRELOAD = ["refvault", "refvault.vault.core", "refvault.catalog.sql", "refvault.blobs.filesystem", __name__]


# -- the writer (runs in a forked child) -------------------------------------------------------------------------


def install_row_by_row() -> None:
    """Break "a cascade is one transaction": remove each artifact of a cascade in its own transaction."""
    from refvault.catalog.sql import SqlCatalog

    original = SqlCatalog.remove

    def row_by_row(self: SqlCatalog, removals: Sequence[Any], states: Sequence[Any], audit: Sequence[Any]) -> Any:
        deleted: list[str] = []
        for removal in removals:
            deleted += original(self, [removal], states, audit)
            time.sleep(ROW_PAUSE)
        return deleted

    SqlCatalog.remove = row_by_row  # type: ignore[method-assign]


def content(rng: random.Random, tag: str) -> bytes:
    """Mostly inline-sized, sometimes file-sized bytes (so both kinds of blob are created and collected)."""
    size = rng.choice((40, 200, 3000, 40 * 1024))
    return (tag.encode() + b":") * (size // (len(tag) + 1) + 1)


def build_tree(vault: refvault.Vault, rng: random.Random, n: int) -> str:
    """A root, three children, two grandchildren under the first and one of two parents, a great-grandchild;
    sometimes a bystander with the same bytes as a copy (deduplicated, must outlive the cascade's gc)."""
    root = vault.put(SCOPE, content(rng, f"root-{n}")).artifact_id
    level1 = [vault.put(SCOPE, content(rng, f"c{n}-{i}"), derived_from=[root]).artifact_id for i in range(3)]
    level2 = [vault.put(SCOPE, content(rng, f"g{n}-{i}"), derived_from=[level1[0]]).artifact_id for i in range(2)]
    level2.append(vault.put(SCOPE, content(rng, f"m{n}"), derived_from=[level1[1], level1[2]]).artifact_id)
    shared = content(rng, f"gg{n}")
    vault.put(SCOPE, shared, derived_from=[level2[0]])
    if rng.random() < 0.3:
        vault.put(SCOPE, shared)  # an unrelated artifact, the same bytes
    return root


def writer_main(store: str, log: str, seed: int, broken: bool) -> None:
    """The child: open the store, say ``ready``, then build and cascade-delete trees until killed."""
    if broken:
        install_row_by_row()
    out = open(log, "w", buffering=1)  # noqa: SIM115 - line-buffered: every said line is written before the next step
    vault = refvault.Vault.open(store)
    out.write("ready\n")
    rng = random.Random(seed)
    for n in itertools.count():
        if rng.random() < 0.05:
            report = vault.gc(grace=rng.choice((0.0, 5.0)))
            out.write(f"gc {report.blobs_removed}\n")
        root = build_tree(vault, rng, n)
        out.write(f"tree {root}\n")
        vault.delete(SCOPE, root, cascade=True)
        out.write(f"deleted {root}\n")


# -- the checker -----------------------------------------------------------------------------------------------


def _rows(store: Path, sql: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(f"file:{store / 'catalog.db'}?mode=ro", uri=True, timeout=30)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def check_invariants(store: Path) -> list[str]:
    """Checks 1-4 on a store no process is writing; the violations."""
    problems: list[str] = []
    with refvault.Vault.open(store) as vault:
        live = {m.artifact_id: m for m in vault.catalog.manifests()}
        edges = _rows(store, "SELECT source_id, derived_id FROM refvault_lineage")
        marks = {
            a: (state, rule) for a, state, rule in _rows(store, "SELECT artifact_id, state, rule FROM refvault_marks")
        }
        children: dict[str, list[str]] = {}
        parents: dict[str, list[str]] = {}
        for source, derived in edges:
            children.setdefault(source, []).append(derived)
            parents.setdefault(derived, []).append(source)

        def walk(start: str, step: dict[str, list[str]]) -> set[str]:
            seen: set[str] = set()
            frontier = [start]
            while frontier:
                frontier = [n for node in frontier for n in step.get(node, []) if n not in seen]
                seen.update(frontier)
            return seen

        roots = {rule.removeprefix("cascade:") for _, rule in marks.values() if rule and rule.startswith("cascade:")}
        for root in sorted(roots):
            if root in live:
                problems.append(f"cascade:{root} deleted copies but its root is live")
            for below in sorted(walk(root, children)):
                if below in live and live[below].scope == SCOPE:
                    problems.append(f"cascade:{root} left {below}, a copy of the same owner, live")
        for artifact_id in sorted(live):
            for above in sorted(walk(artifact_id, parents)):
                _, rule = marks.get(above, (None, None))
                if above not in live and rule is not None and rule.startswith("cascade:"):
                    problems.append(f"live {artifact_id} derives from {above}, deleted by {rule}")
        for artifact_id in sorted(set(children) | set(parents)):
            if artifact_id not in live and artifact_id not in marks:
                problems.append(f"{artifact_id} is gone without its mark")
        problems += [
            f"verify: {p.kind} {p.digest} of {list(p.artifact_ids)}: {p.detail}" for p in vault.verify().problems
        ]
        audit = vault.verify_audit()
        if not audit.ok:
            problems.append(f"audit chain: {audit.detail}")
    return problems


def recover(store: Path) -> list[str]:
    """Check 5: cascade-delete every live top (a live artifact none of whose sources is live: a root, or what a
    torn cascade left) again, then collect everything; the violations."""
    problems: list[str] = []
    with refvault.Vault.open(store) as vault:
        live = {m.artifact_id: m for m in vault.catalog.manifests()}
        for m in live.values():
            top = not any(source in live for source in m.derived_from)
            if top and vault.catalog.find(m.scope, m.artifact_id) is not None:  # not taken by an earlier cascade
                vault.delete(m.scope, m.artifact_id, cascade=True)
        left = [m.artifact_id for m in vault.catalog.manifests()]
        if left:
            problems.append(f"{len(left)} artifacts live after re-running every cascade: {left[:5]}")
        vault.gc(grace=0)
        if list(vault.blobs.keys()) or vault.blobs.sweep_temp(0, dry_run=True):
            problems.append("blobs or temporaries left after gc(grace=0)")
        problems += [f"verify after gc: {p.kind} {p.digest}: {p.detail}" for p in vault.verify().problems]
    return problems


def check_cascades(store: Path) -> list[str]:
    """Every check, 1-5 (5 only when 1-4 pass: it repairs the store)."""
    return check_invariants(store) or recover(store)


# -- the kill loop ---------------------------------------------------------------------------------------------


@dataclass
class Run:
    kills: int = 0
    trees: int = 0
    cascades: int = 0
    mid_cascade: int = 0  # kills that landed after a tree was built, before its cascade returned
    problems: list[str] = field(default_factory=list)


def _context() -> Any:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def kill_loop(tmp: Path, *, kills: int, seed: int, broken: bool, stop_at_first: bool) -> Run:
    """Start a writer, SIGKILL it at a random moment, check the store; ``kills`` times (or until a violation)."""
    store, context, rng, run = tmp / "store", _context(), random.Random(seed), Run()
    refvault.Vault.open(store).close()
    while run.kills < kills:
        log = tmp / f"writer-{run.kills}.log"
        log.touch()
        child = context.Process(target=writer_main, args=(str(store), str(log), rng.randrange(2**32), broken))
        child.start()
        started = time.monotonic()
        early = rng.random() < 0.1  # during Vault.open
        delay = rng.uniform(0.0, 0.05) if early else rng.uniform(0.0, 0.4)
        try:
            if not early:
                while not log.read_bytes().startswith(b"ready\n"):
                    if not child.is_alive() or time.monotonic() - started > READY_TIMEOUT:
                        pytest.fail(f"the writer never became ready (exit code {child.exitcode})")
                    time.sleep(0.002)
            time.sleep(delay)
            if not child.is_alive():
                pytest.fail(f"the writer exited by itself (exit code {child.exitcode})")
        finally:
            child.kill()  # SIGKILL
            child.join()
        run.kills += 1
        said = log.read_text().splitlines()
        run.trees += sum(line.startswith("tree ") for line in said)
        run.cascades += sum(line.startswith("deleted ") for line in said)
        run.mid_cascade += bool(said) and said[-1].startswith("tree ")
        problems = check_cascades(store)
        if problems:
            run.problems += [f"after kill {run.kills}: {p}" for p in problems]
            if stop_at_first:
                break
    return run


# -- tests -----------------------------------------------------------------------------------------------------


def test_the_checker_passes_whole_cascades_and_catches_a_partial_one(tmp_path: Path) -> None:
    store, rng = tmp_path / "store", random.Random(1)
    with refvault.Vault.open(store) as vault:
        whole = build_tree(vault, rng, 0)
        vault.delete(SCOPE, whole, cascade=True)
        partial = build_tree(vault, rng, 1)
    assert check_invariants(store) == []
    with refvault.Vault.open(store) as vault:  # what a crash between separate transactions would leave
        from refvault.copies import Mark

        m = vault.catalog.find(SCOPE, partial)
        assert m is not None
        mark = Mark("acme", partial, "deleted", vault.clock(), rule=f"cascade:{partial}", owner=SCOPE)
        assert vault.catalog.remove([(SCOPE, partial)], [mark], []) == [partial]
    problems = check_invariants(store)
    assert any(f"cascade:{partial} left" in p for p in problems), problems
    assert any(f"deleted by cascade:{partial}" in p for p in problems), problems
    assert recover(store) == []  # the re-run takes the rest
    assert check_invariants(store) == []


@pytest.mark.slow
def test_random_sigkills_never_leave_half_a_cascade(tmp_path: Path) -> None:
    began = time.monotonic()
    run = kill_loop(tmp_path, kills=KILLS, seed=SEED, broken=False, stop_at_first=False)
    print(
        f"\n{run.kills} kills in {time.monotonic() - began:.1f}s; {run.trees} trees built, "
        f"{run.cascades} cascades completed, {run.mid_cascade} kills during a cascade"
    )
    assert run.kills >= 50
    assert run.cascades >= run.kills // 2, "the writers completed too few cascades to test anything"
    assert run.problems == [], "\n".join(run.problems[:20])


@pytest.mark.slow
def test_the_checker_catches_a_cascade_split_into_transactions(tmp_path: Path) -> None:
    run = kill_loop(tmp_path, kills=BROKEN_MAX_KILLS, seed=SEED + 1, broken=True, stop_at_first=True)
    print(f"\nbroken writer caught after {run.kills} kills: {run.problems[:2]}")
    assert run.problems, f"{run.kills} kills of a writer that splits cascades went unnoticed"
    assert any("cascade:" in p for p in run.problems), run.problems
