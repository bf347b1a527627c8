"""Derived copies through the real :class:`refvault.Client` against a live ``refvault serve``, on an embedded store
and on S3 + PostgreSQL: every call gives what the embedded :class:`refvault.Vault` gives, with the same errors.

A three-level chain (a source, a tool's output derived from it, a redaction of that output) has the same lineage
over HTTP as in the vault; superseding the source makes every copy stale; a cascade deletes exactly the copies the
lineage showed and reports them; a hold blocks a deletion (``Held``) and a cascade keeps it; a put over the quota
stores nothing (``QuotaExceeded``); ``replay_status`` says every state; a tenant's retention and quotas round-trip
through the policy doors.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from refvault import Client, Scope, errors
from refvault.copies import Hold, LineageGraph, Receipt
from refvault.model import Principal
from refvault.policy import Policy, Quotas, Retention, Rule
from tests.client.copies_live import BACKENDS, LiveCopies, live_copies

JSONL = "application/x-ndjson"
CANARY = "CANARYcopies5k"  # in artifact content: never in a receipt, a graph, a report or an error
MISSING_ID = "art_" + "a" * 26
ROOT = Scope("acme", "root", "ops")


@pytest.fixture(scope="module", params=BACKENDS)
def live(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCopies]:
    with live_copies(request, tmp_path_factory.mktemp("copies-client")) as server:
        yield server


@pytest.fixture
def client(live: LiveCopies) -> Iterator[Client]:
    with Client(live.url, live.owner) as c:
        yield c


@pytest.fixture
def scope(request: pytest.FixtureRequest) -> Scope:
    """A session of its own for each test."""
    return Scope("acme", "ana", "t-" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:16])


def records(count: int, seed: str = "a") -> bytes:
    """JSON Lines records, each with an e-mail address (what ``pii.v1`` redacts) and the canary."""
    return b"".join(
        json.dumps({"n": n, "user": {"email": f"{seed}{n}@example.com"}, "note": CANARY}).encode() + b"\n"
        for n in range(count)
    )


def chain(client: Client, scope: Scope) -> tuple[str, str, str]:
    """A source, a tool's output derived from it, and a pii.v1 redaction of that output: their ids."""
    source = client.put(scope, records(6, "src"), media_type=JSONL, labels={"pii"})
    output = client.put(scope, records(3, "out"), media_type=JSONL, labels={"pii"}, derived_from=[source.artifact_id])
    redaction = client.redact(scope, output.artifact_id)
    return source.artifact_id, output.artifact_id, redaction.artifact_id


# -- lineage and receipts -------------------------------------------------------------------------------


def test_a_three_level_chain_has_the_same_lineage_over_http_as_in_the_vault(
    live: LiveCopies, client: Client, scope: Scope
) -> None:
    source, output, redaction = chain(client, scope)

    graph = client.lineage(scope, source)

    assert isinstance(graph, LineageGraph)
    assert graph.root == source
    kinds = {n.id: (n.kind, n.depth, n.status) for n in graph.nodes if not n.internal}
    assert kinds == {
        source: ("artifact", 0, "current"),
        output: ("tool_output", 1, "current"),
        redaction: ("redaction", 2, "current"),
    }
    assert {(s, d) for s, d, _ in graph.edges if not d.startswith("copy:")} == {(source, output), (output, redaction)}
    up = client.lineage(scope, redaction, direction="up")
    assert {n.id: n.depth for n in up.nodes} == {redaction: 0, output: -1, source: -2}
    assert client.lineage(scope, source, depth=1).truncated
    with live.open() as vault:  # the embedded vault on the same store says exactly the same
        for artifact_id in (source, output, redaction):
            for direction in ("both", "up", "down"):
                over_http = client.lineage(scope, artifact_id, direction=direction).to_dict()
                assert over_http == vault.lineage(scope, artifact_id, direction=direction).to_dict()
            if artifact_id != source:
                assert client.receipt(scope, artifact_id) == vault.receipt(scope, artifact_id)
    assert graph.tree().splitlines()[0].startswith(f"{source} (artifact)")
    assert {client.lineage_status(scope, i) for i in (source, output, redaction)} == {"current"}


def test_a_redaction_is_made_once_and_its_receipt_names_its_exact_source(client: Client, scope: Scope) -> None:
    _, output, redaction = chain(client, scope)
    described = client.describe(scope, output)

    assert client.redact(scope, output).artifact_id == redaction  # made once, reused
    data = client.read_bytes(scope, redaction)
    assert b"@example.com" not in data
    assert b"[EMAIL_1]" in data
    receipt = client.receipt(scope, redaction)
    assert isinstance(receipt, Receipt)
    assert (receipt.kind, receipt.transformation, receipt.version) == ("redaction", "redact:pii", "1")
    assert [dict(s) for s in receipt.sources] == [{"artifact_id": output, "content_hash": described.content_hash}]
    assert receipt.counts["matches"] == {"email": 3}
    assert receipt.content_hash == client.describe(scope, redaction).content_hash != described.content_hash
    assert client.describe(scope, redaction).labels == frozenset()  # pii.v1 takes the pii label off
    by_field = client.redact(scope, output, fields=["user.email"])
    assert by_field.artifact_id != redaction
    assert b"@example.com" not in client.read_bytes(scope, by_field.artifact_id)
    with pytest.raises(errors.InvalidArgument, match="captured directly"):
        client.receipt(scope, client.put(scope, b"plain").artifact_id)
    with pytest.raises(errors.InvalidArgument):
        client.redact(scope, output, redactor="nope.v9")
    with pytest.raises(errors.InvalidArgument):
        client.redact(scope, output, fields="user.email")  # type: ignore[arg-type]


# -- staleness --------------------------------------------------------------------------------------


def test_superseding_the_source_makes_every_copy_stale(client: Client, scope: Scope) -> None:
    source, output, redaction = chain(client, scope)

    newer = client.put(scope, records(6, "new"), media_type=JSONL, supersedes=source)  # over Refvault-Metadata

    assert client.lineage_status(scope, newer.artifact_id) == "current"
    assert [client.lineage_status(scope, i) for i in (source, output, redaction)] == ["stale"] * 3
    lineage = client.describe(scope, redaction).retrieval["lineage"]
    assert lineage["status"] == "stale"
    assert client.describe(scope, source).retrieval["lineage"]["superseded_by"] == newer.artifact_id
    assert {n.status for n in client.lineage(scope, source).nodes} == {"stale"}
    third = client.put(scope, records(2, "third"), media_type=JSONL)
    client.supersede(scope, newer.artifact_id, third.artifact_id, reason="a newer export")
    assert client.lineage_status(scope, newer.artifact_id) == "stale"
    with pytest.raises(errors.InvalidArgument, match="itself"):
        client.supersede(scope, third.artifact_id, third.artifact_id, reason="no")
    with pytest.raises(errors.NotFound):
        client.supersede(scope, third.artifact_id, MISSING_ID, reason="absent")


def test_refresh_recomputes_a_stale_redaction_from_the_artifact_that_replaced_its_source(
    client: Client, scope: Scope
) -> None:
    source = client.put(scope, records(4, "old"), media_type=JSONL)
    redaction = client.redact(scope, source.artifact_id)
    assert client.refresh(scope, redaction.artifact_id).artifact_id == redaction.artifact_id  # current: as it is
    newer = client.put(scope, records(5, "new"), media_type=JSONL, supersedes=source.artifact_id)

    fresh = client.refresh(scope, redaction.artifact_id)

    assert fresh.artifact_id not in (redaction.artifact_id, newer.artifact_id)
    assert fresh.derived_from == (newer.artifact_id,)
    assert client.lineage_status(scope, fresh.artifact_id) == "current"
    assert client.describe(scope, redaction.artifact_id).retrieval["lineage"]["superseded_by"] == fresh.artifact_id
    assert b'"n":4' in client.read_bytes(scope, fresh.artifact_id)  # the newer source has five records
    with pytest.raises(errors.InvalidArgument, match="not a redaction"):
        client.refresh(scope, newer.artifact_id)


def test_revoking_an_artifact_revokes_every_copy_of_it(client: Client, scope: Scope) -> None:
    source, output, redaction = chain(client, scope)

    client.revoke_artifact(scope, output, reason="the export was wrong")

    assert client.lineage_status(scope, source) == "current"
    assert client.lineage_status(scope, output) == "revoked"
    assert client.lineage_status(scope, redaction) == "revoked"
    assert client.read_bytes(scope, output)  # still readable: revoked is a status, not a deletion
    with pytest.raises(errors.InvalidArgument, match="revoked"):
        client.refresh(scope, redaction)
    with pytest.raises(errors.InvalidArgument, match="reason"):
        client.revoke_artifact(scope, source, reason="")


# -- deletion and holds -----------------------------------------------------------------------------


def test_a_cascade_delete_reports_the_exact_inventory(live: LiveCopies, client: Client, scope: Scope) -> None:
    source, output, redaction = chain(client, scope)
    sibling = client.put(scope, b"another output " + CANARY.encode(), derived_from=[source]).artifact_id
    grandchild = client.put(scope, b"from the sibling", derived_from=[sibling]).artifact_id
    unrelated = client.put(scope, b"unrelated").artifact_id
    grant = client.share(scope, redaction, to=Principal("acme", "bob"))
    client.read_bytes(scope, sibling)  # a disclosure to the caller: it stays recorded
    expected = {n.id: n for n in client.lineage(scope, source, direction="down").nodes}

    report = client.delete(scope, source, cascade=True)

    assert report.root == source
    assert {d["id"] for d in report.deleted} == set(expected)
    assert {d["id"]: d["kind"] for d in report.deleted} == {i: n.kind for i, n in expected.items()}
    assert {d["id"]: d["bytes"] for d in report.deleted} == {i: n.bytes for i, n in expected.items()}
    assert {source, output, redaction, sibling, grandchild} <= set(expected)
    assert report.kept == []
    assert report.grants_revoked == [grant.grant_id]
    assert [(n["artifact_id"], n["recipient"]) for n in report.not_erasable] == [(sibling, "user")]
    for gone in (source, output, redaction, sibling, grandchild):
        with pytest.raises(errors.NotFound):
            client.describe(scope, gone)
    assert client.describe(scope, unrelated).artifact_id == unrelated
    states = client.replay_status(scope, [source, grandchild])
    assert states[source]["state"] == states[grandchild]["state"] == "deleted"
    assert states[grandchild]["rule"] == f"cascade:{source}"
    with live.open() as vault, pytest.raises(errors.NotFound):  # the embedded vault agrees: it is gone
        vault.delete(scope, source, cascade=True)


def test_a_hold_blocks_deletion_and_a_cascade_keeps_what_is_held(client: Client, scope: Scope) -> None:
    source, output, redaction = chain(client, scope)

    made = client.hold(scope, output, reason="litigation 42")

    assert isinstance(made, Hold)
    assert (made.artifact_id, made.reason, made.user, made.tenant) == (output, "litigation 42", "ana", "acme")
    assert client.holds(scope, output) == [made]
    assert client.holds(scope, source) == []
    with pytest.raises(errors.Held):
        client.delete(scope, output)
    report = client.delete(scope, source, cascade=True)
    assert {k["id"]: k["reason"] for k in report.kept} == {output: "hold", source: "a held copy derives from it"}
    assert {d["id"] for d in report.deleted if not d["id"].startswith("copy:")} == {redaction}
    client.release(scope, output, made.hold_id)
    assert client.holds(scope, output) == []
    with pytest.raises(errors.NotFound):
        client.release(scope, output, made.hold_id)  # already released
    with pytest.raises(errors.NotFound):
        client.release(scope, output, "not a hold id\n")
    assert {d["id"] for d in client.delete(scope, output).deleted if not d["id"].startswith("copy:")} == {output}


# -- quotas, replay, policy ---------------------------------------------------------------------------


def test_a_put_over_the_quota_is_refused_and_stores_nothing(live: LiveCopies, client: Client, scope: Scope) -> None:
    with Client(live.url, live.admin) as root:
        root.set_policy(ROOT, Policy(quotas=Quotas(session_bytes=1000)))
        try:
            kept = client.put(scope, b"x" * 600)
            with pytest.raises(errors.QuotaExceeded, match="nothing was stored"):
                client.put(scope, b"y" * 600)
            assert [d.artifact_id for d in client.list(scope)] == [kept.artifact_id]
            with pytest.raises(errors.QuotaExceeded):
                client.put(scope, records(20), media_type=JSONL, derived_from=[kept.artifact_id])
            assert [d.artifact_id for d in client.list(scope)] == [kept.artifact_id]
        finally:
            root.set_policy(ROOT, None)
    client.put(scope, b"y" * 600)  # no quota now
    assert len(client.list(scope)) == 2


def test_replay_status_says_every_state(live: LiveCopies, client: Client, scope: Scope) -> None:
    current = client.put(scope, b"current").artifact_id
    stale = client.put(scope, b"stale").artifact_id
    client.supersede(scope, stale, current, reason="replaced")
    revoked = client.put(scope, b"revoked").artifact_id
    client.revoke_artifact(scope, revoked, reason="wrong")
    deleted = client.put(scope, b"deleted").artifact_id
    client.delete(scope, deleted)
    expiring = client.put(scope, b"soon", expires_at=datetime.now(UTC) + timedelta(seconds=1)).artifact_id
    secret = client.put(scope, b"secret", labels={"secret"}).artifact_id
    with Client(live.url, live.other_user) as bob:
        foreign = bob.put(Scope("acme", "bob", "s1"), b"bob's").artifact_id
    time.sleep(1.2)
    ids = [current, stale, revoked, deleted, expiring, secret, foreign, MISSING_ID]

    found = client.replay_status(scope, ids)

    assert found[current] == {"state": "available", "status": "current", "allowed": True}
    assert found[stale] == {"state": "available", "status": "stale", "allowed": True}
    assert (found[revoked]["state"], found[revoked]["status"], found[revoked]["rule"]) == (
        "revoked",
        "revoked",
        "revoke",
    )
    assert (found[deleted]["state"], found[deleted]["rule"]) == ("deleted", "delete")
    assert found[deleted]["at"] is not None
    assert found[expiring]["state"] == "expired"
    assert found[secret] == {"state": "available", "status": "current", "allowed": True}
    assert found[foreign] == found[MISSING_ID] == {"state": "deleted", "at": None, "rule": None}
    deny = Rule(id="no-secrets-to-models", labels={"secret"}, recipients=["model:*"], action="deny")
    with Client(live.url, live.admin) as root:
        root.set_policy(ROOT, Policy([deny]))
        try:
            for_model = client.replay_status(scope, [secret, current], purpose="replay", recipient="model:gpt-x")
        finally:
            root.set_policy(ROOT, None)
    assert for_model[secret] == {"state": "available", "allowed": False, "rule_id": "no-secrets-to-models"}
    assert for_model[current]["allowed"] is True
    with pytest.raises(errors.InvalidId):
        client.replay_status(scope, ["nope"])
    with pytest.raises(errors.InvalidArgument):
        client.replay_status(scope, [current] * 1001)


def test_retention_and_quotas_round_trip_through_the_policy_doors(live: LiveCopies, client: Client) -> None:
    policy = Policy(
        [Rule(id="no-pii-out", labels={"pii"}, recipients=["export"], action="redact", redactor="pii.v1")],
        version="r-1",
        retention=(Retention("pii", 86400), Retention("scratch", 3600)),
        quotas=Quotas(tenant_bytes=10**9, session_bytes=10**7),
    )
    with Client(live.url, live.admin) as root:
        root.set_policy(ROOT, policy)
        try:
            assert root.policy(ROOT) == policy
            assert client.policy(Scope("acme", "ana", "s1")) == policy  # any key of the tenant reads it
            with live.open() as vault:
                assert vault.policy("acme") == policy
        finally:
            root.set_policy(ROOT, None)
    with Client(live.url, live.other_tenant) as other:
        assert other.policy(Scope("globex", "ana", "s1")) is None


# -- isolation ----------------------------------------------------------------------------------------


def test_another_tenant_and_another_user_get_not_found_at_every_call(live: LiveCopies, client: Client) -> None:
    mine = Scope("acme", "ana", "s1")
    source, output, redaction = chain(client, mine)
    hold = client.hold(mine, output, reason="keep")
    with Client(live.url, live.other_tenant) as stranger, Client(live.url, live.other_user) as bob:
        for other, scope in ((stranger, Scope("globex", "ana", "s1")), (bob, Scope("acme", "bob", "s1"))):
            calls = [
                lambda c, s, i: c.redact(s, i),
                lambda c, s, i: c.receipt(s, i),
                lambda c, s, i: c.lineage(s, i),
                lambda c, s, i: c.lineage_status(s, i),
                lambda c, s, i: c.supersede(s, i, i, reason="x"),
                lambda c, s, i: c.revoke_artifact(s, i, reason="x"),
                lambda c, s, i: c.refresh(s, i),
                lambda c, s, i: c.hold(s, i, reason="x"),
                lambda c, s, i: c.holds(s, i),
                lambda c, s, i: c.release(s, i, hold.hold_id),
                lambda c, s, i: c.delete(s, i, cascade=True),
            ]
            for call in calls:
                for target in (output, redaction, MISSING_ID):
                    with pytest.raises(errors.NotFound) as raised:
                        call(other, scope, target)
                    assert type(raised.value) is errors.NotFound
            assert other.replay_status(scope, [output])[output] == {"state": "deleted", "at": None, "rule": None}
    assert client.holds(mine, output) == [hold]  # nothing the others tried changed anything
    assert [client.lineage_status(mine, i) for i in (source, output, redaction)] == ["current"] * 3
    client.release(mine, output, hold.hold_id)


# -- the vault's own edges, checked here beside the doors ----------------------------------------------------


def test_refreshing_a_redaction_whose_stale_ancestor_is_not_its_source_does_not_supersede_it_by_itself() -> None:
    from refvault import Vault

    owner = Scope("acme", "ana", "s1")
    with Vault.open("memory://") as vault:
        source = vault.put(owner, records(2, "old"), media_type=JSONL).artifact_id
        output = vault.put(owner, records(2, "out"), media_type=JSONL, derived_from=[source]).artifact_id
        redaction = vault.redact(owner, output).artifact_id
        vault.put(owner, records(3, "new"), media_type=JSONL, supersedes=source)
        assert vault.lineage_status(owner, redaction) == "stale"
        try:
            refreshed = vault.refresh(owner, redaction).artifact_id
        except errors.InvalidArgument:
            refreshed = None  # refusing (a tool's output cannot be recomputed) is right too
        mark = vault.catalog.marks(owner.tenant, [redaction]).get(redaction)
        assert refreshed != redaction
        assert mark is None or mark.by != redaction


def test_a_hold_reason_postgresql_cannot_store_is_refused_as_invalid(
    postgres_url: str, s3_server: object, tmp_path: object
) -> None:
    from refvault import Vault
    from tests.servers import fresh_database

    owner = Scope("acme", "ana", "s1")
    with Vault.open(fresh_database(postgres_url), blobs=str(tmp_path)) as vault:
        artifact_id = vault.put(owner, b"kept").artifact_id
        with pytest.raises(errors.InvalidArgument):
            vault.hold(owner, artifact_id, reason="legal\x00hold")
