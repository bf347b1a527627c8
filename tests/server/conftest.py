"""Fixtures of the server's tests: one embedded store as ``vault``, and the adversarial tests' ``world``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from refvault import Vault
from refvault.keys import create_key
from refvault.server.app import create_app
from tests.server.world import (
    MAX_BODY,
    OWNER,
    RECORDS,
    SEALED_RECORDS,
    SEALED_TEXT,
    TEXT,
    World,
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with Vault.open(tmp_path_factory.mktemp("review") / "store") as vault:
        ids = {
            "text": vault.put(OWNER, TEXT, media_type="text/plain").artifact_id,
            "records": vault.put(OWNER, RECORDS, media_type="application/x-ndjson").artifact_id,
            "sealed": vault.put(OWNER, SEALED_TEXT, media_type="text/plain", disclosure="sealed").artifact_id,
            "sealed_records": vault.put(
                OWNER, SEALED_RECORDS, media_type="application/x-ndjson", disclosure="sealed"
            ).artifact_id,
            "binary": vault.put(OWNER, bytes(range(256)) * 8).artifact_id,
        }
        with TestClient(create_app(vault, max_body=MAX_BODY), raise_server_exceptions=False) as http:
            yield World(
                vault=vault,
                http=http,
                owner=create_key(vault, "acme", "ana")[1],
                s1_only=create_key(vault, "acme", "ana", sessions=["s1"])[1],
                other_tenant=create_key(vault, "globex", "ana")[1],
                other_user=create_key(vault, "acme", "bob")[1],
                other_session_owner=create_key(vault, "acme", "ana")[1],
                ids=ids,
            )


@pytest.fixture
def vault(embedded_vault: Vault) -> Vault:
    """The server tests run on one embedded store (``test_app.py`` adds a clock to its own)."""
    return embedded_vault
