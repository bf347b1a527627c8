"""refvault.client.Client against a live ``refvault serve`` (a subprocess on loopback).

Round trips of every method, paging, cursors, errors mapped back to refvault's
classes, integrity failures detected by the server and by the client, a Toolbox
running unchanged over a client, and a 256 MiB artifact streamed up and down
in bounded memory (measured in a child process).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from refvault import Client, Ref, Scope, Toolbox, errors, read
from refvault.ids import namespace_of
from tests.servers import LiveServer, free_port, serve

SCOPE = Scope("acme", "ana", "s1")
FOREIGN = Scope("globex", "gus", "s1")


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with serve(tmp_path_factory.mktemp("client") / "store") as server:
        yield server


@pytest.fixture
def client(live: LiveServer) -> Iterator[Client]:
    with Client(live.url, live.token) as c:
        yield c


def _scope(request: pytest.FixtureRequest) -> Scope:
    """A session of its own for each test, so listings see only that test's artifacts."""
    return Scope("acme", "ana", "t-" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:16])


@pytest.fixture
def scope(request: pytest.FixtureRequest) -> Scope:
    return _scope(request)


# -- round trips ---------------------------------------------------------------------------------


def test_put_describe_read_stream_list_delete(client: Client, scope: Scope) -> None:
    data = b"".join(b"line %d\n" % i for i in range(20_000))  # > 1 chunk on the wire, stored as a file
    expires = datetime.now(UTC) + timedelta(days=1)
    d = client.put(
        scope,
        data,
        media_type="Text/Plain; Charset=UTF-8",
        filename="lines.txt",
        tool_call_id="call-1",
        run_id="run-1",
        source_version={"etag": "v1"},
        completeness={"status": "complete"},
        schema_version="1",
        expires_at=expires,
    )
    assert d.size == len(data)
    assert d.content_hash == "sha256:" + hashlib.sha256(data).hexdigest()
    assert d.media_type == "text/plain; charset=UTF-8"
    assert (d.filename, d.tool_call_id, d.schema_version, d.scope["run_id"]) == ("lines.txt", "call-1", "1", "run-1")
    assert d.source_version == {"etag": "v1"}
    assert d.expires_at is not None
    assert abs(d.expires_at - expires) < timedelta(seconds=1)
    assert client.describe(scope, d.artifact_id) == d
    assert client.read_bytes(scope, d.artifact_id) == data
    assert client.read_range(scope, d.artifact_id, 7, 10) == data[7:17]
    assert client.read_range(scope, d.artifact_id, len(data) - 5, None) == data[-5:]
    assert client.read_range(scope, d.artifact_id, 0, len(data) + 100) == data
    assert client.read_range(scope, d.artifact_id, len(data) + 1, 10) == b""
    assert client.read_range(scope, d.artifact_id, 3, 0) == b""
    with client.stream(scope, d.artifact_id) as stream:
        assert stream.size == len(data)
        assert stream.read(5) == data[:5]
        assert stream.tell() == 5
        assert b"".join(stream.iter_chunks()) == data[5:]
    assert [x.artifact_id for x in client.list(scope)] == [d.artifact_id]
    client.delete(scope, d.artifact_id)
    assert client.list(scope) == []
    with pytest.raises(errors.NotFound):
        client.describe(scope, d.artifact_id)
    with pytest.raises(errors.NotFound):
        client.delete(scope, d.artifact_id)


def test_put_takes_files_iterables_and_idempotency_keys(client: Client, scope: Scope, tmp_path: Path) -> None:
    path = tmp_path / "input.bin"
    path.write_bytes(os.urandom(3 * 1024 * 1024 + 7))
    with open(path, "rb") as f:
        from_file = client.put(scope, f, filename="input.bin")
    assert client.read_bytes(scope, from_file.artifact_id) == path.read_bytes()
    pieces = [b"a" * 100, b"", b"b" * (2 << 20), b"c"]
    from_iterable = client.put(scope, iter(pieces))
    assert client.read_bytes(scope, from_iterable.artifact_id) == b"".join(pieces)
    assert client.read_bytes(scope, client.put(scope, b"").artifact_id) == b""
    first = client.put(scope, b"same", idempotency_key="k1")
    assert client.put(scope, b"same", idempotency_key="k1").artifact_id == first.artifact_id
    with pytest.raises(errors.IdempotencyConflict):
        client.put(scope, b"other", idempotency_key="k1")
    with pytest.raises(errors.InvalidArgument):
        client.put(scope, "text is not bytes")  # type: ignore[arg-type]


def test_list_pages_through_every_artifact(client: Client, scope: Scope) -> None:
    ids = [client.put(scope, b"%d" % i).artifact_id for i in range(230)]  # three pages of the server's listing
    listed = [d.artifact_id for d in client.list(scope)]
    assert listed == ids[::-1]  # newest first


def test_window_grep_query_and_cursors_across_pages(client: Client, scope: Scope) -> None:
    text = "".join(f"row {i} {'even' if i % 2 == 0 else 'odd'}\n" for i in range(500))
    d = client.put(scope, text.encode(), media_type="text/plain")
    shown, args, pages = [], {"lines": [0, 120]}, 0
    while True:
        page = read.window(client, scope, d.artifact_id, max_chars=2000, **args)
        shown.append(page["text"])
        pages += 1
        if page["next"] is None:
            break
        args = page["next"]
    assert "".join(shown) == text
    assert pages > 3
    assert client.window(scope, d.artifact_id, byte_range=[0, 6])["text"] == "row 0 "
    found = read.grep(client, scope, d.artifact_id, "odd", max_matches=100)
    assert found["truncated"]
    assert [m["line"] for m in found["matches"]][:3] == [1, 3, 5]
    rest = read.grep(client, scope, d.artifact_id, "odd", max_matches=1000, **found["next"])
    assert len(found["matches"]) + len(rest["matches"]) == 250
    assert read.grep(client, scope, d.artifact_id, r"row 4\d\d even$", regex=True)["returned"] == 50

    rows = b"".join(json.dumps({"n": i, "kind": "even" if i % 2 == 0 else "odd"}).encode() + b"\n" for i in range(250))
    records = client.put(scope, rows, media_type="application/x-ndjson")
    where = {"field": "kind", "op": "eq", "value": "even"}
    got, cursor = [], None
    for _ in range(10):
        answer = read.query(client, scope, records.artifact_id, where=where, limit=50, cursor=cursor)
        got += [r["record"]["n"] for r in answer["records"]]
        cursor = answer["next_cursor"]
        if cursor is None:
            break
    assert got == list(range(0, 250, 2))
    ordered = client.query(scope, records.artifact_id, order=[{"field": "n", "direction": "desc"}], limit=3)
    assert [r["record"]["n"] for r in ordered["records"]] == [249, 248, 247]
    assert client.verify_artifact(scope, records.artifact_id) == {
        "artifact_id": records.artifact_id,
        "ok": True,
        "content_hash": records.content_hash,
        "size": len(rows),
    }


# -- errors --------------------------------------------------------------------------------------


def test_errors_map_back_to_refvault_classes(live: LiveServer, client: Client, scope: Scope) -> None:
    text = client.put(scope, b"a\nb\n", media_type="text/plain")
    records = client.put(scope, b'{"a": 1}\n{"a": 2}\n', media_type="application/x-ndjson")
    absent = "art_" + "a" * 26
    with pytest.raises(errors.NotFound) as caught:
        client.read_bytes(scope, absent)
    assert caught.value.artifact_id == absent
    assert str(caught.value) == f"artifact {absent} not found in this scope"
    with pytest.raises(errors.InvalidId):
        client.describe(scope, "../etc/passwd")
    first = client.query(scope, records.artifact_id, limit=1)
    forged = first["next_cursor"][:-4] + ("AAAA" if not first["next_cursor"].endswith("AAAA") else "BBBB")
    with pytest.raises(errors.InvalidCursor) as bad_cursor:
        read.query(client, scope, records.artifact_id, limit=1, cursor=forged)
    assert bad_cursor.value.reason in ("signature", "malformed")
    assert str(bad_cursor.value).startswith(f"invalid cursor ({bad_cursor.value.reason}): ")
    with pytest.raises(errors.InvalidCursor) as other_query:
        client.query(
            scope,
            records.artifact_id,
            limit=1,
            cursor=first["next_cursor"],
            where={"field": "a", "op": "gt", "value": 0},
        )
    assert other_query.value.reason == "query"
    with pytest.raises(errors.InvalidQuery):
        client.query(scope, records.artifact_id, where={"field": "nope", "op": "eq", "value": 1})
    with pytest.raises(errors.UnsupportedRead):
        client.query(scope, text.artifact_id)
    with pytest.raises(errors.UnsupportedRead):
        read.derive(client, scope, text.artifact_id)  # the server's derive: not records
    png = client.put(scope, b"\x89PNG\r\n\x1a\n....", media_type="image/png")
    with pytest.raises(errors.UnsupportedRead):
        client.window(scope, png.artifact_id)
    sealed = client.put(scope, b"secret\n", media_type="text/plain", disclosure="sealed")
    with pytest.raises(errors.SealedArtifact):
        read.window(client, scope, sealed.artifact_id)
    assert client.read_bytes(scope, sealed.artifact_id) == b"secret\n"  # the API serves it; model tools do not
    with pytest.raises(errors.InvalidMetadata):
        client.put(scope, b"x", media_type="not a media type")
    with pytest.raises(errors.InvalidMetadata):
        client.put(scope, b"x", expires_at=datetime(2030, 1, 1))  # naive
    with pytest.raises(errors.InvalidArgument):
        client.window(scope, text.artifact_id, lines=[5, 1])

    with Client(live.url, live.foreign_token) as foreign:
        with pytest.raises(errors.NotFound) as theirs:
            foreign.describe(FOREIGN, text.artifact_id)  # another tenant's artifact is absent, word for word
        with pytest.raises(errors.NotFound) as nothing:
            foreign.describe(FOREIGN, absent)
        assert str(theirs.value) == f"artifact {text.artifact_id} not found in this scope"
        assert str(nothing.value) == f"artifact {absent} not found in this scope"
        with pytest.raises(errors.Forbidden):
            foreign.describe(scope, text.artifact_id)  # naming acme's scope with globex's key
    with Client(live.url, live.s1_token) as limited:
        assert all(d.owner == SCOPE for d in limited.list(SCOPE))  # its own session works
        with pytest.raises(errors.Forbidden):
            limited.describe(scope, text.artifact_id)
    for token in ("rvk_nonsense", live.token[:-1] + ("a" if live.token[-1] != "a" else "b")):
        with Client(live.url, token) as stranger, pytest.raises(errors.Unauthenticated):
            stranger.describe(scope, text.artifact_id)


def test_unreachable_server_is_a_storage_error() -> None:
    with Client(f"http://127.0.0.1:{free_port()}", "rvk_x", timeout=5) as c, pytest.raises(errors.StorageError):
        c.describe(SCOPE, "art_" + "a" * 26)
    with pytest.raises(errors.InvalidArgument):
        Client("ftp://example", "rvk_x")
    with pytest.raises(errors.InvalidArgument):
        Client("http://127.0.0.1:1", "bad\r\ntoken")


@pytest.mark.parametrize(
    ("status", "content_type", "body", "expected", "shown"),
    [
        (502, "text/html", b"<html>upstream secret page</html>", errors.StorageError, "HTTP 502"),
        (500, "application/problem+json", b'{"type": "about:blank", "title": "Boom", "detail": "secret"}',
         errors.StorageError, "HTTP 500 (Boom)"),
        (404, "application/json", b'{"detail": "secret"}', errors.StorageError, "HTTP 404"),
    ],
)  # fmt: skip
def test_unexpected_answers_show_status_and_title_only(
    status: int, content_type: str, body: bytes, expected: type[Exception], shown: str
) -> None:
    transport = httpx.MockTransport(
        lambda request: httpx.Response(status, headers={"content-type": content_type}, content=body)
    )
    with Client("http://server.invalid", "rvk_x", transport=transport) as c, pytest.raises(expected) as caught:
        c.describe(SCOPE, "art_" + "a" * 26)
    assert shown in str(caught.value)
    assert "secret" not in str(caught.value)


@pytest.mark.parametrize(
    ("status", "error", "retry_after", "expected", "waited"),
    [
        (429, "TooManyRequests", "7", errors.TooManyRequests, 7),
        (429, "TooManyRequests", "soon", errors.TooManyRequests, 1),
        (408, "RequestTimeout", None, errors.RequestTimeout, None),
    ],
)  # fmt: skip
def test_busy_and_timeout_problems_raise_their_own_classes(
    status: int, error: str, retry_after: str | None, expected: type[Exception], waited: int | None
) -> None:
    problem = {"type": "urn:refvault:problem:x", "title": "t", "status": status, "detail": "try later", "error": error}
    headers = {"content-type": "application/problem+json"} | ({"retry-after": retry_after} if retry_after else {})
    transport = httpx.MockTransport(lambda request: httpx.Response(status, headers=headers, json=problem))
    with Client("http://server.invalid", "rvk_x", transport=transport) as c, pytest.raises(expected) as caught:
        c.describe(SCOPE, "art_" + "a" * 26)
    assert str(caught.value) == "try later"
    if waited is not None:
        assert isinstance(caught.value, errors.TooManyRequests)
        assert caught.value.retry_after == waited


# -- integrity -----------------------------------------------------------------------------------


def _blob_path(store: Path, tenant: str, content_hash: str) -> Path:
    digest = content_hash.removeprefix("sha256:")
    return store / "blobs" / namespace_of(tenant) / digest[:2] / digest


def test_bytes_damaged_on_the_server_raise_integrity_error(live: LiveServer, client: Client, scope: Scope) -> None:
    data = os.urandom(3 * 1024 * 1024)
    d = client.put(scope, data)
    path = _blob_path(live.store, scope.tenant, d.content_hash)
    os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
    damaged = bytearray(path.read_bytes())
    damaged[2 * 1024 * 1024 + 5] ^= 0xFF
    path.write_bytes(bytes(damaged))
    with pytest.raises(errors.IntegrityError):
        client.read_bytes(scope, d.artifact_id)
    with pytest.raises(errors.IntegrityError), client.stream(scope, d.artifact_id) as stream:
        stream.read()
    with pytest.raises(errors.IntegrityError):
        client.verify_artifact(scope, d.artifact_id)


class _Tampering(httpx.BaseTransport):
    """Forwards to the live server; alters (or cuts short) every body of a content answer on the way back."""

    def __init__(self, how: str) -> None:
        self.inner = httpx.HTTPTransport()
        self.how = how

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if not request.url.path.endswith("/content"):
            return response
        body = response.read()
        response.close()
        headers = dict(response.headers)
        if self.how == "flip" and body:
            body = bytes([body[0] ^ 1]) + body[1:]
        elif self.how == "cut":
            body = body[: len(body) // 2]
            headers["content-length"] = str(len(body))
        elif self.how == "etag":
            headers["etag"] = '"' + "0" * 64 + '"'
        return httpx.Response(response.status_code, headers=headers, content=body)

    def close(self) -> None:
        self.inner.close()


@pytest.mark.parametrize("how", ["flip", "cut", "etag"])
def test_bytes_altered_in_transit_raise_integrity_error(live: LiveServer, scope: Scope, how: str) -> None:
    data = b"0123456789" * 10_000
    with Client(live.url, live.token) as honest:
        d = honest.put(scope, data)
    with Client(live.url, live.token, transport=_Tampering(how)) as c:
        with pytest.raises(errors.IntegrityError):
            c.read_bytes(scope, d.artifact_id)
        with pytest.raises(errors.IntegrityError), c.stream(scope, d.artifact_id) as stream:
            while stream.read(4096):
                pass
        if how != "cut":
            with pytest.raises(errors.IntegrityError):
                c.read_range(scope, d.artifact_id, 0, None)


# -- a Toolbox over a client ---------------------------------------------------------------------


def test_a_toolbox_runs_unchanged_over_a_client(client: Client, scope: Scope) -> None:
    box = Toolbox(client, offload_tokens=1000)

    @box.tool
    def count_lines(doc: Ref) -> str:
        """Count lines."""
        with doc.open() as stream:
            streamed = b"".join(iter(lambda: stream.read(1000), b""))
        return f"{doc.text().count(chr(10))} lines, {len(streamed)} bytes"

    @box.tool
    def report(n: int) -> list[dict[str, object]]:
        """A large result."""
        return [{"i": i, "word": f"word-{i}"} for i in range(n)]

    doc = client.put(scope, b"one\ntwo\nthree\n", media_type="text/plain")
    seen = box.call_sync("count_lines", {"doc": doc.artifact_id}, scope=scope)
    assert not seen.is_error
    assert seen.content == "3 lines, 14 bytes"
    bad = box.call_sync("count_lines", {"doc": "art_" + "a" * 26}, scope=scope)
    assert bad.is_error
    assert "art_" + "a" * 26 in bad.content

    big = box.call_sync("report", {"n": 2000}, scope=scope, tool_call_id="call-big")
    assert "offloaded" in big.content
    assert len(big.artifacts) == 1
    stored = big.artifacts[0]["artifact_id"]
    assert client.describe(scope, stored).tool_call_id == "call-big"
    assert json.loads(client.read_bytes(scope, stored))[1999] == {"i": 1999, "word": "word-1999"}

    listed = json.loads(box.call_sync("list_artifacts", {}, scope=scope).content)
    assert {a["artifact_id"] for a in listed["artifacts"]} == {doc.artifact_id, stored}
    described = json.loads(box.call_sync("describe_artifact", {"artifact_id": doc.artifact_id}, scope=scope).content)
    assert described["descriptor"]["artifact_id"] == doc.artifact_id
    window = json.loads(
        box.call_sync("read_artifact", {"artifact_id": doc.artifact_id, "lines": [1, 2]}, scope=scope).content
    )
    assert window["text"] == "two\n"
    grep = json.loads(
        box.call_sync("read_artifact", {"artifact_id": doc.artifact_id, "pattern": "thr"}, scope=scope).content
    )
    assert grep["matches"] == [{"line": 2, "text": "three", "line_truncated": False}]
    query = json.loads(
        box.call_sync(
            "query_artifact",
            {"artifact_id": stored, "where": {"field": "i", "op": "gte", "value": 1998}},
            scope=scope,
        ).content
    )
    assert [r["record"]["i"] for r in query["records"]] == [1998, 1999]
    loaded = box.call_sync("load_artifacts", {"artifact_ids": [doc.artifact_id]}, scope=scope)
    assert "one\ntwo\nthree\n" in loaded.parts[0]["text"]
    sealed = client.put(scope, b"secret\n", media_type="text/plain", disclosure="sealed")
    refused = box.call_sync("read_artifact", {"artifact_id": sealed.artifact_id}, scope=scope)
    assert refused.is_error
    assert "sealed" in refused.content
    assert "secret" not in refused.content


# -- 256 MiB in bounded memory -------------------------------------------------------------------

_BIG_CHILD = textwrap.dedent(
    """
    import hashlib, json, sys
    from refvault import Client, Scope

    def peak() -> int:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmHWM")

    url, token, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    scope = Scope("acme", "ana", "big")
    block = bytes(range(256)) * 4096  # 1 MiB

    def body():
        for i in range(size // len(block)):
            yield i.to_bytes(8, "big") + block[8:]

    with Client(url, token) as client:
        client.list(scope)  # connections and imports warm before the baseline
        base = peak()
        expected = hashlib.sha256()
        for piece in body():
            expected.update(piece)
        d = client.put(scope, body(), media_type="application/octet-stream")
        after_up = peak()
        got, n = hashlib.sha256(), 0
        with client.stream(scope, d.artifact_id) as stream:
            for chunk in stream.iter_chunks():
                got.update(chunk)
                n += len(chunk)
        after_down = peak()
    print(json.dumps({"size": d.size, "hash_ok": d.content_hash == "sha256:" + expected.hexdigest()
                      and got.hexdigest() == expected.hexdigest(), "read": n,
                      "up": after_up - base, "down": after_down - base}))
    """
)


@pytest.mark.slow
def test_a_256_mib_artifact_streams_up_and_down_in_bounded_memory(live: LiveServer) -> None:
    size = 256 * 1024 * 1024
    out = subprocess.run(
        [sys.executable, "-c", _BIG_CHILD, live.url, live.token, str(size)],
        capture_output=True,
        check=True,
        timeout=600,
    )
    result = json.loads(out.stdout.decode().strip().splitlines()[-1])
    print("peak RSS growth (bytes):", result)
    assert result["size"] == size
    assert result["read"] == size
    assert result["hash_ok"]
    assert result["up"] < 64 * 1024 * 1024, result
    assert result["down"] < 64 * 1024 * 1024, result


def test_reads_through_the_client_carry_proofs_a_recipient_checks_alone(client: Client, scope: Scope) -> None:
    from refvault import verify_excerpt

    data = b"".join(b"row %07d\n" % i for i in range(150_000))  # > 1 MiB
    descriptor = client.put(scope, data, media_type="text/plain")
    root = client.describe(scope, descriptor.artifact_id).retrieval["integrity"]["merkle_root"]
    assert root == descriptor.retrieval["integrity"]["merkle_root"]
    result = read.window(client, scope, descriptor.artifact_id, byte_range=[(1 << 20) - 50, 100])
    proof = result["proof"]
    assert verify_excerpt(result["text"].encode(), offset=proof["offset"], proof=proof, root=root)
    ranged = client.read_range(scope, descriptor.artifact_id, 1000, 5000)
    proved = client.prove_range(scope, descriptor.artifact_id, 1000, 5000)
    assert verify_excerpt(ranged, offset=1000, proof=proved, root=root)
    assert not verify_excerpt(ranged[:-1] + b"?", offset=1000, proof=proved, root=root)
