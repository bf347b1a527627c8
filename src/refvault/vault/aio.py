"""AsyncVault: the same vault for asyncio callers.

Every method runs the synchronous implementation in a worker thread
(``asyncio.to_thread``), so there is one implementation of each operation
and the event loop never blocks on disk or database I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeAlias, Unpack

from refvault.budgets import Budget, Usage
from refvault.catalog.audit_log import AuditEntry, AuditReport, DisclosureEntry
from refvault.copies import DeletionReport, Hold, LineageGraph, LineageStatus, Receipt
from refvault.model import Descriptor, Disclosure, Grant, Principal, Scope
from refvault.operations import CaptureOptions
from refvault.policy import DEFAULT_PURPOSE, DEFAULT_RECIPIENT, Policy
from refvault.vault.core import AuditRecord, GcReport, Vault, VerifyReport

if TYPE_CHECKING:
    from refvault.contract import EmbeddedHandle

__all__ = ["AsyncVault"]

_Grants: TypeAlias = "list[Grant]"  # named here: inside AsyncVault, ``list`` is AsyncVault.list
_AuditEntries: TypeAlias = "list[AuditEntry]"
_Disclosures: TypeAlias = "list[DisclosureEntry]"
_Holds: TypeAlias = "list[Hold]"


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

    async def describe(
        self, scope: Scope, artifact_id: str, *, purpose: str = DEFAULT_PURPOSE, recipient: str = DEFAULT_RECIPIENT
    ) -> Descriptor:
        reader = {"purpose": purpose, "recipient": recipient}
        return await asyncio.to_thread(partial(self.vault.describe, scope, artifact_id, **reader))

    async def read_bytes(
        self, scope: Scope, artifact_id: str, *, purpose: str = DEFAULT_PURPOSE, recipient: str = DEFAULT_RECIPIENT
    ) -> bytes:
        reader = {"purpose": purpose, "recipient": recipient}
        return await asyncio.to_thread(partial(self.vault.read_bytes, scope, artifact_id, **reader))

    async def read_range(
        self,
        scope: Scope,
        artifact_id: str,
        offset: int,
        length: int | None,
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> bytes:
        reader = {"purpose": purpose, "recipient": recipient}
        return await asyncio.to_thread(partial(self.vault.read_range, scope, artifact_id, offset, length, **reader))

    async def prove_range(
        self,
        scope: Scope,
        artifact_id: str,
        offset: int,
        length: int | None,
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> dict[str, Any]:
        """:meth:`refvault.Vault.prove_range` in a worker thread."""
        reader = {"purpose": purpose, "recipient": recipient}
        return await asyncio.to_thread(partial(self.vault.prove_range, scope, artifact_id, offset, length, **reader))

    async def stream(
        self, scope: Scope, artifact_id: str, *, purpose: str = DEFAULT_PURPOSE, recipient: str = DEFAULT_RECIPIENT
    ) -> AsyncIterator[bytes]:
        """Yield verified chunks; each chunk is read and verified off the event loop."""
        reader = {"purpose": purpose, "recipient": recipient}
        stream = await asyncio.to_thread(partial(self.vault.stream, scope, artifact_id, **reader))
        try:
            while chunk := await asyncio.to_thread(stream.read, 1 << 20):
                yield chunk
        finally:
            stream.close()

    async def list(
        self, scope: Scope, *, purpose: str = DEFAULT_PURPOSE, recipient: str = DEFAULT_RECIPIENT
    ) -> list[Descriptor]:
        return await asyncio.to_thread(partial(self.vault.list, scope, purpose=purpose, recipient=recipient))

    async def set_policy(self, tenant: str, policy: Policy | None, *, by: Scope | None = None) -> None:
        """:meth:`Vault.set_policy <refvault.Vault.set_policy>`."""
        await asyncio.to_thread(partial(self.vault.set_policy, tenant, policy, by=by))

    async def policy(self, tenant: str) -> Policy | None:
        """:meth:`Vault.policy <refvault.Vault.policy>`."""
        return await asyncio.to_thread(self.vault.policy, tenant)

    async def set_budget(self, scope: Scope, budget: Budget, *, restart: bool = False) -> Usage:
        """:meth:`Vault.set_budget <refvault.Vault.set_budget>`."""
        return await asyncio.to_thread(partial(self.vault.set_budget, scope, budget, restart=restart))

    async def clear_budget(self, scope: Scope) -> bool:
        """:meth:`Vault.clear_budget <refvault.Vault.clear_budget>`."""
        return await asyncio.to_thread(self.vault.clear_budget, scope)

    async def usage(self, scope: Scope) -> Usage:
        """:meth:`Vault.usage <refvault.Vault.usage>`."""
        return await asyncio.to_thread(self.vault.usage, scope)

    async def delete(self, scope: Scope, artifact_id: str, *, cascade: bool = False) -> DeletionReport:
        """:meth:`Vault.delete <refvault.Vault.delete>` (with ``cascade``, its copies too) and its report."""
        return await asyncio.to_thread(self.vault.delete, scope, artifact_id, cascade=cascade)

    async def declassify(self, scope: Scope, artifact_id: str, *, remove: Iterable[str], reason: str) -> Descriptor:
        """:meth:`Vault.declassify <refvault.Vault.declassify>`: the owner removes labels, audited."""
        return await asyncio.to_thread(self.vault.declassify, scope, artifact_id, remove=remove, reason=reason)

    # -- derived copies (refvault.vault.copies) -------------------------------------------------

    async def redact(
        self, scope: Scope, artifact_id: str, *, redactor: str = "pii.v1", fields: Sequence[str] | None = None
    ) -> Descriptor:
        """:meth:`Vault.redact <refvault.Vault.redact>`: a redaction derivative, made once and reused."""
        return await asyncio.to_thread(partial(self.vault.redact, scope, artifact_id, redactor=redactor, fields=fields))

    async def receipt(self, scope: Scope, artifact_id: str) -> Receipt:
        """:meth:`Vault.receipt <refvault.Vault.receipt>`."""
        return await asyncio.to_thread(self.vault.receipt, scope, artifact_id)

    async def lineage(
        self, scope: Scope, artifact_id: str, *, direction: str = "both", depth: int | None = None
    ) -> LineageGraph:
        """:meth:`Vault.lineage <refvault.Vault.lineage>`."""
        return await asyncio.to_thread(
            partial(self.vault.lineage, scope, artifact_id, direction=direction, depth=depth)
        )

    async def lineage_status(self, scope: Scope, artifact_id: str) -> LineageStatus:
        """:meth:`Vault.lineage_status <refvault.Vault.lineage_status>`."""
        return await asyncio.to_thread(self.vault.lineage_status, scope, artifact_id)

    async def supersede(self, scope: Scope, old_id: str, new_id: str, *, reason: str) -> None:
        """:meth:`Vault.supersede <refvault.Vault.supersede>`."""
        await asyncio.to_thread(partial(self.vault.supersede, scope, old_id, new_id, reason=reason))

    async def revoke_artifact(self, scope: Scope, artifact_id: str, *, reason: str) -> None:
        """:meth:`Vault.revoke_artifact <refvault.Vault.revoke_artifact>`."""
        await asyncio.to_thread(partial(self.vault.revoke_artifact, scope, artifact_id, reason=reason))

    async def refresh(self, scope: Scope, artifact_id: str) -> Descriptor:
        """:meth:`Vault.refresh <refvault.Vault.refresh>`."""
        return await asyncio.to_thread(self.vault.refresh, scope, artifact_id)

    async def hold(self, scope: Scope, artifact_id: str, *, reason: str) -> Hold:
        """:meth:`Vault.hold <refvault.Vault.hold>`."""
        return await asyncio.to_thread(partial(self.vault.hold, scope, artifact_id, reason=reason))

    async def release(self, scope: Scope, artifact_id: str, hold_id: str) -> None:
        """:meth:`Vault.release <refvault.Vault.release>`."""
        await asyncio.to_thread(self.vault.release, scope, artifact_id, hold_id)

    async def holds(self, scope: Scope, artifact_id: str) -> _Holds:
        """:meth:`Vault.holds <refvault.Vault.holds>`."""
        return await asyncio.to_thread(self.vault.holds, scope, artifact_id)

    async def replay_status(
        self,
        scope: Scope,
        ids: Sequence[str],
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> dict[str, dict[str, Any]]:
        """:meth:`Vault.replay_status <refvault.Vault.replay_status>`."""
        status = partial(self.vault.replay_status, scope, ids, purpose=purpose, recipient=recipient)
        return await asyncio.to_thread(status)

    async def share(
        self,
        scope: Scope,
        artifact_id: str,
        *,
        to: Principal,
        purposes: Iterable[str] | None = None,
        recipients: Iterable[str] | None = None,
        expires_at: datetime | None = None,
        disclosure: Disclosure = "model",
    ) -> Grant:
        """:meth:`Vault.share <refvault.Vault.share>`: the owner lets another principal of its tenant read it."""
        share = partial(self.vault.share, to=to, purposes=purposes, recipients=recipients, expires_at=expires_at)
        return await asyncio.to_thread(share, scope, artifact_id, disclosure=disclosure)

    async def grants(self, scope: Scope, artifact_id: str) -> _Grants:
        """:meth:`Vault.grants <refvault.Vault.grants>`."""
        return await asyncio.to_thread(self.vault.grants, scope, artifact_id)

    async def revoke(self, scope: Scope, grant_id: str) -> Grant:
        """:meth:`Vault.revoke <refvault.Vault.revoke>`."""
        return await asyncio.to_thread(self.vault.revoke, scope, grant_id)

    async def link(self, scope: Scope, artifact_id: str, *, recipient: str, **options: Any) -> str:
        """:meth:`Vault.link <refvault.Vault.link>`: a capability link's path."""
        return await asyncio.to_thread(partial(self.vault.link, scope, artifact_id, recipient=recipient, **options))

    async def verify(self) -> VerifyReport:
        return await asyncio.to_thread(self.vault.verify)

    async def audit(
        self, scope: Scope, *, artifact_id: str | None = None, after: int = 0, limit: int = 100
    ) -> _AuditEntries:
        """:meth:`Vault.audit <refvault.Vault.audit>`: the caller's view of its tenant's audit log."""
        return await asyncio.to_thread(self.vault.audit, scope, artifact_id=artifact_id, after=after, limit=limit)

    async def disclosures(self, scope: Scope, artifact_id: str) -> _Disclosures:
        """:meth:`Vault.disclosures <refvault.Vault.disclosures>`: the disclosure ledger of an artifact owned."""
        return await asyncio.to_thread(self.vault.disclosures, scope, artifact_id)

    async def audit_head(self, tenant: str) -> tuple[int, str]:
        """:meth:`Vault.audit_head <refvault.Vault.audit_head>`."""
        return await asyncio.to_thread(self.vault.audit_head, tenant)

    async def verify_audit(self, tenant: str | None = None, head: str | None = None) -> AuditReport:
        """:meth:`Vault.verify_audit <refvault.Vault.verify_audit>`."""
        return await asyncio.to_thread(self.vault.verify_audit, tenant, head)

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
