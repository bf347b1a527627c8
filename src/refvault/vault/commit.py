"""Group commit: many concurrent puts share one publish transaction.

Each put makes its bytes durable on its own thread (``seal``), then hands its
publication to :class:`GroupCommit`. The first waiting thread becomes the
leader, takes every publication queued so far, and publishes them in one
catalog transaction (one fsync of the catalog for the batch); the others wait
and wake with their own result. Durability per put is unchanged: ``submit``
returns only after that put's manifest is committed.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from refvault.blobs.base import BlobWriter
from refvault.catalog.base import Catalog, Manifest, Publication
from refvault.errors import RefvaultError, StorageError

__all__ = ["GroupCommit", "Pending"]


@dataclass(slots=True)
class Pending:
    """One publication waiting for its batch, and (once done) its outcome."""

    publication: Publication
    writer: BlobWriter | None
    done: bool = False
    outcome: Manifest | BaseException | None = field(default=None)

    def make_visible(self) -> None:
        # Called inside the publish transaction; on a retry the writer re-checks
        # that the bytes it published earlier are still there.
        if self.writer is not None:
            self.writer.publish(self.publication.blob.key)

    def result(self) -> Manifest:
        if isinstance(self.outcome, Manifest):
            return self.outcome
        assert self.outcome is not None
        raise self.outcome


class GroupCommit:
    """Leader/follower batching of catalog publications (see the module docstring)."""

    def __init__(self, catalog: Catalog, *, max_batch: int = 256) -> None:
        self._catalog = catalog
        self._max_batch = max_batch
        self._cond = threading.Condition()
        self._queue: list[Pending] = []
        self._leading = False

    def submit(self, pending: Pending) -> Manifest:
        """Publish ``pending`` (in whatever batch it lands in) and return its outcome."""
        with self._cond:
            self._queue.append(pending)
        while True:
            with self._cond:
                while self._leading and not pending.done:
                    self._cond.wait()
                if pending.done:
                    return pending.result()
                self._leading = True
                batch = self._queue[: self._max_batch]
                del self._queue[: self._max_batch]
            try:
                self._commit(batch)
            finally:
                with self._cond:
                    for item in batch:
                        if not item.done:
                            item.outcome = StorageError("the publish transaction was interrupted")
                            item.done = True
                    self._leading = False
                    self._cond.notify_all()

    def _commit(self, batch: Sequence[Pending]) -> None:
        try:
            self._deliver(batch, self._catalog.publish([p.publication for p in batch], _visible(batch)))
        except Exception as exc:
            if len(batch) == 1:
                self._fail(batch[0], exc)
                return
            # Publish one by one so an error reaches only the put that caused it.
            for item in batch:
                try:
                    self._deliver([item], self._catalog.publish([item.publication], _visible([item])))
                except Exception as exc:
                    self._fail(item, exc)

    @staticmethod
    def _deliver(batch: Sequence[Pending], outcomes: Sequence[Manifest | RefvaultError]) -> None:
        for item, outcome in zip(batch, outcomes, strict=True):
            item.outcome = outcome
            item.done = True

    @staticmethod
    def _fail(item: Pending, exc: Exception) -> None:
        if isinstance(exc, RefvaultError):
            item.outcome = exc
        elif isinstance(exc, OSError):  # a store let an I/O error through: its errno and the system's words
            item.outcome = StorageError(exc.errno or errno.EIO, f"publishing failed: {exc.strerror or 'I/O error'}")
        else:
            item.outcome = StorageError(f"publishing failed: {type(exc).__name__}")
        item.done = True
        if item.writer is not None:
            item.writer.abort()


def _visible(batch: Sequence[Pending]) -> Callable[[], None]:
    def make_visible() -> None:
        for item in batch:
            item.make_visible()

    return make_visible
