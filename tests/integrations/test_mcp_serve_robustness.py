"""``refvault mcp serve`` against bad clients: unknown tools and bad arguments, resources/read of sealed, foreign,
malformed and large, and malformed JSON-RPC.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from agents import set_tracing_disabled
from mcp import Client, MCPError
from mcp.client.stdio import StdioServerParameters

from refvault import Scope, Vault
from tests.integrations.scripted import MAIN, OTHER, SCOPE, _env, _text, forms, rich_secret, sealed

set_tracing_disabled(True)  # nothing may try to export traces over the network


def _serve_args(store: Path, scope: Scope) -> list[str]:
    return ["-c", MAIN, "mcp", "serve", "--store", str(store), "--tenant", scope.tenant, "--user", scope.user,
            "--session", scope.session]  # fmt: skip


def _mcp_client(store: Path, scope: Scope = SCOPE) -> Client:
    return Client(StdioServerParameters(command=sys.executable, args=_serve_args(store, scope), env=_env()), cache=None)


@dataclass
class Store:
    path: Path
    secret: str
    sealed: str
    readable: str
    foreign: str
    foreign_sealed: str
    big: str


@pytest.fixture
def store(tmp_path: Path) -> Store:
    path = tmp_path / "store"
    secret = rich_secret()
    with Vault.open(path) as vault:
        readable = vault.put(SCOPE, b"line one\nline two\n", media_type="text/plain").artifact_id
        sealed_id = sealed(vault, SCOPE, secret)
        foreign = vault.put(OTHER, f"bob's {secret}".encode(), media_type="text/plain").artifact_id
        foreign_sealed = sealed(vault, OTHER, secret)
        line = b"a line of a large log, " + b"x" * 40 + b"\n"
        big_text = line * (32 * 1024 * 1024 // len(line) + 1)  # over resources/read's 32 MiB cap
        big = vault.put(SCOPE, big_text, media_type="text/plain").artifact_id
    return Store(path, secret, sealed_id, readable, foreign, foreign_sealed, big)


def test_mcp_serve_unknown_tools_and_bad_arguments_are_error_results(store: Store) -> None:
    """Unknown tools, missing, mistyped, extra and huge arguments: error results naming no content; the server
    stays up and answers the next request."""

    async def session() -> list[Any]:
        async with _mcp_client(store.path) as client:
            results = [
                await client.call_tool("no_such_tool", {}),
                await client.call_tool("x" * 10_000, {"a": 1}),
                await client.call_tool("read_artifact", {}),
                await client.call_tool("read_artifact", {"artifact_id": 7}),
                await client.call_tool("read_artifact", {"artifact_id": store.readable, "lines": "all"}),
                await client.call_tool("read_artifact", {"artifact_id": store.readable, "bogus": True}),
                await client.call_tool("read_artifact", {"artifact_id": "a" * 2_000_000}),
                await client.call_tool("load_artifacts", {"artifact_ids": [store.sealed, store.foreign] * 6}),
                await client.call_tool("query_artifact", {"artifact_id": store.sealed, "where": {"field": "k"}}),
            ]
            results.append(await client.call_tool("load_artifacts", {"artifact_ids": [store.sealed, store.foreign]}))
            results.append(await client.call_tool("read_artifact", {"artifact_id": store.big}))
            results.append(await client.call_tool("load_artifacts", {"artifact_ids": [store.big]}))
            results.append(await client.call_tool("read_artifact", {"artifact_id": store.readable}))
            return results

    *errors, loaded, big_read, big_load, last = anyio.run(session)
    for bounded in (big_read, big_load):  # a 32 MiB text comes back as a bounded window that says how to go on
        assert not bounded.is_error
        assert 1000 < len(bounded.model_dump_json()) < 200_000
        assert "a line of a large log" in _text(bounded)
    assert not loaded.is_error  # one entry per id: each refused, naming no content
    assert f"{store.sealed} is sealed" in _text(loaded)
    assert f"{store.foreign} not found in this scope" in _text(loaded)
    for form in forms(store.secret):
        assert form not in loaded.model_dump_json()
    for result in errors:
        assert result.is_error, result
        dumped = result.model_dump_json()
        for form in forms(store.secret):
            assert form not in dumped
    assert len(_text(errors[1])) < 1000  # a 10,000-character tool name is not echoed whole
    assert len(_text(errors[6])) < 1000
    assert not last.is_error
    assert "line two" in _text(last)


def test_mcp_serve_resources_read_refuses_sealed_foreign_malformed_and_large(store: Store) -> None:
    """resources/read: a sealed artifact is refused as sealed; another scope's (sealed or not) exactly like a missing
    one; malformed and other-scheme URIs are not found; an artifact over the size cap is refused, not truncated."""
    missing = "art_" + "a" * 26
    malformed = [
        "refvault://",
        "refvault://../../etc/passwd",
        f"refvault://{store.readable}/../{store.foreign}",
        f"refvault://{store.readable}?x=1",
        f"REFVAULT://{store.foreign}",
        f"file:///{store.readable}",
        "refvault://" + "a" * 5000,
        f"refvault://{store.readable}%00",
    ]

    async def session() -> dict[str, str]:
        answers: dict[str, str] = {}
        async with _mcp_client(store.path) as client:
            for name, uri in [
                ("sealed", f"refvault://{store.sealed}"),
                ("missing", f"refvault://{missing}"),
                ("foreign", f"refvault://{store.foreign}"),
                ("foreign_sealed", f"refvault://{store.foreign_sealed}"),
                ("big", f"refvault://{store.big}"),
                *((f"malformed{i}", uri) for i, uri in enumerate(malformed)),
            ]:
                with pytest.raises(MCPError) as caught:
                    await client.read_resource(uri)
                answers[name] = str(caught.value)
            answers["ok"] = (await client.read_resource(f"REFVAULT://{store.readable}")).model_dump_json()
        return answers

    answers = anyio.run(session)
    for answer in answers.values():
        for form in forms(store.secret):
            assert form not in answer
    assert "sealed" in answers["sealed"]
    assert answers["foreign"].replace(store.foreign, "<id>") == answers["missing"].replace(missing, "<id>")
    assert answers["foreign_sealed"].replace(store.foreign_sealed, "<id>") == answers["missing"].replace(
        missing, "<id>"
    )
    assert "bytes" in answers["big"]
    assert "read_artifact" in answers["big"]
    for i in range(len(malformed)):
        assert "not found" in answers[f"malformed{i}"], answers[f"malformed{i}"]
        assert len(answers[f"malformed{i}"]) < 400
    assert "line two" in answers["ok"]


def test_mcp_serve_survives_malformed_json_rpc(store: Store) -> None:
    """Garbage on stdin (not JSON, wrong shapes, unknown methods, a huge line) between valid requests: each valid
    request is still answered, and the server exits cleanly when stdin closes."""
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    lines = [
        json.dumps(init),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        "this is not json",
        "{",
        json.dumps([1, 2, 3]),
        json.dumps({"jsonrpc": "2.0", "id": 2, "method": "no/such/method"}),
        json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": 5}}),
        json.dumps({"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {}}),
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 5,
                "method": "tools/call",
                "params": {"name": "read_artifact", "arguments": {"artifact_id": "z" * 3_000_000}},
            }
        ),
        json.dumps({"jsonrpc": "2.0", "id": 8, "method": "resources/list", "params": {"cursor": "-1"}}),
        json.dumps({"jsonrpc": "2.0", "id": 9, "method": "resources/list", "params": {"cursor": "9" * 40}}),
        json.dumps(
            {"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "list_artifacts", "arguments": [1]}}
        ),
        json.dumps({"jsonrpc": "2.0", "id": 6, "method": "tools/list"}),
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {"name": "read_artifact", "arguments": {"artifact_id": store.readable}},
            }
        ),
    ]
    process = subprocess.Popen(
        [sys.executable, *_serve_args(store.path, SCOPE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    try:
        assert process.stdin is not None
        assert process.stdout is not None
        answers: dict[int, Any] = {}
        for line in lines:
            process.stdin.write(line.encode() + b"\n")
        process.stdin.flush()
        while 7 not in answers:
            raw = process.stdout.readline()
            assert raw, "the server closed stdout before answering every valid request"
            message = json.loads(raw)
            if "id" in message:
                answers[message["id"]] = message
        process.stdin.close()
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    assert "result" in answers[1]
    assert answers[2]["error"]["code"] == -32601  # method not found
    for bad in (3, 4, 8, 9, 10):  # a tool name that is no string, no uri, bad cursors, arguments that are no object
        assert answers[bad]["error"]["code"] == -32602, answers[bad]
    assert "invalid cursor" in answers[8]["error"]["message"]
    assert answers[5]["result"]["isError"] is True
    assert len(json.dumps(answers[5])) < 5000  # the 3 MB id is not echoed back
    assert {tool["name"] for tool in answers[6]["result"]["tools"]} >= {"read_artifact", "load_artifacts"}
    assert "line two" in json.dumps(answers[7]["result"])
