"""A session's tool calls in its audit chain: the ``tool_call`` entries of ``Toolbox(..., audit_calls=True)``.

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
from refvault.ids import ARTIFACT_ID_PATTERN, is_artifact_id
from refvault.vault.audit_trail import SELECTION_CHARS

__all__ = ["TOOL_CALL", "ToolCall", "call_selection"]

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
