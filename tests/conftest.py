"""Shared fixtures: every backend pair the conformance suite runs against.

A backend is a factory ``(request, tmp_path, **vault_options) -> Vault`` plus a
``Tamper`` that damages stored bytes the way a disk, an operator or an
attacker could. The scale-out backend ("s3+postgres") runs on a real
PostgreSQL and a real SeaweedFS S3 gateway, started once per session by
``tests/servers.py``; each vault gets its own database and key prefix (a catalog schema
replayed from one migrated per session: ``fresh_catalog``).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from refvault import Scope, Vault
from refvault.blobs.base import BlobKey
from refvault.blobs.filesystem import FilesystemBlobStore
from refvault.blobs.memory import MemoryBlobStore
from refvault.catalog.memory import MemoryCatalog
from refvault.catalog.sql import SqlCatalog
from tests.servers import S3Endpoint, fresh_catalog, fresh_prefix, run_postgres, run_seaweedfs


def payload(size: int, seed: int = 0) -> bytes:
    """``size`` deterministic pseudo-random bytes (the same for the same size and seed)."""
    return hashlib.shake_256(f"{seed}:{size}".encode()).digest(size) if size else b""


class Clock:
    """A settable clock for expiry tests."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


class Tamper:
    """Damage stored bytes behind the vault's back."""

    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    def set_bytes(self, key: BlobKey, data: bytes) -> None:
        from refvault.blobs.s3 import S3BlobStore

        blobs = self.vault.blobs
        if isinstance(blobs, MemoryBlobStore):
            blobs.objects[key] = data
        elif isinstance(blobs, S3BlobStore):  # overwrite the object with a plain PUT, behind the store's back
            import obstore

            obstore.put(blobs.client, blobs.object_name(key), data)
        else:
            assert isinstance(blobs, FilesystemBlobStore)
            path = self.path(key)
            os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
            path.write_bytes(data)

    def get_bytes(self, key: BlobKey) -> bytes:
        from refvault.blobs.s3 import S3BlobStore

        blobs = self.vault.blobs
        if isinstance(blobs, MemoryBlobStore):
            return blobs.objects[key]
        if isinstance(blobs, S3BlobStore):
            import obstore

            return bytes(obstore.get(blobs.client, blobs.object_name(key)).bytes())
        return self.path(key).read_bytes()

    def remove(self, key: BlobKey) -> None:
        from refvault.blobs.s3 import S3BlobStore

        blobs = self.vault.blobs
        if isinstance(blobs, S3BlobStore):  # a DELETE behind the store's back
            import obstore

            obstore.delete(blobs.client, blobs.object_name(key))
            return
        blobs.delete(key)

    def path(self, key: BlobKey) -> Path:
        blobs = self.vault.blobs
        assert isinstance(blobs, FilesystemBlobStore)
        return blobs.root / "blobs" / key.namespace / key.digest[:2] / key.digest

    def forget_merkle(self, key: BlobKey) -> None:
        """Make a blob look captured before Merkle roots existed (no root, no chunk roots)."""
        self._set_blob(key, merkle_root=None, chunk_roots=None)

    def set_inline(self, key: BlobKey, data: bytes) -> None:
        self._set_blob(key, inline=data)

    def _set_blob(self, key: BlobKey, **values: object) -> None:
        catalog = self.vault.catalog
        if isinstance(catalog, MemoryCatalog):
            record, touched = catalog._blobs[key]
            from dataclasses import replace

            catalog._blobs[key] = (replace(record, **values), touched)  # type: ignore[arg-type]
            return
        assert isinstance(catalog, SqlCatalog)
        from refvault.catalog.schema import blobs

        with catalog._write() as conn, conn.begin():
            conn.execute(
                blobs.update()
                .where(blobs.c.namespace == key.namespace, blobs.c.digest == key.digest)
                .values(**{"inline_data" if name == "inline" else name: value for name, value in values.items()})
            )


def _memory(request: pytest.FixtureRequest, tmp_path: Path, **options: Any) -> Vault:
    return Vault(MemoryBlobStore(), MemoryCatalog(), **options)


def _embedded(request: pytest.FixtureRequest, tmp_path: Path, **options: Any) -> Vault:
    return Vault.open(tmp_path / "store", **options)


def _scaled(request: pytest.FixtureRequest, tmp_path: Path, **options: Any) -> Vault:
    database: str = request.getfixturevalue("postgres_url")
    s3: S3Endpoint = request.getfixturevalue("s3_server")
    return Vault.open(fresh_catalog(database), blobs=fresh_prefix(s3), s3_endpoint=s3.url, **options)


BACKENDS: dict[str, Callable[..., Vault]] = {"memory": _memory, "embedded": _embedded, "s3+postgres": _scaled}


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A SQLAlchemy URL of the session's PostgreSQL server (use ``fresh_database`` for a database of your own).

    Meanwhile ``$REFVAULT_MANIFEST_KEY`` holds one manifest key ring, so that every process of
    a scale-out store (this one, servers and workers it starts) shares it, as a deployment's must.
    """
    from refvault.catalog.macs import ENV_KEY, ENV_KEY_FILE
    from refvault.read.cursors import KeyRing

    saved = {name: os.environ.pop(name, None) for name in (ENV_KEY, ENV_KEY_FILE)}
    os.environ[ENV_KEY] = KeyRing.generate(now=datetime.now(UTC), grace=timedelta(0)).to_json()
    try:
        with run_postgres() as url:
            yield url
    finally:
        os.environ.pop(ENV_KEY, None)
        os.environ.update({name: value for name, value in saved.items() if value is not None})


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Endpoint]:
    """The session's S3 endpoint; its credentials are in the usual AWS environment variables meanwhile."""
    with run_seaweedfs() as endpoint:
        saved = {name: os.environ.get(name) for name in endpoint.env()}
        os.environ.update(endpoint.env())
        try:
            yield endpoint
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=sorted(BACKENDS))
def make_vault(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Vault]]:
    opened: list[Vault] = []

    def make(**options: Any) -> Vault:
        vault = BACKENDS[request.param](request, tmp_path, **options)
        opened.append(vault)
        return vault

    yield make
    for vault in opened:
        vault.close()


@pytest.fixture
def vault(make_vault: Callable[..., Vault], clock: Clock) -> Vault:
    return make_vault(clock=clock)


@pytest.fixture
def embedded_vault(tmp_path: Path) -> Iterator[Vault]:
    """One embedded store (SQLite catalog, filesystem blobs) at ``tmp_path / "store"``, closed after the test.

    For tests of one backend only: a module (or a directory's ``conftest.py``) selects it as its
    ``vault`` with ``def vault(embedded_vault): return embedded_vault``.
    """
    with Vault.open(tmp_path / "store") as opened:
        yield opened


@pytest.fixture
def memory_vault() -> Iterator[Vault]:
    """One in-memory vault (memory blobs and catalog, the real clock), closed after the test."""
    opened = Vault(MemoryBlobStore(), MemoryCatalog())
    yield opened
    opened.close()


@pytest.fixture
def tamper(vault: Vault) -> Tamper:
    return Tamper(vault)


@pytest.fixture
def scope() -> Scope:
    return Scope("acme", "ana", "s1")
