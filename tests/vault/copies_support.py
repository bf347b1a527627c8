"""What the derived-copy tests share (``test_lineage``, ``test_staleness``, ``test_cascade_delete``,
``test_holds_quotas_retention``): the principals, a real :class:`refvault.Toolbox` whose tools take ``Ref``
inputs, and small builders of chains of copies.

Every tool output here is put by the toolbox itself (dispatched with an artifact id for its ``Ref`` parameter),
so it carries ``derived_from`` and the ``tool_output`` origin exactly as an agent's would.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from refvault import Artifact, Ref, Scope, Toolbox, Vault
from refvault.copies import canonical_json
from refvault.model import Descriptor, Principal

OWNER = Scope("acme", "ana", "s1")
OTHER = Scope("acme", "bob", "s9")
BOB = Principal("acme", "bob")
STRANGER = Scope("acme", "eve", "s1")
TEXT = b"".join(b"line %d: alpha beta\n" % n for n in range(20))
JSONL = "application/x-ndjson"


def records(count: int, seed: str = "a") -> bytes:
    """``count`` JSON Lines records, each with an e-mail address (what ``pii.v1`` redacts)."""
    return b"".join(
        json.dumps({"n": n, "name": f"{seed}{n}", "email": f"{seed}{n}@example.com"}).encode() + b"\n"
        for n in range(count)
    )


def toolbox(vault: Vault) -> Toolbox:
    """Tools with ``Ref`` inputs whose outputs the toolbox captures as artifacts (``derived_from`` the inputs)."""
    box = Toolbox(vault)

    @box.tool
    def shout(doc: Ref) -> Artifact:
        """The document in capitals, as text."""
        return Artifact(doc.read().upper(), media_type="text/plain")

    @box.tool
    def rows(doc: Ref) -> Artifact:
        """The document's lines as JSON Lines records."""
        lines = doc.read().decode().splitlines()
        data = b"".join(json.dumps({"n": n, "line": line}).encode() + b"\n" for n, line in enumerate(lines))
        return Artifact(data, media_type=JSONL)

    @box.tool
    def join(doc: Ref, extra: Ref) -> Artifact:
        """Two documents, one after the other."""
        return Artifact(doc.read() + extra.read(), media_type="text/plain")

    return box


def call(box: Toolbox, tool: str, scope: Scope = OWNER, **refs: str) -> str:
    """Dispatch ``tool`` with artifact ids for its ``Ref`` parameters; the id of the artifact it produced."""
    observation = box.call_sync(tool, refs, scope=scope)
    assert not observation.is_error, observation.content
    assert len(observation.artifacts) == 1, observation.content
    artifact_id: str = observation.artifacts[0]["artifact_id"]
    return artifact_id


def chain(vault: Vault, levels: int, *, scope: Scope = OWNER, data: bytes = TEXT) -> list[Descriptor]:
    """A root and ``levels - 1`` copies, each derived from the one before: level 1 a toolbox output of the root,
    the rest ``put(derived_from=...)`` (the last one JSON Lines, so record queries can read it)."""
    root = vault.put(scope, data, media_type="text/plain")
    ids = [root.artifact_id]
    if levels > 1:
        ids.append(call(toolbox(vault), "shout", scope, doc=root.artifact_id))
    for level in range(2, levels):
        last = level == levels - 1
        body = records(3, f"l{level}-") if last else b"level %d\n" % level
        made = vault.put(scope, body, media_type=JSONL if last else "text/plain", derived_from=[ids[-1]])
        ids.append(made.artifact_id)
    return [vault.describe(scope, i) for i in ids]


def receipt_hash_of(body: dict[str, Any]) -> str:
    """The receipt hash recomputed the way :mod:`refvault.copies` documents it."""
    return "sha256:" + hashlib.sha256(canonical_json(body).encode("ascii")).hexdigest()
