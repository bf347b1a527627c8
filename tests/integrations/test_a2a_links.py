"""A2A over capability links: a receiving agent that trusts a ``refvault serve`` stores what its links open (checked
against the stated size and digest, all or nothing), never fetches any other url, and refuses dead links; outgoing
objects pass the leak guard. On the embedded store and on S3 + PostgreSQL."""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

try:
    from a2a.types import Message, Part, Role
    from google.protobuf import json_format
except ImportError as exc:  # pragma: no cover - a missing extra fails every test here, naming it
    raise ImportError("the A2A tests need the a2a extra: pip install 'refvault[a2a]' (a2a-sdk>=1.3,<2)") from exc

from refvault import Scope, Vault
from refvault.errors import ContextLeak, IntegrityError, InvalidArgument, LinkRefused, TooLarge
from refvault.guard import LeakGuard
from refvault.integrations.a2a import A2AOptions, check_outgoing, materialize, part_for
from tests.media import png_bytes
from tests.servers import LiveServer, S3Endpoint, disclosed, fresh_database, fresh_prefix, serve, serve_scaled

SENDER = Scope("acme", "ana", "s1")
RECEIVER = Scope("globex", "gus", "s9")
PNG = png_bytes(8, 8)
REPORT = b"".join(b"line %d of the quarterly report LINKcanary\n" % i for i in range(400))


@pytest.fixture(params=["embedded", "s3+postgres"])
def live(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[LiveServer, Vault]]:
    if request.param == "embedded":
        with serve(tmp_path / "store") as server, Vault.open(server.store) as vault:
            yield server, vault
        return
    postgres_url: str = request.getfixturevalue("postgres_url")
    s3: S3Endpoint = request.getfixturevalue("s3_server")
    catalog, blobs = fresh_database(postgres_url), fresh_prefix(s3)
    with (
        serve_scaled(catalog, blobs, s3, tmp_path) as server,
        Vault.open(catalog, blobs=blobs, s3_endpoint=s3.url) as vault,
    ):
        yield server, vault


def _message(*parts: Part) -> Message:
    return Message(message_id="m-1", role=Role.ROLE_USER, parts=list(parts))


def _receive(vault: Vault, message: Message, *trusted: str, **options: object) -> Message:
    opened = A2AOptions(trusted_links=trusted, **options)  # type: ignore[arg-type]
    received: Message = asyncio.run(materialize(vault, RECEIVER, message, agent="sender", options=opened))
    return received


@pytest.fixture
def other_server() -> Iterator[tuple[str, list[str]]]:
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(REPORT)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def test_a_trusted_link_is_fetched_checked_and_stored_in_the_receivers_scope(
    live: tuple[LiveServer, Vault], other_server: tuple[str, list[str]]
) -> None:
    server, vault = live
    report = vault.put(SENDER, REPORT, media_type="text/plain", filename="q3.txt", disclosure="model").artifact_id
    linked = part_for(vault, SENDER, report, recipient="tool:receiver", base_url=server.url)
    elsewhere, hits = other_server
    lookalike = Part(url=elsewhere + "/v1/links/rvc1.e30.AAAA", media_type="text/plain")
    sideways = Part(url=server.url + "/v1/links/../../v1/health", media_type="text/plain")
    received = _receive(vault, _message(Part(text="read this"), linked, lookalike, sideways), server.url)

    text, stored, untouched, not_a_link = received.parts
    assert not_a_link.url == sideways.url  # only a link token after the trusted prefix is fetched
    assert text.text == "read this"
    assert stored.url.startswith("refvault://art_")
    assert (stored.media_type, stored.filename) == ("text/plain", "q3.txt")
    copy = stored.url.removeprefix("refvault://")
    assert vault.read_bytes(RECEIVER, copy) == REPORT
    facts = json_format.MessageToDict(stored.metadata)
    assert facts["refvault"]["digest"] == "sha256:" + hashlib.sha256(REPORT).hexdigest()
    assert facts["origin"]["artifact_id"] == report
    assert "/v1/links/" not in str(facts)  # the token is not kept
    assert untouched.url == lookalike.url
    assert hits == []  # an untrusted server's url is never fetched
    assert len(disclosed(vault, SENDER, report, "tool:receiver")) == 1

    again = _receive(vault, _message(Part(text="read this"), linked, lookalike, sideways), server.url)
    assert again.parts[1].url == stored.url  # a retried message stores nothing new
    assert len(vault.list(RECEIVER)) == 1


def test_a_link_whose_bytes_do_not_match_its_stated_digest_stores_nothing(live: tuple[LiveServer, Vault]) -> None:
    server, vault = live
    report = vault.put(SENDER, REPORT, media_type="text/plain", disclosure="model").artifact_id
    linked = part_for(vault, SENDER, report, recipient="tool:receiver", base_url=server.url)
    digest = "sha256:" + hashlib.sha256(REPORT).hexdigest()
    for wrong in ({"digest": "sha256:" + "0" * 64, "size": len(REPORT)}, {"digest": digest, "size": "many"}):
        linked.metadata.update({"refvault": wrong})
        with pytest.raises(IntegrityError) as raised:
            _receive(vault, _message(Part(raw=PNG, media_type="image/png"), linked), server.url)
        assert "LINKcanary" not in str(raised.value)
        assert vault.list(RECEIVER) == []


@pytest.mark.parametrize("death", ["revoked", "expired", "tampered"])
def test_a_dead_link_is_refused_and_nothing_of_its_message_is_stored(
    live: tuple[LiveServer, Vault], death: str
) -> None:
    server, vault = live
    report = vault.put(SENDER, REPORT, media_type="text/plain", disclosure="model").artifact_id
    ttl = timedelta(seconds=1) if death == "expired" else timedelta(minutes=5)
    linked = part_for(vault, SENDER, report, recipient="tool:receiver", base_url=server.url, expires_in=ttl)
    if death == "revoked":
        assert vault.revoke_link(SENDER, linked.url)
    elif death == "expired":
        import time

        time.sleep(2.1)
    else:
        linked.url = linked.url[:-2] + ("AA" if not linked.url.endswith("AA") else "BB")
    with pytest.raises(LinkRefused):
        _receive(vault, _message(Part(raw=PNG, media_type="image/png"), linked), server.url)
    assert vault.list(RECEIVER) == []


def test_a_link_opening_more_than_the_part_limit_is_refused(live: tuple[LiveServer, Vault]) -> None:
    from refvault.content import Limits

    server, vault = live
    report = vault.put(SENDER, REPORT, media_type="text/plain", disclosure="model").artifact_id
    linked = part_for(vault, SENDER, report, recipient="tool:receiver", base_url=server.url)
    with pytest.raises(TooLarge):
        _receive(vault, _message(linked), server.url, limits=Limits(per_part=1024))
    assert vault.list(RECEIVER) == []


@pytest.mark.parametrize("trusted", ["http://127.0.0.1:1", ["ftp://x"], ["http://h/?q=1"], [3]])
def test_trusted_links_must_be_a_tuple_of_http_base_urls(trusted: object) -> None:
    with pytest.raises(InvalidArgument):
        A2AOptions(trusted_links=trusted)  # type: ignore[arg-type]


def test_an_outgoing_message_carrying_sealed_content_is_stopped_or_redacted(vault: Vault) -> None:
    notes = vault.put(SENDER, REPORT, media_type="text/plain", disclosure="sealed").artifact_id
    pasted = _message(Part(text="my notes: " + REPORT[800:1400].decode()))
    clean = _message(Part(text="nothing to see"))
    guard = LeakGuard()
    guard.protect_scope(vault, SENDER)
    assert check_outgoing(guard, clean, recipient="tool:peer") is clean
    with pytest.raises(ContextLeak) as stopped:
        check_outgoing(guard, pasted, recipient="tool:peer")
    assert [f.artifact_id for f in stopped.value.findings] == [notes]
    assert "LINKcanary" not in str(stopped.value)
    redacting = LeakGuard(policy="redact")
    redacting.protect_scope(vault, SENDER)
    redacted = check_outgoing(redacting, pasted, recipient="tool:peer")
    assert isinstance(redacted, Message)
    assert "LINKcanary" not in redacted.parts[0].text
    assert f"[refvault:{notes}]" in redacted.parts[0].text
    raw = _message(Part(raw=REPORT, media_type="text/plain"))
    with pytest.raises(ContextLeak):
        check_outgoing(guard, raw, recipient="tool:peer")


def _trusted_stand_in(url: str, **facts: str | float) -> Part:
    """A url part at a trusted base (the stand-in server) stating ``facts`` as its ``metadata["refvault"]``."""
    part = Part(url=url, media_type="text/plain")
    if facts:
        part.metadata.update({"refvault": facts})
    return part


REPORT_FACTS: dict[str, str | float] = {"digest": "sha256:" + hashlib.sha256(REPORT).hexdigest(), "size": len(REPORT)}
TOKEN = "rvc1.eyJrIjoxfQ." + "A" * 43


@pytest.mark.parametrize("token", ["..", ".", "...", "rvc1..", "rvc1", "x.y.z"])
def test_a_trusted_prefix_followed_by_anything_but_a_link_token_is_never_fetched(
    vault: Vault, other_server: tuple[str, list[str]], token: str
) -> None:
    trusted, hits = other_server
    sideways = _trusted_stand_in(trusted + "/v1/links/" + token, **REPORT_FACTS)
    received = _receive(vault, _message(sideways), trusted)
    assert hits == []  # "/v1/links/.." would be fetched as "/v1", "." as "/v1/links"
    assert received.parts[0].url == sideways.url
    assert vault.list(RECEIVER) == []


def test_a_link_stating_no_digest_is_refused_unfetched_bytes_are_never_stored(
    vault: Vault, other_server: tuple[str, list[str]]
) -> None:
    trusted, _ = other_server
    url = trusted + "/v1/links/" + TOKEN
    for facts in ({}, {"size": len(REPORT)}, {"digest": 12, "size": len(REPORT)}, {"digest": "sha256:", "size": 1}):
        with pytest.raises(IntegrityError) as raised:
            _receive(vault, _message(_trusted_stand_in(url, **facts)), trusted)
        assert "LINKcanary" not in str(raised.value)
        assert TOKEN not in str(raised.value)
    with pytest.raises(IntegrityError):  # a bool is not a size, even when True == 1
        _receive(vault, _message(_trusted_stand_in(url, digest=REPORT_FACTS["digest"], size=True)), trusted)
    assert vault.list(RECEIVER) == []
    received = _receive(vault, _message(_trusted_stand_in(url, **REPORT_FACTS)), trusted)
    assert vault.read_bytes(RECEIVER, received.parts[0].url.removeprefix("refvault://")) == REPORT


def test_more_links_than_max_parts_are_refused_before_any_is_fetched(
    vault: Vault, other_server: tuple[str, list[str]]
) -> None:
    from refvault.content import Limits

    trusted, hits = other_server
    links = [_trusted_stand_in(trusted + "/v1/links/" + TOKEN, **REPORT_FACTS) for _ in range(50)]
    with pytest.raises(TooLarge):
        _receive(vault, _message(Part(raw=PNG, media_type="image/png"), *links), trusted, limits=Limits(max_parts=50))
    assert hits == []  # not 50 fetches of up to per_part bytes each held in memory, then refused
    assert vault.list(RECEIVER) == []


def test_links_adding_up_to_more_than_per_result_stop_being_fetched_at_the_limit(
    vault: Vault, other_server: tuple[str, list[str]]
) -> None:
    from refvault.content import Limits

    trusted, hits = other_server
    links = [_trusted_stand_in(trusted + "/v1/links/" + TOKEN, **REPORT_FACTS) for _ in range(20)]
    limits = Limits(per_result=3 * len(REPORT) + len(PNG))
    with pytest.raises(TooLarge):
        _receive(vault, _message(Part(raw=PNG, media_type="image/png"), *links), trusted, limits=limits)
    assert len(hits) == 4  # the fourth link is where the result goes over; the other 16 are never fetched
    assert vault.list(RECEIVER) == []


def test_a_link_part_stating_another_media_type_than_its_server_serves_is_refused(
    live: tuple[LiveServer, Vault],
) -> None:
    server, vault = live
    report = vault.put(SENDER, REPORT, media_type="text/plain", disclosure="model").artifact_id
    linked = part_for(vault, SENDER, report, recipient="tool:receiver", base_url=server.url)
    linked.media_type = "text/html"  # the sender's claim; the trusted server says text/plain
    with pytest.raises(IntegrityError) as raised:
        _receive(vault, _message(linked), server.url)
    assert "LINKcanary" not in str(raised.value)
    assert vault.list(RECEIVER) == []


def test_a_redacted_raw_part_goes_out_as_its_marker_not_as_the_marker_decoded_to_bytes(vault: Vault) -> None:
    notes = vault.put(SENDER, REPORT, media_type="text/plain", disclosure="sealed").artifact_id
    redacting = LeakGuard(policy="redact")
    redacting.protect_scope(vault, SENDER)
    leaking = _message(Part(text="attached"), Part(raw=REPORT, media_type="text/plain", filename="notes.txt"))
    redacted = check_outgoing(redacting, leaking, recipient="tool:peer")
    attached, marker = redacted.parts
    assert attached.text == "attached"
    assert marker.WhichOneof("content") == "text"  # not raw bytes base64-decoded from "[refvault:art_…]"
    assert marker.text == f"[refvault:{notes}]"
    assert marker.media_type == "text/plain"


def test_a_link_answered_in_a_content_encoding_is_refused_not_inflated_past_the_part_limit(vault: Vault) -> None:
    import gzip

    from refvault.content import Limits
    from refvault.errors import StorageError

    bomb = gzip.compress(bytes(32 << 20))  # 32 MiB of zeros in about 32 KiB: one network read inflates past any limit
    seen: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Accept-Encoding"))
            self.send_response(200)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(bomb)))
            self.end_headers()
            self.wfile.write(bomb)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    trusted = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        facts: dict[str, str | float] = {
            "digest": "sha256:" + hashlib.sha256(bytes(32 << 20)).hexdigest(),
            "size": 32 << 20,
        }
        with pytest.raises(StorageError):
            _receive(
                vault,
                _message(_trusted_stand_in(trusted + "/v1/links/" + TOKEN, **facts)),
                trusted,
                limits=Limits(per_part=64 << 20),
            )
    finally:
        server.shutdown()
        server.server_close()
    assert seen == ["identity"]  # the receiver asks for the bytes as stored
    assert vault.list(RECEIVER) == []
