"""``refvault demo``: an incident investigated end to end by a scripted model over the real runtime.

::

    refvault demo                 # a fresh temporary store, removed afterwards
    refvault demo --store PATH    # a store of your choice, kept
    refvault demo --json          # the same run as one JSON document

Six steps (:mod:`refvault.demo.scenario`): capture an incident snapshot, conclude a bounded absence, keep a
pinned read apart from a re-capture under the same filename, take an MCP screenshot through the gateway,
summarise a sealed runbook by reference while the guard stops a leak, and defer a restart the evidence gate
refuses. The model's decisions are scripted (:mod:`refvault.scripted`, also run by ``refvault eval``);
everything else is the real Toolbox, vault, reads, materialiser, MCP gateway, guard and evidence gate.

Invariants (tested in ``tests/demo/test_demo.py``):

* every step ends with an explicit check; :func:`run_demo` returns 0 only if all six hold, else 1;
* a check that should fail does: with the guard's check disabled, step 5 fails and the run exits 1;
* the output (transcript, evidence report, ``--json``) carries ids, digests, counts, coverage and the model's
  bounded view: never the runbook's content, nor the screenshot's bytes;
* without ``--store`` the run leaves nothing behind; a kept store can be run again and passes again;
* without the ``mcp`` extra step 4 fails with a message naming ``pip install 'refvault[mcp]'`` (no traceback),
  and the other steps still run and pass.
* step 4's MCP server is part of the package (:mod:`refvault.demo.incident_mcp_server`, run with this
  Python as ``-m``), so the demo runs from a plain ``pip install 'refvault[mcp]'``, from any directory.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from refvault.scripted import (
    Attached,
    CallRecord,
    Decision,
    Dispatched,
    Reply,
    ScriptedRun,
    Seen,
    ToolCall,
    Turn,
    answer,
    call,
    calls,
    mcp_tools,
    requests_containing,
)

if TYPE_CHECKING:
    from refvault.vault import Vault

__all__ = [
    "Attached",
    "CallRecord",
    "Decision",
    "Dispatched",
    "Reply",
    "ScriptedRun",
    "Seen",
    "ToolCall",
    "Turn",
    "answer",
    "call",
    "calls",
    "mcp_tools",
    "requests_containing",
    "run_demo",
]


@contextmanager
def _store(location: str | None) -> Iterator[tuple[Path, bool]]:
    if location is not None:
        yield Path(location), True
        return
    with tempfile.TemporaryDirectory(prefix="refvault-demo-") as tmp:
        yield Path(tmp) / "store", False


def run_demo(store: str | None, as_json: bool, *, open_vault: Callable[[Path], Vault] | None = None) -> int:
    """Run the investigation; print the transcript and evidence report (or JSON); 0 if every check held, else 1.

    ``store`` is kept; without it the run uses a temporary store, removed afterwards. ``open_vault`` opens
    the store (the CLI passes one whose errors name the store).
    """
    from refvault.demo.report import demo_json, print_report
    from refvault.demo.scenario import investigate
    from refvault.vault import Vault

    opener = open_vault or Vault.open
    with _store(store) as (location, kept), opener(location) as vault:
        found = asyncio.run(investigate(vault))
    shown_store = str(location) if kept else None
    if as_json:
        print(json.dumps(demo_json(found, shown_store), indent=2, ensure_ascii=False))
    else:
        print_report(found, shown_store)
    return 0 if found.ok else 1
