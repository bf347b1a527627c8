"""Cascade deletion of an artifact and its copies, on every backend: an exact inventory, nothing left readable,
and bytes freed by ``gc`` only once no other artifact holds them.

The tree (ana's unless said otherwise)::

    R (JSON Lines, file-sized)            query -> record index of R
    ├── t1 = shout(R)       toolbox        window(t1): a disclosure
    │   ├── t2 = rows(t1)   toolbox        read_bytes(t2): a disclosure; shared with bob; a link to it
    │   │   └── t3 (put)    JSON Lines     query -> record index; ``twin`` (unrelated) holds the same bytes
    │   │       └── t4 (put)
    │   └── j = join(t1, s1) toolbox (two sources)
    ├── s1 (put)
    │   ├── j
    │   └── held (put)      under a hold
    ├── red = redact(R)     redaction      query -> record index of red
    │   └── red_use (put)
    └── theirs = shout(R)   bob's, through a grant on R: the same bytes as t1 (deduplicated)

With the hold in place, the cascade keeps ``held`` and its ancestors (``s1``, ``R``) and deletes the rest;
after the hold is released a second cascade takes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from refvault import Vault, read
from refvault.blobs.base import BlobKey
from refvault.copies import DeletionReport
from refvault.errors import Held, NotFound
from refvault.ids import namespace_of
from refvault.model import Descriptor
from tests.vault.copies_support import BOB, JSONL, OTHER, OWNER, call, records, toolbox

RECORDS = 900  # JSON Lines records: ~45 KiB, over the inline limit, so R and t3 are blob files


@dataclass
class Tree:
    ids: dict[str, str]
    described: dict[str, Descriptor]
    twin: Descriptor
    link: str
    grants: dict[str, str]

    def __getitem__(self, name: str) -> str:
        return self.ids[name]


def _index(vault: Vault, artifact_id: str) -> tuple[str, str, int]:
    """Run a record query on an artifact (a disclosure) and return its record index: (copy id, kind, bytes)."""
    page = read.query(vault, OWNER, artifact_id, limit=3)
    assert page["returned_records"] == 3
    manifest = vault.catalog.find(OWNER, artifact_id)
    assert manifest is not None
    (derivation,) = vault.catalog.derivations_of_many([manifest.key])[manifest.key]
    return f"copy:{derivation.kind}:{derivation.digest[:16]}", derivation.kind, derivation.size


def _build(vault: Vault) -> Tree:
    box = toolbox(vault)
    ids: dict[str, str] = {}
    ids["R"] = vault.put(OWNER, records(RECORDS, "r"), media_type=JSONL).artifact_id
    ids["t1"] = call(box, "shout", doc=ids["R"])
    ids["t2"] = call(box, "rows", doc=ids["t1"])
    t3_bytes = records(RECORDS, "t3")
    ids["t3"] = vault.put(OWNER, t3_bytes, media_type=JSONL, derived_from=[ids["t2"]]).artifact_id
    ids["t4"] = vault.put(OWNER, b"level four", derived_from=[ids["t3"]]).artifact_id
    ids["s1"] = vault.put(OWNER, b"a sibling", media_type="text/plain", derived_from=[ids["R"]]).artifact_id
    ids["j"] = call(box, "join", doc=ids["t1"], extra=ids["s1"])
    ids["held"] = vault.put(OWNER, b"kept for a case", derived_from=[ids["s1"]]).artifact_id
    ids["red"] = vault.redact(OWNER, ids["R"]).artifact_id
    ids["red_use"] = vault.put(OWNER, b"from the redaction", derived_from=[ids["red"]]).artifact_id
    grants = {"R": vault.share(OWNER, ids["R"], to=BOB).grant_id, "t2": vault.share(OWNER, ids["t2"], to=BOB).grant_id}
    ids["theirs"] = call(box, "shout", OTHER, doc=ids["R"])
    twin = vault.put(OWNER, t3_bytes, media_type=JSONL)  # unrelated, the same bytes as t3
    # disclosures (and record indexes) before the deletion
    assert vault.read_bytes(OWNER, ids["t2"])
    assert read.window(vault, OWNER, ids["t1"], lines=[0, 5])["returned"] == 5
    link = vault.link(OWNER, ids["t2"], recipient="export")
    assert vault.open_link(link.rsplit("/", 1)[1]).descriptor.artifact_id == ids["t2"]
    described = {name: vault.describe(OTHER if name == "theirs" else OWNER, i) for name, i in ids.items()}
    return Tree(ids, described, twin, link, grants)


def _entry(d: Any) -> dict[str, Any]:
    return {
        "artifact_id": d.artifact_id,
        "recipient": d.recipient,
        "at": d.to_json()["at"],
        "excerpt_hash": d.excerpt_hash,
    }


def _key(row: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(row[k]) for k in sorted(row))


def _same(rows: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert sorted(rows, key=_key) == sorted(expected, key=_key)


def _deleted_row(tree: Tree, name: str) -> dict[str, Any]:
    d = tree.described[name]
    kind = "artifact" if name == "R" else "redaction" if name == "red" else "tool_output"
    return {"id": d.artifact_id, "kind": kind, "bytes": d.retrieval["size"]}


def _gone(vault: Vault, tree: Tree, name: str) -> None:
    """Every way to read the artifact finds nothing."""
    artifact_id = tree[name]
    for call_read in (
        lambda: vault.describe(OWNER, artifact_id),
        lambda: vault.read_bytes(OWNER, artifact_id),
        lambda: vault.stream(OWNER, artifact_id),
        lambda: vault.lineage_status(OWNER, artifact_id),
        lambda: vault.receipt(OWNER, artifact_id),
        lambda: read.window(vault, OWNER, artifact_id),
        lambda: read.query(vault, OWNER, artifact_id),
        lambda: vault.describe(OTHER, artifact_id),
    ):
        with pytest.raises(NotFound):
            call_read()


def _blob_present(vault: Vault, digest: str) -> bool:
    key = BlobKey(namespace_of(OWNER.tenant), digest.removeprefix("sha256:"))
    return vault.catalog.blob(key) is not None


def test_a_cascade_reports_exactly_what_it_deleted_kept_and_cannot_erase(vault: Vault) -> None:
    tree = _build(vault)
    index_r = _index(vault, tree["R"])
    index_t3 = _index(vault, tree["t3"])
    index_red = _index(vault, tree["red"])
    assert _index(vault, tree.twin.artifact_id) == index_t3  # the same bytes: the same record index
    hold = vault.hold(OWNER, tree["held"], reason="litigation 42")
    doomed = ["t1", "t2", "t3", "t4", "j", "red", "red_use"]
    expected_disclosures = [_entry(d) for name in doomed for d in vault.disclosures(OWNER, tree[name])]
    assert {e["artifact_id"] for e in expected_disclosures} >= {tree["t1"], tree["t2"], tree["t3"], tree["red"]}
    assert any(
        e["excerpt_hash"] == tree.described["t2"].content_hash.removeprefix("sha256:") for e in expected_disclosures
    )
    lineage_before = vault.lineage(OWNER, tree["R"])
    assert {n.id for n in lineage_before.nodes} >= set(tree.ids.values()) | {index_r[0], index_t3[0], index_red[0]}

    with pytest.raises(Held):
        vault.delete(OWNER, tree["held"])  # without cascade, a hold refuses
    report = vault.delete(OWNER, tree["R"], cascade=True)

    assert isinstance(report, DeletionReport)
    assert report.root == tree["R"]
    _same(
        report.deleted,
        [_deleted_row(tree, name) for name in doomed]
        + [{"id": index_red[0], "kind": index_red[1], "bytes": index_red[2]}],
    )
    _same(
        report.kept,
        [
            {"id": tree["theirs"], "kind": "tool_output", "reason": "other owner"},
            {"id": tree["held"], "kind": "tool_output", "reason": "hold"},
            {"id": tree["s1"], "kind": "tool_output", "reason": "a held copy derives from it"},
            {"id": tree["R"], "kind": "artifact", "reason": "a held copy derives from it"},
            {"id": index_t3[0], "kind": index_t3[1], "reason": "shared bytes"},  # twin still holds t3's bytes
        ],
    )
    assert report.grants_revoked == [tree.grants["t2"]]  # R is kept: its grant stays
    _same(report.not_erasable, expected_disclosures)
    assert DeletionReport.from_dict(report.to_dict()) == report

    for name in doomed:
        _gone(vault, tree, name)
        mark = vault.catalog.marks(OWNER.tenant, [tree[name]])[tree[name]]
        assert (mark.state, mark.rule, mark.owner) == ("deleted", f"cascade:{tree['R']}", OWNER)
    with pytest.raises(NotFound):
        vault.open_link(tree.link.rsplit("/", 1)[1])
    assert [g.revoked_at is not None for g in vault.grants(OWNER, tree["R"])] == [False]
    # what was kept is readable, and says what happened upstream
    for name in ("R", "s1", "held"):
        assert vault.read_bytes(OWNER, tree[name])
    assert vault.lineage_status(OTHER, tree["theirs"]) == "current"  # R is still there
    graph = vault.lineage(OWNER, tree["R"])
    assert {graph.node(tree[n]).state for n in doomed} == {"deleted"}
    assert {graph.node(tree[n]).status for n in doomed} == {"revoked"}
    assert vault.holds(OWNER, tree["held"]) == [hold]

    # release the hold: a second cascade takes the rest
    vault.release(OWNER, tree["held"], hold.hold_id)
    assert vault.holds(OWNER, tree["held"]) == []
    expected_rest = [_entry(d) for name in ("R", "s1", "held") for d in vault.disclosures(OWNER, tree[name])]
    second = vault.delete(OWNER, tree["R"], cascade=True)
    _same(
        second.deleted,
        [_deleted_row(tree, name) for name in ("R", "s1", "held")]
        + [{"id": index_r[0], "kind": index_r[1], "bytes": index_r[2]}],
    )
    _same(second.kept, [{"id": tree["theirs"], "kind": "tool_output", "reason": "other owner"}])
    assert second.grants_revoked == [tree.grants["R"]]
    _same(second.not_erasable, expected_rest)
    assert any(e["recipient"] == "tool:shout" for e in second.not_erasable)  # bob's tool read R: that left too
    for name in ("R", "s1", "held"):
        _gone(vault, tree, name)
    assert vault.lineage_status(OTHER, tree["theirs"]) == "revoked"
    with pytest.raises(NotFound):
        vault.delete(OWNER, tree["R"], cascade=True)  # nothing left to delete


def test_gc_frees_the_bytes_of_a_cascade_unless_another_artifact_holds_them(vault: Vault) -> None:
    tree = _build(vault)
    _index(vault, tree["t3"])
    _index(vault, tree["red"])
    twin_key = vault.catalog.find(OWNER, tree.twin.artifact_id)
    assert twin_key is not None
    red = vault.catalog.find(OWNER, tree["red"])
    assert red is not None
    red_index = vault.catalog.derivations_of_many([red.key])[red.key]
    mine = [n for n in tree.ids if n != "theirs"]
    digests = {name: tree.described[name].content_hash for name in mine}
    assert all(_blob_present(vault, h) for h in digests.values())
    report = vault.delete(OWNER, tree["R"], cascade=True)
    assert {row["id"] for row in report.deleted} >= {tree[n] for n in mine}
    assert all(_blob_present(vault, h) for h in digests.values())  # deletion alone frees nothing

    collected = vault.gc(grace=0)

    shared = {"t3", "t1"}  # twin holds t3's bytes; bob's copy is shout(R) too: t1's bytes, deduplicated
    assert tree.described["theirs"].content_hash == digests["t1"]
    assert collected.blobs_removed >= len(set(digests.values())) - len(shared)
    for name, digest in digests.items():
        assert _blob_present(vault, digest) is (name in shared), name
    assert vault.read_bytes(OWNER, tree.twin.artifact_id) == records(RECORDS, "t3")
    (twin_index,) = vault.catalog.derivations_of_many([twin_key.key])[twin_key.key]  # the shared bytes' index stays
    assert read.query(vault, OWNER, tree.twin.artifact_id, limit=1)["returned_records"] == 1
    assert twin_index.kind.startswith("records")
    assert not _blob_present(vault, red_index[0].digest)  # the deleted redaction's index went with it
    assert vault.read_bytes(OTHER, tree["theirs"])  # bob's copy is his own bytes
    assert vault.verify().problems == []
    assert vault.gc(grace=0).blobs_removed == 0


def test_without_cascade_only_the_artifact_goes(vault: Vault) -> None:
    root = vault.put(OWNER, b"root")
    copy = vault.put(OWNER, b"copy", derived_from=[root.artifact_id])
    report = vault.delete(OWNER, root.artifact_id)
    assert report.deleted == [{"id": root.artifact_id, "kind": "artifact", "bytes": 4}]
    assert report.kept == []
    assert vault.read_bytes(OWNER, copy.artifact_id) == b"copy"
    assert vault.lineage_status(OWNER, copy.artifact_id) == "revoked"
    mark = vault.catalog.marks(OWNER.tenant, [root.artifact_id])[root.artifact_id]
    assert (mark.state, mark.rule) == ("deleted", "delete")


def test_only_the_owner_deletes_and_another_users_cascade_stops_at_the_owner(vault: Vault) -> None:
    root = vault.put(OWNER, b"root")
    vault.share(OWNER, root.artifact_id, to=BOB)
    theirs = vault.put(OTHER, b"bob's", derived_from=[root.artifact_id])
    below = vault.put(OTHER, b"bob's too", derived_from=[theirs.artifact_id])
    with pytest.raises(NotFound):
        vault.delete(OTHER, root.artifact_id, cascade=True)  # a grantee cannot delete
    report = vault.delete(OWNER, root.artifact_id, cascade=True)
    assert [r["id"] for r in report.deleted] == [root.artifact_id]
    assert report.kept == [{"id": theirs.artifact_id, "kind": "tool_output", "reason": "other owner"}]
    assert vault.lineage_status(OTHER, below.artifact_id) == "revoked"
    assert vault.describe(OTHER, below.artifact_id)
    # bob's own cascade from his copy takes his subtree
    mine = vault.delete(OTHER, theirs.artifact_id, cascade=True)
    assert sorted(r["id"] for r in mine.deleted) == sorted([theirs.artifact_id, below.artifact_id])


def test_a_copy_published_while_a_cascade_runs_is_deleted_by_it_too(vault: Vault) -> None:
    root = vault.put(OWNER, b"root", media_type="text/plain").artifact_id
    child = vault.put(OWNER, b"child", media_type="text/plain", derived_from=[root]).artifact_id
    real_remove = vault.catalog.remove
    late: list[str] = []

    def remove_after_a_late_copy(*args: Any, **kwargs: Any) -> list[str]:
        if not late:  # another writer derives from the child between the walk and the deleting transaction
            late.append(vault.put(OWNER, b"late", media_type="text/plain", derived_from=[child]).artifact_id)
        return real_remove(*args, **kwargs)

    vault.catalog.remove = remove_after_a_late_copy  # type: ignore[method-assign]
    report = vault.delete(OWNER, root, cascade=True)
    assert [row["id"] for row in report.deleted] == [root, child, late[0]]
    for gone in (root, child, late[0]):
        with pytest.raises(NotFound):
            vault.describe(OWNER, gone)
    assert vault.catalog.marks(OWNER.tenant, late)[late[0]].rule == f"cascade:{root}"


def test_a_cursor_into_a_cascade_deleted_copy_opens_nothing(vault: Vault) -> None:
    root = vault.put(OWNER, records(RECORDS, "root"), media_type=JSONL).artifact_id
    copy = vault.put(OWNER, records(RECORDS, "copy"), media_type=JSONL, derived_from=[root]).artifact_id
    page = read.query(vault, OWNER, copy, limit=5)
    assert page["next_cursor"]
    vault.delete(OWNER, root, cascade=True)
    with pytest.raises(NotFound):
        read.query(vault, OWNER, copy, limit=5, cursor=page["next_cursor"])
