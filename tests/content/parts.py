"""Tool-result parts and small helpers shared by the content tests (base64, PNG bytes, MCP blocks, a memory vault)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib
import json
from typing import Any

from mcp.types import (
    CallToolResult,
)

from refvault import Scope, Vault
from refvault.blobs.memory import MemoryBlobStore
from refvault.catalog.memory import MemoryCatalog
from refvault.content import materialize

# ``refvault.content.materialize`` the module is shadowed by the function of the same name in the package.
materialize_module = importlib.import_module("refvault.content.materialize")


SCOPE = Scope("acme", "ana", "s1")
OTHER = Scope("acme", "bob", "s1")
PNG_HEAD = b"\x89PNG\r\n\x1a\n"
RUNNER = "import sys; from refvault.cli.mcp import mcp; mcp(sys.argv[1:], prog_name='refvault mcp')"


# -- helpers ---------------------------------------------------------------------------------------------------------


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def noise(size: int, seed: str = "x") -> bytes:
    return hashlib.shake_256(seed.encode()).digest(size)


def png(size: int = 3000, seed: str = "png") -> bytes:
    return PNG_HEAD + noise(size, seed)


def image(data: bytes, mime: str = "image/png", **extra: Any) -> dict[str, Any]:
    return {"type": "image", "data": b64(data), "mimeType": mime, **extra}


def blob(data: bytes, uri: str, mime: str | None = "application/pdf") -> dict[str, Any]:
    resource: dict[str, Any] = {"uri": uri, "blob": b64(data)}
    if mime is not None:
        resource["mimeType"] = mime
    return {"type": "resource", "resource": resource}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def memory_vault() -> Vault:
    return Vault(MemoryBlobStore(), MemoryCatalog())


def run(vault: Vault, value: Any, *, tool_call_id: str = "call_1", scope: Scope = SCOPE, **options: Any) -> Any:
    return asyncio.run(
        materialize(vault, scope, value, provenance="mcp:srv/tool", tool_call_id=tool_call_id, **options)
    )


def dumped(value: Any) -> str:
    if isinstance(value, CallToolResult):
        return value.model_dump_json(by_alias=True)
    return json.dumps(value, ensure_ascii=False)


def windows(encoded: str, size: int = 64) -> list[str]:
    """Every ``size``-character window of ``encoded`` (step 8; enough to catch any surviving span of 71+)."""
    return [encoded[i : i + size] for i in range(0, len(encoded) - size + 1, 8)]


def surviving(haystack: str, encoded: str, size: int = 64) -> int:
    return sum(1 for window in windows(encoded, size) if window in haystack)


def manifests(vault: Vault) -> set[str]:
    return {m.artifact_id for m in vault.catalog.manifests()}


def link_id(block: Any) -> str:
    uri = block["uri"] if isinstance(block, dict) else block.uri
    assert uri.startswith("refvault://")
    return str(uri.removeprefix("refvault://"))
