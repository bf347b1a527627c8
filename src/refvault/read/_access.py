"""What every model-facing read checks first: scope, expiry, disclosure, and what kind of content it is."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from refvault.errors import SealedArtifact
from refvault.model import RECORD_MEDIA_TYPES, Descriptor, Scope, base_type, is_records, is_text

if TYPE_CHECKING:
    from refvault.contract import VaultContract

__all__ = ["RECORD_MEDIA_TYPES", "base_type", "coverage", "is_records", "is_text", "readable"]


def readable(vault: VaultContract, scope: Scope, artifact_id: str) -> Descriptor:
    """The descriptor of an artifact the model may read: visible in ``scope``, unexpired, not sealed.

    Raises :class:`~refvault.errors.NotFound` / :class:`~refvault.errors.Expired`
    like every read, and :class:`~refvault.errors.SealedArtifact` for a sealed one.
    """
    descriptor = vault.describe(scope, artifact_id)
    if descriptor.disclosure == "sealed":
        raise SealedArtifact(descriptor.artifact_id)
    return descriptor


def coverage(descriptor: Descriptor) -> dict[str, Any]:
    """The fields every read response repeats from the descriptor: what the capture itself covers."""
    completeness = descriptor.completeness
    return {
        "artifact_id": descriptor.artifact_id,
        "content_hash": descriptor.content_hash,
        "capture_status": str(completeness.get("status", "unknown")),
        "omissions": [dict(o) if hasattr(o, "items") else o for o in completeness.get("omissions", ())],
    }
