"""A live ``refvault serve`` for the derived-copy tests, on an embedded store or on S3 + PostgreSQL.

:func:`live_copies` starts the server (a subprocess on loopback) over a new store of the named backend, with API
keys made before it starts: the owner (acme/ana), another user of the tenant (acme/bob), another tenant's user
(globex/ana) and an admin of acme (for the policy). ``LiveCopies.open()`` opens the same store in this process,
without an audit log of its own, so a test can compare what the server answers with what the embedded
:class:`~refvault.Vault` says.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from refvault import Vault
from refvault.keys import create_key
from tests.servers import S3Endpoint, free_port, fresh_database, fresh_prefix, stop_process

BACKENDS = ("embedded", "s3+postgres")


@dataclass(frozen=True)
class LiveCopies:
    backend: str
    url: str
    owner: str  # acme/ana, every session
    other_user: str  # acme/bob
    other_tenant: str  # globex/ana
    admin: str  # acme/root, admin
    location: str
    options: dict[str, Any] = field(default_factory=dict)

    def open(self) -> Vault:
        """The same store, opened here (no audit log of its own: the server keeps the chain)."""
        return Vault.open(self.location, audit=False, **self.options)


@contextlib.contextmanager
def live_copies(request: pytest.FixtureRequest, base: Path) -> Iterator[LiveCopies]:
    """A server over a new store of ``request.param`` (one of :data:`BACKENDS`)."""
    backend: str = request.param
    if backend == "embedded":
        location = str(base / "store")
        options: dict[str, Any] = {}
        store_args = ["--store", location]
    else:
        s3: S3Endpoint = request.getfixturevalue("s3_server")
        location = fresh_database(request.getfixturevalue("postgres_url"))
        options = {"blobs": fresh_prefix(s3), "s3_endpoint": s3.url}
        store_args = ["--catalog", location, "--blobs", options["blobs"], "--s3-endpoint", s3.url]
    with Vault.open(location, **options) as vault:
        owner = create_key(vault, "acme", "ana")[1]
        other_user = create_key(vault, "acme", "bob")[1]
        other_tenant = create_key(vault, "globex", "ana")[1]
        admin = create_key(vault, "acme", "root", admin=True)[1]
    port = free_port()
    log_path = base / f"serve-{port}.log"
    command = [str(Path(sys.executable).with_name("refvault")), "serve", *store_args, "--port", str(port)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [*command, "--no-access-log"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ),
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(url + "/v1/health", timeout=1).status_code == 200:
                        break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"refvault serve did not start: {log_path.read_text(errors='replace')}")
                time.sleep(0.05)
            yield LiveCopies(backend, url, owner, other_user, other_tenant, admin, location, options)
        finally:
            stop_process(proc)
