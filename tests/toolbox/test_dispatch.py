"""Dispatch: what a tool raises or returns (BaseException, StopIteration, coroutines) and validation errors that echo
nothing.
"""

from __future__ import annotations

import asyncio
import secrets
import traceback
from typing import Any

import pytest
from pydantic import BaseModel, field_validator

from refvault import Ref, Scope, Toolbox, Vault

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


def test_a_sync_tool_raising_stop_iteration_does_not_hang_the_async_call(vault: Vault) -> None:
    box = Toolbox(vault)

    @box.tool
    def first() -> int:
        return next(iter([]))

    obs = asyncio.run(asyncio.wait_for(box.call("first", {}, scope=SCOPE), timeout=30))
    assert (obs.is_error, obs.content) == (True, "error: the tool raised StopIteration")


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
