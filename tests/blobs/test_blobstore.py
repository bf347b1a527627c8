"""Blob store and group-commit details that the conformance suite cannot reach from the Vault API."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

import refvault
from refvault import Scope
from refvault.blobs.base import BlobKey
from refvault.blobs.filesystem import FilesystemBlobStore
from refvault.catalog.base import BlobRecord, Manifest, Publication
from refvault.catalog.memory import MemoryCatalog
from refvault.errors import RefvaultError, StorageError
from refvault.vault.commit import GroupCommit, Pending

KEY = BlobKey("a" * 32, "b" * 64)


def test_published_age_counts_from_publication_not_from_the_last_write(tmp_path: Path) -> None:
    store = FilesystemBlobStore(tmp_path)
    writer = store.writer()
    writer.write(b"bytes")
    temp = next((tmp_path / "tmp").iterdir())
    two_hours_ago = time.time() - 7200
    os.utime(temp, (two_hours_ago, two_hours_ago))
    writer.seal(KEY)
    writer.publish(KEY)
    age = store.age(KEY)
    assert age is not None
    assert age < 60
    store.close()


def test_sweeping_temporaries_skips_what_is_not_a_temporary(tmp_path: Path) -> None:
    store = FilesystemBlobStore(tmp_path)
    (tmp_path / "tmp" / "a-directory").mkdir()
    old = tmp_path / "tmp" / "old.tmp"
    old.write_bytes(b"x")
    os.utime(old, (0, 0))
    assert store.sweep_temp(60, dry_run=True) == 1
    assert store.sweep_temp(60) == 1
    assert sorted(p.name for p in (tmp_path / "tmp").iterdir()) == ["a-directory"]
    store.close()


class FlakyCatalog(MemoryCatalog):
    """Fails the first (batch) transaction after the blobs became visible, and lets a
    'gc' remove them in the gap before the one-by-one retry."""

    def __init__(self, between: Callable[[], None]) -> None:
        super().__init__()
        self.calls = 0
        self.between = between

    def publish(self, items: Sequence[Publication], make_visible: Callable[[], None]) -> list[Manifest | RefvaultError]:
        self.calls += 1
        if self.calls == 1:
            make_visible()
            raise RuntimeError("commit failed")
        if self.calls == 2:
            self.between()
        return super().publish(items, make_visible)


def test_a_retried_batch_never_references_a_blob_collected_in_the_gap(tmp_path: Path) -> None:
    store = FilesystemBlobStore(tmp_path)
    keys = [BlobKey("c" * 32, f"{i:064x}") for i in range(2)]
    catalog = FlakyCatalog(between=lambda: store.delete(keys[0]))
    batch = []
    for i, key in enumerate(keys):
        writer = store.writer()
        writer.write(b"payload %d" % i)
        writer.seal(key)
        manifest = Manifest(
            f"art_{'a' * 25}{i}", Scope("t", "u", "s"), key.digest, 9, "text/plain", "model", datetime.now(UTC)
        )
        batch.append(Pending(Publication(manifest, BlobRecord(key, 9, 1 << 20, b"")), writer))
    GroupCommit(catalog)._commit(batch)
    with pytest.raises(StorageError, match="vanished"):
        batch[0].result()
    assert batch[1].result().digest == keys[1].digest
    published = {m.digest for m in catalog.manifests()}
    assert published == {keys[1].digest}  # nothing points at the collected blob
    store.close()


def test_all_lists_exactly_the_lazy_exports() -> None:
    assert sorted(refvault.__all__) == sorted(refvault._EXPORTS)
