"""The Toolbox: a tool registry whose dispatcher resolves ``Ref`` arguments by reference.

Invariants (tested in ``tests/toolbox/``):

* The model authored an id and keeps seeing an id. The raw argument JSON is
  never rewritten; schemas render every ``Ref`` as a string; observations,
  events and the trajectory carry ids only.
* Resolution happens once per dispatch, in the caller's scope, through
  :func:`refvault.toolbox.substitute.bind_refs`, into a frame that exists only
  while the tool runs. A tool without Ref parameters never touches the vault.
* A tool's failure becomes an error observation naming the exception type
  only: an exception message can carry resolved content, so it is never
  echoed. Bad Ref arguments give :class:`~refvault.errors.BadRef`, whose
  message names the id and nothing else.
* Returning ``bytes`` or an :class:`Artifact` captures it, bytes unchanged,
  under the media type given or else the one the bytes show
  (:meth:`Artifact.stored_media_type`); the observation carries the
  descriptor summary, not the bytes.
* **Offload.** With the built-in read tools registered (the default), a
  result estimated above ``offload_tokens`` (20,000 by default, scaled to
  ``model_context_tokens`` when given, per tool if given) is captured with
  ``disclosure="model"`` and the observation is a bounded, type-aware
  preview that says what it covers and omits and how to read more. Output
  of a sealed input stays sealed, and its preview shows type and size only.
  If capture fails, the observation says so and carries a bounded truncation
  marked incomplete (``tests/toolbox/test_offload.py``).

This module holds the :class:`Toolbox` (registration, dispatch, events); the
pieces it uses are beside it: :mod:`~refvault.toolbox.values` (ToolContext,
Artifact, Observation, ToolEvent, re-exported here),
:mod:`~refvault.toolbox.definition` (a function as a tool),
:mod:`~refvault.toolbox.schemas` (tool definitions per model API) and
:mod:`~refvault.toolbox.invocation` (running a tool function).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from pydantic import ValidationError

from refvault.budgets import Budget
from refvault.errors import BadRef, InvalidArgument, InvalidType, MisCopiedId, PolicyDenied, RefvaultError
from refvault.ids import is_artifact_id
from refvault.limits import DEFAULT_PREVIEW_CHARS as DEFAULT_PREVIEW_CHARS  # re-exported, as before
from refvault.limits import MAX_PREVIEW_CHARS, MIN_PREVIEW_CHARS, ModelCaps, caps_for_model
from refvault.model import Descriptor, Scope, check_labels
from refvault.policy import Policy, check_purpose, check_recipient
from refvault.toolbox.builtin import LoadedContent
from refvault.toolbox.builtin import read_tools as builtin_read_tools
from refvault.toolbox.definition import Tool, build_tool, validation_message
from refvault.toolbox.invocation import (
    ENCODER,
    Outcome,
    Prepared,
    encoded,
    invoke_async,
    invoke_sync,
    may_offload,
    needs_vault,
    run_private,
    scrubbed,
    tainted,
)
from refvault.toolbox.linking import check_links_possible, checked_base_url, checked_deadline, issue_links, revoke_links
from refvault.toolbox.offload import capture_text, offload
from refvault.toolbox.ref import DispatchFrame, enter_frame
from refvault.toolbox.schemas import Flavor as Flavor  # re-exported, as before
from refvault.toolbox.schemas import gemini_schema as gemini_schema  # re-exported, as before
from refvault.toolbox.schemas import tool_schema
from refvault.toolbox.spans import execute_tool, execute_tool_async, tool_failed, tool_known
from refvault.toolbox.substitute import bind_refs
from refvault.toolbox.taint import (
    ContextReads,
    input_labels,
    model_may_see,
    model_recipient,
    tenant_policy,
    tool_recipient,
    watch_labelled,
)
from refvault.toolbox.trail import record_call, record_pass, record_stops, took_by, written_by
from refvault.toolbox.values import DEFAULT as DEFAULT  # re-exported, as before
from refvault.toolbox.values import Artifact, Observation, ToolContext, ToolEvent, artifact_summary, joined_text

if TYPE_CHECKING:
    from refvault.contract import VaultContract
    from refvault.guard.contract import Guard
    from refvault.guard.findings import Finding
    from refvault.vault.core import Vault

__all__ = ["Artifact", "Observation", "ToolContext", "ToolEvent", "Toolbox"]

logger = logging.getLogger("refvault.toolbox")

MAX_PROTECTED_IDS = 100_000
POLICY_REFRESH = 5.0
"""Seconds the default guard keeps the tenant's policy before asking for it again."""


class Toolbox:
    """Register tools with ``@box.tool``, describe them with :meth:`schemas`, run them with :meth:`call`."""

    def __init__(
        self,
        vault: VaultContract,
        *,
        ref_pattern: bool = False,
        max_runs: int = 1000,
        max_events_per_run: int = 10_000,
        read_tools: bool = True,
        offload_tokens: int | None = DEFAULT,
        preview_chars: int = DEFAULT,
        guard: Guard | None = DEFAULT,
        model: str | None = None,
        purpose: str = "default",
        budget: Budget | None = None,
        keep_results: bool = False,
        model_context_tokens: int | None = None,
        audit_calls: bool = False,
        link_base_url: str | None = None,
    ) -> None:
        """``read_tools`` registers describe/list/read/query/load_artifacts; offloading needs them.

        ``model`` names the model the tools answer (its reads disclose to the recipient
        ``model:<model>``, ``model:unknown`` when None); ``purpose`` is the purpose of every read
        the Toolbox makes. The read tools and ``load_artifacts`` read for the model; a ``Ref``
        is resolved, and a tool's :class:`ToolContext` reads, for ``tool:<tool name>``. The
        tenant's policy decides each (:mod:`refvault.policy`).

        ``budget`` (:class:`~refvault.Budget`) is set, the first time this Toolbox serves a scope, as
        that run's budget (what it already spent is kept): every put, read, scan, load and ``Ref``
        resolution of its calls is charged to it, and a call over budget is an error observation
        (``BudgetExceeded``) or an incomplete scan (``stopped_by: "budget"``).

        ``offload_tokens`` is the default threshold above which a result is
        offloaded (None: never); ``preview_chars`` bounds each preview.
        ``model_context_tokens`` (the served model's context window, in tokens) scales both, and the
        read tools' defaults and ceilings, to the model (:func:`refvault.limits.caps_for_model`: an 8k
        model gets far smaller caps than a 1M one); an ``offload_tokens`` or ``preview_chars`` given
        here wins over the scaled value. None: the fixed defaults (20,000 tokens, 4,000 characters).
        :meth:`call` and :meth:`schemas` take a ``model_context_tokens`` of their own for one call.
        ``keep_results=True`` also stores every text result of a registered tool returned inline (under its
        ``tool_call_id``, with its labels; the read tools' answers are not stored: the same read gives them
        again), so a :class:`~refvault.context.WorkingSet` can later clear it from the context without losing it.
        ``guard`` is the :class:`~refvault.guard.LeakGuard` (any
        :class:`~refvault.guard.contract.Guard`) that learns every value a tool
        reads by reference (default: one made on first use; None: none). Check
        outgoing model requests with ``box.guard.check``.
        ``audit_calls=True`` appends, when the vault keeps the audit here (an embedded vault), one ``tool_call``
        entry per dispatched call to the tenant's audit chain, in the call's scope: the tool's name, its outcome
        (``"ok"`` or the error class name) and the ids of the artifacts it took and produced, never an argument
        value or content (:mod:`refvault.toolbox.trail`, whose :class:`~refvault.toolbox.trail.ToolCall` reads
        them back).
        ``link_base_url``: where remote tools reach ``refvault serve`` of this store, for their ``RemoteLink``
        parameters (None: a ``Client``'s server; an embedded vault needs one) (:mod:`refvault.toolbox.remote`).
        """
        scaled = caps_for_model(model_context_tokens)  # a bad size: InvalidArgument, saying what is accepted
        if (
            offload_tokens is not DEFAULT
            and offload_tokens is not None
            and (not isinstance(offload_tokens, int) or offload_tokens < 1)
        ):
            raise InvalidArgument("offload_tokens must be a positive integer or None")
        if preview_chars is not DEFAULT and (
            not isinstance(preview_chars, int)
            or isinstance(preview_chars, bool)
            or not MIN_PREVIEW_CHARS <= preview_chars <= MAX_PREVIEW_CHARS
        ):
            raise InvalidArgument(
                f"preview_chars must be an integer between {MIN_PREVIEW_CHARS:,} and {MAX_PREVIEW_CHARS:,}"
            )
        check_purpose(purpose)
        if model is not None:
            check_recipient("model:" + model if isinstance(model, str) else None)  # a name a recipient allows
        if budget is not None and not isinstance(budget, Budget):
            raise InvalidArgument("budget must be a refvault.Budget(...) or None")
        self.vault = vault
        self.budget = budget
        self._budgeted: set[Scope] = set()  # the scopes this Toolbox has set its budget for
        self.model = model
        self.purpose = purpose
        self.ref_pattern = ref_pattern
        self.max_runs = max_runs
        self.max_events_per_run = max_events_per_run
        self.read_tools = read_tools
        self.model_context_tokens = model_context_tokens
        given = {"offload_tokens": offload_tokens, "preview_chars": preview_chars}
        self._given = {key: value for key, value in given.items() if value is not DEFAULT and value is not None}
        self.caps = dataclasses.replace(scaled, **self._given)  # what this Toolbox's calls get by default
        self.offload_tokens = self.caps.offload_tokens if read_tools and offload_tokens is not None else None
        self.preview_chars = self.caps.preview_chars
        if not isinstance(keep_results, bool):
            raise InvalidArgument("keep_results must be True or False")
        self.keep_results = keep_results
        if not isinstance(audit_calls, bool):
            raise InvalidArgument("audit_calls must be True or False")
        self.audit_calls = audit_calls
        self.link_base_url = checked_base_url(link_base_url)
        self._guard = guard
        self._served: Scope | None = None  # the scope of the latest call: whose tenant's policy the guard asks
        self._policy_cache: tuple[str, float, Policy | None] | None = None
        self._ledgered: OrderedDict[tuple[Scope, str, str, str, str], None] = OrderedDict()  # guard passes recorded
        self._protected: OrderedDict[str, None] = OrderedDict()  # ids protected whole (bounded)
        self._tools: dict[str, Tool] = {}
        self._sinks: list[Callable[[ToolEvent], None]] = []
        self._runs: OrderedDict[str | None, deque[ToolEvent]] = OrderedDict()
        self._lock = threading.Lock()
        if read_tools:
            self._tools.update((tool.name, tool) for tool in builtin_read_tools(self.caps))

    def caps_for(self, model_context_tokens: int | None = None) -> ModelCaps:
        """The caps of a call for a model of ``model_context_tokens`` (None: this Toolbox's :attr:`caps`).

        Scaled by :func:`~refvault.limits.caps_for_model`, with the ``offload_tokens`` and ``preview_chars``
        given to the Toolbox kept. A bad size raises :class:`~refvault.errors.InvalidArgument`.
        """
        if model_context_tokens is None:
            return self.caps
        return dataclasses.replace(caps_for_model(model_context_tokens), **self._given)

    def _tools_for(self, caps: ModelCaps) -> dict[str, Tool]:
        """The registered tools, the read tools' defaults those of ``caps``."""
        if caps == self.caps or not self.read_tools:
            return self._tools
        return {**self._tools, **{tool.name: tool for tool in builtin_read_tools(caps)}}

    @property
    def guard(self) -> Guard | None:
        """The leak guard protecting what this Toolbox's tools read by reference (None if disabled)."""
        if self._guard is DEFAULT:
            with self._lock:
                if self._guard is DEFAULT:
                    from refvault.guard import LeakGuard

                    self._guard = LeakGuard(
                        disclosure=self._disclosure_policy, on_stop=self._audit_stop, on_pass=self._ledger_pass
                    )
        return self._guard

    def _disclosure_policy(self) -> Policy | None:
        """The policy the default guard enforces at the LLM edge: that of the tenant this Toolbox last served.

        Asked again at most every :data:`POLICY_REFRESH` seconds (a client asks its server).
        """
        with self._lock:
            scope, cached = self._served, self._policy_cache
        if scope is None:
            return None
        now = time.monotonic()
        if cached is not None and cached[0] == scope.tenant and now - cached[1] < POLICY_REFRESH:
            return cached[2]
        policy = tenant_policy(self.vault, scope)
        with self._lock:
            self._policy_cache = (scope.tenant, now, policy)
        return policy

    def _audit_here(self) -> tuple[Scope, Vault] | None:
        """The scope of the latest call and the vault that keeps the audit here (an embedded one), if both."""
        with self._lock:
            scope = self._served
        embedded = getattr(self.vault, "embedded_vault", None)
        if scope is None or not callable(embedded):
            return None
        return scope, embedded()

    def _audit_call(
        self,
        scope: Scope,
        tool: str | None,
        outcome: str,
        took: Sequence[str] = (),
        produced: Sequence[str] = (),
    ) -> None:
        """With ``audit_calls``, append the ``tool_call`` entry of one dispatched call in its scope, when the vault
        keeps the audit here (an embedded one): ids, the tool's name and the outcome only
        (:mod:`refvault.toolbox.trail`). An artifact the tool put and then read back is one it produced, not took."""
        if not self.audit_calls or not isinstance(scope, Scope):
            return
        embedded = getattr(self.vault, "embedded_vault", None)
        if callable(embedded):
            record_call(embedded(), scope, tool, outcome, took, produced)

    def _ledger_pass(self, passes: Sequence[tuple[str, str, int]], recipient: str, purpose: str) -> None:
        """Record in the disclosure ledger each model request the default guard let through carrying content
        of an artifact it watches or that refvault showed the model (``guard_pass``: the SHA-256 and size of
        the request part that carried it)."""
        here = self._audit_here()
        if here is None:
            return
        scope, vault = here
        for artifact_id, digest, size in passes:
            seen = (scope, artifact_id, digest, recipient, purpose)
            with self._lock:  # a conversation re-sends its history: each part is recorded once
                if seen in self._ledgered:
                    self._ledgered.move_to_end(seen)
                    continue
                self._ledgered[seen] = None
                while len(self._ledgered) > MAX_PROTECTED_IDS:
                    self._ledgered.popitem(last=False)
            record_pass(vault, scope, artifact_id, digest, size, recipient, purpose)

    def _audit_stop(self, findings: Sequence[Finding], recipient: str, purpose: str) -> None:
        """Audit a request the default guard stopped (``guard_stop``, one entry per artifact it named), in the
        scope of the latest call, when the vault keeps the audit here (an embedded one)."""
        here = self._audit_here()
        if here is None:
            return
        record_stops(here[1], here[0], findings, recipient, purpose)

    def _label_for_guard(self, frame: DispatchFrame, refs: Sequence[str]) -> None:
        """Tell the guard the labels of every artifact a call received by ``Ref`` (for its disclosure policy)."""
        label = getattr(self.guard, "label", None)
        if label is None:
            return
        for ref in refs:
            labels = frame.descriptor(ref).labels
            if labels:
                label(ref, labels)

    def _protect(self, artifact_id: str, data: bytes, whole: bool) -> None:
        """Protect a value a tool read; an artifact protected whole once is skipped after (artifacts are immutable)."""
        guard = self.guard
        if guard is None:
            return
        with self._lock:
            if whole and artifact_id in self._protected:
                self._protected.move_to_end(artifact_id)
                return
        guard.protect(artifact_id, data)
        if whole:
            with self._lock:
                self._protected[artifact_id] = None
                while len(self._protected) > MAX_PROTECTED_IDS:
                    self._protected.popitem(last=False)

    def instructions(self, scope: Scope) -> str:
        """System-instruction text listing the artifacts ``load_artifacts`` can load in ``scope``."""
        from refvault.toolbox.builtin import instructions

        return instructions(self.vault, scope)

    # -- registration ----------------------------------------------------------------

    def tool(
        self,
        function: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        offload_tokens: int | None = DEFAULT,
        deadline: timedelta | None = None,
    ) -> Any:
        """Register ``function`` as a tool (usable bare, ``@box.tool``, or with arguments).

        ``offload_tokens`` overrides the Toolbox's offload threshold for this
        tool (None: never offload its results). A ``RemoteLink`` parameter gets a per-call link that lives
        ``deadline`` at most (default 5 minutes) and is revoked when the call ends (:mod:`refvault.toolbox.remote`).
        """
        checked_deadline(deadline)
        if offload_tokens is not DEFAULT and offload_tokens is not None:
            if not isinstance(offload_tokens, int) or offload_tokens < 1:
                raise InvalidArgument("offload_tokens must be a positive integer or None")
            if not self.read_tools:
                raise InvalidArgument("offloading needs the read tools: create the Toolbox with read_tools=True")

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            tool = build_tool(fn, name=name, description=description)
            threshold = offload_tokens
            if offload_tokens is DEFAULT:  # the threshold of each call's model (DEFAULT until the call)
                threshold = None if self.offload_tokens is None else DEFAULT
            tool = dataclasses.replace(tool, offload_tokens=threshold, deadline=deadline)
            check_links_possible(self.vault, self.link_base_url, tool)
            if tool.name in self._tools:
                raise InvalidArgument(f"a tool named {tool.name!r} is already registered")
            self._tools[tool.name] = tool
            return fn

        return register(function) if function is not None else register

    def schemas(
        self, flavor: Flavor = "openai", *, strict: bool = False, model_context_tokens: int | None = None
    ) -> list[dict[str, Any]]:
        """Tool definitions for a model API: ``openai``, ``anthropic``, ``gemini`` or ``mcp``.

        ``strict=True`` (OpenAI) converts each parameter schema with the ``openai``
        package's own strict-mode conversion. The read tools' defaults are those of
        :meth:`caps_for` ``(model_context_tokens)``.
        """
        tools = self._tools_for(self.caps_for(model_context_tokens)).values()
        return [tool_schema(tool, flavor, strict=strict, ref_pattern=self.ref_pattern) for tool in tools]

    # -- events ----------------------------------------------------------------------

    def add_sink(self, sink: Callable[[ToolEvent], None]) -> None:
        """Call ``sink`` with every :class:`ToolEvent` (ids only)."""
        self._sinks.append(sink)

    def trajectory(self, run_id: str | None) -> list[ToolEvent]:
        """What happened in ``run_id``, in order, by id only.

        Bounded: the ``max_runs`` most recently active runs are kept, each with
        its last ``max_events_per_run`` events.
        """
        with self._lock:
            return list(self._runs.get(run_id, ()))

    def _record(self, event: ToolEvent) -> None:
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "%s %s run=%s call=%s refs=%s artifacts=%s error=%s",
                event.kind,
                event.tool,
                event.run_id,
                event.tool_call_id,
                ",".join(event.refs),
                ",".join(event.artifacts),
                event.error_type,
            )
        with self._lock:
            events = self._runs.get(event.run_id)
            if events is None:
                events = self._runs[event.run_id] = deque(maxlen=self.max_events_per_run)
                while len(self._runs) > self.max_runs:
                    self._runs.popitem(last=False)
            self._runs.move_to_end(event.run_id)
            events.append(event)
        for sink in self._sinks:
            sink(event)

    # -- dispatch --------------------------------------------------------------------

    @execute_tool_async  # an execute_tool span (refvault.toolbox.spans)
    async def call(
        self,
        name: str,
        arguments: str | Mapping[str, Any],
        *,
        scope: Scope,
        run_id: str | None = None,
        tool_call_id: str | None = None,
        model_context_tokens: int | None = None,
    ) -> Observation:
        """Run one tool call and return its observation; a tool's own failure is an error observation.

        ``model_context_tokens``: the caps of this call are :meth:`caps_for` that size (None: the Toolbox's).

        Sync tools, and the vault work around a call (resolving Refs, capturing
        returned bytes), run in a worker thread so the event loop never blocks.
        A tool that raises something other than an ``Exception`` (cancellation,
        ``KeyboardInterrupt``) has it re-raised as a fresh, empty exception of
        the same type: nothing the tool put in it leaves the dispatcher. Traced: :mod:`refvault.toolbox.spans`.
        """
        tool = self._tools.get(name)
        if tool is not None and tool.takes_refs:
            prepared = await asyncio.to_thread(
                self._prepare, name, arguments, scope, run_id, tool_call_id, model_context_tokens
            )
        else:
            prepared = self._prepare(name, arguments, scope, run_id, tool_call_id, model_context_tokens)
        if isinstance(prepared, Observation):
            return prepared
        self._started(prepared)
        leave = enter_frame(prepared.frame)
        try:
            if prepared.tool.is_async:
                outcome = await invoke_async(prepared.tool.function, prepared.kwargs)
            else:
                outcome = await asyncio.to_thread(invoke_sync, prepared.tool.function, prepared.kwargs)
            if outcome.awaitable is not None:  # a sync wrapper handed back a coroutine: run it in the frame
                outcome = await invoke_async(lambda: outcome.awaitable, {})
        except asyncio.CancelledError:  # the caller cancelled while a sync tool ran in its thread
            outcome = Outcome(failure="CancelledError", fatal=asyncio.CancelledError())
        finally:
            leave()
            if prepared.links:  # the call ended: its links die now, whatever happened
                await asyncio.to_thread(revoke_links, self.vault, prepared.scope, prepared.links)
        prepared = tainted(prepared)
        if needs_vault(outcome.value) or may_offload(prepared.tool, outcome) or prepared.labels:
            return await asyncio.to_thread(self._conclude, prepared, outcome)
        return self._conclude(prepared, outcome)

    @execute_tool
    def call_sync(
        self,
        name: str,
        arguments: str | Mapping[str, Any],
        *,
        scope: Scope,
        run_id: str | None = None,
        tool_call_id: str | None = None,
        model_context_tokens: int | None = None,
    ) -> Observation:
        """:meth:`call` for synchronous callers. An async tool runs in a private event loop: in this
        thread, or (when this thread already runs an event loop, as in a notebook) in a worker thread
        that carries this thread's context."""
        prepared = self._prepare(name, arguments, scope, run_id, tool_call_id, model_context_tokens)
        if isinstance(prepared, Observation):
            return prepared
        self._started(prepared)
        leave = enter_frame(prepared.frame)
        try:
            if prepared.tool.is_async:
                outcome = run_private(lambda: invoke_async(prepared.tool.function, prepared.kwargs))
            else:
                outcome = invoke_sync(prepared.tool.function, prepared.kwargs)
            if outcome.awaitable is not None:
                pending = outcome.awaitable
                outcome = run_private(lambda: invoke_async(lambda: pending, {}))
        finally:
            leave()
            if prepared.links:  # the call ended: its links die now, whatever happened
                revoke_links(self.vault, prepared.scope, prepared.links)
        return self._conclude(prepared, outcome)

    def _prepare(
        self,
        name: str,
        arguments: str | Mapping[str, Any],
        scope: Scope,
        run_id: str | None,
        tool_call_id: str | None,
        model_context_tokens: int | None = None,
    ) -> Observation | Prepared:
        caps = self.caps_for(model_context_tokens)
        if self.budget is not None and isinstance(scope, Scope) and scope not in self._budgeted:
            self.vault.set_budget(scope, self.budget)  # once per scope: the run's spend so far is kept
            with self._lock:
                self._budgeted.add(scope)
        tool = self._tools_for(caps).get(name)
        if tool is None:
            shown = name if len(name) <= 64 else name[:64] + "…"
            message = f"unknown tool {shown!r}"
            return self._refused(shown, run_id, tool_call_id, scope, message, "UnknownTool", registered=False)
        try:
            if isinstance(arguments, str):
                validated = tool.arguments.model_validate_json(arguments or "{}")
            else:
                validated = tool.arguments.model_validate(dict(arguments))
        except (ValidationError, TypeError, ValueError) as exc:
            return self._refused(name, run_id, tool_call_id, scope, validation_message(exc), "BadArguments")
        as_tool = tool_recipient(tool.name)
        protect = None if self._guard is None else self._protect
        frame = DispatchFrame(self.vault, scope, run_id, protect, purpose=self.purpose, recipient=as_tool)
        try:
            refs = bind_refs(validated, frame)
        except BadRef as exc:
            return self._refused(name, run_id, tool_call_id, scope, str(exc), "BadRef")
        except MisCopiedId as exc:  # a Ref argument that looks mis-copied: the id meant, if one is close
            return self._refused(name, run_id, tool_call_id, scope, str(exc), "MisCopiedId")
        except PolicyDenied as exc:  # the caller's own artifact, refused for this tool: the rule is named
            return self._refused(name, run_id, tool_call_id, scope, str(exc), "PolicyDenied")
        except ValueError as exc:
            return self._refused(name, run_id, tool_call_id, scope, str(exc), "BadArguments")
        if tool.offload_tokens is DEFAULT:  # registered without its own threshold: this call's model's
            tool = dataclasses.replace(tool, offload_tokens=caps.offload_tokens)
        kwargs = {field_name: getattr(validated, field_name) for field_name in tool.fields}
        try:  # a RemoteLink parameter: a link per artifact for this call (none for other tools)
            links = issue_links(self.vault, self.link_base_url, tool, frame, kwargs, as_tool)
        except RefvaultError as exc:
            return self._refused(name, run_id, tool_call_id, scope, str(exc), type(exc).__name__)
        sealed = any(frame.descriptor(ref).disclosure == "sealed" for ref in refs)
        labels = input_labels(frame, refs)  # labels follow the data (refvault.toolbox.taint)
        reads = None
        if tool.context_parameter is not None:
            reader = model_recipient(self.model) if tool.builtin else as_tool  # read tools: for the model
            vault = self.vault
            if not tool.builtin:  # what the tool reads or puts through its context is tainted too
                reads = ContextReads(vault, purpose=self.purpose, recipient=reader, labels=labels, refs=tuple(refs))
                vault = cast("VaultContract", reads)
            kwargs[tool.context_parameter] = ToolContext(
                scope, run_id, tool_call_id, vault, purpose=self.purpose, recipient=reader, caps=caps
            )
        with self._lock:
            self._served = scope
        if labels:
            self._label_for_guard(frame, refs)
        return Prepared(
            tool, frame, kwargs, tuple(refs), scope, run_id, tool_call_id, sealed, labels, reads, caps=caps, links=links
        )

    def _started(self, prepared: Prepared) -> None:
        tool_known(prepared.tool.name)
        self._record(
            ToolEvent("tool_started", prepared.tool.name, prepared.run_id, prepared.tool_call_id, refs=prepared.refs)
        )

    def _refused(
        self,
        name: str,
        run_id: str | None,
        call: str | None,
        scope: Scope,
        message: str,
        kind: str,
        *,
        registered: bool = True,
    ) -> Observation:
        """A call refused before its tool ran; its audit entry names the tool only if one is ``registered`` under
        ``name`` (else ``name`` is the model's text)."""
        tool_failed(name if registered else None, kind)
        self._record(ToolEvent("tool_failed", name, run_id, call, error_type=kind))
        self._audit_call(scope, name if registered else None, kind)
        return Observation(call, f"error: {message}", is_error=True)

    def _conclude(self, prepared: Prepared, outcome: Outcome) -> Observation:
        """Turn what the tool did into an event and an observation; re-raise a fatal exception last."""
        prepared = tainted(prepared)
        outcome = scrubbed(outcome, prepared.links)  # a link the remote tool echoed shows as its artifact id
        if outcome.failure is None:
            try:
                content, captured, parts = self._render(outcome, prepared)
            except InvalidType:  # the result holds bytes or is a generator: reported as the TypeError it is
                outcome = Outcome(failure=TypeError.__name__)
            except Exception as exc:
                outcome = Outcome(failure=type(exc).__name__)
            else:
                ids = tuple(d.artifact_id for d in captured)
                self._record(
                    ToolEvent(
                        "tool_finished",
                        prepared.tool.name,
                        prepared.run_id,
                        prepared.tool_call_id,
                        refs=prepared.refs,
                        artifacts=ids,
                    )
                )
                observation = Observation(
                    prepared.tool_call_id,
                    content,
                    artifacts=tuple(artifact_summary(d) for d in captured),
                    parts=parts,
                    data_only=prepared.tool.data_only,
                )
                self._exempt_disclosed(prepared, observation, captured)
                self._audit_call(
                    prepared.scope, prepared.tool.name, "ok", took_by(prepared), (*written_by(prepared), *ids)
                )
                return observation
        tool_failed(prepared.tool.name, outcome.failure or "error")
        self._record(
            ToolEvent(
                "tool_failed",
                prepared.tool.name,
                prepared.run_id,
                prepared.tool_call_id,
                refs=prepared.refs,
                error_type=outcome.failure,
            )
        )
        self._audit_call(
            prepared.scope, prepared.tool.name, outcome.failure or "error", took_by(prepared), written_by(prepared)
        )
        if outcome.fatal is not None:
            raise outcome.fatal
        message = outcome.message or (outcome.refvault_message if prepared.tool.builtin else None)
        message = message or f"the tool raised {outcome.failure}"
        return Observation(prepared.tool_call_id, f"error: {message}", is_error=True)

    def _exempt_disclosed(self, prepared: Prepared, observation: Observation, captured: list[Descriptor]) -> None:
        """Tell the guard what this observation shows the model of model-disclosed artifacts, on purpose.

        An offload preview shows the artifact it captured; ``read_artifact`` and ``query_artifact`` show the
        one artifact their ``artifact_id`` names (``load_artifacts`` is told where it renders, in
        :meth:`_render`: each text part it loaded, and the joined text). Nothing else counts: never
        an id the model wrote elsewhere in its arguments, never a sealed artifact (the read tools refuse
        them, and each id is checked again here). When a tool later reads one of them by reference the
        guard protects it; these exact texts, already in the conversation, are then not leaks
        (``exempt_disclosed``). A guard without ``exempt_disclosed`` is simply not told.
        """
        exempt = getattr(self.guard, "exempt_disclosed", None)
        if exempt is None:
            return
        shown: list[tuple[str, set[str]]] = []
        if not prepared.tool.builtin:
            shown.append((observation.content, {d.artifact_id for d in captured if d.disclosure == "model"}))
        elif prepared.tool.name in ("read_artifact", "query_artifact"):
            artifact_id = prepared.kwargs.get("artifact_id")
            if is_artifact_id(artifact_id) and self._model_disclosed(prepared.scope, artifact_id):
                shown.append((observation.content, {artifact_id}))
        for text, owners in shown:
            if owners:
                exempt(text, owners)
                self._watch_labelled(prepared.scope, text, owners, {d.artifact_id: d for d in captured})

    def _watch_labelled(self, scope: Scope, text: str, owners: set[str], known: Mapping[str, Descriptor]) -> None:
        """Have the guard watch ``text`` for every labelled artifact among ``owners`` it shows the model
        (:func:`~refvault.toolbox.taint.watch_labelled`)."""
        watch_labelled(self.guard, self.vault, scope, text, owners, known, model=self.model, purpose=self.purpose)

    def _model_disclosed(self, scope: Scope, artifact_id: str) -> bool:
        try:
            return self.vault.describe(scope, artifact_id).disclosure == "model"
        except RefvaultError:
            return False

    def _render(self, outcome: Outcome, prepared: Prepared) -> tuple[str, list[Descriptor], tuple[Any, ...]]:
        result = outcome.value
        if isinstance(result, bytes | bytearray | memoryview):
            result = Artifact(bytes(result))
        if isinstance(result, Artifact):
            # Output derived from a sealed input stays sealed unless the tool says otherwise.
            disclosure = result.disclosure or ("sealed" if prepared.sealed_inputs else "model")
            labels = prepared.labels | check_labels(result.labels)  # a tool may add labels, never remove one
            descriptor = self.vault.put(
                prepared.scope,
                result.data,
                media_type=result.stored_media_type(),
                filename=result.filename,
                disclosure=disclosure,
                tool_call_id=prepared.tool_call_id,
                run_id=prepared.run_id,
                completeness={"status": "complete", "omissions": []},
                labels=labels,
                derived_from=prepared.refs + prepared.read_ids,
            )
            return json.dumps({"artifact": artifact_summary(descriptor)}), [descriptor], ()
        if isinstance(result, LoadedContent):
            content = ENCODER.encode(result.summary)
            guard = self.guard
            if guard is not None:  # the model asked for these model-disclosed artifacts: what they show is no leak
                for part in result.parts:
                    if part.get("type") == "image":  # not refused for their size
                        guard.exempt_payload(part["data"])
                exempt = getattr(guard, "exempt_disclosed", None)  # see _exempt_disclosed
                if exempt is not None and result.shown:
                    for index, owner in result.shown:
                        exempt(str(result.parts[index]["text"]), {owner})
                        self._watch_labelled(prepared.scope, str(result.parts[index]["text"]), {owner}, {})
                    exempt(joined_text(content, result.parts), {owner for _, owner in result.shown})
            return content, [], result.parts
        text = encoded(outcome)
        withheld = not self._model_may_see(prepared)
        threshold = prepared.tool.offload_tokens
        if not withheld and (threshold is None or 2 * len(text) <= threshold):  # at most 2 tokens per character
            return text, self._kept(text, result, prepared), ()
        from refvault.read.previews import estimate_tokens

        if not withheld and threshold is not None and estimate_tokens(text) <= threshold:
            return text, self._kept(text, result, prepared), ()
        content, captured = offload(
            self.vault,
            prepared.scope,
            text,
            result,
            sealed=prepared.sealed_inputs,
            tool_call_id=prepared.tool_call_id,
            run_id=prepared.run_id,
            preview_chars=prepared.caps.preview_chars,
            source=prepared.tool.name,
            labels=prepared.labels,
            derived_from=prepared.refs + prepared.read_ids,
            withheld=withheld,
        )
        return content, captured, ()

    def _kept(self, text: str, result: Any, prepared: Prepared) -> list[Descriptor]:
        """With ``keep_results``, store a result going inline; a failed store loses nothing the model gets."""
        if not self.keep_results or prepared.tool.builtin:  # a read tool's answer: the same read gives it again
            return []
        try:
            return [
                capture_text(
                    self.vault,
                    prepared.scope,
                    text,
                    result,
                    sealed=prepared.sealed_inputs,
                    tool_call_id=prepared.tool_call_id,
                    run_id=prepared.run_id,
                    labels=prepared.labels,
                    derived_from=prepared.refs + prepared.read_ids,
                )
            ]
        except Exception as exc:
            logger.warning("keeping a result of tool %s failed: %s", prepared.tool.name, type(exc).__name__)
            return []

    def _model_may_see(self, prepared: Prepared) -> bool:
        """Whether this call's text result may go inline: its inputs' labels, against the policy for the model."""
        if not prepared.labels:
            return True
        return model_may_see(
            self.vault,
            prepared.scope,
            prepared.labels,
            model=self.model,
            purpose=self.purpose,
        )
