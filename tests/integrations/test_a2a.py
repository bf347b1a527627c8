"""A2A (a2a-sdk 1.x): inbound parts carrying bytes become refvault:// url parts (the MCP gateway's materialiser,
limits, refusals, order and retry de-duplication); outbound artifacts become capability-link url parts that open
over a real ``refvault serve`` and land in the disclosure ledger."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import httpx
import pytest

try:
    from a2a.types import Artifact, Message, Part, Role, Task, TaskArtifactUpdateEvent
    from google.protobuf import json_format
except ImportError as exc:  # pragma: no cover - a missing extra fails every test here, naming it
    raise ImportError("the A2A tests need the a2a extra: pip install 'refvault[a2a]' (a2a-sdk>=1.3,<2)") from exc

from refvault import Scope, Vault
from refvault.content import Limits
from refvault.errors import EmptyPart, InvalidResult, NotFound, PolicyDenied, SealedArtifact, TooLarge
from refvault.integrations.a2a import A2AOptions, MaterializingClient, artifact_parts, materialize, part_for
from refvault.policy import Policy, Rule
from tests.media import png_bytes, wav_bytes
from tests.servers import disclosed, serve

SCOPE = Scope("acme", "ana", "s1")
PNG = png_bytes(8, 8)
WAV = wav_bytes(400)


def _message(*parts: Part, message_id: str = "m-1") -> Message:
    return Message(message_id=message_id, role=Role.ROLE_AGENT, parts=list(parts))


def _serialised(obj: object) -> str:
    from google.protobuf.message import Message as Proto

    if isinstance(obj, list):
        return "".join(_serialised(each) for each in obj)
    assert isinstance(obj, Proto)
    return json_format.MessageToJson(obj) + obj.SerializeToString().decode("latin-1")


def _assert_no_bytes(obj: object, *payloads: bytes) -> None:
    shown = _serialised(obj)
    for payload in payloads:
        assert base64.b64encode(payload).decode()[8:72] not in shown
        assert payload[8:40].decode("latin-1") not in shown


def _meta(part: Part) -> dict[str, object]:
    return json_format.MessageToDict(part.metadata)


def test_raw_parts_become_refvault_urls_in_order_under_one_timestamp(make_vault: Callable[..., Vault]) -> None:
    vault = make_vault()
    message = _message(
        Part(text="here is the screenshot"),
        Part(raw=PNG, media_type="image/png", filename="../shot.png"),
        Part(raw=WAV, media_type="audio/wav", filename="voice.wav"),
        Part(url="https://example.invalid/report.pdf", media_type="application/pdf"),
    )
    out = asyncio.run(materialize(vault, SCOPE, message, agent="painter"))
    assert [part.WhichOneof("content") for part in out.parts] == ["text", "url", "url", "url"]
    assert out.parts[0].text == "here is the screenshot"
    assert out.parts[3].url == "https://example.invalid/report.pdf"
    shot, voice = out.parts[1], out.parts[2]
    assert shot.url.startswith("refvault://art_")
    assert voice.url.startswith("refvault://art_")
    assert (shot.media_type, shot.filename) == ("image/png", "shot.png")
    assert voice.filename == "voice.wav"
    facts = _meta(shot)["refvault"]
    assert isinstance(facts, dict)
    assert facts["digest"] == "sha256:" + hashlib.sha256(PNG).hexdigest()
    assert facts["size"] == len(PNG)
    assert facts["disclosure"] == "sealed"
    first = vault.describe(SCOPE, shot.url.removeprefix("refvault://"))
    second = vault.describe(SCOPE, voice.url.removeprefix("refvault://"))
    assert first.created_at == second.created_at
    assert first.content_hash == "sha256:" + hashlib.sha256(PNG).hexdigest()
    assert message.parts[1].raw == PNG  # the input is not mutated
    _assert_no_bytes(out, PNG, WAV)


def test_a_retried_message_gives_the_same_artifacts_and_stores_nothing_new(make_vault: Callable[..., Vault]) -> None:
    vault = make_vault()
    message = _message(Part(raw=PNG, media_type="image/png"), Part(raw=WAV, media_type="audio/wav"))
    first = asyncio.run(materialize(vault, SCOPE, message))
    stored = len(vault.list(SCOPE))
    again = asyncio.run(materialize(vault, SCOPE, message))
    assert [p.url for p in again.parts] == [p.url for p in first.parts]
    assert len(vault.list(SCOPE)) == stored == 2


@pytest.mark.parametrize(
    ("part", "error"),
    [
        (Part(raw=b"", media_type="image/png"), EmptyPart),
        (Part(raw=PNG), InvalidResult),  # undeclared media type
        (Part(raw=PNG, media_type="not a media type"), InvalidResult),
        (Part(raw=b"x" * 1025, media_type="application/octet-stream"), TooLarge),
    ],
    ids=["empty", "undeclared", "invalid-media-type", "oversize"],
)
def test_refused_parts_raise_typed_errors_and_store_nothing(vault: Vault, part: Part, error: type[Exception]) -> None:
    message = _message(Part(raw=WAV, media_type="audio/wav"), part)  # a good part first: nothing of it stored either
    with pytest.raises(error):
        asyncio.run(materialize(vault, SCOPE, message, options=A2AOptions(limits=Limits(per_part=1024))))
    assert vault.list(SCOPE) == []


def test_many_parts_keep_their_order(vault: Vault) -> None:
    parts = [Part(raw=PNG + bytes([i]), media_type="image/png") if i % 2 else Part(text=f"t{i}") for i in range(20)]
    out = asyncio.run(materialize(vault, SCOPE, parts))
    assert [p.text for p in out[::2]] == [f"t{i}" for i in range(0, 20, 2)]
    digests = [vault.describe(SCOPE, p.url.removeprefix("refvault://")).content_hash for p in out[1::2]]
    assert digests == ["sha256:" + hashlib.sha256(PNG + bytes([i])).hexdigest() for i in range(1, 20, 2)]


@pytest.fixture
def counting_server() -> Iterator[tuple[str, list[str]]]:
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(PNG)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def test_url_parts_are_passed_on_never_fetched(vault: Vault, counting_server: tuple[str, list[str]]) -> None:
    base, hits = counting_server
    url = base + "/shot.png"
    out = asyncio.run(materialize(vault, SCOPE, _message(Part(url=url, media_type="image/png"))))
    assert out.parts[0].url == url
    assert out.parts[0].media_type == "image/png"
    assert hits == []
    assert vault.list(SCOPE) == []


def test_a_url_part_claiming_refvault_is_withheld(vault: Vault) -> None:
    own = vault.put(SCOPE, b"secret report", media_type="text/plain").artifact_id
    out = asyncio.run(materialize(vault, SCOPE, _message(Part(url="REFVAULT://" + own)), agent="evil"))
    assert out.parts[0].WhichOneof("content") == "text"
    assert "withheld" in out.parts[0].text
    assert own not in _serialised(out)


def test_base64_inside_text_and_data_parts_is_stored_too(vault: Vault) -> None:
    data_url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    data = Part()
    data.data.struct_value.update({"image": base64.b64encode(PNG).decode()})
    out = asyncio.run(materialize(vault, SCOPE, [Part(text=f"look: {data_url}"), data]))
    assert "refvault://art_" in out[0].text
    assert out[2].url.startswith("refvault://art_")  # the inline part's own url part, after the list's
    _assert_no_bytes(out, PNG)


def test_big_data_parts_are_offloaded_to_a_preview(vault: Vault) -> None:
    rows = [{"id": i, "name": f"row number {i}", "note": "lorem ipsum dolor sit amet " * 3} for i in range(2000)]
    part = Part()
    json_format.ParseDict(rows, part.data)
    small = Part()
    json_format.ParseDict({"ok": True}, small.data)
    out = asyncio.run(materialize(vault, SCOPE, [part, small], options=A2AOptions(offload_tokens=2000)))
    shown = json_format.MessageToDict(out[0].data)
    assert isinstance(shown, dict)
    artifact_id = shown["offloaded"]["artifact_id"]
    assert len(json.dumps(shown)) < len(json.dumps(rows)) // 10
    stored = vault.describe(SCOPE, artifact_id)
    assert stored.media_type == "application/json"
    assert json_format.MessageToDict(out[1].data) == {"ok": True}


def test_tasks_and_streamed_artifact_updates_are_materialised(vault: Vault) -> None:
    artifact = Artifact(artifact_id="a-1", parts=[Part(raw=PNG, media_type="image/png")])
    task = Task(id="t-1", artifacts=[artifact], history=[_message(Part(raw=WAV, media_type="audio/wav"))])
    event = TaskArtifactUpdateEvent(task_id="t-1", artifact=artifact)
    got_task = asyncio.run(materialize(vault, SCOPE, task))
    got_event = asyncio.run(materialize(vault, SCOPE, event))
    assert got_task.artifacts[0].parts[0].url == got_event.artifact.parts[0].url  # the same artifact, once
    assert got_task.history[0].parts[0].url.startswith("refvault://art_")
    _assert_no_bytes([got_task, got_event], PNG, WAV)

    class Remote:
        async def send_message(self, request: object) -> Iterator[object]:  # type: ignore[misc]
            from a2a.types import StreamResponse

            yield StreamResponse(task=task)
            yield StreamResponse(artifact_update=event)

        async def close(self) -> None:
            pass

    async def stream() -> list[object]:
        async with MaterializingClient(Remote(), vault, SCOPE) as client:
            return [response async for response in client.send_message(None)]

    responses = asyncio.run(stream())
    assert responses[1].artifact_update.artifact.parts[0].url == got_event.artifact.parts[0].url  # type: ignore[attr-defined]
    _assert_no_bytes(responses, PNG, WAV)


# -- outbound ----------------------------------------------------------------------------------------------------


def test_part_for_links_open_over_refvault_serve_and_are_disclosed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / "store"
    with serve(store) as live, Vault.open(store) as vault:
        shot = vault.put(SCOPE, PNG, media_type="image/png", filename="shot.png", disclosure="model").artifact_id
        other = vault.put(SCOPE, WAV, media_type="audio/wav", disclosure="model").artifact_id
        part = part_for(vault, SCOPE, shot, recipient="tool:reviewer", purpose="review", base_url=live.url + "/")
        assert part.url.startswith(live.url + "/v1/links/")
        assert (part.media_type, part.filename) == ("image/png", "shot.png")
        assert "Bearer" not in _serialised(part)
        assert live.token not in _serialised(part)
        _assert_no_bytes(part, PNG)
        got = httpx.get(part.url)
        assert got.status_code == 200
        assert got.content == PNG
        ledger = disclosed(vault, SCOPE, shot, "tool:reviewer")
        assert [entry.purpose for entry in ledger] == ["review"], ledger

        # Misuse is refused like an absent artifact: another artifact spliced in, a tampered token, an expired one.
        absent = httpx.get(live.url + "/v1/links/rvc1.e30.AAAA")
        token = part.url.rsplit("/", 1)[1]
        prefix, body, mac = token.split(".")
        payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        payload["p"]["a"] = other
        spliced_body = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")
        tampered = mac[:-2] + ("AA" if mac[-2:] != "AA" else "BB")
        short = part_for(
            vault, SCOPE, other, recipient="tool:reviewer", base_url=live.url, expires_in=timedelta(seconds=1)
        )
        time.sleep(2.1)
        for url in (
            f"{live.url}/v1/links/{prefix}.{spliced_body}.{mac}",
            f"{live.url}/v1/links/{prefix}.{body}.{tampered}",
            short.url,
        ):
            refused = httpx.get(url)
            assert (refused.status_code, refused.content) == (absent.status_code, absent.content)
            assert refused.status_code == 404
            assert WAV[:64] not in refused.content


def test_sealed_policy_denied_and_foreign_artifacts_are_refused(vault: Vault) -> None:
    sealed = vault.put(SCOPE, PNG, media_type="image/png", disclosure="sealed").artifact_id
    secret = vault.put(SCOPE, b"salaries", media_type="text/plain", labels=["pii"], disclosure="model").artifact_id
    vault.set_policy("acme", Policy(rules=[Rule(id="no-pii-out", labels=["pii"], recipients=["tool:*"])]))
    with pytest.raises(SealedArtifact):
        part_for(vault, SCOPE, sealed, recipient="tool:reviewer", base_url="http://127.0.0.1:1")
    with pytest.raises(PolicyDenied):
        artifact_parts(vault, SCOPE, [secret], recipient="tool:reviewer", base_url="http://127.0.0.1:1")
    with pytest.raises(NotFound):
        part_for(vault, Scope("acme", "bob", "s1"), sealed, recipient="tool:reviewer", base_url="http://127.0.0.1:1")
    assert all(entry.action != "link" for entry in vault.audit(SCOPE))
