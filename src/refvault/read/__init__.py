"""Selective reads: text windows, grep, record queries with signed cursors, previews.

Every function takes ``(vault, scope, artifact_id, ...)`` and returns a plain
JSON-ready ``dict`` that says what it covers; the model-facing read tools are
these same functions. ``vault`` is any vault of the contract
(:class:`refvault.contract.VaultContract`): each function checks its arguments
into a request (:mod:`refvault.operations`) and hands it to
``vault.read_selection``, which an embedded vault runs here and a client has
its server run. Invariants, each enforced here and tested in ``tests/``:

* **Scoped and verified.** Reads go through the vault, so scope, expiry and
  integrity are checked on every call; a cursor never authorises anything.
* **Disclosure.** Model-facing reads refuse ``sealed`` artifacts
  (:class:`~refvault.errors.SealedArtifact`).
* **Honest coverage.** Every response carries ``capture_status`` and
  ``omissions`` from the capture, and says whether its own scan was complete;
  absence is claimed only for what was scanned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from refvault.lazy import lazy_exports

_EXPORTS = {
    "window": "refvault.read.windows",
    "grep": "refvault.read.windows",
    "query": "refvault.read.records",
    "capture_records": "refvault.read.records",
    "derive": "refvault.read.records",
    "RecordSet": "refvault.read.records",
    "rotate_cursor_keys": "refvault.read.records",
    "preview": "refvault.read.previews",
    "estimate_tokens": "refvault.read.previews",
    "CursorKey": "refvault.read.cursors",
    "KeyRing": "refvault.read.cursors",
}

__all__ = [
    "CursorKey",
    "KeyRing",
    "RecordSet",
    "capture_records",
    "derive",
    "estimate_tokens",
    "grep",
    "preview",
    "query",
    "rotate_cursor_keys",
    "window",
]

if TYPE_CHECKING:
    from refvault.read.cursors import CursorKey, KeyRing
    from refvault.read.previews import estimate_tokens, preview
    from refvault.read.records import RecordSet, capture_records, derive, query, rotate_cursor_keys
    from refvault.read.windows import grep, window

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
