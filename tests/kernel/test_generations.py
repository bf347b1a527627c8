"""Generations: ``reset`` makes every earlier handle stale (``StaleHandle``) and deletes the transient snapshots
of the generation it ends; a ``persist=True`` snapshot survives and resolves visibly stale and durable."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from refvault import Kernel, Vault
from refvault.errors import InvalidArgument, NotFound, StaleHandle, StorageError
from tests.kernel.conftest import SCOPE, stored_ids


def test_reset_makes_every_older_handle_stale(kernel: Kernel) -> None:
    first = kernel.snapshot("a", {"v": 1})
    kernel.reset()
    second = kernel.snapshot("b", {"v": 2})
    kernel.reset()
    for handle in (first, second):
        with pytest.raises(StaleHandle) as caught:
            kernel.resolve(handle)
        assert "persist=True" in str(caught.value)
    assert kernel.generation == 3


def test_a_stale_handle_is_stale_even_as_a_dict(kernel: Kernel) -> None:
    handle = kernel.snapshot("a", [1])
    kernel.reset()
    with pytest.raises(StaleHandle):
        kernel.resolve(handle.to_dict())


def test_reset_deletes_the_transient_snapshots_and_keeps_the_persisted(vault: Vault, kernel: Kernel) -> None:
    transient = kernel.snapshot("t", {"v": 1})
    durable = kernel.snapshot("d", {"v": 2}, persist=True)
    report = kernel.reset()
    assert report.generation == 2
    assert report.deleted == (transient.artifact_id,)
    assert report.kept == ()
    with pytest.raises(NotFound):
        vault.describe(SCOPE, transient.artifact_id)
    assert vault.describe(SCOPE, durable.artifact_id).expires_at is None
    assert stored_ids(vault) == {durable.artifact_id}


def test_a_persisted_snapshot_resolves_after_reset_and_says_it_is_stale_and_durable(kernel: Kernel) -> None:
    live = np.arange(4)
    handle = kernel.snapshot("weights", live, persist=True)
    current = kernel.resolve(handle)
    assert (current.state, current.stale, current.durable) == ("current", False, True)
    live[0] = 42
    kernel.reset()
    kernel.reset()
    resolved = kernel.resolve(handle)
    assert resolved.state == "durable"
    assert resolved.stale is True
    assert resolved.durable is True
    assert resolved.info()["stale"] is True
    assert resolved.info()["durable"] is True
    assert resolved.info()["generation"] == 1
    assert resolved.info()["current_generation"] == 3
    assert repr(resolved).startswith("Resolved(STALE")
    assert np.array_equal(resolved.value, np.arange(4))


def test_a_held_transient_snapshot_is_kept_and_reported_and_its_handle_is_stale(vault: Vault, kernel: Kernel) -> None:
    handle = kernel.snapshot("t", {"v": 1})
    vault.hold(SCOPE, handle.artifact_id, reason="legal")
    report = kernel.reset()
    assert report.kept == (handle.artifact_id,)
    assert report.deleted == ()
    assert vault.read_bytes(SCOPE, handle.artifact_id) == b'{"v":1}'
    with pytest.raises(StaleHandle):
        kernel.resolve(handle)


def test_reset_deletes_a_computations_result_before_its_inputs(vault: Vault, kernel: Kernel) -> None:
    source = kernel.snapshot("src", [1, 2])
    result = kernel.compute(sum, source, name="total")
    report = kernel.reset()
    assert report.deleted == (result.artifact_id, source.artifact_id)
    assert stored_ids(vault) == set()


def test_close_deletes_the_transient_snapshots_and_refuses_every_later_call(vault: Vault) -> None:
    with Kernel(vault, SCOPE) as kernel:
        transient = kernel.snapshot("t", 1)
        durable = kernel.snapshot("d", 2, persist=True)
    assert stored_ids(vault) == {durable.artifact_id}
    assert transient.artifact_id not in stored_ids(vault)
    for call in (lambda: kernel.snapshot("x", 1), lambda: kernel.resolve(durable), kernel.reset):
        with pytest.raises(StorageError):
            call()
    kernel.close()  # closing twice is harmless


def test_ttl_gives_transient_snapshots_an_expiry_and_persisted_ones_none(vault: Vault) -> None:
    kernel = Kernel(vault, SCOPE, ttl=timedelta(hours=1))
    transient = vault.describe(SCOPE, kernel.snapshot("t", 1).artifact_id)
    durable = vault.describe(SCOPE, kernel.snapshot("d", 1, persist=True).artifact_id)
    assert transient.expires_at is not None
    assert timedelta(minutes=59) < transient.expires_at - transient.created_at <= timedelta(hours=1)
    assert durable.expires_at is None


@pytest.mark.parametrize("ttl", [timedelta(0), timedelta(seconds=-1), 3600])
def test_a_ttl_that_is_not_a_positive_timedelta_is_refused(vault: Vault, ttl: object) -> None:
    with pytest.raises(InvalidArgument):
        Kernel(vault, SCOPE, ttl=ttl)  # type: ignore[arg-type]


def test_a_new_kernel_starts_at_generation_one_with_a_fresh_id(vault: Vault) -> None:
    a, b = Kernel(vault, SCOPE), Kernel(vault, SCOPE)
    assert a.generation == b.generation == 1
    assert a.kernel_id != b.kernel_id
    assert a.kernel_id.startswith("krn_")
    assert len(a.kernel_id) == 30
