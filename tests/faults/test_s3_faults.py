"""S3 faults between refvault and SeaweedFS: ``503 SlowDown`` storms, and the gateway killed mid-upload.

A small proxy (:class:`tests.faults.harness.FlakyS3Proxy`) sits between the S3 blob store and a real
SeaweedFS gateway. SlowDown answers are retried with backoff (obstore's retry, configured in
:mod:`refvault.blobs.s3`) and the puts succeed with the right bytes; a storm that outlasts the retry
budget fails the put with :class:`StorageError` and publishes nothing. A gateway killed in the middle
of a multipart upload and started again costs at most that put: it either completes (its retries
reached the restarted gateway) or fails with :class:`StorageError`, never a published partial object,
and every acknowledged artifact reads back byte for byte.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from refvault import Scope, Vault
from refvault.blobs.s3 import S3BlobStore
from refvault.catalog.sql import SqlCatalog
from refvault.errors import StorageError
from tests.faults.harness import FlakyS3Proxy, OwnSeaweedFS
from tests.servers import S3Endpoint

pytestmark = pytest.mark.slow

SCOPE = Scope("acme", "ana", "s1")
MIB = 1 << 20


@pytest.fixture
def proxy(s3_server: S3Endpoint) -> Iterator[FlakyS3Proxy]:
    flaky = FlakyS3Proxy(s3_server.url)
    yield flaky
    flaky.close()


def _vault(tmp_path: Path, bucket: str, endpoint: str, **options: object) -> Vault:
    blobs = S3BlobStore(bucket, f"t-{secrets.token_hex(6)}", endpoint=endpoint, part_size=5 * MIB, **options)  # type: ignore[arg-type]
    return Vault(blobs, SqlCatalog(f"sqlite:///{tmp_path / 'catalog.db'}"))


def _check(vault: Vault, acknowledged: dict[str, bytes]) -> None:
    report = vault.verify()
    assert report.problems == []
    assert report.artifacts == len(acknowledged)
    assert {d.artifact_id for d in vault.list(SCOPE)} == set(acknowledged)
    for artifact_id, data in acknowledged.items():
        assert vault.read_bytes(SCOPE, artifact_id) == data


def test_slowdown_storms_are_retried_with_backoff_and_every_put_lands_whole(
    proxy: FlakyS3Proxy, s3_server: S3Endpoint, tmp_path: Path
) -> None:
    count = 0

    def storm(method: str, target: str) -> str | None:
        nonlocal count
        count += 1
        return "slowdown" if count % 4 < 2 else None  # two in every four requests: storms of consecutive 503s

    proxy.fault = storm
    acknowledged: dict[str, bytes] = {}
    with _vault(tmp_path, s3_server.bucket, proxy.url, initial_backoff=0.05, max_backoff=1.0) as vault:
        for size in (100_000, 6 * MIB):  # a single PUT and a multipart upload of two parts
            data = os.urandom(size)
            acknowledged[vault.put(SCOPE, data).artifact_id] = data
        _check(vault, acknowledged)
    assert proxy.faults >= 10, "the storm never reached the store"


def test_a_slowdown_storm_past_the_retry_budget_fails_the_put_and_publishes_nothing(
    proxy: FlakyS3Proxy, s3_server: S3Endpoint, tmp_path: Path
) -> None:
    acknowledged: dict[str, bytes] = {}
    with _vault(tmp_path, s3_server.bucket, proxy.url, max_retries=3, initial_backoff=0.05) as vault:
        data = os.urandom(300_000)
        acknowledged[vault.put(SCOPE, data).artifact_id] = data
        proxy.fault = lambda method, target: "slowdown" if method in ("PUT", "POST") else None
        for size in (300_000, 7 * MIB):
            with pytest.raises(StorageError) as caught:
                vault.put(SCOPE, os.urandom(size))
            assert "HTTP 503 SlowDown" in str(caught.value), str(caught.value)
        proxy.fault = lambda method, target: None
        _check(vault, acknowledged)
        data = os.urandom(300_000)
        acknowledged[vault.put(SCOPE, data).artifact_id] = data  # the storm over, puts land again
        _check(vault, acknowledged)


def test_a_gateway_killed_mid_multipart_upload_and_restarted_loses_nothing_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seaweed = OwnSeaweedFS(tmp_path / "weed")
    for name, value in seaweed.endpoint.env().items():  # its credentials, the usual way
        monkeypatch.setenv(name, value)
    seaweed.work.mkdir()
    seaweed.start()
    proxy = FlakyS3Proxy(seaweed.endpoint.url)
    try:
        killed = threading.Event()
        restart = threading.Thread(target=seaweed.start_gateway, daemon=True)

        def kill_at_second_part(method: str, target: str) -> str | None:
            if method == "PUT" and "partNumber=2" in target and not killed.is_set():
                killed.set()
                seaweed.kill_gateway()  # the part upload in hand is forwarded to a dead gateway
                restart.start()
            return None

        acknowledged: dict[str, bytes] = {}
        with _vault(tmp_path, seaweed.endpoint.bucket, proxy.url, initial_backoff=0.2, max_backoff=1.0) as vault:
            before = os.urandom(6 * MIB)
            acknowledged[vault.put(SCOPE, before).artifact_id] = before
            proxy.fault = kill_at_second_part
            data = os.urandom(16 * MIB)
            # Its retries may reach the restarted gateway, or the put fails whole: either is allowed, a partial
            # artifact is not.
            with contextlib.suppress(StorageError):
                acknowledged[vault.put(SCOPE, data).artifact_id] = data
            assert killed.is_set(), "the gateway was never killed mid-upload"
            proxy.fault = lambda method, target: None
            restart.join()
            _check(vault, acknowledged)
            after = os.urandom(7 * MIB)
            acknowledged[vault.put(SCOPE, after).artifact_id] = after
            _check(vault, acknowledged)
    finally:
        proxy.close()
        seaweed.stop()
