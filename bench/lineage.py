"""Lineage benchmark: ``vault.lineage(direction="down")`` of a 100,000-node graph against a plain recursive CTE.

Run with ``.venv/bin/python bench/lineage.py``; ``--quick`` builds 10,000 nodes, ``--nodes N`` any count (at most
``refvault.limits.MAX_LINEAGE_NODES``, the most one walk visits).

The graph is one root and a tree of derived artifacts under it, ``--fanout`` (default 4) children per node,
numbered breadth first (node ``i`` derives from node ``(i - 1) // fanout``): 100,000 nodes are nine levels deep.
Every node is a real artifact of an embedded store: its own bytes (inline in the catalog), a MAC'd manifest
with ``derived_from`` and a ``tool_output`` origin naming its source's content hash, and its row in the
``refvault_lineage`` reverse index.

1. ``vault.lineage(scope, root, direction="down")`` (every node's row: owner, bytes, sources, origin; the marks, the
   statuses, the internal copies of each node's bytes; audited) against, as the baseline, a plain recursive
   CTE over ``refvault_lineage`` in the same SQLite file (ids and depths only), run with the ``sqlite3``
   module. Latencies in ms, interleaved repetitions after a discarded warm-up round; ratio = ours / baseline.
1a. The same CTE joined with ``refvault_artifacts`` to fetch every node's row (no MAC check), for context:
   how much of the gap is just reading the rows.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness import (
    SCOPE,
    Row,
    command_line,
    interleave,
    load_average,
    machine,
    make_parser,
    print_table,
    timed_ms,
    total_time,
    work_dir,
)

from refvault import limits
from refvault.catalog.base import Manifest, Publication
from refvault.ids import namespace_of, new_artifact_id
from refvault.vault.core import Vault
from refvault.vault.ingest import ingest

BATCH = 2000  # manifests per publishing transaction

DOWN_CTE = """
WITH RECURSIVE down(id, depth) AS (
    SELECT ?, 0
    UNION
    SELECT l.derived_id, d.depth + 1 FROM refvault_lineage AS l JOIN down AS d ON l.source_id = d.id
    WHERE l.tenant = ?
)
SELECT id, depth FROM down
"""
DOWN_CTE_ROWS = f"""
{DOWN_CTE.replace("SELECT id, depth FROM down", "")}
SELECT d.depth, a.* FROM down AS d JOIN refvault_artifacts AS a ON a.artifact_id = d.id AND a.tenant = ?
"""


def build(vault: Vault, nodes: int, fanout: int) -> tuple[str, int]:
    """Publish ``nodes`` artifacts as one tree under a root; return the root's id and the tree's depth.

    The manifests go straight to ``catalog.publish`` in batches of :data:`BATCH` ``Publication`` records rather
    than one ``vault.put`` each: a put is one durable (fsync'd) catalog commit, so 100,000 of them take minutes,
    while ``publish`` is the very code a put ends in (the same rows, the same MACs, the lineage index written in
    the same transaction), only without a commit per artifact and without the put's audit entry. What the
    benchmark reads is therefore exactly what puts would have left.
    """
    namespace = namespace_of(SCOPE.tenant)
    now = datetime.now(UTC)
    ids: list[str] = []
    digests: list[str] = []
    depth = [0] * nodes
    pending: list[Publication] = []
    for i in range(nodes):
        got = ingest(b"node %d of the lineage benchmark\n" % i, vault.blobs, namespace=namespace, inline_max=4096)
        parent = (i - 1) // fanout if i else None
        origin: dict[str, Any] | None = None
        derived_from: tuple[str, ...] = ()
        if parent is not None:
            depth[i] = depth[parent] + 1
            derived_from = (ids[parent],)
            origin = {
                "kind": "tool_output",
                "transformation": "tool_call",
                "version": "1",
                "sources": [{"artifact_id": ids[parent], "content_hash": "sha256:" + digests[parent]}],
            }
        manifest = Manifest(
            artifact_id=new_artifact_id(),
            scope=SCOPE,
            digest=got.digest,
            size=got.size,
            media_type="text/plain",
            disclosure="model",
            created_at=now,
            completeness={"status": "complete", "omissions": []},
            derived_from=derived_from,
            origin=origin,
        )
        ids.append(manifest.artifact_id)
        digests.append(got.digest)
        pending.append(Publication(manifest, got.record(namespace)))
        if len(pending) == BATCH or i == nodes - 1:
            published = vault.catalog.publish(pending, lambda: None)
            assert all(isinstance(m, Manifest) for m in published), published[:1]
            pending = []
    return ids[0], max(depth)


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser(__doc__, quick="10,000 nodes", reps="timed repetitions (default 5, quick 3)")
    parser.add_argument("--nodes", type=int, default=None, help="nodes in the graph (default 100,000)")
    parser.add_argument("--fanout", type=int, default=4, help="children per node (default 4)")
    args: argparse.Namespace = parser.parse_args(argv)
    nodes = args.nodes if args.nodes is not None else 10_000 if args.quick else 100_000
    if not 2 <= nodes <= limits.MAX_LINEAGE_NODES or args.fanout < 1:
        raise SystemExit(f"--nodes is 2 to {limits.MAX_LINEAGE_NODES:,}; --fanout at least 1")
    reps = max(1, args.reps) if args.reps is not None else 3 if args.quick else 5
    began = time.perf_counter()
    print(f"refvault lineage benchmark: `{command_line('lineage.py', argv)}`")
    print(machine())
    print(f"load average at start: {load_average()}", flush=True)
    with work_dir("lineage", args.keep) as work:
        store: Path = work / "store"
        with Vault.open(store) as vault:
            print(f"building {nodes:,} nodes ...", file=sys.stderr, flush=True)
            started = time.perf_counter()
            root, depth = build(vault, nodes, args.fanout)
            built = time.perf_counter() - started
            print(f"graph: {nodes:,} artifacts, one root, fan-out {args.fanout}, {depth} levels below the root")
            print(f"built in {built:.1f} s ({nodes / built:,.0f} manifests/s through catalog.publish)")
            db = sqlite3.connect(f"file:{store / 'catalog.db'}?mode=ro", uri=True)
            try:
                graph = vault.lineage(SCOPE, root, direction="down")  # checked once, before timing
                cte = db.execute(DOWN_CTE, (root, SCOPE.tenant)).fetchall()
                assert len(graph.nodes) == len(cte) == nodes, (len(graph.nodes), len(cte))
                assert {n.id: n.depth for n in graph.nodes} == dict(cte)
                assert not graph.truncated
                assert len(db.execute(DOWN_CTE_ROWS, (root, SCOPE.tenant, SCOPE.tenant)).fetchall()) == nodes

                def ours(_: int) -> float:
                    return timed_ms(lambda: vault.lineage(SCOPE, root, direction="down"))

                def plain(_: int) -> float:
                    return timed_ms(lambda: db.execute(DOWN_CTE, (root, SCOPE.tenant)).fetchall())

                def rows(_: int) -> float:
                    return timed_ms(lambda: db.execute(DOWN_CTE_ROWS, (root, SCOPE.tenant, SCOPE.tenant)).fetchall())

                print(f"timing {reps} interleaved repetitions ...", file=sys.stderr, flush=True)
                mine, base, with_rows = interleave(reps, [ours, plain, rows], warmup=True)
            finally:
                db.close()
    label = f"lineage down, {nodes:,} nodes"
    table = [
        Row("1", label, "ms", "vault.lineage", mine, "recursive CTE", base, kind="slowdown"),
        Row("1a", label, "ms", "vault.lineage", mine, "CTE + artifact rows", with_rows, kind="slowdown"),
    ]
    print(f"method: {reps} interleaved repetitions after a discarded warm-up round; medians shown;")
    print("        ratio = median of per-repetition ratios of latencies, ours / baseline (lower is better)")
    print()
    print_table(table)
    print()
    print(f"result: vault.lineage {table[0].ratio:.1f}x the time of a plain recursive CTE over the same index")
    print("notes: 1 the CTE returns ids and depths only; vault.lineage also reads every node's row (owner, size,")
    print("         sources, origin), the marks and the internal copies of every node, folds the statuses, audits.")
    print("       1a the same CTE joined with every node's artifact row (no statuses, no copies).")
    print(total_time(began))
    return 0


if __name__ == "__main__":
    sys.exit(main())
