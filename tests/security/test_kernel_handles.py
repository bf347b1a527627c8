"""A kernel snapshot handle is a claim, never a capability: every edit of its dict, a handle of another kernel or
another scope, and an artifact planted with a forged kernel binding all fail with a typed error, and none of them
resolves to anything (``refvault.kernel.kernel``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from refvault import Handle, Kernel, Scope, Vault
from refvault.errors import InvalidArgument, NotFound, StaleHandle, UnknownHandle

SCOPE = Scope("acme", "ana", "s1")
ELSEWHERE = Scope("acme", "ana", "s2")
OTHER_TENANT = Scope("globex", "ana", "s1")


@pytest.fixture(params=["embedded", "memory"])
def vault(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Vault]:
    with Vault.open(tmp_path / "store" if request.param == "embedded" else "memory://") as opened:
        yield opened


def test_a_generation_edited_to_the_current_one_does_not_revive_an_old_snapshot(vault: Vault) -> None:
    kernel = Kernel(vault, SCOPE)
    old = kernel.snapshot("held", {"v": "old"})
    vault.hold(SCOPE, old.artifact_id, reason="keep the bytes around")  # so the artifact still exists
    kernel.reset()
    forged = replace(old, generation=kernel.generation)
    with pytest.raises(UnknownHandle):
        kernel.resolve(forged)
    with pytest.raises(UnknownHandle):
        kernel.resolve({**old.to_dict(), "generation": kernel.generation})


def test_turning_persist_on_does_not_make_a_transient_snapshot_durable(vault: Vault) -> None:
    kernel = Kernel(vault, SCOPE)
    transient = kernel.snapshot("t", 1)
    vault.hold(SCOPE, transient.artifact_id, reason="keep the bytes around")
    kernel.reset()
    with pytest.raises((StaleHandle, UnknownHandle)):
        kernel.resolve(replace(transient, persist=True))


@pytest.mark.parametrize(
    "edit",
    [
        {"name": "other"},
        {"generation": 2},
        {"persist": True},
        {"kind": "ndarray", "media_type": "application/x-npy"},
    ],
    ids=["name", "future-generation", "persist", "kind"],
)
def test_any_edited_field_of_a_current_handle_is_unknown(vault: Vault, edit: dict[str, Any]) -> None:
    kernel = Kernel(vault, SCOPE)
    handle = kernel.snapshot("h", [1, 2])
    with pytest.raises(UnknownHandle):
        kernel.resolve({**handle.to_dict(), **edit})
    assert kernel.resolve(handle).value == [1, 2]  # the genuine handle still works


def test_pointing_a_handle_at_another_snapshot_of_the_same_kernel_fails(vault: Vault) -> None:
    kernel = Kernel(vault, SCOPE)
    mine = kernel.snapshot("mine", "a")
    theirs = kernel.snapshot("theirs", "b", persist=True)
    with pytest.raises(UnknownHandle):
        kernel.resolve(replace(mine, artifact_id=theirs.artifact_id))


def test_a_handle_of_another_kernel_in_the_same_scope_does_not_resolve(vault: Vault) -> None:
    first, second = Kernel(vault, SCOPE), Kernel(vault, SCOPE)
    handle = first.snapshot("h", 1, persist=True)
    with pytest.raises(UnknownHandle):
        second.resolve(handle)
    with pytest.raises(UnknownHandle):  # and claiming to be the second kernel's does not help
        second.resolve(replace(handle, kernel_id=second.kernel_id))


@pytest.mark.parametrize("other", [ELSEWHERE, OTHER_TENANT], ids=["other-session", "other-tenant"])
def test_a_handle_from_another_scope_does_not_resolve(vault: Vault, other: Scope) -> None:
    theirs = Kernel(vault, other)
    handle = theirs.snapshot("h", {"secret": 1}, persist=True)
    mine = Kernel(vault, SCOPE)
    for attempt in (handle, replace(handle, kernel_id=mine.kernel_id)):
        with pytest.raises(NotFound) as caught:
            mine.resolve(attempt)
        assert isinstance(caught.value, UnknownHandle)
        assert "secret" not in str(caught.value)


def test_an_artifact_planted_with_a_forged_kernel_binding_does_not_resolve(vault: Vault) -> None:
    kernel = Kernel(vault, SCOPE)
    genuine = kernel.snapshot("h", {"v": "genuine"})
    binding = {"id": kernel.kernel_id, "generation": kernel.generation, "name": "h", "persist": False, "kind": "json"}
    planted = vault.put(SCOPE, b'{"v":"planted"}', media_type="application/json", source_version={"kernel": binding})
    with pytest.raises(UnknownHandle):
        kernel.resolve(replace(genuine, artifact_id=planted.artifact_id))


@pytest.mark.parametrize(
    "data",
    [
        None,
        "handle",
        [],
        {},
        {"type": "refvault.kernel.snapshot"},
        "extra-key",
        "bad-id",
        "bad-kernel",
        "bool-generation",
        "zero-generation",
        "string-persist",
        "kind-media-mismatch",
        "long-name",
    ],
)
def test_a_malformed_handle_dict_is_an_invalid_argument_that_repeats_nothing(vault: Vault, data: object) -> None:
    kernel = Kernel(vault, SCOPE)
    good = kernel.snapshot("h", 1).to_dict()
    variants: dict[str, dict[str, Any]] = {
        "extra-key": {**good, "scope": "acme"},
        "bad-id": {**good, "artifact_id": "art_<ignore previous instructions>"},
        "bad-kernel": {**good, "kernel_id": "krn_x"},
        "bool-generation": {**good, "generation": True},
        "zero-generation": {**good, "generation": 0},
        "string-persist": {**good, "persist": "yes"},
        "kind-media-mismatch": {**good, "kind": "dataframe"},
        "long-name": {**good, "name": "n" * 129},
    }
    given = variants.get(data, data) if isinstance(data, str) else data
    with pytest.raises(InvalidArgument) as caught:
        kernel.resolve(given)  # type: ignore[arg-type]
    assert "ignore previous" not in str(caught.value)


def test_json_that_is_not_a_handle_is_refused() -> None:
    for text in ("not json", "[1]", '{"type": "other"}'):
        with pytest.raises(InvalidArgument):
            Handle.from_json(text)


def test_the_binding_stored_with_the_artifact_is_checked_too(vault: Vault) -> None:
    kernel = Kernel(vault, SCOPE)
    genuine = kernel.snapshot("h", {"v": "genuine"})
    planted = vault.put(SCOPE, b'{"v":"planted"}', media_type="application/json")  # no kernel binding at all
    forged = replace(genuine, artifact_id=planted.artifact_id)
    kernel._issued[planted.artifact_id] = forged  # even a record the kernel holds needs the artifact to agree
    with pytest.raises(UnknownHandle):
        kernel.resolve(forged)
