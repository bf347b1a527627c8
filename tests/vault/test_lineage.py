"""Lineage graphs and receipts of derived copies, on every backend (memory, embedded, S3 + PostgreSQL).

* A chain built by a real :class:`refvault.Toolbox` (each output computed from a ``Ref`` to the one before)
  gives exact nodes, edges and depths each way; ``depth`` truncates and says so; ``tree()`` draws the chain.
* Another principal's copy shows only its id, kind and status; a record query's index shows as an internal
  ``copy:<kind>:<digest16>`` node.
* A receipt names the copy's own bytes and its source's exact content hash; its ``receipt_hash`` is the SHA-256
  of the canonical JSON of every other field; editing the stored origin behind refvault's back is an
  :class:`IntegrityError`.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace

import pytest

from refvault import Vault, read
from refvault.catalog.memory import MemoryCatalog
from refvault.catalog.schema import artifacts
from refvault.catalog.sql import SqlCatalog
from refvault.copies import LineageGraph, Receipt
from refvault.errors import IntegrityError, InvalidArgument, NotFound
from refvault.model import Descriptor
from tests.vault.copies_support import (
    BOB,
    JSONL,
    OTHER,
    OWNER,
    STRANGER,
    TEXT,
    call,
    receipt_hash_of,
    records,
    toolbox,
)


def _three_levels(vault: Vault) -> tuple[Descriptor, Descriptor, Descriptor]:
    """root -> shout(root) -> rows(shout): two tool outputs of a real toolbox, each from a Ref to the one before."""
    box = toolbox(vault)
    root = vault.put(OWNER, TEXT, media_type="text/plain")
    one = call(box, "shout", doc=root.artifact_id)
    two = call(box, "rows", doc=one)
    return root, vault.describe(OWNER, one), vault.describe(OWNER, two)


def _shape(graph: LineageGraph) -> dict[str, tuple[str, int, str]]:
    return {n.id: (n.kind, n.depth, n.status) for n in graph.nodes}


def test_a_toolbox_output_records_its_ref_input_as_its_source(vault: Vault) -> None:
    root, one, two = _three_levels(vault)
    assert one.derived_from == (root.artifact_id,)
    assert two.derived_from == (one.artifact_id,)
    lineage = dict(one.retrieval["lineage"])
    assert lineage["kind"] == "tool_output"
    assert lineage["status"] == "current"
    assert lineage["byte_identical_to_source"] is False
    assert list(lineage["sources"]) == [root.artifact_id]  # ids only: source hashes are in the owner's receipt
    assert vault.read_bytes(OWNER, one.artifact_id) == TEXT.upper()
    assert "lineage" not in root.retrieval  # captured directly, never marked


def test_the_graph_of_a_three_level_chain_is_exact(vault: Vault) -> None:
    root, one, two = _three_levels(vault)
    r, a, b = root.artifact_id, one.artifact_id, two.artifact_id
    graph = vault.lineage(OWNER, r)
    assert graph.root == r
    assert graph.truncated is False
    assert _shape(graph) == {
        r: ("artifact", 0, "current"),
        a: ("tool_output", 1, "current"),
        b: ("tool_output", 2, "current"),
    }
    assert graph.edges == tuple(sorted([(r, a, "tool_output"), (a, b, "tool_output")]))
    assert graph.node(a).content_hash == one.content_hash
    assert graph.node(a).bytes == one.retrieval["size"]
    assert graph.node(a).transformation == "tool_call"
    assert graph.node(r).transformation is None
    assert graph.to_dict() == {
        "root": r,
        "nodes": [n.to_dict() for n in graph.nodes],
        "edges": [{"source": s, "derived": d, "kind": k} for s, d, k in graph.edges],
        "truncated": False,
    }
    # from the middle, both ways: the ancestor at -1, the copy at +1
    middle = vault.lineage(OWNER, a)
    assert _shape(middle) == {
        r: ("artifact", -1, "current"),
        a: ("tool_output", 0, "current"),
        b: ("tool_output", 1, "current"),
    }
    assert set(middle.edges) == {(r, a, "tool_output"), (a, b, "tool_output")}


def test_direction_up_and_down(vault: Vault) -> None:
    root, one, two = _three_levels(vault)
    r, a, b = root.artifact_id, one.artifact_id, two.artifact_id
    up = vault.lineage(OWNER, b, direction="up")
    assert {n.id: n.depth for n in up.nodes} == {b: 0, a: -1, r: -2}
    assert set(up.edges) == {(r, a, "tool_output"), (a, b, "tool_output")}
    assert up.truncated is False
    down = vault.lineage(OWNER, a, direction="down")
    assert {n.id: n.depth for n in down.nodes} == {a: 0, b: 1}  # no ancestor
    assert down.edges == ((a, b, "tool_output"),)
    assert [n.id for n in vault.lineage(OWNER, r, direction="up").nodes] == [r]
    assert [n.id for n in vault.lineage(OWNER, b, direction="down").nodes] == [b]


def test_depth_truncates_and_says_so(vault: Vault) -> None:
    root, one, two = _three_levels(vault)
    r, a, b = root.artifact_id, one.artifact_id, two.artifact_id
    one_level = vault.lineage(OWNER, r, direction="down", depth=1)
    assert {n.id: n.depth for n in one_level.nodes} == {r: 0, a: 1}
    assert one_level.edges == ((r, a, "tool_output"),)
    assert one_level.truncated is True
    assert vault.lineage(OWNER, r, direction="down", depth=2).truncated is False
    assert vault.lineage(OWNER, r, direction="down", depth=5).truncated is False
    nothing = vault.lineage(OWNER, r, direction="down", depth=0)
    assert [n.id for n in nothing.nodes] == [r]
    assert nothing.truncated is True
    up_one = vault.lineage(OWNER, b, direction="up", depth=1)
    assert {n.id: n.depth for n in up_one.nodes} == {b: 0, a: -1}
    assert up_one.truncated is True
    assert vault.lineage(OWNER, b, direction="up", depth=2).truncated is False
    both = vault.lineage(OWNER, a, depth=1)
    assert {n.id: n.depth for n in both.nodes} == {r: -1, a: 0, b: 1}
    assert both.truncated is False
    assert "(more beyond the requested depth)" in one_level.tree()


def test_the_tree_text_shows_the_chain(vault: Vault) -> None:
    root, one, two = _three_levels(vault)
    r, a, b = root.artifact_id, one.artifact_id, two.artifact_id
    sizes = {d.artifact_id: d.retrieval["size"] for d in (root, one, two)}
    assert vault.lineage(OWNER, r).tree() == "\n".join(
        [
            f"{r} (artifact) {sizes[r]} B",
            f"  └ {a} (tool_output) {sizes[a]} B",
            f"    └ {b} (tool_output) {sizes[b]} B",
        ]
    )
    assert vault.lineage(OWNER, b).tree() == "\n".join(
        [
            f"{b} (tool_output) {sizes[b]} B",
            f"  ^ {a} (tool_output) {sizes[a]} B",
            f"    ^ {r} (artifact) {sizes[r]} B",
        ]
    )
    vault.put(OWNER, b"newer", supersedes=r)
    assert vault.lineage(OWNER, r).tree().splitlines()[2] == f"    └ {b} (tool_output) {sizes[b]} B [stale]"


def test_a_copy_of_two_sources_has_two_edges(vault: Vault) -> None:
    box = toolbox(vault)
    a = vault.put(OWNER, b"first\n", media_type="text/plain")
    b = vault.put(OWNER, b"second\n", media_type="text/plain")
    both = call(box, "join", doc=a.artifact_id, extra=b.artifact_id)
    assert vault.describe(OWNER, both).derived_from == (a.artifact_id, b.artifact_id)
    up = vault.lineage(OWNER, both, direction="up")
    assert {n.id: n.depth for n in up.nodes} == {both: 0, a.artifact_id: -1, b.artifact_id: -1}
    assert set(up.edges) == {(a.artifact_id, both, "tool_output"), (b.artifact_id, both, "tool_output")}
    receipt = vault.receipt(OWNER, both)
    assert [dict(s) for s in receipt.sources] == [
        {"artifact_id": a.artifact_id, "content_hash": a.content_hash},
        {"artifact_id": b.artifact_id, "content_hash": b.content_hash},
    ]


def test_another_principals_copy_shows_only_its_id_kind_and_status(vault: Vault) -> None:
    box = toolbox(vault)
    root = vault.put(OWNER, TEXT, media_type="text/plain")
    vault.share(OWNER, root.artifact_id, to=BOB)
    theirs = call(box, "shout", OTHER, doc=root.artifact_id)  # bob's tool reads ana's artifact through the grant
    assert vault.describe(OTHER, theirs).derived_from == (root.artifact_id,)
    node = vault.lineage(OWNER, root.artifact_id).node(theirs)
    assert node.to_dict() == {
        "id": theirs,
        "kind": "tool_output",
        "status": "current",
        "depth": 1,
        "visible": False,
    }
    assert node.content_hash is None
    assert node.bytes is None
    # bob sees his own copy whole, and ana's root (the graph's root is readable to him) as well
    mine = vault.lineage(OTHER, theirs)
    assert mine.node(theirs).visible
    assert mine.node(theirs).content_hash is not None
    with pytest.raises(NotFound):
        vault.receipt(STRANGER, theirs)


def test_a_record_index_is_an_internal_copy_node(vault: Vault) -> None:
    box = toolbox(vault)
    root = vault.put(OWNER, TEXT, media_type="text/plain")
    table = call(box, "rows", doc=root.artifact_id)
    assert not [n for n in vault.lineage(OWNER, root.artifact_id).nodes if n.internal]
    page = read.query(vault, OWNER, table, limit=2)
    assert page["returned_records"] == 2
    graph = vault.lineage(OWNER, root.artifact_id)
    internal = [n for n in graph.nodes if n.internal]
    assert len(internal) == 1
    index = internal[0]
    assert index.kind.startswith("records")
    digest = index.content_hash
    assert digest is not None
    assert index.id == f"copy:{index.kind}:{digest.removeprefix('sha256:')[:16]}"
    assert index.depth == 2
    assert index.status == "current"
    assert index.bytes is not None
    assert index.bytes > 0
    assert (table, index.id, index.kind) in graph.edges
    assert vault.lineage(OWNER, root.artifact_id, direction="up").nodes[0].id == root.artifact_id
    assert not [n for n in vault.lineage(OWNER, table, direction="up").nodes if n.internal]  # only downward


def test_lineage_checks_its_arguments_and_the_reader(vault: Vault) -> None:
    root = vault.put(OWNER, TEXT)
    with pytest.raises(InvalidArgument):
        vault.lineage(OWNER, root.artifact_id, direction="sideways")
    for bad in (-1, 1.5, True):
        with pytest.raises(InvalidArgument):
            vault.lineage(OWNER, root.artifact_id, depth=bad)  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        vault.lineage(OTHER, root.artifact_id)  # not shared: as absent as a random id
    with pytest.raises(NotFound):
        vault.lineage(OWNER, "art_" + "a" * 26)


# -- receipts -----------------------------------------------------------------------------------------------------


def test_a_receipt_names_the_copy_and_its_sources_exact_bytes(vault: Vault) -> None:
    root, one, _ = _three_levels(vault)
    receipt = vault.receipt(OWNER, one.artifact_id)
    assert isinstance(receipt, Receipt)
    assert receipt.artifact_id == one.artifact_id
    assert receipt.content_hash == one.content_hash != root.content_hash  # its own bytes, never its source's
    assert receipt.size == one.retrieval["size"]
    assert receipt.kind == "tool_output"
    assert receipt.transformation == "tool_call"
    assert receipt.version == "1"
    assert [dict(s) for s in receipt.sources] == [{"artifact_id": root.artifact_id, "content_hash": root.content_hash}]
    assert receipt.policy_version is None
    assert dict(receipt.counts) == {}
    assert receipt.counts_changed is False
    assert receipt.coverage_changed is False
    assert receipt.created_at == one.created_at
    body = receipt.to_dict()
    assert set(body) == {
        "artifact_id",
        "content_hash",
        "size",
        "kind",
        "transformation",
        "version",
        "sources",
        "policy_version",
        "counts",
        "counts_changed",
        "coverage_changed",
        "created_at",
        "receipt_hash",
    }
    claimed = body.pop("receipt_hash")
    assert claimed == receipt_hash_of(body) == receipt.receipt_hash
    assert json.loads(json.dumps(receipt.to_dict())) == receipt.to_dict()  # plain JSON
    assert vault.receipt(OWNER, one.artifact_id) == receipt  # the same stored facts, the same receipt


def test_a_directly_captured_artifact_has_no_receipt(vault: Vault) -> None:
    plain = vault.put(OWNER, b"plain")
    with pytest.raises(InvalidArgument, match="captured directly"):
        vault.receipt(OWNER, plain.artifact_id)
    derived = vault.put(OWNER, b"copy", derived_from=[plain.artifact_id])
    assert vault.receipt(OWNER, derived.artifact_id).sources[0]["content_hash"] == plain.content_hash
    with pytest.raises(NotFound):
        vault.receipt(OTHER, derived.artifact_id)


def _set_origin(vault: Vault, artifact_id: str, origin: str) -> None:
    """Overwrite the stored origin of a row, behind refvault's back, keeping its MAC."""
    catalog = vault.catalog
    if isinstance(catalog, MemoryCatalog):
        row = catalog._rows[artifact_id]
        catalog._rows[artifact_id] = replace(row, manifest=replace(row.manifest, origin=json.loads(origin)))
    elif vault.location is not None:  # the embedded store: the SQLite file itself, with the sqlite3 module
        with sqlite3.connect(vault.location / "catalog.db", timeout=30) as db:
            changed = db.execute(
                "UPDATE refvault_artifacts SET origin = ? WHERE artifact_id = ?", (origin, artifact_id)
            ).rowcount
        db.close()
        assert changed == 1
    else:
        assert isinstance(catalog, SqlCatalog)
        with catalog._write() as conn, conn.begin():
            update = artifacts.update().where(artifacts.c.artifact_id == artifact_id).values(origin=origin)
            assert conn.execute(update).rowcount == 1


def _stored_origin(vault: Vault, artifact_id: str) -> str:
    manifest = vault.catalog.find(OWNER, artifact_id)
    assert manifest is not None
    assert manifest.origin is not None
    return json.dumps(dict(manifest.origin), sort_keys=True, separators=(",", ":"))


def test_editing_the_stored_origin_fails_the_receipt(vault: Vault) -> None:
    root, one, _ = _three_levels(vault)
    before = vault.receipt(OWNER, one.artifact_id)
    original = _stored_origin(vault, one.artifact_id)
    forged = json.loads(original)
    forged["sources"][0]["content_hash"] = "sha256:" + "0" * 64  # claim other source bytes
    _set_origin(vault, one.artifact_id, json.dumps(forged))
    with pytest.raises(IntegrityError) as caught:
        vault.receipt(OWNER, one.artifact_id)
    assert caught.value.kind == "manifest"
    with pytest.raises(IntegrityError):
        vault.describe(OWNER, one.artifact_id)
    forged = json.loads(original)
    forged["kind"] = "redaction"
    _set_origin(vault, one.artifact_id, json.dumps(forged))
    with pytest.raises(IntegrityError):
        vault.receipt(OWNER, one.artifact_id)
    assert [p.artifact_ids for p in vault.verify().problems if p.kind == "manifest"] == [(one.artifact_id,)]
    _set_origin(vault, one.artifact_id, original)  # put back exactly: it verifies again
    assert vault.receipt(OWNER, one.artifact_id) == before
    assert root.artifact_id  # the source itself was never touched


def test_a_receipt_survives_its_sources_deletion(vault: Vault) -> None:
    root = vault.put(OWNER, records(4), media_type=JSONL)
    copy = vault.put(OWNER, b"summary", derived_from=[root.artifact_id])
    before = vault.receipt(OWNER, copy.artifact_id)
    vault.delete(OWNER, root.artifact_id)
    assert vault.receipt(OWNER, copy.artifact_id) == before  # still names the exact bytes it came from
    assert vault.lineage_status(OWNER, copy.artifact_id) == "revoked"
