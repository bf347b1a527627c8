"""Labels: validated names kept in the protected manifest, shown in the descriptor, removed only by declassify.

Every backend (memory, embedded, S3 + PostgreSQL) through the ``vault`` fixture; the HTTP client, the
server's route and the CLI at the end of the module.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from refvault import Client, Scope, Vault
from refvault.catalog.memory import MemoryCatalog
from refvault.catalog.schema import LABELS_MIGRATION, artifacts, migrations
from refvault.catalog.sql import SqlCatalog
from refvault.cli import main
from refvault.errors import IdempotencyConflict, IntegrityError, InvalidArgument, InvalidMetadata, NotFound
from refvault.model import DESCRIPTOR_FIELDS, LABEL_MEANINGS, MAX_LABELS, Descriptor, check_labels
from refvault.vault.aio import AsyncVault
from refvault.vault.reports import AuditRecord
from tests.servers import LiveServer, serve

OWNER = Scope("acme", "ana", "s1")
OTHER_SESSION = Scope("acme", "ana", "s2")
OTHER_TENANT = Scope("globex", "ana", "s1")
PAYLOAD = b"name,email\nAda,ada@example.com\n"
CANARY = "CANARY-REASON-7f3a"


def _edit_labels(vault: Vault, artifact_id: str, labels: str | None, column: str = "labels") -> None:
    """Set the labels (or derived_from) column of one row behind refvault's back (or the memory catalog's manifest)."""
    catalog = vault.catalog
    if isinstance(catalog, MemoryCatalog):
        from dataclasses import replace

        row = catalog._rows[artifact_id]
        value = json.loads(labels) if labels else []
        stated = frozenset(value) if column == "labels" else tuple(value)
        row.manifest = replace(row.manifest, **{column: stated})
        return
    assert isinstance(catalog, SqlCatalog)
    with catalog._write() as conn, conn.begin():
        conn.execute(artifacts.update().where(artifacts.c.artifact_id == artifact_id).values(**{column: labels}))


# -- labels at capture ------------------------------------------------------------------------------------------


def test_labels_are_kept_and_shown_sorted_inside_retrieval_of_a_ten_field_descriptor(vault: Vault) -> None:
    d = vault.put(OWNER, PAYLOAD, media_type="text/csv", labels={"secret", "pii", "team:finance"})
    assert d.retrieval["labels"] == ("pii", "secret", "team:finance")
    assert d.labels == frozenset({"pii", "secret", "team:finance"})
    shown = vault.describe(OWNER, d.artifact_id).to_dict()
    assert list(shown) == list(DESCRIPTOR_FIELDS)
    assert shown["retrieval"]["labels"] == ["pii", "secret", "team:finance"]
    assert "derived_from" not in shown["retrieval"]
    assert [x.labels for x in vault.list(OWNER)] == [d.labels]


def test_an_unlabelled_artifact_shows_an_empty_list_and_no_derived_from(vault: Vault) -> None:
    d = vault.put(OWNER, b"plain")
    assert d.to_dict()["retrieval"]["labels"] == []
    assert "derived_from" not in d.to_dict()["retrieval"]
    assert d.labels == frozenset()
    assert d.derived_from == ()


def test_derived_from_is_kept_in_order_without_repeats(vault: Vault) -> None:
    first = vault.put(OWNER, b"one")
    second = vault.put(OWNER, b"two")
    ids = [second.artifact_id, first.artifact_id, second.artifact_id]
    d = vault.put(OWNER, b"both", derived_from=ids, labels=["pii"])
    assert vault.describe(OWNER, d.artifact_id).to_dict()["retrieval"]["derived_from"] == [
        second.artifact_id,
        first.artifact_id,
    ]


def test_builtin_meanings_are_pii_secret_and_confidential() -> None:
    assert set(LABEL_MEANINGS) == {"pii", "secret", "confidential"}
    assert check_labels(["pii", "pii", "x.y-z_1:2"]) == frozenset({"pii", "x.y-z_1:2"})
    assert check_labels(None) == frozenset()


LONG = "Q" * 5000


@pytest.mark.parametrize(
    ("labels", "rule"),
    [
        ("pii", "list or set of label names"),
        (["PII"], "a-z 0-9"),
        (["-leading"], "a-z 0-9"),
        (["has space"], "a-z 0-9"),
        (["x" * 65], "1-64 characters"),
        ([LONG], "1-64 characters"),
        ([7], "a-z 0-9"),
        ([f"l{i}" for i in range(MAX_LABELS + 1)], f"at most {MAX_LABELS} labels"),
    ],
)
def test_bad_labels_are_invalid_metadata_naming_the_rule_and_store_nothing(
    vault: Vault, labels: Any, rule: str
) -> None:
    with pytest.raises(InvalidMetadata, match=rule) as caught:
        vault.put(OWNER, b"x", labels=labels)
    assert LONG not in str(caught.value)
    assert "PII" not in str(caught.value)
    assert vault.list(OWNER) == []


def test_exactly_the_maximum_number_of_labels_is_accepted(vault: Vault) -> None:
    names = {f"l{i}" for i in range(MAX_LABELS)}
    assert vault.put(OWNER, b"x", labels=names).labels == names


@pytest.mark.parametrize("derived_from", ["art_" + "a" * 26, ["not-an-id"], [LONG], [None]])
def test_bad_derived_from_is_invalid_metadata(vault: Vault, derived_from: Any) -> None:
    with pytest.raises(InvalidMetadata, match="derived_from") as caught:
        vault.put(OWNER, b"x", derived_from=derived_from)
    assert LONG not in str(caught.value)
    assert vault.list(OWNER) == []


def test_an_idempotent_retry_with_other_labels_conflicts_naming_the_field_only(vault: Vault) -> None:
    first = vault.put(OWNER, b"x", labels={"pii"}, idempotency_key="k1")
    assert vault.put(OWNER, b"x", labels={"pii"}, idempotency_key="k1").artifact_id == first.artifact_id
    with pytest.raises(IdempotencyConflict, match="labels") as caught:
        vault.put(OWNER, b"x", labels={"secret"}, idempotency_key="k1")
    assert "secret" not in str(caught.value)


# -- labels are protected state ---------------------------------------------------------------------------------


@pytest.mark.parametrize("edited", [None, '["secret"]', '["pii","public"]'])
def test_an_edited_labels_column_fails_its_mac_on_every_read_and_in_verify(vault: Vault, edited: str | None) -> None:
    d = vault.put(OWNER, b"SECRET-BYTES " * 100, labels={"pii", "secret"})
    _edit_labels(vault, d.artifact_id, edited)
    for attempt in (
        lambda: vault.describe(OWNER, d.artifact_id),
        lambda: vault.read_bytes(OWNER, d.artifact_id),
        lambda: vault.list(OWNER),
    ):
        with pytest.raises(IntegrityError) as caught:
            attempt()
        assert caught.value.kind == "manifest"
        assert "SECRET" not in str(caught.value)
    problems = {(p.kind, ids) for p in vault.verify().problems for ids in p.artifact_ids}
    assert ("manifest", d.artifact_id) in problems


def test_an_edited_derived_from_column_fails_its_mac(vault: Vault) -> None:
    source, other = vault.put(OWNER, b"a"), vault.put(OWNER, b"b")
    d = vault.put(OWNER, b"derived", derived_from=[source.artifact_id])
    _edit_labels(vault, d.artifact_id, json.dumps([other.artifact_id]), column="derived_from")
    with pytest.raises(IntegrityError) as caught:
        vault.describe(OWNER, d.artifact_id)
    assert caught.value.kind == "manifest"


def test_labels_cannot_be_planted_on_an_unlabelled_row(vault: Vault) -> None:
    d = vault.put(OWNER, b"plain")
    _edit_labels(vault, d.artifact_id, '["public"]')
    with pytest.raises(IntegrityError):
        vault.describe(OWNER, d.artifact_id)


def test_rows_without_labels_keep_the_mac_they_had_before_labels_existed(embedded_vault: Vault) -> None:
    vault = embedded_vault
    d = vault.put(OWNER, b"old row")
    catalog = vault.catalog
    assert isinstance(catalog, SqlCatalog)
    with catalog._read() as conn:
        mac_before = conn.execute(sa.select(artifacts.c.mac).where(artifacts.c.artifact_id == d.artifact_id)).scalar()
    from refvault.catalog.macs import canonical

    manifest = catalog.find(OWNER, d.artifact_id)
    assert manifest is not None
    # the unlabelled encoding is exactly the pre-label one: 19 fields, nothing appended
    assert len(json.loads(canonical(manifest))) == 19
    assert catalog.manifest_keys.fault(manifest, mac_before) is None


def test_upgrade_adds_the_columns_and_old_rows_still_verify(tmp_path: Path) -> None:
    with Vault.open(tmp_path / "store") as vault:
        d = vault.put(OWNER, b"written before migration 6", media_type="text/plain")
        catalog = vault.catalog
        assert isinstance(catalog, SqlCatalog)
        with catalog._write() as conn, conn.begin():
            conn.execute(sa.text("ALTER TABLE refvault_artifacts DROP COLUMN labels"))
            conn.execute(sa.text("ALTER TABLE refvault_artifacts DROP COLUMN derived_from"))
            conn.execute(migrations.delete().where(migrations.c.version == LABELS_MIGRATION))
    with Vault.open(tmp_path / "store") as vault:
        assert vault.read_bytes(OWNER, d.artifact_id) == b"written before migration 6"
        assert vault.describe(OWNER, d.artifact_id).labels == frozenset()
        labelled = vault.put(OWNER, b"new", labels={"pii"})
        assert vault.describe(OWNER, labelled.artifact_id).labels == {"pii"}
        assert vault.verify().ok


# -- declassify -------------------------------------------------------------------------------------------------


@pytest.fixture
def records(vault: Vault) -> list[AuditRecord]:
    seen: list[AuditRecord] = []
    vault.add_audit_sink(seen.append)
    return seen


def test_the_owner_declassifies_a_label_and_the_row_stays_authentic(vault: Vault, records: list[AuditRecord]) -> None:
    d = vault.put(OWNER, PAYLOAD, labels={"pii", "secret"})
    after = vault.declassify(OWNER, d.artifact_id, remove={"secret"}, reason=CANARY)
    assert after.labels == {"pii"}
    assert after.artifact_id == d.artifact_id
    assert after.content_hash == d.content_hash
    assert vault.describe(OWNER, d.artifact_id).labels == {"pii"}
    assert vault.read_bytes(OWNER, d.artifact_id) == PAYLOAD
    assert vault.verify().ok
    last = vault.declassify(OWNER, d.artifact_id, remove=["pii"], reason="approved")
    assert last.to_dict()["retrieval"]["labels"] == []
    declassified = [r for r in records if r.action == "declassify"]
    assert [r.outcome for r in declassified] == ["ok", "ok"]
    assert all(r.artifact_id == d.artifact_id for r in declassified)
    assert CANARY not in repr(records)  # the reason's text is never in an audit record
    vault.flush_audit()
    stored = [e for e in vault.audit(OWNER, artifact_id=d.artifact_id) if e.action == "declassify"]
    assert [(e.outcome, e.detail) for e in stored] == [("ok", "labels removed")] * 2
    reason_hash = hashlib.sha256(CANARY.encode()).hexdigest()
    assert stored[0].selection == f"removed=secret;reason_sha256={reason_hash}"
    assert stored[1].selection == f"removed=pii;reason_sha256={hashlib.sha256(b'approved').hexdigest()}"
    assert CANARY not in repr(vault.audit(OWNER, limit=1000))
    assert vault.verify_audit(OWNER.tenant).ok  # each entry appended once, in its transaction, chained


def test_declassify_by_anyone_but_the_owner_is_the_same_not_found_as_absent(vault: Vault) -> None:
    d = vault.put(OWNER, PAYLOAD, labels={"pii"})
    absent = "art_" + "a" * 26
    with pytest.raises(NotFound) as missing:
        vault.declassify(OWNER, absent, remove={"pii"}, reason="r")
    for stranger in (OTHER_SESSION, OTHER_TENANT):
        with pytest.raises(NotFound) as denied:
            vault.declassify(stranger, d.artifact_id, remove={"pii"}, reason="r")
        assert type(denied.value) is type(missing.value)
        assert str(denied.value) == str(missing.value).replace(absent, d.artifact_id)
    assert vault.describe(OWNER, d.artifact_id).labels == {"pii"}


@pytest.mark.parametrize(
    ("remove", "reason", "message"),
    [
        ({"secret"}, "r", "does not carry the label 'secret'"),
        (set(), "r", "at least one label"),
        ("pii", "r", "set of label names"),
        ({"PII"}, "r", "a-z 0-9"),
        ({"pii"}, "", "reason"),
        ({"pii"}, "x" * 1025, "reason"),
        ({"pii"}, None, "reason"),
    ],
)
def test_declassify_refuses_what_it_cannot_do_and_changes_nothing(
    vault: Vault, remove: Any, reason: Any, message: str
) -> None:
    d = vault.put(OWNER, PAYLOAD, labels={"pii"})
    with pytest.raises(InvalidArgument, match=message):
        vault.declassify(OWNER, d.artifact_id, remove=remove, reason=reason)
    assert vault.describe(OWNER, d.artifact_id).labels == {"pii"}


def test_declassify_refuses_a_row_that_fails_its_mac_and_never_re_signs_it(vault: Vault) -> None:
    d = vault.put(OWNER, PAYLOAD, labels={"pii", "secret"})
    _edit_labels(vault, d.artifact_id, '["pii"]')
    with pytest.raises(IntegrityError):
        vault.declassify(OWNER, d.artifact_id, remove={"pii"}, reason="r")
    with pytest.raises(IntegrityError):
        vault.describe(OWNER, d.artifact_id)


def test_async_vault_puts_labels_and_declassifies(memory_vault: Vault) -> None:
    async def run() -> tuple[frozenset[str], frozenset[str]]:
        facade = AsyncVault(memory_vault)
        d = await facade.put(OWNER, b"x", labels={"pii", "confidential"})
        after = await facade.declassify(OWNER, d.artifact_id, remove={"confidential"}, reason="r")
        return d.labels, after.labels

    assert asyncio.run(run()) == ({"pii", "confidential"}, {"pii"})


# -- the HTTP client and server, and the CLI --------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with serve(tmp_path_factory.mktemp("labels") / "store") as server:
        yield server


@pytest.fixture
def client(live: LiveServer) -> Iterator[Client]:
    with Client(live.url, live.token) as opened:
        yield opened


def test_labels_and_derived_from_travel_over_http(client: Client, request: pytest.FixtureRequest) -> None:
    scope = Scope("acme", "ana", "http-" + request.node.name[-40:].replace("[", "-").replace("]", ""))
    source = client.put(scope, b"source", media_type="text/plain")
    d = client.put(scope, PAYLOAD, labels={"pii", "secret"}, derived_from=[source.artifact_id])
    assert d.labels == {"pii", "secret"}
    assert d.derived_from == (source.artifact_id,)
    assert client.describe(scope, d.artifact_id) == d
    after = client.declassify(scope, d.artifact_id, remove={"secret"}, reason=CANARY)
    assert after.labels == {"pii"}
    assert client.describe(scope, d.artifact_id).labels == {"pii"}
    with pytest.raises(InvalidArgument, match="does not carry the label 'secret'"):
        client.declassify(scope, d.artifact_id, remove={"secret"}, reason="r")
    with pytest.raises(InvalidMetadata, match="a-z 0-9"):
        client.put(scope, b"x", labels=["Bad Label"])


def test_declassify_over_http_by_another_session_is_not_found(live: LiveServer, client: Client) -> None:
    d = client.put(OWNER, PAYLOAD, labels={"pii"})
    with pytest.raises(NotFound):
        client.declassify(OTHER_SESSION, d.artifact_id, remove={"pii"}, reason="r")
    assert client.describe(OWNER, d.artifact_id).labels == {"pii"}


def test_the_server_checks_labels_in_the_metadata_header_and_the_declassify_body(
    live: LiveServer, client: Client
) -> None:
    import httpx

    headers = {
        "Authorization": f"Bearer {live.token}",
        "Refvault-Tenant": OWNER.tenant,
        "Refvault-User": OWNER.user,
        "Refvault-Session": OWNER.session,
    }
    bad = httpx.post(
        f"{live.url}/v1/artifacts",
        content=b"x",
        headers={**headers, "Refvault-Metadata": json.dumps({"labels": ["UPPER" + "Q" * 300]})},
    )
    assert bad.status_code == 400
    assert "QQQQ" not in bad.text
    d = client.put(OWNER, b"y", labels={"pii"})
    for body in (
        b"{}",
        b'{"remove": "pii", "reason": "r"}',
        b"not json",
        b'{"remove": ["pii"], "reason": "r", "x": 1}',
    ):
        answer = httpx.post(f"{live.url}/v1/artifacts/{d.artifact_id}/declassify", content=body, headers=headers)
        assert answer.status_code == 400, body
    assert client.describe(OWNER, d.artifact_id).labels == {"pii"}


def test_cli_put_label_and_declassify(tmp_path: Path) -> None:
    store = tmp_path / "store"
    source = tmp_path / "people.csv"
    source.write_bytes(PAYLOAD)
    runner = CliRunner()
    scope_args = ["--tenant", OWNER.tenant, "--user", OWNER.user, "--session", OWNER.session]
    put = runner.invoke(
        main, ["put", str(source), "--label", "pii", "--label", "secret", "--json", "--store", str(store), *scope_args]
    )
    assert put.exit_code == 0, put.output
    captured = json.loads(put.stdout)
    assert captured["retrieval"]["labels"] == ["pii", "secret"]
    artifact_id = captured["artifact_id"]
    done = runner.invoke(
        main,
        [
            "declassify",
            artifact_id,
            "--remove",
            "secret",
            "--reason",
            CANARY,
            "--json",
            "--store",
            str(store),
            *scope_args,
        ],
    )
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["retrieval"]["labels"] == ["pii"]
    again = runner.invoke(
        main, ["declassify", artifact_id, "--remove", "secret", "--reason", "r", "--store", str(store), *scope_args]
    )
    assert again.exit_code != 0
    assert "does not carry the label" in again.output
    bad = runner.invoke(main, ["put", str(source), "--label", "Bad", "--store", str(store), *scope_args])
    assert bad.exit_code != 0
    with Vault.open(store) as vault:
        assert [d.labels for d in vault.list(OWNER)] == [{"pii"}]


@pytest.mark.parametrize("field", ["labels", "derived_from"])
@pytest.mark.parametrize("bad", ["pii", 5, ["Not A Label"], [1], {"pii": True}])
def test_a_descriptor_from_elsewhere_with_malformed_labels_or_provenance_is_refused(
    memory_vault: Vault, field: str, bad: Any
) -> None:
    shown = memory_vault.put(OWNER, b"x", labels={"pii"}, derived_from=["art_" + "a" * 26]).to_dict()
    assert Descriptor.from_dict(shown).labels == {"pii"}
    shown["retrieval"][field] = bad
    with pytest.raises(InvalidMetadata, match="malformed descriptor"):
        Descriptor.from_dict(shown)
