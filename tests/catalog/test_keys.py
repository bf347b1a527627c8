"""The catalog's API key and settings records, on every catalog backend (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from refvault.catalog.base import ApiKey, Catalog
from refvault.catalog.memory import MemoryCatalog
from refvault.catalog.sql import SqlCatalog
from refvault.errors import StorageError
from tests.servers import fresh_catalog

T0 = datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=UTC)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Catalog]:
    made: Catalog
    if request.param == "memory":
        made = MemoryCatalog()
    elif request.param == "sqlite":
        made = SqlCatalog.for_file(tmp_path / "catalog.db")
    else:
        made = SqlCatalog(fresh_catalog(request.getfixturevalue("postgres_url")))
    yield made
    made.close()


def _key(key_id: str, tenant: str = "acme", **changes: object) -> ApiKey:
    fields: dict[str, object] = {
        "key_id": key_id,
        "secret_hash": "ab" * 32,
        "tenant": tenant,
        "user": "ana",
        "sessions": None,
        "created_at": T0,
        **changes,
    }
    return ApiKey(**fields)  # type: ignore[arg-type]


def test_an_api_key_round_trips_every_field(catalog: Catalog) -> None:
    full = _key("k_full", sessions=frozenset({"s1", "s2"}), label="ci runner", created_at=T0 + timedelta(seconds=1))
    bare = _key("k_bare")
    catalog.add_api_key(full)
    catalog.add_api_key(bare)
    assert catalog.find_api_key("k_full") == full
    assert catalog.find_api_key("k_bare") == bare
    assert catalog.find_api_key("k_none") is None
    empty = _key("k_empty", sessions=frozenset())  # no session at all is not "every session"
    catalog.add_api_key(empty)
    assert catalog.find_api_key("k_empty") == empty


def test_a_key_id_is_unique(catalog: Catalog) -> None:
    catalog.add_api_key(_key("k_1"))
    with pytest.raises(StorageError) as caught:
        catalog.add_api_key(_key("k_1", secret_hash="cd" * 32))
    assert "cd" * 32 not in str(caught.value)
    assert catalog.find_api_key("k_1") == _key("k_1")


def test_revoking_marks_the_key_once(catalog: Catalog) -> None:
    catalog.add_api_key(_key("k_1"))
    at = T0 + timedelta(hours=1)
    assert catalog.revoke_api_key("k_1", at) is True
    assert catalog.revoke_api_key("k_1", at + timedelta(hours=1)) is False  # already revoked: the first time stays
    assert catalog.revoke_api_key("k_unknown", at) is False
    found = catalog.find_api_key("k_1")
    assert found is not None
    assert found.revoked_at == at


def test_keys_are_listed_oldest_first_and_by_tenant(catalog: Catalog) -> None:
    catalog.add_api_key(_key("k_b", created_at=T0 + timedelta(seconds=2)))
    catalog.add_api_key(_key("k_a", tenant="other", created_at=T0 + timedelta(seconds=1)))
    catalog.add_api_key(_key("k_c", created_at=T0))
    assert [k.key_id for k in catalog.api_keys()] == ["k_c", "k_a", "k_b"]
    assert [k.key_id for k in catalog.api_keys("acme")] == ["k_c", "k_b"]
    assert catalog.api_keys("nobody") == []


def test_settings_compare_and_set(catalog: Catalog) -> None:
    assert catalog.get_setting("ring") is None
    assert catalog.swap_setting("ring", "anything", "v0") is False  # absent is not "anything"
    assert catalog.swap_setting("ring", None, "v1") is True
    assert catalog.swap_setting("ring", None, "v1b") is False  # present: creating again fails
    assert catalog.get_setting("ring") == "v1"
    assert catalog.swap_setting("ring", "v0", "v2") is False
    assert catalog.swap_setting("ring", "v1", "v2") is True
    assert catalog.get_setting("ring") == "v2"
    assert catalog.get_setting("other") is None
    big = "x" * 100_000
    assert catalog.swap_setting("ring", "v2", big) is True
    assert catalog.get_setting("ring") == big


def test_concurrent_swaps_from_one_value_have_one_winner(catalog: Catalog) -> None:
    catalog.swap_setting("counter", None, "0")
    start = threading.Barrier(8)
    won: list[str] = []

    def swap(n: int) -> None:
        start.wait()
        if catalog.swap_setting("counter", "0", f"by-{n}"):
            won.append(f"by-{n}")

    threads = [threading.Thread(target=swap, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1
    assert catalog.get_setting("counter") == won[0]


def test_concurrent_creators_have_one_winner(catalog: Catalog) -> None:
    start = threading.Barrier(8)
    won: list[str] = []

    def create(n: int) -> None:
        start.wait()
        if catalog.swap_setting("fresh", None, f"by-{n}"):
            won.append(f"by-{n}")

    threads = [threading.Thread(target=create, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1
    assert catalog.get_setting("fresh") == won[0]
