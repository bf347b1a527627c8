"""AsyncVault: the same vault for asyncio callers.

Every method runs the synchronous implementation in a worker thread
(``asyncio.to_thread``), so there is one implementation of each operation
and the event loop never blocks on disk or database I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Unpack

from refvault.model import Descriptor, Scope
from refvault.operations import CaptureOptions
from refvault.vault.core import AuditRecord, GcReport, Vault, VerifyReport

if TYPE_CHECKING:
    from refvault.contract import EmbeddedHandle

__all__ = ["AsyncVault"]


class AsyncVault:
    """Async facade over a :class:`~refvault.Vault` (which it owns and closes)."""

    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    def embedded_vault(self) -> Vault:
        """The synchronous vault this facade runs (for callers that use worker threads themselves)."""
        return self.vault

    @classmethod
    async def open(cls, location: str | None = None, **options: Any) -> AsyncVault:
        return cls(await asyncio.to_thread(Vault.open, location, **options))

    async def put(self, scope: Scope, data: object, **metadata: Unpack[CaptureOptions]) -> Descriptor:
        return await asyncio.to_thread(self.vault.put, scope, data, **metadata)

    def add_audit_sink(self, sink: Callable[[AuditRecord], None]) -> None:
        self.vault.add_audit_sink(sink)

    async def describe(self, scope: Scope, artifact_id: str) -> Descriptor:
        return await asyncio.to_thread(self.vault.describe, scope, artifact_id)

    async def read_bytes(self, scope: Scope, artifact_id: str) -> bytes:
        return await asyncio.to_thread(self.vault.read_bytes, scope, artifact_id)

    async def read_range(self, scope: Scope, artifact_id: str, offset: int, length: int | None) -> bytes:
        return await asyncio.to_thread(self.vault.read_range, scope, artifact_id, offset, length)

    async def stream(self, scope: Scope, artifact_id: str) -> AsyncIterator[bytes]:
        """Yield verified chunks; each chunk is read and verified off the event loop."""
        stream = await asyncio.to_thread(self.vault.stream, scope, artifact_id)
        try:
            while chunk := await asyncio.to_thread(stream.read, 1 << 20):
                yield chunk
        finally:
            stream.close()

    async def list(self, scope: Scope) -> list[Descriptor]:
        return await asyncio.to_thread(self.vault.list, scope)

    async def delete(self, scope: Scope, artifact_id: str) -> None:
        await asyncio.to_thread(self.vault.delete, scope, artifact_id)

    async def verify(self) -> VerifyReport:
        return await asyncio.to_thread(self.vault.verify)

    async def gc(self, **options: Any) -> GcReport:
        return await asyncio.to_thread(self.vault.gc, **options)

    async def close(self) -> None:
        await asyncio.to_thread(self.vault.close)

    async def __aenter__(self) -> AsyncVault:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


if TYPE_CHECKING:  # mypy checks here that the facade is a handle on an embedded vault

    def _is_handle(vault: AsyncVault) -> EmbeddedHandle:
        return vault
