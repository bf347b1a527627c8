"""Materialisation benchmarks (issue 5): binary tool content into the vault, and the MCP proxy's round trip.

Run with ``.venv/bin/python bench/materialize.py``; ``--quick`` does fewer repetitions.

Every figure is printed beside a baseline measured in the same run, on the same
disk, with the same bytes. Repetitions interleave ours and the baseline (the
order rotates every repetition, after one discarded warm-up round); the table
shows medians, and the ratio is the median of the per-repetition ratios (with
its min..max spread). Absolute times on a shared machine are noise: the ratios
are the result.

Benchmarks:

1. A tool result (wire-form dict) carrying 10 images of 1 MiB each (random bytes
   behind a PNG header): ``await materialize(...)`` on an embedded store (a fresh
   ``tool_call_id`` and fresh bytes every repetition, so nothing deduplicates;
   sealed, the default) vs the raw ceiling on the same bytes: base64-decode each
   part, write it to a new file, ``fsync`` each file, then ``fsync`` the directory
   once. Target: materialise <= 1.3x the raw time.
   1a/1b (info): the same parts stored by plain sequential ``vault.put`` calls (after the
   same strict decode), to separate what ``materialize`` adds from what a durable put costs.
2. Proxy round-trip overhead: an MCP client (the official SDK's ``Client``) calling a
   tool of the example upstream server (``examples/mcp_upstream.py``) through
   ``refvault mcp proxy`` vs calling the same upstream tool directly, both over stdio.
   Both sessions are opened once (process start and handshake are not timed) and
   stay open; each sample is the mean of a run of sequential ``tools/call`` round
   trips on one session. 2: a small text result (``echo``), passed through
   untouched (target <= 3x: the proxy is a second stdio hop, so twice the direct
   time is the floor). 2a (info): the upstream's PNG image (``image``), which the
   proxy materialises (one durable put per call) and replaces by a ``refvault://``
   link; no target, as that put is an fsync whose cost is the disk's, not the
   proxy's. 2b (info): through the proxy, the image vs the text, i.e. what the
   materialisation adds on top of forwarding. The table is followed by the
   milliseconds the proxy adds per call (median of the per-repetition differences).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import importlib.metadata
import os
import runpy
import secrets
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anyio.from_thread import start_blocking_portal
from harness import (
    SCOPE,
    Measure,
    MiB,
    Row,
    command_line,
    drop,
    fmt,
    fsync_write,
    interleave,
    load_average,
    machine,
    make_parser,
    missed,
    print_columns,
    print_table,
    timed,
    total_time,
    work_dir,
)
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult, ImageContent, ResourceLink, TextContent

from refvault import Vault
from refvault.content import Limits, materialize

PNG_HEADER = b"\x89PNG\r\n\x1a\n"
UPSTREAM = Path(__file__).resolve().parents[1] / "examples" / "mcp_upstream.py"
MESSAGE = "hello through the gateway"  # the small text result of row 2


@dataclass
class Config:
    reps: int  # repetitions of row 1
    latency_reps: int  # repetitions of row 2
    calls: int  # tools/call round trips per sample of row 2
    parts: int = 10
    size: int = MiB


# -- 1. materialise vs raw decode + durable write ------------------------------------------------------------------


def image_result(parts: int, size: int) -> tuple[dict[str, Any], list[str]]:
    """A wire-form tool result with ``parts`` PNG-headed images of ``size`` bytes each, and their base64."""
    encoded = [base64.b64encode(PNG_HEADER + os.urandom(size - len(PNG_HEADER))).decode("ascii") for _ in range(parts)]
    blocks = [{"type": "image", "data": data, "mimeType": "image/png"} for data in encoded]
    return {"content": [{"type": "text", "text": "here are the screenshots"}, *blocks], "isError": False}, encoded


class RawDir:
    """The baseline: decode each part and write it durably as a plain file, nothing else on top."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def write_parts(self, encoded: Sequence[str]) -> None:
        """base64-decode, write + fsync each file, then fsync the directory."""
        for data in encoded:
            fsync_write(secrets.token_hex(16), base64.b64decode(data, validate=True), dir_fd=self.fd)
        os.fsync(self.fd)

    def clear(self) -> None:
        for entry in os.scandir(self.root):
            os.unlink(entry.path)

    def close(self) -> None:
        os.close(self.fd)


def bench_materialize(cfg: Config, work: Path) -> list[Row]:
    raw = RawDir(work / "raw")
    loop = asyncio.new_event_loop()
    current: dict[int, tuple[dict[str, Any], list[str]]] = {}

    def data_for(rep: int) -> tuple[dict[str, Any], list[str]]:  # the same bytes for all sides, fresh every rep
        if rep not in current:
            current.clear()
            current[rep] = image_result(cfg.parts, cfg.size)
        return current[rep]

    with Vault.open(work / "store") as vault:

        def ours(rep: int) -> float:
            result, _ = data_for(rep)
            call = f"call-{rep}-{secrets.token_hex(8)}"
            began = time.perf_counter()
            projected = loop.run_until_complete(
                materialize(
                    vault, SCOPE, result, provenance="mcp:bench/screenshots", tool_call_id=call, limits=Limits()
                )
            )
            elapsed = time.perf_counter() - began
            if sum(block["type"] == "resource_link" for block in projected["content"]) != cfg.parts:
                raise AssertionError("materialize did not store every part")
            drop(vault)  # also makes the next contender's identical bytes a fresh blob
            return elapsed * 1000

        def put_each(encoded: Sequence[str]) -> None:
            for data in encoded:
                vault.put(SCOPE, binascii.a2b_base64(data, strict_mode=True), media_type="image/png")

        def puts(rep: int) -> float:
            _, encoded = data_for(rep)
            elapsed = timed(lambda: put_each(encoded))
            drop(vault)
            return elapsed * 1000

        def base(rep: int) -> float:
            _, encoded = data_for(rep)
            elapsed = timed(lambda: raw.write_parts(encoded))
            raw.clear()
            return elapsed * 1000

        mine, floor, theirs = interleave(cfg.reps, [ours, puts, base], warmup=True)
    loop.close()
    raw.close()
    label = f"{cfg.parts} x {cfg.size // MiB} MiB images, one result"
    raw_name = "b64decode+write+fsync"
    return [
        Row("1", label, "ms", "materialize", mine, raw_name, theirs, kind="slowdown", target=1.3),
        Row("1a", label, "ms", "decode+sequential put", floor, raw_name, theirs, kind="slowdown"),
        Row("1b", label, "ms", "materialize", mine, "decode+sequential put", floor, kind="slowdown"),
    ]


# -- 2. proxy round-trip overhead ----------------------------------------------------------------------------------


def stdio_client(command: str, *args: str) -> Client:
    """An SDK client that starts ``command args...`` as its stdio server (no response cache)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("REFVAULT_")}
    return Client(StdioServerParameters(command=command, args=list(args), env=env), cache=None)


def refvault_script() -> str:
    """The ``refvault`` console script of this interpreter's environment (the venv's)."""
    script = Path(sys.executable).with_name("refvault")
    if not script.exists():
        raise SystemExit(f"error: {script} not found: install refvault (with the mcp extra) into this environment")
    return str(script)


async def round_trips(client: Client, tool: str, args: dict[str, Any], calls: int, ok: Callable[..., bool]) -> float:
    """Milliseconds per call: the mean of ``calls`` sequential ``tools/call`` round trips; every result is checked."""
    results: list[CallToolResult] = []
    began = time.perf_counter()
    for _ in range(calls):
        results.append(await client.call_tool(tool, args))
    elapsed = time.perf_counter() - began
    for result in results:
        if result.is_error or len(result.content) != 1 or not ok(result.content[0]):
            raise AssertionError(f"unexpected result of {tool}: {result.model_dump_json(by_alias=True)[:300]}")
    return elapsed * 1000 / calls


def bench_proxy_round_trip(cfg: Config, work: Path) -> list[Row]:
    png = runpy.run_path(str(UPSTREAM))["png_bytes"]()  # the image the upstream sends (deterministic bytes)
    encoded = base64.b64encode(png).decode("ascii")
    upstream = (sys.executable, str(UPSTREAM))
    scope = ("--tenant", SCOPE.tenant, "--user", SCOPE.user, "--session", SCOPE.session)
    proxy = ("mcp", "proxy", "--store", str(work / "proxy-store"), *scope, "--", *upstream)

    def text(block: Any) -> bool:
        return isinstance(block, TextContent) and block.text == MESSAGE

    def image(block: Any) -> bool:
        return isinstance(block, ImageContent) and block.data == encoded

    def link(block: Any) -> bool:  # what the proxy makes of the image: a reference, no bytes
        return isinstance(block, ResourceLink) and block.uri.startswith("refvault://") and block.size == len(png)

    echo = ("echo", {"message": MESSAGE})
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(stdio_client(*upstream)) as direct,
        portal.wrap_async_context_manager(stdio_client(refvault_script(), *proxy)) as proxied,
    ):

        def contender(client: Client, tool: str, args: dict[str, Any], ok: Callable[..., bool]) -> Measure:
            return lambda _rep: portal.call(round_trips, client, tool, args, cfg.calls, ok)

        text_via, text_direct, image_via, image_direct = interleave(
            cfg.latency_reps,
            [
                contender(proxied, *echo, text),
                contender(direct, *echo, text),
                contender(proxied, "image", {}, link),
                contender(direct, "image", {}, image),
            ],
            warmup=True,
        )
    via = "via proxy"
    png_label = f"tools/call, {len(png)} B PNG image result"
    return [
        Row(
            "2", f"tools/call, {len(MESSAGE)}-char text result", "ms", via, text_via, "direct", text_direct,
            kind="slowdown", target=3.0,
        ),
        Row("2a", png_label, "ms", via, image_via, "direct", image_direct, kind="slowdown"),
        Row("2b", "via proxy, image vs text result", "ms", "image", image_via, "text", text_via, kind="slowdown"),
    ]  # fmt: skip


def print_added(rows: Sequence[Row]) -> None:
    """What the proxy adds per call: the median of the per-repetition differences (ours - baseline)."""
    body = []
    for row in rows:
        added = [o - b for o, b in zip(row.ours, row.base, strict=True)]
        median = statistics.median(added)
        span = f"{fmt(min(added))}..{fmt(max(added))}"
        body.append((row.number, row.label, f"{'+' if median >= 0 else ''}{fmt(median)} {row.unit}", span))
    print_columns(("#", "added per call", "added (median)", "min..max"), body, right={2, 3})


# -- main ----------------------------------------------------------------------------------------------------------


STEPS: list[Callable[[Config, Path], list[Row]]] = [bench_materialize, bench_proxy_round_trip]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = make_parser(
        __doc__, quick="fewer repetitions and round trips", reps="repetitions of 1 (default 9, quick 3); 2 takes more"
    )
    parser.add_argument(
        "--calls", type=int, default=None, help="tools/call round trips per sample of 2 (default 20, quick 10)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    reps = max(1, args.reps) if args.reps is not None else 3 if args.quick else 9
    calls = max(1, args.calls) if args.calls is not None else 10 if args.quick else 20
    cfg = Config(reps=reps, latency_reps=max(reps, 9 if args.quick else 15), calls=calls)
    with work_dir("materialize", args.keep) as work:
        print(f"refvault materialise benchmark: `{command_line('materialize.py', argv)}`")
        print(machine(f"mcp {importlib.metadata.version('mcp')}"))
        print(f"disk: {work}")
        print(
            f"method: {cfg.reps} interleaved repetitions for 1, {cfg.latency_reps} for 2 (order rotates, one warm-up "
            f"round discarded); a sample of 2 is the mean of {cfg.calls} sequential tools/call round trips on sessions "
            "opened once; medians shown; ratio = median of per-repetition ratios (ours / baseline, latency: lower "
            "is better)"
        )
        print(f"load average at start: {load_average()}", flush=True)
        print(flush=True)
        began = time.perf_counter()
        rows: list[Row] = []
        for step in STEPS:
            print(f"running {step.__name__} ...", file=sys.stderr, flush=True)
            rows.extend(step(cfg, work))
        print_table(rows)
        print()
        print_added([row for row in rows if row.number.startswith("2")])
        print()
        print("notes: 1 materialize = strict base64 preflight of every part, sniffing, one durable put per part")
        print("         (temp write + fsync + rename + directory fsync + catalog commit) and the projection;")
        print("         baseline = base64-decode + write + fsync of each file + one directory fsync, no catalog.")
        print("       1a the floor materialize builds on: strict decode + one vault.put per part, in content order")
        print("         (each put: temp write + fsync, catalog commit, rename + directory fsync); info only.")
        print("       1b what materialize adds to that floor (preflight, sniffing, projection, asyncio); info only.")
        print("       2 client -> `refvault mcp proxy` (stdio) -> examples/mcp_upstream.py (stdio) vs client ->")
        print("         examples/mcp_upstream.py (stdio); the same SDK Client, one session each, kept open.")
        print("         The proxy is a second JSON-RPC hop (its own parse, validation and re-serialisation), so")
        print("         twice the direct time is its floor: target <= 3x.")
        print("       2a the proxy stores the image (sealed, a fresh tool_call_id per call: one durable put, which")
        print("         for so few bytes is one catalog commit with the bytes inline, no blob file) and returns a")
        print("         refvault:// resource_link; info only (that commit's fsync costs what the disk makes it cost,")
        print("         so a ratio target would judge the disk more than the proxy).")
        print("       2b through the proxy: what materialising the image adds over forwarding text; info only.")
        print(total_time(began))
    return 1 if args.strict and missed(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
