"""Manifest rows are authenticated: an edit of the catalog without the key is caught on every read and by verify.

The attack: with write access to the catalog (SQL on the SQLite file or the PostgreSQL
database, or the memory catalog's rows), point an artifact's content hash at another
blob of the same tenant, remove an expiry, turn ``sealed`` into ``model``, move an
artifact to another scope, or drop its MAC. Each must be an ``IntegrityError`` naming
the id (and no content) on describe and read, and a problem ``verify`` reports (the CLI
exits 1). Also here: an artifact whose blob key is outside its tenant's namespace; the
key file (0600, outside the catalog); rotation; upgrade of a store written before MACs;
and a scale-out store opened without its key.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from refvault import Scope, Vault, read
from refvault.catalog.macs import ENV_KEY, ENV_KEY_FILE, KEY_FILE, ManifestKeys
from refvault.catalog.memory import MemoryCatalog
from refvault.catalog.schema import artifacts, migrations
from refvault.catalog.sql import SqlCatalog
from refvault.cli import main
from refvault.errors import Expired, IntegrityError, NotFound, StorageError
from refvault.ids import namespace_of
from tests.conftest import Clock
from tests.servers import S3Endpoint, fresh_database, fresh_prefix

SCOPE = Scope("acme", "ana", "s1")
SECRET = b"SECRET-PAYROLL-" * 3000  # 45 KB: a blob file, not inline
OTHER = b"other bytes of the same tenant " * 2000


# -- editing rows behind refvault's back ------------------------------------------------------------------


def edit(vault: Vault, artifact_id: str, **columns: Any) -> None:
    """Change catalog columns of one artifact row directly: SQL on the database, or the memory catalog's row."""
    catalog = vault.catalog
    if isinstance(catalog, MemoryCatalog):
        row = catalog._rows[artifact_id]
        m = row.manifest
        fields: dict[str, Any] = {}
        scope = {"tenant": m.scope.tenant, "user": m.scope.user, "session": m.scope.session}
        for name, value in columns.items():
            if name == "mac":
                row.mac = value
            elif name in ("tenant", "user_name", "session"):
                scope["user" if name == "user_name" else name] = value
            elif name == "expires_us":
                assert value is None
                fields["expires_at"] = None
            else:
                fields[name] = value
        row.manifest = replace(m, scope=Scope(**scope), **fields)
        return
    assert isinstance(catalog, SqlCatalog)
    with catalog._write() as conn, conn.begin():
        conn.execute(artifacts.update().where(artifacts.c.artifact_id == artifact_id).values(**columns))


def mac_of(vault: Vault, artifact_id: str) -> str | None:
    catalog = vault.catalog
    if isinstance(catalog, MemoryCatalog):
        return catalog._rows[artifact_id].mac
    assert isinstance(catalog, SqlCatalog)
    with catalog._read() as conn:
        value: str | None = conn.execute(
            sa.select(artifacts.c.mac).where(artifacts.c.artifact_id == artifact_id)
        ).scalar()
    return value


def assert_refused(vault: Vault, scope: Scope, artifact_id: str) -> None:
    """Every read path refuses with IntegrityError naming the id, never the content."""
    reads: list[Callable[[], object]] = [
        lambda: vault.describe(scope, artifact_id),
        lambda: vault.read_bytes(scope, artifact_id),
        lambda: vault.read_range(scope, artifact_id, 0, 10),
        lambda: vault.stream(scope, artifact_id),
        lambda: vault.open_artifact(scope, artifact_id),
        lambda: vault.verify_artifact(scope, artifact_id),
        lambda: vault.list(scope),
    ]
    for attempt in reads:
        with pytest.raises(IntegrityError) as err:
            attempt()
        assert err.value.kind == "manifest"
        assert str(err.value).startswith(f"artifact {artifact_id} failed verification: ")
        assert b"SECRET" not in str(err.value).encode()


def manifest_problems(vault: Vault) -> dict[str, set[str]]:
    """verify's problems, as kind -> artifact ids."""
    report = vault.verify()
    found: dict[str, set[str]] = {}
    for problem in report.problems:
        found.setdefault(problem.kind, set()).update(problem.artifact_ids)
        assert "SECRET" not in problem.detail
    return found


# -- each tampering of the issue ----------------------------------------------------------------------------


def test_an_untouched_store_verifies_and_serves(vault: Vault) -> None:
    d = vault.put(SCOPE, SECRET, disclosure="sealed")
    assert vault.read_bytes(SCOPE, d.artifact_id) == SECRET
    assert vault.verify().ok
    mac = mac_of(vault, d.artifact_id)
    assert mac is not None
    assert mac.startswith(f"v1:{vault.catalog.manifest_keys.current_id}:")


def test_digest_pointed_at_another_blob_of_the_tenant_is_refused(vault: Vault) -> None:
    secret = vault.put(SCOPE, SECRET, disclosure="sealed")
    other = vault.put(SCOPE, OTHER)
    edit(vault, other.artifact_id, digest=secret.content_hash.removeprefix("sha256:"), size=len(SECRET))
    assert_refused(vault, SCOPE, other.artifact_id)
    assert manifest_problems(vault) == {"manifest": {other.artifact_id}}
    assert vault.read_bytes(SCOPE, secret.artifact_id) == SECRET  # the untouched row still serves


def test_expiry_removed_is_refused(vault: Vault, clock: Clock) -> None:
    d = vault.put(SCOPE, SECRET, expires_at=clock.now + timedelta(hours=1))
    edit(vault, d.artifact_id, expires_us=None)
    clock.advance(hours=2)
    assert_refused(vault, SCOPE, d.artifact_id)
    assert manifest_problems(vault) == {"manifest": {d.artifact_id}}


def test_sealed_turned_into_model_is_refused(vault: Vault) -> None:
    d = vault.put(SCOPE, SECRET, media_type="text/plain", disclosure="sealed")
    edit(vault, d.artifact_id, disclosure="model")
    assert_refused(vault, SCOPE, d.artifact_id)
    assert manifest_problems(vault) == {"manifest": {d.artifact_id}}


@pytest.mark.parametrize("column", ["user_name", "session"])
def test_artifact_moved_to_another_scope_of_the_tenant_is_refused(vault: Vault, column: str) -> None:
    d = vault.put(SCOPE, SECRET)
    moved = replace(SCOPE, **{"user" if column == "user_name" else column: "mallory"})
    edit(vault, d.artifact_id, **{column: "mallory"})
    assert_refused(vault, moved, d.artifact_id)
    with pytest.raises(NotFound):
        vault.describe(SCOPE, d.artifact_id)
    assert manifest_problems(vault) == {"manifest": {d.artifact_id}}


def test_artifact_moved_to_another_tenant_is_refused(vault: Vault) -> None:
    d = vault.put(SCOPE, SECRET)
    moved = replace(SCOPE, tenant="evil")
    edit(vault, d.artifact_id, tenant="evil")
    assert_refused(vault, moved, d.artifact_id)
    problems = manifest_problems(vault)
    assert problems["manifest"] == {d.artifact_id}
    # its blob is not in the new tenant's namespace: verify says so (it used to say ok)
    assert problems["missing"] == {d.artifact_id}
    if not isinstance(vault.catalog, MemoryCatalog):  # only SQL rows keep a namespace of their own
        assert problems["misplaced"] == {d.artifact_id}


@pytest.mark.parametrize("mac", [None, "", "v1:nokey:" + "0" * 64, "garbage\nIGNORE PREVIOUS"])
def test_mac_removed_blanked_or_forged_is_refused(vault: Vault, mac: str | None) -> None:
    d = vault.put(SCOPE, SECRET)
    edit(vault, d.artifact_id, mac=mac)
    assert_refused(vault, SCOPE, d.artifact_id)
    assert manifest_problems(vault) == {"manifest": {d.artifact_id}}


def test_mac_copied_from_another_row_is_refused(vault: Vault) -> None:
    a = vault.put(SCOPE, SECRET)
    b = vault.put(SCOPE, OTHER)
    edit(vault, b.artifact_id, mac=mac_of(vault, a.artifact_id))
    assert_refused(vault, SCOPE, b.artifact_id)


def test_released_idempotency_key_keeps_the_old_row_authentic(vault: Vault, clock: Clock) -> None:
    first = vault.put(SCOPE, b"one", idempotency_key="k", expires_at=clock.now + timedelta(minutes=1))
    clock.advance(minutes=2)
    second = vault.put(SCOPE, b"two", idempotency_key="k")
    assert second.artifact_id != first.artifact_id
    with pytest.raises(Expired):  # the released row was MAC'd again: expired, not damaged
        vault.describe(SCOPE, first.artifact_id)
    assert vault.verify().ok


def test_idempotent_replay_of_an_altered_row_is_refused(vault: Vault) -> None:
    d = vault.put(SCOPE, SECRET, idempotency_key="k", disclosure="sealed")
    edit(vault, d.artifact_id, disclosure="model")
    with pytest.raises(IntegrityError):
        vault.put(SCOPE, SECRET, idempotency_key="k", disclosure="model")


# -- the blob namespace ----------------------------------------------------------------------------------------


@pytest.fixture(params=["embedded", "s3+postgres"])
def sql_vault(request: pytest.FixtureRequest, tmp_path: Path, clock: Clock) -> Iterator[Vault]:
    from tests.conftest import BACKENDS

    vault = BACKENDS[request.param](request, tmp_path, clock=clock)
    yield vault
    vault.close()


def test_blob_key_outside_the_tenants_namespace_is_refused_and_reported(sql_vault: Vault) -> None:
    d = sql_vault.put(SCOPE, SECRET)
    sql_vault.put(Scope("other", "ana", "s1"), SECRET)  # the same bytes exist in another tenant's namespace
    edit(sql_vault, d.artifact_id, namespace=namespace_of("other"))
    with pytest.raises(IntegrityError, match="another tenant's namespace"):
        sql_vault.describe(SCOPE, d.artifact_id)
    assert manifest_problems(sql_vault) == {"misplaced": {d.artifact_id}}


# -- the command line ---------------------------------------------------------------------------------------


def test_cli_verify_reports_an_altered_row_and_exits_1(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with Vault.open(store) as vault:
        d = vault.put(Scope("local", "local", "local"), SECRET, disclosure="sealed")
        edit(vault, d.artifact_id, disclosure="model")
    runner = CliRunner()
    result = runner.invoke(main, ["verify", "--store", str(store), "--json"], catch_exceptions=False)
    assert result.exit_code == 1
    [problem] = json.loads(result.stdout)["problems"]
    assert problem["kind"] == "manifest"
    assert problem["artifact_ids"] == [d.artifact_id]
    human = runner.invoke(main, ["verify", "--store", str(store)], catch_exceptions=False)
    assert human.exit_code == 1
    assert human.stdout.startswith("1 altered manifest row: ")
    shown = runner.invoke(main, ["show", d.artifact_id, "--store", str(store)], catch_exceptions=False)
    assert shown.exit_code == 1
    assert "failed verification" in shown.stderr
    for output in (result.output, human.output, shown.output):
        assert "SECRET" not in output


# -- the key -----------------------------------------------------------------------------------------------------


def _secrets(path: Path) -> list[bytes]:
    return [base64.b64decode(key["secret"]) for key in json.loads(path.read_text())["keys"]]


def test_key_file_is_private_and_never_in_the_catalog(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with Vault.open(store) as vault:
        for n in range(20):
            vault.put(SCOPE, b"x%d" % n)
        vault.rotate_manifest_key()
        vault.put(SCOPE, b"after rotation")
    key_file = store / KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    secrets = _secrets(key_file)
    assert len(secrets) == 2
    catalog = b"".join(p.read_bytes() for p in store.glob("catalog.db*"))
    for secret in secrets:
        for form in (secret, secret.hex().encode(), base64.b64encode(secret)):
            assert form not in catalog


def test_key_file_readable_by_others_or_a_symlink_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    Vault.open(store).close()
    key_file = store / KEY_FILE
    key_file.chmod(0o644)
    with pytest.raises(StorageError, match="manifest key file is accessible to other users"):
        Vault.open(store)
    key_file.chmod(0o600)
    key_file.rename(tmp_path / "elsewhere.json")
    key_file.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(StorageError, match="manifest key file is a symbolic link"):
        Vault.open(store)


def test_a_store_opened_with_another_key_serves_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with Vault.open(store) as vault:
        d = vault.put(SCOPE, SECRET)
    (store / KEY_FILE).unlink()
    with pytest.raises(StorageError, match="is missing but 1 artifact is signed with it"):
        Vault.open(store)  # no new key is made in place of a lost one
    ManifestKeys.create_file(store / KEY_FILE)  # another key: rows MAC'd with the lost one are refused
    with Vault.open(store) as vault:
        with pytest.raises(IntegrityError, match="signed with a key this store does not hold"):
            vault.read_bytes(SCOPE, d.artifact_id)
        assert manifest_problems(vault) == {"manifest": {d.artifact_id}}


# -- rotation ----------------------------------------------------------------------------------------------------


@pytest.fixture(params=["memory", "embedded"])
def rotatable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Vault]:
    """A vault whose ring refvault may rotate (the scale-out one here comes from $REFVAULT_MANIFEST_KEY: see below)."""
    from tests.conftest import BACKENDS

    vault = BACKENDS[request.param](request, tmp_path)
    yield vault
    vault.close()


def test_rotation_signs_new_rows_with_the_new_key_and_old_keys_still_verify(rotatable: Vault) -> None:
    vault = rotatable
    keys = vault.catalog.manifest_keys
    old_id = keys.current_id
    d = vault.put(SCOPE, SECRET)
    old_mac = mac_of(vault, d.artifact_id)
    assert old_mac is not None
    assert old_mac.startswith(f"v1:{old_id}:")

    rotation = vault.rotate_manifest_key()
    assert rotation.key_id == keys.current_id != old_id
    assert (rotation.remacd, rotation.failing) == (1, 0)
    assert mac_of(vault, d.artifact_id) != old_mac
    assert str(mac_of(vault, d.artifact_id)).startswith(f"v1:{rotation.key_id}:")
    fresh = vault.put(SCOPE, OTHER)
    assert str(mac_of(vault, fresh.artifact_id)).startswith(f"v1:{rotation.key_id}:")

    edit(vault, d.artifact_id, mac=old_mac)  # a row still MAC'd with the retired key verifies
    assert vault.read_bytes(SCOPE, d.artifact_id) == SECRET
    assert vault.verify().ok

    dropping = vault.rotate_manifest_key(drop_retired=True)
    assert dropping.dropped is not None
    assert set(dropping.dropped) == {old_id, rotation.key_id}
    assert keys.key_ids == (dropping.key_id,)
    edit(vault, d.artifact_id, mac=old_mac)  # once dropped, the old key verifies nothing
    assert_refused(vault, SCOPE, d.artifact_id)


def test_rotation_leaves_altered_rows_failing(rotatable: Vault) -> None:
    vault = rotatable
    d = vault.put(SCOPE, SECRET, disclosure="sealed")
    edit(vault, d.artifact_id, disclosure="model")
    rotation = vault.rotate_manifest_key()
    assert (rotation.remacd, rotation.failing) == (0, 1)
    assert_refused(vault, SCOPE, d.artifact_id)


def test_rotation_by_one_process_is_seen_by_another_on_the_same_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with Vault.open(store) as first, Vault.open(store) as second:
        before = first.put(SCOPE, SECRET)
        rotation = second.rotate_manifest_key()
        after = first.put(SCOPE, OTHER)  # the first vault re-reads the rotated file before it signs
        assert str(mac_of(first, after.artifact_id)).startswith(f"v1:{rotation.key_id}:")
        for vault in (first, second):
            assert vault.read_bytes(SCOPE, before.artifact_id) == SECRET
            assert vault.read_bytes(SCOPE, after.artifact_id) == OTHER
    runner = CliRunner()
    shown = runner.invoke(main, ["manifest-key", "show", "--store", str(store), "--json"], catch_exceptions=False)
    assert json.loads(shown.stdout)["current"] == rotation.key_id
    result = runner.invoke(
        main, ["manifest-key", "rotate", "--drop-retired", "--store", str(store), "--json"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    done = json.loads(result.stdout)
    assert done["remacd"] == 2
    assert done["failing"] == 0
    assert len(done["dropped"]) == 2
    with Vault.open(store) as vault:
        assert vault.verify().ok


# -- upgrade of a store written before manifest MACs --------------------------------------------------------------


def _downgrade(catalog: SqlCatalog) -> None:
    """Make the catalog look as refvault left it before manifest MACs: no mac column, no migration 4."""
    with catalog._write() as conn, conn.begin():
        conn.execute(sa.text("ALTER TABLE refvault_artifacts DROP COLUMN mac"))
        conn.execute(sa.text("ALTER TABLE refvault_derivations DROP COLUMN mac"))
        conn.execute(migrations.delete().where(migrations.c.version == 4))


@pytest.fixture
def scaled_store(postgres_url: str, s3_server: S3Endpoint) -> tuple[str, str, str]:
    return fresh_database(postgres_url), fresh_prefix(s3_server), s3_server.url


@pytest.mark.parametrize("backend", ["embedded", "s3+postgres"])
def test_upgrade_macs_existing_rows_once_and_keeps_serving(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if backend == "embedded":
        open_store: Callable[[], Vault] = lambda: Vault.open(tmp_path / "store")  # noqa: E731
    else:
        url, blobs, endpoint = request.getfixturevalue("scaled_store")
        open_store = lambda: Vault.open(url, blobs=blobs, s3_endpoint=endpoint)  # noqa: E731
    with open_store() as vault:
        kept = vault.put(SCOPE, SECRET, disclosure="sealed")
        edited_before = vault.put(SCOPE, OTHER)
        weird = vault.put(SCOPE, b"disclosure edited to an unknown value")
        records = vault.put(SCOPE, b'{"n": 1}\n{"n": 2}\n', media_type="application/x-ndjson")
        assert read.query(vault, SCOPE, records.artifact_id)["returned_records"] == 2  # derives its Parquet form
        assert isinstance(vault.catalog, SqlCatalog)
        _downgrade(vault.catalog)
        edit(vault, edited_before.artifact_id, filename="edited-before-the-upgrade.txt")
        edit(vault, weird.artifact_id, disclosure="weird")
    if backend == "embedded":
        (tmp_path / "store" / KEY_FILE).unlink()  # a store older than MACs had no key file either
    with open_store() as vault:  # the upgrade: every row gains a MAC, as it stands
        assert vault.read_bytes(SCOPE, kept.artifact_id) == SECRET
        assert vault.describe(SCOPE, kept.artifact_id).retrieval["disclosure"] == "sealed"
        # documented limit: an edit made before the upgrade is adopted with the row
        assert vault.describe(SCOPE, edited_before.artifact_id).retrieval["filename"] == "edited-before-the-upgrade.txt"
        assert vault.describe(SCOPE, weird.artifact_id).disclosure == "sealed"  # adopted as it reads: fail closed
        assert read.query(vault, SCOPE, records.artifact_id)["returned_records"] == 2  # its derivation was adopted
        assert vault.verify().ok
        assert str(mac_of(vault, kept.artifact_id)).startswith("v1:")
        # after the upgrade, blanking a MAC and removing the migration record is no way back to adoption
        edit(vault, kept.artifact_id, mac=None, disclosure="model")
        assert isinstance(vault.catalog, SqlCatalog)
        with vault.catalog._write() as conn, conn.begin():
            conn.execute(migrations.delete().where(migrations.c.version == 4))
    with open_store() as vault:
        assert_refused(vault, SCOPE, kept.artifact_id)
        assert manifest_problems(vault) == {"manifest": {kept.artifact_id}}


# -- scale-out -----------------------------------------------------------------------------------------------------


def test_scaleout_store_without_its_key_is_refused_with_the_variable_named(
    scaled_store: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, blobs, endpoint = scaled_store
    monkeypatch.delenv(ENV_KEY, raising=False)
    monkeypatch.delenv(ENV_KEY_FILE, raising=False)
    with pytest.raises(StorageError, match=f"set \\${ENV_KEY_FILE} to a key file .* or \\${ENV_KEY}"):
        Vault.open(url, blobs=blobs, s3_endpoint=endpoint)


def test_scaleout_processes_with_different_keys_do_not_accept_each_others_rows(
    scaled_store: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url, blobs, endpoint = scaled_store
    with Vault.open(url, blobs=blobs, s3_endpoint=endpoint) as shared:
        d = shared.put(SCOPE, SECRET)
    monkeypatch.delenv(ENV_KEY)
    key_file = tmp_path / "other-keys.json"
    runner = CliRunner()
    made = runner.invoke(main, ["manifest-key", "new", str(key_file)], catch_exceptions=False)
    assert made.exit_code == 0, made.output
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert runner.invoke(main, ["manifest-key", "new", str(key_file)]).exit_code == 1  # never overwritten
    monkeypatch.setenv(ENV_KEY_FILE, str(key_file))
    with Vault.open(url, blobs=blobs, s3_endpoint=endpoint) as stranger:
        assert_refused(stranger, SCOPE, d.artifact_id)


def test_scaleout_key_file_rotates_and_an_environment_ring_cannot(
    scaled_store: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url, blobs, endpoint = scaled_store
    with Vault.open(url, blobs=blobs, s3_endpoint=endpoint) as vault:
        d = vault.put(SCOPE, SECRET)
        with pytest.raises(StorageError, match=f"cannot be rotated here.*\\${ENV_KEY_FILE}"):
            vault.rotate_manifest_key()
    key_file = tmp_path / "keys.json"
    key_file.write_text(os.environ[ENV_KEY])  # the same ring, now kept in a file
    key_file.chmod(0o600)
    monkeypatch.delenv(ENV_KEY)
    monkeypatch.setenv(ENV_KEY_FILE, str(key_file))
    with (
        Vault.open(url, blobs=blobs, s3_endpoint=endpoint) as a,
        Vault.open(url, blobs=blobs, s3_endpoint=endpoint) as b,
    ):
        rotation = a.rotate_manifest_key()
        assert rotation.remacd == 1
        fresh = b.put(SCOPE, OTHER)  # b re-reads the rotated file
        assert str(mac_of(b, fresh.artifact_id)).startswith(f"v1:{rotation.key_id}:")
        assert b.read_bytes(SCOPE, d.artifact_id) == SECRET
        assert a.read_bytes(SCOPE, fresh.artifact_id) == OTHER
    assert ManifestKeys.from_file(key_file).current_id == rotation.key_id


# -- derivations (the Parquet form record queries read) --------------------------------------------------------


def test_derivation_pointed_at_another_artifacts_derivative_is_refused(vault: Vault) -> None:
    from refvault.catalog.schema import derivations

    mine = vault.put(SCOPE, b'{"who": "ana"}\n' * 50, media_type="application/x-ndjson")
    theirs_scope = Scope("acme", "bob", "s9")
    theirs = vault.put(theirs_scope, b'{"who": "SECRET-bob"}\n' * 50, media_type="application/x-ndjson")
    assert read.query(vault, SCOPE, mine.artifact_id)["returned_records"] == 50
    assert read.query(vault, theirs_scope, theirs.artifact_id)["returned_records"] == 50
    source = vault.catalog.find(SCOPE, mine.artifact_id)
    other = vault.catalog.find(theirs_scope, theirs.artifact_id)
    assert source is not None
    assert other is not None
    [(kind, theirs_derived)] = [(d.kind, d) for d in vault.catalog.derivations() if d.source == other.key]
    catalog = vault.catalog
    if isinstance(catalog, MemoryCatalog):
        link = (source.key, kind)
        derivation, mac = catalog._derivations[link]
        catalog._derivations[link] = (replace(derivation, digest=theirs_derived.digest, size=theirs_derived.size), mac)
    else:
        assert isinstance(catalog, SqlCatalog)
        with catalog._write() as conn, conn.begin():
            conn.execute(
                derivations.update()
                .where(derivations.c.namespace == source.key.namespace, derivations.c.source_digest == source.digest)
                .values(derived_digest=theirs_derived.digest, derived_size=theirs_derived.size)
            )
    with pytest.raises(IntegrityError) as err:
        read.query(vault, SCOPE, mine.artifact_id)
    assert str(err.value).startswith(f"artifact {mine.artifact_id} failed verification: ")
    assert "SECRET" not in str(err.value)
    assert manifest_problems(vault) == {"manifest": {mine.artifact_id}}


def test_a_key_kept_apart_from_an_embedded_store_is_used_and_needed(tmp_path: Path) -> None:
    key_file = tmp_path / "keys" / "ring.json"
    key_file.parent.mkdir()
    keys = ManifestKeys.create_file(key_file)
    store = tmp_path / "store"
    with Vault.open(store, manifest_keys=keys) as vault:
        d = vault.put(SCOPE, SECRET)
        assert str(mac_of(vault, d.artifact_id)).startswith(f"v1:{keys.current_id}:")
    assert not (store / KEY_FILE).exists()
    with Vault.open(store, manifest_keys=ManifestKeys.from_file(key_file)) as vault:
        assert vault.read_bytes(SCOPE, d.artifact_id) == SECRET
    with pytest.raises(StorageError, match="is missing but 1 artifact is signed with it"):
        Vault.open(store)  # without it: refused, rather than a key of its own that verifies none of these rows
    assert not (store / KEY_FILE).exists()
