"""Paging through a record query while other record artifacts are captured and queried concurrently.

Writer threads keep capturing record artifacts (JSON Lines and JSON arrays; fresh bytes and
byte-identical copies of the paged artifact, in the same scope, another session and another
tenant) and query each one (so derivatives are built concurrently), while reader threads walk
``next_cursor`` through one query with a small limit. Every walk must equal the unpaged answer
of the reference evaluator: no duplicates, no omissions, same order.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from refvault import Scope, Vault, read
from tests.records_reference import evaluate

SAME = Scope("acme", "ana", "s1")
OTHER_SESSION = Scope("acme", "ana", "s2")
OTHER_TENANT = Scope("globex", "bob", "s1")

QUERY: dict[str, Any] = {
    "where": {
        "or": [
            {"field": "group", "op": "in", "value": ["b", "ç"]},
            {
                "and": [
                    {"field": "value", "op": "gt", "value": 7.5},
                    {"not": {"field": "flag", "op": "eq", "value": True}},
                ]
            },
        ]
    },
    "order": [{"field": "value", "direction": "desc"}, {"field": "group"}],
    "fields": ["n", "group", "value"],
    "limit": 7,
}


def make_records(rng: random.Random, count: int) -> list[dict[str, Any]]:
    """Ragged records with many ties (so the index tie-break decides most of the order) and some nulls."""
    records: list[dict[str, Any]] = []
    for n in range(count):
        record: dict[str, Any] = {"n": n, "group": rng.choice(["a", "b", "ç", "d", None])}
        if rng.random() < 0.9:
            record["value"] = rng.choice([None, 0.5, 2.5, 7.75, 9.25, 10.5])
        if rng.random() < 0.8:
            record["flag"] = rng.random() < 0.5
        records.append(record)
    return records


def jsonl(records: Sequence[Mapping[str, Any]]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()


def walk(vault: Vault, scope: Scope, artifact_id: str, query: Mapping[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    got: list[tuple[int, dict[str, Any]]] = []
    cursor = None
    while True:
        response = read.query(vault, scope, artifact_id, cursor=cursor, **query)
        assert response["scan_complete"] is True
        assert response["returned_records"] == len(response["records"]) <= query["limit"]
        got.extend((item["index"], item["record"]) for item in response["records"])
        if not response["has_more"]:
            return got
        cursor = response["next_cursor"]
        assert isinstance(cursor, str)


def run_concurrently(
    vault: Vault, records: list[dict[str, Any]], query: Mapping[str, Any], readers: int, writers: int
) -> None:
    data = jsonl(records)
    artifact_id = vault.put(SAME, data, media_type="application/x-ndjson").artifact_id
    expected = evaluate(records, where=query.get("where"), fields=query.get("fields"), order=query.get("order"))
    assert 100 < len(expected) < len(records)  # many pages, and the filter matters

    stop = threading.Event()
    started = threading.Barrier(readers + writers)
    errors: list[BaseException] = []
    captured = [0] * writers
    walks: list[list[tuple[int, dict[str, Any]]]] = []
    overlap: list[tuple[int, int]] = []

    def guarded(body: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                started.wait()
                body()
            except BaseException as exc:
                errors.append(exc)
                stop.set()

        return run

    def writer(number: int) -> Callable[[], None]:
        def body() -> None:
            rng = random.Random(number)
            scopes = [SAME, OTHER_SESSION, OTHER_TENANT]
            while not stop.is_set():
                scope = scopes[captured[number] % len(scopes)]
                if captured[number] % 4 == 3:
                    mine, theirs = records, data  # byte-identical to the artifact being paged (dedup)
                    media_type = "application/x-ndjson"
                else:
                    mine = make_records(rng, rng.randint(1, 60))
                    if rng.random() < 0.5:
                        theirs, media_type = jsonl(mine), "application/x-ndjson"
                    else:
                        theirs, media_type = json.dumps(mine).encode(), "application/json"
                other = vault.put(scope, theirs, media_type=media_type).artifact_id
                captured[number] += 1
                # Query what was just captured (building its derivative while the readers page).
                response = read.query(vault, scope, other, where={"field": "n", "op": "gte", "value": 0}, limit=1000)
                assert [item["index"] for item in response["records"]] == list(range(min(len(mine), 1000)))

        return body

    def reader() -> None:
        before = sum(captured)
        got = walk(vault, SAME, artifact_id, query)
        overlap.append((before, sum(captured)))
        walks.append(got)

    threads = [threading.Thread(target=guarded(writer(i))) for i in range(writers)]
    threads += [threading.Thread(target=guarded(reader)) for _ in range(readers)]
    for thread in threads[writers:]:
        thread.start()
    for thread in threads[:writers]:
        thread.start()
    for thread in threads[writers:]:
        thread.join(timeout=300)
    stop.set()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads)
    if errors:
        raise errors[0]

    assert len(walks) == readers
    for got in walks:
        indexes = [i for i, _ in got]
        assert len(indexes) == len(set(indexes)), "a record was returned twice"
        assert set(indexes) == {i for i, _ in expected}, "a record was omitted (or one that does not match returned)"
        assert got == expected
    # The captures really happened while the readers paged.
    assert all(after > before for before, after in overlap)


def test_paging_while_others_capture(vault: Vault) -> None:
    run_concurrently(vault, make_records(random.Random(4), 1500), QUERY, readers=2, writers=3)


def test_paging_in_index_order_while_others_capture(vault: Vault) -> None:
    query = {"where": {"field": "flag", "op": "is_null", "value": False}, "limit": 5}
    run_concurrently(vault, make_records(random.Random(5), 800), query, readers=1, writers=2)
