"""Moving content between stores: refvault migrate --from/--to, export and import (refvault.vault.transfer)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from refvault import read
from refvault.cli.group import main
from refvault.errors import IntegrityError
from refvault.keys import authenticate, create_key
from refvault.model import Principal, Scope
from refvault.policy import Policy, Rule
from refvault.vault import Vault
from refvault.vault.bundles import export_tenant, import_bundle
from refvault.vault.transfer import migrate_store
from tests.servers import S3Endpoint, fresh_catalog, fresh_prefix

ANA = Scope("acme", "ana", "s1")
GUS = Scope("globex", "gus", "g1")
BIG = b"".join(b"line %06d of a blob too large to keep inline\n" % n for n in range(2000))  # ~96 KB
RECORDS = b"".join(b'{"n": %d, "name": "r%d", "email": "u%d@example.com"}\n' % (n, n, n) for n in range(50))
POLICY = Policy([Rule("no-pii-to-models", labels=frozenset({"pii"}), recipients=("model:*",))], version="7")


def _fill(vault: Vault) -> dict[str, object]:
    """A store with a bit of everything: inline and large blobs, a redacted copy, a record index, a grant, a key,
    a policy, a hold and audit entries in two tenants."""
    big = vault.put(ANA, BIG, media_type="text/plain")
    small = vault.put(ANA, b"hello", media_type="text/plain", labels=["pii"])
    records = vault.put(ANA, RECORDS, media_type="application/x-ndjson")
    read.query(vault, ANA, records.artifact_id, limit=2)  # builds the record index: a derivation
    redacted = vault.redact(ANA, records.artifact_id, fields=["email"])
    grant = vault.share(ANA, big.artifact_id, to=Principal("acme", "bob"), purposes={"support"})
    vault.hold(ANA, small.artifact_id, reason="legal")
    vault.set_policy("acme", POLICY)
    _, token = create_key(vault, "acme", "ana")
    other = vault.put(GUS, b"globex bytes" * 5000)
    vault.read_bytes(ANA, big.artifact_id)
    return {
        "ids": [big.artifact_id, small.artifact_id, records.artifact_id, redacted.artifact_id],
        "other": other.artifact_id,
        "grant": grant.grant_id,
        "token": token,
        "records": records.artifact_id,
        "redacted": redacted.artifact_id,
    }


def _snapshot(vault: Vault, tenants: tuple[str, ...] = ("acme", "globex")) -> dict[str, object]:
    manifests = sorted((m for m in vault.catalog.manifests() if m.scope.tenant in tenants), key=lambda m: m.artifact_id)
    audit = {t: vault.catalog.audit_head(t) for t in tenants}  # before the reads below, which are audited
    return {
        "artifacts": [(m.artifact_id, m.scope, m.digest, m.labels, m.derived_from, m.created_at) for m in manifests],
        "bytes": [
            vault.read_bytes(m.scope, m.artifact_id, purpose="support") for m in manifests if m.scope.user == "ana"
        ],
        "grants": sorted(
            g.grant_id for m in manifests for g in vault.catalog.grants_for_artifact(m.scope, m.artifact_id)
        ),
        "holds": [h.hold_id for t in tenants for h in vault.catalog.holds(t, [m.artifact_id for m in manifests])],
        "keys": sorted(k.key_id for k in vault.catalog.api_keys() if k.tenant in tenants),
        "audit": audit,
    }


def _open(path: Path) -> Vault:
    return Vault.open(path, audit=False)


def test_a_store_moves_to_s3_and_postgres_and_back_with_the_same_ids_bytes_grants_keys_and_audit(
    tmp_path: Path, postgres_url: str, s3_server: S3Endpoint
) -> None:
    with Vault.open(tmp_path / "a") as source:
        facts = _fill(source)
        link = source.link(ANA, facts["ids"][0], recipient="user")  # type: ignore[index]
    with Vault.open(tmp_path / "a", read_only=True) as source:
        before = _snapshot(source)
        scaled = Vault.open(
            fresh_catalog(postgres_url), blobs=fresh_prefix(s3_server), s3_endpoint=s3_server.url, audit=False
        )
        with scaled:
            report = migrate_store(source, scaled)
            assert report.artifacts_copied == len(before["artifacts"])  # type: ignore[arg-type]
            assert scaled.catalog.manifest_keys.current_id != source.catalog.manifest_keys.current_id
            assert _snapshot(scaled) == before
            with _open(tmp_path / "b") as back:
                migrate_store(scaled, back)
    with Vault.open(tmp_path / "b") as back:
        assert _snapshot(back) == before
        assert back.verify_audit().ok
        assert back.verify().ok
        assert back.policy("acme") == POLICY
        principal = authenticate(back, facts["token"])
        assert principal is not None
        assert principal.tenant == "acme"
        assert back.derived(ANA, str(facts["records"]), _index_kind(back, str(facts["records"]))) is not None
        assert back.lineage(ANA, str(facts["redacted"])).nodes
        assert back.catalog.by_ids("acme", [str(facts["redacted"])])[str(facts["redacted"])].derived_from == (
            facts["records"],
        )
        assert back.open_link(link.rsplit("/", 1)[-1]).descriptor.artifact_id == facts["ids"][0]  # type: ignore[index]


def _index_kind(vault: Vault, artifact_id: str) -> str:
    graph = vault.lineage(ANA, artifact_id)
    return next(n.kind for n in graph.nodes if n.internal)


_KILLED = """
import sys, time
from refvault.vault import Vault
from refvault.vault.transfer import migrate_store
source = Vault.open(sys.argv[1], read_only=True)
dest = Vault.open(sys.argv[2], audit=False)
def progress(done, total):
    if done > total // 2:
        print("half", flush=True)
        time.sleep(600)
migrate_store(source, dest, progress=progress)
"""


@pytest.mark.slow
def test_a_migration_killed_midway_completes_when_run_again_and_duplicates_nothing(tmp_path: Path) -> None:
    with Vault.open(tmp_path / "a") as source:
        _fill(source)
        for n in range(150):
            source.put(ANA, b"%d " % n * 20000)
        source.audit(ANA)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"), str(Path.cwd())])}
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED, str(tmp_path / "a"), str(tmp_path / "b")], stdout=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline() == b"half\n"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with _open(tmp_path / "b") as partial:
        copied = len(list(partial.catalog.manifests()))
    with Vault.open(tmp_path / "a", read_only=True) as source:
        total = len(list(source.catalog.manifests()))
        assert 0 < copied < total
        result = CliRunner().invoke(
            main, ["migrate", "--from", str(tmp_path / "a"), "--to", str(tmp_path / "b"), "--json"]
        )
        assert result.exit_code == 0, result.output
        before = _snapshot(source)
    with Vault.open(tmp_path / "b", read_only=True) as dest:  # read-only: the checks' reads append no audit entries
        assert len(list(dest.catalog.manifests())) == total
        assert _snapshot(dest) == before
        assert dest.verify_audit().ok
        assert dest.verify().ok
    again = CliRunner().invoke(main, ["migrate", "--from", str(tmp_path / "a"), "--to", str(tmp_path / "b"), "--json"])
    assert '"artifacts_copied": 0' in again.output
    assert '"audit_entries_copied": 0' in again.output


def test_a_tampered_source_blob_stops_the_migration_naming_the_artifact_and_publishes_nothing_of_it(
    tmp_path: Path,
) -> None:
    with Vault.open(tmp_path / "a") as source:
        good = source.put(ANA, b"fine " * 20000)
        bad = source.put(ANA, BIG)
    path = next((tmp_path / "a" / "blobs").rglob(bad.content_hash.removeprefix("sha256:")))
    os.chmod(path, 0o600)
    data = bytearray(path.read_bytes())
    data[5000] ^= 1
    path.write_bytes(bytes(data))
    with Vault.open(tmp_path / "a", read_only=True) as source, _open(tmp_path / "b") as dest:
        with pytest.raises(IntegrityError, match=bad.artifact_id):
            migrate_store(source, dest)
        assert bad.artifact_id not in dest.catalog.by_ids("acme", [bad.artifact_id])
        key = source.catalog.by_ids("acme", [bad.artifact_id])[bad.artifact_id].key
        assert not dest.blobs.exists(key)
        assert dest.catalog.blob(key) is None
        assert good.artifact_id in dest.catalog.by_ids("acme", [good.artifact_id])  # what came before it is kept
    result = CliRunner().invoke(main, ["migrate", "--from", str(tmp_path / "a"), "--to", str(tmp_path / "b")])
    assert result.exit_code != 0
    assert bad.artifact_id in result.output


def test_export_and_import_move_one_tenant_and_leave_the_others_alone(tmp_path: Path) -> None:
    with Vault.open(tmp_path / "a") as source:
        facts = _fill(source)
    with Vault.open(tmp_path / "b") as dest:
        theirs = dest.put(GUS, b"the destination's own globex artifact")
        dest_globex = _snapshot(dest, ("globex",))
    result = CliRunner().invoke(
        main, ["--store", str(tmp_path / "a"), "export", "--tenant", "acme", str(tmp_path / "acme.tar")]
    )
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["--store", str(tmp_path / "b"), "import", str(tmp_path / "acme.tar"), "--json"])
    assert result.exit_code == 0, result.output
    with Vault.open(tmp_path / "a", read_only=True) as source:
        acme = _snapshot(source, ("acme",))
    with Vault.open(tmp_path / "b", read_only=True) as dest:  # read-only: the checks' reads append no audit entries
        assert _snapshot(dest, ("acme",)) == acme
        assert _snapshot(dest, ("globex",)) == dest_globex
        assert [m.artifact_id for m in dest.catalog.in_scope(GUS)] == [theirs.artifact_id]
        assert str(facts["other"]) not in dest.catalog.by_ids("globex", [str(facts["other"])])
        assert dest.verify_audit().ok
        assert dest.verify().ok
        assert authenticate(dest, facts["token"]) is not None
        assert dest.policy("acme") == POLICY
    with _open(tmp_path / "b") as dest:
        again = import_bundle(dest, tmp_path / "acme.tar")
    assert (again.artifacts_copied, again.audit_entries_copied, again.api_keys_copied) == (0, 0, 0)


def test_a_tampered_bundle_is_refused_and_nothing_of_it_is_imported(tmp_path: Path) -> None:
    with Vault.open(tmp_path / "a") as source:
        _fill(source)
        export_tenant(source, "acme", tmp_path / "acme.tar")
    raw = bytearray((tmp_path / "acme.tar").read_bytes())
    with tarfile.open(tmp_path / "acme.tar") as tar:
        member = next(m for m in tar.getmembers() if m.name.startswith("blobs/") and m.size > 50000)
    raw[member.offset_data + 40000] ^= 1
    (tmp_path / "bad.tar").write_bytes(bytes(raw))
    with _open(tmp_path / "b") as dest:
        with pytest.raises(IntegrityError, match="bundle failed verification"):
            import_bundle(dest, tmp_path / "bad.tar")
        assert list(dest.catalog.manifests()) == []
        assert dest.catalog.api_keys() == []
        assert dest.catalog.audit_tenants() == []
        assert dest.policy("acme") is None
        assert list(dest.blobs.keys()) == []
    truncated = io.BytesIO(bytes(raw[: len(raw) // 2]))
    (tmp_path / "short.tar").write_bytes(truncated.getvalue())
    with _open(tmp_path / "b") as dest, pytest.raises(IntegrityError):
        import_bundle(dest, tmp_path / "short.tar")
