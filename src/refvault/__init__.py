"""refvault: safe artifact references for LLM agents.

Store a tool's large or binary output once (content-addressed, tenant-scoped,
immutable, integrity-checked), hand the model an opaque id and a descriptor
instead of the bytes, and serve verified, scoped reads of exactly the bytes
that were captured.

The public surface is re-exported here and imported lazily, so
``import refvault`` stays cheap::

    from refvault import Vault, Scope
    with Vault.open() as vault:
        d = vault.put(Scope("acme", "ana", "s1"), b"...", media_type="text/plain")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from refvault.lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "Artifact": "refvault.toolbox.toolbox",
    "AsyncVault": "refvault.vault.aio",
    "AuditRecord": "refvault.vault.core",
    "AuditEntry": "refvault.catalog.audit_log",
    "AuditReport": "refvault.catalog.audit_log",
    "DisclosureEntry": "refvault.catalog.audit_log",
    "Client": "refvault.client",
    "ArtifactStream": "refvault.vault.verified",
    "Descriptor": "refvault.model",
    "GcReport": "refvault.vault.core",
    "Grant": "refvault.model",
    "GrantNotFound": "refvault.errors",
    "Principal": "refvault.model",
    "Scope": "refvault.model",
    "Vault": "refvault.vault.core",
    "WorkingSet": "refvault.context",
    "WorkingSetStats": "refvault.context",
    "VerifyReport": "refvault.vault.core",
    "envelopes": "refvault.envelopes",
    "errors": "refvault.errors",
    "evidence": "refvault.evidence",
    "Observation": "refvault.toolbox.toolbox",
    "Ref": "refvault.toolbox.ref",
    "RemoteLink": "refvault.toolbox.remote",
    "ToolContext": "refvault.toolbox.toolbox",
    "ToolEvent": "refvault.toolbox.toolbox",
    "Toolbox": "refvault.toolbox.toolbox",
    "BadRef": "refvault.errors",
    "InvalidQuery": "refvault.errors",
    "InvalidCursor": "refvault.errors",
    "UnsupportedRead": "refvault.errors",
    "SealedArtifact": "refvault.errors",
    "ContextLeak": "refvault.errors",
    "TooLarge": "refvault.errors",
    "EmptyPart": "refvault.errors",
    "InvalidResult": "refvault.errors",
    "MaterializationError": "refvault.errors",
    "read": "refvault.read",
    "UnresolvedRef": "refvault.errors",
    "RefvaultError": "refvault.errors",
    "InvalidArgument": "refvault.errors",
    "InvalidScope": "refvault.errors",
    "InvalidId": "refvault.errors",
    "InvalidMetadata": "refvault.errors",
    "NotFound": "refvault.errors",
    "MisCopiedId": "refvault.errors",
    "Expired": "refvault.errors",
    "IdempotencyConflict": "refvault.errors",
    "IntegrityError": "refvault.errors",
    "StorageError": "refvault.errors",
    "Unauthenticated": "refvault.errors",
    "Forbidden": "refvault.errors",
    "Held": "refvault.errors",
    "QuotaExceeded": "refvault.errors",
    "BudgetExceeded": "refvault.errors",
    "Budget": "refvault.budgets",
    "Usage": "refvault.budgets",
    "StaleHandle": "refvault.errors",
    "Kernel": "refvault.kernel",
    "Handle": "refvault.kernel",
    "DeletionReport": "refvault.copies",
    "Hold": "refvault.copies",
    "LineageGraph": "refvault.copies",
    "LineageNode": "refvault.copies",
    "Receipt": "refvault.copies",
    "verify_excerpt": "refvault.proofs",
    "ModelCaps": "refvault.limits",
    "caps_for_model": "refvault.limits",
}

__all__ = [
    "Artifact",
    "ContextLeak",
    "EmptyPart",
    "InvalidResult",
    "MaterializationError",
    "TooLarge",
    "ArtifactStream",
    "AsyncVault",
    "AuditEntry",
    "AuditRecord",
    "AuditReport",
    "BadRef",
    "Client",
    "DeletionReport",
    "Descriptor",
    "DisclosureEntry",
    "Expired",
    "GcReport",
    "Held",
    "Hold",
    "IdempotencyConflict",
    "IntegrityError",
    "InvalidArgument",
    "InvalidCursor",
    "InvalidId",
    "InvalidMetadata",
    "InvalidQuery",
    "InvalidScope",
    "LineageGraph",
    "LineageNode",
    "MisCopiedId",
    "NotFound",
    "Observation",
    "QuotaExceeded",
    "BudgetExceeded",
    "Budget",
    "Usage",
    "StaleHandle",
    "Kernel",
    "Handle",
    "Receipt",
    "Grant",
    "GrantNotFound",
    "Principal",
    "Ref",
    "RefvaultError",
    "RemoteLink",
    "Scope",
    "SealedArtifact",
    "StorageError",
    "Forbidden",
    "ToolContext",
    "ToolEvent",
    "Toolbox",
    "Unauthenticated",
    "UnresolvedRef",
    "UnsupportedRead",
    "Vault",
    "VerifyReport",
    "envelopes",
    "errors",
    "evidence",
    "read",
    "verify_excerpt",
    "WorkingSet",
    "WorkingSetStats",
    "ModelCaps",
    "caps_for_model",
]

if TYPE_CHECKING:
    from refvault import envelopes, errors, evidence, read
    from refvault.budgets import Budget, Usage
    from refvault.catalog.audit_log import AuditEntry, AuditReport, DisclosureEntry
    from refvault.client import Client
    from refvault.context import WorkingSet, WorkingSetStats
    from refvault.copies import DeletionReport, Hold, LineageGraph, LineageNode, Receipt
    from refvault.errors import (
        BadRef,
        BudgetExceeded,
        ContextLeak,
        EmptyPart,
        Expired,
        Forbidden,
        GrantNotFound,
        Held,
        IdempotencyConflict,
        IntegrityError,
        InvalidArgument,
        InvalidCursor,
        InvalidId,
        InvalidMetadata,
        InvalidQuery,
        InvalidResult,
        InvalidScope,
        MaterializationError,
        MisCopiedId,
        NotFound,
        QuotaExceeded,
        RefvaultError,
        SealedArtifact,
        StaleHandle,
        StorageError,
        TooLarge,
        Unauthenticated,
        UnresolvedRef,
        UnsupportedRead,
    )
    from refvault.kernel import Handle, Kernel
    from refvault.limits import ModelCaps, caps_for_model
    from refvault.model import Descriptor, Grant, Principal, Scope
    from refvault.proofs import verify_excerpt
    from refvault.toolbox.ref import Ref
    from refvault.toolbox.remote import RemoteLink
    from refvault.toolbox.toolbox import Artifact, Observation, Toolbox, ToolContext, ToolEvent
    from refvault.vault.aio import AsyncVault
    from refvault.vault.core import AuditRecord, GcReport, Vault, VerifyReport
    from refvault.vault.verified import ArtifactStream

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
