"""The run every framework's working-set test drives: three pages fetched, the oldest cleared, then reloaded.

The Toolbox keeps every result (``keep_results=True``), so each page is an artifact captured under the tool
call id the framework gave; the working set's budget (``BUDGET`` tokens) holds two pages, not three. So:

* requests 0-2: the model fetches pages 1, 2 and 3 (one call a turn); nothing is over budget yet;
* request 3: all three pages are in the history, over budget: page 1 (the oldest, not among the
  ``keep_recent=2`` newest) reaches the model as the stub naming its artifact; pages 2 and 3 are intact;
  the model calls ``load_artifacts`` on the id the stub names;
* request 4: the reload's result holds page 1 in full; the model answers.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from refvault import Scope, Toolbox, Vault, WorkingSet

MODEL_CONTEXT_TOKENS = 3_600  # budget_fraction 0.5: 1,800 tokens, two pages and change
PAGES = (1, 2, 3)
RELOAD_TURN = 3  # the request in which page 1 is a stub and the model reloads it


def page(n: int) -> str:
    """Page ``n``: about 700 tokens of text found nowhere else."""
    return f"page {n}: " + " ".join(f"entry{n}-{i:03d}" for i in range(140))


def pages_box(vault: Vault) -> Toolbox:
    """A Toolbox whose ``fetch`` returns a page; every result is stored under its tool call id."""
    box = Toolbox(vault, keep_results=True)

    @box.tool
    def fetch(n: int) -> str:
        """Fetch page n of the incident log."""
        return page(n)

    return box


class RecordingWorkingSet(WorkingSet):
    """The real WorkingSet, keeping a copy of every history a hook rendered for it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[list[dict[str, Any]]] = []

    def replacements(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        self.seen.append(copy.deepcopy([dict(m) for m in messages]))
        return super().replacements(messages)


def working_set(vault: Vault, scope: Scope) -> RecordingWorkingSet:
    return RecordingWorkingSet(vault, scope, model_context_tokens=MODEL_CONTEXT_TOKENS, keep_recent=2)


def rendered(system: str | None, prompt: str, calls: int) -> list[dict[str, Any]]:
    """The chat messages a hook renders for the history after ``calls`` fetches (arguments parsed: see
    :func:`parsed`): the system message, the prompt, then per page the assistant's call and the page."""
    chat: list[dict[str, Any]] = [{"role": "system", "content": system}] if system is not None else []
    chat.append({"role": "user", "content": prompt})
    for turn in range(calls):
        function = {"name": "fetch", "arguments": {"n": PAGES[turn]}}
        call = {"id": f"call_{turn}", "type": "function", "function": function}
        chat.append({"role": "assistant", "content": None, "tool_calls": [call]})
        chat.append({"role": "tool", "tool_call_id": f"call_{turn}", "content": page(PAGES[turn])})
    return chat


def parsed(chat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``chat`` with each tool call's JSON arguments parsed (frameworks space their JSON differently)."""
    out = copy.deepcopy(chat)
    for message in out:
        for call in message.get("tool_calls") or ():
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return out


def cleared(content: Any) -> dict[str, Any] | None:
    """The body of a working-set stub, or None if ``content`` is not one."""
    if not isinstance(content, str) or not content.startswith('{"cleared"'):
        return None
    body: dict[str, Any] = json.loads(content)["cleared"]
    return body


def stored_id(vault: Vault, scope: Scope, tool_call_id: str) -> str:
    """The one artifact the Toolbox captured under ``tool_call_id``."""
    found = [d.artifact_id for d in vault.list(scope) if d.tool_call_id == tool_call_id]
    assert len(found) == 1, found
    return found[0]


def assert_stub_of(stub: Any, vault: Vault, scope: Scope, tool_call_id: str) -> str:
    """``stub`` is the working set's stub for the result of ``tool_call_id``: it names the artifact captured under
    it and how to load it back, and holds none of its text. Returns the artifact id."""
    body = cleared(stub)
    assert body is not None, f"not a stub: {str(stub)[:80]!r}"
    artifact_id = stored_id(vault, scope, tool_call_id)
    named = [a["artifact_id"] for a in body["artifacts"]] if "artifacts" in body else body["ids"]  # full or brief
    assert named == [artifact_id]
    assert body["restore"]["tool"] == "read_artifact"  # a kept result comes back whole in one window
    assert body["restore"]["arguments"] == {"artifact_id": artifact_id, "max_chars": len(page(1))}
    assert body.get("tool", "fetch") == "fetch"
    assert "entry1-" not in str(stub)
    return artifact_id


def reloaded_page_one(text: str) -> bool:
    """Whether a load_artifacts result holds all of page 1."""
    return page(1) in text
