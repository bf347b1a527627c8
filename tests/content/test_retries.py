"""Retries and cancellation of one tool call: all or nothing, one created_at, conflicts, scopes and concurrent
retries.

Tests named ``test_fN_*`` were findings of a review (each failed before its fix, the defect named in its
docstring); ``test_d_*`` pin attacks the code already defended.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from refvault import Vault
from refvault.content import materialize
from refvault.errors import MaterializationError, NotFound, StorageError
from tests.content.parts import OTHER, SCOPE, image, link_id, manifests, png, run


@pytest.fixture
def vault(memory_vault: Vault) -> Vault:
    return memory_vault


@pytest.fixture
def store(embedded_vault: Vault) -> Vault:
    return embedded_vault


# -- F7: a write lands after the cancellation was delivered ----------------------------------------------------------


def test_no_write_lands_after_materialize_reports_cancellation(vault: Vault) -> None:
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


def test_parts_share_one_created_at_after_a_partial_failure_and_retry(
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


def test_d_concurrent_retries_of_one_call_agree(store: Vault) -> None:
    blocks = [image(png(20_000, f"cc{i}")) for i in range(5)]

    async def main() -> list[Any]:
        calls = [materialize(store, SCOPE, {"content": blocks}, provenance="p", tool_call_id="dup") for _ in range(4)]
        return await asyncio.gather(*calls)

    results = asyncio.run(main())
    ids = [[link_id(block) for block in result["content"]] for result in results]
    assert all(each == ids[0] for each in ids)
    assert len(store.list(SCOPE)) == 5
