"""Base64 binary outside typed parts never reaches an MCP client through the gateway, nor a preview.

The attack: an upstream MCP server returns binary that is not an image, audio or
blob part (a base64 PNG in ``structuredContent``, a ``data:`` URL in a text
block, a 30 KB image at the start of a long text) and the client got its base64,
the offload preview even beginning with it. The gateway now stores such bytes
like typed parts and shows their ``refvault://`` URI; previews show a
placeholder. What counts as base64 binary is defined once, in
:mod:`refvault.content.encoded`, and pinned by ``test_what_counts_*``.

End-to-end tests run the gateway in process between the official MCP SDK's
client and a real upstream server subprocess (``base64_upstream.py``, the SDK's
``MCPServer`` over stdio).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import CallToolResult, ResourceLink, TextContent

from refvault import Scope, Toolbox, Vault
from refvault.content import Limits, materialize
from refvault.content.encoded import MIN_DATA_URL_CHARS, MIN_RUN_CHARS, find_encoded, mask
from refvault.errors import TooLarge
from refvault.integrations.mcp.gateway import GatewayOptions, Upstream, open_gateway
from refvault.read.previews import truncation
from tests.security import base64_upstream as shapes

SCOPE = Scope("acme", "ana", "s1")
PNG = shapes.png()
BIG_PNG = shapes.big_png()


# -- helpers ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def vault(embedded_vault: Vault) -> Vault:
    return embedded_vault


@pytest.fixture(scope="module")
def upstream_url() -> Iterator[str]:
    """``base64_upstream.py`` in a subprocess (streamable HTTP), once for the module."""
    with shapes.serving() as url:
        yield url


@asynccontextmanager
async def gateway_client(vault: Vault, url: str, **options: Any) -> AsyncIterator[Client]:
    """The SDK client, through the gateway (in process), to the upstream server subprocess at ``url``."""
    upstream = Upstream(url=url)
    async with (
        open_gateway(vault, SCOPE, upstream, GatewayOptions(**options)) as gateway,
        Client(gateway.server(), cache=None) as client,
    ):
        yield client


def spellings(payload: bytes) -> set[str]:
    standard = base64.b64encode(payload).decode()
    urlsafe = base64.urlsafe_b64encode(payload).decode()
    return {standard, urlsafe, standard.rstrip("="), urlsafe.rstrip("=")}


def assert_never_received(payload: bytes, *received: Any) -> None:
    """Neither the base64 of ``payload`` nor any 64-character slice of it is in anything the client received."""
    wire = "\n".join(
        item.model_dump_json(by_alias=True) if hasattr(item, "model_dump_json") else str(item) for item in received
    )
    windows = {wire[i : i + 64] for i in range(len(wire) - 63)}
    for spelling in spellings(payload):
        assert spelling not in wire
        assert not any(spelling[j : j + 64] in windows for j in range(len(spelling) - 63)), "a 64-character slice"


def links(result: CallToolResult) -> list[ResourceLink]:
    return [block for block in result.content if isinstance(block, ResourceLink)]


def artifact_id(uri: str) -> str:
    assert uri.startswith("refvault://art_"), uri
    return uri.removeprefix("refvault://")


# -- through the gateway -----------------------------------------------------------------------------------------------


def test_a_base64_png_in_structured_content_becomes_a_link(vault: Vault, upstream_url: str) -> None:
    async def main() -> list[Any]:
        async with gateway_client(vault, upstream_url) as client:
            listed = await client.list_tools()
            result = await client.call_tool("structured_png")
            return [listed, result]

    listed, result = anyio.run(main)
    assert not result.is_error
    chart = result.structured_content["chart"]
    assert chart["mimeType"] == "image/png"
    [link] = links(result)
    assert chart["base64"] == link.uri  # the string is now the artifact's URI
    assert link.mime_type == "image/png"
    assert link.size == len(PNG)
    assert (link.meta or {})["found_in"] == "structuredContent"
    assert result.content[0] == TextContent(type="text", text="The chart is in the structured result.")
    assert vault.read_bytes(SCOPE, artifact_id(link.uri)) == PNG
    assert vault.describe(SCOPE, artifact_id(link.uri)).disclosure == "sealed"
    assert_never_received(PNG, listed, result)


def test_a_data_url_in_a_text_block_becomes_a_link(vault: Vault, upstream_url: str) -> None:
    async def main() -> CallToolResult:
        async with gateway_client(vault, upstream_url) as client:
            return await client.call_tool("data_url_text")

    result = anyio.run(main)
    [link] = links(result)
    text = result.content[0]
    assert isinstance(text, TextContent)
    assert text.text == f"Here is the chart: ![chart]({link.uri}) rendered at 12:00."
    assert (link.meta or {})["encoding"] == "data_url"
    assert vault.read_bytes(SCOPE, artifact_id(link.uri)) == PNG
    assert_never_received(PNG, result)


def test_an_embedded_blob_resource_becomes_a_link(vault: Vault, upstream_url: str) -> None:
    async def main() -> CallToolResult:
        async with gateway_client(vault, upstream_url) as client:
            return await client.call_tool("embedded_blob")

    result = anyio.run(main)
    [link] = result.content
    assert isinstance(link, ResourceLink)
    assert link.name == "q3.png"
    assert vault.read_bytes(SCOPE, artifact_id(link.uri)) == PNG
    assert_never_received(PNG, result)


def test_a_30_kb_image_in_an_offloaded_text_is_not_in_its_preview(vault: Vault, upstream_url: str) -> None:
    async def main() -> list[CallToolResult]:
        async with gateway_client(vault, upstream_url, offload_tokens=2_000) as client:
            result = await client.call_tool("big_image_report")
            preview = json.loads(result.content[0].text)["offloaded"]  # type: ignore[union-attr]
            read = await client.call_tool("read_artifact", {"artifact_id": preview["artifact_id"], "lines": [0, 3]})
            return [result, read]

    result, read = anyio.run(main)
    preview = json.loads(result.content[0].text)["offloaded"]  # type: ignore[union-attr]
    [link] = links(result)
    assert preview["head"].startswith(link.uri + "\n")  # it began with the image: now with the image's URI
    assert vault.read_bytes(SCOPE, artifact_id(link.uri)) == BIG_PNG
    stored = vault.read_bytes(SCOPE, preview["artifact_id"]).decode()
    assert stored == f"{link.uri}\n{shapes.report_lines(400)}"
    assert not read.is_error
    assert_never_received(BIG_PNG, result, read)


def test_ordinary_text_with_short_tokens_digests_and_ids_is_left_alone(vault: Vault, upstream_url: str) -> None:
    async def main() -> CallToolResult:
        async with gateway_client(vault, upstream_url) as client:
            return await client.call_tool("ordinary")

    result = anyio.run(main)
    expected = shapes.ordinary_text()
    assert result.content == [TextContent(type="text", text=expected)]
    assert result.structured_content == {"lines": expected.split("\n")}
    assert vault.list(SCOPE) == []  # nothing was stored


# -- previews (the Toolbox's offload path, which does not materialise) -------------------------------------------------


def test_offloaded_previews_show_a_placeholder_for_base64_never_the_base64(vault: Vault) -> None:
    box = Toolbox(vault, offload_tokens=2_000, preview_chars=2_000)
    encoded = base64.b64encode(BIG_PNG).decode()
    placeholder = f"[base64 omitted: image/png, {len(BIG_PNG)} bytes]"

    @box.tool
    def report() -> str:
        return f"data:image/png;base64,{encoded}\n{shapes.report_lines(400)}"

    @box.tool
    def document() -> dict[str, Any]:
        return {"image": encoded, "rows": shapes.report_lines(300).split("\n")}

    @box.tool
    def records() -> list[dict[str, Any]]:
        return [{"id": i, "thumbnail": f"data:image/png;base64,{encoded}", "note": f"row {i}"} for i in range(10)]

    async def main() -> dict[str, Any]:
        observations = {name: await box.call(name, {}, scope=SCOPE) for name in ("report", "document", "records")}
        return {name: json.loads(observation.content)["offloaded"] for name, observation in observations.items()}

    shown = asyncio.run(main())
    assert shown["report"]["head"].startswith(placeholder)  # it began with the image's base64
    assert shown["report"]["tail"].endswith(shapes.report_lines(400)[-200:])
    assert shown["report"]["preview_partial"] is True
    assert "placeholders" in shown["report"]["covers"]
    assert f'"image":"{placeholder}"' in shown["document"]["sample"]
    assert shown["records"]["kind"] == "records"
    assert shown["records"]["first_rows"][0]["thumbnail"] == placeholder
    failed = truncation(f"data:image/png;base64,{encoded} and then", max_chars=2_000, reason="StorageError")
    assert failed["text"] == f"{placeholder} and then"
    assert failed["preview_partial"] is True
    assert failed["placeholders"] == 1
    assert_never_received(BIG_PNG, *(json.dumps(each) for each in (*shown.values(), failed)))


# -- the definition ----------------------------------------------------------------------------------------------------


ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def noise(size: int, seed: str = "n") -> bytes:
    return hashlib.shake_256(seed.encode()).digest(size)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def run_of(chars: int) -> str:
    """Standard, canonical base64 of ``chars`` characters (no padding: a multiple of 4) of random bytes."""
    assert chars % 4 == 0
    return b64(b"\xff" + noise(chars // 4 * 3 - 1))


def test_what_counts_as_a_bare_base64_run() -> None:
    binary = run_of(MIN_RUN_CHARS)
    assert [(f.kind, f.start, f.end) for f in find_encoded(f"x {binary} y")] == [("base64", 2, 2 + MIN_RUN_CHARS)]
    assert find_encoded(f"x {binary[:-4]} y") == []  # 124 characters: too short
    text = b64(("ordinary words " * 20).encode())
    assert len(text) > MIN_RUN_CHARS
    assert find_encoded(text) == []  # base64 of text is not binary
    nul_text = b64(("words\x00" * 40).encode())
    assert [f.detected for f in find_encoded(nul_text)] == ["application/octet-stream"]  # a NUL: binary
    assert [f.detected for f in find_encoded(b64(PNG))] == ["image/png"]  # sniffed
    assert find_encoded(hashlib.sha512(b"x").hexdigest() * 2) == []  # hex only (256 characters)
    assert find_encoded("/usr/lib/" + "a1b2c3/" * 30) == []  # no upper-case letter: a path
    assert find_encoded("_" + binary) == []  # a piece of a URL-safe token
    assert find_encoded(binary + "-x") == []
    assert find_encoded("A" * 200) == []  # too little information (and no lower-case letter)
    padded = b64(b"\x00" + noise(201))  # 202 bytes: the last group holds 1 byte and 4 spare bits
    assert padded.endswith("==")
    assert len(find_encoded(padded)) == 1
    assert len(find_encoded(padded.rstrip("="))) == 1  # padding may be left out
    spare = ALPHABET[ALPHABET.index(padded[-3]) + 1]  # sets a spare bit: decodes, but not canonically
    assert binascii.a2b_base64(padded[:-3] + spare + "==")
    assert find_encoded(padded[:-3] + spare + "==") == []
    assert find_encoded(run_of(200)[:-3]) == []  # length 1 modulo 4 never decodes
    wrapped = base64.encodebytes(noise(600)).decode()  # MIME-wrapped at 76 characters: not recognised
    assert find_encoded(wrapped) == []


def test_what_counts_as_a_data_url() -> None:
    short = b64(b"GIF89a" + noise(6))  # 16 characters: 12 bytes
    assert len(short) == MIN_DATA_URL_CHARS
    [found] = find_encoded(f"<img src='data:image/gif;base64,{short}'>")
    assert (found.kind, found.declared, found.detected, found.size) == ("data_url", "image/gif", "image/gif", 12)
    assert find_encoded(f"data:image/gif;base64,{short[:-4]}") == []  # 12 characters: too short
    text_url = "data:text/plain;charset=utf-8;base64," + b64(b"hello, data: URLs are bytes")
    assert [f.declared for f in find_encoded(text_url)] == ["text/plain; charset=utf-8"]  # any declared type
    urlsafe = base64.urlsafe_b64encode(b"\xfb\xff" + noise(40)).decode().rstrip("=")
    [found] = find_encoded(f"DATA:;BASE64,{urlsafe}")
    assert base64.b64decode(found.canonical) == b"\xfb\xff" + noise(40)
    mixed = b64(b"\xfb\xff" + noise(40)).replace("/", "_", 1)
    assert "+" in mixed or "/" in mixed
    assert find_encoded(f"data:;base64,{mixed}") == []  # both alphabets: not one encoding
    assert find_encoded("data:text/plain,hello world and more words") == []  # not base64
    assert mask(f"a data:image/png;base64,{b64(PNG)} b") == (f"a [base64 omitted: image/png, {len(PNG)} bytes] b", 1)


def test_inline_parts_keep_the_materialisation_invariants(vault: Vault) -> None:
    """Limits are checked before the first write, parts go in result order, a retry stores nothing new."""
    other = noise(40_000, "other")
    result = {
        "content": [
            {"type": "text", "text": f"first data:image/png;base64,{b64(PNG)}"},
            {"type": "image", "data": b64(BIG_PNG), "mimeType": "image/png"},
            {"type": "text", "text": f"copy of the image: {b64(BIG_PNG)}"},  # a typed part's copy: its URI
        ],
        "structuredContent": {"blob": b64(b"\x00" + other), "again": b64(PNG)},
    }

    def run(call: str, limits: Limits | None = None) -> dict[str, Any]:
        limits = limits or Limits()
        return asyncio.run(materialize(vault, SCOPE, result, provenance="mcp:x/y", tool_call_id=call, limits=limits))

    with pytest.raises(TooLarge):
        run("call_1", Limits(per_part=len(BIG_PNG)))  # the structuredContent blob is 40,001 bytes
    with pytest.raises(TooLarge):
        run("call_1", Limits(max_parts=2))
    assert vault.list(SCOPE) == []  # refused before the first write
    projected = run("call_1")
    content = projected["content"]
    assert [block["type"] for block in content] == ["text", "resource_link", "text", "resource_link", "resource_link"]
    image_uri, first_uri, blob_uri = content[1]["uri"], content[3]["uri"], content[4]["uri"]
    assert content[0]["text"] == f"first {first_uri}"
    assert content[2]["text"] == f"copy of the image: {image_uri}"
    assert projected["structuredContent"] == {"blob": blob_uri, "again": first_uri}  # the same bytes: one part
    assert [vault.read_bytes(SCOPE, artifact_id(uri)) for uri in (image_uri, first_uri, blob_uri)] == [
        BIG_PNG,
        PNG,
        b"\x00" + other,
    ]
    stored = [vault.describe(SCOPE, artifact_id(uri)) for uri in (first_uri, image_uri, blob_uri)]
    assert len({d.created_at for d in stored}) == 1
    assert [d.source_version.get("content_index") for d in stored] == [0, 1, None]  # result order
    assert stored[2].source_version["found_in"] == "structuredContent"
    assert run("call_1") == projected  # a retry: same ids, nothing new
    assert len(vault.list(SCOPE)) == 3
    for payload in (PNG, BIG_PNG, b"\x00" + other):
        assert_never_received(payload, json.dumps(projected))
