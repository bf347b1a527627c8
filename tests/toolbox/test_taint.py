"""Labels follow the data: a tool's output carries the union of its inputs' labels, through chains of tools,
in process and through the HTTP client; a labelled text result the model may not see is captured, not inlined;
an MCP gateway's upstream can be given labels for every part it stores.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client as McpClient
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, ImageContent, TextContent

from refvault import Artifact, Client, Ref, Scope, Toolbox, ToolContext, Vault
from refvault.integrations.mcp.gateway import Gateway, GatewayOptions
from refvault.model import Descriptor
from refvault.policy import Policy, Rule
from refvault.toolbox.taint import WITHHELD_BY_DEFAULT, model_recipient
from tests.content.parts import b64, link_id, png
from tests.servers import LiveServer, serve

SCOPE = Scope("acme", "ana", "s1")
CANARY = "CANARY-PII-ada@example.com"
RECORD = f"name,email\nAda,{CANARY}\n".encode()


def _box(vault: Any) -> Toolbox:
    """Three tools a chain runs: one returns text, one bytes (an Artifact), one text again."""
    box = Toolbox(vault)

    @box.tool
    def shout(doc: Ref) -> str:
        """The document in capitals."""
        return doc.text().upper()

    @box.tool
    def pack(doc: Ref, extra: Ref | None = None) -> Artifact:
        """The document (and an extra one) as one stored artifact."""
        data = doc.read() + (extra.read() if extra is not None else b"")
        return Artifact(data, media_type="text/plain")

    @box.tool
    def tag(doc: Ref) -> Artifact:
        """The document, with a label of the tool's own added."""
        return Artifact(doc.read(), media_type="text/plain", labels={"reviewed"}, disclosure="model")

    @box.tool
    def count(doc: Ref) -> str:
        """How many bytes the document has."""
        return f"LENGTH-{len(doc.read())}"

    return box


def _captured(observation: Any) -> str:
    assert not observation.is_error, observation.content
    assert len(observation.artifacts) == 1, observation.content
    artifact_id: str = observation.artifacts[0]["artifact_id"]
    return artifact_id


def _chain(vault: Any, box: Toolbox, first: Descriptor) -> list[Descriptor]:
    """shout -> pack -> shout: each step given the previous step's output by Ref."""
    step1 = box.call_sync("shout", {"doc": first.artifact_id}, scope=SCOPE)
    assert CANARY.upper() not in step1.content  # captured, not inlined: the model sees a descriptor
    one = _captured(step1)
    step2 = box.call_sync("pack", {"doc": one}, scope=SCOPE)
    two = _captured(step2)
    step3 = box.call_sync("shout", {"doc": two}, scope=SCOPE)
    assert CANARY.upper() not in step3.content
    three = _captured(step3)
    return [vault.describe(SCOPE, artifact_id) for artifact_id in (one, two, three)]


def test_a_pii_artifact_stays_pii_through_a_chain_of_three_tools(memory_vault: Vault) -> None:
    first = memory_vault.put(SCOPE, RECORD, media_type="text/csv", labels={"pii"})
    steps = _chain(memory_vault, _box(memory_vault), first)
    assert [d.labels for d in steps] == [{"pii"}] * 3
    assert steps[0].derived_from == (first.artifact_id,)
    assert steps[1].derived_from == (steps[0].artifact_id,)
    assert steps[2].derived_from == (steps[1].artifact_id,)
    assert memory_vault.read_bytes(SCOPE, steps[2].artifact_id) == RECORD.upper()


def test_a_result_carries_the_union_of_its_inputs_labels_and_the_tools_own(memory_vault: Vault) -> None:
    box = _box(memory_vault)
    a = memory_vault.put(SCOPE, b"a", labels={"pii"})
    b = memory_vault.put(SCOPE, b"b", labels={"confidential", "team:x"})
    both = _captured(box.call_sync("pack", {"doc": a.artifact_id, "extra": b.artifact_id}, scope=SCOPE))
    packed = memory_vault.describe(SCOPE, both)
    assert packed.labels == {"pii", "confidential", "team:x"}
    assert packed.derived_from == (a.artifact_id, b.artifact_id)
    tagged = memory_vault.describe(SCOPE, _captured(box.call_sync("tag", {"doc": both}, scope=SCOPE)))
    assert tagged.labels == {"pii", "confidential", "team:x", "reviewed"}  # added to, never removed from


def test_the_observation_names_the_labels_of_what_it_captured(memory_vault: Vault) -> None:
    first = memory_vault.put(SCOPE, b"x", labels={"secret"})
    observation = _box(memory_vault).call_sync("pack", {"doc": first.artifact_id}, scope=SCOPE)
    assert observation.artifacts[0]["labels"] == ["secret"]


def test_unlabelled_inputs_keep_results_inline_as_before(memory_vault: Vault) -> None:
    plain = memory_vault.put(SCOPE, b"hello")
    observation = _box(memory_vault).call_sync("shout", {"doc": plain.artifact_id}, scope=SCOPE)
    assert observation.content == "HELLO"
    assert observation.artifacts == ()


def test_a_label_without_a_builtin_meaning_does_not_withhold_text_when_no_policy_says_so(memory_vault: Vault) -> None:
    assert frozenset({"pii", "secret", "confidential"}) == WITHHELD_BY_DEFAULT
    internal = memory_vault.put(SCOPE, b"hello", labels={"team:x"})
    observation = _box(memory_vault).call_sync("shout", {"doc": internal.artifact_id}, scope=SCOPE)
    assert observation.content == "HELLO"


@pytest.mark.parametrize("label", sorted(WITHHELD_BY_DEFAULT))
def test_text_derived_from_each_builtin_label_is_captured_with_a_size_only_preview(
    memory_vault: Vault, label: str
) -> None:
    source = memory_vault.put(SCOPE, RECORD, labels={label})
    observation = _box(memory_vault).call_sync("count", {"doc": source.artifact_id}, scope=SCOPE)
    shown = json.loads(observation.content)["offloaded"]
    assert "type and size only" in shown["covers"]
    assert "LENGTH-" not in observation.content
    assert memory_vault.read_bytes(SCOPE, shown["artifact_id"]) == f"LENGTH-{len(RECORD)}".encode()
    assert memory_vault.describe(SCOPE, shown["artifact_id"]).labels == {label}


def test_the_tenant_policy_decides_what_the_model_may_see_inline(memory_vault: Vault) -> None:
    box = _box(memory_vault)
    pii = memory_vault.put(SCOPE, b"hello", labels={"pii"})
    internal = memory_vault.put(SCOPE, b"hello", labels={"team:x"})
    memory_vault.set_policy(
        SCOPE.tenant,
        Policy(
            rules=[
                Rule(id="pii-to-models", labels={"pii"}, recipients=["model:*"], action="allow"),
                Rule(id="team-x-not-to-models", labels={"team:x"}, recipients=["model:*"], action="deny"),
            ],
            version="1",
        ),
    )
    assert box.call_sync("shout", {"doc": pii.artifact_id}, scope=SCOPE).content == "HELLO"
    withheld = box.call_sync("shout", {"doc": internal.artifact_id}, scope=SCOPE)
    assert "HELLO" not in withheld.content
    captured = _captured(withheld)
    assert memory_vault.describe(SCOPE, captured).labels == {"team:x"}
    assert model_recipient(None) == "model:unknown"
    assert model_recipient("gpt-x") == "model:gpt-x"


def test_the_policy_names_the_toolboxs_own_model_as_the_recipient(memory_vault: Vault) -> None:
    memory_vault.set_policy(
        SCOPE.tenant,
        Policy(
            rules=[
                Rule(id="pii-to-the-private-model", labels={"pii"}, recipients=["model:private"], action="allow"),
                Rule(id="pii-to-no-other-model", labels={"pii"}, recipients=["model:*"], action="deny"),
            ]
        ),
    )
    source = memory_vault.put(SCOPE, b"hello", labels={"pii"})
    private, public = Toolbox(memory_vault, model="private"), Toolbox(memory_vault, model="public")
    for box in (private, public):

        @box.tool
        def shout(doc: Ref) -> str:
            return doc.text().upper()

    assert private.call_sync("shout", {"doc": source.artifact_id}, scope=SCOPE).content == "HELLO"
    withheld = public.call_sync("shout", {"doc": source.artifact_id}, scope=SCOPE)
    assert "HELLO" not in withheld.content
    assert memory_vault.describe(SCOPE, _captured(withheld)).labels == {"pii"}


def test_an_oversized_labelled_result_is_offloaded_with_its_labels(memory_vault: Vault) -> None:
    box = Toolbox(memory_vault, offload_tokens=100)

    @box.tool
    def repeat(doc: Ref) -> str:
        return doc.text() * 200

    source = memory_vault.put(SCOPE, b"word ", labels={"team:x"})  # no built-in meaning: previewed as usual
    observation = box.call_sync("repeat", {"doc": source.artifact_id}, scope=SCOPE)
    shown = json.loads(observation.content)["offloaded"]
    assert memory_vault.describe(SCOPE, shown["artifact_id"]).labels == {"team:x"}
    assert memory_vault.describe(SCOPE, shown["artifact_id"]).derived_from == (source.artifact_id,)


def test_the_async_dispatcher_taints_the_same_way(memory_vault: Vault) -> None:
    source = memory_vault.put(SCOPE, RECORD, labels={"pii"})
    observation = asyncio.run(_box(memory_vault).call("shout", {"doc": source.artifact_id}, scope=SCOPE))
    assert CANARY.upper() not in observation.content
    assert memory_vault.describe(SCOPE, _captured(observation)).labels == {"pii"}


# -- through the HTTP client -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with serve(tmp_path_factory.mktemp("taint") / "store") as server:
        yield server


def test_a_pii_artifact_stays_pii_through_three_tools_over_the_http_client(
    live: LiveServer, request: pytest.FixtureRequest
) -> None:
    with Client(live.url, live.token) as client:
        first = client.put(SCOPE, RECORD, media_type="text/csv", labels={"pii"})
        steps = _chain(client, _box(client), first)
        assert [d.labels for d in steps] == [{"pii"}] * 3
        assert [d.derived_from for d in steps] == [
            (first.artifact_id,),
            (steps[0].artifact_id,),
            (steps[1].artifact_id,),
        ]
        assert client.read_bytes(SCOPE, steps[2].artifact_id) == RECORD.upper()
    with Vault.open(live.store, read_only=True) as vault:  # the server's own store agrees
        assert vault.describe(SCOPE, steps[2].artifact_id).labels == {"pii"}


def test_over_the_http_client_the_servers_policy_decides(tmp_path_factory: pytest.TempPathFactory) -> None:
    with serve(tmp_path_factory.mktemp("taint-policy") / "store") as live:
        with Vault.open(live.store) as vault:
            rule = Rule(id="team-x-not-to-models", labels={"team:x"}, recipients=["model:*"], action="deny")
            vault.set_policy(SCOPE.tenant, Policy(rules=[rule]))
        with Client(live.url, live.token) as client:
            internal = client.put(SCOPE, b"hello", labels={"team:x"})
            observation = _box(client).call_sync("shout", {"doc": internal.artifact_id}, scope=SCOPE)
            assert "HELLO" not in observation.content
            captured = client.describe(SCOPE, _captured(observation))
            assert captured.labels == {"team:x"}
            assert captured.derived_from == (internal.artifact_id,)


# -- the MCP gateway -----------------------------------------------------------------------------------------------

IMAGE = png(400, "taint")


def _upstream() -> MCPServer:
    server = MCPServer("labelled-upstream", log_level="WARNING")

    @server.tool()
    def short_note() -> str:
        """A short text."""
        return f"note about {CANARY}"

    @server.tool()
    def photo_and_notes() -> CallToolResult:
        """An image and a long text."""
        return CallToolResult(
            content=[
                ImageContent(type="image", data=b64(IMAGE), mime_type="image/png"),
                TextContent(type="text", text="note " * 30_000),
            ]
        )

    return server


@contextlib.asynccontextmanager
async def _gateway(vault: Vault, **options: Any) -> AsyncIterator[McpClient]:
    async with McpClient(_upstream(), cache=None) as upstream:
        gateway = Gateway(vault, SCOPE, upstream, server_name="hr", options=GatewayOptions(**options))
        async with McpClient(gateway.server(), cache=None) as client:
            yield client


def test_an_upstream_configured_with_labels_labels_every_part_it_stores(embedded_vault: Vault) -> None:
    async def main() -> CallToolResult:
        async with _gateway(embedded_vault, labels={"pii", "source:hr"}) as client:
            return await client.call_tool("photo_and_notes")

    result = anyio.run(main)
    image_id = link_id(result.content[0])
    offloaded = json.loads(result.content[1].text)["offloaded"]["artifact_id"]  # type: ignore[union-attr]
    stored = {d.artifact_id: d for d in embedded_vault.list(SCOPE)}
    assert set(stored) == {image_id, offloaded}
    assert all(d.labels == {"pii", "source:hr"} for d in stored.values())
    assert hashlib.sha256(IMAGE).hexdigest() == stored[image_id].content_hash.removeprefix("sha256:")


def test_small_labelled_upstream_text_the_model_may_not_see_is_captured_not_inlined(embedded_vault: Vault) -> None:
    async def main(labels: set[str]) -> CallToolResult:
        async with _gateway(embedded_vault, labels=labels) as client:
            return await client.call_tool("short_note")

    withheld = anyio.run(main, {"pii"})
    shown = withheld.content[0].text  # type: ignore[union-attr]
    assert CANARY not in shown
    captured = json.loads(shown)["offloaded"]["artifact_id"]
    assert embedded_vault.describe(SCOPE, captured).labels == {"pii"}
    assert CANARY in embedded_vault.read_bytes(SCOPE, captured).decode()
    embedded_vault.set_policy(SCOPE.tenant, Policy([Rule(id="pii-ok", labels={"pii"}, action="allow")]))
    allowed = anyio.run(main, {"pii"})
    assert CANARY in allowed.content[0].text  # type: ignore[union-attr]
    inline = anyio.run(main, {"source:hr"})  # a label with no built-in meaning and no policy against it
    assert CANARY in inline.content[0].text  # type: ignore[union-attr]


def test_gateway_labels_are_checked_like_any_label() -> None:
    from refvault.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="a-z 0-9"):
        GatewayOptions(labels=frozenset({"Not OK"}))


def test_mcp_proxy_refuses_a_bad_label_before_starting_anything(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from refvault.cli import main

    store = tmp_path / "store"
    result = CliRunner().invoke(main, ["mcp", "proxy", "--store", str(store), "--label", "Bad Label", "--", "true"])
    assert result.exit_code == 2
    assert "a label name is 1-64 characters" in result.output
    assert not store.exists()


def test_what_a_tool_reads_or_puts_through_its_context_carries_the_labels(memory_vault: Vault) -> None:
    source = memory_vault.put(SCOPE, RECORD, media_type="text/csv", labels={"pii"})
    box = Toolbox(memory_vault)

    @box.tool
    def summarise(doc_id: str, ctx: ToolContext) -> str:
        """Read a document by id through the context."""
        return ctx.vault.read_bytes(ctx.scope, doc_id, purpose=ctx.purpose, recipient=ctx.recipient).decode()

    @box.tool
    def copy(doc_id: str, ctx: ToolContext) -> str:
        """Copy a document by id, asking for no labels."""
        data = ctx.vault.read_bytes(ctx.scope, doc_id, purpose=ctx.purpose, recipient=ctx.recipient)
        return ctx.vault.put(ctx.scope, data, media_type="text/csv", labels=set()).artifact_id

    summary = box.call_sync("summarise", {"doc_id": source.artifact_id}, scope=SCOPE)
    assert CANARY not in summary.content  # captured, not inlined: the model sees a descriptor
    captured = memory_vault.describe(SCOPE, _captured(summary))
    assert captured.labels == {"pii"}
    assert captured.derived_from == (source.artifact_id,)
    copied = box.call_sync("copy", {"doc_id": source.artifact_id}, scope=SCOPE)
    copy_id = memory_vault.read_bytes(SCOPE, _captured(copied)).decode()  # the tool's (tainted) answer
    assert memory_vault.describe(SCOPE, copy_id).labels == {"pii"}
    assert memory_vault.describe(SCOPE, copy_id).derived_from == (source.artifact_id,)


def test_a_policy_keeping_a_label_from_tools_does_not_let_a_context_read_drop_it(memory_vault: Vault) -> None:
    source = memory_vault.put(SCOPE, RECORD, media_type="text/csv", labels={"pii"})
    memory_vault.set_policy(
        SCOPE.tenant, Policy([Rule(id="pii-not-to-tools-or-models", labels={"pii"}, recipients=["tool:*", "model:*"])])
    )
    box = Toolbox(memory_vault)

    @box.tool
    def as_user(doc_id: str, ctx: ToolContext) -> str:
        """Read by id with the vault's default recipient."""
        return ctx.vault.read_bytes(ctx.scope, doc_id).decode()

    @box.tool
    def unlabel(doc_id: str, ctx: ToolContext) -> str:
        """Try to remove the label."""
        ctx.vault.declassify(ctx.scope, doc_id, remove={"pii"}, reason="tool says so")
        return "done"

    observation = box.call_sync("as_user", {"doc_id": source.artifact_id}, scope=SCOPE)
    assert CANARY not in observation.content
    assert memory_vault.describe(SCOPE, _captured(observation)).labels == {"pii"}
    refused = box.call_sync("unlabel", {"doc_id": source.artifact_id}, scope=SCOPE)
    assert refused.is_error
    assert memory_vault.describe(SCOPE, source.artifact_id).labels == {"pii"}
