"""The context working set: clear old tool results losslessly before each model request.

:class:`WorkingSet` rewrites an OpenAI Chat-style message list so the request fits a token budget
(``budget_fraction`` of ``model_context_tokens``) by replacing old tool results the vault holds with
compact stubs (:mod:`refvault.context.stubs`). Invariants (tested in ``tests/context/``):

* **Nothing is lost.** Only a tool result the vault can give back is cleared (captured under its
  ``tool_call_id`` in the scope, or a refvault observation of artifacts the caller can describe);
  its stub names the ids and the call that restores it.
* **Seen first.** A tool result is never cleared before the model has had a chance to see it: it
  must be followed by an assistant message (the turn after it arrived).
* **Shape kept.** The output has the input's messages in the same order; only the ``content`` of
  some ``role == "tool"`` messages changes (:meth:`WorkingSet.replacements` returns exactly those
  changes). The input is never mutated.
* **Within budget** whenever the messages that cannot be cleared (non-tool messages, unseen and
  unstored results) and brief stubs fit: results are cleared oldest first, then the ``keep_recent``
  most recent ones, then pinned ones, until the request fits; if even that is over, the oldest
  stubs shrink to their ids and restoring call (a few dozen tokens each). A request still over is
  reported (``stats.over_budget``), never truncated.
* **Thrash guard.** A result the model brought back (the answer to a ``load_artifacts`` /
  ``read_artifact`` / ``query_artifact`` call naming an id cleared in an earlier request) is pinned
  for ``pin_turns`` assistant turns; an id brought back ``thrash_reloads`` times within
  ``thrash_turns`` turns is reported once (a ``ToolEvent`` of kind ``"context_thrash"`` and
  ``stats.thrash``) and every answer bringing it back is pinned for the rest of the run (the
  original result stays cleared: the answer holds what it held). Pins yield only to the budget.
* **Deterministic.** The same sequence of requests gives the same outputs; stubs carry no
  timestamps, and no byte of any artifact (so none of a sealed or policy-denied one).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from refvault.context.stubs import RECOVERING, Subject, message_text, named_ids, stub, subject_of
from refvault.errors import InvalidArgument, RefvaultError
from refvault.limits import DEFAULT_CAPS
from refvault.model import Descriptor, Scope
from refvault.policy import check_purpose
from refvault.read.previews.tokens import estimate_tokens
from refvault.toolbox.taint import model_recipient
from refvault.toolbox.toolbox import Toolbox
from refvault.toolbox.values import ToolEvent

__all__ = ["WorkingSet", "WorkingSetStats"]

MESSAGE_OVERHEAD = 4  # tokens a chat message costs beyond its text (role, separators)
IMAGE_TOKENS = 1_000  # what an image part is counted as
MAX_CONTEXT_TOKENS = 100_000_000
COUNTED = 65_536  # texts (and subjects, stubs) remembered: counted once each in a long run


@dataclass(frozen=True, slots=True)
class WorkingSetStats:
    """What the working set did: the latest request, and the run so far.

    ``tokens_before``/``tokens_after``: the latest request's estimated tokens as given and as sent;
    ``cleared``: results stubbed in it; ``over_budget``: it is still over ``budget`` (everything
    clearable was cleared). Run totals: ``requests``, ``peak_tokens_after``, ``total_tokens_after``,
    ``restored`` (calls that brought back a cleared id), ``thrash`` (ids reported as thrashing),
    ``pinned`` (ids pinned at the latest request).
    """

    budget: int
    tokens_before: int = 0
    tokens_after: int = 0
    cleared: int = 0
    over_budget: bool = False
    requests: int = 0
    peak_tokens_after: int = 0
    total_tokens_after: int = 0
    restored: int = 0
    thrash: tuple[str, ...] = ()
    pinned: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget": self.budget,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "cleared": self.cleared,
            "over_budget": self.over_budget,
            "requests": self.requests,
            "peak_tokens_after": self.peak_tokens_after,
            "total_tokens_after": self.total_tokens_after,
            "restored": self.restored,
            "thrash": list(self.thrash),
            "pinned": list(self.pinned),
        }


@dataclass(slots=True)
class _Call:
    """An assistant's tool call: which turn made it, the tool, its arguments."""

    turn: int
    tool: str | None
    arguments: Any


@dataclass(slots=True)
class _Run:
    """What the working set remembers between requests (all of it derived from what it was given)."""

    cleared: set[str] = field(default_factory=set)  # ids stubbed in some earlier request
    handled: set[str] = field(default_factory=set)  # tool_call_ids already examined as possible reloads
    reloads: dict[str, list[int]] = field(default_factory=dict)  # id -> turns that brought it back
    reload_calls: dict[str, tuple[str, int]] = field(default_factory=dict)  # call -> (id, turn) it brought back
    thrash: dict[str, None] = field(default_factory=dict)  # ids reported, in order
    restored: int = 0
    requests: int = 0
    peak: int = 0
    total: int = 0


class WorkingSet:
    """Keep a run's model requests within budget by clearing old tool results the vault holds.

    ``model_context_tokens`` is the model's context window; the budget is ``budget_fraction`` of it.
    ``keep_recent`` results (the newest tool messages) are cleared only if nothing older is left.
    ``model`` and ``purpose`` are those the Toolbox reads with (whose policy decides what a stub may
    describe). ``count_tokens`` replaces the built-in estimate (:func:`refvault.read.estimate_tokens`).
    ``on_event`` receives each :class:`~refvault.ToolEvent` the thrash guard emits (``events`` keeps
    them too). ``toolbox`` and ``run_id``: the Toolbox and run whose calls the messages record; the
    working set then learns what each call captured from the run's trajectory instead of listing the
    scope. Use one WorkingSet per run; it is safe to call from several threads.

    What it learns is remembered for the run (which artifacts each call captured, what each id is):
    an artifact deleted during the run may still be named by a later stub.
    """

    def __init__(
        self,
        vault: Any,
        scope: Scope,
        *,
        model_context_tokens: int,
        budget_fraction: float = 0.5,
        keep_recent: int = 4,
        pin_turns: int = 3,
        thrash_reloads: int = 3,
        thrash_turns: int = 10,
        model: str | None = None,
        purpose: str = "default",
        count_tokens: Callable[[str], int] | None = None,
        on_event: Callable[[ToolEvent], None] | None = None,
        toolbox: Toolbox | None = None,
        run_id: str | None = None,
    ) -> None:
        if not isinstance(scope, Scope):
            raise InvalidArgument("scope must be a refvault.Scope")
        if not _count(model_context_tokens) or not 256 <= model_context_tokens <= MAX_CONTEXT_TOKENS:
            raise InvalidArgument(f"model_context_tokens must be an integer between 256 and {MAX_CONTEXT_TOKENS:,}")
        if not isinstance(budget_fraction, int | float) or isinstance(budget_fraction, bool):
            raise InvalidArgument("budget_fraction must be a number above 0 and at most 1")
        if not 0 < budget_fraction <= 1:
            raise InvalidArgument("budget_fraction must be a number above 0 and at most 1")
        for name, value, low in (
            ("keep_recent", keep_recent, 0),
            ("pin_turns", pin_turns, 0),
            ("thrash_reloads", thrash_reloads, 2),
            ("thrash_turns", thrash_turns, 1),
        ):
            if not _count(value) or not low <= value <= 10_000:
                raise InvalidArgument(f"{name} must be an integer between {low} and 10,000")
        check_purpose(purpose)
        if toolbox is not None:
            if not isinstance(toolbox, Toolbox):
                raise InvalidArgument("toolbox must be the refvault.Toolbox whose calls the messages record")
            if run_id is None:
                raise InvalidArgument("with a toolbox, give the run_id its calls were made with")
            if not toolbox.read_tools:
                raise InvalidArgument("the toolbox has no read tools: the model could not bring a cleared result back")
            if model is not None and model != toolbox.model:
                raise InvalidArgument("model differs from the toolbox's: leave it out to use the toolbox's")
            if purpose != "default" and purpose != toolbox.purpose:
                raise InvalidArgument("purpose differs from the toolbox's: leave it out to use the toolbox's")
            model, purpose = toolbox.model, toolbox.purpose
        self.vault = vault
        self.scope = scope
        self.model_context_tokens = model_context_tokens
        self.budget = max(1, int(model_context_tokens * budget_fraction))
        self.keep_recent = keep_recent
        self.pin_turns = pin_turns
        self.thrash_reloads = thrash_reloads
        self.thrash_turns = thrash_turns
        self.purpose = purpose
        self.recipient = model_recipient(model)
        self.run_id = run_id
        self.toolbox = toolbox
        # The most one read_artifact gives back to this model (without the Toolbox: its default ceiling).
        self._window = (toolbox.caps if toolbox is not None else DEFAULT_CAPS).max_window_chars
        self._count = count_tokens or estimate_tokens
        self._on_event = on_event
        self._lock = threading.Lock()
        self._run = _Run()
        self._events: list[ToolEvent] = []
        self._stats = WorkingSetStats(budget=self.budget)
        self._captured: dict[str, tuple[str, ...]] = {}  # tool_call_id -> ids of the artifacts captured under it
        self._described: dict[str, Descriptor | None] = {}  # id -> its descriptor for the model (None: refused)
        self._subjects: dict[tuple[str, str, str | None, str], Subject | None] = {}
        self._stubs: dict[
            tuple[str, tuple[str, ...], str, str | None, int, bool], str
        ] = {}  # stub texts made (the same each time)
        self._counted: dict[str, int] = {}  # text -> its tokens (the newest COUNTED texts)

    @property
    def stats(self) -> WorkingSetStats:
        """What the latest request and the run so far came to (:class:`WorkingSetStats`)."""
        return self._stats

    @property
    def events(self) -> list[ToolEvent]:
        """The thrash events reported so far, in order."""
        with self._lock:
            return list(self._events)

    def tokens(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """The estimated tokens of ``messages`` as a request, counted as the working set counts them."""
        with self._lock:
            return sum(self._tokens(m) for m in messages)

    def apply(self, messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """``messages`` as the model should receive them: the same list, old stored results as stubs."""
        changes = self.replacements(messages)
        out = []
        for message in messages:
            copy = dict(message)
            call = message.get("tool_call_id")
            if message.get("role") == "tool" and isinstance(call, str) and call in changes:
                copy["content"] = changes[call]
            out.append(copy)
        return out

    def replacements(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        """The tool results to clear for this request: ``{tool_call_id: stub}`` (see the module's invariants)."""
        given: object = messages
        if not isinstance(given, list | tuple) or not all(isinstance(m, Mapping) for m in given):
            raise InvalidArgument("messages must be a list of chat messages (dicts with a role)")
        with self._lock:
            emitted = len(self._events)
            changes = self._plan(messages)
            fresh = self._events[emitted:]
        if self._on_event is not None:
            for event in fresh:  # outside the lock: a callback may use this working set
                self._on_event(event)
        return changes

    # -- the plan --------------------------------------------------------------------------------

    def _plan(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        calls, turns = _calls(messages)
        self._note_reloads(calls, turns)
        costs = [self._tokens(m) for m in messages]
        before = sum(costs)
        total = before
        pinned = self._pinned(turns)
        changes: dict[str, str] = {}
        cleared: list[tuple[int, Subject]] = []
        listed = False
        for index in self._candidates(messages, pinned):
            if total <= self.budget:
                break
            message = messages[index]
            call_id = str(message["tool_call_id"])
            if call_id not in self._captured and not listed:
                self._learn_captured(messages)  # once per request at most
                listed = True
            call = calls.get(call_id)
            subject = self._subject(call_id, call, message)
            if subject is None:
                continue
            tool = call.tool if call else None
            for brief in (False, True):  # a full stub if it saves anything, else a brief one
                text = self._stub(subject, tool, costs[index], brief)
                cost = self._tokens({"content": text})
                if cost < costs[index]:
                    total += cost - costs[index]
                    changes[call_id] = text
                    cleared.append((index, subject))
                    self._run.cleared.update(subject.ids)
                    break
        for index, subject in cleared:  # still over: the oldest stubs shrink to their ids and restoring call
            if total <= self.budget:
                break
            call_id = str(messages[index]["tool_call_id"])
            call = calls.get(call_id)
            short = self._stub(subject, call.tool if call else None, costs[index], True)
            saved = self._tokens({"content": changes[call_id]}) - self._tokens({"content": short})
            if saved > 0:
                total -= saved
                changes[call_id] = short
        run = self._run
        run.requests += 1
        run.peak = max(run.peak, total)
        run.total += total
        self._stats = WorkingSetStats(
            budget=self.budget,
            tokens_before=before,
            tokens_after=total,
            cleared=len(changes),
            over_budget=total > self.budget,
            requests=run.requests,
            peak_tokens_after=run.peak,
            total_tokens_after=run.total,
            restored=run.restored,
            thrash=tuple(run.thrash),
            pinned=tuple(sorted(set(pinned.values()))),
        )
        return changes

    def _candidates(self, messages: Sequence[Mapping[str, Any]], pinned: Mapping[str, str]) -> list[int]:
        """Tool results that may be cleared, in the order they are: old, then recent, then pinned (oldest first).

        Not a candidate: a result the model has not seen yet, one without a ``tool_call_id``, or one whose
        ``tool_call_id`` is given twice (its stub would replace both).
        """
        last_assistant = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
        tools = [i for i, m in enumerate(messages) if m.get("role") == "tool"]
        named = Counter(m.get("tool_call_id") for m in messages if m.get("role") == "tool")
        twice = {c for c, n in named.items() if n > 1}
        recent = set(tools[-self.keep_recent :]) if self.keep_recent else set()
        tiers: tuple[list[int], list[int], list[int]] = ([], [], [])
        for index in tools:
            call_id = messages[index].get("tool_call_id")
            if index > last_assistant or not isinstance(call_id, str) or call_id in twice:
                continue
            tiers[2 if call_id in pinned else 1 if index in recent else 0].append(index)
        return [index for tier in tiers for index in tier]

    def _subject(self, call_id: str, call: _Call | None, message: Mapping[str, Any]) -> Subject | None:
        """What the message stands for (remembered per call and content: a later request asks again)."""
        tool = call.tool if call else None
        arguments = _text(call.arguments) if call else ""
        key = (call_id, message_text(message.get("content")), tool, arguments)
        if key not in self._subjects:
            captured = [d for d in map(self._describe, self._captured.get(call_id, ())) if d is not None]
            self._subjects[key] = subject_of(
                message,
                call_id=call_id,
                tool=tool,
                arguments=call.arguments if call else None,
                captured=captured,  # trusted only as far as subject_of checks them (hash, or the id named)
                describe=self._describe,
                max_chars=self._window,
            )
            if len(self._subjects) > COUNTED:
                del self._subjects[next(iter(self._subjects))]
        return self._subjects[key]

    def _stub(self, subject: Subject, tool: str | None, tokens: int, brief: bool) -> str:
        key = (subject.kind, subject.ids, _text(subject.restore), tool, tokens, brief)
        text = self._stubs.get(key)
        if text is None:
            text = self._stubs[key] = stub(subject, tool=tool, tokens=tokens, brief=brief)
            if len(self._stubs) > COUNTED:
                del self._stubs[next(iter(self._stubs))]
        return text

    def _describe(self, artifact_id: str) -> Descriptor | None:
        """The artifact as the model may see it, or None (remembered for the run)."""
        if artifact_id not in self._described:
            try:
                found: Descriptor | None = self.vault.describe(
                    self.scope, artifact_id, purpose=self.purpose, recipient=self.recipient
                )
            except RefvaultError:
                found = None
            self._described[artifact_id] = found
        return self._described[artifact_id]

    def _learn_captured(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Which artifacts the scope holds under each tool_call_id: from the Toolbox's trajectory of ``run_id``
        when given, else one listing of the scope (whose descriptors are then remembered too)."""
        if self.toolbox is not None:
            for event in self.toolbox.trajectory(self.run_id):
                if event.kind == "tool_finished" and event.tool_call_id is not None and event.artifacts:
                    self._captured[event.tool_call_id] = tuple(event.artifacts)
            self._none_for(messages)
            return
        found: dict[str, list[str]] = {}
        for descriptor in self.vault.list(self.scope, purpose=self.purpose, recipient=self.recipient):
            self._described[descriptor.artifact_id] = descriptor
            if descriptor.tool_call_id is not None:
                found.setdefault(descriptor.tool_call_id, []).append(descriptor.artifact_id)
        for call_id, ids in found.items():
            self._captured[call_id] = tuple(reversed(ids))  # oldest first: the order they were captured
        self._none_for(messages)

    def _none_for(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """The calls in ``messages`` that captured nothing: known now, so they are not looked up again."""
        for message in messages:
            call_id = message.get("tool_call_id")
            if message.get("role") == "tool" and isinstance(call_id, str):
                self._captured.setdefault(call_id, ())

    def _note_reloads(self, calls: Mapping[str, _Call], turns: int) -> None:
        """Count the new assistant calls that bring back a cleared id; report and pin thrashing ones."""
        run = self._run
        for call_id, call in calls.items():
            if call_id in run.handled:
                continue
            run.handled.add(call_id)
            if call.tool not in RECOVERING:
                continue
            for artifact_id in named_ids(call.arguments):
                if artifact_id not in run.cleared:
                    continue
                run.restored += 1
                run.reload_calls.setdefault(call_id, (artifact_id, call.turn))
                history = run.reloads.setdefault(artifact_id, [])
                history.append(call.turn)
                window = [t for t in history if t > call.turn - self.thrash_turns]
                if len(window) >= self.thrash_reloads and artifact_id not in run.thrash:
                    run.thrash[artifact_id] = None
                    self._emit(call_id, call.tool, artifact_id)

    def _pinned(self, turns: int) -> dict[str, str]:
        """The calls that brought a result back and are pinned now (``{tool_call_id: artifact id}``): those
        within ``pin_turns`` turns, and every one of a thrashing id."""
        return {
            call_id: artifact_id
            for call_id, (artifact_id, turn) in self._run.reload_calls.items()
            if artifact_id in self._run.thrash or turns - 1 - turn < self.pin_turns
        }

    def _emit(self, call_id: str, tool: str | None, artifact_id: str) -> None:
        event = ToolEvent("context_thrash", tool or "unknown", self.run_id, call_id, artifacts=(artifact_id,))
        self._events.append(event)

    def _tokens(self, message: Mapping[str, Any]) -> int:
        content = message.get("content")
        cost = MESSAGE_OVERHEAD + self._counted_text(content if isinstance(content, str) else message_text(content))
        if isinstance(content, Sequence) and not isinstance(content, str):
            cost += IMAGE_TOKENS * sum(1 for p in content if isinstance(p, Mapping) and p.get("type") != "text")
        for call in message.get("tool_calls") or ():
            if isinstance(call, Mapping):
                function = call.get("function")
                if isinstance(function, Mapping):
                    cost += self._counted_text(str(function.get("name") or ""))
                    cost += self._counted_text(_text(function.get("arguments")))
        return cost

    def _counted_text(self, text: str) -> int:
        """``count_tokens(text)``, remembered for the newest COUNTED texts (a str caches its own hash)."""
        cached = self._counted.get(text)
        if cached is None:
            cached = self._counted[text] = self._count(text)
            if len(self._counted) > COUNTED:
                del self._counted[next(iter(self._counted))]
        return cached


def _calls(messages: Sequence[Mapping[str, Any]]) -> tuple[dict[str, _Call], int]:
    """Every assistant tool call by id (the turn is its assistant message's ordinal), and the number of turns."""
    calls: dict[str, _Call] = {}
    turn = 0
    for message in messages:
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or ():
            if not isinstance(call, Mapping) or not isinstance(call.get("id"), str):
                continue
            function = call.get("function")
            name = function.get("name") if isinstance(function, Mapping) else None
            arguments = function.get("arguments") if isinstance(function, Mapping) else None
            calls.setdefault(call["id"], _Call(turn, name if isinstance(name, str) else None, arguments))
        turn += 1
    return calls, turn


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
