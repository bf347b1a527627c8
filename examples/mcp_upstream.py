"""A small upstream MCP server for trying (and testing) ``refvault mcp proxy``.

Written with the official MCP Python SDK's ``MCPServer``. Its tools return every
kind of content a tool result can carry, so the gateway's projection can be seen
end to end::

    python examples/mcp_upstream.py                 # serve over stdio
    python examples/mcp_upstream.py --http 8765     # serve streamable HTTP at http://127.0.0.1:8765/mcp

    refvault mcp proxy -- python examples/mcp_upstream.py
    refvault mcp proxy --url http://127.0.0.1:8765/mcp

The payloads are deterministic (``png_bytes()``, ``wav_bytes()``, ...), so a
test can compare what the vault stored with what the server sent.
"""

from __future__ import annotations

import argparse
import base64
import io
import struct
import wave
import zlib

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
)

SERVER_NAME = "example-upstream"
LINK_URI = "https://example.com/reports/q3.csv"
BLOB_URI = "file:///reports/summary.pdf"


def png_bytes(width: int = 4, height: int = 3) -> bytes:
    """A valid RGB PNG of ``width`` x ``height`` pixels (a small gradient)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    rows = b"".join(
        b"\x00" + b"".join(bytes((x * 60 % 256, y * 80 % 256, 128)) for x in range(width)) for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def wav_bytes(frames: int = 800) -> bytes:
    """A mono 8 kHz 16-bit WAV of ``frames`` samples (a sawtooth)."""
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(8000)
        wav.writeframes(b"".join(struct.pack("<h", (i * 512) % 32768 - 16384) for i in range(frames)))
    return out.getvalue()


def pdf_bytes() -> bytes:
    """A tiny (syntactically minimal) PDF document."""
    return b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"


def huge_text(lines: int = 6000) -> str:
    """A text far above the gateway's default offload threshold (about 50,000 tokens)."""
    return "\n".join(f"line {i:05d}: the quick brown fox jumps over the lazy dog" for i in range(lines))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _image() -> ImageContent:
    return ImageContent(type="image", data=_b64(png_bytes()), mime_type="image/png")


def _audio() -> AudioContent:
    return AudioContent(type="audio", data=_b64(wav_bytes()), mime_type="audio/wav")


def _blob() -> EmbeddedResource:
    contents = BlobResourceContents(uri=BLOB_URI, mime_type="application/pdf", blob=_b64(pdf_bytes()))
    return EmbeddedResource(type="resource", resource=contents)


def _link() -> ResourceLink:
    return ResourceLink(type="resource_link", uri=LINK_URI, name="q3.csv", mime_type="text/csv")


def build_server() -> MCPServer:
    server = MCPServer(SERVER_NAME, instructions="An example upstream with binary tool results.", log_level="WARNING")

    @server.tool()
    def image() -> CallToolResult:
        """Return a small PNG image."""
        return CallToolResult(content=[_image()])

    @server.tool()
    def audio() -> CallToolResult:
        """Return a short WAV clip."""
        return CallToolResult(content=[_audio()])

    @server.tool()
    def blob() -> CallToolResult:
        """Return a PDF as an embedded blob resource."""
        return CallToolResult(content=[_blob()])

    @server.tool()
    def echo(message: str) -> CallToolResult:
        """Return the message as text."""
        return CallToolResult(content=[TextContent(type="text", text=message)])

    @server.tool()
    def link() -> CallToolResult:
        """Return a link to a resource (never fetched by the gateway)."""
        return CallToolResult(content=[_link()])

    @server.tool()
    def mixed() -> CallToolResult:
        """Return text, image, audio, a link and a blob, interleaved."""
        blocks: list[ContentBlock] = [
            TextContent(type="text", text="first"),
            _image(),
            TextContent(type="text", text="second"),
            _audio(),
            _link(),
            _blob(),
            TextContent(type="text", text="last"),
        ]
        return CallToolResult(content=blocks)

    @server.tool()
    def big(lines: int = 6000) -> str:
        """Return a very large text (the SDK also echoes it as structured content)."""
        return huge_text(lines)

    @server.tool()
    def pages(sizes: list[int]) -> CallToolResult:
        """Return one text block per size, each that many lines long."""
        return CallToolResult(content=[TextContent(type="text", text=huge_text(n)) for n in sizes])

    @server.tool()
    def fail(reason: str = "the upstream tool failed on purpose") -> str:
        """Always fail with the given reason."""
        raise ToolError(reason)

    @server.tool()
    def bad_base64() -> CallToolResult:
        """Return an image whose data is not valid base64."""
        return CallToolResult(content=[ImageContent(type="image", data="not*base64!", mime_type="image/png")])

    @server.tool()
    def empty_image() -> CallToolResult:
        """Return an image with no bytes."""
        return CallToolResult(content=[ImageContent(type="image", data="", mime_type="image/png")])

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
    args = parser.parse_args(argv)
    server = build_server()
    if args.http is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)


if __name__ == "__main__":
    main()
