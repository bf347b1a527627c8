"""``Vault.put_computed``: a computation's output is a copy with lineage and a receipt; its inputs must be the
caller's own readable artifacts, checked before anything is stored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from refvault import Scope, Vault
from refvault.errors import InvalidArgument, NotFound

OWNER = Scope("acme", "ana", "s1")
OTHER = Scope("acme", "bob", "s1")


@pytest.fixture(params=["embedded", "memory"])
def vault(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Vault]:
    with Vault.open(tmp_path / "store" if request.param == "embedded" else "memory://") as opened:
        yield opened


def test_a_computed_output_has_lineage_and_a_receipt(vault: Vault) -> None:
    a = vault.put(OWNER, b"1", media_type="text/plain")
    b = vault.put(OWNER, b"2", media_type="text/plain")
    out = vault.put_computed(
        OWNER,
        b"3",
        media_type="text/plain",
        derived_from=[a.artifact_id, b.artifact_id],
        transformation="sum",
        version="2",
        counts={"inputs": 2},
    )
    receipt = vault.receipt(OWNER, out.artifact_id)
    assert (receipt.kind, receipt.transformation, receipt.version) == ("computation", "sum", "2")
    assert [s["content_hash"] for s in receipt.sources] == [a.content_hash, b.content_hash]
    assert receipt.counts == {"inputs": 2}
    assert vault.lineage_status(OWNER, out.artifact_id) == "current"
    vault.supersede(OWNER, a.artifact_id, b.artifact_id, reason="newer input")
    assert vault.lineage_status(OWNER, out.artifact_id) == "stale"


def test_an_input_of_another_principal_is_not_found_and_nothing_is_stored(vault: Vault) -> None:
    theirs = vault.put(OTHER, b"x", media_type="text/plain")
    with pytest.raises(NotFound):
        vault.put_computed(OWNER, b"y", derived_from=[theirs.artifact_id], transformation="t")
    assert vault.list(OWNER) == []


@pytest.mark.parametrize(
    "arguments",
    [
        {"derived_from": []},
        {"transformation": ""},
        {"transformation": "bad\nname"},
        {"version": ""},
        {"counts": {"n": -1}},
        {"counts": {"n": True}},
        {"counts": {f"k{i}": 1 for i in range(33)}},
        {"supersedes": "art_" + "a" * 26},
    ],
    ids=["no-inputs", "empty-transformation", "newline", "empty-version", "negative", "bool", "too-many", "supersedes"],
)
def test_bad_arguments_are_refused_before_anything_is_stored(vault: Vault, arguments: dict[str, Any]) -> None:
    source = vault.put(OWNER, b"1", media_type="text/plain")
    call: dict[str, Any] = {"derived_from": [source.artifact_id], "transformation": "t", **arguments}
    with pytest.raises(InvalidArgument):
        vault.put_computed(OWNER, b"2", **call)
    assert [d.artifact_id for d in vault.list(OWNER)] == [source.artifact_id]
