"""ADK's service registry: ``refvault://`` artifact-service URIs open a :class:`RefvaultArtifactService`.

The URI forms are :func:`refvault.integrations.adk.service.open_uri`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from google.adk.artifacts.base_artifact_service import BaseArtifactService

from refvault.integrations.adk.service import SCHEME, RefvaultArtifactService

if TYPE_CHECKING:
    from google.adk.cli.service_registry import ServiceRegistry

__all__ = ["register"]


def _factory(uri: str, **options: Any) -> BaseArtifactService:
    return RefvaultArtifactService(uri=uri, agents_dir=options.get("agents_dir"))


def register(registry: ServiceRegistry | None = None, *, scheme: str = SCHEME) -> None:
    """Register :class:`RefvaultArtifactService` for ``refvault://`` URIs in ADK's service registry.

    Call it from your agent directory's ``services.py`` (which ADK loads); then
    ``adk web --artifact_service_uri refvault:///path/to/store`` opens that store.
    """
    if registry is None:
        from google.adk.cli.service_registry import get_service_registry

        registry = get_service_registry()
    registry.register_artifact_service(scheme, _factory)
