"""PostgreSQL stopped in the middle of a load on ``refvault serve`` (S3 + PostgreSQL), then started again.

While the catalog is down every request fails cleanly: a 503 ``storage-unavailable`` problem with
``Retry-After``, never a 500 and never a hang. Once PostgreSQL is back the same server process serves
again (no restart), and every capture it acknowledged (201) is there, byte for byte.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from refvault import Scope, Vault
from refvault.keys import create_key
from tests.faults.harness import s3_env, scaled_server, stoppable_postgres
from tests.servers import S3Endpoint, fresh_database, fresh_prefix

pytestmark = pytest.mark.slow

SCOPE = Scope("acme", "ana", "s1")
WRITERS = 4
RECOVERY = 60.0  # seconds the server may take to serve again once PostgreSQL is back


def test_a_postgres_outage_fails_requests_cleanly_and_loses_no_acknowledged_capture(
    postgres_url: str, s3_server: S3Endpoint, tmp_path: Path
) -> None:
    # postgres_url: the session's manifest key ring in the environment (this test runs a server of its own)
    with stoppable_postgres() as postgres:
        catalog, blobs = fresh_database(postgres.url), fresh_prefix(s3_server)
        with Vault.open(catalog, blobs=blobs, s3_endpoint=s3_server.url) as vault:
            _key, token = create_key(vault, SCOPE.tenant, SCOPE.user)
        headers = {"Authorization": f"Bearer {token}", "Refvault-Session": SCOPE.session}
        with scaled_server(catalog, blobs, s3_server.url, tmp_path / "serve.log", s3_env(s3_server)) as url:
            acknowledged: dict[str, str] = {}  # artifact id -> sha256 of what was sent
            answers: Counter[str] = Counter()
            bad: list[str] = []
            lock = threading.Lock()
            stop = threading.Event()

            def load(worker: int) -> None:
                with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
                    i = 0
                    while not stop.is_set():
                        i += 1
                        body = os.urandom(200_000 if i % 3 == 0 else 2_000)  # stored in S3, or inline
                        try:
                            response = http.post(
                                "/v1/artifacts", content=body, headers={"Content-Type": "application/octet-stream"}
                            )
                            listing = http.get("/v1/artifacts", params={"limit": 5})
                        except httpx.TimeoutException:
                            with lock:
                                bad.append("a request hung for 30 s")
                            continue
                        with lock:
                            for r in (response, listing):
                                answers[str(r.status_code)] += 1
                                if r.status_code == 503:
                                    problem = r.json()
                                    if problem.get("error") != "StorageError" or "retry-after" not in r.headers:
                                        bad.append(f"503 without the storage problem or Retry-After: {r.text[:300]}")
                                elif r.status_code not in (200, 201):
                                    bad.append(f"HTTP {r.status_code}: {r.text[:300]}")
                            if response.status_code == 201:
                                acknowledged[response.json()["artifact_id"]] = hashlib.sha256(body).hexdigest()
                                sent[response.json()["artifact_id"]] = body

            sent: dict[str, bytes] = {}
            workers = [threading.Thread(target=load, args=(n,)) for n in range(WRITERS)]
            for worker in workers:
                worker.start()
            try:
                _wait_for(lambda: len(acknowledged) >= 20, "the load never got going")
                postgres.stop()
                before = answers["503"]
                _wait_for(lambda: answers["503"] >= before + 20, "no 503 while PostgreSQL was down")
                postgres.start()
                during = len(acknowledged)
                _wait_for(lambda: len(acknowledged) >= during + 20, "the server did not recover", RECOVERY)
            finally:
                stop.set()
                for worker in workers:
                    worker.join()
            assert bad == [], bad[:5]
            with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
                for artifact_id, digest in acknowledged.items():
                    got = http.get(f"/v1/artifacts/{artifact_id}/content")
                    assert got.status_code == 200, got.text
                    assert hashlib.sha256(got.content).hexdigest() == digest
                listed = set()
                page = http.get("/v1/artifacts", params={"limit": 1000}).json()
                listed |= {item["artifact_id"] for item in page["items"]}
            assert set(acknowledged) <= listed


def _wait_for(condition: object, what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(what)
        time.sleep(0.05)
