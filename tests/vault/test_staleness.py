"""Staleness and revocation propagate down a chain of copies, and every read says so; on every backend.

* Superseding the root of a four-level chain makes every level ``stale``: ``lineage_status``, ``describe``
  (``retrieval.lineage.status``), the lineage graph, and the responses of ``read.window`` and ``read.query``
  (their ``lineage``, from :func:`refvault.read._access.coverage`).
* Revoking a level makes it and everything below it ``revoked`` (more final than stale), readable still.
* Deleting a source leaves the copies another principal made of it (through a grant) ``revoked``.
* ``refresh`` recomputes a stale redaction from the artifact that superseded its source: a new derivative
  whose receipt names the new source's content hash; the old one is marked superseded by it.
"""

from __future__ import annotations

import pytest

from refvault import Vault, read
from refvault.errors import InvalidArgument
from refvault.model import Descriptor
from tests.vault.copies_support import BOB, JSONL, OTHER, OWNER, TEXT, call, chain, records, toolbox


def _statuses(vault: Vault, levels: list[Descriptor]) -> list[str]:
    return [vault.lineage_status(OWNER, d.artifact_id) for d in levels]


def _described(vault: Vault, artifact_id: str) -> dict[str, object]:
    return dict(vault.describe(OWNER, artifact_id).retrieval.get("lineage", {}))


def test_superseding_the_root_makes_four_levels_stale(vault: Vault) -> None:
    levels = chain(vault, 4)
    root, one, two, three = (d.artifact_id for d in levels)
    assert levels[1].retrieval["lineage"]["kind"] == "tool_output"
    assert _statuses(vault, levels) == ["current"] * 4
    assert read.window(vault, OWNER, two)["lineage"]["status"] == "current"

    newer = vault.put(OWNER, TEXT + b"one more line\n", media_type="text/plain", supersedes=root)

    assert _statuses(vault, levels) == ["stale"] * 4
    assert vault.lineage_status(OWNER, newer.artifact_id) == "current"
    assert _described(vault, root) == {"status": "stale", "superseded_by": newer.artifact_id}
    for copy in (one, two, three):
        described = _described(vault, copy)
        assert described["status"] == "stale"
        assert described["kind"] == "tool_output"
        assert described["byte_identical_to_source"] is False
    graph = vault.lineage(OWNER, root)
    assert {n.id: n.status for n in graph.nodes} == dict.fromkeys((root, one, two, three), "stale")
    assert graph.node(root).state == "superseded"
    assert [graph.node(i).state for i in (one, two, three)] == [None, None, None]
    # the selective reads carry it too
    window = read.window(vault, OWNER, two)
    assert window["lineage"]["status"] == "stale"
    assert window["lineage"]["sources"] == [one]  # ids only: source hashes are in the owner's receipt
    page = read.query(vault, OWNER, three, limit=2)
    assert page["returned_records"] == 2
    assert page["lineage"]["status"] == "stale"
    assert read.window(vault, OWNER, root)["lineage"] == {"status": "stale", "superseded_by": newer.artifact_id}
    assert "lineage" not in read.window(vault, OWNER, newer.artifact_id)  # a fresh capture claims nothing


def test_supersede_is_by_the_owner_of_both_and_never_of_itself(vault: Vault) -> None:
    old = vault.put(OWNER, b"old")
    new = vault.put(OWNER, b"new")
    theirs = vault.put(OTHER, b"theirs")
    with pytest.raises(InvalidArgument):
        vault.supersede(OWNER, old.artifact_id, old.artifact_id, reason="same")
    from refvault.errors import NotFound

    with pytest.raises(NotFound):
        vault.supersede(OWNER, old.artifact_id, theirs.artifact_id, reason="not mine")
    with pytest.raises(NotFound):
        vault.supersede(OTHER, old.artifact_id, theirs.artifact_id, reason="not theirs")
    with pytest.raises(NotFound):
        vault.put(OTHER, b"x", supersedes=old.artifact_id)
    with pytest.raises(InvalidArgument):
        vault.supersede(OWNER, old.artifact_id, new.artifact_id, reason="")
    assert vault.lineage_status(OWNER, old.artifact_id) == "current"
    vault.supersede(OWNER, old.artifact_id, new.artifact_id, reason="a newer report")
    assert vault.lineage_status(OWNER, old.artifact_id) == "stale"


def test_revoking_a_level_revokes_everything_below_it(vault: Vault) -> None:
    levels = chain(vault, 4)
    root, one, two, three = (d.artifact_id for d in levels)
    vault.revoke_artifact(OWNER, one, reason="the tool had a bug")
    assert _statuses(vault, levels) == ["current", "revoked", "revoked", "revoked"]
    assert vault.read_bytes(OWNER, two)  # revoked is a status, not a deletion
    assert _described(vault, three)["status"] == "revoked"
    assert read.query(vault, OWNER, three, limit=1)["lineage"]["status"] == "revoked"
    graph = vault.lineage(OWNER, root)
    assert {n.id: n.status for n in graph.nodes if not n.internal} == {
        root: "current",
        one: "revoked",
        two: "revoked",
        three: "revoked",
    }
    assert [n.status for n in graph.nodes if n.internal] == ["revoked"]  # the query's record index, below three
    assert graph.node(one).state == "revoked"
    # superseding the root now: the root is stale, the revoked levels stay revoked (more final)
    newer = vault.put(OWNER, b"newer", supersedes=root)
    assert _statuses(vault, levels) == ["stale", "revoked", "revoked", "revoked"]
    # and a revoked artifact is never "un-revoked" by a later supersede
    vault.supersede(OWNER, one, newer.artifact_id, reason="try to downgrade")
    assert vault.catalog.marks(OWNER.tenant, [one])[one].state == "revoked"
    assert vault.lineage_status(OWNER, one) == "revoked"


def test_deleting_a_source_revokes_its_copies_everywhere(vault: Vault) -> None:
    box = toolbox(vault)
    root = vault.put(OWNER, TEXT, media_type="text/plain")
    mine = call(box, "shout", doc=root.artifact_id)
    vault.share(OWNER, root.artifact_id, to=BOB)
    theirs = call(box, "shout", OTHER, doc=root.artifact_id)  # bob derives a copy through his grant
    assert vault.lineage_status(OTHER, theirs) == "current"

    vault.delete(OWNER, root.artifact_id)  # no cascade: the copies stay, revoked

    assert vault.lineage_status(OWNER, mine) == "revoked"
    assert vault.lineage_status(OTHER, theirs) == "revoked"
    assert dict(vault.describe(OTHER, theirs).retrieval["lineage"])["status"] == "revoked"
    assert vault.read_bytes(OTHER, theirs) == TEXT.upper()  # bob's own bytes stay his
    seen = vault.lineage(OTHER, theirs)
    gone = seen.node(root.artifact_id)
    # another principal's source: its status only (what happened to it, and when, is its owner's business)
    assert (gone.status, gone.state, gone.visible, gone.depth) == ("revoked", None, False, -1)
    assert gone.content_hash is None
    assert seen.node(theirs).status == "revoked"
    assert vault.lineage(OWNER, mine).node(root.artifact_id).visible  # the owner still sees what it deleted


def test_an_expired_source_revokes_its_copies(vault: Vault, clock: object) -> None:
    from datetime import timedelta

    from tests.conftest import Clock

    assert isinstance(clock, Clock)
    root = vault.put(OWNER, b"short-lived", expires_at=clock.now + timedelta(seconds=60))
    copy = vault.put(OWNER, b"kept", derived_from=[root.artifact_id])
    clock.advance(seconds=61)
    assert vault.gc().expired == [root.artifact_id]
    assert vault.lineage_status(OWNER, copy.artifact_id) == "revoked"
    assert vault.catalog.marks(OWNER.tenant, [root.artifact_id])[root.artifact_id].state == "expired"


# -- refresh (a redaction is deterministic: it can be recomputed) ------------------------------------------------


def test_refresh_recomputes_a_stale_redaction_from_the_new_source(vault: Vault) -> None:
    source = vault.put(OWNER, records(5, "old"), media_type=JSONL, labels={"pii"})
    redacted = vault.redact(OWNER, source.artifact_id)
    assert b"@example.com" not in vault.read_bytes(OWNER, redacted.artifact_id)
    assert vault.redact(OWNER, source.artifact_id).artifact_id == redacted.artifact_id  # made once
    assert vault.refresh(OWNER, redacted.artifact_id).artifact_id == redacted.artifact_id  # current: as it is

    newer = vault.put(OWNER, records(7, "new"), media_type=JSONL, labels={"pii"}, supersedes=source.artifact_id)
    assert vault.lineage_status(OWNER, redacted.artifact_id) == "stale"

    fresh = vault.refresh(OWNER, redacted.artifact_id)

    assert fresh.artifact_id not in (redacted.artifact_id, newer.artifact_id)
    assert fresh.derived_from == (newer.artifact_id,)
    assert fresh.labels == frozenset()  # pii.v1 removes the pii label
    assert vault.lineage_status(OWNER, fresh.artifact_id) == "current"
    receipt = vault.receipt(OWNER, fresh.artifact_id)
    assert receipt.kind == "redaction"
    assert [dict(s) for s in receipt.sources] == [
        {"artifact_id": newer.artifact_id, "content_hash": newer.content_hash}
    ]
    assert receipt.counts["records_in"] == 7
    assert receipt.counts["matches"] == {"email": 7}
    assert receipt.content_hash == fresh.content_hash != newer.content_hash
    data = vault.read_bytes(OWNER, fresh.artifact_id)
    assert b"new6" in data
    assert b"@example.com" not in data
    mark = vault.catalog.marks(OWNER.tenant, [redacted.artifact_id])[redacted.artifact_id]
    assert (mark.state, mark.by, mark.rule) == ("superseded", fresh.artifact_id, "refresh")
    assert vault.lineage_status(OWNER, redacted.artifact_id) == "stale"
    assert _described(vault, redacted.artifact_id)["superseded_by"] == fresh.artifact_id
    # asking again finds the live one: nothing new is made
    assert vault.refresh(OWNER, redacted.artifact_id).artifact_id == fresh.artifact_id
    assert vault.redact(OWNER, newer.artifact_id).artifact_id == fresh.artifact_id
    vault.flush_audit()
    assert "refresh" in [e.action for e in vault.audit(OWNER, artifact_id=redacted.artifact_id, limit=1000)]


def test_only_a_stale_redaction_can_be_refreshed(vault: Vault) -> None:
    levels = chain(vault, 2)
    with pytest.raises(InvalidArgument, match="not a redaction"):
        vault.refresh(OWNER, levels[1].artifact_id)  # a tool's output: call the tool again
    source = vault.put(OWNER, records(2), media_type=JSONL)
    redacted = vault.redact(OWNER, source.artifact_id)
    vault.revoke_artifact(OWNER, source.artifact_id, reason="bad source")
    with pytest.raises(InvalidArgument, match="revoked"):
        vault.refresh(OWNER, redacted.artifact_id)
