"""The lineage graph of an artifact: its ancestors, its copies and the internal copies of its bytes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from refvault import limits
from refvault.blobs.base import BlobKey
from refvault.catalog.base import Manifest
from refvault.copies import LineageGraph, LineageNode, LineageRow
from refvault.errors import InvalidArgument
from refvault.model import Scope
from refvault.policy import DEFAULT_PURPOSE, DEFAULT_RECIPIENT
from refvault.vault.copies.common import MAX_DEPTH, CopiesHost, copy_id, kind_of, parents_of, statuses

__all__ = ["LineageWalk"]


class LineageWalk(CopiesHost):
    """:meth:`lineage` (mixed into the vault)."""

    def lineage(
        self, scope: Scope, artifact_id: str, *, direction: str = "both", depth: int | None = None
    ) -> LineageGraph:
        """The lineage graph of an artifact ``scope`` may read: ancestors (``"up"``), copies (``"down"``) or both.

        Nodes are artifacts (of any principal of the tenant; another principal's shows only its id, kind and
        status) and the internal copies refvault keeps of an artifact's bytes (record indexes, query caches:
        ``copy:<kind>:<digest>``). Artifacts deleted since stay in the graph with their mark. ``depth`` bounds the
        walk each way (None: all of it, up to 100,000 nodes).
        """
        if direction not in ("up", "down", "both"):
            raise InvalidArgument("direction is 'up', 'down' or 'both'")
        if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 0):
            raise InvalidArgument("depth is a whole number of levels (0 or more), or None for all")
        with self._audited("lineage", scope, artifact_id) as facts:
            root = self._authorized(scope, artifact_id, DEFAULT_PURPOSE, DEFAULT_RECIPIENT, facts)
            return self._graph(scope, root, direction, depth)

    def _graph(self, scope: Scope, root: Manifest, direction: str, depth: int | None) -> LineageGraph:
        tenant = root.scope.tenant
        limit = MAX_DEPTH * 1000 if depth is None else depth
        start = LineageRow(root.artifact_id, root.scope.user, root.scope.session, root.digest, root.size)
        rows: dict[str, LineageRow] = {
            root.artifact_id: replace(start, derived_from=root.derived_from, origin=root.origin)
        }
        depths: dict[str, int] = {root.artifact_id: 0}
        edges: set[tuple[str, str, str]] = set()
        truncated = False

        owned_gone: set[str] = set()  # the caller's artifacts deleted since: their marks name their owner

        def mine(node_id: str) -> bool:
            row = rows.get(node_id)
            return row.owned_by(scope) if row is not None else node_id in owned_gone

        def read(ids: list[str]) -> None:
            rows.update(self.catalog.lineage_rows(tenant, ids))
            missing = [i for i in ids if i not in rows]
            owned_gone.update(i for i, m in self.catalog.marks(tenant, missing).items() if m.owner == scope)

        if direction in ("up", "both"):
            frontier = [root.artifact_id]
            level = 0
            while frontier:
                parents = [(p, child) for child in frontier for p in parents_of(rows.get(child))]
                if parents and level >= limit:
                    truncated = True
                    break
                level += 1
                fresh = list(dict.fromkeys(p for p, _ in parents if p not in depths))
                read(fresh)
                for parent, child in parents:
                    edges.add((parent, child, kind_of(rows.get(child))))
                    depths.setdefault(parent, -level)
                frontier = [p for p in fresh if mine(p)]  # another principal's sources are its own business
        if direction in ("down", "both"):
            frontier = [root.artifact_id]
            level = 0
            while frontier and len(depths) <= limits.MAX_LINEAGE_NODES:
                children = self.catalog.derived_ids(tenant, frontier)
                if children and level >= limit:
                    truncated = True
                    break
                level += 1
                fresh = list(dict.fromkeys(c for _, c in children if c not in depths))
                read(fresh)
                for parent, child in children:
                    edges.add((parent, child, kind_of(rows.get(child))))
                    depths.setdefault(child, level)
                frontier = [c for c in fresh if mine(c)]  # what another principal made from a copy is its own
            truncated = truncated or bool(frontier)
        ids = list(depths)
        known = dict(rows)  # every ancestor of every node, for their statuses
        missing = [p for r in rows.values() for p in r.derived_from if p not in known]
        looked: set[str] = set()
        for _ in range(MAX_DEPTH):
            missing = [p for p in dict.fromkeys(missing) if p not in looked]
            if not missing:
                break
            looked.update(missing)
            got = self.catalog.lineage_rows(tenant, missing)
            known.update(got)
            missing = [p for r in got.values() for p in r.derived_from if p not in known]
        marks = self.catalog.marks(tenant, [*ids, *(i for i in looked if i not in depths)])
        status = statuses(ids, known, marks)
        namespace = root.key.namespace
        keys: dict[str, BlobKey] = {}
        if direction in ("down", "both"):  # the internal copies of the bytes of every node the caller may see
            keys = {r.digest: BlobKey(namespace, r.digest) for r in rows.values() if r.owned_by(scope)}
        copies = self._internal_copies(keys.values()) if keys else {}
        nodes: list[LineageNode] = []
        for node_id in ids:
            r = rows.get(node_id)
            mark = marks.get(node_id)
            visible = (r is not None and (r.owned_by(scope) or node_id == root.artifact_id)) or (
                r is None and mark is not None and mark.owner == scope
            )
            shown = r if visible else None
            nodes.append(
                LineageNode(
                    id=node_id,
                    kind=kind_of(r),
                    status=status[node_id],
                    visible=visible,
                    state=None if mark is None or not visible else mark.state,
                    content_hash=None if shown is None else "sha256:" + shown.digest,
                    bytes=None if shown is None else shown.size,
                    transformation=None
                    if shown is None or shown.origin is None
                    else str(shown.origin.get("transformation")),
                    depth=depths[node_id],
                )
            )
            if shown is None:
                continue
            key = keys.get(shown.digest)
            for kind, digest, size in [] if key is None else copies.get(key, []):
                copy = copy_id(kind, digest)
                if copy not in depths:
                    depths[copy] = depths[node_id] + 1
                    nodes.append(
                        LineageNode(
                            id=copy,
                            kind=kind,
                            status=status[node_id],
                            internal=True,
                            content_hash="sha256:" + digest,
                            bytes=size,
                            depth=depths[copy],
                        )
                    )
                edges.add((node_id, copy, kind))
        return LineageGraph(root.artifact_id, tuple(nodes), tuple(sorted(edges)), truncated)

    def _internal_copies(self, keys: Iterable[BlobKey]) -> dict[BlobKey, list[tuple[str, str, int]]]:
        """(kind, digest, size) of every internal copy kept of each blob's bytes (indexes, caches), in a few
        batched reads (a 100,000-node walk must not be one read per node); a blob without any is absent."""
        found = self.catalog.derivations_of_many(list(dict.fromkeys(keys)))
        return {key: [(d.kind, d.digest, d.size) for d in found[key]] for key in found}
