"""Materialising binary tool content (issue 5, DESIGN.md idea 2): ``refvault.content.materialize``.

Every test that touches a vault runs on the memory and the embedded backends
(the ``vault`` fixture), for both forms of a result where the form matters: the
MCP SDK's ``CallToolResult`` and its wire-form dict.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import hashlib
import json
import os
import random
import subprocess
import sys
import urllib.parse
import uuid
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.types import CallToolResult

from refvault import AsyncVault, AuditRecord, Scope, Vault
from refvault.blobs.filesystem import FilesystemBlobStore
from refvault.content import Limits, materialize, sniff_media_type
from refvault.content.materialize import idempotency_key, safe_filename
from refvault.content.scrub import Scrubber
from refvault.content.sniff import classify, extension_for
from refvault.errors import (
    EmptyPart,
    InvalidArgument,
    InvalidMetadata,
    InvalidResult,
    MaterializationError,
    NotFound,
    StorageError,
    TooLarge,
)

KINDS = ("dict", "model")
PNG = b"\x89PNG\r\n\x1a\n"
WAV_HEAD = b"RIFF\x24\x00\x00\x00WAVEfmt "
PDF_HEAD = b"%PDF-1.7\n"
JPEG_HEAD = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00"


# -- helpers -------------------------------------------------------------------------------------------------------


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def png(size: int = 300, seed: int = 0) -> bytes:
    """PNG-headed bytes of exactly ``size`` bytes (deterministic for a seed)."""
    body = hashlib.shake_256(f"png-{seed}".encode()).digest(max(size - len(PNG), 0))
    return (PNG + body)[:size]


def wav(size: int = 400) -> bytes:
    return (WAV_HEAD + hashlib.shake_256(b"wav").digest(size))[:size]


def pdf(size: int = 500) -> bytes:
    return (PDF_HEAD + hashlib.shake_256(b"pdf").digest(size))[:size]


def image(data: bytes, mime: str = "image/png", **extra: Any) -> dict[str, Any]:
    return {"type": "image", "data": b64(data), "mimeType": mime, **extra}


def audio(data: bytes, mime: str = "audio/wav") -> dict[str, Any]:
    return {"type": "audio", "data": b64(data), "mimeType": mime}


def blob(data: bytes, mime: str | None = "application/pdf", uri: str = "file:///reports/q3.pdf") -> dict[str, Any]:
    resource: dict[str, Any] = {"uri": uri, "blob": b64(data)}
    if mime is not None:
        resource["mimeType"] = mime
    return {"type": "resource", "resource": resource}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def text_resource(value: str = "hello", uri: str = "file:///notes.txt") -> dict[str, Any]:
    return {"type": "resource", "resource": {"uri": uri, "mimeType": "text/plain", "text": value}}


def link(uri: str = "https://example.com/big.bin") -> dict[str, Any]:
    return {"type": "resource_link", "uri": uri, "name": "big.bin", "mimeType": "application/octet-stream"}


def result(*blocks: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"content": list(blocks), "isError": False, **top}


def as_kind(value: dict[str, Any], kind: str) -> Any:
    return value if kind == "dict" else CallToolResult.model_validate(value)


def wire(value: Any) -> dict[str, Any]:
    """The wire form of a projection of either kind."""
    if isinstance(value, CallToolResult):
        return value.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert isinstance(value, dict)
    return value


def run(
    vault: Vault | AsyncVault,
    scope: Scope,
    value: Any,
    *,
    tool_call_id: str = "call_1",
    provenance: str = "mcp:server/tool",
    **options: Any,
) -> Any:
    return asyncio.run(materialize(vault, scope, value, provenance=provenance, tool_call_id=tool_call_id, **options))


def snapshot(vault: Vault) -> tuple[frozenset[Any], ...]:
    """Everything a write could change: manifests, blob records, blob objects, temporaries."""
    temporaries: frozenset[str] = frozenset()
    if isinstance(vault.blobs, FilesystemBlobStore):
        temporaries = frozenset(entry.name for entry in (vault.blobs.root / "tmp").iterdir())
    return (
        frozenset(m.artifact_id for m in vault.catalog.manifests()),
        frozenset(r.key for r in vault.catalog.blob_records()),
        frozenset(vault.blobs.keys()),
        temporaries,
    )


def artifact_id_of(block: Mapping[str, Any]) -> str:
    assert block["type"] == "resource_link"
    uri = block["uri"]
    assert isinstance(uri, str)
    assert uri.startswith("refvault://")
    return uri.removeprefix("refvault://")


def all_spellings(data: bytes) -> list[str]:
    """The base64 of ``data`` in the spellings a server might use: standard, URL-safe, unpadded."""
    standard = b64(data)
    urlsafe = base64.urlsafe_b64encode(data).decode("ascii")
    return sorted({standard, urlsafe, standard.rstrip("="), urlsafe.rstrip("=")})


def informative(window: str) -> bool:
    """Windows with fewer than 4 distinct characters (zero bytes: 'AAAA...') are never replaced (scrub.py)."""
    return len(set(window)) >= 4


def assert_no_base64(projection: Any, parts: list[bytes]) -> None:
    """Neither the base64 of any stored part, nor any informative 64-character window of it, is in the projection."""
    dumped = json.dumps(wire(projection), ensure_ascii=False)
    strings = _strings(wire(projection))
    for data in parts:
        for spelling in all_spellings(data):
            assert spelling not in strings, "a string still equals a stored part's base64"
            if len(spelling) >= 16 and informative(spelling):
                assert spelling not in dumped, "a stored part's base64 survived projection"
            for start in range(len(spelling) - 63):
                window = spelling[start : start + 64]
                if informative(window):
                    assert window not in dumped, f"a 64-character window at {start} survived"


def _strings(value: Any) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, Mapping):
        return {k for k in value if isinstance(k, str)} | {s for v in value.values() for s in _strings(v)}
    if isinstance(value, list | tuple):
        return {s for v in value for s in _strings(v)}
    return set()


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def other_scopes() -> list[Scope]:
    return [Scope("acme", "bob", "s1"), Scope("acme", "ana", "s2"), Scope("globex", "ana", "s1")]


# -- each kind of block, and mixes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "data", "media_type", "name"),
    [
        (image(png()), png(), "image/png", "content-000.png"),
        (audio(wav()), wav(), "audio/wav", "content-000.wav"),
        (blob(pdf()), pdf(), "application/pdf", "q3.pdf"),
    ],
    ids=["image", "audio", "embedded-blob"],
)
def test_each_binary_kind_becomes_a_resource_link(
    vault: Vault, scope: Scope, kind: str, block: dict[str, Any], data: bytes, media_type: str, name: str
) -> None:
    projected = run(vault, scope, as_kind(result(block), kind))
    assert type(projected) is (dict if kind == "dict" else CallToolResult)
    (got,) = wire(projected)["content"]
    artifact_id = artifact_id_of(got)
    assert got["name"] == name
    assert got["mimeType"] == media_type
    assert got["size"] == len(data)
    assert "refvault" in got["description"]
    assert "reference" in got["description"]
    assert got["_meta"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert got["_meta"]["content_index"] == 0
    assert got["_meta"]["media_type_check"] == "match"
    assert vault.read_bytes(scope, artifact_id) == data
    descriptor = vault.describe(scope, artifact_id)
    assert descriptor.content_hash == "sha256:" + hashlib.sha256(data).hexdigest()
    assert descriptor.media_type == media_type
    assert descriptor.filename == name
    assert descriptor.tool_call_id == "call_1"
    assert descriptor.source_version["provenance"] == "mcp:server/tool"
    assert descriptor.source_version["content_index"] == 0
    assert descriptor.completeness["status"] == "complete"
    assert_no_base64(projected, [data])


def test_mixed_result(vault: Vault, scope: Scope, kind: str) -> None:
    img, snd, doc = png(2000, seed=1), wav(3000), pdf(40_000)  # the PDF is over the inline limit: a real blob file
    value = result(
        text("here is the chart"),
        image(img),
        text_resource("plain notes"),
        audio(snd, "audio/x-wav"),
        link(),
        blob(doc),
        structuredContent={"summary": "three parts"},
        _meta={"server": "demo"},
    )
    original = copy.deepcopy(value)
    source = as_kind(value, kind)
    projected = wire(run(vault, scope, source))
    assert value == original, "the input was mutated"
    content = projected["content"]
    assert [block["type"] for block in content] == [
        "text",
        "resource_link",
        "resource",
        "resource_link",
        "resource_link",
        "resource_link",
    ]
    assert content[0] == text("here is the chart")
    assert content[2] == text_resource("plain notes")
    assert content[4] == link(), "an existing resource link passes through untouched"
    stored = {1: img, 3: snd, 5: doc}
    for index, data in stored.items():
        assert content[index]["_meta"]["content_index"] == index
        assert vault.read_bytes(scope, artifact_id_of(content[index])) == data
    assert content[3]["mimeType"] == "audio/wav", "a well-known alias is normalised"
    assert content[3]["_meta"]["declared_media_type"] == "audio/x-wav"
    assert projected["structuredContent"] == {"summary": "three parts"}
    assert projected["_meta"] == {"server": "demo"}
    assert projected["isError"] is False
    assert len(vault.list(scope)) == 3
    assert_no_base64(projected, list(stored.values()))


def test_resource_link_is_never_fetched_and_text_only_results_are_unchanged(
    vault: Vault, scope: Scope, kind: str
) -> None:
    value = result(text("no binaries"), link("http://127.0.0.1:9/never"), text_resource(), structuredContent={"a": 1})
    before = snapshot(vault)
    source = as_kind(value, kind)
    projected = run(vault, scope, source)
    assert projected == source
    assert projected is not source
    assert snapshot(vault) == before


def test_async_vault_is_accepted(vault: Vault, scope: Scope) -> None:
    projected = run(AsyncVault(vault), scope, result(image(png())))
    assert vault.read_bytes(scope, artifact_id_of(projected["content"][0])) == png()


def test_error_results_are_materialised_too(vault: Vault, scope: Scope) -> None:
    projected = run(vault, scope, {"content": [image(png())], "isError": True})
    assert projected["isError"] is True
    assert projected["content"][0]["type"] == "resource_link"


# -- refusals: nothing is written ----------------------------------------------------------------------------------


def _noncanonical(encoded: str) -> str:
    """The same length, the same decoded bytes, but non-zero padding bits (e.g. 'AA==' -> 'AB==')."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    position = len(encoded.rstrip("=")) - 1
    bumped = alphabet[alphabet.index(encoded[position]) + 1]
    return encoded[:position] + bumped + encoded[position + 1 :]


URLSAFE_BYTES = PNG + b"\xfb\xff\xbf" * 20  # its standard base64 holds '+' and '/'

REFUSALS: dict[str, tuple[dict[str, Any], type[Exception], int | None]] = {
    "invalid-characters": (
        {"type": "image", "data": "!!!!" + b64(png())[4:], "mimeType": "image/png"},
        InvalidResult,
        1,
    ),
    "inner-space": (
        {"type": "image", "data": b64(png())[:8] + " " + b64(png())[9:], "mimeType": "image/png"},
        InvalidResult,
        1,
    ),
    "line-wrapped": (
        {"type": "image", "data": base64.encodebytes(png(303)).decode(), "mimeType": "image/png"},
        InvalidResult,
        1,
    ),
    "wrapped-multiple-of-4": (
        {"type": "image", "data": b64(png(300))[:76] + "\n\n\n\n" + b64(png(300))[76:], "mimeType": "image/png"},
        InvalidResult,
        1,
    ),
    "non-canonical-padding-1": (
        {"type": "image", "data": _noncanonical(b64(png(301))), "mimeType": "image/png"},
        InvalidResult,
        1,
    ),
    "non-canonical-padding-2": (
        {"type": "image", "data": _noncanonical(b64(png(302))), "mimeType": "image/png"},
        InvalidResult,
        1,
    ),
    "missing-padding": (
        {"type": "image", "data": b64(png(301)).rstrip("="), "mimeType": "image/png"},
        InvalidResult,
        1,
    ),
    "excess-padding": ({"type": "image", "data": b64(png(300)) + "====", "mimeType": "image/png"}, InvalidResult, 1),
    "url-safe-alphabet": (
        {"type": "image", "data": base64.urlsafe_b64encode(URLSAFE_BYTES).decode(), "mimeType": "image/png"},
        InvalidResult,
        1,
    ),
    "data-url-as-data": (
        {"type": "image", "data": "data:image/png;base64," + b64(png(300)), "mimeType": "image/png"},
        InvalidResult,
        1,
    ),
    "non-ascii": ({"type": "image", "data": "é" * 8, "mimeType": "image/png"}, InvalidResult, 1),
    "data-not-a-string": ({"type": "image", "data": 12345, "mimeType": "image/png"}, InvalidResult, 1),
    "data-missing": ({"type": "audio", "mimeType": "audio/wav"}, InvalidResult, 1),
    "blob-invalid": (
        {"type": "resource", "resource": {"uri": "file:///x.pdf", "blob": "@@@@", "mimeType": "application/pdf"}},
        InvalidResult,
        1,
    ),
    "empty-image": ({"type": "image", "data": "", "mimeType": "image/png"}, EmptyPart, 1),
    "empty-audio": ({"type": "audio", "data": "", "mimeType": "audio/wav"}, EmptyPart, 1),
    "empty-blob": ({"type": "resource", "resource": {"uri": "file:///x", "blob": ""}}, EmptyPart, 1),
    "media-type-garbage": ({"type": "image", "data": b64(png()), "mimeType": "not a media type"}, InvalidResult, 1),
    "media-type-empty": ({"type": "image", "data": b64(png()), "mimeType": ""}, InvalidResult, 1),
    "media-type-bad-parameter": ({"type": "image", "data": b64(png()), "mimeType": "image/png; =x"}, InvalidResult, 1),
    "media-type-wildcard": ({"type": "image", "data": b64(png()), "mimeType": "image/*"}, InvalidResult, 1),
    "media-type-missing": ({"type": "image", "data": b64(png())}, InvalidResult, 1),
    "media-type-not-a-string": ({"type": "audio", "data": b64(wav()), "mimeType": 7}, InvalidResult, 1),
    "blob-media-type-invalid": (
        {"type": "resource", "resource": {"uri": "file:///x", "blob": b64(pdf()), "mimeType": "pdf"}},
        InvalidResult,
        1,
    ),
    "resource-without-body": ({"type": "resource", "resource": {"uri": "file:///x"}}, InvalidResult, 1),
    "resource-not-an-object": ({"type": "resource", "resource": "file:///x"}, InvalidResult, 1),
    "block-not-an-object": ("just a string", InvalidResult, 1),  # type: ignore[dict-item]
    "block-without-type": ({"text": "hi"}, InvalidResult, 1),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusals_write_nothing(vault: Vault, scope: Scope, case: str) -> None:
    bad, error, index = REFUSALS[case]
    # A valid part first, and another after: neither may be written when one part is refused.
    value = result(image(png(seed=7)), bad, audio(wav()))
    before = snapshot(vault)
    with pytest.raises(error) as caught:
        run(vault, scope, value)
    assert isinstance(caught.value, MaterializationError)
    assert caught.value.permanent is True
    assert caught.value.content_index == index
    assert snapshot(vault) == before
    assert b64(png(seed=7)) not in str(caught.value)


@pytest.mark.parametrize(
    "value",
    [
        {},
        {"content": "text"},
        {"content": {"type": "text"}},
        {"structuredContent": {}},
        "a string",
        ["content"],
        42,
        None,
    ],
)
def test_not_a_tool_result(vault: Vault, scope: Scope, value: Any) -> None:
    before = snapshot(vault)
    with pytest.raises(InvalidResult) as caught:
        run(vault, scope, value)
    assert caught.value.permanent is True
    assert snapshot(vault) == before


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"scope": ("acme", "ana", "s1")}, InvalidArgument),
        ({"tool_call_id": ""}, InvalidMetadata),
        ({"tool_call_id": "call\n1"}, InvalidMetadata),
        ({"tool_call_id": "c" * 257}, InvalidMetadata),
        ({"tool_call_id": None}, InvalidMetadata),
        ({"provenance": ""}, InvalidMetadata),
        ({"provenance": 3}, InvalidMetadata),
        ({"disclosure": "public"}, InvalidMetadata),
        ({"run_id": "r\x00"}, InvalidMetadata),
        ({"limits": {"per_part": 1}}, InvalidArgument),
    ],
)
def test_bad_call_arguments_write_nothing(vault: Vault, scope: Scope, options: dict[str, Any], error: type) -> None:
    call: dict[str, Any] = {"provenance": "mcp:s/t", "tool_call_id": "call_1", **options}
    target_scope = call.pop("scope", scope)
    before = snapshot(vault)
    with pytest.raises(error):
        asyncio.run(materialize(vault, target_scope, result(image(png())), **call))
    assert snapshot(vault) == before


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1"])
def test_limits_are_validated(bad: Any) -> None:
    with pytest.raises(InvalidArgument):
        Limits(per_part=bad)


@pytest.mark.parametrize("size", [1, 2, 3, 100, 101, 102])  # every padding length
def test_per_part_limit_at_and_over(vault: Vault, scope: Scope, size: int) -> None:
    limits = Limits(per_part=size)
    projected = run(vault, scope, result(image(png(size), "image/x-raw")), limits=limits, tool_call_id="at")
    assert projected["content"][0]["size"] == size
    before = snapshot(vault)
    with pytest.raises(TooLarge) as caught:
        run(vault, scope, result(image(png(size + 1), "image/x-raw")), limits=limits, tool_call_id="over")
    assert caught.value.content_index == 0
    assert "not truncated" in str(caught.value)
    assert snapshot(vault) == before


def test_per_result_limit_at_and_over(vault: Vault, scope: Scope) -> None:
    first, second = png(600, seed=1), png(400, seed=2)
    limits = Limits(per_part=600, per_result=1000)
    projected = run(vault, scope, result(image(first), text("x"), image(second)), limits=limits, tool_call_id="at")
    assert [b.get("size") for b in projected["content"]] == [600, None, 400]
    before = snapshot(vault)
    over = result(image(first), text("x"), image(png(401, seed=3)))
    with pytest.raises(TooLarge) as caught:
        run(vault, scope, over, limits=limits, tool_call_id="over")
    assert caught.value.content_index == 2, "the part at which the total crossed the limit"
    assert "not truncated" in str(caught.value)
    assert snapshot(vault) == before


def test_huge_part_is_refused_before_it_is_decoded(vault: Vault, scope: Scope, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_decoding(*args: Any, **kwargs: Any) -> bytes:
        raise AssertionError("decoded a part that its encoded length already refused")

    monkeypatch.setattr(binascii, "a2b_base64", no_decoding)
    huge = "A" * (4 * 1_000_000)  # 3 MB decoded
    with pytest.raises(TooLarge):
        run(
            vault,
            scope,
            result(image(png()), {"type": "image", "data": huge, "mimeType": "image/png"}),
            limits=Limits(per_part=1_000_000),
        )
    with pytest.raises(TooLarge):  # over the per-result limit: refused before any part is decoded
        run(
            vault,
            scope,
            result(image(png()), {"type": "image", "data": huge, "mimeType": "image/png"}),
            limits=Limits(per_part=4_000_000, per_result=2_000_000),
        )


def test_a_refusal_later_in_the_result_is_found_before_any_write(vault: Vault, scope: Scope) -> None:
    value = result(*[image(png(seed=i)) for i in range(5)], {"type": "image", "data": "####", "mimeType": "image/png"})
    before = snapshot(vault)
    with pytest.raises(InvalidResult) as caught:
        run(vault, scope, value)
    assert caught.value.content_index == 5
    assert snapshot(vault) == before


# -- media types ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("declared", "data", "stored", "detected", "check"),
    [
        ("Image/PNG", png(), "image/png", "image/png", "match"),
        ("image/jpg", JPEG_HEAD + b"\x00" * 50, "image/jpeg", "image/jpeg", "match"),
        ("audio/WAV; Rate=44100", wav(), "audio/wav; rate=44100", "audio/wav", "match"),
        ("image/jpeg", png(), "application/octet-stream", "image/png", "mismatch"),
        ("text/plain", png(), "application/octet-stream", "image/png", "mismatch"),
        ("image/png", b"no signature here at all" * 4, "application/octet-stream", None, "mismatch"),
        ("image/png", b"<html><body>Error 502</body></html>", "application/octet-stream", "text/html", "mismatch"),
        ("image/x-custom", b"\x13\x37" * 40, "image/x-custom", None, "unknown"),
        ("application/octet-stream", png(), "image/png", "image/png", "unknown"),
        (
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            b"PK\x03\x04" + b"\x00" * 60,
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            "application/zip",
            "match",
        ),
        (
            "image/svg+xml",
            b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"/>',
            "image/svg+xml",
            "image/svg+xml",
            "match",
        ),
    ],
)
def test_media_type_declared_and_detected(
    vault: Vault, scope: Scope, declared: str, data: bytes, stored: str, detected: str | None, check: str
) -> None:
    projected = run(vault, scope, result(blob(data, declared, uri="file:///x/file")))
    got = projected["content"][0]
    descriptor = vault.describe(scope, artifact_id_of(got))
    assert got["mimeType"] == descriptor.media_type == stored
    facts = {"detected_media_type": detected, "media_type_check": check}
    for where in (got["_meta"], descriptor.source_version):
        assert {k: where[k] for k in facts} == facts
        assert where["declared_media_type"] is not None
        assert where["declared_media_type"].split(";")[0] == declared.split(";")[0].lower()


def test_media_type_of_an_undeclared_blob_is_detected(vault: Vault, scope: Scope) -> None:
    projected = run(vault, scope, result(blob(png(), None, uri="file:///x/shot")))
    got = projected["content"][0]
    assert got["mimeType"] == "image/png"
    assert got["_meta"]["declared_media_type"] is None
    assert got["_meta"]["media_type_check"] == "unknown"
    projected = run(vault, scope, result(blob(b"\x13\x37" * 9, None)), tool_call_id="call_2")
    assert projected["content"][0]["mimeType"] == "application/octet-stream"


@pytest.mark.parametrize(
    ("head", "media_type"),
    [
        (PNG, "image/png"),
        (JPEG_HEAD, "image/jpeg"),
        (b"GIF89a", "image/gif"),
        (b"GIF87a", "image/gif"),
        (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"BM\x00\x00\x00\x00\x00\x00\x00\x00\x36\x00\x00\x00\x28\x00\x00\x00", "image/bmp"),
        (b"II*\x00", "image/tiff"),
        (b"MM\x00*", "image/tiff"),
        (b"\x00\x00\x01\x00\x01\x00", "image/vnd.microsoft.icon"),
        (b"%PDF-1.4", "application/pdf"),
        (WAV_HEAD, "audio/wav"),
        (b"ID3\x04\x00", "audio/mpeg"),
        (b"\xff\xfb\x90\x64", "audio/mpeg"),
        (b"\xff\xf1\x50\x80", "audio/aac"),
        (b"OggS\x00\x02", "audio/ogg"),
        (b"fLaC\x00\x00\x00\x22", "audio/flac"),
        (b"\x00\x00\x00\x20ftypM4A \x00\x00\x00\x00", "audio/mp4"),
        (b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00", "video/mp4"),
        (b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00", "image/avif"),
        (b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\x82\x84webm", "video/webm"),
        (b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\x82\x88matroska", "video/x-matroska"),
        (b"PK\x03\x04", "application/zip"),
        (b"\x1f\x8b\x08\x00", "application/gzip"),
        (b"<svg xmlns='http://www.w3.org/2000/svg'></svg>", "image/svg+xml"),
        (b"\xef\xbb\xbf  <?xml version='1.0'?><note/>", "application/xml"),
        (b"<!DOCTYPE html><html></html>", "text/html"),
    ],
)
def test_sniff_media_type(head: bytes, media_type: str) -> None:
    assert sniff_media_type(head + b"\x00" * 16) == media_type


@pytest.mark.parametrize("data", [b"", b"\x00", b"plain text, nothing special", b"\xff\xfb", b"BM" + b"\x00" * 30])
def test_sniff_unrecognised(data: bytes) -> None:
    assert sniff_media_type(data) is None


def test_classify_and_extensions() -> None:
    assert classify(None, b"").stored == "application/octet-stream"
    assert classify("audio/mpeg", b"\x00" * 8).check == "unknown", "MP3 may start with junk: no definitive signature"
    assert extension_for("image/jpeg") == "jpg"
    assert extension_for("application/ld+json") == "json"
    assert extension_for("application/x-unknown") == "bin"


# -- filenames -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("file:///reports/q3.pdf", "q3.pdf"),
        ("file:///tmp/../../etc/passwd", "passwd"),
        ("../../etc/passwd", "passwd"),
        ("..", None),
        ("file:///a/..", None),
        ("file:///a/.", None),
        ("file:///a/%2e%2e", None),
        ("file:///a/...", None),
        ("file:///a/b/", None),
        ("file:///x/a%2Fb.png", "b.png"),
        ("file:///x/a%5C..%5Cb.png", "b.png"),
        ("https://example.com/img/cat%20pic.png?size=large#frag", "cat pic.png"),
        ("https://example.com/img/cat.png#../../x", "cat.png"),
        ("https://example.com/", None),
        ("https://example.com", None),
        ("file:///x/evil\x00na\x1bme\x7f.png", "evilname.png"),
        ("file:///x/evil%00na%0Ame.png", "evilname.png"),
        ("file:///x/gnp\u202e.exe", "gnp.exe"),
        ("screenshot://page/1.png", "1.png"),
        ("urn:isbn:0451450523", None),
        ("data:image/png;base64,iVBORw0KGgo=", None),
        ("mailto:someone@example.com", None),
        ("file:///x/%20%20", None),
        ("", None),
    ],
)
def test_safe_filename(uri: str, expected: str | None) -> None:
    assert safe_filename(uri) == expected


def test_safe_filename_caps_length_keeping_the_extension() -> None:
    name = safe_filename("file:///x/" + "a" * 300 + ".png")
    assert name is not None
    assert len(name) == 128
    assert name.endswith(".png")
    name = safe_filename("file:///x/" + "b" * 300)
    assert name == "b" * 128
    assert safe_filename("file:///x/" + "c" * 3000) is None, "over-long URIs are not parsed at all"


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("file:///tmp/../../etc/passwd", "passwd"),
        ("file:///a/..", "content-001.pdf"),
        ("urn:x:y", "content-001.pdf"),
        ("https://h/x/report%20final.pdf?token=secret#p2", "report final.pdf"),
        ("file:///x/\x01\x02", "content-001.pdf"),
    ],
)
def test_safe_filename_through_materialize(vault: Vault, scope: Scope, uri: str, expected: str) -> None:
    projected = run(vault, scope, result(text("x"), blob(pdf(), uri=uri)))
    got = projected["content"][1]
    assert got["name"] == expected
    assert vault.describe(scope, artifact_id_of(got)).filename == expected


def test_fallback_names_use_the_index_and_the_stored_type(vault: Vault, scope: Scope) -> None:
    value = result(text("a"), image(png()), audio(wav()), image(png(), "image/jpeg"), blob(pdf(), uri="urn:x"))
    names = [b.get("name") for b in run(vault, scope, value)["content"]]
    assert names == [None, "content-001.png", "content-002.wav", "content-003.bin", "content-004.pdf"]


# -- one moment, one order, idempotency ----------------------------------------------------------------------------


def test_one_created_at_and_content_index(vault: Vault, scope: Scope, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = vault.clock
    real_put = vault.put
    order: list[str] = []

    def slow_put(*args: Any, **kwargs: Any) -> Any:
        clock.advance(seconds=5)  # type: ignore[attr-defined]  # time passes between parts
        return real_put(*args, **kwargs)

    vault.add_audit_sink(lambda record: order.append(record.artifact_id or "") if record.action == "put" else None)
    monkeypatch.setattr(vault, "put", slow_put)
    value = result(text("0"), image(png(seed=1)), text("2"), audio(wav()), image(png(seed=4)), blob(pdf()))
    content = run(vault, scope, value)["content"]
    indices = [1, 3, 4, 5]
    ids = [artifact_id_of(content[i]) for i in indices]
    descriptors = [vault.describe(scope, artifact_id) for artifact_id in ids]
    assert len({d.created_at for d in descriptors}) == 1
    assert [d.source_version["content_index"] for d in descriptors] == indices
    assert [content[i]["_meta"]["content_index"] for i in indices] == indices
    assert order == ids, "parts are stored in content order"


def test_retry_dedups(vault: Vault, scope: Scope, kind: str) -> None:
    value = as_kind(result(image(png(seed=1)), text("t"), audio(wav()), blob(pdf(40_000))), kind)
    first = wire(run(vault, scope, value))
    after_first = snapshot(vault)
    second = wire(run(vault, scope, value))
    assert second == first, "a retry returns the same ids"
    assert snapshot(vault) == after_first, "and stores nothing new"
    assert len(vault.list(scope)) == 3
    third = wire(run(vault, scope, value, tool_call_id="call_2"))
    assert [b.get("uri") for b in third["content"]] != [b.get("uri") for b in first["content"]]
    assert snapshot(vault)[1] == after_first[1], "new captures of the same bytes share their blobs"


def test_retry_with_other_bytes_under_the_same_call_is_refused(vault: Vault, scope: Scope) -> None:
    run(vault, scope, result(image(png(seed=1))))
    with pytest.raises(MaterializationError) as caught:
        run(vault, scope, result(image(png(seed=2))))
    assert caught.value.permanent is True
    assert caught.value.content_index == 0


def test_idempotency_key_is_short_and_derived_from_call_and_index() -> None:
    key = idempotency_key("x" * 256, 7)
    assert len(key) < 64
    assert key.endswith(":7")
    assert key.isascii()
    assert key == idempotency_key("x" * 256, 7) != idempotency_key("x" * 256, 8) != idempotency_key("y", 8)


def test_partial_failure_then_retry(vault: Vault, scope: Scope, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real_put = vault.put
    calls: list[int] = []

    def failing_second_put(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise StorageError(28, "No space left on device")
        return real_put(*args, **kwargs)

    monkeypatch.setattr(vault, "put", failing_second_put)
    value = as_kind(result(image(png(seed=1)), text("t"), audio(wav()), blob(pdf())), kind)
    with pytest.raises(MaterializationError) as caught:
        run(vault, scope, value)
    assert caught.value.permanent is True
    assert caught.value.content_index == 2
    assert isinstance(caught.value.__cause__, StorageError)
    assert "do not re-issue" in str(caught.value)
    assert len(calls) == 2, "no part after the failure was attempted"
    (kept,) = vault.list(scope)
    assert vault.read_bytes(scope, kept.artifact_id) == png(seed=1)

    monkeypatch.setattr(vault, "put", real_put)
    projected = wire(run(vault, scope, value))
    assert artifact_id_of(projected["content"][0]) == kept.artifact_id, "the retry reuses the part already stored"
    assert len(vault.list(scope)) == 3


@pytest.mark.parametrize("cancel_after", [1, 3])
def test_cancellation_between_parts(
    vault: Vault, scope: Scope, monkeypatch: pytest.MonkeyPatch, cancel_after: int
) -> None:
    real_put = vault.put
    stored: list[str] = []
    handle: dict[str, Any] = {}

    def put_then_cancel(*args: Any, **kwargs: Any) -> Any:
        descriptor = real_put(*args, **kwargs)
        stored.append(descriptor.artifact_id)
        if len(stored) == cancel_after:
            handle["loop"].call_soon_threadsafe(handle["task"].cancel)
        return descriptor

    monkeypatch.setattr(vault, "put", put_then_cancel)
    value = result(image(png(seed=1)), audio(wav()), blob(pdf()))

    async def main() -> None:
        handle["loop"] = asyncio.get_running_loop()
        task = asyncio.create_task(materialize(vault, scope, value, provenance="mcp:s/t", tool_call_id="c"))
        handle["task"] = task
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert len(stored) == cancel_after, "no part was written after the cancellation"
    assert {d.artifact_id for d in vault.list(scope)} == set(stored)


# -- no base64 after projection ------------------------------------------------------------------------------------


def test_no_base64_anywhere_after_projection(vault: Vault, scope: Scope, kind: str) -> None:
    img = PNG + os.urandom(1500)
    snd = wav(900)
    encoded = b64(img)
    urlsafe = base64.urlsafe_b64encode(img).decode()
    wrapped = base64.encodebytes(img).decode()
    value = result(
        image(img, _meta={"thumbnail": encoded[:300], "also": encoded}),
        text(f"as requested: data:image/png;base64,{encoded} (done)"),
        text(wrapped),
        audio(snd),
        {"type": "image", "data": encoded, "mimeType": "image/png", "annotations": {"audience": ["user"]}},
        structuredContent={
            "plain": encoded,
            "data_url": "data:image/png;base64," + encoded,
            "nested": {"deeper": [{"png": encoded}, "prefix " + encoded + " suffix"]},
            "url_safe": urlsafe,
            "unpadded": encoded.rstrip("="),
            "truncated": encoded[:200] + "...",
            "middle": encoded[333:500],
            "wrapped": wrapped,
            encoded: "as a key",
            "audio": b64(snd),
        },
        _meta={"preview": "data:image/png;base64," + encoded, "raw": b64(snd)[:100]},
    )
    projected = run(vault, scope, as_kind(value, kind))
    assert_no_base64(projected, [img, snd])
    got = wire(projected)
    uri = got["content"][0]["uri"]
    structured = got["structuredContent"]
    assert structured["plain"] == uri
    assert structured["data_url"] == uri
    assert structured["nested"]["deeper"][0]["png"] == uri
    assert structured["nested"]["deeper"][1] == f"prefix {uri} suffix"
    assert structured["url_safe"] == uri
    assert structured["unpadded"] == uri
    assert structured["audio"] == got["content"][3]["uri"]
    assert got["content"][4]["annotations"] == {"audience": ["user"]}


@pytest.mark.parametrize("shape", ["plain", "data_url", "nested"])
def test_structured_content_duplicating_the_image_is_replaced(
    vault: Vault, scope: Scope, kind: str, shape: str
) -> None:
    img = png(5000, seed=9)
    encoded = b64(img)
    duplicate: Any = {
        "plain": {"image": encoded},
        "data_url": {"image": f"data:image/png;base64,{encoded}"},
        "nested": {"pages": [{"shots": [{"image": encoded, "mime": "image/png"}]}]},
    }[shape]
    projected = wire(run(vault, scope, as_kind(result(image(img), structuredContent=duplicate), kind)))
    uri = projected["content"][0]["uri"]
    dumped = json.dumps(projected["structuredContent"])
    assert uri in dumped
    assert encoded not in dumped
    assert len(dumped) < 300
    assert_no_base64(projected, [img])


def test_structured_content_is_bounded(vault: Vault, scope: Scope, kind: str) -> None:
    limits = Limits(structured_content=1000)
    big = {"rows": ["x" * 100] * 50}
    projected = wire(run(vault, scope, as_kind(result(image(png()), structuredContent=big), kind), limits=limits))
    omitted = projected["structuredContent"]
    assert set(omitted) == {"refvault_omitted"}
    assert "over the limit of 1000" in omitted["refvault_omitted"]
    size = len(json.dumps(big, separators=(",", ":")))
    assert str(size) in omitted["refvault_omitted"]

    exactly = {"k": "y" * (1000 - len('{"k":""}'))}
    assert len(json.dumps(exactly, separators=(",", ":"))) == 1000
    projected = wire(
        run(
            vault,
            scope,
            as_kind(result(image(png()), structuredContent=exactly), kind),
            limits=limits,
            tool_call_id="2",
        )
    )
    assert projected["structuredContent"] == exactly


def test_structured_content_bound_is_measured_after_projection(vault: Vault, scope: Scope) -> None:
    img = png(3000)
    projected = run(
        vault, scope, result(image(img), structuredContent={"image": b64(img)}), limits=Limits(structured_content=200)
    )
    assert projected["structuredContent"] == {"image": projected["content"][0]["uri"]}


# -- scope, disclosure, bytes --------------------------------------------------------------------------------------


def test_foreign_scope_sees_nothing(vault: Vault, scope: Scope, other_scopes: list[Scope]) -> None:
    projected = run(vault, scope, result(image(png()), blob(pdf(40_000))))
    ids = [artifact_id_of(block) for block in projected["content"]]
    for other in other_scopes:
        assert vault.list(other) == []
        for artifact_id in ids:
            with pytest.raises(NotFound):
                vault.describe(other, artifact_id)
            with pytest.raises(NotFound):
                vault.read_bytes(other, artifact_id)


def test_retry_in_another_scope_is_a_new_capture(vault: Vault, scope: Scope, other_scopes: list[Scope]) -> None:
    mine = run(vault, scope, result(image(png())))["content"][0]["uri"]
    theirs = run(vault, other_scopes[2], result(image(png())))["content"][0]["uri"]
    assert mine != theirs


def test_sealed_by_default_and_model_on_request(vault: Vault, scope: Scope) -> None:
    sealed = run(vault, scope, result(image(png())))["content"][0]
    assert vault.describe(scope, artifact_id_of(sealed)).disclosure == "sealed"
    assert sealed["_meta"]["disclosure"] == "sealed"
    assert "sealed" in sealed["description"]
    shown = run(vault, scope, result(image(png())), disclosure="model", tool_call_id="call_2")["content"][0]
    assert vault.describe(scope, artifact_id_of(shown)).disclosure == "model"
    assert shown["_meta"]["disclosure"] == "model"


def test_run_id_is_recorded(vault: Vault, scope: Scope) -> None:
    got = run(vault, scope, result(image(png())), run_id="run_9")["content"][0]
    assert vault.describe(scope, artifact_id_of(got)).scope["run_id"] == "run_9"


# -- mcp is optional -----------------------------------------------------------------------------------------------


def test_dict_path_works_without_mcp(vault: Vault, scope: Scope, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("mcp", "mcp.types"):
        monkeypatch.setitem(sys.modules, name, None)  # makes `import mcp.types` raise ImportError
    projected = run(vault, scope, result(image(png())))
    assert projected["content"][0]["type"] == "resource_link"
    with pytest.raises(InvalidResult):
        run(vault, scope, CallToolResult.model_validate(result(image(png()))), tool_call_id="call_2")


def test_importing_refvault_content_does_not_import_mcp() -> None:
    code = "import sys, refvault.content; print('mcp' in sys.modules, 'mcp_types' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


# -- random mixes --------------------------------------------------------------------------------------------------

HEADS = [b"", PNG, JPEG_HEAD, WAV_HEAD, PDF_HEAD, b"GIF89a", b"OggS"]


@st.composite
def binary_blocks(draw: st.DrawFn) -> tuple[dict[str, Any], bytes]:
    data = draw(st.sampled_from(HEADS)) + draw(st.binary(min_size=1, max_size=400))
    which = draw(st.sampled_from(["image", "audio", "blob", "blob-undeclared"]))
    mime = draw(st.sampled_from(["image/png", "image/jpeg", "audio/wav", "application/pdf", "Image/GIF", "x/y"]))
    if which == "image":
        return image(data, mime), data
    if which == "audio":
        return audio(data, mime), data
    uri = draw(st.sampled_from(["file:///a/b.png", "../../etc/passwd", "urn:x", "https://h/p?q#f", "file:///.."]))
    return blob(data, mime if which == "blob" else None, uri=uri), data


@st.composite
def results(draw: st.DrawFn) -> tuple[dict[str, Any], dict[int, bytes]]:
    blocks: list[dict[str, Any]] = []
    stored: dict[int, bytes] = {}
    for _ in range(draw(st.integers(0, 6))):
        choice = draw(st.sampled_from(["binary", "binary", "text", "text-resource", "link"]))
        if choice == "binary":
            block, data = draw(binary_blocks())
            stored[len(blocks)] = data
            blocks.append(block)
        elif choice == "text":
            blocks.append(text(draw(st.text(max_size=40))))
        elif choice == "text-resource":
            blocks.append(text_resource(draw(st.text(max_size=40))))
        else:
            blocks.append(link())
    extra: dict[str, Any] = {}
    echo_in_structured: bool = draw(st.booleans())
    echo_in_meta: bool = draw(st.booleans())
    if stored and echo_in_structured:
        copies = [b64(data) for data in stored.values()]
        encoded = draw(st.sampled_from(copies))
        extra["structuredContent"] = {
            "copy": encoded,
            "url": "data:image/png;base64," + encoded,
            "list": [encoded[:100], {"k": encoded}],
        }
    if stored and echo_in_meta:
        extra["_meta"] = {"echo": draw(st.sampled_from([b64(data) for data in stored.values()]))}
    return result(*blocks, **extra), stored


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=results(), kind=st.sampled_from(KINDS))
def test_random_mixes(vault: Vault, scope: Scope, case: tuple[dict[str, Any], dict[int, bytes]], kind: str) -> None:
    value, stored = case
    call = f"call-{uuid.uuid4()}"  # examples share the vault: one fresh tool call each
    original = copy.deepcopy(value)
    source = as_kind(value, kind)
    projected = run(vault, scope, source, tool_call_id=call)
    assert value == original
    got = wire(projected)
    assert len(got["content"]) == len(value["content"])
    for index, block in enumerate(got["content"]):
        if index in stored:
            artifact_id = artifact_id_of(block)
            assert block["_meta"]["content_index"] == index
            assert block["size"] == len(stored[index])
            assert vault.read_bytes(scope, artifact_id) == stored[index]
            assert vault.describe(scope, artifact_id).disclosure == "sealed"
        else:
            assert block == wire(source)["content"][index]
    if not stored:
        assert projected == source
    assert_no_base64(projected, list(stored.values()))
    before = snapshot(vault)
    assert wire(run(vault, scope, source, tool_call_id=call)) == got
    assert snapshot(vault) == before


def test_audit_records_name_ids_only(vault: Vault, scope: Scope) -> None:
    records: list[AuditRecord] = []
    vault.add_audit_sink(records.append)
    img = png(700)
    run(vault, scope, result(image(img)))
    assert records
    assert all(b64(img)[:64] not in repr(record) for record in records)


def test_error_messages_carry_no_content(vault: Vault, scope: Scope) -> None:
    encoded = b64(png(900))
    for bad in (encoded[:-4] + "@@@@", encoded + "A", encoded[:100] + " " + encoded[101:]):
        with pytest.raises(InvalidResult) as caught:
            run(vault, scope, result({"type": "image", "data": bad, "mimeType": "image/png"}))
        assert encoded[:32] not in str(caught.value)


# -- copies in other spellings, and only the copy (refvault.content.scrub) -----------------------------------------

SECRET = PNG + hashlib.shake_256(b"secret").digest(3000)
SECRET_B64 = b64(SECRET)


def scrubbed(text: str, *others: bytes) -> str:
    """``text`` after scrubbing with SECRET (and ``others``) stored as <0>, <1>, ..."""
    parts = [(b64(data), f"<{n}>") for n, data in enumerate((SECRET, *others))]
    return str(Scrubber(parts)(text))


def percent(text: str) -> str:
    return text.replace("+", "%2B").replace("/", "%2F").replace("=", "%3D")


@pytest.mark.parametrize(
    ("spelled", "expected"),
    [
        (lambda e: f"see {e} ok", "see <0> ok"),
        (lambda e: f"see data:image/png;name=a.png;base64,{e} ok", "see <0> ok"),
        (lambda e: "x " + "\n".join(e[i : i + 57] for i in range(0, len(e), 57)) + " y", "x <0> y"),
        (lambda e: "x " + "\r\n".join(e[i : i + 60] for i in range(0, len(e), 60)) + " y", "x <0> y"),
        (lambda e: "x " + "\n    ".join(e[i : i + 64] for i in range(0, len(e), 64)) + " y", "x <0> y"),
        (lambda e: "x " + "\\n".join(e[i : i + 76] for i in range(0, len(e), 76)) + " y", "x <0> y"),
        (lambda e: f"x {e.replace('+', '-').replace('/', '_').rstrip('=')} y", "x <0> y"),
        (lambda e: f'{{"img": "{e.replace("/", chr(92) + "/")}"}}', '{"img": "<0>"}'),
        (lambda e: f'{{"img": "{e.replace("+", chr(92) + "u002B")}"}}', '{"img": "<0>"}'),
        (
            lambda e: f"https://v.example/?src={percent('data:image/png;base64,' + e)}&z=1",
            "https://v.example/?src=<0>&z=1",
        ),
        (lambda e: f"a {e[500:1500]} b", "a <0> b"),
        (lambda e: f"a {e[:63]} b", "a <0> b"),
    ],
    ids=[
        "inline",
        "data-url",
        "wrapped-57",
        "wrapped-60-crlf",
        "wrapped-indented",
        "wrapped-json-escaped",
        "url-safe-unpadded",
        "json-escaped-slash",
        "json-escaped-plus",
        "percent-encoded-data-url",
        "middle",
        "63-characters",
    ],
)
def test_copies_in_other_spellings_are_replaced_and_nothing_else(spelled: Any, expected: str) -> None:
    assert scrubbed(spelled(SECRET_B64)) == expected


def test_a_copy_split_into_list_chunks_is_replaced() -> None:
    chunks = [SECRET_B64[i : i + 20] for i in range(0, len(SECRET_B64), 20)]
    got = Scrubber([(SECRET_B64, "<0>")])({"chunks": ["before", 7, *chunks, 8, "after"]})
    assert got["chunks"][:3] == ["before", 7, "<0>"]
    assert set(got["chunks"][3:-2]) == {""}
    assert got["chunks"][-2:] == [8, "after"]


def test_unrelated_base64_around_a_copy_is_kept() -> None:
    other = b64(hashlib.shake_256(b"other").digest(300)).rstrip("=")
    copy_ = SECRET_B64[200:1000]
    assert other[-1] != SECRET_B64[199]  # no accidental one-character overlap on either side
    assert other[0] != SECRET_B64[1000]
    assert scrubbed(other + copy_ + other) == other + "<0>" + other
    assert scrubbed(other) == other


def test_low_information_spans_are_kept() -> None:
    silence = WAV_HEAD + bytes(3000)
    text_ = "poly-A: " + "A" * 200 + " zeros: " + "0" * 100
    assert str(Scrubber([(b64(silence), "<0>")])(text_)) == text_
    assert str(Scrubber([(b64(silence), "<0>")])(b64(silence)[:120])) == "<0>", "informative: the header is there"


def test_short_parts_are_found_inside_text_and_tiny_parts_only_whole() -> None:
    short, tiny = hashlib.shake_256(b"short").digest(20), b"\x01\x02\x03"
    scrub = Scrubber([(b64(short), "<s>"), (b64(tiny), "<t>")])
    assert scrub(f"x {b64(short)} y") == "x <s> y"
    assert scrub(b64(tiny)) == "<t>"
    assert scrub(f"x {b64(tiny)} y") == f"x {b64(tiny)} y"


def test_the_first_of_two_identical_parts_wins() -> None:
    scrub = Scrubber([(SECRET_B64, "<0>"), (SECRET_B64, "<1>")])
    assert scrub(["x " + SECRET_B64 + " y", SECRET_B64]) == ["x <0> y", "<0>"]


def test_direct_and_indexed_searches_agree() -> None:
    """A few texts are searched with str.find; many against a large part make the scrubber build its index."""
    rng = random.Random(7)
    big = b64(PNG + hashlib.shake_256(b"big").digest(200_000))
    fillers = [b64(rng.randbytes(rng.randrange(0, 600))).rstrip("=") for _ in range(60)]
    copies = []
    for _ in range(60):
        start = rng.randrange(0, len(big) - 100)
        copies.append(big[start : start + rng.randrange(63, 1200)])
    texts = [f"{filler}.{copy_}.{filler}" for filler, copy_ in zip(fillers, copies, strict=True)]
    direct = Scrubber([(big, "<0>")])
    one_by_one = [direct(text_) for text_ in texts[:3]]
    assert direct._long is not None
    assert direct._long._index is None, "a few short texts are searched directly"
    indexed = Scrubber([(big, "<0>")])
    together = [indexed(text_) for text_ in texts]
    assert indexed._long is not None
    assert indexed._long._index is not None, "many are searched with an index"
    assert together[:3] == one_by_one
    for text_, filler in zip(together, fillers, strict=True):
        assert text_ == f"{filler}.<0>.{filler}"


@st.composite
def spelled_copies(draw: st.DrawFn) -> tuple[bytes, str]:
    data = PNG + draw(st.binary(min_size=60, max_size=2000))
    encoded = b64(data)
    start = draw(st.integers(0, len(encoded) - 64))
    piece = encoded[start : start + draw(st.integers(64, len(encoded)))]
    how = draw(st.sampled_from(["plain", "wrapped", "urlsafe", "percent", "json"]))
    if how == "wrapped":
        width = draw(st.integers(4, 90))
        piece = draw(st.sampled_from(["\n", "\r\n", "\\n", "\n  "])).join(
            piece[i : i + width] for i in range(0, len(piece), width)
        )
    elif how == "urlsafe":
        piece = piece.replace("+", "-").replace("/", "_")
    elif how == "percent":
        piece = percent(piece)
    elif how == "json":
        piece = piece.replace("/", "\\/")
    return data, piece


@settings(max_examples=150, deadline=None)
@given(case=spelled_copies(), before=st.text(max_size=30), after=st.text(max_size=30))
def test_random_spellings_of_copies_leave_no_informative_window(
    case: tuple[bytes, str], before: str, after: str
) -> None:
    data, piece = case
    got = str(Scrubber([(b64(data), "<0>")])(f"{before} {piece} {after}"))
    readable = got.replace("\\/", "/").replace("\\n", "")
    readable = "".join(urllib.parse.unquote(readable).split())
    for spelling in all_spellings(data):
        normal = spelling.replace("-", "+").replace("_", "/")
        for start in range(len(normal) - 63):
            window = normal[start : start + 64]
            if informative(window):
                assert window not in readable.replace("-", "+").replace("_", "/")


# -- the parts themselves: counts, kinds, names, URIs, media types --------------------------------------------------


def test_max_parts_at_and_over(vault: Vault, scope: Scope) -> None:
    limits = Limits(max_parts=3)
    value = result(image(png(seed=1)), text("t"), audio(wav()), image(png(seed=2)))
    assert len(run(vault, scope, value, limits=limits)["content"]) == 4
    before = snapshot(vault)
    with pytest.raises(TooLarge) as caught:
        run(vault, scope, result(*[image(png(seed=i)) for i in range(4)]), limits=limits, tool_call_id="c2")
    assert caught.value.permanent is True
    assert snapshot(vault) == before
    assert Limits().max_parts == 1000
    with pytest.raises(InvalidArgument):
        Limits(max_parts=0)


@pytest.mark.parametrize(
    "block",
    [
        {"type": "resource_link", "uri": "refvault://art_aaaaaaaaaaaaaaaaaaaaaaaaaa", "name": "x"},
        {"type": "resource_link", "uri": " RefVault://art_x", "name": "x"},
        {"type": "resource", "resource": {"uri": "refvault://art_x", "text": "forged", "mimeType": "text/plain"}},
        {"type": "resource", "resource": {"uri": "refvault://art_x", "blob": b64(pdf())}},
        {"type": "video", "data": b64(pdf()), "mimeType": "video/mp4"},
        {"type": "x-vendor", "blob": "AAAA"},
        {"type": "x-vendor", "resource": {"uri": "file:///a", "blob": "AAAA"}},
    ],
    ids=["refvault-link", "refvault-link-case", "refvault-text", "refvault-blob", "video", "vendor-blob", "nested"],
)
def test_forged_links_and_unknown_binary_kinds_are_refused(vault: Vault, scope: Scope, block: dict[str, Any]) -> None:
    before = snapshot(vault)
    for value in (result(block), result(image(png()), block)):
        with pytest.raises(InvalidResult) as caught:
            run(vault, scope, value)
        assert caught.value.content_index == len(value["content"]) - 1
    assert snapshot(vault) == before


def test_unknown_kinds_without_bytes_pass_through(vault: Vault, scope: Scope) -> None:
    vendor = {"type": "x-vendor", "note": "hello"}
    assert run(vault, scope, result(vendor)) == result(vendor)
    assert run(vault, scope, result(image(png()), vendor))["content"][1] == vendor


@pytest.mark.parametrize(
    ("block", "stored", "check"),
    [
        (
            image(b"<!doctype html><html><script>alert(1)</script></html>", "text/html"),
            "application/octet-stream",
            "mismatch",
        ),
        (image(png(), "application/octet-stream"), "application/octet-stream", "mismatch"),
        (audio(png(), "image/png"), "application/octet-stream", "mismatch"),
        (audio(wav(), "video/x-msvideo"), "application/octet-stream", "mismatch"),
        (blob(b"<svg onload=alert(1)>", None), "application/octet-stream", "unknown"),
        (blob(b"<!DOCTYPE html><p>", "application/octet-stream"), "application/octet-stream", "unknown"),
        (blob(b"<?xml version='1.0'?><a/>", None), "application/octet-stream", "unknown"),
        (blob(b"<svg xmlns='http://www.w3.org/2000/svg'/>", "image/svg+xml"), "image/svg+xml", "match"),
        (blob(png(), None), "image/png", "unknown"),
    ],
    ids=["image-html", "image-octet", "audio-png", "audio-video", "svg", "html", "xml", "declared-svg", "png"],
)
def test_block_kinds_and_active_types(
    vault: Vault, scope: Scope, block: dict[str, Any], stored: str, check: str
) -> None:
    got = run(vault, scope, result(block))["content"][0]
    assert got["mimeType"] == stored
    assert got["_meta"]["media_type_check"] == check
    assert vault.describe(scope, artifact_id_of(got)).media_type == stored


@pytest.mark.parametrize(
    ("uri", "mime", "name"),
    [
        ("https://h/invoice.html", "image/png", "invoice.png"),
        ("https://h/photo.jpeg", "image/jpeg", "photo.jpeg"),
        ("https://h/photo.PNG", "image/png", "photo.PNG"),
        ("https://h/photo.png", "image/jpeg", "photo.jpg"),
        ("https://h/doc.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document", "doc.docx"),
        ("https://h/notes", "image/png", "notes"),
        ("https://h/.html", "image/png", ".html.png"),
        ("https://h/a.png:evil.exe", "image/png", "a.png_evil.png"),
    ],
)
def test_names_keep_an_extension_consistent_with_the_stored_type(
    vault: Vault, scope: Scope, uri: str, mime: str, name: str
) -> None:
    data = JPEG_HEAD + b"\x00" * 40 if mime == "image/jpeg" else png()
    if mime.startswith("application/vnd"):
        data = b"PK\x03\x04" + b"\x00" * 60
    got = run(vault, scope, result(blob(data, mime, uri=uri)))["content"][0]
    assert got["name"] == name
    assert vault.describe(scope, artifact_id_of(got)).filename == name


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("file:///x/CON", None),
        ("file:///x/nul.png", None),
        ("file:///x/Com1.tar.gz", None),
        ("file:///x/lpt\u00b9", None),
        ("file:///x/CONSOLE.txt", "CONSOLE.txt"),
        ("file:///x/report.pdf.", "report.pdf"),
        ("file:///x/report.pdf . .", "report.pdf"),
        ('file:///x/a<b>c|d%3Fe*f".txt', "a_b_c_d_e_f_.txt"),
        ("file:///x/a.png:evil.exe", "a.png_evil.exe"),
    ],
)
def test_safe_filename_refuses_windows_hostile_names(uri: str, expected: str | None) -> None:
    assert safe_filename(uri) == expected


@pytest.mark.parametrize(
    ("uri", "recorded"),
    [
        ("https://user:pw@Example.COM:8443/a/b.pdf?token=s3cret#p2", "https://example.com:8443/a/b.pdf"),
        ("file:///reports/q3.pdf", "file:///reports/q3.pdf"),
        ("urn:isbn:0451450523", "urn:isbn:0451450523"),
        ("data:application/pdf;base64,JVBERi0x", None),
        ("DATA:application/pdf;base64,JVBERi0x", None),
        ("https://[::1]:8080/x", "https://[::1]:8080/x"),
        ("../../etc/passwd", "../../etc/passwd"),
        ("https://h/" + "a" * 3000, None),
    ],
)
def test_source_uri_keeps_scheme_host_and_path_only(vault: Vault, scope: Scope, uri: str, recorded: str | None) -> None:
    got = run(vault, scope, result(blob(pdf(), uri=uri)))["content"][0]
    descriptor = vault.describe(scope, artifact_id_of(got))
    assert descriptor.source_version.get("source_uri") == recorded
    assert got["_meta"].get("source_uri") == recorded


def test_names_and_uris_carrying_a_parts_base64_are_not_recorded(vault: Vault, scope: Scope) -> None:
    data = pdf(3000)
    encoded = b64(data)
    uri = "https://h/files/" + encoded[:120].replace("/", "_") + ".pdf?x=" + encoded
    got = run(vault, scope, result(text("t"), blob(data, uri=uri)))["content"][1]
    descriptor = vault.describe(scope, artifact_id_of(got))
    assert got["name"] == descriptor.filename == "content-001.pdf"
    assert "source_uri" not in descriptor.source_version
    assert_no_base64(got, [data])
    with pytest.raises(InvalidResult):
        run(vault, scope, result(image(data, f"image/png; x={encoded[:200]}")), tool_call_id="c2")


def test_resource_meta_is_kept_scrubbed(vault: Vault, scope: Scope) -> None:
    data = pdf(2000)
    block = blob(data)
    block["resource"]["_meta"] = {"pages": 3, "thumb": b64(data)}
    block["_meta"] = {"block": True}
    got = run(vault, scope, result(block))["content"][0]
    assert got["_meta"]["upstream_meta"] == {"block": True}
    assert got["_meta"]["upstream_resource_meta"] == {"pages": 3, "thumb": got["uri"]}


# -- depth, created_at on retry, the event loop --------------------------------------------------------------------


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def test_deep_structured_content_is_omitted_and_deep_content_refused(vault: Vault, scope: Scope) -> None:
    ok = run(vault, scope, result(image(png()), structuredContent={"d": nested(90)}))
    assert ok["structuredContent"] == {"d": nested(90)}
    deep = run(vault, scope, result(image(png()), structuredContent={"d": nested(5000)}), tool_call_id="c2")
    assert "nested more than" in deep["structuredContent"]["refvault_omitted"]
    text_only = run(vault, scope, result(text("t"), structuredContent=nested(5000)), tool_call_id="c3")
    assert set(text_only["structuredContent"]) == {"refvault_omitted"}
    before = snapshot(vault)
    for value in (result(image(png()), _meta={"d": nested(5000)}), result(image(png(), _meta={"d": nested(500)}))):
        with pytest.raises(InvalidResult):
            run(vault, scope, value, tool_call_id="c4")
    assert snapshot(vault) == before


def test_a_retry_after_a_partial_failure_keeps_one_created_at(
    vault: Vault, scope: Scope, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_put = vault.put
    calls: list[int] = []

    def failing_third(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:
            raise StorageError(28, "No space left on device")
        return real_put(*args, **kwargs)

    value = result(image(png(seed=1)), audio(wav()), blob(pdf()))
    monkeypatch.setattr(vault, "put", failing_third)
    with pytest.raises(MaterializationError):
        run(vault, scope, value)
    vault.clock.advance(seconds=60)  # type: ignore[attr-defined]
    monkeypatch.setattr(vault, "put", real_put)
    content = run(vault, scope, value)["content"]
    assert len({vault.describe(scope, artifact_id_of(block)).created_at for block in content}) == 1


def test_materialisation_runs_off_the_event_loop(vault: Vault, scope: Scope, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    loop_thread: list[int] = []
    seen: list[int] = []
    real = Scrubber.strings

    def spy(self: Scrubber, texts: list[str]) -> list[str]:
        seen.append(threading.get_ident())
        return real(self, texts)

    monkeypatch.setattr(Scrubber, "strings", spy)

    async def main() -> None:
        loop_thread.append(threading.get_ident())
        await materialize(vault, scope, result(image(png()), text("t")), provenance="p", tool_call_id="c")

    asyncio.run(main())
    assert seen
    assert loop_thread[0] not in seen
