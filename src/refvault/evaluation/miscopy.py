"""The mis-copy run: ids a model copied wrong must be told apart from unknown ones, and the id meant suggested.

Run once per eval (not per trial), in a session of its own: :data:`ARTIFACTS` artifacts are
captured, then :data:`CORRUPTED` ids are drawn from them and each corrupted by one or two
random edits (a character changed, dropped, doubled, or two neighbours swapped; anywhere in
the id, its ``art_`` too). Each is resolved through the door every read uses
(``Vault.describe``). Counted: the share refused as :class:`~refvault.errors.MisCopiedId`
(*detected*), the share whose suggestion is exactly the original (*suggested*), and any
suggestion naming another id (*wrong*). Controls: :data:`CONTROLS` fresh unknown ids (new
and legacy length) must stay plain :class:`~refvault.errors.NotFound`, never called mis-copied.

The edits are seeded, the ids are not (the vault mints them), so the figures are reported,
never asserted exactly: one or two changed characters are detected with certainty, a drop and a
doubling that cancel out are missed with probability 1/1024 each.
"""

from __future__ import annotations

import base64
import random
import secrets
import time
from typing import Any

from refvault.errors import InvalidId, MisCopiedId, NotFound
from refvault.ids import new_artifact_id
from refvault.model import Scope
from refvault.vault import Vault
from refvault.vault.miscopy import SUGGESTION_WINDOW

__all__ = ["ARTIFACTS", "CONTROLS", "CORRUPTED", "EDITS", "corrupt", "run"]

ARTIFACTS = 100
CORRUPTED = 1000
CONTROLS = 1000  # half new-length, half legacy-length
EDITS = ("change", "drop", "double", "swap")
_ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"


def corrupt(artifact_id: str, edits: int, rng: random.Random) -> str:
    """``artifact_id`` with ``edits`` random edits (each one of :data:`EDITS`), different from it."""
    while True:
        value = artifact_id
        for _ in range(edits):
            value = _edit(value, rng.choice(EDITS), rng)
        if value != artifact_id:
            return value


def _edit(value: str, edit: str, rng: random.Random) -> str:
    i = rng.randrange(len(value) - (edit == "swap"))
    if edit == "change":
        return value[:i] + rng.choice(_ALPHABET.replace(value[i], "")) + value[i + 1 :]
    if edit == "drop":
        return value[:i] + value[i + 1 :]
    if edit == "double":
        return value[: i + 1] + value[i:]
    return value[:i] + value[i + 1] + value[i] + value[i + 2 :]


def _answer(vault: Vault, scope: Scope, value: str) -> str | MisCopiedId | None:
    """What a read of ``value`` gets: the id it resolved to, the mis-copy error, or None (not found, or not an id:
    edits that overlap can leave a string too far from any id's shape, e.g. ``art_`` with a letter dropped and two
    swapped)."""
    try:
        return vault.describe(scope, value).artifact_id
    except MisCopiedId as exc:
        return exc
    except (NotFound, InvalidId):
        return None


def _legacy_id() -> str:
    return "art_" + base64.b32encode(secrets.token_bytes(16)).decode("ascii").rstrip("=").lower()


def run(vault: Vault, scope: Scope, seed: int) -> dict[str, Any]:
    """Capture :data:`ARTIFACTS` artifacts in ``scope``, resolve :data:`CORRUPTED` corrupted copies of their ids and
    :data:`CONTROLS` unknown ids; the figures (see the module docstring)."""
    rng = random.Random(f"refvault-eval-miscopy:{seed}")
    ids = [vault.put(scope, f"mis-copy probe {n}\n".encode()).artifact_id for n in range(ARTIFACTS)]
    started = time.perf_counter()
    by_edits = {edits: {"ids": 0, "detected": 0, "suggested": 0} for edits in (1, 2)}
    wrong = resolved = 0
    for _ in range(CORRUPTED):
        original = rng.choice(ids)
        edits = rng.choice((1, 2))
        answer = _answer(vault, scope, corrupt(original, edits, rng))
        row = by_edits[edits]
        row["ids"] += 1
        if isinstance(answer, MisCopiedId):
            row["detected"] += 1
            row["suggested"] += answer.suggestion == original
            wrong += answer.suggestion not in (None, original)
        elif answer is not None:
            resolved += 1  # a corruption that is another readable id: never expected
    controls = [new_artifact_id() for _ in range(CONTROLS // 2)] + [_legacy_id() for _ in range(CONTROLS // 2)]
    misjudged = sum(isinstance(_answer(vault, scope, value), MisCopiedId) for value in controls)
    seconds = time.perf_counter() - started
    detected = sum(row["detected"] for row in by_edits.values())
    suggested = sum(row["suggested"] for row in by_edits.values())
    return {
        "artifacts": ARTIFACTS,
        "window": SUGGESTION_WINDOW,
        "corrupted": CORRUPTED,
        "detected": detected,
        "detected_share": detected / CORRUPTED,
        "suggested": suggested,
        "suggested_share": suggested / CORRUPTED,
        "wrong_suggestions": wrong,
        "resolved_to_another_id": resolved,
        "by_edits": {str(edits): row for edits, row in by_edits.items()},
        "controls": len(controls),
        "controls_called_miscopied": misjudged,
        "controls_called_miscopied_share": misjudged / len(controls),
        "seconds": round(seconds, 3),
    }
