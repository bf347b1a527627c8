"""Adversarial review of issue 5: ``refvault.content`` (materialize, sniff) and the MCP gateway.

Each test is either a bug report (it fails on the reviewed code, with the
defect named in its docstring) or a regression guard for an attack the code
already defends (it passes). Everything runs in process on a memory vault or
a temporary embedded store, except one process-cleanup test of the stdio proxy.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import importlib
import json
import os
import signal
import sys
import threading
import time
import tracemalloc
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.client.stdio import StdioServerParameters
from mcp.server.mcpserver import MCPServer
from mcp.types import (
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    TextContent,
    TextResourceContents,
)

from refvault import Scope, Vault
from refvault.blobs.memory import MemoryBlobStore
from refvault.catalog.memory import MemoryCatalog
from refvault.content import Limits, materialize
from refvault.content.materialize import safe_filename
from refvault.errors import InvalidResult, MaterializationError, NotFound, StorageError, TooLarge
from refvault.integrations.mcp.gateway import Gateway, GatewayOptions
from refvault.toolbox.toolbox import Toolbox

# ``refvault.content.materialize`` the module is shadowed by the function of the same name in the package.
materialize_module = importlib.import_module("refvault.content.materialize")

SCOPE = Scope("acme", "ana", "s1")
OTHER = Scope("acme", "bob", "s1")
PNG_HEAD = b"\x89PNG\r\n\x1a\n"
RUNNER = "import sys; from refvault.integrations.mcp.cli import mcp; mcp(sys.argv[1:], prog_name='refvault mcp')"


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


@pytest.fixture
def vault() -> Iterator[Vault]:
    opened = memory_vault()
    yield opened
    opened.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Vault]:
    with Vault.open(tmp_path / "store") as opened:
        yield opened


# =====================================================================================================================
# FINDINGS (each of these fails on the reviewed code)
# =====================================================================================================================

# -- F1: sealed bytes reach the model through the recorded source URI -------------------------------------------------


def test_f1_data_uri_of_an_embedded_blob_is_not_recorded_as_source_uri(vault: Vault) -> None:
    """An embedded blob whose ``uri`` is a ``data:`` URL of itself (<= 2048 chars) is recorded verbatim in
    ``source_version.source_uri``; ``describe_artifact`` then shows the sealed part's base64 to the model."""
    secret = b"%PDF-1.4 " + noise(600, "f1")
    encoded = b64(secret)
    projected = run(vault, {"content": [blob(secret, uri="data:application/pdf;base64," + encoded)]})
    assert encoded not in dumped(projected)  # the projection itself is scrubbed...
    artifact_id = link_id(projected["content"][0])
    descriptor = vault.describe(SCOPE, artifact_id)
    assert descriptor.disclosure == "sealed"
    assert encoded not in repr(descriptor.source_version), "sealed bytes recorded in the descriptor"
    observation = asyncio.run(
        Toolbox(vault).call("describe_artifact", {"artifact_id": artifact_id}, scope=SCOPE, tool_call_id="t")
    )
    assert surviving(observation.content, encoded) == 0, "describe_artifact shows a sealed part's base64"


# -- F2: the display filename taken from the URI is not scrubbed ------------------------------------------------------


def test_f2_filename_from_uri_carries_no_base64_of_a_stored_part(vault: Vault) -> None:
    """``name`` (from the embedded resource URI's basename) is never passed through the scrubber: a URI whose
    basename is the part's base64 puts up to 128 characters of it in the link, ``list_artifacts`` and
    ``resources/list``."""
    secret = b"%PDF-1.4 " + b"the launch code is 0000 and the vault combination is 1234; " * 20
    encoded = b64(secret)
    assert "/" not in encoded[:124]
    value = {"content": [blob(secret, uri="https://example.com/files/" + encoded[:124] + ".pdf")]}
    projected = run(vault, value)
    assert surviving(dumped(projected), encoded) == 0, f"name={projected['content'][0]['name']!r}"
    listing = asyncio.run(Toolbox(vault).call("list_artifacts", {}, scope=SCOPE, tool_call_id="t"))
    assert surviving(listing.content, encoded) == 0


# -- F3: copies of a part's base64 the scrubber does not recognise ----------------------------------------------------


def test_f3a_base64_wrapped_at_60_columns_is_scrubbed(vault: Vault) -> None:
    """The docstring promises line-wrapped copies are replaced, but only runs of >= 63 characters are
    matched: base64 wrapped at 60 (uuencode-style, many JS libraries) or 57 columns survives whole."""
    data = png(3000, "f3a")
    encoded = b64(data)
    wrapped = "\n".join(encoded[i : i + 60] for i in range(0, len(encoded), 60))
    projected = run(vault, {"content": [image(data), text(wrapped)]})
    shown = projected["content"][1]["text"]
    assert surviving("".join(shown.split()), encoded) == 0, "the wrapped copy survived"


def test_f3b_base64_split_into_a_list_of_chunks_is_scrubbed(vault: Vault) -> None:
    """structuredContent holding the base64 as a list of short chunks (a streaming/chunked API shape)."""
    data = png(3000, "f3b")
    encoded = b64(data)
    chunks = [encoded[i : i + 48] for i in range(0, len(encoded), 48)]
    projected = run(vault, {"content": [image(data)], "structuredContent": {"chunks": chunks}})
    joined = "".join(projected["structuredContent"].get("chunks", []))
    assert surviving(joined, encoded) == 0, "the chunked copy survived"


def test_f3c_percent_encoded_data_url_is_scrubbed(vault: Vault) -> None:
    """A percent-encoded data: URL (e.g. inside a link's query string): '+', '/', '=' become %2B/%2F/%3D,
    which break base64 runs into pieces shorter than 63 characters."""
    data = png(3000, "f3c")
    encoded = b64(data)
    url = "https://viewer.example/?src=" + urllib.parse.quote("data:image/png;base64," + encoded, safe="")
    projected = run(vault, {"content": [image(data)], "structuredContent": {"viewer": url}})
    assert surviving(urllib.parse.unquote(dumped(projected)), encoded) == 0, "the percent-encoded copy survived"


def test_f3d_json_escaped_copy_in_a_text_block_is_scrubbed(vault: Vault) -> None:
    """The MCP convention serialises structured content into a text block; serialisers that escape '/'
    (PHP's json_encode, some .NET/Java ones) write '\\/', which splits the base64 into short runs."""
    data = png(3000, "f3d")
    encoded = b64(data)
    serialised = json.dumps({"image": encoded}).replace("/", "\\/")
    projected = run(vault, {"content": [image(data), text(serialised)]})
    shown = projected["content"][1]["text"].replace("\\/", "/")
    assert surviving(shown, encoded) == 0, "the JSON-escaped copy survived"


# -- F4, F5: memory and CPU amplification in the scrubber -------------------------------------------------------------


def test_f4_scrubber_memory_is_bounded_when_a_text_holds_a_hex_digest(vault: Vault) -> None:
    """Any text with a 63+ character [A-Za-z0-9] run (a SHA-256 hex digest!) makes the scrubber index every
    32-character window of up to four spellings of every part: ~16x the part size in memory (a 128 MiB
    result -> ~2-3 GiB). Peak for a 1 MiB part should stay within a few copies of it."""
    data = png(1 << 20, "f4")
    value = {"content": [image(data), text("sha256 " + hashlib.sha256(data).hexdigest())]}
    tracemalloc.start()
    try:
        run(vault, value)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * len(data), f"peak {peak / 1e6:.1f} MB for a {len(data) / 1e6:.1f} MB part"


def test_f5a_preflight_and_projection_run_off_the_event_loop(vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    """Projection and preflight decoding are linear but unbounded in the text they scan (an 8 MiB base64 text
    took ~1.3 s): on the event loop they would stall every other request of the gateway, so both run in
    worker threads."""
    threads: dict[str, list[threading.Thread]] = {"preflight": [], "project": []}
    for name, attribute in (("preflight", "_preflight"), ("project", "_project")):
        real = getattr(materialize_module, attribute)

        def spy(*args: Any, _real: Any = real, _name: str = name) -> Any:
            threads[_name].append(threading.current_thread())
            return _real(*args)

        monkeypatch.setattr(materialize_module, attribute, spy)
    other = b64(noise(1 << 20, "f5a"))
    value = {"content": [image(png(500, "f5a")), text(other)]}
    loop_thread: list[threading.Thread] = []

    async def main() -> Any:
        loop_thread.append(threading.current_thread())
        return await materialize(vault, SCOPE, value, provenance="p", tool_call_id="c")

    asyncio.run(main())
    assert threads["preflight"]
    assert threads["project"]
    assert all(thread is not loop_thread[0] for found in threads.values() for thread in found)


def _refvault_lines_executed(call: Any) -> int:
    """How many lines of refvault's own code ``call()`` executes: a deterministic measure of work."""
    executed = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal executed
        if "/refvault/" not in frame.f_code.co_filename:
            return None
        if event == "line":
            executed += 1
        return tracer

    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
    return executed


def test_f5b_projection_is_not_quadratic_in_the_number_of_parts() -> None:
    """``_Scrubber.text`` used to sort every spelling of every part and run ``needle in value`` for each, for
    every string with a 14+ character word: cost = parts x strings (2,000 parts: ~1 s; 30,000: minutes).
    Counted in executed lines rather than seconds: four times the parts and strings must cost about four
    times the work (a quadratic projection costs sixteen times)."""

    class Stored:
        def __init__(self, index: int) -> None:
            self.artifact_id = f"art_{index:026d}"
            self.content_hash = "sha256:" + "0" * 64
            self.disclosure = "sealed"
            self.filename = "f.bin"
            self.media_type = "application/octet-stream"
            self.size = 12

    def work(n: int) -> int:
        blocks: list[dict[str, Any]] = []
        for i in range(n):
            blocks.append(image(noise(12, f"q{i}"), "image/x-icon-ish"))
            blocks.append(text(f"internationalization {i}"))
        wire = {"content": blocks}
        parts = materialize_module._preflight(wire, Limits())
        stored = {part.index: Stored(part.index) for part in parts}
        return _refvault_lines_executed(lambda: materialize_module._project(wire, parts, stored, Limits()))

    small, large = work(200), work(800)
    assert large / small < 6, f"4x the parts cost {large / small:.1f}x the work"


# -- F6: no bound on the number of parts ------------------------------------------------------------------------------


def test_f6_a_result_with_very_many_parts_is_refused_before_any_write(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Limits bound bytes, never the part count: 20,000 one-byte images (~1 MB of JSON) become 20,000
    durable writes (each fsync'd + a catalog commit), plus the quadratic projection above."""
    calls: list[int] = []

    def counting_put(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        raise RuntimeError("stop: this test only counts whether a write was attempted")

    monkeypatch.setattr(vault, "put", counting_put)
    value = {"content": [{"type": "image", "data": "AA==", "mimeType": "image/png"}] * 20_000}
    with pytest.raises(MaterializationError) as caught:
        run(vault, value)
    assert calls == [], "a write was attempted for a result of 20,000 parts"
    assert isinstance(caught.value, TooLarge)


# -- F7: a write lands after the cancellation was delivered ----------------------------------------------------------


def test_f7_no_write_lands_after_materialize_reports_cancellation(vault: Vault) -> None:
    """``vault.put`` runs in ``asyncio.to_thread``; a cancel while it is in flight raises CancelledError at
    once, but the thread goes on and publishes the part *after* the caller was told the call was cancelled
    (and after it may have closed the vault). The store must not change once CancelledError surfaces."""
    real_put = vault.put
    entered = threading.Event()

    def slow_put(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        time.sleep(0.3)
        return real_put(*args, **kwargs)

    vault.put = slow_put  # type: ignore[method-assign]

    async def main() -> tuple[int, int]:
        task = asyncio.create_task(
            materialize(vault, SCOPE, {"content": [image(png(100, "f7"))]}, provenance="p", tool_call_id="c")
        )
        while not entered.is_set():
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        at_cancel = len(vault.list(SCOPE))
        await asyncio.sleep(0.6)
        return at_cancel, len(vault.list(SCOPE))

    at_cancel, later = asyncio.run(main())
    assert later == at_cancel, f"{later - at_cancel} part(s) were written after CancelledError was raised"


# -- F8: one created_at per result does not survive a retry -----------------------------------------------------------


def test_f8_parts_share_one_created_at_after_a_partial_failure_and_retry(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retry replays part 0 (keeping its first created_at) but stores part 1 with the retry's new clock:
    the parts of one result end up with two created_at values."""
    real_put = vault.put
    calls: list[int] = []

    def failing_second(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise StorageError(28, "No space left on device")
        return real_put(*args, **kwargs)

    value = {"content": [image(png(100, "a")), image(png(100, "b"))]}
    monkeypatch.setattr(vault, "put", failing_second)
    with pytest.raises(MaterializationError):
        run(vault, value)
    time.sleep(0.01)
    monkeypatch.setattr(vault, "put", real_put)
    projected = run(vault, value)
    moments = {vault.describe(SCOPE, link_id(block)).created_at for block in projected["content"]}
    assert len(moments) == 1, f"one result, {len(moments)} created_at values"


# -- F11: errors that escape as non-MaterializationError after writes -------------------------------------------------


def test_f11_deeply_nested_structured_content_fails_as_a_materialization_error(vault: Vault) -> None:
    """The scrubber recurses; 5,000-deep structuredContent (dict path) raises a raw RecursionError *after*
    the parts were written, instead of a permanent MaterializationError (or an omission note)."""
    deep: Any = "leaf"
    for _ in range(5000):
        deep = [deep]
    value = {"content": [image(png(50, "f11"))], "structuredContent": {"d": deep}}
    try:
        projected = run(vault, value)
    except MaterializationError:
        return
    except RecursionError:
        pytest.fail("RecursionError escaped materialize (not a MaterializationError; parts already written)")
    assert "refvault_omitted" in projected["structuredContent"]


# -- F12, F13, F14: block kinds, media types and names --------------------------------------------------------------


def test_f12_unknown_block_kind_carrying_base64_is_not_passed_through(vault: Vault) -> None:
    """Blocks of an unknown ``type`` pass through untouched, ``data`` and all (dict path): a future/vendor
    binary kind (e.g. 'video') reaches the model as base64. Refuse it or store it."""
    other = b64(noise(3000, "f12"))
    value = {"content": [image(png(100, "f12")), {"type": "video", "data": other, "mimeType": "video/mp4"}]}
    try:
        projected = run(vault, value)
    except InvalidResult:
        return
    assert other not in dumped(projected), "base64 of an unknown binary block kind reached the projection"


def test_f13_an_image_block_is_not_stored_as_html(vault: Vault) -> None:
    """An ``image`` (or ``audio``) block declaring text/html with HTML bytes is a 'match' and is stored as
    text/html: the block kind is never reconciled with the media type."""
    html = b"<!doctype html><html><body><script>alert(1)</script></body></html>"
    link = run(vault, {"content": [image(html, "text/html")]})["content"][0]
    assert not link["mimeType"].startswith("text/html"), link["_meta"]
    assert link["_meta"]["media_type_check"] != "match"


def test_f14_a_name_from_the_uri_does_not_contradict_the_stored_type(vault: Vault) -> None:
    """Declared image/png, bytes are HTML: stored (rightly) as octet-stream, but named ``invoice.html`` from
    the URI. The extension re-introduces the executable type the media-type check refused to trust."""
    html = b"<!doctype html><html><body><script>alert(1)</script></body></html>"
    link = run(vault, {"content": [blob(html, uri="https://h/invoice.html", mime="image/png")]})["content"][0]
    assert link["mimeType"] == "application/octet-stream"
    assert not link["name"].lower().endswith((".html", ".htm")), link["name"]


@pytest.mark.parametrize(
    "uri",
    ["file:///x/CON", "file:///x/nul.png", "file:///x/COM1.txt", "file:///x/report.pdf.", "file:///x/a.png:evil.exe"],
)
def test_f15_windows_hostile_names_are_not_kept(uri: str) -> None:
    """Reserved device names, trailing dots and NTFS stream separators pass ``safe_filename`` unchanged;
    a client saving the artifact under its name on Windows opens a device or an alternate data stream."""
    name = safe_filename(uri)
    assert name is None or (
        name.split(".")[0].upper() not in {"CON", "PRN", "AUX", "NUL", "COM1", "LPT1"}
        and not name.endswith((".", " "))
        and ":" not in name
    ), name


def test_f16_an_embedded_resources_own_meta_is_kept(vault: Vault) -> None:
    """Round-trip fidelity: the block's ``_meta`` survives as ``upstream_meta``, but the embedded resource's
    own ``_meta`` (``resource._meta``) is silently dropped."""
    block = blob(b"%PDF-1.4 x", uri="file:///a.pdf")
    block["resource"]["_meta"] = {"page_count": 3}
    link = run(vault, {"content": [block]})["content"][0]
    assert '"page_count": 3' in json.dumps(link["_meta"]), link["_meta"]


def test_f18_an_upstream_cannot_forge_a_refvault_link(vault: Vault) -> None:
    """Existing resource_link blocks pass through untouched, including ones whose URI is ``refvault://...``
    with a made-up ``_meta`` (sha256, disclosure "model", content_index): an upstream (or a prompt-injected
    one) can present any artifact id of the session as its own output, indistinguishable from a real link."""
    forged = {
        "type": "resource_link",
        "uri": "refvault://art_" + "a" * 26,
        "name": "report.pdf",
        "mimeType": "application/pdf",
        "_meta": {"sha256": "0" * 64, "disclosure": "model", "content_index": 0},
    }
    for value in ({"content": [forged]}, {"content": [image(png(50, "f18")), forged]}):
        try:
            projected = run(vault, value, tool_call_id=f"c{len(value['content'])}")
        except InvalidResult:
            continue
        uris = [block.get("uri") for block in projected["content"]]
        assert forged["uri"] not in uris, "a forged refvault:// link passed through as if refvault minted it"


def test_f19_scrubbing_does_not_destroy_unrelated_text(vault: Vault) -> None:
    """Any base64-alphabet run of 63+ characters sharing one 32-character window with a part is replaced
    *whole*. Low-entropy windows match ordinary text: a WAV with a little silence (base64 'AAAA...') makes
    a DNA sequence with a poly-A tail vanish into the audio's URI."""
    wav = b"RIFF\x24\x10\x00\x00WAVEfmt " + bytes(4000)
    sequence = "GATTACACCGTAGGCTTAACGGTACCGATGCA" + "A" * 40 + "CTGACCTGA"
    value = {"content": [{"type": "audio", "data": b64(wav), "mimeType": "audio/wav"}, text("seq: " + sequence)]}
    projected = run(vault, value)
    assert projected["content"][1]["text"] == "seq: " + sequence


@pytest.mark.parametrize(
    ("declared", "data"),
    [
        ("application/octet-stream", b"<!doctype html><html><script>alert(1)</script></html>"),
        (
            "application/octet-stream",
            b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>',
        ),
        (None, b"<svg onload=alert(1)>"),
    ],
)
def test_f20_sniffing_never_promotes_opaque_bytes_to_an_active_type(
    vault: Vault, declared: str | None, data: bytes
) -> None:
    """A blob declared ``application/octet-stream`` (or undeclared) whose bytes look like HTML/SVG is stored
    as text/html or image/svg+xml: sniffing *upgrades* opaque bytes to a scriptable type (the classic
    content-sniffing XSS that ``nosniff`` exists to stop); ``resources/read`` then serves it under that type."""
    link = run(vault, {"content": [blob(data, uri="https://h/x", mime=declared)]})["content"][0]
    assert link["mimeType"].split(";")[0] not in {"text/html", "image/svg+xml", "application/xhtml+xml"}, link


# -- gateway findings (in process: SDK Client -> Gateway server -> SDK Client -> MCPServer upstream) -------------------

SECRET_PDF = b"%PDF-1.4 " + noise(600, "gw")
SECRET_B64 = b64(SECRET_PDF)
GW_PNG = png(500, "gw-png")


def _review_upstream() -> MCPServer:
    server = MCPServer("review-upstream", log_level="WARNING")

    @server.tool()
    def big_resource() -> CallToolResult:
        """A 1 MB embedded *text* resource (about 250,000 tokens)."""
        contents = TextResourceContents(uri="file:///big.txt", mime_type="text/plain", text="word " * 200_000)
        return CallToolResult(content=[EmbeddedResource(type="resource", resource=contents)])

    @server.tool()
    def image_with_rows() -> CallToolResult:
        """An image beside ~140 KB of ordinary structured data."""
        rows = [{"i": i, "name": f"row {i}"} for i in range(5000)]
        return CallToolResult(
            content=[ImageContent(type="image", data=b64(GW_PNG), mime_type="image/png")],
            structured_content={"rows": rows},
        )

    @server.tool()
    def data_uri_blob() -> CallToolResult:
        """An embedded PDF whose URI is a data: URL of itself."""
        contents = BlobResourceContents(
            uri="data:application/pdf;base64," + SECRET_B64, mime_type="application/pdf", blob=SECRET_B64
        )
        return CallToolResult(content=[EmbeddedResource(type="resource", resource=contents)])

    @server.tool()
    def sealed_image() -> CallToolResult:
        """A plain image (stored sealed by default)."""
        return CallToolResult(content=[ImageContent(type="image", data=b64(GW_PNG), mime_type="image/png")])

    @server.tool()
    def echo_error(size: int) -> CallToolResult:
        """An upstream isError result with a long message."""
        return CallToolResult(content=[TextContent(type="text", text="E" * size)], is_error=True)

    return server


@contextlib.asynccontextmanager
async def gateway_client(vault: Vault, scope: Scope = SCOPE, **options: Any) -> AsyncIterator[Client]:
    async with Client(_review_upstream(), cache=None) as upstream_client:
        gateway = Gateway(vault, scope, upstream_client, server_name="review", options=GatewayOptions(**options))
        async with Client(gateway.server(), cache=None) as client:
            yield client


def test_f9_gateway_offloads_an_oversized_embedded_text_resource(store: Vault) -> None:
    """``_offload`` only looks at TextContent blocks: a 1 MB embedded text resource reaches the model whole
    (~250,000 tokens against a 20,000-token threshold)."""

    async def main() -> int:
        async with gateway_client(store) as client:
            result = await client.call_tool("big_resource")
            return len(result.model_dump_json())

    size = anyio.run(main)
    assert size < 50_000, f"{size} characters reached the client"


def test_f10_gateway_keeps_structured_content_beside_a_binary_part(store: Vault) -> None:
    """materialize() replaces structuredContent over 64 KiB with a ``refvault_omitted`` note whenever the
    result has a binary part, *before* the gateway's offload sees it: ordinary data is dropped and stored
    nowhere (the gateway docstring promises oversized structuredContent is offloaded)."""

    async def main() -> Any:
        async with gateway_client(store) as client:
            return (await client.call_tool("image_with_rows")).structured_content

    structured = anyio.run(main)
    assert "refvault_omitted" not in structured, structured
    assert "rows" in structured or "offloaded" in structured


def test_f1_through_the_gateway_describe_artifact_shows_no_sealed_base64(store: Vault) -> None:
    async def main() -> tuple[str, str]:
        async with gateway_client(store) as client:
            result = await client.call_tool("data_uri_blob")
            artifact_id = link_id(result.content[0])
            described = await client.call_tool("describe_artifact", {"artifact_id": artifact_id})
            return result.model_dump_json(), described.model_dump_json()

    projected, described = anyio.run(main)
    assert surviving(projected, SECRET_B64) == 0
    assert surviving(described, SECRET_B64) == 0, "describe_artifact shows the sealed blob's base64"


# -- F17: the stdio proxy orphans its upstream on SIGTERM -------------------------------------------------------------

_SLOW_UPSTREAM = """
import os, time
from mcp.server.mcpserver import MCPServer
server = MCPServer("pids", log_level="WARNING")

@server.tool()
def pids() -> str:
    return f"{os.getpid()} {os.getppid()}"

@server.tool()
def slow() -> str:
    time.sleep(30)
    return "done"

server.run("stdio")
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_f17_sigterm_to_the_stdio_proxy_stops_its_upstream(tmp_path: Path) -> None:
    """In stdio mode the proxy installs no SIGTERM handling (HTTP mode does): SIGTERM while a tool call is
    in flight kills the proxy without closing the SDK client, so the upstream keeps running (for as long
    as its tool does; forever if it hangs). A closed stdin alone does not stop it."""
    script = tmp_path / "slow_upstream.py"
    script.write_text(_SLOW_UPSTREAM)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFVAULT_")}
    args = ["-c", RUNNER, "proxy", "--store", str(tmp_path / "store"), "--", sys.executable, str(script)]
    pids: dict[str, int] = {}

    async def main() -> None:
        async with Client(StdioServerParameters(command=sys.executable, args=args, env=env), cache=None) as client:
            reply = await client.call_tool("pids")
            upstream_pid, proxy_pid = map(int, reply.content[0].text.split())  # type: ignore[union-attr]
            pids.update(upstream=upstream_pid, proxy=proxy_pid)
            async with anyio.create_task_group() as group:

                async def call_slow() -> None:
                    with contextlib.suppress(Exception):
                        await client.call_tool("slow")

                group.start_soon(call_slow)
                await anyio.sleep(0.5)
                os.kill(proxy_pid, signal.SIGTERM)
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline and _alive(upstream_pid):
                    await anyio.sleep(0.1)
                group.cancel_scope.cancel()

    try:
        anyio.run(main)
        assert not _alive(pids["proxy"])
        assert not _alive(pids["upstream"]), "the upstream outlived the SIGTERM'd proxy by 5 s"
    finally:
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# =====================================================================================================================
# DEFENDED (these pass: regression guards for attacks the code already handles)
# =====================================================================================================================


@pytest.mark.parametrize(
    "bad",
    [
        "iVBO Rw0K",  # whitespace
        "iVBORw0K\nGgo=",  # newline
        "-_-_",  # URL-safe alphabet
        "iVBORw0KGgp=",  # non-zero padding bits (canonical is iVBORw0KGgo=)
        "data:image/png;base64,iVBORw0KGgo=",  # a data URL where raw base64 belongs
        "iVBORw0KGgo",  # unpadded
        "iVBORw0KGgo==",  # over-padded
        "iVBO=w0KGgo=",  # padding in the middle
        "iVBORw0KGgo\u00e9",  # non-ASCII
    ],
)
def test_d_strict_base64_refused_with_zero_writes(vault: Vault, bad: str) -> None:
    value = {"content": [image(png(50, "ok")), {"type": "image", "data": bad, "mimeType": "image/png"}]}
    with pytest.raises(InvalidResult) as caught:
        run(vault, value)
    assert caught.value.permanent is True
    assert caught.value.content_index == 1
    assert manifests(vault) == set(), "the valid first part was written before the second was refused"


@pytest.mark.parametrize(
    "late",
    [
        {"type": "image", "data": "", "mimeType": "image/png"},
        {"type": "image", "data": b64(b"x"), "mimeType": "not a type"},
        {"type": "image", "data": b64(b"x"), "mimeType": "image/png; " + "a=b; " * 60},
        {"type": "resource", "resource": {"uri": "file:///x", "blob": 42}},
        {"type": "audio", "data": b64(b"x")},
    ],
)
def test_d_a_refusal_late_in_the_result_means_no_write_at_all(vault: Vault, late: dict[str, Any]) -> None:
    value = {"content": [image(png(50, "a")), text("t"), image(png(50, "b")), late]}
    with pytest.raises(MaterializationError):
        run(vault, value)
    assert manifests(vault) == set()


def test_d_limits_exact_boundaries(vault: Vault) -> None:
    limits = Limits(per_part=300, per_result=600)
    run(vault, {"content": [image(png(292, "p1"))]}, limits=limits)  # 8 + 292 = 300: at the limit
    with pytest.raises(TooLarge):
        run(vault, {"content": [image(png(293, "p2"))]}, limits=limits, tool_call_id="c2")
    run(vault, {"content": [image(png(292, "p3")), image(png(292, "p4"))]}, limits=limits, tool_call_id="c3")
    before = manifests(vault)
    with pytest.raises(TooLarge) as caught:
        run(
            vault,
            {"content": [image(png(292, "p5")), image(png(292, "p6")), image(b"\x00")]},
            limits=limits,
            tool_call_id="c4",
        )
    assert caught.value.content_index == 2
    assert manifests(vault) == before


def test_d_a_huge_part_is_refused_before_it_is_decoded(vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    decoded: list[int] = []
    real = binascii.a2b_base64

    def spy(data: Any, **kwargs: Any) -> bytes:
        decoded.append(len(data))
        return real(data, **kwargs)

    monkeypatch.setattr(materialize_module.binascii, "a2b_base64", spy)
    huge = "A" * (8 << 20)  # 6 MiB decoded; the limit is 1 MiB
    value = {"content": [image(png(10, "s")), {"type": "image", "data": huge, "mimeType": "image/png"}]}
    with pytest.raises(TooLarge):
        run(vault, value, limits=Limits(per_part=1 << 20))
    assert decoded == [], "something was decoded before the size check"
    assert manifests(vault) == set()


def test_d_retry_with_reordered_parts_is_refused_and_stores_nothing(vault: Vault) -> None:
    first, second = image(png(80, "r1")), image(png(80, "r2"))
    run(vault, {"content": [first, second]})
    before = manifests(vault)
    with pytest.raises(MaterializationError) as caught:
        run(vault, {"content": [second, first]})
    assert caught.value.permanent is True
    assert manifests(vault) == before


def test_d_two_results_under_one_tool_call_id_conflict(vault: Vault) -> None:
    run(vault, {"content": [image(png(80, "one"))]})
    with pytest.raises(MaterializationError):
        run(vault, {"content": [image(png(80, "two"))]})
    with pytest.raises(MaterializationError):  # same bytes, other declared type: other metadata
        run(vault, {"content": [image(png(80, "one"), "image/apng")]})


def test_d_the_same_tool_call_id_in_another_scope_is_another_capture(vault: Vault) -> None:
    value = {"content": [image(png(80, "x"))]}
    mine = link_id(run(vault, value)["content"][0])
    theirs = link_id(run(vault, value, scope=OTHER)["content"][0])
    assert mine != theirs
    with pytest.raises(NotFound):
        vault.describe(OTHER, mine)
    with pytest.raises(NotFound):
        vault.describe(SCOPE, theirs)


def test_d_base64_is_scrubbed_from_structured_meta_annotations_keys_and_data_urls(vault: Vault) -> None:
    data = png(3000, "scrub")
    encoded = b64(data)
    urlsafe = base64.urlsafe_b64encode(data).decode()
    mime_wrapped = base64.encodebytes(data).decode()  # 76 columns
    pem_wrapped = "\r\n".join(encoded[i : i + 64] for i in range(0, len(encoded), 64))
    value = {
        "content": [
            image(data, annotations={"note": encoded}, _meta={"thumb": encoded[:500]}),
            text(f"see data:image/png;name=shot.png;charset=binary;base64,{encoded} ok"),
            text(mime_wrapped),
            text(pem_wrapped),
            {"type": "resource_link", "uri": "https://x/y", "name": "y", "_meta": {"dup": urlsafe.rstrip("=")}},
        ],
        "structuredContent": {
            encoded: "as a key",
            "nested": [{"deep": {"v": "DATA:IMAGE/PNG;BASE64," + encoded}}],
            "trunc": encoded[100:900],
        },
        "_meta": {"copy": urlsafe},
        "isError": False,
    }
    projected = run(vault, value)
    everything = dumped(projected)
    # Only 63+ character spans are promised (shorter runs could be ordinary words); check 64-char windows,
    # with line breaks kept (each wrapped line of 64/76 characters must be gone on its own).
    assert surviving(everything, encoded) == 0
    assert surviving(everything, urlsafe) == 0
    for line in mime_wrapped.split() + pem_wrapped.split():
        if len(line) >= 63:
            assert line not in everything


def test_d_callToolResult_round_trip_keeps_fields() -> None:
    vault = memory_vault()
    wire = {
        "content": [
            {"type": "text", "text": "hi", "annotations": {"audience": ["user"], "priority": 0.5}, "_meta": {"x": 1}},
            image(png(50, "rt"), annotations={"audience": ["assistant"]}, _meta={"y": 2}),
        ],
        "structuredContent": {"k": [1, None, "v"]},
        "isError": True,
        "_meta": {"trace": "abc", "n": None},
    }
    projected = run(vault, CallToolResult.model_validate(wire))
    assert isinstance(projected, CallToolResult)
    assert projected.is_error is True
    assert projected.meta == {"trace": "abc", "n": None}
    assert projected.structured_content == {"k": [1, None, "v"]}
    assert projected.content[0] == CallToolResult.model_validate(wire).content[0]
    link = projected.content[1]
    assert link.type == "resource_link"
    assert link.annotations is not None
    assert link.annotations.audience == ["assistant"]
    assert link.meta is not None
    assert link.meta["upstream_meta"] == {"y": 2}


@pytest.mark.parametrize(
    ("declared", "data"),
    [
        ("image/png", b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>'),
        ("image/svg+xml", b"<!doctype html><html><script>alert(1)</script></html>"),
        ("image/png", b"<html><script>alert(1)</script></html>"),
        ("text/plain", b"<svg onload=alert(1)>"),
        ("image/jpeg", PNG_HEAD + b"rest"),
    ],
)
def test_d_declared_and_detected_disagree_stores_octet_stream(vault: Vault, declared: str, data: bytes) -> None:
    link = run(vault, {"content": [image(data, declared)]})["content"][0]
    assert link["mimeType"] == "application/octet-stream"
    assert link["_meta"]["media_type_check"] == "mismatch"
    descriptor = vault.describe(SCOPE, link_id(link))
    assert descriptor.source_version["declared_media_type"] == declared
    assert descriptor.source_version["media_type_check"] == "mismatch"


def test_d_media_type_parameters_and_case_are_canonical(vault: Vault) -> None:
    link = run(vault, {"content": [image(png(50, "mt"), "Image/PNG; Foo=Bar; a=b")]})["content"][0]
    assert link["mimeType"] == "image/png; a=b; foo=Bar"


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("file:///srv/../../etc/passwd", "passwd"),
        ("file:///x/..%2F..%2Fetc%2Fshadow", "shadow"),
        ("file:///x/a%00b.png", "ab.png"),
        ("file:///x/gnp\u202e.exe", "gnp.exe"),
        ("file:///x/\u200bzero\u2066width\u2069.png", "zerowidth.png"),
        ("C:\\Users\\me\\evil.png", None),
        ("file:///x/%2e%2e", None),
        ("file:///x/" + "a" * 300 + ".png", "a" * 124 + ".png"),
        ("file:///x/" + "b" * 3000, None),
    ],
)
def test_d_safe_filename_attacks(uri: str, expected: str | None) -> None:
    assert safe_filename(uri) == expected


def test_d_gateway_sealed_artifacts_do_not_leak_through_reads(store: Vault) -> None:
    other_id = store.put(OTHER, b"bob's words", media_type="text/plain").artifact_id
    png_b64 = b64(GW_PNG)

    async def main() -> list[str]:
        seen: list[str] = []
        async with gateway_client(store) as client:
            result = await client.call_tool("sealed_image")
            artifact_id = link_id(result.content[0])
            seen.append(result.model_dump_json())
            for tool, arguments in [
                ("load_artifacts", {"artifact_ids": [artifact_id]}),
                ("read_artifact", {"artifact_id": artifact_id}),
                ("query_artifact", {"artifact_id": artifact_id}),
                ("describe_artifact", {"artifact_id": artifact_id}),
                ("list_artifacts", {}),
            ]:
                seen.append((await client.call_tool(tool, arguments)).model_dump_json())
            with pytest.raises(MCPError, match="usable by reference only"):
                await client.read_resource(f"refvault://{artifact_id}")
            messages = []
            for uri in (f"refvault://{other_id}", "refvault://art_" + "a" * 26):
                with pytest.raises(MCPError) as caught:
                    await client.read_resource(uri)
                messages.append(caught.value.message.replace(uri, "<uri>"))
            assert len(set(messages)) == 1, "another scope's artifact is distinguishable from a missing one"
            listed = (await client.list_resources()).resources
            assert [str(r.uri) for r in listed] == [f"refvault://{artifact_id}"]
            foreign = await client.call_tool("describe_artifact", {"artifact_id": other_id})
            assert foreign.is_error
            assert "bob" not in foreign.model_dump_json()
        return seen

    for shown in anyio.run(main):
        assert surviving(shown, png_b64) == 0


def test_d_gateway_offloads_an_oversized_upstream_error_text(store: Vault) -> None:
    async def main() -> CallToolResult:
        async with gateway_client(store) as client:
            return await client.call_tool("echo_error", {"size": 400_000})

    result = anyio.run(main)
    assert result.is_error
    assert len(result.model_dump_json()) < 20_000


def test_d_concurrent_retries_of_one_call_agree(store: Vault) -> None:
    blocks = [image(png(20_000, f"cc{i}")) for i in range(5)]

    async def main() -> list[Any]:
        calls = [materialize(store, SCOPE, {"content": blocks}, provenance="p", tool_call_id="dup") for _ in range(4)]
        return await asyncio.gather(*calls)

    results = asyncio.run(main())
    ids = [[link_id(block) for block in result["content"]] for result in results]
    assert all(each == ids[0] for each in ids)
    assert len(store.list(SCOPE)) == 5
