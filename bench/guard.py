"""Leak-guard benchmark: index build, index size, scan throughput and recall, beside two baselines.

Run with ``.venv/bin/python bench/guard.py`` (256 MiB protected across 10,000 artifacts);
``--quick`` protects 32 MiB across 1,250 artifacts and scans fewer requests.

Everything is generated deterministically (fixed seeds): the protected artifacts are
three quarters word-salad prose and one quarter JSON Lines records, from one
vocabulary; the outgoing requests are OpenAI chat-completions bodies (system, user,
assistant tool calls with JSON arguments, tool results, images as data URLs) of about
10 KB, 100 KB and 1 MB, written from another vocabulary, with excerpts of protected
artifacts planted in them: lengths ``min_match`` (64) or 65..1024 bytes, at random
offsets, in user text, assistant text, tool results, tool-call arguments (JSON-escaped),
base64 inside a tool result, or the payload of a data URL.

1. Kernels: the numba compile cost of a cold cache (a subprocess with an empty
   ``NUMBA_CACHE_DIR``) and the load cost of a warm one.
2. Build: ``protect()`` once per artifact and ``protect_many()`` over all of them,
   interleaved (MB/s of protected bytes); index bytes per protected byte.
3. Scan: ``guard.scan(request)`` per request size (MB/s of the JSON body; recall = planted
   excerpts reported at their site with their artifact id), interleaved with the size-only
   check (the peer's method: tool text, tool-call arguments and data URLs at or over 128 KiB)
   on the same requests, and the same scan with a 1 MiB protected set (independence of the
   protected size).
   Every scan is of new text: the piece arm's per-message cache is dropped before each request.
3b. Transforms and pieces: recall of 200-byte excerpts upper-cased, with ``_`` for spaces, a zero-width
   character every 10, full-width, hex, base64 of base64 or percent-encoded; passages sent 20 bytes per
   request through ``check()`` (newest artifacts, within the piece budget, and older ones); and a run of
   requests that each re-send their history, through ``check()``.
4. Whole-artifact ``in``: ``artifact in body`` for every artifact, timed on as many artifacts
   as fit in a few seconds per request and extrapolated to all of them; and, for context, the
   exact naive check (every 64-byte window of the body ``in`` the protected bytes), timed on a
   few windows and extrapolated (its recall is not measured).

Targets: build >= 50 MB/s, scan >= 50 MB/s, index <= 1 byte per protected byte, recall 1.0.
"""

from __future__ import annotations

import argparse
import base64
import gc
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
from harness import interleave, load_average, work_dir

from refvault.errors import ContextLeak
from refvault.guard import LeakGuard
from refvault.guard import fingerprints as fp
from refvault.guard import warm as warming
from refvault.guard.requests import Leaf, walk

MiB = 1 << 20
SEED = 20261130
MIN_MATCH = 64
SIZE_THRESHOLD = 128 * 1024
SITE_KINDS = ("user", "assistant", "tool", "arguments", "tool_base64", "data_url")


# -- generated data --------------------------------------------------------------------------------------------------


class Vocabulary:
    """Random lowercase words (some capitalised or with punctuation), drawn with a skewed frequency."""

    def __init__(self, seed: int, size: int = 8192) -> None:
        rng = np.random.default_rng(seed)
        words: list[bytes] = []
        for i in range(size):
            word = bytes(rng.integers(97, 123, int(rng.integers(1, 11)), dtype=np.uint8))
            if i % 11 == 0:
                word = word.capitalize()
            if i % 7 == 0:
                word += b"," if i % 2 else b"."
            words.append(word + b" ")
        self.flat = np.frombuffer(b"".join(words), np.uint8)
        lengths = np.array([len(w) for w in words], np.int64)
        self.lengths = lengths
        self.starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])

    def text(self, rng: np.random.Generator, n_bytes: int) -> bytes:
        out: list[bytes] = []
        need = n_bytes
        while need > 0:
            count = max(16, min(need // 5 + 16, 4 * MiB))
            ids = (rng.random(count) ** 2.5 * self.lengths.size).astype(np.int64)
            lens = self.lengths[ids]
            ends = np.cumsum(lens)
            index = np.arange(int(ends[-1]), dtype=np.int64) + np.repeat(self.starts[ids] - (ends - lens), lens)
            chunk = self.flat[index].tobytes()
            out.append(chunk[:need])
            need -= len(out[-1])
        return b"".join(out)


def protected_set(total: int, count: int) -> list[tuple[str, bytes]]:
    """``count`` artifacts of ``total`` bytes in all: prose, and every fourth one JSON Lines."""
    rng = np.random.default_rng(SEED)
    vocab = Vocabulary(SEED)
    sizes = rng.lognormal(0.0, 1.0, count)
    sizes = np.maximum(256, (sizes / sizes.sum() * total).astype(np.int64))
    sizes[-1] += total - int(sizes.sum())
    prose = vocab.text(rng, total)
    out: list[tuple[str, bytes]] = []
    offset = 0
    for i, size in enumerate(sizes.tolist()):
        data = json_lines(rng, prose[offset : offset + size], size) if i % 4 == 3 else prose[offset : offset + size]
        offset += size
        out.append((f"art_{i:05d}", data))
    return out


def json_lines(rng: np.random.Generator, prose: bytes, size: int) -> bytes:
    lines: list[bytes] = []
    used = 0
    i = 0
    while used < size:
        n = int(rng.integers(60, 300))
        line = json.dumps(
            {
                "id": i,
                "level": ("info", "warn", "error")[i % 3],
                "code": 200 + i % 7,
                "msg": prose[used : used + n].decode(),
            },
            separators=(",", ":"),
        ).encode()
        lines.append(line)
        used += n
        i += 1
    return b"\n".join(lines)[:size]


@dataclass
class Planted:
    site: str
    artifact_id: str
    length: int


@dataclass
class Request:
    body: dict[str, Any]
    size: int  # bytes of the JSON body
    planted: list[Planted]


def make_requests(
    artifacts: Sequence[tuple[str, bytes]], target: int, count: int, seed: int, *, plant: bool = True
) -> list[Request]:
    rng = np.random.default_rng(seed)
    vocab = Vocabulary(seed + 1)  # unrelated to the protected vocabulary
    out = []
    for _ in range(count):
        out.append(_request(rng, vocab, artifacts, target, plant))
    return out


def _excerpt(rng: np.random.Generator, artifacts: Sequence[tuple[str, bytes]]) -> tuple[str, bytes]:
    while True:
        artifact_id, data = artifacts[int(rng.integers(len(artifacts)))]
        length = MIN_MATCH if rng.random() < 0.3 else int(rng.integers(MIN_MATCH + 1, 1025))
        if len(data) >= length:
            offset = int(rng.integers(0, len(data) - length + 1))
            return artifact_id, data[offset : offset + length]


def _insert(rng: np.random.Generator, text: str, piece: str) -> str:
    at = int(rng.integers(0, len(text) + 1))
    return text[:at] + piece + text[at:]


def _request(
    rng: np.random.Generator, vocab: Vocabulary, artifacts: Sequence[tuple[str, bytes]], target: int, plant: bool
) -> Request:
    turns = max(1, target // 6000)
    per_turn = target // turns
    messages: list[dict[str, Any]] = [{"role": "system", "content": vocab.text(rng, min(2000, target // 10)).decode()}]
    for t in range(turns):
        call_id = f"call_{t}"
        messages.append({"role": "user", "content": vocab.text(rng, per_turn // 5).decode()})
        args = {"query": vocab.text(rng, per_turn // 10).decode(), "limit": 10, "notes": "line one\nline two"}
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": "search", "arguments": json.dumps(args)}}
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": vocab.text(rng, per_turn // 2).decode()})
        messages.append({"role": "assistant", "content": vocab.text(rng, per_turn // 8).decode()})
    picture = base64.b64encode(rng.integers(0, 256, 1500, dtype=np.uint8).tobytes()).decode()
    messages.append(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is in this picture?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64," + picture}},
            ],
        }
    )
    planted: list[Planted] = []
    used: set[int] = set()  # one excerpt per leaf: a later one never splits an earlier one
    if plant:
        for _ in range(max(2, target // 50_000)):
            planted.append(_plant(rng, messages, artifacts, used))
    body = {"model": "gpt-4.1", "messages": messages}
    return Request(body, len(json.dumps(body).encode()), planted)


def _plant(
    rng: np.random.Generator,
    messages: list[dict[str, Any]],
    artifacts: Sequence[tuple[str, bytes]],
    used: set[int],
) -> Planted:
    artifact_id, piece = _excerpt(rng, artifacts)
    text = piece.decode()
    roles = {"user": "user", "assistant": "assistant", "tool": "tool", "tool_base64": "tool"}
    while True:
        kind = SITE_KINDS[int(rng.integers(len(SITE_KINDS)))]
        if kind in roles:
            candidates = [
                i
                for i, m in enumerate(messages)
                if m["role"] == roles[kind] and isinstance(m.get("content"), str) and i > 0 and i not in used
            ]
        elif kind == "arguments":
            candidates = [i for i, m in enumerate(messages) if m.get("tool_calls") and i not in used]
        else:
            break
        if candidates:
            break
    if kind in roles:
        i = candidates[int(rng.integers(len(candidates)))]
        used.add(i)
        if kind == "tool_base64":
            text = "attachment: " + base64.b64encode(rng.bytes(int(rng.integers(0, 3))) + piece).decode() + " (end)"
        messages[i]["content"] = _insert(rng, messages[i]["content"], " " + text + " ")
        return Planted(f"messages[{i}].content", artifact_id, len(piece))
    if kind == "arguments":
        i = candidates[int(rng.integers(len(candidates)))]
        used.add(i)
        function = messages[i]["tool_calls"][0]["function"]
        args = json.loads(function["arguments"])
        args["query"] = _insert(rng, args["query"], text)
        function["arguments"] = json.dumps(args)
        return Planted(f"messages[{i}].tool_calls[0].function.arguments", artifact_id, len(piece))
    payload = rng.bytes(int(rng.integers(0, 400))) + piece + rng.bytes(int(rng.integers(0, 400)))
    messages.append(
        {
            "role": "user",
            "content": [
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64," + base64.b64encode(payload).decode()},
                }
            ],
        }
    )
    return Planted(f"messages[{len(messages) - 1}].content[0].image_url.url", artifact_id, len(piece))


# -- measuring -------------------------------------------------------------------------------------------------------


def size_only(body: object, threshold: int = SIZE_THRESHOLD) -> list[str]:
    """The peer's method: sites of tool text, tool-call arguments and data payloads at or over the threshold."""
    flagged: list[str] = []

    def visit(leaf: Leaf) -> None:
        if leaf.size is not None and leaf.size >= threshold:
            flagged.append(leaf.site)

    walk(body, visit)
    return flagged


def recall_of(guard: LeakGuard, requests: Sequence[Request]) -> tuple[int, int, int]:
    """(planted excerpts with a content finding at their site, ... naming their artifact, planted excerpts)."""
    caught = named = total = 0
    for request in requests:
        findings = [f for f in guard.scan(request.body) if f.arm == "content"]
        sites = {f.site for f in findings}
        pairs = {(f.site, f.artifact_id) for f in findings}
        for p in request.planted:
            total += 1
            caught += p.site in sites
            named += (p.site, p.artifact_id) in pairs
    return caught, named, total


TRANSFORMS: dict[str, Any] = {
    "upper-cased": str.upper,
    "spaces to _": lambda t: t.replace(" ", "_"),
    "zero-width every 10": lambda t: "".join(c + ("\u200b" if i % 10 == 9 else "") for i, c in enumerate(t)),
    "full-width": lambda t: "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in t),
    "hex": lambda t: t.encode().hex(),
    "base64 of base64": lambda t: base64.b64encode(base64.b64encode(t.encode())).decode(),
    "percent-encoded": lambda t: "".join(f"%{b:02X}" for b in t.encode()),
}


def transforms_and_pieces(
    guard: LeakGuard, artifacts: Sequence[tuple[str, bytes]], *, quick: bool, missed: list[str]
) -> None:
    """Recall through trivial transforms, pieces over a run, and a multi-turn run's check() throughput."""
    logging.getLogger("refvault.guard").setLevel(logging.ERROR)  # the stops below are expected
    rng = np.random.default_rng(SEED + 5)
    prose = [(a, d) for i, (a, d) in enumerate(artifacts) if i % 4 != 3 and len(d) >= 2000]
    carrier = make_requests(artifacts, 10_000, 1, SEED + 7, plant=False)[0].body
    n = 10 if quick else 40
    print("\n3b. trivial transforms (200-byte excerpts of prose artifacts in a 10 KB request's tool result)")
    row = []
    for name, transform in TRANSFORMS.items():
        caught = 0
        for _ in range(n):
            artifact_id, data = prose[int(rng.integers(len(prose)))]
            at = int(rng.integers(0, len(data) - 200))
            body = json.loads(json.dumps(carrier))
            body["messages"].append(
                {"role": "tool", "tool_call_id": "x", "content": transform(data[at : at + 200].decode())}
            )
            guard.new_run()
            caught += any(f.artifact_id == artifact_id for f in guard.scan(body))
        row.append(f"{name} {caught}/{n}")
        if caught != n:
            missed.append(f"transform recall 1.0 ({name})")
    print("   recall: " + ", ".join(row))
    # The piece arm covers the most recently protected piece_budget bytes: the last artifacts protected.
    recent, size = 0, 0
    while recent < len(artifacts) and size + len(artifacts[-1 - recent][1]) <= guard.piece_budget:
        size += len(artifacts[-1 - recent][1])
        recent += 1
    newest = {a for a, _ in artifacts[len(artifacts) - recent :]}
    for within, pool in (
        (True, [p for p in prose if p[0] in newest]),
        (False, [p for p in prose if p[0] not in newest]),
    ):
        stops: list[int] = []  # the request that was stopped (1-based); 0: none of 12
        for _ in range(n):
            artifact_id, data = pool[int(rng.integers(len(pool)))]
            at = int(rng.integers(0, len(data) - 300))
            guard.new_run()
            stops.append(0)
            for i in range(12):
                piece = data[at + 20 * i : at + 20 * (i + 1)].decode()
                request = {"messages": [{"role": "tool", "tool_call_id": f"c{i}", "content": f"part {i}: {piece}"}]}
                try:
                    guard.check(request)
                except ContextLeak:
                    stops[-1] = i + 1
                    break
        label = "the newest protected (within the piece budget)" if within else "older ones (beyond the budget)"
        by6 = sum(1 <= s <= 6 for s in stops)
        by12 = sum(s >= 1 for s in stops)
        print(
            f"   a passage of {label}, 20 bytes per request: stopped by the 6th request {by6}/{n}, "
            f"by the 12th {by12}/{n}"
        )
    vocab = Vocabulary(SEED + 11)
    turns: list[dict[str, Any]] = []
    requests = []
    for t in range(20 if quick else 40):
        turns.append({"role": "user", "content": vocab.text(rng, 500).decode()})
        turns.append({"role": "tool", "tool_call_id": f"c{t}", "content": vocab.text(rng, 4000).decode()})
        turns.append({"role": "assistant", "content": vocab.text(rng, 800).decode()})
        requests.append({"model": "m", "messages": [{"role": "system", "content": "be brief"}, *turns]})
    size = sum(len(json.dumps(r).encode()) for r in requests)
    guard.new_run()
    t0 = time.perf_counter()
    for r in requests:
        guard.check(r)
    rate = size / (time.perf_counter() - t0) / 1e6
    print(
        f"   a run of {len(requests)} requests, each its whole history plus one turn ({size / MiB:.1f} MiB of bodies), "
        f"through check(): {rate:.1f} MB/s, no finding"
    )
    guard.new_run()


def kernel_cost(keep: bool) -> tuple[float, float]:
    """Seconds to compile the kernels into an empty cache, then to load them from it (fresh processes)."""
    code = "from refvault.guard.warm import warm; print(warm().seconds)"
    with work_dir("guard-numba", keep) as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
        cold = float(
            subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout
        )
        warm = float(
            subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout
        )
    return cold, warm


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="32 MiB across 1,250 artifacts, fewer requests")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 3, quick 2)")
    parser.add_argument("--keep", action="store_true", help="keep the working directory under bench/.work/")
    parser.add_argument("--strict", action="store_true", help="exit with status 1 if a target is missed")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    reps = args.reps or (2 if args.quick else 3)
    total, count = (32 * MiB, 1250) if args.quick else (256 * MiB, 10_000)
    print(f"bench/guard.py {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip())
    print(
        f"machine: {os.cpu_count()} cores, {platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__}; "
        f"load average at start: {load_average()}"
    )
    params = fp.Params.for_min_match(MIN_MATCH)
    print(f"min_match {MIN_MATCH}: k = {params.k}, w = {params.w}, guarantee threshold w + k - 1 = {params.threshold}")
    missed: list[str] = []

    cold, warm = kernel_cost(args.keep)
    first = warming.warm().seconds
    print(
        f"\n1. kernels: compile into an empty cache {cold:.2f} s; load from the cache {warm:.2f} s "
        f"(this process, first call: {first:.2f} s)"
    )

    t0 = time.perf_counter()
    artifacts = protected_set(total, count)
    print(f"\ngenerated {len(artifacts):,} artifacts, {total / MiB:.0f} MiB, in {time.perf_counter() - t0:.1f} s")

    # -- build --
    guards: dict[str, LeakGuard] = {}

    def build_each(_: int) -> float:
        guards.pop("each", None)
        gc.collect()
        guard = LeakGuard(MIN_MATCH, SIZE_THRESHOLD)
        t = time.perf_counter()
        for artifact_id, data in artifacts:
            guard.protect(artifact_id, data)
        guard.stats()  # the fingerprints sorted into the index (it sorts them in batches, by the next scan)
        elapsed = time.perf_counter() - t
        guards["each"] = guard
        return total / elapsed / 1e6

    def build_many(_: int) -> float:
        guards.pop("many", None)
        gc.collect()
        guard = LeakGuard(MIN_MATCH, SIZE_THRESHOLD)
        t = time.perf_counter()
        guard.protect_many(artifacts)
        guard.stats()
        elapsed = time.perf_counter() - t
        guards["many"] = guard
        return total / elapsed / 1e6

    each, many = interleave(reps, [build_each, build_many])
    guard = guards["each"]
    guards.pop("many")
    stats = guard.stats()
    per_byte = stats["index_bytes"] / stats["protected_bytes"]
    print("\n2. build (MB/s of protected bytes, median of", reps, "interleaved)")
    print(
        f"   protect() per artifact   {statistics.median(each):7.1f} MB/s  (min..max {min(each):.1f}..{max(each):.1f})"
    )
    print(
        f"   protect_many()           {statistics.median(many):7.1f} MB/s  (min..max {min(many):.1f}..{max(many):.1f})"
    )
    density = stats["fingerprints"] / stats["protected_bytes"]
    print(
        f"   index: {stats['fingerprints']:,} fingerprints ({density:.4f} per byte), {stats['index_bytes'] / MiB:.1f} "
        f"MiB in {stats['segments']} segments = {per_byte:.3f} bytes per protected byte"
    )
    print(
        f"   piece index (the most recent {guard.piece_budget / MiB:.0f} to {2 * guard.piece_budget / MiB:.0f} MiB "
        f"protected): {stats['piece_fingerprints']:,} fingerprints, {stats['piece_index_bytes'] / MiB:.1f} MiB"
    )
    if min(statistics.median(each), statistics.median(many)) < 50:
        missed.append("build >= 50 MB/s")
    if per_byte > 1:
        missed.append("index <= 1 byte per protected byte")

    # -- scan --
    small = LeakGuard(MIN_MATCH, SIZE_THRESHOLD)
    small.protect("art_small", Vocabulary(SEED + 7).text(np.random.default_rng(SEED + 7), MiB))
    classes = [("10 KB", 10_000, 40 if args.quick else 200), ("100 KB", 100_000, 10 if args.quick else 40),
               ("1 MB", 1_000_000, 3 if args.quick else 10)]  # fmt: skip
    print(
        "\n3. scan (MB/s of JSON request body, median of",
        reps,
        "interleaved; recall = planted excerpts caught at their site)",
    )
    print(f"   {'request':>8}  {'refvault scan':>14}  {'recall':>11}  {'size-only':>11}  {'recall':>6}  ", end="")
    print(f"{'1 MiB protected':>15}")
    sample: dict[str, Request] = {}
    attribution: list[str] = []
    for name, target, n in classes:
        requests = make_requests(artifacts, target, n, SEED + target)
        sample[name] = requests[0]
        body_bytes = sum(r.size for r in requests)

        def ours(_: int, requests: list[Request] = requests, body_bytes: int = body_bytes) -> float:
            t = time.perf_counter()
            for r in requests:
                guard.new_run()  # no piece-arm cache from the previous repetition: every request is new text
                guard.scan(r.body)
            return body_bytes / (time.perf_counter() - t) / 1e6

        def peer(_: int, requests: list[Request] = requests, body_bytes: int = body_bytes) -> float:
            t = time.perf_counter()
            for r in requests:
                size_only(r.body)
            return body_bytes / (time.perf_counter() - t) / 1e6

        def independent(_: int, requests: list[Request] = requests, body_bytes: int = body_bytes) -> float:
            t = time.perf_counter()
            for r in requests:
                small.new_run()
                small.scan(r.body)
            return body_bytes / (time.perf_counter() - t) / 1e6

        scan_ours, scan_peer, scan_small = interleave(reps, [ours, peer, independent], warmup=True)
        found, named, planted = recall_of(guard, requests)
        attribution.append(f"{name}: {named}/{planted}")
        peer_found = 0  # the size arm never names an artifact: an excerpt under the threshold passes
        mine = statistics.median(scan_ours)
        peer_rate, small_rate = statistics.median(scan_peer), statistics.median(scan_small)
        print(
            f"   {name:>8}  {mine:9.1f} MB/s  {found:4d}/{planted:<4d} {found / planted:4.2f}  "
            f"{peer_rate:6.0f} MB/s  {peer_found / planted:6.2f}  {small_rate:10.1f} MB/s"
        )
        if mine < 50:
            missed.append(f"scan {name} >= 50 MB/s")
        if found != planted:
            missed.append(f"recall 1.0 at {name}")
    print(
        "   the planted artifact named among the findings: " + ", ".join(attribution) + " (an excerpt made only of"
        " boilerplate held by more than 64 artifacts is named after 64 of them)"
    )
    for name, target, n in (
        ("10 KB", 10_000, 100 if args.quick else 400),
        ("100 KB", 100_000, 20 if args.quick else 100),
    ):
        clean = make_requests(artifacts, target, n, SEED + 99 + target, plant=False)
        body_bytes = sum(r.size for r in clean)
        false_findings = sum(len(guard.scan(r.body)) for r in clean)

        def clean_scan(_: int, clean: list[Request] = clean, body_bytes: int = body_bytes) -> float:
            t = time.perf_counter()
            for r in clean:
                guard.new_run()
                guard.scan(r.body)
            return body_bytes / (time.perf_counter() - t) / 1e6

        (rates,) = interleave(reps, [clean_scan], warmup=True)
        print(
            f"   clean requests (nothing planted), {n} x {name}: {statistics.median(rates):.1f} MB/s, "
            f"{false_findings} findings"
        )

    # -- transforms, pieces, runs --
    transforms_and_pieces(guard, artifacts, quick=args.quick, missed=missed)

    # -- whole-artifact `in` --
    print("\n4. baselines that look at content (timed on part of the work, extrapolated to all of it)")
    protected_concat = b"".join(data for _, data in artifacts)
    for name, request in sample.items():
        body = json.dumps(request.body).encode()
        budget = 1.0 if args.quick else 3.0
        checked = hits = 0
        t = time.perf_counter()
        while checked < len(artifacts) and time.perf_counter() - t < budget:
            hits += artifacts[checked][1] in body
            checked += 1
        per_artifact = (time.perf_counter() - t) / checked
        whole = request.size / (per_artifact * len(artifacts)) / 1e6
        windows = 3 if args.quick else 5
        t = time.perf_counter()
        for i in range(windows):
            start = (i * 7919) % max(1, len(body) - MIN_MATCH)
            _ = body[start : start + MIN_MATCH] in protected_concat
        per_window = (time.perf_counter() - t) / windows
        exact = request.size / (per_window * max(1, len(body) - MIN_MATCH + 1)) / 1e6
        print(
            f"   {name:>8}  `artifact in body`: {whole:8.3f} MB/s ({checked:,} of {len(artifacts):,} artifacts timed), "
            f"recall {hits}/{len(request.planted)} (excerpts are never whole artifacts)"
        )
        print(f"   {'':>8}  every 64-byte window `in` protected bytes: {exact:.2e} MB/s ({windows} windows timed)")

    print(
        "\ntargets: build >= 50 MB/s, scan >= 50 MB/s, index <= 1 B/B, recall 1.0: "
        + ("all met" if not missed else "MISSED " + ", ".join(missed))
    )
    print(f"total time {time.perf_counter() - began:.0f} s; load average at end: {load_average()}")
    return 1 if (missed and args.strict) else 0


if __name__ == "__main__":
    sys.exit(main())
