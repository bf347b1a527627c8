"""An upstream MCP server whose tools put binary where no typed part says so, for the gateway's security tests.

Run as a script, with the official MCP Python SDK's ``MCPServer``, over stdio or streamable HTTP::

    python tests/security/base64_upstream.py [--memo PATH]
    python tests/security/base64_upstream.py --http PORT [--memo PATH]   # http://127.0.0.1:PORT/mcp

(tests start it once per module with :func:`serving`); ``--memo`` names the file
the ``file:///memo.txt`` resource reads.

Each tool returns one shape: a base64 PNG in ``structuredContent``, a ``data:`` URL
in a text block, an embedded blob resource, a file's text as an embedded text
resource (or a text block, or a blob), a 30 KB image inside a long text, and
ordinary text full of short base64-looking tokens, digests and ids. The
payloads are deterministic (:func:`png`), so a test can compare what the vault
stored with what the server sent.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import (
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    TextContent,
    TextResourceContents,
)

SERVER_NAME = "base64-upstream"


def png(width: int = 24, height: int = 16, seed: str = "chart") -> bytes:
    """A valid RGB PNG of noisy pixels (barely compressible: about ``3 * width * height`` bytes)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    noise = hashlib.shake_256(seed.encode()).digest(3 * width * height)
    rows = b"".join(b"\x00" + noise[3 * width * y : 3 * width * (y + 1)] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def big_png() -> bytes:
    """A PNG of about 30 KB."""
    return png(100, 100, seed="big")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def report_lines(lines: int) -> str:
    return "\n".join(f"row {i:04d}: latency p50=12ms p99=85ms, errors=0, region=eu-west-1" for i in range(lines))


def ordinary_text() -> str:
    """Text a tool may well return that holds no encoded binary: every token here must reach the client as is."""
    digest = hashlib.sha256(b"release-1.2.3").digest()
    big_digest = hashlib.sha512(b"release-1.2.3").digest()
    jwt = ".".join(
        base64.urlsafe_b64encode(part).decode().rstrip("=")
        for part in (
            json.dumps({"alg": "HS256", "typ": "JWT"}).encode(),
            json.dumps({"sub": "user-42", "scope": "read:reports write:reports", "exp": 1893456000}).encode(),
            hashlib.sha256(b"signature").digest(),
        )
    )
    config = b64(
        json.dumps(
            {"database": {"host": "db.internal", "port": 5432, "user": "reports"}}
            | {"feature_flags": {f"flag_{i}": i % 2 == 0 for i in range(8)}}
        ).encode()
    )
    lines = [
        "Build 1.2.3 finished.",
        "token: dGVzdA== and aGVsbG8gd29ybGQ= (short base64 words stay)",
        f"sha256 (hex): {digest.hex()}",
        f"sha512 (hex): {big_digest.hex()}",
        f"sha256 (base64): {b64(digest)}",
        f"sha512 (base64): {b64(big_digest)}",
        "artifact: art_0123456789abcdefghijklmnop, request: 3f2b8c9e-1d4a-4f6b-9c2e-7a8b9c0d1e2f",
        f"session token: {jwt}",
        "path: /srv/data/customers/europe/invoices/2024/quarter3/archive/backup/snapshots/daily/final/v2/report",
        f"config (base64 of JSON text): {config}",
        "data:text/plain,hello (a data: URL without base64)",
        f"hex dump: {hashlib.shake_256(b'dump').hexdigest(200)}",
    ]
    return "\n".join(lines)


def build_server(memo: Path | None = None) -> MCPServer:
    server = MCPServer(SERVER_NAME, instructions="Binary in unusual places.", log_level="WARNING")

    @server.tool()
    def structured_png() -> CallToolResult:
        """A chart as base64 in structuredContent (no image block)."""
        return CallToolResult(
            content=[TextContent(type="text", text="The chart is in the structured result.")],
            structured_content={"title": "q3", "chart": {"mimeType": "image/png", "base64": b64(png())}},
        )

    @server.tool()
    def data_url_text() -> CallToolResult:
        """A chart as a data: URL inside a text block."""
        text = f"Here is the chart: ![chart](data:image/png;base64,{b64(png())}) rendered at 12:00."
        return CallToolResult(content=[TextContent(type="text", text=text)])

    @server.tool()
    def embedded_blob() -> CallToolResult:
        """A chart as an embedded blob resource."""
        contents = BlobResourceContents(uri="file:///charts/q3.png", mime_type="image/png", blob=b64(png()))
        return CallToolResult(content=[EmbeddedResource(type="resource", resource=contents)])

    @server.tool()
    def read_file(path: str, shape: str = "resource") -> CallToolResult:
        """A file's text as an embedded text resource, a text block, structured content or an embedded blob."""
        text = Path(path).read_text(encoding="utf-8")
        uri = Path(path).as_uri()
        if shape == "text":
            return CallToolResult(content=[TextContent(type="text", text=text)])
        if shape == "structured":
            return CallToolResult(
                content=[TextContent(type="text", text="see structured")],
                structured_content={"file": {"path": path, "text": text}},
            )
        if shape == "blob":
            contents = BlobResourceContents(uri=uri, mime_type="text/plain", blob=b64(text.encode()))
            return CallToolResult(content=[EmbeddedResource(type="resource", resource=contents)])
        resource = TextResourceContents(uri=uri, mime_type="text/plain", text=text)
        return CallToolResult(content=[EmbeddedResource(type="resource", resource=resource)])

    @server.tool()
    def big_image_report(lines: int = 400) -> CallToolResult:
        """A report beginning with a 30 KB image as a data: URL, then many lines of text."""
        text = f"data:image/png;base64,{b64(big_png())}\n{report_lines(lines)}"
        return CallToolResult(content=[TextContent(type="text", text=text)])

    @server.tool()
    def ordinary() -> CallToolResult:
        """Ordinary text with short base64-looking tokens, digests and ids, also as structured content."""
        text = ordinary_text()
        return CallToolResult(
            content=[TextContent(type="text", text=text)], structured_content={"lines": text.split("\n")}
        )

    @server.resource("file:///memo.txt", mime_type="text/plain")
    def memo_resource() -> str:
        return memo.read_text(encoding="utf-8") if memo is not None else "no memo"

    return server


@contextmanager
def serving(memo: Path | None = None) -> Iterator[str]:
    """This server in a subprocess, over streamable HTTP on a free loopback port; yields its URL."""
    from tests.integrations.test_mcp_gateway import stop, wait_for_port
    from tests.servers import free_port

    port = free_port()
    command = [sys.executable, __file__, "--http", str(port), *(["--memo", str(memo)] if memo is not None else [])]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
    parser.add_argument("--memo", type=Path, help="the file the file:///memo.txt resource reads")
    args = parser.parse_args()
    server = build_server(args.memo)
    if args.http is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)


if __name__ == "__main__":
    main()
