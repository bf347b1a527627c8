"""Holds, byte quotas, retention by label and replay status, on every backend (with the settable test clock).

* A hold makes a plain delete :class:`Held`, and keeps the artifact through its expiry and its retention rule
  until it is released.
* A put (or a redaction) that would take the tenant or the session over its quota is :class:`QuotaExceeded`
  and stores nothing: the same artifacts, blob records, blob objects and temporaries before and after.
* ``gc`` removes an artifact once the shortest retention of its labels has passed (not a second before),
  marked ``expired`` by ``retention:<label>``.
* ``replay_status`` tells available (current/stale/revoked, allowed or not by the policy), expired, deleted
  and revoked apart, with when and which rule; another principal's deleted artifact looks exactly like an id
  that never existed.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from refvault import Scope, Vault
from refvault.blobs.base import BlobKey
from refvault.blobs.s3 import S3BlobStore
from refvault.errors import Expired, Held, InvalidArgument, NotFound, QuotaExceeded
from refvault.model import format_time
from refvault.policy import Policy, Quotas, Retention, Rule
from tests.conftest import Clock, payload
from tests.vault.copies_support import BOB, JSONL, OTHER, OWNER, records

KIB = 1024
ELSEWHERE = Scope("globex", "ana", "s1")


# -- holds ----------------------------------------------------------------------------------------------------------


def test_a_hold_blocks_deletion_until_released(vault: Vault, clock: Clock) -> None:
    d = vault.put(OWNER, b"evidence")
    first = vault.hold(OWNER, d.artifact_id, reason="case 1")
    clock.advance(seconds=1)
    second = vault.hold(OWNER, d.artifact_id, reason="case 2")
    assert first.hold_id != second.hold_id
    assert vault.holds(OWNER, d.artifact_id) == [first, second]
    assert (first.artifact_id, first.reason, first.user) == (d.artifact_id, "case 1", "ana")
    assert first.to_dict()["hold_id"] == first.hold_id
    with pytest.raises(Held):
        vault.delete(OWNER, d.artifact_id)
    vault.release(OWNER, d.artifact_id, first.hold_id)
    with pytest.raises(Held):
        vault.delete(OWNER, d.artifact_id)  # one hold is still there
    with pytest.raises(NotFound):
        vault.release(OWNER, d.artifact_id, first.hold_id)  # already released
    vault.release(OWNER, d.artifact_id, second.hold_id)
    assert vault.holds(OWNER, d.artifact_id) == []
    assert vault.delete(OWNER, d.artifact_id).deleted == [{"id": d.artifact_id, "kind": "artifact", "bytes": 8}]


def test_only_the_owner_holds_and_a_reason_is_required(vault: Vault) -> None:
    d = vault.put(OWNER, b"x")
    vault.share(OWNER, d.artifact_id, to=BOB)
    with pytest.raises(NotFound):
        vault.hold(OTHER, d.artifact_id, reason="not mine")
    with pytest.raises(NotFound):
        vault.holds(OTHER, d.artifact_id)
    for bad in ("", "x" * 1025):
        with pytest.raises(InvalidArgument):
            vault.hold(OWNER, d.artifact_id, reason=bad)
    assert vault.holds(OWNER, d.artifact_id) == []


def test_expiry_skips_a_held_artifact_until_it_is_released(vault: Vault, clock: Clock) -> None:
    held = vault.put(OWNER, b"held", expires_at=clock.now + timedelta(seconds=60))
    loose = vault.put(OWNER, b"loose", expires_at=clock.now + timedelta(seconds=60))
    hold = vault.hold(OWNER, held.artifact_id, reason="keep")
    clock.advance(seconds=61)
    assert vault.gc().expired == [loose.artifact_id]
    assert vault.catalog.find(OWNER, held.artifact_id) is not None  # the row stays while held
    with pytest.raises(Expired):
        vault.describe(OWNER, held.artifact_id)  # still past its time for reads
    assert vault.gc().expired == []
    vault.release(OWNER, held.artifact_id, hold.hold_id)
    assert vault.gc().expired == [held.artifact_id]
    mark = vault.catalog.marks(OWNER.tenant, [held.artifact_id])[held.artifact_id]
    assert (mark.state, mark.rule) == ("expired", "expires_at")


def test_a_dry_run_gc_does_not_list_a_held_expired_artifact(vault: Vault, clock: Clock) -> None:
    held = vault.put(OWNER, b"held", expires_at=clock.now + timedelta(seconds=1))
    vault.hold(OWNER, held.artifact_id, reason="keep")
    clock.advance(seconds=2)
    assert vault.gc().expired == []
    assert vault.gc(dry_run=True).expired == []


def test_a_held_root_stays_while_its_copies_go(vault: Vault) -> None:
    root = vault.put(OWNER, b"root")
    copy = vault.put(OWNER, b"copy", derived_from=[root.artifact_id])
    vault.hold(OWNER, root.artifact_id, reason="keep the root")
    report = vault.delete(OWNER, root.artifact_id, cascade=True)
    assert report.deleted == [{"id": copy.artifact_id, "kind": "tool_output", "bytes": 4}]
    assert report.kept == [{"id": root.artifact_id, "kind": "artifact", "reason": "hold"}]
    assert vault.read_bytes(OWNER, root.artifact_id) == b"root"


# -- quotas -----------------------------------------------------------------------------------------------------------


def _stored(vault: Vault) -> tuple[int, int, int]:
    """(artifacts, blob records, temporaries): what a put publishes or could leave behind in the store."""
    return (
        len(list(vault.catalog.manifests())),
        len(list(vault.catalog.blob_records())),
        vault.blobs.sweep_temp(0, dry_run=True),
    )


def _objects(vault: Vault) -> set[BlobKey]:
    return set(vault.blobs.keys())


def _no_object_left(vault: Vault, before: set[BlobKey]) -> None:
    """No blob object was added; on S3, where ``seal`` uploads before the catalog commit (and the quota check),
    a refused put's object is an unreferenced orphan that ``gc`` removes, never a published blob."""
    extra = _objects(vault) - before
    if isinstance(vault.blobs, S3BlobStore):
        assert not any(vault.catalog.blob(k) for k in extra)
        vault.gc(grace=0)
        extra = _objects(vault) - before
    assert extra == set()


def test_a_put_over_the_tenant_quota_stores_nothing(vault: Vault) -> None:
    vault.set_policy("acme", Policy(quotas=Quotas(tenant_bytes=100 * KIB)))
    vault.put(OWNER, payload(60 * KIB, 1))
    before, objects = _stored(vault), _objects(vault)
    with pytest.raises(QuotaExceeded, match="nothing was stored"):
        vault.put(OWNER, payload(41 * KIB, 2))  # file-sized: written to a temporary, then dropped
    assert _stored(vault) == before
    _no_object_left(vault, objects)
    vault.put(OTHER, payload(40 * KIB - 600, 3))  # another user of the tenant counts too: 600 bytes left
    before = _stored(vault)
    with pytest.raises(QuotaExceeded):
        vault.put(OWNER, payload(1000, 4))  # inline-sized
    assert _stored(vault) == before
    assert vault.catalog.stored_bytes("acme") == 100 * KIB - 600
    vault.put(OWNER, payload(600, 5))  # exactly up to the quota: allowed
    assert vault.catalog.stored_bytes("acme") == 100 * KIB
    before = _stored(vault)
    with pytest.raises(QuotaExceeded):
        vault.put(OTHER, b"1")
    assert _stored(vault) == before
    vault.put(ELSEWHERE, payload(200 * KIB, 6))  # another tenant, another policy (none)


def test_deleting_frees_quota_and_deduplicated_bytes_still_count(vault: Vault) -> None:
    vault.set_policy("acme", Policy(quotas=Quotas(tenant_bytes=1000)))
    first = vault.put(OWNER, b"a" * 600)
    with pytest.raises(QuotaExceeded):
        vault.put(OWNER, b"a" * 600)  # the same bytes (stored once) count again: the quota is on captures
    vault.delete(OWNER, first.artifact_id)
    vault.put(OWNER, b"a" * 600)


def test_a_put_over_the_session_quota_stores_nothing(vault: Vault) -> None:
    vault.set_policy("acme", Policy(quotas=Quotas(session_bytes=1000)))
    vault.put(OWNER, b"s" * 800)
    before = _stored(vault)
    with pytest.raises(QuotaExceeded, match="session"):
        vault.put(OWNER, b"t" * 300)
    assert _stored(vault) == before
    vault.put(Scope("acme", "ana", "s2"), b"t" * 300)  # another session of the same user
    vault.put(OTHER, b"t" * 900)  # another user's session


def test_a_copy_over_the_quota_is_refused_too(vault: Vault) -> None:
    source = vault.put(OWNER, records(12), media_type=JSONL)
    vault.set_policy("acme", Policy(quotas=Quotas(tenant_bytes=source.retrieval["size"] + 10)))
    before = _stored(vault)
    with pytest.raises(QuotaExceeded):
        vault.redact(OWNER, source.artifact_id)
    with pytest.raises(QuotaExceeded):
        vault.put(OWNER, b"x" * 11, derived_from=[source.artifact_id])
    assert _stored(vault) == before
    assert [n.id for n in vault.lineage(OWNER, source.artifact_id).nodes] == [source.artifact_id]


# -- retention --------------------------------------------------------------------------------------------------------


def test_gc_applies_the_shortest_retention_of_an_artifacts_labels(vault: Vault, clock: Clock) -> None:
    vault.set_policy("acme", Policy(retention=(Retention("temp", 3600), Retention("chat", 60))))
    temp = vault.put(OWNER, b"temporary", labels={"temp"})
    both = vault.put(OWNER, b"both", labels={"temp", "chat"})
    held = vault.put(OWNER, b"held", labels={"temp"})
    plain = vault.put(OWNER, b"plain")
    other_label = vault.put(OWNER, b"kept", labels={"pii"})
    elsewhere = vault.put(ELSEWHERE, b"no policy there", labels={"temp"})
    hold = vault.hold(OWNER, held.artifact_id, reason="audit")

    clock.advance(seconds=59)
    assert vault.gc().expired == []
    clock.advance(seconds=1)
    assert vault.gc().expired == [both.artifact_id]  # chat: 60 s
    mark = vault.catalog.marks("acme", [both.artifact_id])[both.artifact_id]
    assert (mark.state, mark.rule, mark.at) == ("expired", "retention:chat", clock.now)

    clock.advance(seconds=3600 - 60 - 1)
    assert vault.gc().expired == []
    clock.advance(seconds=1)
    assert vault.gc(dry_run=True).expired == [temp.artifact_id]  # a dry run lists, removes nothing, skips holds
    assert vault.catalog.find(OWNER, temp.artifact_id) is not None
    assert vault.gc().expired == [temp.artifact_id]
    with pytest.raises(NotFound):
        vault.describe(OWNER, temp.artifact_id)
    for kept in (held, plain, other_label):
        assert vault.describe(OWNER, kept.artifact_id)
    assert vault.describe(ELSEWHERE, elsewhere.artifact_id)
    status = vault.replay_status(OWNER, [temp.artifact_id])[temp.artifact_id]
    assert (status["state"], status["rule"]) == ("expired", "retention:temp")

    vault.release(OWNER, held.artifact_id, hold.hold_id)
    assert vault.gc().expired == [held.artifact_id]


# -- replay status ----------------------------------------------------------------------------------------------------


def test_replay_status_tells_every_state_apart(vault: Vault, clock: Clock) -> None:
    vault.set_policy(
        "acme", Policy([Rule("no-secrets-to-models", labels=frozenset({"secret"}), recipients=("model:*",))])
    )
    current = vault.put(OWNER, b"current")
    stale = vault.put(OWNER, b"stale")
    vault.put(OWNER, b"newer", supersedes=stale.artifact_id)
    copy = vault.put(OWNER, b"copy of stale", derived_from=[stale.artifact_id])
    revoked = vault.put(OWNER, b"revoked")
    vault.revoke_artifact(OWNER, revoked.artifact_id, reason="wrong source")
    revoked_at = clock.now
    deleted = vault.put(OWNER, b"deleted")
    clock.advance(seconds=5)
    vault.delete(OWNER, deleted.artifact_id)
    deleted_at = clock.now
    collected = vault.put(OWNER, b"collected", expires_at=clock.now + timedelta(seconds=10))
    secret = vault.put(OWNER, b"secret", labels={"secret"})
    clock.advance(seconds=11)
    assert vault.gc().expired == [collected.artifact_id]
    never = "art_" + "b" * 26
    ids = [current, stale, copy, revoked, deleted, collected, secret]
    got = vault.replay_status(OWNER, [d.artifact_id for d in ids] + [never], recipient="model:gpt")

    assert got[current.artifact_id] == {"state": "available", "status": "current", "allowed": True}
    assert got[stale.artifact_id] == {"state": "available", "status": "stale", "allowed": True}
    assert got[copy.artifact_id] == {"state": "available", "status": "stale", "allowed": True}
    r = got[revoked.artifact_id]
    assert (r["state"], r["rule"], r["at"], r["status"], r["allowed"]) == (
        "revoked",
        "revoke",
        format_time(revoked_at),
        "revoked",
        True,
    )
    d = got[deleted.artifact_id]
    assert (d["state"], d["rule"], d["at"]) == ("deleted", "delete", format_time(deleted_at))
    e = got[collected.artifact_id]
    assert (e["state"], e["rule"], e["at"]) == ("expired", "expires_at", format_time(clock.now))
    assert got[secret.artifact_id] == {"state": "available", "allowed": False, "rule_id": "no-secrets-to-models"}
    assert got[never] == {"state": "deleted", "at": None, "rule": None}
    assert vault.replay_status(OWNER, [secret.artifact_id])[secret.artifact_id]["allowed"] is True  # to the user


def test_an_expired_artifact_not_yet_collected_is_expired(vault: Vault, clock: Clock) -> None:
    d = vault.put(OWNER, b"soon", expires_at=clock.now + timedelta(seconds=1))
    clock.advance(seconds=2)
    got = vault.replay_status(OWNER, [d.artifact_id])[d.artifact_id]
    assert (got["state"], got["rule"]) == ("expired", "expires_at")


def test_another_users_deleted_artifact_looks_like_one_that_never_existed(vault: Vault) -> None:
    shared = vault.put(OWNER, b"shared, then deleted")
    vault.share(OWNER, shared.artifact_id, to=BOB)
    assert vault.replay_status(OTHER, [shared.artifact_id])[shared.artifact_id]["state"] == "available"
    unshared = vault.put(OWNER, b"never shared, deleted")
    live = vault.put(OWNER, b"never shared, live")
    vault.delete(OWNER, shared.artifact_id)
    vault.delete(OWNER, unshared.artifact_id)
    never = "art_" + "c" * 26
    ids = [shared.artifact_id, unshared.artifact_id, live.artifact_id, never]
    seen = vault.replay_status(OTHER, ids)
    assert [seen[i] for i in ids] == [{"state": "deleted", "at": None, "rule": None}] * 4
    assert vault.replay_status(Scope("acme", "ana", "s2"), ids) == seen  # another session of the owner too
    assert vault.replay_status(OWNER, ids)[shared.artifact_id]["rule"] == "delete"  # the owner is told


def test_replay_status_checks_its_arguments(vault: Vault) -> None:
    with pytest.raises(InvalidArgument):
        vault.replay_status(OWNER, "art_" + "a" * 26)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        vault.replay_status(OWNER, ["art_" + "a" * 26] * 1001)
    with pytest.raises(InvalidArgument):
        vault.replay_status(OWNER, ["not an id"])
    assert vault.replay_status(OWNER, []) == {}
