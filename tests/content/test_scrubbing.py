"""Base64 copies of a stored part are scrubbed from everything the model sees (wrapped, chunked, percent- or JSON-
escaped, in metadata), in bounded memory and linear time, without destroying unrelated text.

Tests named ``test_fN_*`` were findings of a review (each failed before its fix, the defect named in its
docstring); ``test_d_*`` pin attacks the code already defended.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import sys
import tracemalloc
import urllib.parse
from typing import Any

import pytest

from refvault import Vault
from refvault.content import Limits
from refvault.toolbox.toolbox import Toolbox
from tests.content.parts import (
    SCOPE,
    b64,
    blob,
    dumped,
    image,
    link_id,
    materialize_module,
    noise,
    png,
    run,
    surviving,
    text,
)


@pytest.fixture
def vault(memory_vault: Vault) -> Vault:
    return memory_vault


# -- F1: sealed bytes reach the model through the recorded source URI -------------------------------------------------


def test_data_uri_of_an_embedded_blob_is_not_recorded_as_source_uri(vault: Vault) -> None:
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


def test_filename_from_uri_carries_no_base64_of_a_stored_part(vault: Vault) -> None:
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


def test_scrubber_memory_is_bounded_when_a_text_holds_a_hex_digest(vault: Vault) -> None:
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


def test_scrubbing_does_not_destroy_unrelated_text(vault: Vault) -> None:
    """Any base64-alphabet run of 63+ characters sharing one 32-character window with a part is replaced
    *whole*. Low-entropy windows match ordinary text: a WAV with a little silence (base64 'AAAA...') makes
    a DNA sequence with a poly-A tail vanish into the audio's URI."""
    wav = b"RIFF\x24\x10\x00\x00WAVEfmt " + bytes(4000)
    sequence = "GATTACACCGTAGGCTTAACGGTACCGATGCA" + "A" * 40 + "CTGACCTGA"
    value = {"content": [{"type": "audio", "data": b64(wav), "mimeType": "audio/wav"}, text("seq: " + sequence)]}
    projected = run(vault, value)
    assert projected["content"][1]["text"] == "seq: " + sequence


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
