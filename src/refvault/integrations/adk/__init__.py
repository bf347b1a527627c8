"""refvault for Google ADK: a vault-backed artifact service, Toolbox tools, and a leak-guard callback.

::

    from refvault.integrations.adk import RefvaultArtifactService, guard_callback, tools

    box = Toolbox(vault)
    agent = LlmAgent(name="analyst", model=..., tools=tools(box), before_model_callback=guard_callback(box))
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
  differ (``tests/integrations/test_adk_differential.py``: a scripted sequence and hypothesis-generated ones).
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
  ``tests/integrations/test_adk.py``).
* **The guard runs before every model call.** :func:`guard_callback` checks the whole
  ``LlmRequest`` (contents, system instruction, tools, response schema) and raises
  :class:`~refvault.errors.ContextLeak`, which ADK lets propagate out of ``Runner.run_async`` (it
  wraps it internally and re-raises the original); the model is never called
  (``test_leaking_tool_result_is_stopped_before_the_model``,
  ``test_guard_checks_the_system_instruction_of_requests_with_an_output_schema``). The leaking tool
  result is already in the session's events by then: the guard keeps it from the model, not from
  the session store.
* **The context working set trims the request, never the session.** :func:`working_set_callback`
  replaces, in the request's copy of the contents, each older stored function response with the
  working set's stub naming the artifact id; the session's events keep every full response
  (``tests/integrations/test_working_set_adk.py``).
* **ADK's own loaders are guarded too.** ``LoadArtifactsTool`` and ``{artifact.name}`` instruction
  templates put a loaded version into the request whatever its disclosure; a service made with
  ``guard=`` teaches that guard every sealed version it saves or loads, so :func:`guard_callback`
  stops such a request (``test_adk_loaders_cannot_put_a_sealed_version_in_front_of_the_model`` in
  ``tests/integrations/test_adk_guard.py``).

Cost: a lookup by filename lists the artifacts of one scope (``vault.list``) and keeps those of the
filename, so each call is O(artifacts in that session, or in that user's ``user:`` store), never
O(all artifacts); the bytes of exactly one version are read per load.

The package: :mod:`~refvault.integrations.adk.identity` (ADK names as scopes),
:mod:`~refvault.integrations.adk.parts` (a Part as vault content),
:mod:`~refvault.integrations.adk.service` (the artifact service),
:mod:`~refvault.integrations.adk.registry` (``refvault://`` URIs),
:mod:`~refvault.integrations.adk.agent_tools` (Toolbox tools as ADK tools) and
:mod:`~refvault.integrations.adk.callbacks` (the guard and working-set callbacks); every name
is importable from :mod:`refvault.integrations.adk`.
"""

from __future__ import annotations

try:  # what this package takes from ADK: without it, one message saying which extra to install
    from google.adk.artifacts import artifact_util
    from google.adk.artifacts.base_artifact_service import ArtifactVersion, BaseArtifactService, ensure_part
    from google.adk.errors.input_validation_error import InputValidationError
    from google.adk.tools.base_tool import BaseTool
    from google.genai import types
    from pydantic import BaseModel
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("refvault.integrations.adk needs Google ADK: pip install 'refvault[adk]'") from exc

from refvault.integrations.adk.agent_tools import RefvaultTool, tools
from refvault.integrations.adk.callbacks import guard_callback, working_set_callback
from refvault.integrations.adk.identity import RESERVED_PREFIX as RESERVED_PREFIX
from refvault.integrations.adk.identity import USER_PREFIX as USER_PREFIX
from refvault.integrations.adk.identity import USER_SESSION, AdkInputError, scope_for, scope_name
from refvault.integrations.adk.parts import MARK as MARK
from refvault.integrations.adk.registry import register
from refvault.integrations.adk.service import MAX_VERSION_ATTEMPTS as MAX_VERSION_ATTEMPTS
from refvault.integrations.adk.service import SCHEME, RefvaultArtifactService

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
    "working_set_callback",
]

del artifact_util, ArtifactVersion, BaseArtifactService, ensure_part, InputValidationError, BaseTool, types, BaseModel
