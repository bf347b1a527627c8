"""OpenTelemetry traces (refvault.tracing): execute_tool spans, vault/read/guard spans, propagation, no content.

The spans are collected by the SDK's in-memory exporter under a tracer provider installed as the global one
for the test (and removed after it), as an application would configure it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import uvicorn
from mcp import Client as McpClient
from mcp.server.mcpserver import MCPServer
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.util._once import Once

from refvault import Ref, Scope, Toolbox, Vault, read, tracing
from refvault.client import Client
from refvault.errors import ContextLeak, NotFound
from refvault.guard import LeakGuard
from refvault.ids import new_artifact_id
from refvault.integrations.mcp.gateway import Gateway
from refvault.keys import create_key
from refvault.mcp_tools import ArtifactTools
from refvault.server.app import create_app

SCOPE = Scope("acme", "ana", "s1")
CANARY = "CANARY-7f3a9c-otel"
TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
TRACEPARENT = f"00-{TRACE_ID:032x}-00f067aa0ba902b7-01"


def _install(provider: TracerProvider | None) -> None:
    """Make ``provider`` the global tracer provider (None: back to none), as OpenTelemetry's own tests do."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]
    if provider is not None:
        trace.set_tracer_provider(provider)


@pytest.fixture(scope="module")
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """One provider for the module: the MCP SDK's tracer binds to the first provider it sees, and keeps it."""
    memory = InMemorySpanExporter()
    configured = TracerProvider()
    configured.add_span_processor(SimpleSpanProcessor(memory))
    try:
        yield configured, memory
    finally:
        _install(None)
        configured.shutdown()


@pytest.fixture
def exporter(provider: tuple[TracerProvider, InMemorySpanExporter]) -> InMemorySpanExporter:
    configured, memory = provider
    if trace.get_tracer_provider() is not configured:
        _install(configured)
    memory.clear()
    return memory


@contextmanager
def served(vault: Vault) -> Iterator[str]:
    """``create_app(vault)`` under uvicorn in a thread of this process (so its spans reach this exporter)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(create_app(vault), log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(1000):
            if server.started:
                break
            thread.join(0.01)
        assert server.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def one(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    found = named(exporter, name)
    assert len(found) == 1, [s.name for s in exporter.get_finished_spans()]
    return found[0]


def everything_said(spans: tuple[ReadableSpan, ...]) -> str:
    """Every name, attribute, event, link and status description of ``spans``, as one text."""
    said = []
    for s in spans:
        said.append(s.name)
        said.append(json.dumps(dict(s.attributes or {}), default=str))
        said.append(str(s.status.description))
        for event in s.events:
            said.append(event.name)
            said.append(json.dumps(dict(event.attributes or {}), default=str))
        for link in s.links:
            said.append(json.dumps(dict(link.attributes or {}), default=str))
    return "\n".join(said)


# -- execute_tool ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["call", "call_sync"])
def test_a_tool_call_is_an_execute_tool_span_with_the_genai_attributes(
    exporter: InMemorySpanExporter, memory_vault: Vault, mode: str
) -> None:
    box = Toolbox(memory_vault, read_tools=False)

    @box.tool
    def count_lines(doc: Ref) -> int:
        """Count a document's lines."""
        return doc.text().count("\n")

    doc = memory_vault.put(SCOPE, b"a\nb\nc\n", media_type="text/plain")
    arguments = json.dumps({"doc": doc.artifact_id})
    if mode == "call":
        observation = asyncio.run(box.call("count_lines", arguments, scope=SCOPE, tool_call_id="call_42"))
    else:
        observation = box.call_sync("count_lines", arguments, scope=SCOPE, tool_call_id="call_42")
    assert observation.content == "3"
    span = one(exporter, "execute_tool count_lines")
    assert span.kind == SpanKind.INTERNAL
    assert span.attributes == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "count_lines",
        "gen_ai.tool.call.id": "call_42",
        "refvault.outcome": "ok",
    }
    assert span.status.status_code == StatusCode.UNSET
    resolved = one(exporter, "refvault.read_range")  # the Ref resolved inside the tool call's span
    assert resolved.parent is not None
    assert resolved.parent.span_id == span.context.span_id
    assert resolved.attributes is not None
    assert resolved.attributes["refvault.artifact.id"] == doc.artifact_id


def test_a_failed_or_refused_tool_call_names_its_error_class_only(
    exporter: InMemorySpanExporter, memory_vault: Vault
) -> None:
    box = Toolbox(memory_vault, read_tools=False)

    @box.tool
    def explode(n: int) -> int:
        """Fail."""
        raise RuntimeError(f"{CANARY} in a message")

    assert box.call_sync("explode", {"n": 1}, scope=SCOPE, tool_call_id="c1").is_error
    assert box.call_sync("explode", {"n": "x"}, scope=SCOPE, tool_call_id="c2").is_error
    assert box.call_sync(CANARY, {}, scope=SCOPE, tool_call_id="c3").is_error
    failed, refused = named(exporter, "execute_tool explode")
    assert failed.attributes is not None
    assert failed.attributes["error.type"] == "RuntimeError"
    assert failed.attributes["refvault.outcome"] == "RuntimeError"
    assert failed.status.status_code == StatusCode.ERROR
    assert not failed.status.description
    assert refused.attributes is not None
    assert refused.attributes["error.type"] == "BadArguments"
    unknown = one(exporter, "execute_tool")  # a name the model made up is never a span name or attribute
    assert unknown.attributes is not None
    assert unknown.attributes["error.type"] == "UnknownTool"
    assert "gen_ai.tool.name" not in unknown.attributes
    assert CANARY not in everything_said(exporter.get_finished_spans())


# -- put, reads, queries, guard ----------------------------------------------------------------------------------


def test_put_and_reads_are_spans_with_ids_and_counts(exporter: InMemorySpanExporter, memory_vault: Vault) -> None:
    text = memory_vault.put(SCOPE, b"one\ntwo\nthree\n", media_type="text/plain")
    rows = memory_vault.put(SCOPE, b'{"n": 1}\n{"n": 2}\n{"n": 3}\n', media_type="application/x-ndjson")
    assert memory_vault.read_range(SCOPE, text.artifact_id, 4, 3) == b"two"
    with memory_vault.stream(SCOPE, text.artifact_id) as stream:
        stream.read()
    read.window(memory_vault, SCOPE, text.artifact_id, lines=[0, 2])
    read.grep(memory_vault, SCOPE, text.artifact_id, "t")
    read.query(memory_vault, SCOPE, rows.artifact_id, where={"field": "n", "op": "gte", "value": 2})

    puts = named(exporter, "refvault.put")
    assert [dict(s.attributes or {}) for s in puts] == [
        {"refvault.artifact.id": text.artifact_id, "refvault.bytes": 14, "refvault.outcome": "ok"},
        {"refvault.artifact.id": rows.artifact_id, "refvault.bytes": rows.size, "refvault.outcome": "ok"},
    ]
    assert dict(one(exporter, "refvault.read_range").attributes or {}) == {
        "refvault.artifact.id": text.artifact_id,
        "refvault.bytes": 3,
        "refvault.verified": True,
        "refvault.outcome": "ok",
    }
    (opened,) = [s for s in named(exporter, "refvault.stream") if s.parent is None]  # the reads' own are children
    assert dict(opened.attributes or {}) == {
        "refvault.artifact.id": text.artifact_id,
        "refvault.bytes": 14,
        "refvault.outcome": "ok",
    }
    window = dict(one(exporter, "refvault.window").attributes or {})
    assert window["refvault.artifact.id"] == text.artifact_id
    assert window["refvault.records"] == 2
    assert window["refvault.bytes"] == len("one\ntwo\n")
    grep = dict(one(exporter, "refvault.grep").attributes or {})
    assert grep["refvault.records"] == 2  # "two", "three"
    query = dict(one(exporter, "refvault.query").attributes or {})
    assert query == {"refvault.artifact.id": rows.artifact_id, "refvault.records": 2, "refvault.outcome": "ok"}
    for s in exporter.get_finished_spans():
        assert set(s.attributes or {}) <= tracing.ATTRIBUTES, s.name


def test_a_failed_read_names_its_error_class_and_a_malformed_id_is_left_out(
    exporter: InMemorySpanExporter, memory_vault: Vault
) -> None:
    with pytest.raises(NotFound):
        memory_vault.read_range(SCOPE, new_artifact_id(), 0, 1)
    with pytest.raises(ValueError):
        memory_vault.read_range(SCOPE, CANARY, 0, 1)
    absent, malformed = named(exporter, "refvault.read_range")
    assert absent.attributes is not None
    assert absent.attributes["refvault.outcome"] == "NotFound"
    assert absent.attributes["error.type"] == "NotFound"
    assert absent.status.status_code == StatusCode.ERROR
    assert malformed.attributes is not None
    assert "refvault.artifact.id" not in malformed.attributes
    assert CANARY not in everything_said(exporter.get_finished_spans())


def test_a_guard_check_is_a_span_with_its_findings_and_outcome(exporter: InMemorySpanExporter) -> None:
    secret = (CANARY + " the quarterly numbers are confidential and must stay in the vault. ") * 4
    guard = LeakGuard(policy="raise")
    guard.protect(new_artifact_id(), secret)
    clean = {"messages": [{"role": "user", "content": "hello"}]}
    assert guard.check(clean) is clean
    with pytest.raises(ContextLeak):
        guard.check({"messages": [{"role": "user", "content": secret}]})
    passed, stopped = named(exporter, "refvault.guard.check")
    assert dict(passed.attributes or {}) == {"refvault.guard.findings": 0, "refvault.outcome": "ok"}
    assert stopped.attributes is not None
    assert stopped.attributes["refvault.outcome"] == "ContextLeak"
    assert stopped.attributes["refvault.guard.findings"] >= 1
    assert CANARY not in everything_said(exporter.get_finished_spans())


# -- propagation -----------------------------------------------------------------------------------------------


def test_a_client_call_and_the_server_spans_it_causes_share_one_trace(
    exporter: InMemorySpanExporter, embedded_vault: Vault
) -> None:
    token = create_key(embedded_vault, "acme", "ana")[1]
    tracer = trace.get_tracer("app")
    with served(embedded_vault) as url, Client(url, token) as client, tracer.start_as_current_span("turn") as turn:
        stored = client.put(SCOPE, b"line\n" * 3, media_type="text/plain")
        read.window(client, SCOPE, stored.artifact_id, lines=[0, 1])
    trace_id = turn.get_span_context().trace_id
    spans = exporter.get_finished_spans()
    assert {s.context.trace_id for s in spans} == {trace_id}
    by_id = {s.context.span_id: s for s in spans}
    for name in ("refvault.put", "refvault.window"):
        client_span, server_vault_span = sorted(named(exporter, name), key=lambda s: s.kind != SpanKind.CLIENT)
        assert client_span.kind == SpanKind.CLIENT
        request = by_id[server_vault_span.parent.span_id]  # type: ignore[union-attr]
        assert request.kind == SpanKind.SERVER
        assert request.parent is not None
        assert request.parent.span_id == client_span.context.span_id
    assert one(exporter, "POST /v1/artifacts").attributes == {
        "http.request.method": "POST",
        "http.route": "/v1/artifacts",
        "http.response.status_code": 201,
        "refvault.outcome": "ok",
    }


def test_an_mcp_requests_meta_traceparent_makes_refvaults_spans_part_of_that_trace(
    exporter: InMemorySpanExporter, memory_vault: Vault
) -> None:
    stored = memory_vault.put(SCOPE, b"hello\n", media_type="text/plain")
    server = ArtifactTools(memory_vault).server(lambda ctx: SCOPE)

    async def run() -> None:
        async with McpClient(server, cache=None) as client:
            meta: Any = {"traceparent": TRACEPARENT}
            await client.call_tool("read_artifact", {"artifact_id": stored.artifact_id}, meta=meta)

    anyio.run(run)
    tool = one(exporter, "execute_tool read_artifact")
    assert tool.context.trace_id == TRACE_ID
    window = one(exporter, "refvault.window")
    assert window.context.trace_id == TRACE_ID
    assert window.parent is not None
    assert window.parent.span_id == tool.context.span_id


def test_the_mcp_gateway_carries_the_callers_trace_to_the_upstream(
    exporter: InMemorySpanExporter, memory_vault: Vault
) -> None:
    upstream = MCPServer("upstream", log_level="WARNING")

    @upstream.tool()
    def fetch(query: str) -> str:
        return "fetched"

    async def run() -> int:
        async with McpClient(upstream, cache=None) as upstream_client:
            gateway = Gateway(memory_vault, SCOPE, upstream_client, server_name="upstream")
            async with McpClient(gateway.server(), cache=None) as client:
                with trace.get_tracer("app").start_as_current_span("agent turn") as turn:
                    await client.call_tool("fetch", {"query": "q"})
                return turn.get_span_context().trace_id

    trace_id = anyio.run(run)
    served = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER and s.name == "tools/call fetch"]
    assert len(served) == 2  # the gateway's and the upstream's
    assert {s.context.trace_id for s in served} == {trace_id}


# -- no content, no provider -------------------------------------------------------------------------------------


def test_a_canary_in_content_arguments_filenames_and_results_is_in_no_span(
    exporter: InMemorySpanExporter, embedded_vault: Vault
) -> None:
    token = create_key(embedded_vault, "acme", "ana")[1]
    content = f"{CANARY} line\n".encode() * 5
    rows = json.dumps({"name": CANARY}).encode() + b"\n"
    with served(embedded_vault) as url, Client(url, token) as client:
        for vault in (embedded_vault, client):
            text = vault.put(SCOPE, content, media_type="text/plain", filename=f"{CANARY}.txt")
            table = vault.put(SCOPE, rows, media_type="application/x-ndjson", filename=f"{CANARY}.ndjson")
            vault.read_range(SCOPE, text.artifact_id, 0, 20)
            read.window(vault, SCOPE, text.artifact_id, lines=[0, 2])
            read.grep(vault, SCOPE, text.artifact_id, CANARY)
            read.query(vault, SCOPE, table.artifact_id, where={"field": "name", "op": "eq", "value": CANARY})
            with pytest.raises(ValueError):
                vault.read_range(SCOPE, CANARY, 0, 1)
            box = Toolbox(vault)

            @box.tool
            def echo(doc: Ref, note: str) -> str:
                """Echo."""
                return doc.text() + note

            box.call_sync("echo", {"doc": text.artifact_id, "note": CANARY}, scope=SCOPE, tool_call_id="c1")
            box.call_sync("read_artifact", {"artifact_id": text.artifact_id}, scope=SCOPE, tool_call_id="c2")
            box.call_sync("read_artifact", {"artifact_id": text.artifact_id, "pattern": CANARY}, scope=SCOPE)
            box.call_sync("echo", {"doc": CANARY, "note": CANARY}, scope=SCOPE, tool_call_id="c3")
    server = ArtifactTools(embedded_vault).server(lambda ctx: SCOPE)

    async def over_mcp() -> None:
        async with McpClient(server, cache=None) as mcp:
            await mcp.call_tool("read_artifact", {"artifact_id": text.artifact_id, "pattern": CANARY})
            await mcp.call_tool("read_artifact", {"artifact_id": CANARY})

    anyio.run(over_mcp)
    spans = exporter.get_finished_spans()
    assert {"refvault.put", "refvault.grep", "refvault.query", "execute_tool echo", "POST /v1/artifacts"} <= {
        s.name for s in spans
    }
    assert len(named(exporter, "execute_tool read_artifact")) == 6  # 2 per vault, 2 over MCP
    assert CANARY not in everything_said(spans)


def test_with_no_tracer_provider_nothing_is_recorded_and_everything_works(tmp_path: Path) -> None:
    script = f"""
import json, sys
from refvault import Ref, Scope, Toolbox, Vault, read, tracing
scope = Scope("acme", "ana", "s1")
with Vault.open({str(tmp_path / "store")!r}) as vault:
    d = vault.put(scope, b"a\\nb\\n", media_type="text/plain")
    box = Toolbox(vault, read_tools=False)
    @box.tool
    def size(doc: Ref) -> int:
        "Size."
        return len(doc.read())
    seen = box.call_sync("size", {{"doc": d.artifact_id}}, scope=scope).content
    window = read.window(vault, scope, d.artifact_id, lines=[0, 1])["text"]
print(json.dumps([seen, window, tracing.enabled(), "opentelemetry.trace" in sys.modules]))
"""
    for blocked in ("", "import sys; sys.modules['opentelemetry'] = None\n"):  # then: as if it were not installed
        done = subprocess.run([sys.executable, "-c", blocked + script], capture_output=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr.decode()
        assert json.loads(done.stdout) == ["4", "a\n", False, False]


def test_with_the_api_imported_but_no_provider_set_no_span_is_started(memory_vault: Vault) -> None:
    _install(None)
    assert not tracing.enabled()
    with tracing.span("refvault.put") as facts:
        assert not facts.recording
        assert not trace.get_current_span().get_span_context().is_valid
    memory_vault.put(SCOPE, b"x")
    headers: dict[str, str] = {}
    tracing.inject(headers)
    assert headers == {}
