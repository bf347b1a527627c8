"""The filesystem blob store: a sweep of temporaries cannot take one being published."""

from __future__ import annotations

from pathlib import Path

from refvault.blobs.base import BlobKey
from refvault.blobs.filesystem import FilesystemBlobStore


def test_a_concurrent_sweep_cannot_take_a_temporary_being_published(tmp_path: Path) -> None:
    store = FilesystemBlobStore(tmp_path)
    writer = store.writer()
    writer.write(b"payload")
    key = BlobKey("a" * 32, "b" * 64)
    writer.seal(key)
    real_publish = store._publish
    swept: list[int] = []

    def publish_with_gc_racing(temp_name: str, key: BlobKey) -> None:
        swept.append(store.sweep_temp(0))  # gc runs at the worst moment
        real_publish(temp_name, key)

    store._publish = publish_with_gc_racing  # type: ignore[method-assign]
    writer.publish(key)
    assert swept == [0]
    assert store.exists(key)
    store.close()
