"""Commands that only read never write to the store, and work on read-only media."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner, Result

from refvault.cli import main
from refvault.model import Scope
from refvault.vault import Vault

SCOPE = Scope("local", "local", "local")
RECORDS = b"".join(json.dumps({"n": n, "kind": "odd" if n % 2 else "even"}).encode() + b"\n" for n in range(40))


def run(store: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--store", str(store), *args], catch_exceptions=False)


def make_store(store: Path) -> dict[str, str]:
    """A store with text (a blob file), records (queried once, so their derivative and cursor keys exist),
    records never queried, a deleted artifact's unreferenced blob, and an API key."""
    with Vault.open(store) as vault:
        text = vault.put(SCOPE, b"line\n" * 20_000, media_type="text/plain")
        records = vault.put(SCOPE, RECORDS, media_type="application/x-ndjson")
        unqueried = vault.put(SCOPE, RECORDS + b'{"n": -1}\n', media_type="application/x-ndjson")
        gone = vault.put(SCOPE, os.urandom(64 * 1024))
        vault.delete(SCOPE, gone.artifact_id)
    first = run(store, "query", records.artifact_id, "--limit", "5", "--json")
    assert first.exit_code == 0, first.output
    assert run(store, "keys", "create", "--tenant", "t", "--user", "u").exit_code == 0
    return {
        "text": text.artifact_id,
        "records": records.artifact_id,
        "unqueried": unqueried.artifact_id,
        "cursor": json.loads(first.stdout)["next_cursor"],
    }


def reading_commands(ids: dict[str, str]) -> list[list[str]]:
    return [
        ["ls"],
        ["ls", "--json"],
        ["show", ids["text"]],
        ["cat", ids["text"]],
        ["read", ids["text"], "--lines", "2", "5"],
        ["read", ids["text"], "--grep", "line"],
        ["query", ids["records"], "--where", '{"field": "kind", "op": "eq", "value": "odd"}'],
        ["query", ids["records"], "--limit", "5", "--cursor", ids["cursor"]],
        ["verify"],
        ["gc", "--dry-run"],
        ["keys", "list"],
        ["manifest-key", "show"],
    ]


def tree(root: Path) -> dict[str, Any]:
    """Every entry under ``root`` (the root included): a file's bytes digest, mode and mtime; a directory's mtime."""
    entries: dict[str, Any] = {}
    for path in [root, *sorted(root.rglob("*"))]:
        st = path.lstat()
        key = str(path.relative_to(root))
        if stat.S_ISDIR(st.st_mode):
            entries[key] = ("dir", st.st_mode, st.st_mtime_ns)
        else:
            entries[key] = (hashlib.sha256(path.read_bytes()).hexdigest(), st.st_mode, st.st_mtime_ns)
    return entries


def test_reading_commands_leave_every_file_of_the_store_as_it_was(tmp_path: Path) -> None:
    """Byte for byte, mode and mtime, and no entry added or removed; nothing migrates, nothing is created.

    While a catalog is open SQLite keeps its ``-wal``/``-shm`` companions beside ``catalog.db`` and removes
    them when it closes: so on writable media the store directory's own mtime may move (only it); the
    read-only media test below shows that nothing needs writing at all.
    """
    store = tmp_path / "store"
    ids = make_store(store)
    before = tree(store)
    for args in reading_commands(ids):
        result = run(store, *args)
        assert result.exit_code == 0, (args, result.output)
    after = tree(store)
    root_before, root_after = before.pop("."), after.pop(".")
    assert after == before
    assert root_after[:2] == root_before[:2]


def test_a_reading_command_does_not_create_missing_key_files(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ids = make_store(store)
    (store / "manifest-keys.json").unlink()
    result = run(store, "show", ids["text"])
    assert result.exit_code == 1
    assert "manifest-keys.json is missing but" in result.stderr
    assert "restore it from a backup" in result.stderr
    assert not (store / "manifest-keys.json").exists()


def _mounted_tmpfs(directory: Path) -> bool:
    """Whether a tmpfs could be mounted on ``directory`` (root with CAP_SYS_ADMIN, ``mount`` installed)."""
    try:
        mount = ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(directory)]
        return subprocess.run(mount, capture_output=True).returncode == 0
    except OSError:
        return False


@contextlib.contextmanager
def read_only_media(source: Path, top: Path) -> Iterator[Path]:
    """A copy of the store ``source`` on read-only media, as genuine as this process can make it.

    Where it may mount (root with CAP_SYS_ADMIN): a tmpfs remounted read-only, every write fails with EROFS.
    Else a copy whose files and directories are not writable: for any user but root every write fails with
    EACCES; root, whom permissions do not bind, is also told so by ``os.access`` (as refvault asks), and
    ``os.statvfs`` reports the copy's file system read-only, so the commands take the same read-only-media
    path (SQLite ``mode=ro``, immutable), where SQLite itself refuses writes.
    """
    top.mkdir()
    mounted = _mounted_tmpfs(top)
    copy = top / "store"
    shutil.copytree(source, copy, symlinks=True)
    try:
        with pytest.MonkeyPatch.context() as patch:
            if mounted:
                subprocess.run(["mount", "-o", "remount,ro", str(top)], check=True, capture_output=True)
            else:
                for path in [copy, *copy.rglob("*")]:
                    path.chmod(path.stat().st_mode & ~0o222)
                if os.geteuid() == 0:
                    access = os.access

                    def unwritable(path: Any, mode: int, **kwargs: Any) -> bool:
                        inside = Path(os.fspath(path)).absolute().is_relative_to(copy)
                        return False if inside and mode & os.W_OK else access(path, mode, **kwargs)

                    patch.setattr(os, "access", unwritable)
                statvfs = os.statvfs

                def read_only_mount(path: Any) -> Any:  # the copy's file system reports itself read-only
                    real = statvfs(path)
                    if not Path(os.fspath(path)).absolute().is_relative_to(copy):
                        return real
                    return SimpleNamespace(f_flag=real.f_flag | os.ST_RDONLY)

                patch.setattr(os, "statvfs", read_only_mount)
            yield copy
    finally:
        if mounted:
            subprocess.run(["umount", str(top)], check=True, capture_output=True)
        else:
            for path in [copy, *copy.rglob("*")]:
                path.chmod(path.stat().st_mode | 0o200)


def test_reading_commands_work_on_read_only_media(tmp_path: Path) -> None:
    source = tmp_path / "store"
    ids = make_store(source)
    with read_only_media(source, tmp_path / "media") as store:
        before = tree(store)
        for args in reading_commands(ids):
            result = run(store, *args)
            assert result.exit_code == 0, (args, result.output)
        first_query = run(store, "query", ids["unqueried"])  # it would store the records' columnar form
        assert first_query.exit_code == 1
        assert "query it once where the store is writable" in first_query.stderr
        assert tree(store) == before  # the store directory's mtime too: SQLite made no -wal/-shm either


def test_a_read_only_vault_refuses_every_write_and_still_verifies(tmp_path: Path) -> None:
    store = tmp_path / "store"
    make_store(store)
    with Vault.open(store, read_only=True) as vault:
        assert vault.verify().ok
        assert vault.gc(dry_run=True).blobs_kept == 1  # the deleted artifact's blob, within the grace period
        with pytest.raises(OSError, match="read-only"):
            vault.put(SCOPE, b"x")
        with pytest.raises(OSError, match="read-only"):
            vault.put(SCOPE, os.urandom(64 * 1024))  # a blob file too
        with pytest.raises(OSError, match="read-only"):
            vault.gc()
        [listed, *_] = vault.list(SCOPE)
        with pytest.raises(OSError, match="read-only"):
            vault.delete(SCOPE, listed.artifact_id)
