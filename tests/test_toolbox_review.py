"""Regression tests for the adversarial review of the Toolbox: each failed before its fix."""

from __future__ import annotations

import asyncio
import collections
import json
import secrets
import traceback
from datetime import timedelta
from typing import Any, Literal, NewType

import pytest
from pydantic import BaseModel, field_validator

from refvault import Artifact, Ref, Scope, Toolbox, Vault
from refvault.errors import UnresolvedRef
from tests.conftest import Clock

SCOPE = Scope("acme", "ana", "s1")


def canary() -> bytes:
    return b"CANARY-" + secrets.token_hex(24).encode() * 4


@pytest.mark.parametrize("kind", [KeyboardInterrupt, SystemExit])
def test_a_tool_raising_a_base_exception_leaks_nothing_through_it(vault: Vault, kind: type[BaseException]) -> None:
    secret = canary()
    d = vault.put(SCOPE, secret, disclosure="sealed")
    box = Toolbox(vault)

    @box.tool
    def boom(doc: Ref) -> str:
        raise kind(doc.read().decode())

    with pytest.raises(kind) as err:
        box.call_sync("boom", {"doc": d.artifact_id}, scope=SCOPE, run_id="r")
    text = "".join(traceback.format_exception(err.value))
    assert secret.decode() not in text
    assert err.value.__context__ is None
    assert [(e.kind, e.error_type) for e in box.trajectory("r")] == [
        ("tool_started", None),
        ("tool_failed", kind.__name__),
    ]


def test_output_derived_from_a_sealed_input_stays_sealed(vault: Vault) -> None:
    d = vault.put(SCOPE, canary(), disclosure="sealed")
    box = Toolbox(vault)

    @box.tool
    def copy(doc: Ref) -> bytes:
        return doc.read()

    @box.tool
    def declassify(doc: Ref) -> Artifact:
        return Artifact(b"a public summary", disclosure="model")

    obs = box.call_sync("copy", {"doc": d.artifact_id}, scope=SCOPE)
    assert obs.artifacts[0]["disclosure"] == "sealed"
    assert box.call_sync("declassify", {"doc": d.artifact_id}, scope=SCOPE).artifacts[0]["disclosure"] == "model"


def test_bytes_nested_in_a_result_never_reach_the_observation(vault: Vault) -> None:
    secret = canary()
    d = vault.put(SCOPE, secret, disclosure="sealed")
    box = Toolbox(vault)

    @box.tool
    def leaky(doc: Ref) -> dict[str, Any]:
        return {"words": 1, "raw": doc.read()}

    obs = box.call_sync("leaky", {"doc": d.artifact_id}, scope=SCOPE)
    assert obs.is_error
    assert secret.decode()[:40] not in obs.content


def test_a_sync_tool_raising_stop_iteration_does_not_hang_the_async_call(vault: Vault) -> None:
    box = Toolbox(vault)

    @box.tool
    def first() -> int:
        return next(iter([]))

    obs = asyncio.run(asyncio.wait_for(box.call("first", {}, scope=SCOPE), timeout=30))
    assert (obs.is_error, obs.content) == (True, "error: the tool raised StopIteration")


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


def test_a_coroutine_returned_by_a_sync_wrapper_is_awaited_inside_the_call(vault: Vault) -> None:
    d = vault.put(SCOPE, b"abc")
    box = Toolbox(vault)

    async def body(doc: Ref) -> int:
        await asyncio.sleep(0)
        return len(doc.read())

    @box.tool
    def wrapped(doc: Ref) -> Any:
        return body(doc)

    assert box.call_sync("wrapped", {"doc": d.artifact_id}, scope=SCOPE).content == "3"
    assert asyncio.run(box.call("wrapped", {"doc": d.artifact_id}, scope=SCOPE)).content == "3"


def test_the_trajectory_is_bounded_and_keeps_active_runs(vault: Vault) -> None:
    box = Toolbox(vault, max_runs=2, max_events_per_run=4)

    @box.tool
    def ping() -> str:
        return "pong"

    box.call_sync("ping", {}, scope=SCOPE, run_id="long")
    box.call_sync("ping", {}, scope=SCOPE, run_id="a")
    for _ in range(3):
        box.call_sync("ping", {}, scope=SCOPE, run_id="long")  # stays active, so "a" is evicted next
    box.call_sync("ping", {}, scope=SCOPE, run_id="b")
    assert len(box.trajectory("long")) == 4
    assert box.trajectory("a") == []
    assert len(box.trajectory("b")) == 2


class Query(BaseModel):
    q: str

    @field_validator("q")
    @classmethod
    def short(cls, value: str) -> str:
        if len(value) > 5:
            raise ValueError(f"query too long: {value!r}")
        return value


def test_validation_errors_never_echo_values_or_long_names(vault: Vault) -> None:
    box = Toolbox(vault)

    @box.tool
    def search(query: Query) -> str:
        return "ok"

    obs = box.call_sync("search", {"query": {"q": "VALUE-5e2b-secret"}}, scope=SCOPE)
    assert obs.is_error
    assert "VALUE-5e2b" not in obs.content
    unknown = box.call_sync("x" * 100_000, {}, scope=SCOPE, run_id="r")
    assert len(unknown.content) < 200
    assert all(len(e.tool) <= 65 for e in box.trajectory("r"))


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


def test_gemini_declarations_stay_inside_geminis_schema_subset(vault: Vault) -> None:
    box = Toolbox(vault)

    @box.tool
    def pair(docs: tuple[Ref, Ref], level: Literal[1, 2, 3] = 1) -> str:
        return "ok"

    @box.tool
    def nothing() -> str:
        return "ok"

    declarations = {d["name"]: d for d in box.schemas("gemini")}
    params = declarations["pair"]["parameters"]
    assert params["properties"]["docs"]["items"]["type"] == "string"
    assert "enum" not in params["properties"]["level"]
    assert "One of: 1, 2, 3" in params["properties"]["level"]["description"]
    assert "parameters" not in declarations["nothing"]

    loose = Toolbox(vault)

    @loose.tool
    def anything(value: Any) -> str:
        return "ok"

    with pytest.raises(ValueError, match="Gemini needs a type"):
        loose.schemas("gemini")
