"""Ref resolution at dispatch: refs in any collection, streams bounded and closed with the call, expiry and reads
after the call.
"""

from __future__ import annotations

import asyncio
import collections
import json
from datetime import timedelta
from typing import Any, NewType

import pytest

from refvault import Ref, Scope, Toolbox, Vault
from refvault.errors import UnresolvedRef
from tests.conftest import Clock

SCOPE = Scope("acme", "ana", "s1")


def test_open_streams_in_bounded_memory_and_closes_with_the_call(vault: Vault) -> None:
    data = b"x" * 3_000_000
    d = vault.put(SCOPE, data)
    box = Toolbox(vault)
    kept: list[Any] = []

    @box.tool
    def head(doc: Ref) -> int:
        stream = doc.open()
        kept.append(stream)
        return len(stream.read(10))

    assert box.call_sync("head", {"doc": d.artifact_id}, scope=SCOPE).content == "10"
    assert kept[0].closed


def test_an_artifact_expiring_mid_call_gives_the_same_error_as_at_dispatch(vault: Vault, clock: Clock) -> None:
    d = vault.put(SCOPE, b"short-lived", expires_at=clock.now + timedelta(seconds=1))
    box = Toolbox(vault)

    @box.tool
    def late(doc: Ref) -> int:
        clock.advance(seconds=2)
        return len(doc.read())

    mid = box.call_sync("late", {"doc": d.artifact_id}, scope=SCOPE)
    before = box.call_sync("late", {"doc": d.artifact_id}, scope=SCOPE)
    assert mid.is_error
    assert before.is_error
    assert mid.content == before.content


DocId = NewType("DocId", Ref)


def test_refs_in_newtypes_mapping_keys_and_other_collections_are_resolved(vault: Vault) -> None:
    d = vault.put(SCOPE, b"12345")
    box = Toolbox(vault)

    @box.tool
    def via_newtype(doc: DocId) -> int:
        return len(doc.read())

    @box.tool
    def via_keys(weights: dict[Ref, int]) -> int:
        return sum(len(ref.read()) * w for ref, w in weights.items())

    @box.tool
    def via_deque(docs: collections.deque[Ref]) -> int:
        return sum(len(ref.read()) for ref in docs)

    assert box.call_sync("via_newtype", {"doc": d.artifact_id}, scope=SCOPE).content == "5"
    assert box.call_sync("via_keys", {"weights": {d.artifact_id: 2}}, scope=SCOPE).content == "10"
    assert box.call_sync("via_deque", {"docs": [d.artifact_id]}, scope=SCOPE).content == "5"


def test_a_read_after_the_call_ends_is_unresolved_even_from_a_lingering_task(vault: Vault) -> None:
    d = vault.put(SCOPE, b"abc")
    box = Toolbox(vault)
    lingering: list[asyncio.Task[bytes]] = []

    @box.tool
    async def spawn(doc: Ref) -> str:
        async def later() -> bytes:
            await asyncio.sleep(0.01)
            return doc.read()

        lingering.append(asyncio.ensure_future(later()))
        return "spawned"

    async def main() -> None:
        assert (await box.call("spawn", {"doc": d.artifact_id}, scope=SCOPE)).content == "spawned"
        with pytest.raises(UnresolvedRef):
            await lingering[0]

    asyncio.run(main())
    assert json.dumps([e.to_dict() for e in box.trajectory(None)])
