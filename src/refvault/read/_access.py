"""What every model-facing read checks first: scope, expiry, disclosure, and what kind of content it is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from refvault.errors import SealedArtifact
from refvault.model import RECORD_MEDIA_TYPES, Descriptor, Scope, base_type, is_records, is_text, thaw
from refvault.policy import DEFAULT_PURPOSE, DEFAULT_RECIPIENT
from refvault.vault.proving import verified_by, whole_proof

if TYPE_CHECKING:
    from refvault.contract import VaultContract
    from refvault.vault.core import Vault

__all__ = [
    "RECORD_MEDIA_TYPES",
    "acting",
    "base_type",
    "coverage",
    "is_records",
    "is_text",
    "readable",
    "whole_object_proof",
]

_READS = frozenset(
    (
        "describe",
        "read_bytes",
        "read_range",
        "read_proved",
        "prove_range",
        "stream",
        "open_artifact",
        "verify_artifact",
        "list",
        "derived",
        "put_derived",
        "open_derived",
        "audit_read",
    )
)


class _Acting:
    """An embedded vault whose every read carries one ``purpose`` and ``recipient`` (see :func:`acting`)."""

    __slots__ = ("_purpose", "_recipient", "_vault")

    def __init__(self, vault: Vault, purpose: str, recipient: str) -> None:
        self._vault = vault
        self._purpose = purpose
        self._recipient = recipient

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._vault, name)
        if name not in _READS:
            return value

        def read(*args: Any, **kwargs: Any) -> Any:  # always this reader's: an engine never reads as another
            kwargs["purpose"] = self._purpose
            kwargs["recipient"] = self._recipient
            return value(*args, **kwargs)

        return read


def acting(vault: Vault, purpose: str, recipient: str) -> Vault:
    """``vault`` as a read engine uses it for one request: every read method (``describe``, ``read_range``,
    ``stream``, ``derived``, ...) called with this ``purpose`` and ``recipient``, so each lookup the engine
    makes goes through the vault's one door (:mod:`refvault.vault.authority`) for this reader, whatever
    purpose or recipient the engine's own call names. Anything else is the vault's own. With the
    defaults, ``vault`` itself."""
    if purpose == DEFAULT_PURPOSE and recipient == DEFAULT_RECIPIENT:
        return vault
    return cast("Vault", _Acting(vault, purpose, recipient))


def readable(
    vault: VaultContract,
    scope: Scope,
    artifact_id: str,
    *,
    purpose: str = DEFAULT_PURPOSE,
    recipient: str = DEFAULT_RECIPIENT,
) -> Descriptor:
    """The descriptor of an artifact the model may read: visible in ``scope``, unexpired, not sealed.

    Raises :class:`~refvault.errors.NotFound` / :class:`~refvault.errors.Expired`
    like every read (and :class:`~refvault.errors.PolicyDenied` when the tenant's
    policy refuses ``purpose``/``recipient``), and
    :class:`~refvault.errors.SealedArtifact` for a sealed one.
    """
    descriptor = vault.describe(scope, artifact_id, purpose=purpose, recipient=recipient)
    if descriptor.disclosure == "sealed":
        raise SealedArtifact(descriptor.artifact_id)
    return descriptor


def coverage(descriptor: Descriptor) -> dict[str, Any]:
    """The fields every read response repeats from the descriptor: what the capture itself covers, and for a copy
    or a superseded/revoked artifact its ``lineage`` (kind, ``status``: current/stale/revoked; a copy never
    claims byte identity with its source)."""
    completeness = descriptor.completeness
    out: dict[str, Any] = {
        "artifact_id": descriptor.artifact_id,
        "content_hash": descriptor.content_hash,
        "capture_status": str(completeness.get("status", "unknown")),
        "omissions": [dict(o) if hasattr(o, "items") else o for o in completeness.get("omissions", ())],
    }
    lineage = descriptor.retrieval.get("lineage")
    if lineage is not None:
        out["lineage"] = thaw(lineage)
    return out


def whole_object_proof(vault: Vault, scope: Scope, descriptor: Descriptor, representation: str) -> dict[str, Any]:
    """``proof`` and ``verified_by`` for a result computed from the whole stored object (grep's matches, parsed
    records): a proof covering every byte (:func:`refvault.vault.proving.whole_proof`), so a recipient checks
    it with the whole artifact; ``representation`` says what the result is of those bytes. The root is the
    descriptor's ``retrieval.integrity.merkle_root``, or derived now for a blob captured before roots existed."""
    integrity = descriptor.retrieval.get("integrity")
    known = integrity.get("merkle_root") if isinstance(integrity, Mapping) else None
    root = known if isinstance(known, str) else vault.prove_range(scope, descriptor.artifact_id, 0, 0)["root"]
    return {"proof": whole_proof(descriptor.size, root), "verified_by": verified_by(representation)}
