"""The leak guard core: fingerprints, request shapes, both arms, policies, events, threads.

Protected data and carriers are generated (fixed seeds or hypothesis); nothing is read from disk.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refvault import Scope, Vault
from refvault.blobs.memory import MemoryBlobStore
from refvault.catalog.memory import MemoryCatalog
from refvault.errors import ContextLeak, InvalidArgument
from refvault.guard import Finding, LeakGuard, marker
from refvault.guard import fingerprints as fp
from refvault.guard.requests import Leaf, walk

MIN = 64
PARAMS = fp.Params.for_min_match(MIN)
K, W = PARAMS.k, PARAMS.w
SLACK = 2 * (W - 1) + 8  # matched <= planted + 2(w - 1), plus bytes the carrier happens to share


# -- generated data --------------------------------------------------------------------------------------------------


def words(seed: int, n_bytes: int, alphabet: str = "abcdefghijklmnopqrstuvwxyz") -> str:
    """Word salad from a vocabulary drawn from ``alphabet`` (fast: numpy gathers)."""
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(alphabet.encode(), np.uint8)
    vocab = [bytes(letters[rng.integers(0, letters.size, int(rng.integers(1, 10)))]) + b" " for _ in range(4096)]
    flat = np.frombuffer(b"".join(vocab), np.uint8)
    lengths = np.array([len(v) for v in vocab], np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    out: list[bytes] = []
    need = n_bytes
    while need > 0:
        ids = (rng.random(max(16, min(need // 4 + 16, 1 << 21))) ** 2 * lengths.size).astype(np.int64)
        lens = lengths[ids]
        ends = np.cumsum(lens)
        index = np.arange(int(ends[-1]), dtype=np.int64) + np.repeat(starts[ids] - (ends - lens), lens)
        chunk = flat[index].tobytes()[:need]
        out.append(chunk)
        need -= len(chunk)
    return b"".join(out).decode()


def json_records(seed: int, n_bytes: int, keys: tuple[str, ...], alphabet: str) -> str:
    rng = random.Random(seed)
    text = words(seed, n_bytes, alphabet)
    lines: list[str] = []
    size = pos = 0
    while size < n_bytes:
        n = rng.randrange(20, 120)
        record = {keys[0]: rng.randrange(10**6), keys[1]: text[pos : pos + n], keys[2]: rng.random() < 0.5}
        line = json.dumps(record)
        lines.append(line)
        size += len(line) + 1
        pos = (pos + n) % max(1, len(text) - 200)
    return "\n".join(lines)


UNICODE = 'héllo wörld "quoted" back\\slash tab\tnew\nline 中文字符 emoji 😀👍 ünïcödé ßœ∂ƒ '


def unicode_text(seed: int, n_chars: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(UNICODE) for _ in range(n_chars))


ARTIFACTS: dict[str, bytes] = {}
TEXT_IDS: list[str] = []
BINARY_IDS: list[str] = []


def _protected_set() -> None:
    rng = random.Random(7)
    for i in range(12):
        ARTIFACTS[f"art_text_{i}"] = words(100 + i, rng.randrange(2_000, 30_000)).encode()
        TEXT_IDS.append(f"art_text_{i}")
    for i in range(4):
        ARTIFACTS[f"art_json_{i}"] = json_records(200 + i, 20_000, ("id", "note", "ok"), "abcdefghij").encode()
        TEXT_IDS.append(f"art_json_{i}")
    for i in range(4):
        ARTIFACTS[f"art_uni_{i}"] = unicode_text(300 + i, 3_000).encode()
        TEXT_IDS.append(f"art_uni_{i}")
    for i in range(6):
        ARTIFACTS[f"art_bin_{i}"] = random.Random(400 + i).randbytes(rng.randrange(500, 20_000))
        BINARY_IDS.append(f"art_bin_{i}")


_protected_set()


@pytest.fixture(scope="module")
def guard() -> LeakGuard:
    g = LeakGuard(MIN, size_threshold=1 << 30)
    g.protect_many(ARTIFACTS.items())
    return g


def text_excerpt(data: random.Random, length: int) -> tuple[str, str]:
    """A text excerpt of at least ``length`` UTF-8 bytes starting at a random character of a text artifact."""
    artifact_id = data.choice(TEXT_IDS)
    text = ARTIFACTS[artifact_id].decode()
    while True:
        start = data.randrange(0, max(1, len(text) - length))
        end = start
        while end < len(text) and len(text[start:end].encode()) < length:
            end += max(1, (length - len(text[start:end].encode())) // 4)
        piece = text[start:end]
        if len(piece.encode()) >= length:
            return artifact_id, piece


def binary_excerpt(data: random.Random, length: int) -> tuple[str, bytes]:
    artifact_id = data.choice(BINARY_IDS)
    blob = ARTIFACTS[artifact_id]
    start = data.randrange(0, len(blob) - length + 1)
    return artifact_id, blob[start : start + length]


CARRIER = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:!?-", max_size=150)


# -- the fingerprint kernel ------------------------------------------------------------------------------------------


def reference_selection(data: bytes, k: int, w: int, base: int, key: int) -> list[tuple[int, int]]:
    """Winnowing by the book: per window of w k-gram positions, the smallest (high-half hash, rightmost)."""
    mask = (1 << 64) - 1

    def fmix(x: int) -> int:
        x ^= x >> 33
        x = (x * 0xFF51AFD7ED558CCD) & mask
        x ^= x >> 33
        x = (x * 0xC4CEB9FE1A85EC53) & mask
        return x ^ (x >> 33)

    hashes: list[int | None] = []
    for q in range(len(data) - k + 1):
        gram = data[q : q + k]
        if all(gram[j] == gram[j + fp.PERIOD] for j in range(k - fp.PERIOD)):
            hashes.append(None)
            continue
        h = 0
        for c in gram:
            h = (h * base + c) & mask
        hashes.append(h)
    selected: list[tuple[int, int]] = []
    for j in range(len(hashes) - w + 1):
        best: tuple[int, int] | None = None
        for t in range(j, j + w):
            h = hashes[t]
            if h is None:
                continue
            candidate = (h >> 32 << 32) | (0xFFFFFFFF - t)
            if best is None or candidate <= best[0]:
                best = (candidate, t)
        if best is not None and (not selected or selected[-1][0] != best[1]):
            selected.append((best[1], fmix(hashes[best[1]] ^ key)))  # type: ignore[operator]
    return selected


@pytest.mark.parametrize("seed", range(6))
def test_kernel_matches_reference_winnowing(seed: int) -> None:
    rng = random.Random(seed)
    index = fp.FingerprintIndex(fp.Params.for_min_match(rng.choice([32, 40, 64])))
    k, w = index.params.k, index.params.w
    parts = [rng.randbytes(rng.randrange(0, 300)), b"=" * rng.randrange(0, 120), b"ab" * rng.randrange(0, 60)]
    parts += [words(seed, rng.randrange(50, 400)).encode(), b"0123456789ab" * rng.randrange(0, 20)]
    rng.shuffle(parts)
    data = b"".join(parts)
    got = index.fingerprint(np.frombuffer(data, np.uint8), np.array([0, len(data)], np.int64))
    expected = reference_selection(data, k, w, int(index._base), int(index._key))
    assert list(zip(got.positions.tolist(), got.hashes.tolist(), strict=True)) == expected


@pytest.mark.parametrize("min_match", [32, 33, 64, 65, 100, 256])
def test_parameters_put_the_guarantee_exactly_at_min_match(min_match: int) -> None:
    p = fp.Params.for_min_match(min_match)
    assert p.threshold == p.w + p.k - 1 == min_match
    assert p.k > fp.PERIOD
    assert p.w >= 1


def test_default_parameters() -> None:
    assert (K, W, PARAMS.threshold) == (33, 32, 64)


# -- the guarantee at its boundary -----------------------------------------------------------------------------------


@pytest.mark.parametrize("min_match", [32, 64, 100])
def test_every_span_of_min_match_bytes_is_found_and_shorter_than_k_never(min_match: int) -> None:
    rng = random.Random(min_match)
    g = LeakGuard(min_match)
    protected = {f"art_{i}": rng.randbytes(rng.randrange(min_match, 5_000)) for i in range(30)}
    g.protect_many(protected.items())
    k = g.params.k
    seen_below = 0
    for trial in range(300):
        artifact_id = rng.choice(list(protected))
        blob = protected[artifact_id]
        for length, must in ((min_match, True), (min_match - 1, False), (k - 1, None)):
            start = rng.randrange(0, len(blob) - length + 1)
            # carriers that differ from the artifact's bytes next to the excerpt: the span is exactly length
            head = bytearray(rng.randbytes(rng.randrange(1, 200)))
            tail = bytearray(rng.randbytes(rng.randrange(1, 200)))
            if start > 0 and head[-1] == blob[start - 1]:
                head[-1] ^= 0xFF
            if start + length < len(blob) and tail[0] == blob[start + length]:
                tail[0] ^= 0xFF
            body = bytes(head) + blob[start : start + length] + bytes(tail)
            findings = g.scan(body)
            named = [f for f in findings if f.artifact_id == artifact_id]
            assert all(f.matched >= min_match for f in findings), findings
            if must:
                assert named, (trial, length)
                assert named[0].matched <= length + 2 * (g.params.w - 1) + 8
            elif must is None:
                assert not findings, (trial, length)  # fewer than k verified bytes: never reported
            else:
                seen_below += bool(named)
    # Below min_match a finding is allowed (nothing tells a 63-byte span from a 64-byte one) but not required.
    assert seen_below >= 0


def test_spans_at_the_boundary_in_text(guard: LeakGuard) -> None:
    rng = random.Random(11)
    for _ in range(200):
        artifact_id = rng.choice(TEXT_IDS[:12])  # ASCII prose: one byte per character
        text = ARTIFACTS[artifact_id].decode()
        start = rng.randrange(0, len(text) - MIN)
        request = {"messages": [{"role": "user", "content": "Q: " + text[start : start + MIN] + " ?"}]}
        assert any(f.artifact_id == artifact_id for f in guard.scan(request))


# -- recall in every site kind of every request format ---------------------------------------------------------------


def data_url(payload: bytes, media: str = "image/png") -> str:
    return f"data:{media};base64," + base64.b64encode(payload).decode()


def b64(payload: bytes) -> str:
    return base64.b64encode(payload).decode()


# Each builder: (text carrying the excerpt, binary payload carrying it) -> (request, site)
Builder = Callable[[str, bytes], tuple[Any, str]]

TEXT_SITES: dict[str, Builder] = {
    # OpenAI chat completions
    "chat.system": lambda t, _: (
        {"messages": [{"role": "system", "content": t}, {"role": "user", "content": "hi"}]},
        "messages[0].content",
    ),
    "chat.user": lambda t, _: ({"messages": [{"role": "user", "content": t}]}, "messages[0].content"),
    "chat.user_part": lambda t, _: (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "text", "text": t}]}]},
        "messages[0].content[1].text",
    ),
    "chat.assistant": lambda t, _: (
        {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": t}]},
        "messages[1].content",
    ),
    "chat.tool": lambda t, _: (
        {"messages": [{"role": "tool", "tool_call_id": "call_1", "content": t}]},
        "messages[0].content",
    ),
    "chat.tool_part": lambda t, _: (
        {"messages": [{"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": t}]}]},
        "messages[0].content[0].text",
    ),
    "chat.arguments": lambda t, _: (
        {
            "messages": [
                {"role": "user", "content": "q"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c0", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "g", "arguments": json.dumps({"query": t, "n": 3})},
                        },
                    ],
                },
            ]
        },
        "messages[1].tool_calls[1].function.arguments",
    ),
    # OpenAI responses
    "responses.instructions": lambda t, _: ({"instructions": t, "input": "hi"}, "instructions"),
    "responses.input": lambda t, _: ({"input": t}, "input"),
    "responses.input_text": lambda t, _: (
        {"input": [{"role": "user", "content": [{"type": "input_text", "text": t}]}]},
        "input[0].content[0].text",
    ),
    "responses.function_call": lambda t, _: (
        {
            "input": [
                {"role": "user", "content": "q"},
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": json.dumps({"q": t})},
            ]
        },
        "input[1].arguments",
    ),
    "responses.function_call_output": lambda t, _: (
        {"input": [{"type": "function_call_output", "call_id": "c", "output": t}]},
        "input[0].output",
    ),
    # Anthropic messages
    "anthropic.system": lambda t, _: ({"system": t, "messages": [{"role": "user", "content": "hi"}]}, "system"),
    "anthropic.system_blocks": lambda t, _: (
        {"system": [{"type": "text", "text": t}], "messages": []},
        "system[0].text",
    ),
    "anthropic.text": lambda t, _: (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": t}]}]},
        "messages[0].content[0].text",
    ),
    "anthropic.tool_use": lambda t, _: (
        {
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"q": t}}]},
            ]
        },
        "messages[1].content[0].input.q",
    ),
    "anthropic.tool_result": lambda t, _: (
        {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": t}]}]},
        "messages[0].content[0].content",
    ),
    "anthropic.tool_result_blocks": lambda t, _: (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": t}]}],
                }
            ]
        },
        "messages[0].content[0].content[0].text",
    ),
    # Gemini
    "gemini.text": lambda t, _: ({"contents": [{"role": "user", "parts": [{"text": t}]}]}, "contents[0].parts[0].text"),
    "gemini.system": lambda t, _: (
        {"system_instruction": {"parts": [{"text": t}]}, "contents": []},
        "system_instruction.parts[0].text",
    ),
    "gemini.function_call": lambda t, _: (
        {"contents": [{"role": "model", "parts": [{"function_call": {"name": "f", "args": {"q": t}}}]}]},
        "contents[0].parts[0].function_call.args.q",
    ),
    "gemini.functionCall": lambda t, _: (
        {"contents": [{"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"q": [t]}}}]}]},
        "contents[0].parts[0].functionCall.args.q[0]",
    ),
    "gemini.function_response": lambda t, _: (
        {"contents": [{"role": "user", "parts": [{"function_response": {"name": "f", "response": {"result": t}}}]}]},
        "contents[0].parts[0].function_response.response.result",
    ),
    # anything else
    "generic.nested": lambda t, _: ({"a": {"b": [1, None, {"c": t}]}}, "a.b[2].c"),
    "generic.key": lambda t, _: ({"meta": {"x": 1, t: True}}, "meta.<key 1>#key"),
    "generic.str": lambda t, _: (t, "text"),
    "generic.list": lambda t, _: (["a", ("b", t)], "[1][1]"),
}

BINARY_SITES: dict[str, Builder] = {
    "chat.image_url": lambda _, p: (
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(p)}}]}]},
        "messages[0].content[0].image_url.url",
    ),
    "chat.input_audio": lambda _, p: (
        {
            "messages": [
                {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": b64(p), "format": "wav"}}]}
            ]
        },
        "messages[0].content[0].input_audio.data",
    ),
    "responses.input_image": lambda _, p: (
        {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": data_url(p)}]}]},
        "input[0].content[0].image_url",
    ),
    "responses.input_file": lambda _, p: (
        {"input": [{"role": "user", "content": [{"type": "input_file", "filename": "a.pdf", "file_data": b64(p)}]}]},
        "input[0].content[0].file_data",
    ),
    "anthropic.image": lambda _, p: (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(p)}}
                    ],
                }
            ]
        },
        "messages[0].content[0].source.data",
    ),
    "anthropic.tool_result_image": lambda _, p: (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t",
                            "content": [{"type": "image", "source": {"type": "base64", "data": b64(p)}}],
                        }
                    ],
                }
            ]
        },
        "messages[0].content[0].content[0].source.data",
    ),
    "gemini.inline_data": lambda _, p: (
        {"contents": [{"parts": [{"text": "x"}, {"inline_data": {"mime_type": "image/png", "data": b64(p)}}]}]},
        "contents[0].parts[1].inline_data.data",
    ),
    "gemini.inlineData": lambda _, p: (
        {"contents": [{"parts": [{"inlineData": {"mimeType": "image/png", "data": b64(p)}}]}]},
        "contents[0].parts[0].inlineData.data",
    ),
    "generic.bytes": lambda _, p: (p, "body"),
    "generic.bytes_leaf": lambda _, p: ({"blob": p}, "blob"),
    "tool.base64_in_text": lambda _, p: (
        {"messages": [{"role": "tool", "tool_call_id": "c", "content": "file follows: " + b64(p) + " -- end"}]},
        "messages[0].content",
    ),
    "tool.base64_mime": lambda _, p: (
        {"messages": [{"role": "tool", "tool_call_id": "c", "content": base64.encodebytes(p).decode()}]},
        "messages[0].content",
    ),
    "tool.base64_urlsafe": lambda _, p: (
        {"input": [{"type": "function_call_output", "call_id": "c", "output": base64.urlsafe_b64encode(p).decode()}]},
        "input[0].output",
    ),
    "args.data_url": lambda _, p: (
        {
            "input": [
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": json.dumps({"img": data_url(p)})}
            ]
        },
        "input[0].arguments",
    ),
}


def assert_found(guard: LeakGuard, request: Any, site: str, artifact_id: str, length: int) -> None:
    findings = guard.scan(request)
    named = [f for f in findings if f.site == site and f.artifact_id == artifact_id and f.arm == "content"]
    assert named, (site, findings)
    assert MIN <= named[0].matched <= length + SLACK, (named[0], length)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    site=st.sampled_from(sorted(TEXT_SITES)),
    seed=st.integers(0, 2**32),
    length=st.integers(MIN, 700),
    before=CARRIER,
    after=CARRIER,
)
def test_recall_in_every_text_site(
    guard: LeakGuard, site: str, seed: int, length: int, before: str, after: str
) -> None:
    artifact_id, excerpt = text_excerpt(random.Random(seed), length)
    request, where = TEXT_SITES[site](before + excerpt + after, b"")
    assert_found(guard, request, where, artifact_id, len(excerpt.encode()))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    site=st.sampled_from(sorted(BINARY_SITES)),
    seed=st.integers(0, 2**32),
    length=st.integers(MIN, 700),
    before=st.binary(max_size=100),
    after=st.binary(max_size=100),
)
def test_recall_in_every_binary_site(
    guard: LeakGuard, site: str, seed: int, length: int, before: bytes, after: bytes
) -> None:
    artifact_id, excerpt = binary_excerpt(random.Random(seed), length)
    request, where = BINARY_SITES[site]("", before + excerpt + after)
    assert_found(guard, request, where, artifact_id, length)


def test_every_site_kind_is_covered_for_every_format() -> None:
    formats = {name.split(".")[0] for name in [*TEXT_SITES, *BINARY_SITES]}
    assert {"chat", "responses", "anthropic", "gemini", "generic", "tool"} <= formats


def test_sites_of_a_real_request() -> None:
    request = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "x"}]},
            {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
        ],
    }
    leaves: list[Leaf] = []
    walk(request, lambda leaf: leaves.append(leaf))
    kinds = {leaf.site: leaf.kind for leaf in leaves}
    assert kinds["messages[0].content"] == "text"
    assert kinds["messages[1].content[0].text"] == "tool"
    assert kinds["messages[2].tool_calls[0].function.arguments"] == "args"


# -- escapes, non-ASCII, base64 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("ensure_ascii", [True, False])
@pytest.mark.parametrize("seed", range(8))
def test_escapes_inside_tool_call_arguments(guard: LeakGuard, ensure_ascii: bool, seed: int) -> None:
    rng = random.Random(seed)
    artifact_id = rng.choice([i for i in TEXT_IDS if i.startswith(("art_uni", "art_json"))])
    text = ARTIFACTS[artifact_id].decode()
    start = max(0, text.index("\n", rng.randrange(0, len(text) - 400)) - rng.randrange(0, 30))  # spans a line break
    excerpt = text[start : start + rng.randrange(40, 200)]
    while len(excerpt.encode()) < MIN:
        excerpt = text[start : start + len(excerpt) + 10]
    arguments = json.dumps({"note": "x" + excerpt + "y", "n": 1}, ensure_ascii=ensure_ascii)
    assert "\\" in arguments  # escapes present
    request = {
        "messages": [
            {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": arguments}}]}
        ]
    }
    assert_found(guard, request, "messages[0].tool_calls[0].function.arguments", artifact_id, len(excerpt.encode()))
    # JSON inside JSON: the arguments string itself JSON-encoded inside a tool result
    nested = {"messages": [{"role": "tool", "tool_call_id": "a", "content": json.dumps({"echo": arguments})}]}
    assert_found(guard, nested, "messages[0].content", artifact_id, len(excerpt.encode()))


def test_surrogate_pairs_and_raw_escaped_text(guard: LeakGuard) -> None:
    text = ARTIFACTS["art_uni_0"].decode()
    excerpt = text[100:200]
    escaped = json.dumps(excerpt)[1:-1]  # \uXXXX for the emoji, as a surrogate pair, inside plain text
    assert "\\ud83d" in escaped or "\\u" in escaped or "\\n" in escaped
    assert_found(guard, f"log line: {escaped} (end)", "text", "art_uni_0", len(excerpt.encode()))


@pytest.mark.parametrize(
    "encode",
    [
        lambda p: data_url(p),
        lambda p: data_url(p, "application/octet-stream"),
        lambda p: base64.b64encode(p).decode(),
        lambda p: base64.urlsafe_b64encode(p).decode().rstrip("="),
        lambda p: base64.encodebytes(p).decode(),
    ],
)
def test_data_urls_and_raw_base64(guard: LeakGuard, encode: Callable[[bytes], str]) -> None:
    rng = random.Random(3)
    for shift in range(3):  # every base64 alignment of the excerpt
        artifact_id, excerpt = binary_excerpt(rng, 100)
        payload = rng.randbytes(shift) + excerpt + rng.randbytes(5)
        request = {"messages": [{"role": "tool", "tool_call_id": "c", "content": "see: " + encode(payload)}]}
        assert_found(guard, request, "messages[0].content", artifact_id, 100)


def test_percent_encoded_data_url(guard: LeakGuard) -> None:
    from urllib.parse import quote_from_bytes

    _, excerpt = text_excerpt(random.Random(5), 90)
    url = "data:text/plain," + quote_from_bytes(excerpt.encode())
    findings = guard.scan(
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]}
    )
    assert any(f.arm == "content" for f in findings)


def test_periodic_runs_are_not_secrets() -> None:
    g = LeakGuard()
    g.protect("art_runs", b"=" * 500 + b"ab" * 300 + b"\x00" * 1000)
    assert g.scan("header\n" + "=" * 200 + "\n" + "ab" * 100) == []


# -- no false positives ----------------------------------------------------------------------------------------------


def test_100_mb_of_unrelated_prose_and_json_gives_no_finding() -> None:
    g = LeakGuard(size_threshold=1 << 30)  # 1 MB tool results: only the content arm here
    protected = [(f"art_{i}", words(1000 + i, 200_000, "abcdefghijklmnopqrstuvwxyz").encode()) for i in range(20)]
    protected += [
        (f"art_j{i}", json_records(2000 + i, 200_000, ("id", "message", "flag"), "abcdefghijklmnop").encode())
        for i in range(10)
    ]
    g.protect_many(protected)
    scanned = 0
    chunk = 1 << 20
    prose = words(99, 64 * chunk, "etaoinshrdlucmfwypvbgkjqxz")
    records = json_records(98, 40 * chunk, ("user", "text", "done"), "qrstuvwxyz")
    for i in range(0, len(prose), chunk):
        assert g.scan(prose[i : i + chunk]) == []
        scanned += chunk
    for i in range(0, len(records), chunk):
        body = {"messages": [{"role": "tool", "tool_call_id": "c", "content": records[i : i + chunk]}]}
        assert g.scan(body) == []
        scanned += chunk
    assert scanned >= 100_000_000


# -- findings never carry content ------------------------------------------------------------------------------------

CANARY = "CANARY-7f3a9c-" + "".join(random.Random(9).choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(200))


def test_findings_errors_events_and_repr_carry_no_content(caplog: pytest.LogCaptureFixture) -> None:
    g = LeakGuard()
    g.protect("art_canary", CANARY)
    request = {"messages": [{"role": "tool", "tool_call_id": "c", "content": "result: " + CANARY[10:150]}]}
    findings = g.scan(request)
    assert findings
    assert findings[0].artifact_id == "art_canary"
    with caplog.at_level(logging.WARNING, logger="refvault.guard"), pytest.raises(ContextLeak) as caught:
        g.check(request)
    shown = [
        str(findings),
        repr(findings),
        json.dumps([f.to_dict() for f in findings]),
        str(caught.value),
        repr(caught.value),
        repr(g),
        str(g.stats()),
    ]
    for record in caplog.records:
        shown += [record.getMessage(), repr(record.__dict__)]
    pieces = {CANARY[i : i + 12] for i in range(0, len(CANARY) - 12)}
    for text in shown:
        assert not any(p in text for p in pieces), text
        assert "CANARY" not in text


def test_repr_shows_counts_only() -> None:
    g = LeakGuard(policy="redact")
    g.protect("art_1", "x" * 10 + CANARY)
    text = repr(g)
    assert text.startswith("LeakGuard(min_match=64")
    assert "artifacts=1" in text
    assert "art_1" not in text
    assert "CANARY" not in text
    with pytest.raises(TypeError):
        import pickle

        pickle.dumps(g)


# -- the size arm ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "site"),
    [
        (lambda t: {"messages": [{"role": "tool", "tool_call_id": "c", "content": t}]}, "messages[0].content"),
        (
            lambda t: {
                "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": t}}]}]
            },
            "messages[0].tool_calls[0].function.arguments",
        ),
        (lambda t: {"input": [{"type": "function_call_output", "call_id": "c", "output": t}]}, "input[0].output"),
        (
            lambda t: {"messages": [{"role": "user", "content": [{"type": "tool_result", "content": t}]}]},
            "messages[0].content[0].content",
        ),
        (
            lambda t: {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": t}}]}]},
            "messages[0].content[0].image_url.url",
        ),
    ],
)
def test_size_arm_boundary_is_inclusive(build: Callable[[str], Any], site: str) -> None:
    threshold = 1000
    g = LeakGuard(size_threshold=threshold)

    def payload(n: int) -> str:
        if "image_url" in site:
            head = "data:image/png;base64,"
            return head + "A" * (n - len(head))
        return "y" * n

    at = g.scan(build(payload(threshold)))
    assert at == [Finding(site, None, threshold, "size")]
    assert g.scan(build(payload(threshold - 1))) == []


def test_size_arm_measures_object_arguments_and_exempts_conversation() -> None:
    g = LeakGuard(size_threshold=1000)
    args = {"q": "z" * 1000}
    size = len(json.dumps(args, separators=(",", ":")))
    request = {
        "system": "s" * 5000,
        "messages": [
            {"role": "user", "content": "u" * 5000},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": args}]},
        ],
    }
    assert g.scan(request) == [Finding("messages[1].content[0].input", None, size, "size")]
    gemini = {"contents": [{"parts": [{"function_response": {"name": "f", "response": args}}]}]}
    assert g.scan(gemini) == [Finding("contents[0].parts[0].function_response.response", None, size, "size")]


# -- policies and events ---------------------------------------------------------------------------------------------


def test_check_raise_returns_clean_requests_unchanged(guard: LeakGuard, caplog: pytest.LogCaptureFixture) -> None:
    clean = {"messages": [{"role": "user", "content": words(1, 3000, "klmnopq")}]}
    with caplog.at_level(logging.WARNING, logger="refvault.guard"):
        assert guard.check(clean) is clean
    assert not caplog.records
    _, excerpt = text_excerpt(random.Random(2), 100)
    leaking = {"messages": [{"role": "user", "content": excerpt}]}
    with caplog.at_level(logging.WARNING, logger="refvault.guard"), pytest.raises(ContextLeak) as caught:
        guard.check(leaking)
    assert caught.value.findings
    assert all(isinstance(f, Finding) for f in caught.value.findings)
    (record,) = caplog.records
    assert record.name == "refvault.guard"
    (finding,) = caught.value.findings
    assert record.getMessage() == (
        f"refvault guard: request blocked as intended: it carried protected artifact {finding.artifact_id}"
        f" ({finding.site}); nothing was sent"
    )
    assert record.event == "llm.context_leak"
    assert record.policy == "raise"
    assert record.findings == [f.to_dict() for f in caught.value.findings]  # type: ignore[attr-defined]


def _windows(data: bytes, n: int) -> set[bytes]:
    return {data[i : i + n] for i in range(len(data) - n + 1)}


def _strings(value: Any) -> list[str]:
    out: list[str] = []
    walk(
        value,
        lambda leaf: out.append(leaf.value.decode("latin-1") if isinstance(leaf.value, bytes) else leaf.value or ""),
    )
    return out


def test_redact_policy_removes_every_protected_span_and_keeps_the_structure(caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(21)
    g = LeakGuard(policy="redact")
    secret_text = words(77, 4000, "abcdefghijklmnopqrstuvwxyz")
    secret_blob = rng.randbytes(3000)
    g.protect("art_t", secret_text)
    g.protect("art_b", secret_blob)
    request = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "be nice"},
            {
                "role": "user",
                "content": "before " + secret_text[100:400] + " middle " + secret_text[1000:1100] + " after",
            },
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "c",
                        "function": {"name": "f", "arguments": json.dumps({"q": secret_text[2000:2300] + '"x\n'})},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "c",
                "content": "image: " + base64.b64encode(secret_blob[10:500]).decode() + " ok",
            },
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(secret_blob[:900])}}]},
        ],
    }
    with caplog.at_level(logging.WARNING, logger="refvault.guard"):
        out = g.check(request)
    assert isinstance(out, dict)
    assert out is not request
    assert request["messages"][1]["content"].startswith("before ")  # the input is not modified
    # the structure is kept: same keys, same list lengths, untouched leaves equal
    assert out.keys() == request.keys()
    assert len(out["messages"]) == len(request["messages"])
    assert out["messages"][0] == request["messages"][0]
    assert [m.keys() for m in out["messages"]] == [m.keys() for m in request["messages"]]
    assert out["messages"][4]["content"][0]["image_url"]["url"] == marker("art_b")
    assert marker("art_t") in out["messages"][1]["content"]
    assert marker("art_b") in out["messages"][3]["content"]
    assert out["messages"][3]["content"].endswith(" ok")
    # no protected span of min_match bytes survives, in any leaf or decoded view
    protected = _windows(secret_text.encode(), MIN) | _windows(secret_blob, MIN)
    for text in [*_strings(out), json.dumps(out)]:
        assert not (_windows(text.encode(), MIN) & protected)
    assert g.scan(out) == []
    assert caplog.records
    assert caplog.records[0].policy == "redact"


def test_redact_text(guard: LeakGuard) -> None:
    artifact_id, excerpt = text_excerpt(random.Random(8), 120)
    text = "head " + excerpt + " tail"
    redacted, findings = guard.redact_text(text)
    assert marker(artifact_id) in redacted
    assert findings[0].site == "text"
    assert not (_windows(redacted.encode(), MIN) & _windows(ARTIFACTS[artifact_id], MIN))
    clean = "nothing to see here " * 10
    same, none = guard.redact_text(clean)
    assert same is clean
    assert none == []


def test_invalid_arguments() -> None:
    for bad in (31, 0, 1 << 21, "64", True):
        with pytest.raises(InvalidArgument):
            LeakGuard(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        LeakGuard(size_threshold=0)
    with pytest.raises(InvalidArgument):
        LeakGuard(policy="drop")  # type: ignore[arg-type]
    g = LeakGuard()
    with pytest.raises(InvalidArgument):
        g.protect("", b"x")
    with pytest.raises(InvalidArgument):
        g.protect("art", 12)  # type: ignore[arg-type]


def test_protecting_again_is_a_no_op_and_short_values_are_counted() -> None:
    g = LeakGuard()
    data = words(3, 5000, "abcdefgh")
    assert g.protect_many([("art_a", data), ("art_a", data), ("art_short", "tiny")]) == 2
    before = g.stats()
    g.protect("art_a", data)
    assert g.stats() == before
    assert before["artifacts"] == 2


# -- the vault, threads, the index size ------------------------------------------------------------------------------


def test_protect_scope_protects_sealed_artifacts_only() -> None:
    vault = Vault(MemoryBlobStore(), MemoryCatalog())
    scope = Scope("t", "u", "s")
    sealed = words(41, 5000, "abcdefghijklm").encode()
    public = words(42, 5000, "nopqrstuvwxyz").encode()
    sealed_id = vault.put(scope, sealed, disclosure="sealed").artifact_id
    vault.put(scope, public, disclosure="model")
    g = LeakGuard()
    assert g.protect_scope(vault, scope) == 1
    assert [f.artifact_id for f in g.scan(sealed[1000:1200].decode())] == [sealed_id]
    assert g.scan(public[1000:1200].decode()) == []


def test_protect_while_scanning_from_other_threads() -> None:
    g = LeakGuard()
    rng = random.Random(31)
    first = {f"art_first_{i}": rng.randbytes(4000) for i in range(20)}
    later = {f"art_later_{i}": rng.randbytes(4000) for i in range(200)}
    g.protect_many(first.items())
    errors: list[BaseException] = []
    done = threading.Event()

    def protector() -> None:
        try:
            for item in later.items():
                g.protect(*item)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            done.set()

    def scanner(seed: int) -> None:
        local = random.Random(seed)
        try:
            while not done.is_set():
                artifact_id = local.choice(list(first))
                start = local.randrange(0, 3800)
                body = {"messages": [{"role": "tool", "content": b64(first[artifact_id][start : start + 150])}]}
                assert any(f.artifact_id == artifact_id for f in g.scan(body))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=protector)] + [threading.Thread(target=scanner, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    for artifact_id, blob in later.items():
        assert any(f.artifact_id == artifact_id for f in g.scan(blob[1000:1100]))
    assert g.stats()["artifacts"] == 220


def test_index_is_under_one_byte_per_protected_byte() -> None:
    g = LeakGuard()
    g.protect_many((f"art_{i}", words(500 + i, 400_000).encode()) for i in range(10))
    g.protect_many(
        (f"art_j{i}", json_records(600 + i, 200_000, ("a", "b", "c"), "abcdefghij").encode()) for i in range(5)
    )
    stats = g.stats()
    assert stats["index_bytes"] / stats["protected_bytes"] <= 1.0, stats


def test_a_pydantic_model_is_walked_and_rebuilt_when_redacted() -> None:
    from pydantic import BaseModel

    class Message(BaseModel):
        role: str
        content: str

    g = LeakGuard(policy="redact")
    secret = words(61, 3000, "abcdefghijklmnopqrstuvwxyz")
    g.protect("art_p", secret)
    message = Message(role="tool", content="x " + secret[500:800])
    assert [f.site for f in g.scan([message])] == ["[0].content"]
    (redacted,) = g.check([message])  # type: ignore[misc]
    assert isinstance(redacted, Message)
    assert marker("art_p") in redacted.content


# -- boilerplate and many segments -----------------------------------------------------------------------------------


@pytest.mark.parametrize("long_boilerplate", [False, True])
def test_boilerplate_shared_by_many_artifacts_does_not_blur_attribution(long_boilerplate: bool) -> None:
    rng = random.Random(17)
    g = LeakGuard()
    extra = {"source": "collector-eu-west-1", "ok": True} if long_boilerplate else {}

    def log() -> bytes:
        records = [{"id": n, "kind": "event", **extra, "payload": rng.randbytes(12).hex()} for n in range(150)]
        return "\n".join(json.dumps(r) for r in records).encode()

    artifacts = {f"art_log_{i:03d}": log() for i in range(300)}
    for item in artifacts.items():  # one at a time: many segments, merged as they grow
        g.protect(*item)
    assert g.stats()["segments"] > 1
    for artifact_id in ("art_log_007", "art_log_150", "art_log_299"):
        data = artifacts[artifact_id]
        start = rng.randrange(0, len(data) - 400)
        excerpt = data[start : start + 300].decode()
        findings = g.scan({"messages": [{"role": "tool", "tool_call_id": "c", "content": "<<" + excerpt + ">>"}]})
        planted = [f for f in findings if f.artifact_id == artifact_id]
        assert len(planted) == 1, findings
        assert 300 <= planted[0].matched <= 300 + SLACK
        if not long_boilerplate:  # shared runs under min_match are explained by the long match
            assert len(findings) == 1, findings
        # (with long boilerplate the others really hold 70+ bytes of the excerpt verbatim: their own findings)
    if long_boilerplate:  # boilerplate of min_match bytes or more, held 45,000 times: found, named after some
        boilerplate = ', "kind": "event", "source": "collector-eu-west-1", "ok": true, "payload": "'
        assert len(boilerplate) >= MIN
        findings = g.scan("x" + boilerplate + "y")
        assert findings
        assert all(f.artifact_id in artifacts for f in findings)


def test_protect_one_at_a_time_then_find_each() -> None:
    rng = random.Random(19)
    g = LeakGuard()
    artifacts = {f"art_{i:04d}": rng.randbytes(rng.randrange(100, 3000)) for i in range(600)}
    for item in artifacts.items():
        g.protect(*item)
    for artifact_id, data in artifacts.items():
        start = rng.randrange(0, len(data) - MIN + 1)
        findings = g.scan({"input": [{"type": "input_file", "file_data": b64(data[start : start + MIN])}]})
        assert [f.artifact_id for f in findings] == [artifact_id], (artifact_id, findings)
