"""A full disk: an embedded store on a 4 MiB tmpfs that runs out of space.

A put that cannot get the space it needs fails with :class:`StorageError` saying "no space left";
nothing of it is published (no artifact listed, no temporary left, ``verify`` clean), every put
acknowledged before stays readable, and puts succeed again once space is freed. The tmpfs is mounted
by the test itself (CI runs the suite as root): without root, or if the mount fails, the test fails
and says why.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from refvault import Scope, Vault
from refvault.errors import StorageError

SCOPE = Scope("acme", "ana", "s1")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted at ``tmp_path / "disk"``, unmounted afterwards."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.fail("the full-disk test mounts a tmpfs and needs root (CI runs the suite as root)")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.fail(f"cannot mount a 4 MiB tmpfs for the full-disk test: {done.stderr.strip() or done.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(path: Path) -> None:
    """Write zeros to ``path`` until the file system refuses."""
    with path.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass


def _nothing_partial(vault: Vault, acknowledged: dict[str, bytes]) -> None:
    """Every artifact the catalog holds was acknowledged, its bytes check out, and no temporary is left.

    A blob renamed into place whose manifest then could not commit is an unreferenced blob in its
    grace period (the contract's worst case, collected by ``gc``), never an artifact.
    """
    report = vault.verify()
    assert report.problems == []
    assert report.artifacts == len(acknowledged)
    assert report.unreferenced == report.unreferenced_in_grace
    assert os.listdir(vault.location / "tmp") == []  # type: ignore[operator]


def _consistent(vault: Vault, acknowledged: dict[str, bytes]) -> None:
    _nothing_partial(vault, acknowledged)
    listed = {item.artifact_id for item in vault.list(SCOPE)}
    assert listed == set(acknowledged)
    for artifact_id, data in acknowledged.items():
        assert vault.read_bytes(SCOPE, artifact_id) == data


def test_a_put_on_a_full_disk_fails_cleanly_and_succeeds_once_space_is_freed(small_disk: Path) -> None:
    acknowledged: dict[str, bytes] = {}
    with Vault.open(small_disk / "store") as vault:
        reserve = small_disk / "reserve"  # the space an operator frees later
        reserve.write_bytes(b"\0" * (3 << 19))
        failures: list[StorageError] = []
        # Puts of stored (not inline) blobs until the disk refuses one: wherever the space runs out
        # (the blob's temporary, its publication, the catalog's commit), the put fails whole.
        for i in range(40):
            data = os.urandom(300_000 + i)
            try:
                acknowledged[vault.put(SCOPE, data).artifact_id] = data
            except StorageError as exc:
                failures.append(exc)
                break
        assert failures, "the disk never filled up"
        assert acknowledged, "not one put fit on the empty disk"
        _consistent(vault, acknowledged)

        _fill(small_disk / "filler")  # the last bytes
        for size in (200_000, 40_000, 100):  # a stored blob, and inline ones that only touch the catalog
            with pytest.raises(StorageError) as caught:
                vault.put(SCOPE, os.urandom(size))
            failures.append(caught.value)
        for failure in failures:
            assert "no space left" in str(failure).lower(), str(failure)
        _nothing_partial(vault, acknowledged)  # reads are audited, and the audit cannot be written: they wait

        reserve.unlink()
        for size in (200_000, 100):  # no restart: the same vault, once its disk has room
            data = os.urandom(size)
            acknowledged[vault.put(SCOPE, data).artifact_id] = data
        _consistent(vault, acknowledged)

        vault.gc(grace=0)  # the failed puts' orphan bytes, if any, are collectable
        assert vault.verify().unreferenced == 0

    with Vault.open(small_disk / "store") as reopened:  # what was acknowledged survives a reopen
        _consistent(reopened, acknowledged)
