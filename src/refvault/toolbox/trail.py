"""What the Toolbox writes to the audit chain about a run, and reads back: the ``tool_call`` entries of
``Toolbox(..., audit_calls=True)``, the guard's ``guard_stop`` and ``guard_pass`` entries.

With ``audit_calls`` on, and the vault keeping the audit here (an embedded vault), every call the Toolbox
dispatches appends one entry in the call's scope (tests in ``tests/toolbox/test_call_trail.py``):

* ``action`` :data:`TOOL_CALL`; ``outcome`` ``"ok"``, or the error class name when the tool raised
  (``ValueError``) or the call was refused (``BadRef``, ``BadArguments``, ``PolicyDenied``, ``UnknownTool``, ...:
  the ``error_type`` of its ``tool_failed`` event);
* ``detail`` the tool's name (None for a name no registered tool has: that is model-written text);
* ``selection`` ``"took=<id>,<id> produced=<id>,<id>"`` (:func:`call_selection`): the artifacts the call took
  (its ``Ref`` arguments, what it read through its ``ToolContext``, the ids a built-in read tool was asked for)
  and those it produced (put through its ``ToolContext``, or captured from its result), ids only, in order. An
  empty list is nothing after the ``=``. When the whole would not fit the column
  (:data:`~refvault.vault.audit_trail.SELECTION_CHARS`), each list keeps as many whole ids as fit and ends
  with ``,+N`` (``+N`` alone when none fits): N more;
* ``artifact_id`` the first artifact produced (None if none); ``records`` how many were produced.

Never an argument value, a result or content: ids, a tool name and an error class name only.
:meth:`ToolCall.from_entry` reads such an entry back (what a runs view shows).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from refvault.catalog.audit_log import AuditEntry
from refvault.guard.findings import Finding
from refvault.ids import ARTIFACT_ID_PATTERN, is_artifact_id
from refvault.model import Scope
from refvault.toolbox.invocation import Prepared
from refvault.vault.audit_trail import SELECTION_CHARS
from refvault.vault.core import Vault

__all__ = [
    "GUARD_STOP",
    "TOOL_CALL",
    "ToolCall",
    "call_selection",
    "record_call",
    "record_stops",
    "took_by",
    "written_by",
]

GUARD_STOP = "guard_stop"
"""The ``action`` of the audit entry of a model request the default guard stopped (one per artifact it named)."""

TOOL_CALL = "tool_call"
"""The ``action`` of the audit entry a dispatched tool call appends."""

_ID = re.compile(ARTIFACT_ID_PATTERN)
_MORE = re.compile(r"\+([1-9][0-9]*)")
_PRODUCED = " produced="


def _listed(ids: Sequence[str], kept: int) -> str:
    more = len(ids) - kept
    return ",".join([*ids[:kept], *([f"+{more}"] if more else [])])


def call_selection(took: Iterable[str], produced: Iterable[str], *, limit: int = SELECTION_CHARS) -> str:
    """``"took=<id>,<id> produced=<id>,<id>"``, at most ``limit`` characters (see the module docstring).

    Only artifact ids are listed (anything else is left out). Clipped, the two lists keep whole ids in turn,
    took's first, as long as the whole fits; each clipped list ends with ``,+N``.
    """
    took_ids = [value for value in took if is_artifact_id(value)]
    produced_ids = [value for value in produced if is_artifact_id(value)]

    def render(kept_took: int, kept_produced: int) -> str:
        return f"took={_listed(took_ids, kept_took)}{_PRODUCED}{_listed(produced_ids, kept_produced)}"

    whole = render(len(took_ids), len(produced_ids))
    if len(whole) <= limit:
        return whole
    kept_took = kept_produced = 0
    growing_took, growing_produced = bool(took_ids), bool(produced_ids)
    while growing_took or growing_produced:
        if growing_took:
            if kept_took < len(took_ids) and len(render(kept_took + 1, kept_produced)) <= limit:
                kept_took += 1
            else:
                growing_took = False
        if growing_produced:
            if kept_produced < len(produced_ids) and len(render(kept_took, kept_produced + 1)) <= limit:
                kept_produced += 1
            else:
                growing_produced = False
    return render(kept_took, kept_produced)


def _parsed(listed: str) -> tuple[tuple[str, ...], int]:
    """The ids of one list of a selection and how many more it left out (anything else in it is ignored)."""
    ids: list[str] = []
    more = 0
    for item in listed.split(",") if listed else ():
        counted = _MORE.fullmatch(item)
        if counted is not None:
            more = int(counted.group(1))
        elif _ID.fullmatch(item) is not None:
            ids.append(item)
    return tuple(ids), more


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One dispatched tool call, read back from its ``tool_call`` audit entry (:meth:`from_entry`).

    ``seq`` and ``at`` are the entry's; ``tool`` the tool's name (None: the call named no registered tool);
    ``outcome`` ``"ok"`` or an error class name; ``took``/``produced`` the artifact ids listed, in order;
    ``more_took``/``more_produced`` how many more ids the entry left out to fit its column (0: none).
    """

    seq: int
    at: datetime
    tool: str | None
    outcome: str
    took: tuple[str, ...]
    produced: tuple[str, ...]
    more_took: int = 0
    more_produced: int = 0

    @classmethod
    def from_entry(cls, entry: AuditEntry) -> ToolCall | None:
        """The call an audit entry records; None for an entry of any other action."""
        if entry.action != TOOL_CALL:
            return None
        selection = entry.selection or ""
        took_part, produced_part = "", ""
        if selection.startswith("took="):
            took_part, _, produced_part = selection[len("took=") :].partition(_PRODUCED)
        took, more_took = _parsed(took_part)
        produced, more_produced = _parsed(produced_part)
        return cls(entry.seq, entry.at, entry.detail, entry.outcome, took, produced, more_took, more_produced)


def record_call(
    vault: Vault, scope: Scope, tool: str | None, outcome: str, took: Sequence[str], produced: Sequence[str]
) -> None:
    """Append the ``tool_call`` entry of one dispatched call in its scope: ids, the tool's name and the outcome
    only. An artifact the tool put and then read back is one it produced, not took."""
    made = tuple(dict.fromkeys(produced))
    vault.audit_event(
        TOOL_CALL,
        scope,
        made[0] if made else None,
        outcome=outcome,
        detail=tool,
        selection=call_selection([i for i in dict.fromkeys(took) if i not in made], made),
        records=len(made),
    )


def record_pass(
    vault: Vault, scope: Scope, artifact_id: str, digest: str, size: int, recipient: str, purpose: str
) -> None:
    """Record in the disclosure ledger a part of a model request the default guard let through carrying content
    of an artifact (``guard_pass``: the SHA-256 and size of that part)."""
    vault.audit_event(
        "guard_pass",
        scope,
        artifact_id,
        outcome="ok",
        recipient=recipient,
        purpose=purpose,
        excerpt_hash=digest,
        bytes=size,
        selection="a part of a model request",
    )


def record_stops(vault: Vault, scope: Scope, findings: Sequence[Finding], recipient: str, purpose: str) -> None:
    """Append one ``guard_stop`` entry per artifact a stopped request carried (the size arm names none): the
    rule, the arm and the bytes matched, never the site (a request's keys are its sender's text)."""
    named: dict[str | None, Finding] = {}
    for finding in findings:
        named.setdefault(finding.artifact_id, finding)
    for finding in named.values():
        vault.audit_event(
            GUARD_STOP,
            scope,
            finding.artifact_id,
            outcome="ContextLeak",
            recipient=recipient,
            purpose=purpose,
            rule_id=finding.rule_id,
            bytes=finding.matched,
            detail=finding.arm,
        )


def took_by(prepared: Prepared) -> tuple[str, ...]:
    """The artifacts a call took: its ``Ref`` arguments, what it read through its ToolContext, and (a built-in
    read tool) the well-formed ids it was asked to read."""
    asked: list[str] = []
    if prepared.tool.builtin:
        for value in (prepared.kwargs.get("artifact_id"), *(prepared.kwargs.get("artifact_ids") or ())):
            if is_artifact_id(value):
                asked.append(value)
    return tuple(dict.fromkeys((*prepared.refs, *prepared.read_ids, *asked)))


def written_by(prepared: Prepared) -> tuple[str, ...]:
    """The artifacts a tool put through its ToolContext, in order."""
    return () if prepared.reads is None else tuple(prepared.reads.written)
