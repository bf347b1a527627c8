"""The kernel tests run on the embedded default store (SQLite + files in a temporary directory) and the memory store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from refvault import Kernel, Scope, Vault

SCOPE = Scope("acme", "ana", "s1")


@pytest.fixture(params=["embedded", "memory"])
def vault(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Vault]:
    location = tmp_path / "store" if request.param == "embedded" else "memory://"
    with Vault.open(location) as opened:
        yield opened


@pytest.fixture
def kernel(vault: Vault) -> Kernel:
    return Kernel(vault, SCOPE)


def stored_ids(vault: Vault) -> set[str]:
    """Every artifact id of the test scope (what a refused snapshot must not add to)."""
    return {d.artifact_id for d in vault.list(SCOPE)}
