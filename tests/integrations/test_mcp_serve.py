"""``refvault mcp serve``: refvault's model-facing tools for a local store, over stdio, for MCP hosts.

Every test starts the real command as a subprocess and talks to it with the
official MCP SDK's stdio client, as an MCP host configured with a command would.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, MCPError
from mcp.client.stdio import StdioServerParameters
from mcp.types import TextContent

from refvault import Scope, Vault

SCOPE = Scope("acme", "ana", "s1")
OTHER = Scope("acme", "bob", "s1")
BUILTINS = {
    "describe_artifact",
    "list_artifacts",
    "read_artifact",
    "query_artifact",
    "load_artifacts",
    "artifact_lineage",  # the read-only derived-copy tools (refvault.mcp_tools.COPY_TOOLS)
    "artifact_receipt",
}
MAIN = "import sys; from refvault.cli import main; main(sys.argv[1:], prog_name='refvault')"


def _env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith("REFVAULT_")}


def _args(store: Path, scope: Scope) -> list[str]:
    return ["-c", MAIN, "mcp", "serve", "--store", str(store), "--tenant", scope.tenant, "--user", scope.user,
            "--session", scope.session]  # fmt: skip


def _client(store: Path, scope: Scope = SCOPE) -> Client:
    return Client(StdioServerParameters(command=sys.executable, args=_args(store, scope), env=_env()), cache=None)


def _text(result: object) -> str:
    content = getattr(result, "content", [])
    return "".join(block.text for block in content if isinstance(block, TextContent))


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    with Vault.open(path) as vault:
        vault.put(SCOPE, b"line one\nline two\nline three\n", media_type="text/plain", filename="notes.txt")
    return path


def test_serves_the_read_tools_and_resources_in_its_scope(store: Path) -> None:
    canary = "CANARY-" + secrets.token_hex(40)
    with Vault.open(store) as vault:
        sealed = vault.put(SCOPE, canary.encode(), media_type="text/plain", disclosure="sealed")
        readable = vault.list(SCOPE)[-1]
        foreign = vault.put(OTHER, b"bob's notes\n", media_type="text/plain")

    async def session() -> None:
        async with _client(store) as client:
            tools = await client.list_tools()
            assert {tool.name for tool in tools.tools} == BUILTINS
            read = await client.call_tool("read_artifact", {"artifact_id": readable.artifact_id})
            assert not read.is_error
            assert "line two" in _text(read)
            refused = await client.call_tool("read_artifact", {"artifact_id": sealed.artifact_id})
            assert refused.is_error
            assert "sealed" in _text(refused)
            assert canary not in refused.model_dump_json()
            absent = await client.call_tool("describe_artifact", {"artifact_id": foreign.artifact_id})
            assert absent.is_error
            assert "bob's notes" not in absent.model_dump_json()
            listed = await client.call_tool("list_artifacts", {})
            ids = {entry["artifact_id"] for entry in json.loads(_text(listed))["artifacts"]}
            assert ids == {readable.artifact_id, sealed.artifact_id}
            resources = await client.list_resources()
            assert {str(r.uri) for r in resources.resources} == {
                f"refvault://{readable.artifact_id}",
                f"refvault://{sealed.artifact_id}",
            }
            contents = await client.read_resource(f"refvault://{readable.artifact_id}")
            assert "line three" in contents.model_dump_json()
            for uri in (f"refvault://{sealed.artifact_id}", f"refvault://{foreign.artifact_id}"):
                with pytest.raises(MCPError) as caught:
                    await client.read_resource(uri)
                assert canary not in str(caught.value)
                assert "bob's notes" not in str(caught.value)

    anyio.run(session)


def test_recovered_content_is_marked_data_only(store: Path) -> None:
    """Every block of recovered content carries ``_meta: {"data_only": true}``; metadata answers do not."""
    with Vault.open(store) as vault:
        note = vault.list(SCOPE)[0]
        image = vault.put(SCOPE, b"\x89PNG\r\n\x1a\n" + secrets.token_bytes(64), media_type="image/png")

    async def session() -> None:
        async with _client(store) as client:
            read = await client.call_tool("read_artifact", {"artifact_id": note.artifact_id})
            loaded = await client.call_tool("load_artifacts", {"artifact_ids": [note.artifact_id, image.artifact_id]})
            listed = await client.call_tool("list_artifacts", {})
            contents = await client.read_resource(f"refvault://{note.artifact_id}")
            assert [block.meta for block in read.content] == [{"data_only": True}]
            assert json.loads(_text(read))["data_only"] is True
            assert [block.type for block in loaded.content] == ["text", "text", "image"]
            assert all(block.meta == {"data_only": True} for block in loaded.content)
            assert loaded.structured_content is not None
            assert loaded.structured_content["data_only"] is True
            assert [block.meta for block in listed.content] == [None]
            assert [item.meta for item in contents.contents] == [{"data_only": True}]

    anyio.run(session)


def test_the_scope_is_the_commands_own(store: Path) -> None:
    """Another scope's server sees none of this scope's artifacts, and an id of them is simply not found."""
    with Vault.open(store) as vault:
        mine = vault.list(SCOPE)[0]

    async def session() -> None:
        async with _client(store, OTHER) as client:
            listed = await client.call_tool("list_artifacts", {})
            assert json.loads(_text(listed))["artifacts"] == []
            for tool in ("describe_artifact", "read_artifact"):
                result = await client.call_tool(tool, {"artifact_id": mine.artifact_id})
                assert result.is_error
                assert "line one" not in _text(result)

    anyio.run(session)


def test_a_missing_store_is_refused_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    done = subprocess.run(
        [sys.executable, *_args(missing, SCOPE)], capture_output=True, text=True, env=_env(), timeout=60, check=False
    )
    assert done.returncode == 1  # like every command that reads a store: it is not bad input
    assert "no refvault store at" in done.stderr
    assert not missing.exists()


def test_a_bad_scope_is_refused(store: Path) -> None:
    args = _args(store, SCOPE)
    args[args.index("--tenant") + 1] = "bad tenant/../"
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=_env(), timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ")


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_stops_it_cleanly(store: Path, signum: str) -> None:
    process = subprocess.Popen(
        [sys.executable, *_args(store, SCOPE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline().decode()
        assert "serving" in line
        assert "over stdio" in line
        process.send_signal(getattr(signal, signum))
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
