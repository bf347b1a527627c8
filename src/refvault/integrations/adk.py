"""refvault for Google ADK: a vault-backed artifact service, Toolbox tools, and a leak-guard callback.

::

    from refvault.integrations.adk import RefvaultArtifactService, guard_callback, tools

    box = Toolbox(vault)
    agent = LlmAgent(name="analyst", model=..., tools=tools(box), before_model_callback=guard_callback(box.guard))
    runner = Runner(agent=agent, app_name="app", session_service=..., artifact_service=RefvaultArtifactService(vault))

Identity. ADK names every artifact by ``(app_name, user_id, session_id, filename)``; refvault reads by
``Scope(tenant, user, session)``. :func:`scope_for` maps one to the other (``app_name`` → tenant,
``user_id`` → user, ``session_id`` → session), and the artifact service and the tools use that one
function, so an artifact id the model got in a session resolves for a ``Ref`` tool in the same
session. A ``user:`` artifact (visible from every session of its user) lives in the reserved session
:data:`USER_SESSION` (``"user"``): ADK itself reserves that session id (its artifact services refuse
to save a session-scoped artifact under it) and every user-scoped filename starts with ``user:``,
which no session-scoped filename does, so nothing ADK can write collides with it. (So a ``Ref`` tool
reads a ``user:`` artifact only when given the user scope explicitly: ``tools(box, scope=...)``.)

Every name ADK accepts is accepted: Agent Engine app names
(``projects/123/locations/us-central1/reasoningEngines/456``), namespaced user ids (``group/user123``),
any session id. Each of the three names maps to a refvault scope name on its own (:func:`scope_name`):

* a name that is already a refvault scope name (1-128 characters from ``A-Z a-z 0-9 . _ : @ + -``,
  starting with a letter, digit or underscore) and does not start with the reserved prefix ``_adk+``
  is used unchanged, so stores written before this mapping read the same;
* any other name becomes ``_adk+e:`` and its escape (each character outside ``A-Z a-z 0-9 . _ : @ -``
  as ``+`` and the two uppercase hex digits of each of its UTF-8 bytes: ``group/user123`` →
  ``_adk+e:group+2Fuser123``) when that fits in 128 characters,
* else ``_adk+h:`` and the SHA-256 (hex) of its UTF-8 bytes.

**Two different ADK (app, user, session) triples never share a scope** (the mapping is injective):
pass-through names never start with ``_adk+`` and encoded ones always do; ``e:`` and ``h:`` tell the
two encoded forms apart; the escape decodes uniquely (``+`` occurs only as an escape); and two
names with one SHA-256 would be a SHA-256 collision. Hypothesis generates look-alike names
(``group/user123``, ``group_user123``, ``group%2Fuser123``, ``group+2Fuser123``, names that
start with the prefix) and checks this, and the round trip of the escape
(``tests/security/test_adk_names.py``). ADK's own in-memory and GCS services join the names with
``/`` into one flat key, so there ``("a/b", "c")`` and ``("a", "b/c")`` share artifacts; here they
do not. Names ADK refuses (empty, NUL, a leading slash, a drive letter, ``..`` segments, reserved
path segments; for a save, a session id that is or starts with ``user``) raise
:class:`AdkInputError`, a subclass of ADK's ``InputValidationError``, exactly where ADK does.

Invariants, and the test that shows each:

* **ADK's semantics, observably.** For every call sequence, :class:`RefvaultArtifactService` returns
  what ADK's own ``InMemoryArtifactService`` returns: 0-based consecutive versions per filename,
  ``None`` for a missing filename or version, ``user:`` names shared by a user's sessions, sorted
  keys, deletes of every version, parts equal to those saved (text, bytes with their exact MIME type
  even when not canonical, ``file_data`` and ``artifact://`` references, any other Part fields),
  ``custom_metadata``, rewind tombstones loading as ``None``, and the same ``InputValidationError``
  for the same bad input. Only ``canonical_uri`` (``refvault://<artifact_id>``) and ``create_time``
  differ (``tests/test_int_adk_differential.py``: a scripted sequence and hypothesis-generated ones).
  Where refvault cannot keep what ADK's in-memory store would (custom_metadata that is not plain
  JSON, a lone surrogate in text, a Part whose non-payload fields exceed 64 KiB as JSON) it refuses
  with a typed refvault error (``test_refusals_are_typed_refvault_errors``).
* **Every version is content-hashed and verified on load.** Each version is one vault artifact; a
  load reads it through ``vault.read_bytes``, which checks it against the digest in the catalog and
  raises :class:`~refvault.errors.IntegrityError` for damaged bytes, never returning them
  (``test_tampered_version_raises_integrity_error``).
* **Versions are allocated atomically.** Version ``n`` of a filename is captured with the
  idempotency key ``adk:<sha256(filename)>:<n>`` and a fresh nonce, so of two concurrent savers
  exactly one gets ``n``; the other gets :class:`~refvault.errors.IdempotencyConflict` and tries
  ``n + 1`` (``test_concurrent_saves_get_distinct_consecutive_versions``). A delete removes versions
  newest first, so an interrupted delete leaves versions ``0..k``; a save racing a delete may leave
  a gap, which reads as ``None`` for the missing versions.
* **A Ref arrives as a Ref.** :func:`tools` wraps each Toolbox tool as an ADK ``BaseTool`` whose
  declaration comes from ``box.schemas("gemini")`` and whose calls go through ``box.call`` in the
  session's scope, so resolution, offload, capture of bytes and the read tools all apply; the model
  sees ``Observation.content``, errors as ``{"error": ...}``, and ``load_artifacts`` images as
  function-response media (``test_ref_tool_reads_bytes_the_model_never_sees`` and the rest of
  ``tests/test_int_adk.py``).
* **The guard runs before every model call.** :func:`guard_callback` checks the whole
  ``LlmRequest`` (contents, system instruction, tools, response schema) and raises
  :class:`~refvault.errors.ContextLeak`, which ADK lets propagate out of ``Runner.run_async`` (it
  wraps it internally and re-raises the original); the model is never called
  (``test_leaking_tool_result_is_stopped_before_the_model``,
  ``test_guard_checks_the_system_instruction_of_requests_with_an_output_schema``). The leaking tool
  result is already in the session's events by then: the guard keeps it from the model, not from
  the session store.
* **ADK's own loaders are guarded too.** ``LoadArtifactsTool`` and ``{artifact.name}`` instruction
  templates put a loaded version into the request whatever its disclosure; a service made with
  ``guard=`` teaches that guard every sealed version it saves or loads, so :func:`guard_callback`
  stops such a request (``test_adk_loaders_cannot_put_a_sealed_version_in_front_of_the_model`` in
  ``tests/test_int_review.py``).

Cost: a lookup by filename lists the artifacts of one scope (``vault.list``) and keeps those of the
filename, so each call is O(artifacts in that session, or in that user's ``user:`` store), never
O(all artifacts); the bytes of exactly one version are read per load.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import json
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import unquote, urlparse

try:
    from google.adk.artifacts import artifact_util
    from google.adk.artifacts.base_artifact_service import ArtifactVersion, BaseArtifactService, ensure_part
    from google.adk.errors.input_validation_error import InputValidationError
    from google.adk.tools.base_tool import BaseTool
    from google.genai import types
    from pydantic import BaseModel
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("refvault.integrations.adk needs Google ADK: pip install 'refvault[adk]'") from exc

from refvault.errors import IdempotencyConflict, InvalidArgument, InvalidMetadata, InvalidScope, NotFound
from refvault.ids import check_name
from refvault.model import Descriptor, Scope, canonical_media_type, checked_filename

if TYPE_CHECKING:
    from google.adk.agents.callback_context import CallbackContext
    from google.adk.cli.service_registry import ServiceRegistry
    from google.adk.models.llm_request import LlmRequest
    from google.adk.tools.tool_context import ToolContext

    from refvault.client import VaultLike
    from refvault.toolbox.toolbox import Observation, Toolbox

__all__ = [
    "SCHEME",
    "USER_SESSION",
    "AdkInputError",
    "RefvaultArtifactService",
    "RefvaultTool",
    "guard_callback",
    "register",
    "scope_for",
    "scope_name",
    "tools",
]

SCHEME = "refvault"
USER_SESSION = "user"  # the session that holds a user's "user:" artifacts (ADK reserves this session id)
USER_PREFIX = "user:"
MARK = "adk"  # the source_version key that makes a vault artifact one version of an ADK artifact
MAX_VERSION_ATTEMPTS = 10_000
_TEXT_MEDIA_TYPE = "text/plain; charset=utf-8"


class AdkInputError(InvalidArgument, InputValidationError):
    """Input ADK's own artifact services refuse: both refvault's InvalidArgument and ADK's InputValidationError."""


# -- identity ---------------------------------------------------------------------------------------------------


def _segment(value: object, field: str) -> str:
    """ADK's path-segment rule (its own validator), with a message that does not echo the value."""
    if not isinstance(value, str):
        raise AdkInputError(f"{field} must be a string")
    try:
        artifact_util.validate_path_segment(value, field)
    except InputValidationError:
        raise AdkInputError(
            f"{field} is not a valid ADK name: it must be non-empty, without NUL, a leading slash, "
            "a drive letter, '..' segments or reserved path segments"
        ) from None
    return value


RESERVED_PREFIX = "_adk+"  # no name passes through unchanged with it; every encoded name has it
_ESCAPED = RESERVED_PREFIX + "e:"
_HASHED = RESERVED_PREFIX + "h:"
_KEPT = re.compile(r"[A-Za-z0-9._:@-]")  # characters the escape keeps as they are ("+" is the escape)
_MAX_NAME = 128


def scope_name(name: str) -> str:
    """The refvault scope name of one ADK name (an app name, a user id or a session id); injective.

    See the module docstring for the three forms and why no two names share one
    (``tests/security/test_adk_names.py``). Total on strings: lone surrogates are
    encoded as such (``surrogatepass``).
    """
    if not isinstance(name, str):
        raise AdkInputError("ADK names are strings")
    if not name.startswith(RESERVED_PREFIX):
        try:
            return check_name("name", name)
        except InvalidScope:
            pass
    escaped = "".join(
        char if _KEPT.fullmatch(char) else "".join(f"+{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
        for char in name
    )
    if len(_ESCAPED) + len(escaped) <= _MAX_NAME:
        return _ESCAPED + escaped
    return _HASHED + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()


def scope_for(app_name: str, user_id: str, session_id: str) -> Scope:
    """The refvault scope of an ADK session: each of the three names through :func:`scope_name`.

    The one mapping the artifact service and the tools share. Names that are already
    refvault scope names (and do not start with ``_adk+``) are used unchanged; any
    other name is encoded; no two ADK triples share a scope (:func:`scope_name`).
    """
    return Scope(scope_name(app_name), scope_name(user_id), scope_name(session_id))


@dataclass(frozen=True, slots=True)
class _Place:
    """Where the versions of one ADK filename live."""

    scope: Scope
    filename: str


def _is_user(filename: str) -> bool:
    return filename.startswith(USER_PREFIX)


def _place(app_name: str, user_id: str, filename: str, session_id: str | None) -> _Place:
    """Mirror of ADK's ``_artifact_path``: the same checks, in the same order."""
    _segment(app_name, "app_name")
    _segment(user_id, "user_id")
    if not isinstance(filename, str):
        raise AdkInputError("filename must be a string")
    if _is_user(filename):
        return _Place(scope_for(app_name, user_id, USER_SESSION), filename)
    if session_id is None:
        raise AdkInputError("Session ID must be provided for session-scoped artifacts.")
    _segment(session_id, "session_id")
    return _Place(scope_for(app_name, user_id, session_id), filename)


# -- parts <-> vault artifacts -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Encoded:
    """One Part as vault content: the bytes to hash and store, and what rebuilds the Part around them."""

    payload: bytes
    media_type: str
    kind: Literal["text", "inline", "part"]
    envelope: dict[str, Any]  # the Part's JSON without its payload
    mime_type: str | None  # what ADK reports as ArtifactVersion.mime_type


def _encode(part: types.Part) -> _Encoded:
    """Split a Part into payload bytes (content-hashed) and an envelope (every other field, exactly)."""
    inline = part.inline_data
    if inline is not None and inline.data is not None:
        envelope = part.model_dump(mode="json", exclude_unset=True, exclude={"inline_data": {"data"}})
        try:
            media_type = canonical_media_type(inline.mime_type)
        except InvalidMetadata:
            media_type = "application/octet-stream"  # the exact MIME type is kept in the envelope
        return _Encoded(bytes(inline.data), media_type, "inline", envelope, inline.mime_type)
    if inline is None and part.text is not None:
        try:
            payload = part.text.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgument("a text part must be valid Unicode (it holds a lone surrogate)") from None
        envelope = part.model_dump(mode="json", exclude_unset=True, exclude={"text"})
        return _Encoded(payload, _TEXT_MEDIA_TYPE, "text", envelope, "text/plain")
    if inline is not None or part.file_data is not None:  # no bytes of its own: the whole Part is the payload
        mime: str | None = inline.mime_type if inline is not None else None
        if inline is None and part.file_data is not None and not artifact_util.is_artifact_ref(part):
            mime = part.file_data.mime_type
        payload = part.model_dump_json(exclude_unset=True).encode("utf-8")
        return _Encoded(payload, "application/json", "part", {}, mime)
    raise AdkInputError("Not supported artifact type.")


def _decode(meta: Mapping[str, Any], payload: bytes) -> types.Part:
    """Rebuild the exact Part from verified payload bytes and its envelope."""
    kind = meta["kind"]
    if kind == "part":
        return types.Part.model_validate_json(payload)
    part = types.Part.model_validate_json(json.dumps(meta["part"]))
    if kind == "text":
        return part.model_copy(update={"text": payload.decode("utf-8")})
    inline = part.inline_data or types.Blob()
    return part.model_copy(update={"inline_data": inline.model_copy(update={"data": payload})})


def _checked_metadata(custom_metadata: object) -> dict[str, Any]:
    """ADK keeps custom_metadata as given; refvault stores JSON, so only what JSON round-trips exactly is taken."""
    if not custom_metadata:
        return {}
    if not isinstance(custom_metadata, Mapping):
        raise InvalidMetadata("custom_metadata must be a dict")
    try:
        again = json.loads(json.dumps(custom_metadata, allow_nan=False))
    except (TypeError, ValueError):
        again = None
    if again != custom_metadata:
        raise InvalidMetadata(
            "custom_metadata must be plain JSON (string keys; str, int, float, bool, None, list and dict "
            "values; no NaN) so that it loads back exactly as saved"
        )
    return cast(dict[str, Any], again)


def _thaw(value: Any) -> Any:
    """A descriptor's read-only nested values as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {key: _thaw(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [_thaw(item) for item in value]
    return value


def _adk_filename(descriptor: Descriptor) -> str | None:
    """The ADK filename of a vault artifact, or None if it is not a version of an ADK artifact."""
    meta = descriptor.source_version.get(MARK)
    if isinstance(meta, Mapping) and isinstance(meta.get("filename"), str) and isinstance(meta.get("version"), int):
        return str(meta["filename"])
    return None


def _idempotency_key(filename: str, version: int) -> str:
    digest = hashlib.sha256(filename.encode("utf-8", "surrogatepass")).hexdigest()
    return f"adk:{digest}:{version}"


# -- the artifact service --------------------------------------------------------------------------------------------


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
    :func:`guard_callback` with the same guard stops the request that carries one
    (``test_adk_loaders_cannot_put_a_sealed_version_in_front_of_the_model``).
    """

    def __init__(
        self,
        vault: VaultLike | None = None,
        *,
        uri: str | None = None,
        disclosure: Literal["model", "sealed"] = "model",
        guard: Any = None,
        agents_dir: str | None = None,
    ) -> None:
        """``agents_dir`` is accepted (ADK's registry passes it) and unused: a relative store path is cwd-relative."""
        from refvault.toolbox.toolbox import Toolbox

        if (vault is None) == (uri is None):
            raise InvalidArgument("give either a vault or a uri ('refvault:///path/to/store')")
        if disclosure not in ("model", "sealed"):
            raise InvalidMetadata("disclosure must be 'model' or 'sealed'")
        checker = guard.guard if isinstance(guard, Toolbox) else guard
        if guard is not None and not callable(getattr(checker, "protect", None)):
            raise InvalidArgument("guard must be a LeakGuard (or a Toolbox whose guard is enabled)")
        if disclosure == "sealed" and checker is None:
            raise InvalidArgument(
                "a sealed artifact service needs guard= (a LeakGuard, or the Toolbox whose guard the agent's "
                "guard_callback uses): ADK's own loaders put loaded versions into model requests"
            )
        self._owned = vault is None
        self.vault: VaultLike = vault if vault is not None else _open_uri(cast(str, uri))
        self.disclosure: Literal["model", "sealed"] = disclosure
        self.guard: Any = checker

    def _protect(self, descriptor: Descriptor, payload: bytes) -> None:
        """Teach the guard a sealed version's bytes (before ADK can put them into a model request)."""
        if self.guard is not None and descriptor.disclosure == "sealed":
            self.guard.protect(descriptor.artifact_id, payload)

    def close(self) -> None:
        """Close the vault if this service opened it (from a URI)."""
        if self._owned:
            self.vault.close()

    # -- lookups (synchronous; the async API runs them in a worker thread) --

    def _versions(self, place: _Place) -> dict[int, tuple[Descriptor, dict[str, Any]]]:
        found: dict[int, tuple[Descriptor, dict[str, Any]]] = {}
        for descriptor in self.vault.list(place.scope):
            if _adk_filename(descriptor) == place.filename:
                meta = _thaw(descriptor.source_version[MARK])
                found.setdefault(meta["version"], (descriptor, meta))
        return found

    def _pick(self, place: _Place, version: int | None) -> tuple[int, Descriptor, dict[str, Any]] | None:
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
        if not _is_user(filename):
            if session_id is None:
                raise AdkInputError("Session ID must be provided for session-scoped artifacts.")
            _segment(session_id, "session_id")
            if session_id.replace("\\", "/").split("/")[0] == USER_SESSION:
                raise AdkInputError("session_id must not be or start with the reserved value 'user'.")
        part = ensure_part(artifact)
        place = _place(app_name, user_id, filename, session_id)
        if part.file_data is not None and part.inline_data is None and part.text is None:
            _check_reference(part, app_name, user_id, session_id)
        encoded = _encode(part)
        metadata = _checked_metadata(custom_metadata)
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
                    idempotency_key=_idempotency_key(filename, version),
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
        place = _place(app_name, user_id, filename, session_id)
        chosen = self._pick(place, version)
        if chosen is None:
            return None
        _, descriptor, meta = chosen
        payload = self.vault.read_bytes(place.scope, descriptor.artifact_id)
        self._protect(descriptor, payload)
        part = _decode(meta, payload)
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
        _segment(app_name, "app_name")
        _segment(user_id, "user_id")
        scopes = [scope_for(app_name, user_id, USER_SESSION)]
        if session_id is not None:
            _segment(session_id, "session_id")
            scopes.append(scope_for(app_name, user_id, session_id))
        names: set[str] = set()
        for scope in scopes:
            names.update(name for d in self.vault.list(scope) if (name := _adk_filename(d)) is not None)
        return sorted(names)

    def delete_artifact_sync(
        self, *, app_name: str, user_id: str, filename: str, session_id: str | None = None
    ) -> None:
        """:meth:`delete_artifact` for synchronous callers: every version, newest first."""
        place = _place(app_name, user_id, filename, session_id)
        versions = self._versions(place)
        for version in sorted(versions, reverse=True):
            with contextlib.suppress(NotFound):  # a concurrent delete got there first
                self.vault.delete(place.scope, versions[version][0].artifact_id)

    def list_versions_sync(
        self, *, app_name: str, user_id: str, filename: str, session_id: str | None = None
    ) -> list[int]:
        """:meth:`list_versions` for synchronous callers."""
        return sorted(self._versions(_place(app_name, user_id, filename, session_id)))

    def list_artifact_versions_sync(
        self, *, app_name: str, user_id: str, filename: str, session_id: str | None = None
    ) -> list[ArtifactVersion]:
        """:meth:`list_artifact_versions` for synchronous callers."""
        versions = self._versions(_place(app_name, user_id, filename, session_id))
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
        chosen = self._pick(_place(app_name, user_id, filename, session_id), version)
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


# -- ADK's service registry ------------------------------------------------------------------------------------------


def _open_uri(uri: str) -> VaultLike:
    """``refvault:///abs/path``, ``refvault://rel/path`` or ``refvault://`` (the default store) → an open Vault.

    Any scheme is accepted (the registry chose this service by it); the rest names a store directory.
    """
    from refvault.vault.vault import Vault

    parsed = urlparse(uri)
    if not parsed.scheme or parsed.query or parsed.fragment:
        raise InvalidArgument("a refvault artifact-service URI looks like refvault:///path/to/store")
    location = unquote(parsed.netloc + parsed.path)
    return Vault.open(location or None)


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


# -- tools -------------------------------------------------------------------------------------------------------------


class RefvaultTool(BaseTool):
    """One Toolbox tool as an ADK tool: declared from ``box.schemas("gemini")``, dispatched by ``box.call``."""

    def __init__(self, box: Toolbox, schema: Mapping[str, Any], *, scope: Scope | None = None) -> None:
        super().__init__(name=str(schema["name"]), description=str(schema.get("description") or ""))
        self.box = box
        self.scope = scope
        self._declaration = types.FunctionDeclaration.model_validate(dict(schema))

    def _get_declaration(self) -> types.FunctionDeclaration | None:
        return self._declaration.model_copy(deep=True)

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        session = tool_context.session
        scope = self.scope or scope_for(session.app_name, session.user_id, session.id)
        observation = await self.box.call(
            self.name,
            args,
            scope=scope,
            run_id=tool_context.invocation_id,
            tool_call_id=tool_context.function_call_id,
        )
        return _result(observation)


def _result(observation: Observation) -> dict[str, Any]:
    """What ADK turns into the function response: the text, and load_artifacts' images as media parts."""
    if observation.is_error:
        return {"error": observation.content}
    result: dict[str, Any] = {"result": observation.content}
    if observation.parts:
        result["content"] = [_part(part) for part in observation.parts]
    return result


def _part(part: Mapping[str, Any]) -> str | types.Part:
    """A text part as a string; an image as a Part with inline bytes (ADK sends it as function-response media)."""
    if part.get("type") == "image":
        try:
            data = base64.b64decode(str(part["data"]), validate=True)
        except (binascii.Error, ValueError):
            return "[an image part could not be decoded]"
        return types.Part(inline_data=types.Blob(mime_type=str(part["media_type"]), data=data))
    return str(part.get("text", ""))


def tools(box: Toolbox, names: Iterable[str] | None = None, *, scope: Scope | None = None) -> list[BaseTool]:
    """The Toolbox's tools (all, or those in ``names``) as ADK tools.

    Each call runs in the scope of the ADK session that makes it (:func:`scope_for`), or in ``scope``
    if given. Refvault's ``load_artifacts`` shares its name with ADK's ``LoadArtifactsTool``: to use
    ADK's, leave refvault's out with ``names``.
    """
    schemas = {schema["name"]: schema for schema in box.schemas("gemini")}
    wanted = list(schemas) if names is None else list(names)
    unknown = [name for name in wanted if name not in schemas]
    if unknown:
        raise InvalidArgument(f"no tool named {', '.join(map(repr, unknown[:5]))} is registered on this Toolbox")
    return [RefvaultTool(box, schemas[name], scope=scope) for name in dict.fromkeys(wanted)]


# -- the guard ---------------------------------------------------------------------------------------------------------


def guard_callback(guard: Any) -> Callable[[CallbackContext, LlmRequest], None]:
    """A ``before_model_callback`` that checks every model request with ``guard`` and raises ContextLeak.

    ``guard`` is a :class:`~refvault.guard.LeakGuard` (or a Toolbox, for its ``box.guard``) with policy
    ``raise``. The whole request is checked (contents, system instruction, tool declarations) as
    ``llm_request.model_dump(mode="json")``. Put it last in a callback list, so nothing changes the
    request after it; ``guard.protect_scope(vault, scope_for(app, user, session))`` protects every
    sealed artifact of a session up front.
    """
    from refvault.toolbox.toolbox import Toolbox

    checker = guard.guard if isinstance(guard, Toolbox) else guard
    if checker is None or not callable(getattr(checker, "check", None)):
        raise InvalidArgument("guard_callback needs a LeakGuard (or a Toolbox whose guard is enabled)")
    if getattr(checker, "policy", "raise") != "raise":
        raise InvalidArgument("guard_callback needs a guard with policy 'raise': ADK requests are not rewritten")

    def before_model_callback(callback_context: CallbackContext, llm_request: LlmRequest) -> None:
        checker.check(llm_request.model_dump(mode="json", exclude_none=True, fallback=_rendered))

    return before_model_callback


def _rendered(value: Any) -> Any:
    """What JSON cannot hold as is: a response-schema class as its JSON schema, anything else as text."""
    if isinstance(value, type) and issubclass(value, BaseModel):
        return value.model_json_schema()
    return str(value)
