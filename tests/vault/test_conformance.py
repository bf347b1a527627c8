"""The vault contract, run unchanged against every backend pair in conftest.BACKENDS."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from refvault import Descriptor, Scope, Vault
from refvault.catalog.base import CHUNK_SIZE
from refvault.errors import (
    Expired,
    IdempotencyConflict,
    InvalidArgument,
    InvalidId,
    InvalidMetadata,
    NotFound,
)
from refvault.ids import namespace_of
from refvault.model import DESCRIPTOR_FIELDS
from tests.conftest import Clock, payload

INLINE_MAX = 32 * 1024


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def store_is_empty(vault: Vault) -> bool:
    return (
        not list(vault.catalog.manifests()) and not list(vault.blobs.keys()) and not list(vault.catalog.blob_records())
    )


SIZES = [0, 1, 100, INLINE_MAX, INLINE_MAX + 1, CHUNK_SIZE - 1, CHUNK_SIZE, CHUNK_SIZE + 1, 2 * CHUNK_SIZE + 12345]


# -- round trips -------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_put_then_read_returns_the_same_bytes(vault: Vault, scope: Scope, size: int) -> None:
    data = payload(size)
    d = vault.put(scope, data, media_type="application/octet-stream")
    assert d.content_hash == sha(data)
    assert d.size == size
    assert vault.read_bytes(scope, d.artifact_id) == data
    with vault.stream(scope, d.artifact_id) as stream:
        assert stream.read() == data
    assert vault.read_range(scope, d.artifact_id, 0, size) == data


def pieces(data: bytes, sizes: list[int]) -> Iterator[bytes]:
    start = 0
    index = 0
    while start < len(data):
        step = sizes[index % len(sizes)]
        yield data[start : start + step]
        start += step
        index += 1


@pytest.mark.parametrize(
    "wrap",
    [
        pytest.param(lambda b: bytearray(b), id="bytearray"),
        pytest.param(lambda b: memoryview(b), id="memoryview"),
        pytest.param(lambda b: io.BytesIO(b), id="file"),
        pytest.param(lambda b: pieces(b, [1, 7000, 1 << 20, 3]), id="iterable-ragged"),
        pytest.param(lambda b: [b[: len(b) // 2], b"", b[len(b) // 2 :]], id="list"),
    ],
)
def test_every_input_kind_stores_the_same_artifact(vault: Vault, scope: Scope, wrap: Callable[[bytes], object]) -> None:
    data = payload(CHUNK_SIZE * 2 + 777, seed=3)
    d = vault.put(scope, wrap(data))
    assert d.content_hash == sha(data)
    assert vault.read_bytes(scope, d.artifact_id) == data


def test_a_file_opened_in_text_mode_is_refused_and_nothing_is_written(vault: Vault, scope: Scope) -> None:
    with pytest.raises(InvalidArgument, match="binary"):
        vault.put(scope, io.StringIO("text"))
    with pytest.raises(InvalidArgument, match="encode"):
        vault.put(scope, "text")
    with pytest.raises(InvalidArgument, match="bytes"):
        vault.put(scope, [b"ok", 42])
    assert store_is_empty(vault)


def test_an_input_that_fails_midway_publishes_nothing(vault: Vault, scope: Scope) -> None:
    def failing() -> Iterator[bytes]:
        yield payload(3 * CHUNK_SIZE)
        raise ConnectionError("source went away")

    with pytest.raises(ConnectionError):
        vault.put(scope, failing())
    assert vault.list(scope) == []
    assert store_is_empty(vault)
    assert vault.blobs.sweep_temp(0, dry_run=True) == 0


# -- the descriptor ----------------------------------------------------------------


def test_descriptor_has_exactly_the_ten_fields_and_round_trips(vault: Vault, scope: Scope) -> None:
    expires = datetime(2027, 1, 1, tzinfo=UTC)
    d = vault.put(
        scope,
        b'{"a": 1}',
        media_type="Application/JSON; Charset=utf-8",
        tool_call_id="call_1",
        run_id="run_1",
        source_version={"source_id": "infra.incident-events", "snapshot_id": "snap_1"},
        completeness={"status": "partial", "records": 1, "omissions": [{"region": "us-east"}]},
        schema_version="example.v1",
        expires_at=expires,
        disclosure="sealed",
        filename="events.json",
    )
    data = d.to_dict()
    assert tuple(data) == DESCRIPTOR_FIELDS
    assert re.fullmatch(r"art_[a-z2-7]{26}(?:[a-z2-7]{2})?", d.artifact_id)
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", d.content_hash)
    assert data["scope"] == {"tenant": "acme", "user": "ana", "session": "s1", "run_id": "run_1"}
    assert data["retrieval"]["media_type"] == "application/json; charset=utf-8"
    assert data["retrieval"]["disclosure"] == "sealed"
    assert data["retrieval"]["filename"] == "events.json"
    assert data["retrieval"]["size"] == 8
    assert data["completeness"]["omissions"] == [{"region": "us-east"}]
    assert data["expires_at"] == "2027-01-01T00:00:00.000000Z"
    assert Descriptor.from_dict(json.loads(json.dumps(data))) == d
    assert vault.describe(scope, d.artifact_id) == d


def test_descriptor_is_read_only(vault: Vault, scope: Scope) -> None:
    d = vault.put(scope, b"x", source_version={"snapshot_id": "a"})
    with pytest.raises(AttributeError):
        d.content_hash = "sha256:" + "0" * 64  # type: ignore[misc]
    with pytest.raises(TypeError):
        d.source_version["snapshot_id"] = "forged"  # type: ignore[index]
    assert vault.describe(scope, d.artifact_id).source_version["snapshot_id"] == "a"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("media_type", "not a type", "type/subtype"),
        ("media_type", "text/plain; charset", "name=value"),
        ("disclosure", "public", "model"),
        ("expires_at", datetime(2030, 1, 1), "timezone"),
        ("expires_at", datetime(2000, 1, 1, tzinfo=UTC), "future"),
        ("completeness", {"status": "done"}, "status"),
        ("completeness", {"status": "complete", "omissions": ["x"]}, "partial"),
        ("completeness", {"records": -1}, "records"),
        ("source_version", {"t": object()}, "JSON"),
        ("source_version", ["a"], "object"),
        ("source_version", {"big": "x" * 70_000}, "limit"),
        ("filename", "../etc/passwd", "base name"),
        ("filename", "a\x00b", "base name"),
        ("filename", "..", "base name"),
        ("tool_call_id", "call\n1", "printable"),
        ("idempotency_key", "", "printable"),
    ],
)
def test_invalid_metadata_is_refused_before_anything_is_written(
    vault: Vault, scope: Scope, field: str, value: object, message: str
) -> None:
    with pytest.raises(InvalidMetadata, match=message) as err:
        vault.put(scope, payload(INLINE_MAX * 3), **{field: value})  # type: ignore[arg-type]
    assert "xxxx" not in str(err.value)
    assert store_is_empty(vault)


def test_invalid_scope_and_ids_are_typed_errors(vault: Vault, scope: Scope) -> None:
    with pytest.raises(InvalidArgument, match="Scope"):
        vault.put(("acme", "ana", "s1"), b"x")  # type: ignore[arg-type]
    for bad in ["", "art_", "art_" + "A" * 26, "art_" + "a" * 27, "../../etc/passwd", "art_" + "a" * 25 + "\x00"]:
        with pytest.raises(InvalidId) as err:
            vault.read_bytes(scope, bad)
        assert len(bad) <= len("art_") or bad not in str(err.value)


# -- identity and dedup ------------------------------------------------------------


def test_each_capture_gets_a_new_id_and_identical_bytes_share_one_blob(vault: Vault, scope: Scope) -> None:
    data = payload(INLINE_MAX * 4, seed=9)
    first = vault.put(scope, data, filename="report.bin")
    second = vault.put(scope, data, filename="report.bin")
    assert first.artifact_id != second.artifact_id
    assert first.content_hash == second.content_hash
    assert first.artifact_id.removeprefix("art_") not in first.content_hash
    assert len(list(vault.blobs.keys())) == 1
    vault.delete(scope, first.artifact_id)
    assert vault.read_bytes(scope, second.artifact_id) == data


def test_same_bytes_in_two_tenants_share_nothing(vault: Vault) -> None:
    data = payload(INLINE_MAX * 4, seed=10)
    a = vault.put(Scope("acme", "ana", "s1"), data)
    b = vault.put(Scope("globex", "ana", "s1"), data)
    assert a.content_hash == b.content_hash
    keys = sorted(vault.blobs.keys())
    assert [k.namespace for k in keys] == sorted([namespace_of("acme"), namespace_of("globex")])


def test_idempotency_key_returns_the_same_artifact_and_refuses_other_bytes(vault: Vault, scope: Scope) -> None:
    first = vault.put(scope, b"result", idempotency_key="call_1/0")
    again = vault.put(scope, b"result", idempotency_key="call_1/0")
    assert again == first
    with pytest.raises(IdempotencyConflict):
        vault.put(scope, b"other", idempotency_key="call_1/0")
    other_session = vault.put(Scope("acme", "ana", "s2"), b"result", idempotency_key="call_1/0")
    assert other_session.artifact_id != first.artifact_id
    assert [d.artifact_id for d in vault.list(scope)] == [first.artifact_id]


def test_concurrent_retries_with_one_key_make_one_artifact(vault: Vault, scope: Scope) -> None:
    results: list[str] = []
    data = payload(INLINE_MAX * 2, seed=4)

    def put() -> None:
        results.append(vault.put(scope, data, idempotency_key="k").artifact_id)

    threads = [threading.Thread(target=put) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1
    assert len(vault.list(scope)) == 1


def test_concurrent_puts_are_all_published_and_distinct(vault: Vault, scope: Scope) -> None:
    ids: dict[str, bytes] = {}
    lock = threading.Lock()

    def worker(n: int) -> None:
        for i in range(20):
            data = payload(4096 if i % 3 else INLINE_MAX + 5, seed=n * 1000 + i)
            d = vault.put(scope, data)
            with lock:
                ids[d.artifact_id] = data

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 16 * 20
    for aid, data in ids.items():
        assert vault.read_bytes(scope, aid) == data


# -- listing, deleting, expiry -----------------------------------------------------


def test_list_is_newest_first_with_a_stable_tie_break(vault: Vault, scope: Scope, clock: Clock) -> None:
    same_time = [vault.put(scope, payload(10, seed=i)).artifact_id for i in range(3)]
    clock.advance(seconds=1)
    newest = vault.put(scope, b"newest").artifact_id
    assert [d.artifact_id for d in vault.list(scope)] == [newest, *reversed(same_time)]
    assert vault.list(Scope("acme", "ana", "other")) == []


def test_delete_makes_the_artifact_not_found(vault: Vault, scope: Scope) -> None:
    d = vault.put(scope, b"bye")
    vault.delete(scope, d.artifact_id)
    for op in (vault.describe, vault.read_bytes, vault.stream, vault.delete):
        with pytest.raises(NotFound):
            op(scope, d.artifact_id)


def test_expiry_is_enforced_on_every_read_for_the_owner_only(vault: Vault, scope: Scope, clock: Clock) -> None:
    d = vault.put(scope, payload(INLINE_MAX * 2), expires_at=clock.now + timedelta(minutes=5))
    assert vault.read_bytes(scope, d.artifact_id)
    clock.advance(minutes=5)
    for op in (vault.describe, vault.read_bytes, vault.stream):
        with pytest.raises(Expired, match="expired at"):
            op(scope, d.artifact_id)
    with pytest.raises(NotFound):
        vault.read_bytes(Scope("globex", "ana", "s1"), d.artifact_id)
    assert vault.list(scope) == []
    report = vault.gc(grace=0)
    assert report.expired == [d.artifact_id]
    assert report.blobs_removed == 1
    with pytest.raises(NotFound):
        vault.read_bytes(scope, d.artifact_id)


# -- streaming and ranges ----------------------------------------------------------


def test_stream_is_seekable_and_reads_in_bounded_chunks(vault: Vault, scope: Scope) -> None:
    data = payload(3 * CHUNK_SIZE + 5, seed=7)
    d = vault.put(scope, data)
    with vault.stream(scope, d.artifact_id) as stream:
        assert stream.size == len(data)
        assert stream.read(10) == data[:10]
        stream.seek(CHUNK_SIZE * 2 - 3)
        assert stream.read(6) == data[CHUNK_SIZE * 2 - 3 : CHUNK_SIZE * 2 + 3]
        stream.seek(-5, io.SEEK_END)
        assert stream.read() == data[-5:]
        stream.seek(0)
        chunks = list(stream.iter_chunks())
    assert b"".join(chunks) == data
    assert max(len(c) for c in chunks) <= CHUNK_SIZE


@pytest.mark.parametrize(("offset", "length"), [(0, 0), (5, 10), (CHUNK_SIZE - 2, 4), (CHUNK_SIZE * 2, 10**9)])
def test_read_range_returns_exactly_the_window(vault: Vault, scope: Scope, offset: int, length: int) -> None:
    data = payload(2 * CHUNK_SIZE + 100, seed=8)
    d = vault.put(scope, data)
    assert vault.read_range(scope, d.artifact_id, offset, length) == data[offset : offset + length]


def test_read_range_refuses_negative_windows(vault: Vault, scope: Scope) -> None:
    d = vault.put(scope, b"abc")
    with pytest.raises(InvalidArgument):
        vault.read_range(scope, d.artifact_id, -1, 2)


# -- verify and gc -----------------------------------------------------------------


def test_verify_passes_on_a_healthy_store(vault: Vault, scope: Scope) -> None:
    for size in (0, 10, INLINE_MAX + 1, CHUNK_SIZE + 1):
        vault.put(scope, payload(size, seed=size))
    seen: list[tuple[int, int]] = []
    report = vault.verify(progress=lambda done, total: seen.append((done, total)))
    assert report.ok
    assert report.artifacts == 4
    assert seen[-1][0] == seen[-1][1]


def test_gc_respects_the_grace_period(vault: Vault, scope: Scope) -> None:
    d = vault.put(scope, payload(INLINE_MAX * 2, seed=1))
    keep = vault.put(scope, payload(INLINE_MAX * 2, seed=2))
    vault.delete(scope, d.artifact_id)
    assert vault.gc().blobs_removed == 0  # younger than the default grace
    assert vault.gc(grace=0, dry_run=True).blobs_removed == 1
    assert len(list(vault.blobs.keys())) == 2
    assert vault.gc(grace=0).blobs_removed == 1
    assert len(list(vault.blobs.keys())) == 1
    assert vault.read_bytes(scope, keep.artifact_id)
    assert vault.verify().ok


def test_gc_never_collects_a_blob_shared_with_a_live_artifact(vault: Vault, scope: Scope) -> None:
    data = payload(INLINE_MAX * 2, seed=5)
    a = vault.put(scope, data)
    b = vault.put(scope, data)
    vault.delete(scope, a.artifact_id)
    assert vault.gc(grace=0).blobs_removed == 0
    assert vault.read_bytes(scope, b.artifact_id) == data


def test_vault_is_a_context_manager(make_vault: Callable[..., Vault], scope: Scope) -> None:
    with make_vault() as vault:
        d = vault.put(scope, b"x")
        assert vault.read_bytes(scope, d.artifact_id) == b"x"


def test_reopening_the_embedded_store_keeps_everything(tmp_path: os.PathLike[str], scope: Scope) -> None:
    with Vault.open(tmp_path) as vault:
        d = vault.put(scope, payload(INLINE_MAX * 3, seed=6), media_type="text/plain")
    with Vault.open(tmp_path) as vault:
        assert vault.describe(scope, d.artifact_id) == d
        assert vault.read_bytes(scope, d.artifact_id) == payload(INLINE_MAX * 3, seed=6)


# -- audit ---------------------------------------------------------------------------


def test_every_operation_is_audited_by_id_only(vault: Vault, scope: Scope) -> None:
    from refvault import AuditRecord

    records: list[AuditRecord] = []
    vault.add_audit_sink(records.append)
    canary = b"CANARY-" + payload(INLINE_MAX * 2, seed=12)
    d = vault.put(scope, canary, filename="secret-name.txt", source_version={"token": "s3cr3t"})
    vault.read_range(scope, d.artifact_id, 10, 20)
    vault.read_bytes(scope, d.artifact_id)
    vault.stream(scope, d.artifact_id).close()
    vault.describe(scope, d.artifact_id)
    vault.list(scope)
    with pytest.raises(NotFound):
        vault.read_bytes(Scope("globex", "ana", "s1"), d.artifact_id)
    vault.delete(scope, d.artifact_id)
    summary = [(r.action, r.outcome, r.artifact_id, r.byte_range) for r in records]
    assert summary == [
        ("put", "ok", d.artifact_id, None),
        ("read", "ok", d.artifact_id, (10, 30)),
        ("read", "ok", d.artifact_id, (0, len(canary))),
        ("read", "ok", d.artifact_id, (0, len(canary))),
        ("describe", "ok", d.artifact_id, None),
        ("list", "ok", None, None),
        ("read", "NotFound", d.artifact_id, None),
        ("delete", "ok", d.artifact_id, None),
    ]
    assert {r.content_hash for r in records if r.outcome == "ok" and r.action not in ("list", "delete")} == {
        d.content_hash
    }
    assert records[6].tenant == "globex"
    text = repr(records)
    for secret in ("CANARY", "secret-name", "s3cr3t"):
        assert secret not in text


def test_a_large_streamed_put_and_read_use_bounded_memory(tmp_path: os.PathLike[str], scope: Scope) -> None:
    """The embedded store only: the in-memory store holds every byte by design."""
    import tracemalloc

    vault = Vault.open(tmp_path)
    total = 128 * CHUNK_SIZE  # 128 MiB, never held whole

    def source() -> Iterator[bytes]:
        block = payload(CHUNK_SIZE + 17, seed=13)  # misaligned pieces exercise re-chunking
        sent = 0
        while sent < total:
            piece = block[: min(len(block), total - sent)]
            sent += len(piece)
            yield piece

    tracemalloc.start()
    try:
        d = vault.put(scope, source())
        with vault.stream(scope, d.artifact_id) as stream:
            for _ in stream.iter_chunks():
                pass
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        vault.close()
    assert d.size == total
    assert peak < 32 * CHUNK_SIZE, f"peak {peak / CHUNK_SIZE:.1f} MiB"


def test_parts_of_one_result_can_share_one_created_at(vault: Vault, scope: Scope, clock: Clock) -> None:
    moment = clock.now
    clock.advance(seconds=5)
    first = vault.put(scope, b"a", created_at=moment)
    second = vault.put(scope, b"b", created_at=moment)
    assert first.created_at == second.created_at == moment
    with pytest.raises(InvalidMetadata, match="future"):
        vault.put(scope, b"c", created_at=clock.now + timedelta(seconds=1))
    with pytest.raises(InvalidMetadata, match="timezone"):
        vault.put(scope, b"c", created_at=datetime(2026, 1, 1))


@pytest.mark.parametrize("field", ["source_version", "completeness"])
def test_metadata_nested_past_32_levels_is_refused_and_nothing_is_stored(vault: Vault, field: str) -> None:
    def nested(levels: int) -> dict[str, object]:
        value: dict[str, object] = {}
        for _ in range(levels - 1):
            value = {"a": value}
        return value

    scope = Scope("acme", "ana", "deep")
    with pytest.raises(InvalidMetadata, match="deeper than 32"):
        vault.put(scope, b"x", **{field: nested(33)})  # type: ignore[arg-type]
    assert vault.list(scope) == []
    kept = vault.put(scope, b"x", **{field: nested(32)})  # type: ignore[arg-type]
    assert vault.describe(scope, kept.artifact_id).to_dict()["artifact_id"] == kept.artifact_id
