"""The core layer: capture/publish, resolve/disclose, retention, verification."""

from refvault.vault.core import GcReport, Problem, Vault, VerifyReport
from refvault.vault.verified import ArtifactStream

__all__ = ["ArtifactStream", "GcReport", "Problem", "Vault", "VerifyReport"]
