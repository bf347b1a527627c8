"""The MCP server ``refvault demo`` puts behind the gateway: one tool returning a dashboard screenshot (a PNG).

    python -m refvault.demo.incident_mcp_server     # serves over stdio (the demo starts it itself)

Installed with refvault (it needs the ``mcp`` extra), so the demo's step 4 runs from a pip install as well as
from a source checkout; ``examples/incident_mcp_server.py`` runs this module. The PNG is drawn
deterministically with zlib (no imaging library), so every run sends the same bytes.
"""

from __future__ import annotations

import base64
import struct
import zlib

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, ImageContent, TextContent

__all__ = ["HEIGHT", "WIDTH", "dashboard_png", "main", "server"]

WIDTH, HEIGHT = 120, 60


def dashboard_png(panel: str) -> bytes:
    """A bar chart of ``WIDTH`` x ``HEIGHT`` RGB pixels whose bar heights follow the panel name."""
    bars = [8 + zlib.crc32(f"{panel}/{i}".encode()) % (HEIGHT - 16) for i in range(WIDTH // 8)]

    def pixel(x: int, y: int) -> bytes:
        if x % 8 and HEIGHT - y <= bars[x // 8]:
            return bytes((200 + y % 40, 60 + 2 * y, 50))  # a bar, shaded
        return bytes((250 - x // 4, 250 - y // 4, 250))  # the background, a faint gradient

    rows = b"".join(b"\x00" + b"".join(pixel(x, y) for x in range(WIDTH)) for y in range(HEIGHT))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", WIDTH, HEIGHT, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


server = MCPServer("incident-dashboards", instructions="Screenshots of the incident dashboards.", log_level="WARNING")


@server.tool()
def dashboard_screenshot(panel: str) -> CallToolResult:
    """Take a screenshot (PNG) of a dashboard panel, e.g. 'checkout error rate, eu-west'."""
    image = ImageContent(type="image", data=base64.b64encode(dashboard_png(panel)).decode(), mime_type="image/png")
    return CallToolResult(content=[TextContent(type="text", text=f"screenshot of panel {panel!r}"), image])


def main() -> None:
    """Serve over stdio until the client closes the connection."""
    server.run("stdio")


if __name__ == "__main__":
    main()
