"""Remote tools dereference a reference parameter through a capability link, never a credential.

Over the real ``refvault serve``, on the embedded store and on S3 + PostgreSQL: a tool that forwards to an HTTP
endpoint (a tiny server in a thread) receives a link per call, the endpoint fetches verified bytes with it, the
model and the trajectory see only the id, the link dies when the call ends (the same 404 as an absent artifact),
misused links are refused the same way, and the ledger shows the disclosure to ``tool:<name>``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from refvault import Client, RemoteLink, Scope, Toolbox, Vault
from refvault.errors import InvalidArgument, LinkRefused
from refvault.keyring import b64url
from tests.conftest import Clock
from tests.servers import LiveServer, S3Endpoint, free_port, fresh_database, fresh_prefix, serve, serve_scaled

SCOPE = Scope("acme", "ana", "s1")
DATA = b"".join(b"row %d REMOTEcanary7q\n" % i for i in range(300))
GARBAGE = "rvc1.bm90LWEtbGluaw.bm90LWEtbWFj"


def _rewritten(token: str, **changes: str) -> str:
    """``token`` with fields of its signed payload changed and its MAC kept (a forgery)."""
    head, body, mac = token.split(".")
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    payload["p"].update(changes)
    return f"{head}.{b64url(json.dumps(payload, separators=(',', ':'), sort_keys=True).encode())}.{mac}"


class RemoteEndpoint:
    """A tool hosted elsewhere: it takes ``{"doc": <link>}``, fetches the link (no key), checks the bytes against
    the link's content hash, and answers with a line count (and, to be nasty, the link it got). While the link is
    live it also tries forged variants of it (``probes``)."""

    def __init__(self, other_id: str) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.probes: dict[str, tuple[int, bytes]] = {}
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                endpoint.received.append((dict(self.headers.items()), raw))
                doc = json.loads(raw)["doc"]
                got = httpx.get(doc["url"])
                base, token = doc["url"].rsplit("/", 1)
                variants = {
                    "other artifact spliced in": _rewritten(token, a=other_id),
                    "other recipient": _rewritten(token, r="tool:other"),
                    "tampered mac": token[:-2] + ("AA" if not token.endswith("AA") else "BB"),
                    "garbage": GARBAGE,
                }
                for name, variant in variants.items():
                    answer = httpx.get(f"{base}/{variant}")
                    endpoint.probes[name] = (answer.status_code, answer.content)
                verified = "sha256:" + hashlib.sha256(got.content).hexdigest() == doc["content_hash"]
                reply = json.dumps(
                    {"lines": got.content.count(b"\n"), "verified": verified, "you sent": doc["url"]}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> RemoteEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module", params=["embedded", "s3+postgres"])
def live(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    workdir = tmp_path_factory.mktemp("remote")
    if request.param == "embedded":
        with serve(workdir / "store") as server:
            yield server
        return
    postgres_url: str = request.getfixturevalue("postgres_url")
    s3: S3Endpoint = request.getfixturevalue("s3_server")
    with serve_scaled(fresh_database(postgres_url), fresh_prefix(s3), s3, workdir) as server:
        yield server


def _remote_box(client: Client, endpoint: RemoteEndpoint) -> Toolbox:
    box = Toolbox(client, guard=None)

    @box.tool(deadline=timedelta(minutes=1))
    def count_lines(doc: RemoteLink) -> Any:
        """Count the lines of a document (runs elsewhere)."""
        return httpx.post(endpoint.url, json={"doc": doc.as_json()}, timeout=30).json()

    return box


def test_a_remote_tool_fetches_verified_bytes_by_link_and_the_model_sees_only_the_id(live: LiveServer) -> None:
    with Client(live.url, live.token) as client:
        doc = client.put(SCOPE, DATA, media_type="text/plain").artifact_id
        other = client.put(SCOPE, b"another artifact\n").artifact_id
        with RemoteEndpoint(other) as endpoint:
            box = _remote_box(client, endpoint)
            schema = box.schemas("openai")
            observation = box.call_sync("count_lines", {"doc": doc}, scope=SCOPE, run_id="r1", tool_call_id="c1")

        assert not observation.is_error, observation.content
        assert json.loads(observation.content) == {"lines": 300, "verified": True, "you sent": doc}
        (parameters,) = [s["function"]["parameters"] for s in schema if s["function"]["name"] == "count_lines"]
        assert parameters["properties"]["doc"]["type"] == "string"
        events = box.trajectory("r1")
        assert [e.kind for e in events] == ["tool_started", "tool_finished"]
        assert all(e.refs == (doc,) for e in events)
        assert "/v1/links/" not in repr(events) + observation.content

        ((headers, body),) = endpoint.received
        sent = json.loads(body)["doc"]
        assert sent["url"].startswith(live.url + "/v1/links/rvc1.")
        assert sent["artifact_id"] == doc
        assert sent["size"] == len(DATA)
        everything = body.decode() + json.dumps(headers)
        for credential in (live.token, live.foreign_token, live.s1_token, "Bearer", "Authorization"):
            assert credential not in everything
        assert DATA[:40].decode() not in everything


def test_a_remote_tools_link_is_refused_like_an_absent_artifact_after_the_call_and_when_forged(
    live: LiveServer,
) -> None:
    with Client(live.url, live.token) as client:
        doc = client.put(SCOPE, DATA + b"forgeries\n", media_type="text/plain").artifact_id
        other = client.put(SCOPE, b"the artifact a forger wants\n").artifact_id
        with RemoteEndpoint(other) as endpoint:
            observation = _remote_box(client, endpoint).call_sync("count_lines", {"doc": doc}, scope=SCOPE)
        assert json.loads(observation.content)["verified"] is True

        absent = httpx.get(live.url + "/v1/links/" + GARBAGE)
        assert absent.status_code == 404
        url = json.loads(endpoint.received[0][1])["doc"]["url"]
        after = httpx.get(url)
        answers = {"after the call": (after.status_code, after.content), **endpoint.probes}
        assert set(answers.values()) == {(absent.status_code, absent.content)}, answers
        assert b"REMOTEcanary7q" not in absent.content


def test_the_ledger_shows_the_remote_tool_as_the_recipient(live: LiveServer) -> None:
    with Client(live.url, live.token) as client:
        doc = client.put(SCOPE, DATA + b"ledger\n", media_type="text/plain").artifact_id
        other = client.put(SCOPE, b"x\n").artifact_id
        with RemoteEndpoint(other) as endpoint:
            _remote_box(client, endpoint).call_sync("count_lines", {"doc": doc}, scope=SCOPE)
        ledger = client.disclosures(SCOPE, doc)
        to_tool = [entry for entry in ledger if entry.recipient == "tool:count_lines"]
        assert to_tool, ledger
        assert {entry.bytes for entry in to_tool} == {len(DATA) + 7}
        assert {e.excerpt_hash for e in to_tool} == {hashlib.sha256(DATA + b"ledger\n").hexdigest()}
        assert all(entry.recipient.startswith("tool:") for entry in ledger), ledger


# -- the same promises over an embedded vault, with a settable clock --------------------------------------------


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[tuple[Vault, Clock]]:
    clock = Clock()
    with Vault.open(tmp_path / "store", clock=clock) as vault:
        yield vault, clock


def test_a_link_dies_at_the_tools_deadline(embedded: tuple[Vault, Clock]) -> None:
    vault, clock = embedded
    doc = vault.put(SCOPE, DATA).artifact_id
    box = Toolbox(vault, guard=None, link_base_url="http://refvault.invalid:8765")
    seen: dict[str, Any] = {}

    @box.tool(deadline=timedelta(seconds=30))
    def slow(doc: RemoteLink) -> str:
        token = doc.url.rsplit("/", 1)[1]
        with vault.open_link(token).stream as stream:
            seen["before"] = stream.read()
        clock.advance(seconds=31)
        try:
            vault.open_link(token)
        except LinkRefused as exc:
            seen["after"] = type(exc).__name__
        return "done"

    assert box.call_sync("slow", {"doc": doc}, scope=SCOPE).content == "done"
    assert seen == {"before": DATA, "after": "LinkRefused"}


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_links_are_revoked_when_the_remote_tool_raises(embedded: tuple[Vault, Clock], kind: str) -> None:
    vault, _ = embedded
    doc = vault.put(SCOPE, DATA).artifact_id
    box = Toolbox(vault, guard=None, link_base_url="http://refvault.invalid:8765/")
    kept: list[RemoteLink] = []

    def fail(docs: list[RemoteLink]) -> str:
        kept.extend(docs)
        assert vault.open_link(docs[0].url.rsplit("/", 1)[1]).end == len(DATA)  # live during the call
        raise ConnectionError("the remote end hung up: " + docs[0].url)

    if kind == "sync":
        box.tool(fail)
    else:

        async def fail_async(docs: list[RemoteLink]) -> str:
            await asyncio.sleep(0)
            return fail(docs)

        box.tool(fail_async, name="fail")
    observation = asyncio.run(box.call("fail", {"docs": [doc, doc]}, scope=SCOPE))
    assert observation.is_error
    assert observation.content == "error: the tool raised ConnectionError"
    assert len(kept) == 2
    assert kept[0] is kept[1]  # one link per artifact per call
    assert kept[0].url.startswith("http://refvault.invalid:8765/v1/links/rvc1.")
    assert repr(kept[0]).count("rvc1") == 0
    with pytest.raises(LinkRefused):
        vault.open_link(kept[0].url.rsplit("/", 1)[1])
    actions = [entry.action for entry in vault.audit(SCOPE, artifact_id=doc)]
    assert actions.count("link") == 1
    assert actions.count("link_revoke") == 1


def test_revoking_a_link_needs_its_tenant_and_says_whether_it_revoked(embedded: tuple[Vault, Clock]) -> None:
    vault, _ = embedded
    doc = vault.put(SCOPE, DATA).artifact_id
    path = vault.link(SCOPE, doc, recipient="tool:x")
    with pytest.raises(LinkRefused):
        vault.revoke_link(Scope("globex", "gus", "s1"), path)
    assert vault.open_link(path.removeprefix("/v1/links/")).end == len(DATA)
    assert vault.revoke_link(Scope("acme", "bob", "s2"), path) is True
    assert vault.revoke_link(SCOPE, path) is False
    with pytest.raises(LinkRefused):
        vault.open_link(path.removeprefix("/v1/links/"))
    assert vault.revoke_link(SCOPE, "not a link") is False


def test_a_remote_tool_over_an_embedded_vault_needs_a_link_base_url(embedded: tuple[Vault, Clock]) -> None:
    vault, _ = embedded
    box = Toolbox(vault, guard=None)

    def remote(doc: RemoteLink) -> str:
        return doc.artifact_id

    with pytest.raises(InvalidArgument, match="link_base_url"):
        box.tool(remote)
    with pytest.raises(InvalidArgument, match="deadline"):
        box.tool(lambda text: text, name="plain", deadline=timedelta(minutes=1))
    with pytest.raises(InvalidArgument, match="link_base_url"):
        Toolbox(vault, link_base_url="ftp://nowhere")


# -- an MCP server over streamable HTTP (the official SDK), whose tool fetches the link -------------------------


class McpEndpoint:
    """An MCP server in a thread (uvicorn, streamable HTTP) with one tool that fetches the link it is given."""

    def __init__(self) -> None:
        import uvicorn
        from mcp.server.mcpserver import MCPServer

        self.received: list[dict[str, Any]] = []
        server = MCPServer("remote-counter", log_level="WARNING")

        @server.tool()
        def count_words(doc: dict[str, Any]) -> str:
            """Count the words of the document a refvault link names."""
            self.received.append(doc)
            got = httpx.get(doc["url"])
            verified = "sha256:" + hashlib.sha256(got.content).hexdigest() == doc["content_hash"]
            return json.dumps({"words": len(got.content.split()), "verified": verified})

        port = free_port()
        self.url = f"http://127.0.0.1:{port}/mcp"
        config = uvicorn.Config(server.streamable_http_app(), host="127.0.0.1", port=port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> McpEndpoint:
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the MCP server did not start")
            self.thread.join(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def test_an_mcp_tool_over_http_fetches_its_argument_by_link(live: LiveServer) -> None:
    from mcp import Client as McpClient

    with Client(live.url, live.token) as client, McpEndpoint() as mcp_server:
        doc = client.put(SCOPE, DATA + b"over mcp\n", media_type="text/plain").artifact_id
        box = Toolbox(client, guard=None)

        @box.tool(deadline=timedelta(minutes=1))
        async def count_words(doc: RemoteLink) -> str:
            """Count the words of a document (an MCP server elsewhere does it)."""
            async with McpClient(mcp_server.url) as session:
                result = await session.call_tool("count_words", {"doc": doc.as_json()})
            return str(getattr(result.content[0], "text", ""))

        observation = asyncio.run(box.call("count_words", {"doc": doc}, scope=SCOPE, run_id="mcp"))
        assert not observation.is_error, observation.content
        assert json.loads(observation.content) == {"words": 902, "verified": True}
        ((sent,),) = [list(mcp_server.received)]
        assert sent["artifact_id"] == doc
        assert live.token not in json.dumps(sent)
        assert httpx.get(sent["url"]).status_code == 404  # revoked when the call ended
        assert any(entry.recipient == "tool:count_words" for entry in client.disclosures(SCOPE, doc))


class Bundle(BaseModel):
    main: RemoteLink
    extras: dict[str, RemoteLink]


def test_remote_links_reach_the_function_wherever_the_arguments_nest_them(embedded: tuple[Vault, Clock]) -> None:
    vault, _ = embedded
    first = vault.put(SCOPE, b"first\n").artifact_id
    second = vault.put(SCOPE, b"second\n").artifact_id
    box = Toolbox(vault, guard=None, link_base_url="http://refvault.invalid")
    got: list[Any] = []

    @box.tool
    def gather(bundle: Bundle, more: set[RemoteLink], keyed: dict[RemoteLink, int]) -> str:
        got.extend([bundle.main, *bundle.extras.values(), *more, *keyed])
        return "ok"

    arguments = {"bundle": {"main": first, "extras": {"x": second}}, "more": [second], "keyed": {first: 1}}
    assert box.call_sync("gather", arguments, scope=SCOPE).content == "ok"
    assert all(isinstance(link, RemoteLink) for link in got)
    assert [link.artifact_id for link in got] == [first, second, second, first]
    assert len({link.url for link in got}) == 2  # one link per artifact per call
