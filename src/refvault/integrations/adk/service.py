"""The ADK artifact service whose versions are refvault artifacts (see :mod:`refvault.integrations.adk`)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import unquote, urlparse

from google.adk.artifacts import artifact_util
from google.adk.artifacts.base_artifact_service import ArtifactVersion, BaseArtifactService, ensure_part
from google.adk.errors.input_validation_error import InputValidationError
from google.genai import types

from refvault.errors import IdempotencyConflict, InvalidArgument, InvalidMetadata, NotFound
from refvault.guard.contract import Guard, GuardHolder, resolve_guard
from refvault.integrations.adk.identity import (
    USER_SESSION,
    AdkInputError,
    Place,
    is_user,
    place_of,
    scope_for,
    segment,
)
from refvault.integrations.adk.parts import (
    MARK,
    adk_filename,
    checked_metadata,
    decode_part,
    encode_part,
    thaw,
    version_key,
)
from refvault.model import Descriptor, checked_filename

if TYPE_CHECKING:
    from refvault.contract import VaultContract
    from refvault.vault.core import Vault

__all__ = ["MAX_VERSION_ATTEMPTS", "SCHEME", "RefvaultArtifactService", "open_uri"]

SCHEME = "refvault"
MAX_VERSION_ATTEMPTS = 10_000


class RefvaultArtifactService(BaseArtifactService):
    """An ADK artifact service whose versions are refvault artifacts: scoped, content-hashed, verified on load.

    ``vault`` is a :class:`~refvault.Vault` or a :class:`~refvault.Client`; or give ``uri``
    (``refvault:///path/to/store``, ``refvault://`` for the default store), as ADK's
    ``services.yaml`` does. Each version is captured with ``disclosure`` (default ``"model"``,
    so refvault's read tools may show it; ``"sealed"`` keeps it reference-only).

    ADK's own loaders put a loaded version into the model request (``LoadArtifactsTool``, an
    ``{artifact.name}`` instruction template), whatever its disclosure. So a sealed service requires
    ``guard`` (a :class:`~refvault.guard.LeakGuard`, or a Toolbox for its ``box.guard``; without one it
    is refused with :class:`~refvault.errors.InvalidArgument`):
    it learns the bytes of every sealed version this service saves or loads, and
    :func:`~refvault.integrations.adk.guard_callback` with the same guard stops the request that carries one
    (``test_adk_loaders_cannot_put_a_sealed_version_in_front_of_the_model``).
    """

    def __init__(
        self,
        vault: VaultContract | None = None,
        *,
        uri: str | None = None,
        disclosure: Literal["model", "sealed"] = "model",
        guard: Guard | GuardHolder | None = None,
        agents_dir: str | None = None,
    ) -> None:
        """``agents_dir`` is accepted (ADK's registry passes it) and unused: a relative store path is cwd-relative."""
        if (vault is None) == (uri is None):
            raise InvalidArgument("give either a vault or a uri ('refvault:///path/to/store')")
        if disclosure not in ("model", "sealed"):
            raise InvalidMetadata("disclosure must be 'model' or 'sealed'")
        checker = None if guard is None else resolve_guard(guard)
        if checker is not None and not isinstance(checker, Guard):
            raise InvalidArgument("guard must be a LeakGuard (or a Toolbox whose guard is enabled)")
        if disclosure == "sealed" and checker is None:
            raise InvalidArgument(
                "a sealed artifact service needs guard= (a LeakGuard, or the Toolbox whose guard the agent's "
                "guard_callback uses): ADK's own loaders put loaded versions into model requests"
            )
        self._owned: Vault | None = None  # the vault this service opened from ``uri``, and closes
        if vault is None:
            vault = self._owned = open_uri(cast(str, uri))
        self.vault: VaultContract = vault
        self.disclosure: Literal["model", "sealed"] = disclosure
        self.guard: Guard | None = checker

    def _protect(self, descriptor: Descriptor, payload: bytes) -> None:
        """Teach the guard a sealed version's bytes (before ADK can put them into a model request)."""
        if self.guard is not None and descriptor.disclosure == "sealed":
            self.guard.protect(descriptor.artifact_id, payload)

    def close(self) -> None:
        """Close the vault if this service opened it (from a URI)."""
        if self._owned is not None:
            self._owned.close()

    # -- lookups (synchronous; the async API runs them in a worker thread) --

    def _versions(self, place: Place) -> dict[int, tuple[Descriptor, dict[str, Any]]]:
        found: dict[int, tuple[Descriptor, dict[str, Any]]] = {}
        for descriptor in self.vault.list(place.scope):
            if adk_filename(descriptor) == place.filename:
                meta = thaw(descriptor.source_version[MARK])
                found.setdefault(meta["version"], (descriptor, meta))
        return found

    def _pick(self, place: Place, version: int | None) -> tuple[int, Descriptor, dict[str, Any]] | None:
        versions = self._versions(place)
        if not versions:
            return None
        if version is None:
            version = max(versions)
        elif version < 0:
            return None
        chosen = versions.get(version)
        return None if chosen is None else (version, *chosen)

    def _version_info(self, version: int, descriptor: Descriptor, meta: Mapping[str, Any]) -> ArtifactVersion:
        return ArtifactVersion(
            version=version,
            canonical_uri=f"{SCHEME}://{descriptor.artifact_id}",
            custom_metadata=dict(meta.get("custom_metadata") or {}),
            create_time=descriptor.created_at.timestamp(),
            mime_type=meta.get("mime_type"),
        )

    def save_artifact_sync(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        artifact: types.Part | dict[str, Any],
        session_id: str | None = None,
        custom_metadata: dict[str, Any] | None = None,
    ) -> int:
        """:meth:`save_artifact` for synchronous callers."""
        if not isinstance(filename, str):
            raise AdkInputError("filename must be a string")
        if not is_user(filename):
            if session_id is None:
                raise AdkInputError("Session ID must be provided for session-scoped artifacts.")
            segment(session_id, "session_id")
            if session_id.replace("\\", "/").split("/")[0] == USER_SESSION:
                raise AdkInputError("session_id must not be or start with the reserved value 'user'.")
        part = ensure_part(artifact)
        place = place_of(app_name, user_id, filename, session_id)
        if part.file_data is not None and part.inline_data is None and part.text is None:
            _check_reference(part, app_name, user_id, session_id)
        encoded = encode_part(part)
        metadata = checked_metadata(custom_metadata)
        try:
            shown_name = checked_filename(filename)
        except InvalidMetadata:
            shown_name = None  # the ADK filename is kept exactly in source_version either way
        versions = self._versions(place)
        version = max(versions) + 1 if versions else 0
        for _ in range(MAX_VERSION_ATTEMPTS):
            source = {
                MARK: {
                    "filename": filename,
                    "version": version,
                    "kind": encoded.kind,
                    "mime_type": encoded.mime_type,
                    "custom_metadata": metadata,
                    "part": encoded.envelope,
                    "nonce": secrets.token_hex(16),  # two savers of one version never replay each other's capture
                }
            }
            try:
                saved = self.vault.put(
                    place.scope,
                    encoded.payload,
                    media_type=encoded.media_type,
                    source_version=source,
                    disclosure=self.disclosure,
                    idempotency_key=version_key(filename, version),
                    filename=shown_name,
                    completeness={"status": "complete", "omissions": []},
                )
            except IdempotencyConflict:
                version += 1  # another saver took this version first
                continue
            self._protect(saved, encoded.payload)
            return version
        raise IdempotencyConflict("could not allocate an artifact version: too many concurrent savers")

    def load_artifact_sync(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
        version: int | None = None,
    ) -> types.Part | None:
        """:meth:`load_artifact` for synchronous callers."""
        return self._load(app_name, user_id, filename, session_id, version, artifact_util._MAX_ARTIFACT_REFERENCE_DEPTH)

    def _load(
        self, app_name: str, user_id: str, filename: str, session_id: str | None, version: int | None, depth: int
    ) -> types.Part | None:
        """Load one version, following ``artifact://`` references at most ``depth`` times (as ADK does)."""
        place = place_of(app_name, user_id, filename, session_id)
        chosen = self._pick(place, version)
        if chosen is None:
            return None
        _, descriptor, meta = chosen
        payload = self.vault.read_bytes(place.scope, descriptor.artifact_id)
        self._protect(descriptor, payload)
        part = decode_part(meta, payload)
        if artifact_util.is_artifact_ref(part):
            target = artifact_util.resolve_artifact_reference(
                file_uri=cast(types.FileData, part.file_data).file_uri or "",
                app_name=app_name,
                user_id=user_id,
                session_id=session_id,
                remaining_depth=depth,
            )
            return self._load(
                target.app_name, target.user_id, target.filename, target.session_id, target.version, depth - 1
            )
        if part == types.Part() or artifact_util._is_rewind_tombstone(part):
            return None
        return part

    def list_artifact_keys_sync(self, *, app_name: str, user_id: str, session_id: str | None = None) -> list[str]:
        """:meth:`list_artifact_keys` for synchronous callers."""
        segment(app_name, "app_name")
        segment(user_id, "user_id")
        scopes = [scope_for(app_name, user_id, USER_SESSION)]
        if session_id is not None:
            segment(session_id, "session_id")
            scopes.append(scope_for(app_name, user_id, session_id))
        names: set[str] = set()
        for scope in scopes:
            names.update(name for d in self.vault.list(scope) if (name := adk_filename(d)) is not None)
        return sorted(names)

    def delete_artifact_sync(
        self, *, app_name: str, user_id: str, filename: str, session_id: str | None = None
    ) -> None:
        """:meth:`delete_artifact` for synchronous callers: every version, newest first."""
        place = place_of(app_name, user_id, filename, session_id)
        versions = self._versions(place)
        for version in sorted(versions, reverse=True):
            with contextlib.suppress(NotFound):  # a concurrent delete got there first
                self.vault.delete(place.scope, versions[version][0].artifact_id)

    def list_versions_sync(
        self, *, app_name: str, user_id: str, filename: str, session_id: str | None = None
    ) -> list[int]:
        """:meth:`list_versions` for synchronous callers."""
        return sorted(self._versions(place_of(app_name, user_id, filename, session_id)))

    def list_artifact_versions_sync(
        self, *, app_name: str, user_id: str, filename: str, session_id: str | None = None
    ) -> list[ArtifactVersion]:
        """:meth:`list_artifact_versions` for synchronous callers."""
        versions = self._versions(place_of(app_name, user_id, filename, session_id))
        return [self._version_info(v, *versions[v]) for v in sorted(versions)]

    def get_artifact_version_sync(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
        version: int | None = None,
    ) -> ArtifactVersion | None:
        """:meth:`get_artifact_version` for synchronous callers."""
        chosen = self._pick(place_of(app_name, user_id, filename, session_id), version)
        return None if chosen is None else self._version_info(*chosen)

    # -- BaseArtifactService --

    async def save_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        artifact: types.Part | dict[str, Any],
        session_id: str | None = None,
        custom_metadata: dict[str, Any] | None = None,
    ) -> int:
        return await asyncio.to_thread(
            lambda: self.save_artifact_sync(
                app_name=app_name,
                user_id=user_id,
                filename=filename,
                artifact=artifact,
                session_id=session_id,
                custom_metadata=custom_metadata,
            )
        )

    async def load_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
        version: int | None = None,
    ) -> types.Part | None:
        return await asyncio.to_thread(
            lambda: self.load_artifact_sync(
                app_name=app_name, user_id=user_id, filename=filename, session_id=session_id, version=version
            )
        )

    async def list_artifact_keys(self, *, app_name: str, user_id: str, session_id: str | None = None) -> list[str]:
        return await asyncio.to_thread(
            lambda: self.list_artifact_keys_sync(app_name=app_name, user_id=user_id, session_id=session_id)
        )

    async def delete_artifact(
        self, *, app_name: str, user_id: str, filename: str, session_id: str | None = None
    ) -> None:
        await asyncio.to_thread(
            lambda: self.delete_artifact_sync(
                app_name=app_name, user_id=user_id, filename=filename, session_id=session_id
            )
        )

    async def list_versions(
        self, *, app_name: str, user_id: str, filename: str, session_id: str | None = None
    ) -> list[int]:
        return await asyncio.to_thread(
            lambda: self.list_versions_sync(
                app_name=app_name, user_id=user_id, filename=filename, session_id=session_id
            )
        )

    async def list_artifact_versions(
        self, *, app_name: str, user_id: str, filename: str, session_id: str | None = None
    ) -> list[ArtifactVersion]:
        return await asyncio.to_thread(
            lambda: self.list_artifact_versions_sync(
                app_name=app_name, user_id=user_id, filename=filename, session_id=session_id
            )
        )

    async def get_artifact_version(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
        version: int | None = None,
    ) -> ArtifactVersion | None:
        return await asyncio.to_thread(
            lambda: self.get_artifact_version_sync(
                app_name=app_name, user_id=user_id, filename=filename, session_id=session_id, version=version
            )
        )


def _check_reference(part: types.Part, app_name: str, user_id: str, session_id: str | None) -> None:
    """An ``artifact://`` reference must parse and stay in the saver's scope (as ADK checks)."""
    if not artifact_util.is_artifact_ref(part):
        return
    parsed = artifact_util.parse_artifact_uri(cast(types.FileData, part.file_data).file_uri or "")
    if parsed is None:
        raise AdkInputError("Invalid artifact reference URI.")
    try:
        artifact_util.validate_artifact_reference_scope(
            app_name=app_name, user_id=user_id, session_id=session_id, parsed_uri=parsed
        )
    except InputValidationError:
        raise AdkInputError("artifact references must stay within the saver's app, user and session") from None


# -- a store named by a URI (ADK's service registry) --------------------------------------------------------------


def open_uri(uri: str) -> Vault:
    """``refvault:///abs/path``, ``refvault://rel/path`` or ``refvault://`` (the default store) → an open Vault.

    Any scheme is accepted (the registry chose this service by it); the rest names a store directory.
    """
    from refvault.vault.core import Vault

    parsed = urlparse(uri)
    if not parsed.scheme or parsed.query or parsed.fragment:
        raise InvalidArgument("a refvault artifact-service URI looks like refvault:///path/to/store")
    location = unquote(parsed.netloc + parsed.path)
    return Vault.open(location or None)
