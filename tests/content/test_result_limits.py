"""Limits of materialize: strict base64, exact boundaries, huge or very many parts and deep nesting are refused
before any write, off the event loop.

Tests named ``test_fN_*`` were findings of a review (each failed before its fix, the defect named in its
docstring); ``test_d_*`` pin attacks the code already defended.
"""

from __future__ import annotations

import asyncio
import binascii
import threading
from typing import Any

import pytest

from refvault import Vault
from refvault.content import Limits, materialize
from refvault.errors import InvalidResult, MaterializationError, TooLarge
from tests.content.parts import (
    SCOPE,
    b64,
    image,
    manifests,
    materialize_module,
    noise,
    png,
    run,
    text,
)


@pytest.fixture
def vault(memory_vault: Vault) -> Vault:
    return memory_vault


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


# -- F6: no bound on the number of parts ------------------------------------------------------------------------------


def test_a_result_with_very_many_parts_is_refused_before_any_write(
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


# -- F11: errors that escape as non-MaterializationError after writes -------------------------------------------------


def test_deeply_nested_structured_content_fails_as_a_materialization_error(vault: Vault) -> None:
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
