"""The record query engine of one vault: a DuckDB database, scratch space and verified local derivatives.

Part of :mod:`refvault.read.records` (see its docstring for the invariants). A
derivative reaches DuckDB only through a private local copy whose bytes were
verified against its digest when they were fetched (one copy per process, keyed
by tenant namespace and digest).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from refvault.errors import StorageError

if TYPE_CHECKING:
    import duckdb

    from refvault.catalog.base import Derivation
    from refvault.model import Scope
    from refvault.vault.core import Vault

__all__ = ["INDEX", "Engine", "engine_of", "ident", "sql_path"]

INDEX = "__refvault_index__"  # the derivative's column holding each record's zero-based position in the source


def ident(name: str) -> str:
    """A field name as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def sql_path(path: Path) -> str:
    """A path as a SQL string literal (quotes doubled)."""
    return "'" + str(path).replace("'", "''") + "'"


@dataclass(slots=True)
class _Local:
    view: str
    path: Path
    size: int
    users: int = 0


class Engine:
    """One DuckDB database per vault, a private scratch directory, and an LRU of verified local derivatives.

    A local copy is dropped when it is evicted while no query uses it, when
    ``gc`` has collected its blob (:meth:`after_gc`), and when the vault
    closes or the process exits (a finalizer removes the scratch directory).
    """

    STRIPES = 64

    def __init__(self, max_bytes: int = 4 << 30) -> None:
        import duckdb

        self.root = Path(tempfile.mkdtemp(prefix="refvault-records-"))  # mode 0700
        self.db = duckdb.connect(":memory:")
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._local: OrderedDict[tuple[str, str], _Local] = OrderedDict()
        self._stripes = [threading.Lock() for _ in range(self.STRIPES)]
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.root), True)

    def cursor(self) -> duckdb.DuckDBPyConnection:
        try:
            return self.db.cursor()
        except Exception as exc:  # duckdb.ConnectionException once closed
            raise StorageError(f"the record query engine is closed ({type(exc).__name__})") from None

    @contextlib.contextmanager
    def scratch(self) -> Iterator[Path]:
        path = Path(tempfile.mkdtemp(dir=self.root))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def once(self, key: tuple[str, str]) -> threading.Lock:
        """A lock serialising work on one key (striped: bounded however many keys there are)."""
        return self._stripes[hash(key) % self.STRIPES]

    @contextlib.contextmanager
    def view(self, vault: Vault, scope: Scope, artifact_id: str, derivation: Derivation) -> Iterator[str]:
        """A DuckDB view over a verified local copy of ``derivation`` (fetched once), held while in use."""
        key = (derivation.key.namespace, derivation.digest)
        with self.once(key):
            with self._lock:
                local = self._local.get(key)
                if local is not None:
                    self._local.move_to_end(key)
                    local.users += 1
            if local is None:
                local = self._fetch(vault, scope, artifact_id, derivation, key)
        try:
            yield local.view
        finally:
            with self._lock:
                local.users -= 1
                self._evict()

    def _fetch(
        self, vault: Vault, scope: Scope, artifact_id: str, derivation: Derivation, key: tuple[str, str]
    ) -> _Local:
        path = self.root / f"{key[0]}-{key[1]}.parquet"
        tmp = path.with_suffix(".part")
        _, stream = vault.open_derived(scope, artifact_id, derivation.kind)
        with stream, open(tmp, "wb") as out:
            for chunk in stream.iter_chunks():  # each chunk verified before it is handed out
                out.write(chunk)
        tmp.rename(path)
        local = _Local(f"rv_{key[0]}_{key[1]}", path, derivation.size, users=1)
        with self.cursor() as cur:
            cur.execute(f"CREATE OR REPLACE VIEW {local.view} AS SELECT * FROM read_parquet({sql_path(path)})")
        with self._lock:
            self._local[key] = local
        return local

    def _evict(self, *, keep: Callable[[tuple[str, str]], bool] | None = None) -> None:
        """Drop idle copies: least recently used first while over budget, or every one ``keep`` rejects."""
        total = sum(local.size for local in self._local.values())
        for key, local in list(self._local.items()):
            over = total > self.max_bytes and keep is None
            if local.users or not (over or (keep is not None and not keep(key))):
                continue
            del self._local[key]
            total -= local.size
            with contextlib.suppress(Exception), self.db.cursor() as cur:
                cur.execute(f"DROP VIEW IF EXISTS {local.view}")
            local.path.unlink(missing_ok=True)

    def after_gc(self, vault: Vault) -> None:
        """Drop local copies of derivatives whose blobs ``gc`` collected (retention reaches the cache too)."""
        from refvault.blobs.base import BlobKey

        with self._lock:
            self._evict(keep=lambda key: vault.catalog.has_blob(BlobKey(*key)))

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a query still running is interrupted by the close
            self.db.interrupt()
        with contextlib.suppress(Exception):
            self.db.close()
        self._cleanup()


def engine_of(vault: Vault) -> Engine:
    """The vault's engine (made once, closed with the vault)."""
    return vault.attachment("refvault.read.records", Engine)
