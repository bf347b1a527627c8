"""The S3 blob store against a real SeaweedFS gateway: the store contract, create-only writes,
healing at publish, multipart uploads with bounded memory, range reads, retries on 503 SlowDown,
and error messages that never carry credentials.

Vault round trips on "s3+postgres" are the conformance suite's job; here the vault runs on
this store with a SQLite catalog.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import obstore
import pytest

from refvault import Scope, Vault
from refvault.blobs.base import BlobKey
from refvault.blobs.s3 import S3BlobStore
from refvault.catalog.sql import SqlCatalog
from refvault.errors import InvalidArgument, StorageError
from tests.conftest import payload
from tests.servers import S3Endpoint, fresh_prefix

MIB = 1 << 20
NS = "ab" * 16


def key_of(data: bytes, namespace: str = NS) -> BlobKey:
    return BlobKey(namespace, hashlib.sha256(data).hexdigest())


def write_all(store: S3BlobStore, data: bytes, *, publish: bool = True) -> BlobKey:
    key = key_of(data)
    writer = store.writer()
    for start in range(0, len(data), MIB):
        writer.write(data[start : start + MIB])
    writer.seal(key)
    if publish:
        writer.publish(key)
    return key


def raw(store: S3BlobStore, key: BlobKey) -> bytes:
    return bytes(obstore.get(store.client, store.object_name(key)).bytes())


def plant(store: S3BlobStore, key: BlobKey, data: bytes) -> None:
    obstore.put(store.client, store.object_name(key), data)


def etag(store: S3BlobStore, key: BlobKey) -> str | None:
    tag: str | None = obstore.head(store.client, store.object_name(key))["e_tag"]
    return tag


@pytest.fixture
def store(s3_server: S3Endpoint) -> Iterator[S3BlobStore]:
    s = S3BlobStore.from_url(fresh_prefix(s3_server), endpoint=s3_server.url)
    yield s
    s.close()


# -- the store contract ----------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 3 * MIB + 17, 8 * MIB, 8 * MIB + 1, 17 * MIB + 5])
def test_round_trip_and_range_reads_at_the_edges(store: S3BlobStore, size: int) -> None:
    data = payload(size, seed=size)
    key = write_all(store, data)
    assert store.exists(key)
    age = store.age(key)
    assert age is not None
    assert -5 < age < 600
    reader = store.open(key)
    assert reader is not None
    assert reader.size == size
    assert reader.read(0, 0) == b""
    assert reader.read(0, 1) == data[:1]
    assert reader.read(size - 1, 10) == data[-1:]
    assert reader.read(size, 10) == b""
    assert reader.read(size + 5, 1) == b""
    for boundary in (MIB, 8 * MIB, 16 * MIB):
        if boundary < size:
            assert reader.read(boundary - 3, 6) == data[boundary - 3 : boundary + 3]
    assert reader.read(0, size + 100) == data
    with pytest.raises(InvalidArgument):
        reader.read(-1, 1)
    reader.close()
    assert list(store.keys()) == [key]


def test_delete_is_idempotent_and_absence_reads_as_none(store: S3BlobStore) -> None:
    key = write_all(store, b"to be deleted")
    store.delete(key)
    assert not store.exists(key)
    assert store.open(key) is None
    assert store.age(key) is None
    assert list(store.keys()) == []
    store.delete(key)
    store.delete(BlobKey("cd" * 16, "ef" * 32))


def test_keys_lists_only_blob_names_under_its_own_prefix(store: S3BlobStore, s3_server: S3Endpoint) -> None:
    third = key_of(b"three", "01" * 16)
    plant(store, third, b"three")
    keys = sorted([write_all(store, b"one"), write_all(store, b"two"), third])
    digest = hashlib.sha256(b"x").hexdigest()
    root = store.object_name(keys[0]).split("/blobs/")[0]
    for junk in [
        "blobs/notes.txt",
        f"blobs/{NS}/{digest[:2]}/{digest}.tmp",
        f"blobs/{NS}/zz/{digest}",
        f"blobs/{NS}/00/{digest}" if not digest.startswith("00") else f"blobs/{NS}/11/{digest}",
        f"blobs/{NS.upper()}/{digest[:2]}/{digest}",
        f"blobs/{NS}/{digest[:2]}/{digest}/nested",
        f"other/{NS}/{digest[:2]}/{digest}",
    ]:
        obstore.put(store.client, f"{root}/{junk}", b"junk")
    sibling = S3BlobStore.from_url(f"s3://{s3_server.bucket}/{root}-sibling", endpoint=s3_server.url)
    write_all(sibling, b"not mine")
    assert list(store.keys()) == keys
    assert list(sibling.keys()) == [key_of(b"not mine")]


def test_sweep_has_nothing_to_remove(store: S3BlobStore) -> None:
    writer = store.writer()
    writer.write(payload(9 * MIB))
    assert store.sweep_temp(0) == 0
    assert store.sweep_temp(0, dry_run=True) == 0
    writer.abort()
    with pytest.raises(InvalidArgument):
        store.sweep_temp(-1)


def in_a_file(writer: Any) -> bool:
    return writer._spool is not None and writer._spool.file is not None


def test_the_spool_stays_in_memory_up_to_a_part_then_goes_to_an_anonymous_file(
    s3_server: S3Endpoint, tmp_path: Path
) -> None:
    store = S3BlobStore.from_url(fresh_prefix(s3_server), endpoint=s3_server.url, spool_dir=tmp_path)
    data = payload(9 * MIB, seed=3)
    writer = store.writer()
    writer.write(data[: 8 * MIB])
    assert not in_a_file(writer)
    writer.write(data[8 * MIB :])
    assert in_a_file(writer)
    assert list(tmp_path.iterdir()) == []  # no name: a crash leaves nothing to sweep
    key = key_of(data)
    writer.seal(key)
    writer.publish(key)
    assert writer._spool is None  # released after publish
    assert raw(store, key) == data


# -- create-only writes, healing and the publish protocol --------------------------------


@pytest.mark.parametrize("size", [5000, 12 * MIB])
def test_a_second_writer_of_the_same_bytes_succeeds_without_uploading_again(store: S3BlobStore, size: int) -> None:
    data = payload(size, seed=7)
    key = write_all(store, data)
    before = obstore.head(store.client, store.object_name(key))
    write_all(store, data)
    after = obstore.head(store.client, store.object_name(key))
    assert after["e_tag"] == before["e_tag"]
    assert after["last_modified"] == before["last_modified"]
    assert raw(store, key) == data


@pytest.mark.parametrize("size", [5000, 12 * MIB])
def test_concurrent_writers_of_one_key_all_succeed_and_the_object_is_intact(store: S3BlobStore, size: int) -> None:
    data = payload(size, seed=8)
    errors: list[BaseException] = []

    def put() -> None:
        try:
            write_all(store, data)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=put) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert raw(store, key_of(data)) == data


@pytest.mark.parametrize("size", [5000, 12 * MIB])
@pytest.mark.parametrize("damage", ["other size", "same size"])
def test_a_different_object_at_the_key_is_healed(store: S3BlobStore, size: int, damage: str) -> None:
    data = payload(size, seed=9)
    key = key_of(data)
    bad = data[:-1] if damage == "other size" else data[:-1] + bytes([data[-1] ^ 1])
    plant(store, key, bad)  # before seal: seal finds it and overwrites it
    write_all(store, data)
    assert raw(store, key) == data
    writer = store.writer()
    writer.write(data)
    writer.seal(key)
    plant(store, key, bad)  # between seal and publish: publish heals it under the catalog lock
    writer.publish(key)
    assert raw(store, key) == data


def test_publish_uploads_again_if_the_object_was_collected_after_seal(store: S3BlobStore) -> None:
    for data in (payload(5000, seed=10), payload(10 * MIB, seed=10)):
        key = key_of(data)
        writer = store.writer()
        writer.write(data)
        writer.seal(key)
        assert raw(store, key) == data  # sealed = already at the final name
        store.delete(key)  # gc with grace 0 between seal and publish
        writer.publish(key)
        assert raw(store, key) == data


def test_a_retried_publish_only_confirms_and_fails_if_the_object_vanished(store: S3BlobStore) -> None:
    data = payload(5000, seed=11)
    key = key_of(data)
    writer = store.writer()
    writer.write(data)
    writer.seal(key)
    writer.publish(key)
    writer.publish(key)  # a retried transaction: still there
    with pytest.raises(StorageError, match="vanished"):
        writer.publish(BlobKey(NS, "0" * 64))
    store.delete(key)
    with pytest.raises(StorageError, match="vanished"):
        writer.publish(key)
    writer.abort()
    writer.abort()


def test_abort_drops_the_spool_and_never_the_shared_object(store: S3BlobStore) -> None:
    data = payload(5000, seed=12)
    key = write_all(store, data)
    writer = store.writer()
    writer.write(data)
    writer.seal(key)
    writer.abort()
    assert raw(store, key) == data
    with pytest.raises(StorageError):
        writer.write(b"more")
    with pytest.raises(StorageError):
        writer.publish(key)


# -- large objects -------------------------------------------------------------------------

_CHILD = r"""
import hashlib, json, os, resource, sys
from refvault.blobs.base import BlobKey
from refvault.blobs.s3 import S3BlobStore

url, endpoint, mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = S3BlobStore.from_url(url, endpoint=endpoint, max_concurrency=2)
writer = store.writer()
full = hashlib.sha256()
block = bytearray(1 << 20)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for i in range(mib):
    piece = hashlib.shake_256(b"%d" % i).digest(1 << 20)
    full.update(piece)
    writer.write(piece)
key = BlobKey("ab" * 16, full.hexdigest())
writer.seal(key)
writer.publish(key)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"digest": key.digest, "growth_kib": after - before}))
"""


def test_a_large_object_goes_up_in_parts_with_bounded_memory(s3_server: S3Endpoint) -> None:
    """160 MiB streamed through a writer in another process: its peak memory grows by far less than that."""
    url = fresh_prefix(s3_server)
    mib = 160
    env = {**os.environ, **s3_server.env()}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, url, s3_server.url, str(mib)],
        capture_output=True,
        env=env,
        check=True,
        cwd=Path(__file__).parents[2],
    )
    result = json.loads(done.stdout)
    assert result["growth_kib"] < 64 * 1024, result  # 2 parts of 8 MiB in flight + spool buffers
    store = S3BlobStore.from_url(url, endpoint=s3_server.url)
    key = BlobKey(NS, result["digest"])
    tag = etag(store, key)
    assert tag is not None
    assert tag.strip('"').endswith(f"-{mib // 8}")  # a multipart upload of 8 MiB parts
    reader = store.open(key)
    assert reader is not None
    assert reader.size == mib * MIB
    full = hashlib.sha256()
    for offset in range(0, reader.size, 8 * MIB):
        full.update(reader.read(offset, 8 * MIB))
    assert full.hexdigest() == key.digest
    assert reader.read(8 * MIB - 1, 2) == (
        hashlib.shake_256(b"7").digest(MIB)[-1:] + hashlib.shake_256(b"8").digest(MIB)[:1]
    )


# -- readers -----------------------------------------------------------------------------------


def test_a_reader_follows_a_replaced_object_and_reads_nothing_once_it_is_gone(store: S3BlobStore) -> None:
    data = payload(5000, seed=13)
    key = write_all(store, data)
    reader = store.open(key)
    assert reader is not None
    assert reader.read(0, 10) == data[:10]
    other = payload(5000, seed=14)
    plant(store, key, other)
    assert reader.read(0, 10) == other[:10]  # re-pinned; the vault's digests catch the change
    store.delete(key)
    assert reader.read(0, 10) == b""


# -- retries and errors ------------------------------------------------------------------------

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
)


class FaultProxy:
    """An HTTP proxy in front of the S3 gateway that answers 503 SlowDown to the first ``failures``
    attempts of every distinct request (method, path, query, range), then forwards it."""

    def __init__(self, upstream: str, failures: int) -> None:
        self.failures = failures
        self.seen: dict[tuple[str, str, str], int] = {}
        self.slowdowns: dict[str, int] = {}
        self.lock = threading.Lock()
        host, port = upstream.removeprefix("http://").split(":")
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                request = (self.command, self.path, self.headers.get("Range") or "")
                with proxy.lock:
                    attempt = proxy.seen.get(request, 0)
                    proxy.seen[request] = attempt + 1
                    fail = attempt < proxy.failures
                    if fail:
                        proxy.slowdowns[self.command] = proxy.slowdowns.get(self.command, 0) + 1
                if fail:
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(SLOW_DOWN)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(SLOW_DOWN)
                    return
                conn = http.client.HTTPConnection(host, int(port), timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection",)}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    response = conn.getresponse()
                    payload = response.read()
                finally:
                    conn.close()
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                declared = response.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", declared or str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def flaky(s3_server: S3Endpoint) -> Iterator[FaultProxy]:
    proxy = FaultProxy(s3_server.url, failures=2)
    yield proxy
    proxy.close()


def test_503_slowdown_is_retried_with_backoff_on_every_operation(
    flaky: FaultProxy, s3_server: S3Endpoint, tmp_path: Path, scope: Scope
) -> None:
    location = fresh_prefix(s3_server)
    store = S3BlobStore.from_url(location, endpoint=flaky.url, initial_backoff=0.01, max_backoff=0.05)
    small, large = payload(5000, seed=20), payload(9 * MIB, seed=21)
    keys = [write_all(store, small), write_all(store, large)]
    reader = store.open(keys[1])
    assert reader is not None
    assert reader.read(8 * MIB, 2 * MIB) == large[8 * MIB :]
    assert sorted(store.keys()) == sorted(keys)
    store.delete(keys[0])
    assert not store.exists(keys[0])
    # Every request (PUT, multipart POSTs and part PUTs, HEAD, ranged GET, LIST, the delete's POST)
    # met SlowDown twice and still went through.
    assert {"PUT", "POST", "HEAD", "GET"} <= set(flaky.slowdowns)
    assert all(attempts >= 3 for attempts in flaky.seen.values())
    vault = Vault(store, SqlCatalog.for_file(tmp_path / "c.db"))
    try:
        d = vault.put(scope, large)
        assert vault.read_bytes(scope, d.artifact_id) == large
        assert vault.verify().ok
    finally:
        vault.close()


def test_errors_name_the_operation_and_never_the_credentials(
    s3_server: S3Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    access, secret = "AKIDREFVAULTTEST0001", "wJalrXUtnFEMI-very-secret-value-0001"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", access)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    always = FaultProxy(s3_server.url, failures=10**6)
    failures: list[StorageError] = []
    try:
        slow = S3BlobStore.from_url(fresh_prefix(s3_server), endpoint=always.url, max_retries=2, initial_backoff=0.01)
        writer = slow.writer()
        writer.write(b"content that must never appear")
        with pytest.raises(StorageError) as err:
            writer.seal(key_of(b"content that must never appear"))
        failures.append(err.value)
        assert "S3 PUT of a blob failed" in str(err.value)
        assert "HTTP 503 SlowDown" in str(err.value)
        with pytest.raises(StorageError) as err:
            slow.exists(key_of(b"x"))
        failures.append(err.value)
        assert "HEAD" in str(err.value)
    finally:
        always.close()
    closed = S3BlobStore.from_url(
        fresh_prefix(s3_server), endpoint=always.url, max_retries=0, connect_timeout=2, timeout=5
    )
    with pytest.raises(StorageError) as err:
        list(closed.keys())  # nothing listens there any more
    failures.append(err.value)
    missing = S3BlobStore.from_url("s3://no-such-bucket-refvault/p", endpoint=s3_server.url, max_retries=0)
    with pytest.raises(StorageError) as err:
        write_all(missing, b"content that must never appear")
    failures.append(err.value)
    for failure in failures:
        text = f"{failure} {failure!r} {failure.args}"
        for forbidden in (access, secret, "content that must never appear", "no-such-bucket", "/blobs/"):
            assert forbidden not in text
        assert failure.__cause__ is None
        assert failure.__suppress_context__


# -- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "s3://ab/p",
        "s3://" + "a" * 64 + "/p",
        "s3://Upper/p",
        "s3://-dash/p",
        "s3://dash-/p",
        "s3://two..dots/p",
        "s3://192.168.1.10/p",
        "s3://under_score/p",
        "s3:///p",
        "s3://bucket/a/../b",
        "s3://bucket/a//b",
        "s3://bucket/./b",
        "s3://bucket/pre fix",
        "s3://bucket/p?x=1",
        "s3://AKID:supersecret@bucket/p",
        "https://bucket/p",
        "bucket/p",
    ],
)
def test_bad_locations_are_refused_with_a_clear_message(url: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        S3BlobStore.from_url(url, endpoint="http://127.0.0.1:1")
    assert "supersecret" not in str(err.value)
    assert "s3://bucket/prefix" in str(err.value) or "prefix" in str(err.value)


def test_prefixes_are_normalised_and_names_are_built_from_hex_only() -> None:
    store = S3BlobStore.from_url("s3://my.bucket-1//team/a/", endpoint="http://127.0.0.1:1")
    key = BlobKey("0f" * 16, "a1" * 32)
    assert store.prefix == "team/a"
    assert store.object_name(key) == f"team/a/blobs/{'0f' * 16}/a1/{'a1' * 32}"
    bare = S3BlobStore.from_url("s3://my-bucket", endpoint="http://127.0.0.1:1")
    assert bare.object_name(key).startswith("blobs/")


@pytest.mark.parametrize(
    "options",
    [
        {"endpoint": "ftp://127.0.0.1:1"},
        {"endpoint": "http://user:pw@127.0.0.1:1"},
        {"region": "Not A Region"},
        {"part_size": 1024},
        {"max_concurrency": 0},
        {"max_retries": -1},
        {"timeout": 0},
        {"spool_dir": "/no/such/dir"},
    ],
)
def test_bad_options_are_refused(options: dict[str, Any]) -> None:
    options.setdefault("endpoint", "http://127.0.0.1:1")
    with pytest.raises(InvalidArgument):
        S3BlobStore.from_url("s3://bucket/p", **options)


def test_a_closed_store_refuses_work(store: S3BlobStore) -> None:
    store.close()
    with pytest.raises(StorageError, match="closed"):
        store.writer()
    with pytest.raises(StorageError, match="closed"):
        store.exists(key_of(b"x"))


# -- the vault on this store (SQLite catalog) ------------------------------------------------


def test_vault_round_trip_gc_and_healing(store: S3BlobStore, tmp_path: Path, scope: Scope) -> None:
    vault = Vault(store, SqlCatalog.for_file(tmp_path / "c.db"))
    try:
        small, large = payload(100), payload(10 * MIB + 3, seed=30)
        d1, d2 = vault.put(scope, small), vault.put(scope, large)
        assert vault.read_bytes(scope, d1.artifact_id) == small
        assert vault.read_range(scope, d2.artifact_id, 8 * MIB - 2, 5) == large[8 * MIB - 2 : 8 * MIB + 3]
        key = vault.catalog.find(scope, d2.artifact_id).key  # type: ignore[union-attr]
        plant(store, key, large[:-1] + b"\x00")
        assert not vault.verify().ok
        vault.put(scope, large)  # a fresh capture of the same bytes heals the object
        assert vault.verify().ok
        # An orphan: sealed (so uploaded) but never published.
        orphan = payload(3 * MIB, seed=31)
        writer = store.writer()
        writer.write(orphan)
        writer.seal(key_of(orphan, key.namespace))
        writer.abort()
        assert store.exists(key_of(orphan, key.namespace))
        assert vault.gc(grace=3600).blobs_removed == 0  # young: spared
        assert vault.gc(grace=0).blobs_removed == 1
        assert vault.read_bytes(scope, d2.artifact_id) == large
        vault.delete(scope, d2.artifact_id)
        assert vault.gc(grace=0).blobs_removed == 0  # the twin still references it
        assert vault.list(scope)
    finally:
        vault.close()
