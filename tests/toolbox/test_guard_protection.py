"""The Toolbox protects every value its tools read by reference, so the guard stops it at the LLM edge."""

from __future__ import annotations

import random

import pytest

from refvault import Ref, Scope, Toolbox, Vault
from refvault.errors import ContextLeak
from refvault.guard import LeakGuard

CHUNK = 1 << 20


def _secret(size: int, seed: int = 7) -> bytes:
    rng = random.Random(seed)
    return bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz0123456789 ") for _ in range(size))


def _request(excerpt: bytes) -> dict[str, object]:
    return {
        "model": "m",
        "messages": [
            {"role": "user", "content": "summarise the runbook"},
            {"role": "tool", "tool_call_id": "c1", "content": "it says: " + excerpt.decode()},
        ],
    }


def test_a_value_read_by_reference_is_protected_and_stopped_at_the_edge(vault: Vault, scope: Scope) -> None:
    secret = _secret(5000)
    art = vault.put(scope, secret, media_type="text/plain", disclosure="sealed").artifact_id
    box = Toolbox(vault)

    @box.tool
    def summarize(doc: Ref) -> str:
        return f"{len(doc.read())} bytes read"

    assert not box.guard.scan(_request(secret[1000:1100]))  # nothing was read yet: nothing protected
    observation = box.call_sync("summarize", {"doc": art}, scope=scope)
    assert observation.content == "5000 bytes read"
    findings = box.guard.scan(_request(secret[1000:1100]))
    assert [(f.artifact_id, f.arm) for f in findings] == [(art, "content")]
    with pytest.raises(ContextLeak) as caught:
        box.guard.check(_request(secret[2000:2200]))
    assert secret[2000:2200].decode() not in str(caught.value)
    assert not box.guard.scan(_request(b"an unrelated answer that shares no long span with the runbook at all"))


def test_streamed_reads_are_protected_across_chunk_edges(vault: Vault, scope: Scope) -> None:
    secret = _secret(3 * CHUNK + 123, seed=11)
    art = vault.put(scope, secret, media_type="text/plain", disclosure="sealed").artifact_id
    box = Toolbox(vault)

    @box.tool
    def digest(doc: Ref) -> str:
        with doc.open() as stream:
            total = sum(len(piece) for piece in iter(lambda: stream.read(64 * 1024), b""))
        return str(total)

    assert box.call_sync("digest", {"doc": art}, scope=scope).content == str(len(secret))
    for edge in (CHUNK, 2 * CHUNK, 3 * CHUNK):
        excerpt = secret[edge - 40 : edge + 40]  # 80 bytes straddling a chunk edge
        assert [f.artifact_id for f in box.guard.scan(_request(excerpt))] == [art], edge


def test_guard_none_turns_protection_off_and_a_given_guard_is_used(vault: Vault, scope: Scope) -> None:
    secret = _secret(3000, seed=3)
    art = vault.put(scope, secret, media_type="text/plain").artifact_id
    off = Toolbox(vault, guard=None)
    mine = LeakGuard(min_match=64)
    on = Toolbox(vault, guard=mine)
    for box in (off, on):

        @box.tool
        def read_it(doc: Ref) -> str:
            return str(len(doc.read()))

        box.call_sync("read_it", {"doc": art}, scope=scope)
    assert off.guard is None
    assert on.guard is mine
    assert [f.artifact_id for f in mine.scan(_request(secret[100:200]))] == [art]


def test_an_artifact_protected_whole_is_not_hashed_again_on_later_calls(
    vault: Vault, scope: Scope, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = _secret(4000, seed=5)
    art = vault.put(scope, secret, media_type="text/plain").artifact_id
    box = Toolbox(vault)

    @box.tool
    def size(doc: Ref) -> str:
        return str(len(doc.read()))

    calls: list[str] = []
    original = box.guard.protect
    monkeypatch.setattr(box.guard, "protect", lambda aid, data: (calls.append(aid), original(aid, data)))
    for _ in range(3):
        assert box.call_sync("size", {"doc": art}, scope=scope).content == "4000"
    assert calls == [art]  # artifacts are immutable: protected once, still found
    assert [f.artifact_id for f in box.guard.scan(_request(secret[500:600]))] == [art]


def _image_request(data_url: str) -> dict[str, object]:
    return {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url}}]}],
    }


def test_images_load_artifacts_loads_pass_the_size_arm_and_nothing_else_does(vault: Vault, scope: Scope) -> None:
    """An image the model asked for is admitted past the size arm; another payload of that size is still refused."""
    import base64

    png = b"\x89PNG\r\n\x1a\n" + _secret(200_000, seed=3)
    art = vault.put(scope, png, media_type="image/png", disclosure="model").artifact_id
    box = Toolbox(vault)
    encoded = base64.b64encode(png).decode()
    url = f"data:image/png;base64,{encoded}"
    assert [f.arm for f in box.guard.scan(_image_request(url))] == ["size"]  # not loaded yet: refused for its size
    observation = box.call_sync("load_artifacts", {"artifact_ids": [art]}, scope=scope)
    assert [part["type"] for part in observation.parts] == ["text", "image"]
    assert box.guard.scan(_image_request(url)) == []
    urlsafe = base64.urlsafe_b64encode(png).decode().rstrip("=")
    assert box.guard.scan(_image_request(f"data:image/png;base64,{urlsafe}")) == []
    other = base64.b64encode(png[:-1] + b"!").decode()
    assert [f.arm for f in box.guard.scan(_image_request(f"data:image/png;base64,{other}"))] == ["size"]


def test_an_admitted_payload_is_still_scanned_for_protected_content(scope: Scope) -> None:
    import base64

    guard = LeakGuard()
    secret = _secret(300_000, seed=5)
    guard.protect("art_secret", secret)
    encoded = base64.b64encode(secret).decode()
    guard.exempt_payload(encoded)
    findings = guard.scan(_image_request(f"data:image/png;base64,{encoded}"))
    assert [(f.arm, f.artifact_id) for f in findings] == [("content", "art_secret")]
