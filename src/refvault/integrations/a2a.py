"""refvault for Agent2Agent (A2A): no bytes between agents, only ``refvault://`` references and capability links.

Needs the optional ``a2a`` extra (the official A2A Python SDK, 1.x: protobuf types); nothing in refvault imports
this module unless asked to.

**Inbound** (what a remote agent returns): :func:`materialize` takes an A2A ``Message``, ``Task``, ``Artifact``,
``TaskArtifactUpdateEvent``, ``TaskStatusUpdateEvent``, ``StreamResponse``, ``ListTasksResponse`` or a list of
``Part``s and returns a new one of the same kind (the input is never mutated) in which:

* **Every part carrying inline bytes (``raw``) is stored** in the caller's scope and replaced by a ``Part`` whose
  ``url`` is ``refvault://art_…``, keeping ``media_type`` and (cleaned) ``filename``, with
  ``metadata["refvault"]`` holding ``artifact_id``, ``size``, ``digest`` (``sha256:…``), ``disclosure`` and the
  media-type facts. It is the MCP gateway's materialiser (:func:`refvault.content.materialize`) that does it, so the
  same invariants hold: everything is checked before the first write; an empty part, a part over
  ``Limits.per_part``, parts over ``Limits.per_result`` or ``Limits.max_parts``, a missing or invalid
  ``media_type`` are refused with a :class:`~refvault.errors.MaterializationError` (``InvalidResult``,
  ``EmptyPart``, ``TooLarge``) and nothing is stored; media types are canonical and checked against the bytes;
  parts are stored in order under one ``created_at``; binary parts are ``sealed`` unless
  ``A2AOptions(binary_disclosure="model")``.
* **Retries are de-duplicated.** Each part list (one message, one artifact) is materialised under a
  ``tool_call_id`` derived from the A2A ids that name it (message id; task and artifact id) and a digest of its
  parts, and each part's idempotency key from that id and the part's index (as the gateway derives them): the
  same parts arriving again (a retried message, a re-sent artifact, a task fetched twice) give the same
  artifacts and store nothing new.
* **No base64 of the bytes anywhere.** Base64 of binary inside text, ``data`` and ``url`` parts and in metadata
  (a ``data:`` URL, a long base64 string, as :mod:`refvault.content.encoded` defines it) is stored too and its
  ``refvault://`` URI stands where it was; each such inline part adds one ``url`` part after the list's own.
* **``url`` parts are untrusted metadata**: passed on, never fetched. One claiming the ``refvault:`` scheme
  (which only refvault mints) is replaced by a text part saying it was withheld, as the gateway does.
* **Large ``data`` parts are offloaded**: structured JSON estimated over ``offload_tokens`` is captured
  (``disclosure="model"``) and replaced by the same bounded preview naming the artifact as an oversized tool
  result (:func:`refvault.toolbox.offload.offload`).

:class:`MaterializingClient` wraps an SDK ``Client`` and applies :func:`materialize` to everything the remote
agent returns (``send_message`` and ``subscribe`` streams, ``get_task``, ``list_tasks``, ``cancel_task``).

**Outbound** (what an agent hands to another): :func:`part_for` returns a ``Part`` whose ``url`` is a capability
link (:meth:`refvault.Vault.link`): bound to the artifact, one recipient (``tool:<agent>``, ``model:<name>``,
``user`` or ``export``) and a purpose, short-lived (5 minutes by default, at most 24 hours), re-checked and
audited at every use, recorded in the disclosure ledger. It never carries the bytes or an API key. A ``sealed``
artifact is refused (:class:`~refvault.errors.SealedArtifact`), as are one the policy denies to that recipient
(:class:`~refvault.errors.PolicyDenied`) and one the scope cannot see (:class:`~refvault.errors.NotFound`).
:func:`artifact_parts` does it for several artifacts (what an ``AgentExecutor`` hands to
``TaskUpdater.add_artifact``).

**Receiving by link**: an agent that trusts a ``refvault serve`` (``A2AOptions(trusted_links=(base_url,))``) has
the capability links of that server in what it receives fetched, checked against the size, digest and media type the
link part states (one stating no digest is refused unfetched: what it opens could not be checked), and stored like
inline bytes (the same limits, refusals, order and retry de-duplication), so it works on a
``refvault://`` reference in its own scope. A refused link (expired, revoked, replayed after its call, forged)
raises :class:`~refvault.errors.LinkRefused` and nothing of that part list is stored.

**Sending**: :func:`check_outgoing` passes an A2A object through a :class:`~refvault.guard.LeakGuard` before it
leaves, so an agent cannot paste a sealed artifact's content into its reply.

Not promised: a ``url`` part's target is not checked or fetched unless it is a trusted link; offloaded ``data``
parts are not subject to the gateway's label policy (a labelled upstream's text withheld from the model); each part
list is materialised on its own (one ``created_at`` per list, not per task).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, TypeVar, overload
from urllib.parse import quote, urlsplit

from a2a.types import (
    Artifact,
    ListTasksResponse,
    Message,
    Part,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskStatusUpdateEvent,
)
from google.protobuf import json_format, struct_pb2

from refvault.client import Client
from refvault.content import Limits
from refvault.content import materialize as materialize_result
from refvault.contract import EmbeddedHandle
from refvault.errors import (
    IntegrityError,
    InvalidArgument,
    InvalidMetadata,
    InvalidResult,
    LinkRefused,
    SealedArtifact,
    StorageError,
    TooLarge,
)
from refvault.guard import LeakGuard
from refvault.limits import ModelCaps, caps_for_model, caps_with
from refvault.model import Scope, check_labels
from refvault.policy import DEFAULT_PURPOSE, check_recipient
from refvault.toolbox.remote import RemoteLink
from refvault.vault.core import Vault
from refvault.vault.links import DEFAULT_LINK_TTL, LINK_PATH

__all__ = [
    "A2AOptions",
    "MaterializingClient",
    "artifact_parts",
    "check_outgoing",
    "materialize",
    "materialize_parts",
    "part_for",
    "remote_part",
]

A2AObject = TypeVar(
    "A2AObject",
    Message,
    Task,
    Artifact,
    TaskArtifactUpdateEvent,
    TaskStatusUpdateEvent,
    StreamResponse,
    ListTasksResponse,
)

URI_SCHEME = "refvault://"
# what follows /v1/links/ in a link refvault serve issues: a KeyRing token, rvc1.<base64url>.<base64url> (never a
# dot segment such as "..", which an HTTP client resolves to another path of the trusted server)
_TOKEN = re.compile(r"rvc1\.[A-Za-z0-9_-]{1,8000}\.[A-Za-z0-9_-]{43}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_WITHHELD = (
    "[refvault withheld a url part from agent {agent!r}: it claims a refvault:// URI, but refvault mints those "
    "only for what it stores itself, so it is untrusted and not shown]"
)


@dataclass(frozen=True, slots=True)
class A2AOptions:
    """How inbound parts are treated: the materialiser's limits, disclosure and labels; the offload threshold.

    ``offload_tokens`` and ``preview_chars`` default to the values scaled to ``model_context_tokens``
    (:func:`refvault.limits.caps_for_model`; with neither given, 20,000 tokens and 4,000 characters), as the MCP
    gateway's do; :attr:`caps` is what applies.

    ``trusted_links``: base URLs of ``refvault serve`` instances whose capability links (``url`` parts at
    ``<base>/v1/links/<token>``, as :func:`part_for` makes them) are fetched and stored like inline bytes: the
    receiving agent gets a ``refvault://`` reference in its own scope, never the link. Every other ``url`` part
    stays untrusted metadata, never fetched.
    """

    limits: Limits = field(default_factory=Limits)
    binary_disclosure: Literal["model", "sealed"] = "sealed"
    labels: frozenset[str] = frozenset()
    offload_tokens: int | None = None
    preview_chars: int | None = None
    model_context_tokens: int | None = None
    trusted_links: tuple[str, ...] = ()
    caps: ModelCaps = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        trusted: object = self.trusted_links
        if isinstance(trusted, str) or not isinstance(trusted, tuple | list | frozenset):
            raise InvalidArgument("trusted_links must be a tuple of the base URLs of refvault serve instances")
        object.__setattr__(self, "trusted_links", tuple(_checked_base_url(base) for base in self.trusted_links))
        try:
            object.__setattr__(self, "labels", check_labels(self.labels))
        except InvalidMetadata as exc:
            raise InvalidArgument(str(exc)) from None
        if not isinstance(self.limits, Limits):
            raise InvalidArgument("limits must be a refvault.content.Limits")
        if self.binary_disclosure not in ("model", "sealed"):
            raise InvalidArgument("binary_disclosure must be 'model' or 'sealed'")
        caps = caps_for_model(self.model_context_tokens)
        caps = caps_with(caps, offload_tokens=self.offload_tokens, preview_chars=self.preview_chars)
        object.__setattr__(self, "caps", caps)


# -- inbound ---------------------------------------------------------------------------------------------------------


@overload
async def materialize(
    vault: EmbeddedHandle,
    scope: Scope,
    obj: A2AObject,
    *,
    agent: str = ...,
    options: A2AOptions | None = ...,
) -> A2AObject: ...


@overload
async def materialize(
    vault: EmbeddedHandle,
    scope: Scope,
    obj: Sequence[Part],
    *,
    agent: str = ...,
    options: A2AOptions | None = ...,
) -> list[Part]: ...


async def materialize(
    vault: EmbeddedHandle,
    scope: Scope,
    obj: Any,
    *,
    agent: str = "remote",
    options: A2AOptions | None = None,
) -> Any:
    """``obj`` with every inline-bytes part stored and replaced by a ``refvault://`` url part (see the module).

    ``agent`` names the remote agent in provenance (``a2a:<agent>``). Raises a
    :class:`~refvault.errors.MaterializationError` for a refused part (nothing of that part list is stored) and
    :class:`~refvault.errors.InvalidArgument` for something that is not an A2A object.
    """
    opts = options if options is not None else A2AOptions()
    return await _Materializer(vault, scope, agent, opts).any(obj)


async def materialize_parts(
    vault: EmbeddedHandle,
    scope: Scope,
    parts: Sequence[Part],
    *,
    key: Sequence[str],
    agent: str = "remote",
    options: A2AOptions | None = None,
) -> list[Part]:
    """One part list materialised under a retry key built from ``key`` (the A2A ids naming the list)."""
    opts = options if options is not None else A2AOptions()
    return await _Materializer(vault, scope, agent, opts).parts(parts, key)


class _Materializer:
    def __init__(self, vault: EmbeddedHandle, scope: Scope, agent: str, options: A2AOptions) -> None:
        if not isinstance(agent, str) or not agent:
            raise InvalidArgument("agent must be a non-empty string naming the remote agent")
        self.vault = vault
        self.scope = scope
        self.agent = agent
        self.options = options
        self.provenance = "a2a:" + agent[:200]

    async def any(self, obj: Any) -> Any:
        if isinstance(obj, Message):
            return await self.message(obj)
        if isinstance(obj, Artifact):
            return await self.artifact(obj, "")
        if isinstance(obj, Task):
            return await self.task(obj)
        if isinstance(obj, TaskArtifactUpdateEvent):
            event = _copy(obj)
            if obj.HasField("artifact"):
                event.artifact.CopyFrom(await self.artifact(obj.artifact, obj.task_id))
            return event
        if isinstance(obj, TaskStatusUpdateEvent):
            status_event = _copy(obj)
            if obj.status.HasField("message"):
                status_event.status.message.CopyFrom(await self.message(obj.status.message))
            return status_event
        if isinstance(obj, StreamResponse):
            response = _copy(obj)
            which = obj.WhichOneof("payload")
            if which is not None:
                getattr(response, which).CopyFrom(await self.any(getattr(obj, which)))
            return response
        if isinstance(obj, ListTasksResponse):
            listed = _copy(obj)
            del listed.tasks[:]
            listed.tasks.extend([await self.task(task) for task in obj.tasks])
            return listed
        if isinstance(obj, Sequence) and not isinstance(obj, str | bytes) and all(isinstance(p, Part) for p in obj):
            return await self.parts(obj, ())
        raise InvalidArgument(
            "not an A2A object: expected a Message, Task, Artifact, TaskArtifactUpdateEvent, TaskStatusUpdateEvent, "
            "StreamResponse, ListTasksResponse or a list of Part (a2a-sdk 1.x)"
        )

    async def message(self, message: Message) -> Message:
        out = _copy(message)
        _replace(out.parts, await self.parts(message.parts, ("message", message.message_id, message.task_id)))
        return out

    async def artifact(self, artifact: Artifact, task_id: str) -> Artifact:
        out = _copy(artifact)
        _replace(out.parts, await self.parts(artifact.parts, ("artifact", task_id, artifact.artifact_id)))
        return out

    async def task(self, task: Task) -> Task:
        out = _copy(task)
        if task.status.HasField("message"):
            out.status.message.CopyFrom(await self.message(task.status.message))
        del out.artifacts[:]
        out.artifacts.extend([await self.artifact(artifact, task.id) for artifact in task.artifacts])
        del out.history[:]
        out.history.extend([await self.message(message) for message in task.history])
        return out

    async def parts(self, parts: Sequence[Part], key: Sequence[str]) -> list[Part]:
        """One part list: materialised (the gateway's materialiser), data parts offloaded, in order."""
        parts = list(parts)
        if not all(isinstance(part, Part) for part in parts):
            raise InvalidArgument("parts must be a list of a2a.types.Part")
        if self.options.trusted_links:
            parts = await _fetch_trusted(parts, self.options)
        blocks, kinds = self._wire(parts)
        tool_call_id = _tool_call_id((self.provenance, *key), parts)
        if any(kind == "raw" for kind in kinds) or any(_may_carry_base64(block) for block in blocks):
            projected = await materialize_result(
                self.vault,
                self.scope,
                {"content": blocks},
                provenance=self.provenance,
                tool_call_id=tool_call_id,
                limits=self.options.limits,
                disclosure=self.options.binary_disclosure,
                labels=self.options.labels,
            )
            content: list[dict[str, Any]] = projected["content"]
        else:
            content = blocks
        out: list[Part] = []
        for index, (original, kind) in enumerate(zip(parts, kinds, strict=True)):
            out.append(await self._back(original, kind, content[index], tool_call_id, index))
        out.extend(_url_part(link) for link in content[len(parts) :])
        return out

    def _wire(self, parts: Sequence[Part]) -> tuple[list[dict[str, Any]], list[str]]:
        """The parts as an MCP tool result's content blocks (what the materialiser takes), and each one's kind."""
        blocks: list[dict[str, Any]] = []
        kinds: list[str] = []
        for index, part in enumerate(parts):
            kind = part.WhichOneof("content") or "none"
            block: dict[str, Any]
            if kind == "raw":
                if not part.media_type:
                    raise InvalidResult(
                        f"part {index} carries inline bytes but declares no media_type; refused rather than guessed",
                        content_index=index,
                    )
                resource: dict[str, Any] = {
                    "uri": "a2a:///" + quote(part.filename, safe="") if part.filename else "a2a:///",
                    "mimeType": part.media_type,
                    "blob": base64.b64encode(part.raw).decode("ascii"),
                }
                block = {"type": "resource", "resource": resource}
            elif kind == "text":
                block = {"type": "text", "text": part.text}
            elif kind == "data":
                block = {"type": "text", "text": _to_json(json_format.MessageToDict(part.data))}
            elif kind == "url" and part.url.strip().lower().startswith("refvault:"):
                kind = "claimed"
                block = {"type": "text", "text": _WITHHELD.format(agent=self.agent[:200])}
            elif kind == "url":
                block = {"type": "resource_link", "uri": part.url, "name": part.filename or "url"}
            else:
                block = {"type": "text", "text": ""}
            if part.HasField("metadata"):
                block["_meta"] = json_format.MessageToDict(part.metadata)
            blocks.append(block)
            kinds.append(kind)
        return blocks, kinds

    async def _back(self, original: Part, kind: str, block: Mapping[str, Any], tool_call_id: str, index: int) -> Part:
        if kind == "raw":
            return _url_part(block)
        part = Part()
        if kind in ("text", "claimed"):
            part.text = block["text"]
        elif kind == "url":
            part.url = block["uri"]
        elif kind == "data":
            part.data.CopyFrom(await self._data(block["text"], tool_call_id, index))
        else:
            part.CopyFrom(original)
            part.ClearField("metadata")
        if kind != "claimed":
            if original.filename:
                part.filename = original.filename
            if original.media_type:
                part.media_type = original.media_type
        meta = block.get("_meta")
        if isinstance(meta, Mapping) and kind != "claimed":
            part.metadata.update(dict(meta))
        return part

    async def _data(self, text: str, tool_call_id: str, index: int) -> struct_pb2.Value:
        """A data part's JSON (as projected), offloaded to a preview when it is estimated over the threshold."""
        from refvault.read.previews.tokens import estimate_tokens

        value = json.loads(text)
        threshold = self.options.caps.offload_tokens
        if 2 * len(text) > threshold and estimate_tokens(text) > threshold:
            value = json.loads(await asyncio.to_thread(self._offload, text, value, f"{tool_call_id}.data.{index}"))
        out = struct_pb2.Value()
        json_format.ParseDict(value, out)
        return out

    def _offload(self, text: str, value: Any, tool_call_id: str) -> str:
        from refvault.toolbox.offload import offload

        if not isinstance(self.vault, EmbeddedHandle):
            raise InvalidArgument("vault must be a refvault.Vault or AsyncVault")
        shown, _ = offload(
            self.vault.embedded_vault(),
            self.scope,
            text,
            value,
            sealed=False,
            tool_call_id=tool_call_id,
            run_id=None,
            preview_chars=self.options.caps.preview_chars,
            source=self.provenance,
            labels=self.options.labels,
        )
        return shown


def _url_part(link: Mapping[str, Any]) -> Part:
    """The ``url`` part standing for one stored part (a ``resource_link`` the materialiser made)."""
    meta = dict(link.get("_meta") or {})
    facts = {key: value for key, value in meta.items() if key not in ("upstream_meta", "upstream_resource_meta")}
    facts["digest"] = "sha256:" + str(meta.get("sha256", ""))
    facts["size"] = link.get("size")
    carried = meta.get("upstream_meta") if isinstance(meta.get("upstream_meta"), Mapping) else {}
    part = Part(url=str(link["uri"]), media_type=str(link.get("mimeType") or ""), filename=str(link.get("name") or ""))
    part.metadata.update({**dict(carried or {}), "refvault": facts})
    return part


async def _fetch_trusted(parts: list[Part], options: A2AOptions) -> list[Part]:
    """``parts`` with each capability link of a trusted ``refvault serve`` replaced by the verified bytes it opens.

    Each link part must state the ``digest`` of its bytes (:func:`part_for` and :func:`remote_part` state it, with
    the ``size``): bytes that do not match it, or a link stating none, raise
    :class:`~refvault.errors.IntegrityError`, as does a ``media_type`` other than the one the server serves. A link the
    server refuses (expired, revoked, forged) raises :class:`~refvault.errors.LinkRefused`. The limits apply before
    and while fetching, not only once everything is held in memory: more links and inline parts than
    ``Limits.max_parts`` are refused before any is fetched; a link opening more than ``Limits.per_part`` bytes, or
    links and inline bytes adding up to more than ``Limits.per_result``, raise :class:`~refvault.errors.TooLarge`
    as soon as the bytes read go over. The bytes are asked for as stored (``Accept-Encoding: identity``); an answer
    in a content encoding, which would inflate before it is counted, is refused
    (:class:`~refvault.errors.StorageError`).
    Nothing is stored unless every link of the list opened and verified.
    """
    import httpx

    wanted = [index for index, part in enumerate(parts) if _trusted_link(part, options.trusted_links)]
    if not wanted:
        return parts
    limits = options.limits
    inline = [len(part.raw) for part in parts if part.WhichOneof("content") == "raw"]
    if len(inline) + len(wanted) > limits.max_parts:
        raise TooLarge(
            f"this message has {len(inline) + len(wanted)} binary parts and links, over the limit of "
            f"{limits.max_parts} parts per result; refused, nothing was fetched or stored"
        )
    budget = limits.per_result - sum(inline)
    out = list(parts)
    timeout = httpx.Timeout(60.0, connect=10.0)
    # the bytes as stored: nothing inflates past a limit before it is counted
    identity = {"Accept-Encoding": "identity"}
    async with httpx.AsyncClient(timeout=timeout, follow_redirects=False, headers=identity) as http:
        for index in wanted:
            facts = _stated_facts(parts[index], index)
            out[index] = await _opened(http, parts[index], index, facts, limits.per_part, budget)
            budget -= len(out[index].raw)
    return out


def _trusted_link(part: Part, bases: Sequence[str]) -> bool:
    if part.WhichOneof("content") != "url":
        return False
    url = part.url
    return any(url.startswith(base + LINK_PATH) and _TOKEN.fullmatch(url[len(base + LINK_PATH) :]) for base in bases)


def _stated_facts(part: Part, index: int) -> dict[str, Any]:
    """The ``metadata["refvault"]`` of a link part, which must state a sha256 ``digest`` (and may a ``size``)."""
    facts = json_format.MessageToDict(part.metadata).get("refvault") if part.HasField("metadata") else None
    facts = facts if isinstance(facts, dict) else {}
    digest, size = facts.get("digest"), facts.get("size")
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise IntegrityError(
            f"part {index} is a link stating no sha256 digest of its bytes, so what it opens cannot be checked; "
            "refused (part_for and remote_part state it)"
        )
    if size is not None and (isinstance(size, bool) or not isinstance(size, int | float)):
        raise IntegrityError(f"part {index}'s link states a size that is not a number")
    return facts


async def _opened(http: Any, part: Part, index: int, facts: Mapping[str, Any], per_part: int, budget: int) -> Part:
    """The raw part a trusted link opens to, checked against what the link part states."""
    import httpx

    limit = min(per_part, budget)
    digest, body = hashlib.sha256(), bytearray()
    try:
        async with http.stream("GET", part.url) as answer:
            if answer.status_code == 404:
                raise LinkRefused()
            if answer.status_code != 200:
                raise StorageError(f"the refvault server answered part {index}'s link with HTTP {answer.status_code}")
            if answer.headers.get("content-encoding", "identity").strip().lower() != "identity":
                raise StorageError(f"the refvault server answered part {index}'s link in a content encoding")
            served = answer.headers.get("content-type", "").split(";")[0].strip().lower()
            stated = part.media_type.split(";")[0].strip().lower()
            if served and stated and served != stated:
                raise IntegrityError(f"part {index}'s link states another media type than its server serves")
            media_type = part.media_type or served
            async for chunk in answer.aiter_raw():
                if len(body) + len(chunk) > limit:
                    raise _over(index, per_part, limit)
                body += chunk
                digest.update(chunk)
    except httpx.HTTPError as exc:
        raise StorageError(f"cannot fetch part {index}'s link: {type(exc).__name__}") from None
    stated_size = facts.get("size")
    if facts["digest"] != "sha256:" + digest.hexdigest() or (
        stated_size is not None and stated_size != len(body)  # protobuf JSON numbers are floats: 12.0 == 12
    ):
        raise IntegrityError(f"part {index}'s link opened bytes that do not match the size and digest it states")
    raw = Part(raw=bytes(body), media_type=media_type, filename=part.filename)
    origin = {key: facts[key] for key in ("artifact_id", "digest", "size", "purpose") if key in facts}
    raw.metadata.update({"origin": {**origin, "link": part.url.rsplit("/", 1)[0]}})
    return raw


def _over(index: int, per_part: int, limit: int) -> TooLarge:
    if limit >= per_part:
        return TooLarge(f"part {index}'s link opens more than {per_part} bytes", content_index=index)
    return TooLarge(
        f"part {index}'s link opens more bytes than are left of the per-result limit; refused, nothing was stored",
        content_index=index,
    )


def _may_carry_base64(block: Mapping[str, Any]) -> bool:
    """Whether a block could hold inline base64 (cheap pre-check: long strings only)."""
    return len(_to_json(block)) >= 128


def _tool_call_id(key: Sequence[str], parts: Sequence[Part]) -> str:
    """The retry key of one part list: its provenance, its A2A ids and a digest of its parts (deterministic)."""
    digest = hashlib.sha256(b"refvault.a2a\x00")
    for item in key:
        digest.update(item.encode("utf-8", "surrogatepass") + b"\x00")
    for part in parts:
        encoded = part.SerializeToString(deterministic=True)
        digest.update(len(encoded).to_bytes(8, "big") + encoded)
    return "a2a_" + digest.hexdigest()[:48]


def _to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


M = TypeVar(
    "M", Message, Task, Artifact, TaskArtifactUpdateEvent, TaskStatusUpdateEvent, StreamResponse, ListTasksResponse
)


def _copy(message: M) -> M:
    out = type(message)()
    out.CopyFrom(message)
    return out


def _replace(target: Any, parts: Iterable[Part]) -> None:
    del target[:]
    target.extend(parts)


class MaterializingClient:
    """An A2A SDK ``Client`` whose answers pass through :func:`materialize` before the caller sees them.

    ``send_message`` and ``subscribe`` yield materialised ``StreamResponse``s (streamed artifact updates
    included); ``get_task``, ``list_tasks`` and ``cancel_task`` return materialised tasks. Every other attribute is
    the wrapped client's. A refused answer raises its :class:`~refvault.errors.MaterializationError` (the remote
    agent ran; its answer is not shown).
    """

    def __init__(
        self,
        client: Any,
        vault: EmbeddedHandle,
        scope: Scope,
        *,
        agent: str = "remote",
        options: A2AOptions | None = None,
    ) -> None:
        self.client = client
        self._materializer = _Materializer(vault, scope, agent, options if options is not None else A2AOptions())

    async def send_message(self, request: Any, **kwargs: Any) -> AsyncIterator[StreamResponse]:
        async for response in self.client.send_message(request, **kwargs):
            yield await self._materializer.any(response)

    async def subscribe(self, request: Any, **kwargs: Any) -> AsyncIterator[StreamResponse]:
        async for response in self.client.subscribe(request, **kwargs):
            yield await self._materializer.any(response)

    async def get_task(self, request: Any, **kwargs: Any) -> Task:
        task: Task = await self._materializer.task(await self.client.get_task(request, **kwargs))
        return task

    async def cancel_task(self, request: Any, **kwargs: Any) -> Task:
        task: Task = await self._materializer.task(await self.client.cancel_task(request, **kwargs))
        return task

    async def list_tasks(self, request: Any, **kwargs: Any) -> ListTasksResponse:
        listed: ListTasksResponse = await self._materializer.any(await self.client.list_tasks(request, **kwargs))
        return listed

    async def close(self) -> None:
        await self.client.close()

    async def __aenter__(self) -> MaterializingClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


# -- outbound --------------------------------------------------------------------------------------------------------


def part_for(
    vault: Vault | Client,
    scope: Scope,
    artifact_id: str,
    *,
    recipient: str,
    purpose: str = "default",
    base_url: str | None = None,
    expires_in: timedelta = DEFAULT_LINK_TTL,
) -> Part:
    """A ``Part`` whose ``url`` is a capability link to one artifact for ``recipient`` and ``purpose``.

    ``vault`` is a :class:`~refvault.Vault` (then ``base_url``, where a ``refvault serve`` of this store answers,
    ``http://`` or ``https://``, is required) or a :class:`~refvault.Client` (its server's URL unless ``base_url``
    says where the recipient reaches it). The link is ``<base_url>/v1/links/<token>``, valid ``expires_in`` (1 s
    to 24 h), needing no API key, re-checked and audited at every use. Never the bytes, never a key.
    :class:`~refvault.errors.SealedArtifact` for a sealed artifact,
    :class:`~refvault.errors.PolicyDenied` when the tenant's policy denies it to ``recipient`` for ``purpose``,
    :class:`~refvault.errors.NotFound` for one the scope cannot see, :class:`~refvault.errors.InvalidArgument` for a
    malformed recipient or base URL.
    """
    check_recipient(recipient)
    base = None if base_url is None else _checked_base_url(base_url)
    if base is None and isinstance(vault, Vault):
        raise InvalidArgument("base_url is needed with a Vault: where a refvault serve of this store answers")
    descriptor = vault.describe(scope, artifact_id, purpose=purpose, recipient=recipient)
    if descriptor.disclosure == "sealed":
        raise SealedArtifact(descriptor.artifact_id)
    link = vault.link(scope, descriptor.artifact_id, recipient=recipient, purpose=purpose, expires_in=expires_in)
    if base is not None:
        link = base + LINK_PATH + link.rsplit("/", 1)[1]
    part = Part(url=link, media_type=descriptor.media_type)
    if descriptor.filename:
        part.filename = descriptor.filename
    part.metadata.update(
        {
            "refvault": {
                "artifact_id": descriptor.artifact_id,
                "size": descriptor.size,
                "digest": descriptor.content_hash,
                "recipient": recipient,
                "purpose": purpose,
                "expires_in_seconds": int(expires_in.total_seconds()),
            }
        }
    )
    return part


def artifact_parts(
    vault: Vault | Client,
    scope: Scope,
    artifact_ids: Iterable[str],
    *,
    recipient: str,
    purpose: str = "default",
    base_url: str | None = None,
    expires_in: timedelta = DEFAULT_LINK_TTL,
) -> list[Part]:
    """:func:`part_for` for each artifact, in order: the parts an ``AgentExecutor`` returns (all or none)."""
    return [
        part_for(
            vault, scope, artifact_id, recipient=recipient, purpose=purpose, base_url=base_url, expires_in=expires_in
        )
        for artifact_id in artifact_ids
    ]


def remote_part(link: RemoteLink, *, filename: str | None = None) -> Part:
    """The ``Part`` a tool hands another agent for a :class:`~refvault.RemoteLink` parameter it received.

    Its ``url`` is the per-call capability link (revoked when the tool call ends), its ``media_type`` the
    artifact's, and ``metadata["refvault"]`` the ``artifact_id``, ``size`` and ``digest`` the receiving side checks
    the fetched bytes against (as with :func:`part_for`). Never the bytes, never a key.
    """
    if not isinstance(link, RemoteLink):
        raise InvalidArgument("link must be the RemoteLink a tool call received")
    part = Part(url=link.url, media_type=link.media_type)
    if filename:
        part.filename = filename
    facts: dict[str, str | int] = {"artifact_id": link.artifact_id, "size": link.size, "digest": link.content_hash}
    part.metadata.update({"refvault": {**facts, "expires_at": link.expires_at.isoformat()}})
    return part


def check_outgoing(guard: LeakGuard, obj: A2AObject, *, recipient: str, purpose: str = DEFAULT_PURPOSE) -> A2AObject:
    """``obj`` (an A2A object this agent is about to send) if the leak guard lets it go to ``recipient``.

    The object is scanned as the JSON the SDK would send (inline bytes as base64, which the guard decodes) for
    ``purpose``: protected (sealed) content raises :class:`~refvault.errors.ContextLeak` naming only artifact ids
    and sites, or, for a guard with ``policy="redact"``, a copy with each protected span replaced by its marker
    (a part whose inline bytes are protected becomes a ``text/plain`` part holding the marker).
    """
    as_json = json_format.MessageToDict(obj)
    checked = guard.check(as_json, recipient=recipient, purpose=purpose)
    if checked is as_json or not isinstance(checked, dict):
        return obj
    out = type(obj)()
    json_format.ParseDict(_markers_as_text(checked), out)
    return out


def _markers_as_text(value: Any, *, part: bool = False) -> Any:
    """``value`` (a redacted A2A object as JSON) with each part whose ``raw`` bytes the guard replaced by a marker
    made a text part holding that marker: protobuf JSON would otherwise base64-decode the marker into garbage bytes."""
    if isinstance(value, list):
        return [_markers_as_text(item, part=part) for item in value]
    if not isinstance(value, dict):
        return value
    out = {key: _markers_as_text(item, part=key == "parts") for key, item in value.items()}
    raw = value.get("raw")
    if part and isinstance(raw, str) and raw.startswith("[refvault:"):
        del out["raw"]
        out["text"], out["mediaType"] = raw, "text/plain"
    return out


def _checked_base_url(base_url: object) -> str:
    if not isinstance(base_url, str):
        raise InvalidArgument("base_url must be the http(s) URL a refvault serve of this store answers at")
    try:
        parts = urlsplit(base_url)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise InvalidArgument("base_url must be the http(s) URL a refvault serve of this store answers at")
    return base_url.rstrip("/")
