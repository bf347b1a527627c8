"""A run's budget changed on one server binds what other servers reserved before the change: a lowered limit,
a restart, or a budget cleared and set again leaves the run at most one operation past its new limits once
the others have read it (within REFRESH), and a set without restart keeps what the run spent."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from refvault import Budget, BudgetExceeded, Scope, Vault
from refvault.blobs.memory import MemoryBlobStore
from refvault.catalog.memory import MemoryCatalog
from refvault.vault import budgeting
from tests.servers import fresh_catalog

RUN = Scope("acme", "ana", "run")
REFRESH = 0.05  # the tests shorten the refresh bound (the production one is a second)


@pytest.fixture(autouse=True)
def quick_refresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(budgeting, "REFRESH", REFRESH)


@pytest.fixture(params=["memory", "embedded", "postgres"])
def servers(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Vault, Vault]]:
    """Two vaults over one store: two servers sharing the run's row (each with its own ledger)."""
    if request.param == "memory":
        blobs, catalog = MemoryBlobStore(), MemoryCatalog()
        with Vault(blobs, catalog) as here, Vault(blobs, catalog) as there:
            yield here, there
    elif request.param == "postgres":
        url, blobs_dir = fresh_catalog(request.getfixturevalue("postgres_url")), str(tmp_path / "blobs")
        with Vault.open(url, blobs=blobs_dir) as here, Vault.open(url, blobs=blobs_dir) as there:
            yield here, there
    else:
        store = tmp_path / "store"
        with Vault.open(store) as here:
            here.put(RUN, b"make the store")
            with Vault.open(store) as there:
                yield here, there


def _reads_until_refused(vault: Vault, artifact: str, most: int = 500) -> int:
    served = 0
    try:
        while served < most:
            vault.read_bytes(RUN, artifact)
            served += 1
    except BudgetExceeded as exc:
        assert exc.dimension == "read_calls"
    return served


def test_a_lowered_limit_stops_another_servers_reservation(servers: tuple[Vault, Vault]) -> None:
    here, there = servers
    artifact = here.put(RUN, b"x" * 100).artifact_id
    here.set_budget(RUN, Budget(read_calls=1000))
    there.read_bytes(RUN, artifact)  # "there" reserves a lease of about an eighth of 1000 read calls
    assert here.usage(RUN).spent["read_calls"] > 5  # its lease is counted in the row
    here.set_budget(RUN, Budget(read_calls=5))  # an operator cuts the run to 5 read calls
    time.sleep(REFRESH * 2)
    served = _reads_until_refused(there, artifact)
    assert served == 4  # 1 before the cut, 4 after: the new limit, not the old lease
    there.close()
    assert here.usage(RUN).spent["read_calls"] == 5


def test_a_lowered_limit_above_what_was_reserved_keeps_the_spend(servers: tuple[Vault, Vault]) -> None:
    here, there = servers
    artifact = here.put(RUN, b"x" * 100).artifact_id
    here.set_budget(RUN, Budget(read_calls=1000))
    for _ in range(3):
        there.read_bytes(RUN, artifact)  # "there" holds a lease (counted in the row) of which it used 3
    reserved = here.usage(RUN).spent["read_calls"]
    assert 3 < reserved < 200
    usage = here.set_budget(RUN, Budget(read_calls=200))  # without restart: what was spent is carried over
    assert usage.spent["read_calls"] == reserved
    time.sleep(REFRESH * 2)
    assert _reads_until_refused(there, artifact) == 197  # the lease still fits the new limit: it is kept
    there.close()
    assert here.usage(RUN).spent["read_calls"] == 200


def test_a_cleared_and_set_again_budget_drops_older_reservations(servers: tuple[Vault, Vault]) -> None:
    here, there = servers
    artifact = here.put(RUN, b"x" * 100).artifact_id
    here.set_budget(RUN, Budget(read_calls=1000))
    there.read_bytes(RUN, artifact)  # a lease of the first row
    assert here.clear_budget(RUN)
    here.set_budget(RUN, Budget(read_calls=5), restart=True)  # a new row: a new run of 5 read calls
    time.sleep(REFRESH * 2)
    assert _reads_until_refused(there, artifact) == 5
    there.close()  # its old lease is not returned into the new row
    assert here.usage(RUN).spent["read_calls"] == 5


def test_a_restart_drops_older_reservations(servers: tuple[Vault, Vault]) -> None:
    here, there = servers
    artifact = here.put(RUN, b"x" * 100).artifact_id
    here.set_budget(RUN, Budget(read_calls=1000))
    there.read_bytes(RUN, artifact)
    here.set_budget(RUN, Budget(read_calls=3), restart=True)
    time.sleep(REFRESH * 2)
    assert _reads_until_refused(there, artifact) == 3
    there.close()
    assert here.usage(RUN).spent["read_calls"] == 3


def test_every_new_row_and_restart_has_a_generation_never_used_before(servers: tuple[Vault, Vault]) -> None:
    here, _ = servers
    seen = set()
    for restart in (False, True, True):
        here.set_budget(RUN, Budget(read_calls=1), restart=restart)
        row = here.catalog.budget(RUN)
        assert row is not None
        seen.add(row.generation)
        here.clear_budget(RUN)
    assert len(seen) == 3
    here.set_budget(RUN, Budget(read_calls=1))
    first = here.catalog.budget(RUN)
    here.set_budget(RUN, Budget(read_calls=2))  # without restart: the same run, the same generation
    second = here.catalog.budget(RUN)
    assert first is not None
    assert second is not None
    assert second.generation == first.generation
