"""``verify`` and ``gc`` agree on unreferenced blobs and both explain the grace period that keeps young ones."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner, Result

from refvault.cli import main
from refvault.model import Scope, parse_time
from refvault.vault import Vault

SCOPE = Scope("local", "local", "local")


def run(store: Path, *args: str) -> Result:
    result = CliRunner().invoke(main, ["--store", str(store), *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def store_with_a_deleted_blob(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    with Vault.open(store) as vault:
        vault.put(SCOPE, b"kept")
        gone = vault.put(SCOPE, os.urandom(64 * 1024))  # a blob file
        vault.delete(SCOPE, gone.artifact_id)
    return store


def test_verify_says_gc_keeps_a_young_unreferenced_blob_until_the_grace_period_ends(tmp_path: Path) -> None:
    store = store_with_a_deleted_blob(tmp_path)
    line = run(store, "verify").stdout
    assert line.startswith("ok: 1 blob (4 B) checked for 1 artifact; 1 unreferenced blob (younger than gc's 1 h grace")
    assert "period: gc removes it after 20" in line
    report = json.loads(run(store, "verify", "--json").stdout)
    assert (report["unreferenced"], report["unreferenced_in_grace"], report["grace_seconds"]) == (1, 1, 3600.0)
    [listed] = json.loads(run(store, "ls", "--json").stdout)
    assert parse_time(report["collectable_after"]) > parse_time(listed["created_at"])


def test_gc_dry_run_says_it_keeps_the_blob_verify_counted(tmp_path: Path) -> None:
    store = store_with_a_deleted_blob(tmp_path)
    dry = run(store, "gc", "--dry-run").stdout
    assert "would remove 0 unreferenced blobs\n" in dry
    assert "would keep 1 unreferenced blob within the 1 h grace period" in dry
    kept = json.loads(run(store, "gc", "--json").stdout)
    assert (kept["blobs_removed"], kept["blobs_kept"], kept["grace_seconds"]) == (0, 1, 3600.0)
    assert "kept 1 unreferenced blob within the 1 h grace period" in run(store, "gc").stdout
    gone = json.loads(run(store, "gc", "--grace", "0", "--json").stdout)
    assert (gone["blobs_removed"], gone["blobs_kept"]) == (1, 0)
    assert run(store, "verify").stdout.startswith("ok: 1 blob (4 B) checked for 1 artifact; 0 unreferenced\n")


def test_verify_and_gc_agree_on_which_unreferenced_blobs_are_old_enough(tmp_path: Path) -> None:
    store = store_with_a_deleted_blob(tmp_path)
    for path in (store / "blobs").rglob("*"):
        if path.is_file():
            os.utime(path, (0, 0))  # bytes published long ago, but the catalog record is fresh: gc keeps it
    with Vault.open(store) as vault:
        assert vault.verify().unreferenced_in_grace == 1
        assert vault.gc(dry_run=True).blobs_kept == 1
    with Vault.open(store, grace=0) as vault:  # no grace period: both see the blob as old enough
        report = vault.verify()
        assert (report.unreferenced, report.unreferenced_in_grace, report.collectable_after) == (1, 0, None)
        dry = vault.gc(dry_run=True)
        assert (dry.blobs_removed, dry.blobs_kept) == (1, 0)
