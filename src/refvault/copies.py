"""Derived copies, as values: receipts, the lineage graph, lifecycle marks, holds, deletion reports, replay status.

An artifact made from other artifacts (a redaction, a tool's output computed from ``Ref`` inputs) records
its *origin* in its own manifest, under the manifest's MAC: the kind of copy, the transformation and its
version, each source's id and content hash, and (for a redaction) the counts it changed. Its
:class:`Receipt` is that origin plus the copy's own content hash, and the receipt's hash is computed over
all of it, so the same stored facts always give the same receipt hash and an edited one fails the MAC.

Lifecycle is separate from the bytes: a :class:`Mark` records that an artifact was superseded (by a newer
one), revoked, deleted or expired (when, by whom or which rule). :func:`status_of` folds an artifact's own
mark and its ancestors' into one :data:`LineageStatus`: ``"revoked"`` if it or any ancestor was revoked,
deleted or expired; else ``"stale"`` if it or any ancestor was superseded; else ``"current"``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, cast

from refvault.model import Scope, format_time, parse_time

__all__ = [
    "COPY_KINDS",
    "MARK_STATES",
    "DeletionReport",
    "Hold",
    "LineageGraph",
    "LineageNode",
    "LineageRow",
    "LineageStatus",
    "Mark",
    "Receipt",
    "ReplayState",
    "canonical_json",
    "expired_mark",
    "mark_rank",
    "receipt_of",
    "status_of",
]

LineageStatus = Literal["current", "stale", "revoked"]
MarkState = Literal["superseded", "revoked", "deleted", "expired"]
ReplayState = Literal["available", "expired", "deleted", "revoked"]

MARK_STATES: tuple[MarkState, ...] = ("superseded", "revoked", "deleted", "expired")
"""In rising order of finality: a mark is only ever replaced by one at least as final."""

COPY_KINDS = ("redaction", "tool_output", "refresh")
"""The kinds of derived *artifact* an origin records (internal copies are named by their derivation kind)."""


def mark_rank(state: str) -> int:
    """The finality of a mark's state (superseded 0 < revoked 1 < deleted = expired 2)."""
    return {"superseded": 0, "revoked": 1, "deleted": 2, "expired": 2}.get(state, -1)


def expired_mark(
    owner: Scope, artifact_id: str, at: datetime, digest: str, size: int, rule: str = "expires_at"
) -> Mark:
    """The mark of an artifact removed because its time was up (its ``expires_at``, or a retention rule)."""
    return Mark(
        owner.tenant, artifact_id, "expired", at, rule=rule, content_hash="sha256:" + digest, size=size, owner=owner
    )


def canonical_json(value: object) -> str:
    """Sorted keys, no spaces, ASCII: the one spelling hashed and MAC'd."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


@dataclass(frozen=True, slots=True)
class Mark:
    """What happened to an artifact besides its bytes: superseded, revoked, deleted or expired.

    ``by`` is the superseding artifact's id (``superseded``); ``rule`` what did it (``"delete"``,
    ``"cascade:<root id>"``, ``"expires_at"``, ``"retention:<label>"``, ``"revoke"``); ``reason_hash`` the
    SHA-256 of the caller's reason (never the text). ``content_hash`` and ``size`` are the artifact's, kept
    so that a deleted artifact can still be named in a replay check. One mark per artifact: a later one
    replaces it only if it is at least as final (:data:`MARK_STATES`).
    """

    tenant: str
    artifact_id: str
    state: MarkState
    at: datetime
    by: str | None = None
    rule: str | None = None
    reason_hash: str | None = None
    content_hash: str | None = None
    size: int | None = None
    owner: Scope | None = None
    """The artifact's owner scope (None on a mark made by ``gc`` without one)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "artifact_id": self.artifact_id,
            "state": self.state,
            "at": format_time(self.at),
            "by": self.by,
            "rule": self.rule,
            "reason_hash": self.reason_hash,
        }


@dataclass(frozen=True, slots=True)
class Hold:
    """A hold on one artifact: while any is in place, neither deletion nor expiry nor retention removes it."""

    tenant: str
    artifact_id: str
    hold_id: str
    reason: str
    at: datetime
    user: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "hold_id": self.hold_id,
            "artifact_id": self.artifact_id,
            "reason": self.reason,
            "at": format_time(self.at),
            "user": self.user,
        }


def status_of(states: Iterable[str | None]) -> LineageStatus:
    """The lineage status of an artifact given its own mark's state and every ancestor's (None: no mark)."""
    status: LineageStatus = "current"
    for state in states:
        if state in ("revoked", "deleted", "expired"):
            return "revoked"
        if state == "superseded":
            status = "stale"
    return status


@dataclass(frozen=True, slots=True)
class Receipt:
    """The protected receipt of a derived artifact: how it was made, from which exact bytes, and what changed.

    Built from the origin kept under the artifact manifest's MAC (so it cannot be edited without the
    store's manifest key) and the artifact's own content hash. ``receipt_hash`` is the SHA-256 of the
    canonical JSON of every other field: recomputing it from :meth:`to_dict` (without ``receipt_hash``)
    gives the same value. A derivative never claims byte identity with its source: its ``content_hash``
    is its own.
    """

    artifact_id: str
    content_hash: str
    size: int
    kind: str
    transformation: str
    version: str
    sources: tuple[Mapping[str, str], ...]
    policy_version: str | None
    counts: Mapping[str, Any]
    counts_changed: bool
    coverage_changed: bool
    created_at: datetime
    receipt_hash: str = ""

    def body(self) -> dict[str, Any]:
        """Every field but ``receipt_hash``: what the hash covers."""
        return {
            "artifact_id": self.artifact_id,
            "content_hash": self.content_hash,
            "size": self.size,
            "kind": self.kind,
            "transformation": self.transformation,
            "version": self.version,
            "sources": [dict(s) for s in self.sources],
            "policy_version": self.policy_version,
            "counts": dict(self.counts),
            "counts_changed": self.counts_changed,
            "coverage_changed": self.coverage_changed,
            "created_at": format_time(self.created_at),
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.body(), "receipt_hash": self.receipt_hash}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Receipt:
        """The receipt :meth:`to_dict` gave (``receipt_hash`` as given: :meth:`body` recomputes what it covers)."""
        return cls(
            artifact_id=str(data["artifact_id"]),
            content_hash=str(data["content_hash"]),
            size=int(data["size"]),
            kind=str(data["kind"]),
            transformation=str(data["transformation"]),
            version=str(data["version"]),
            sources=tuple(dict(s) for s in data["sources"]),
            policy_version=None if data.get("policy_version") is None else str(data["policy_version"]),
            counts=dict(data.get("counts") or {}),
            counts_changed=bool(data.get("counts_changed", False)),
            coverage_changed=bool(data.get("coverage_changed", False)),
            created_at=parse_time(str(data["created_at"])),
            receipt_hash=str(data.get("receipt_hash", "")),
        )


def receipt_of(
    artifact_id: str, content_hash: str, size: int, created_at: datetime, origin: Mapping[str, Any]
) -> Receipt:
    """The receipt of a derived artifact from its manifest's facts and stored origin (hash filled in)."""
    draft = Receipt(
        artifact_id=artifact_id,
        content_hash=content_hash,
        size=size,
        kind=str(origin.get("kind", "derived")),
        transformation=str(origin.get("transformation", "")),
        version=str(origin.get("version", "")),
        sources=tuple(dict(s) for s in origin.get("sources", ())),
        policy_version=origin.get("policy_version"),
        counts=dict(origin.get("counts", {})),
        counts_changed=bool(origin.get("counts_changed", False)),
        coverage_changed=bool(origin.get("coverage_changed", False)),
        created_at=created_at,
    )
    digest = hashlib.sha256(canonical_json(draft.body()).encode("ascii")).hexdigest()
    return Receipt(**{**_fields(draft), "receipt_hash": "sha256:" + digest})


def _fields(receipt: Receipt) -> dict[str, Any]:
    return {name: getattr(receipt, name) for name in Receipt.__slots__}


@dataclass(frozen=True, slots=True)
class LineageRow:
    """What a lineage walk reads of one artifact's catalog row: owner, bytes, sources and origin.

    Read in batches without re-checking each row's MAC (every read of the artifact itself does): a walk of
    100,000 copies reads their rows, it does not re-authenticate each one.
    """

    artifact_id: str
    user: str
    session: str
    digest: str
    size: int
    derived_from: tuple[str, ...] = ()
    origin: Mapping[str, Any] | None = None

    def owned_by(self, scope: Scope) -> bool:
        return self.user == scope.user and self.session == scope.session


@dataclass(frozen=True, slots=True)
class LineageNode:
    """One node of a lineage graph: an artifact, or an internal copy (an index, a cache) that is not one.

    ``id`` is the artifact id, or ``"copy:<kind>:<first 16 hex of its digest>"`` for an internal copy.
    ``visible`` is False for an artifact of another principal of the tenant: only its id, kind and status
    are shown then. ``status`` is its :data:`LineageStatus`; ``state`` its own mark's state (None if none).
    """

    id: str
    kind: str
    status: LineageStatus
    internal: bool = False
    visible: bool = True
    state: str | None = None
    content_hash: str | None = None
    bytes: int | None = None
    transformation: str | None = None
    depth: int = 0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, "status": self.status, "depth": self.depth}
        if self.internal:
            out["internal"] = True
        if not self.visible:
            out["visible"] = False
        for name in ("state", "content_hash", "bytes", "transformation"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LineageNode:
        """The node :meth:`to_dict` gave (absent optional fields are their defaults)."""
        status = str(data["status"])
        if status not in ("current", "stale", "revoked"):
            raise ValueError("a lineage status is current, stale or revoked")
        size = data.get("bytes")
        return cls(
            id=str(data["id"]),
            kind=str(data["kind"]),
            status=cast(LineageStatus, status),
            internal=bool(data.get("internal", False)),
            visible=bool(data.get("visible", True)),
            state=None if data.get("state") is None else str(data["state"]),
            content_hash=None if data.get("content_hash") is None else str(data["content_hash"]),
            bytes=None if size is None else int(size),
            transformation=None if data.get("transformation") is None else str(data["transformation"]),
            depth=int(data.get("depth", 0)),
        )


@dataclass(frozen=True, slots=True)
class LineageGraph:
    """The lineage of one artifact: its ancestors (``depth`` < 0), itself (0) and what derives from it (> 0).

    ``edges`` are ``(source id, derived id, kind)``; every id in an edge is a node. ``truncated`` says the
    walk stopped at the requested depth while there was more.
    """

    root: str
    nodes: tuple[LineageNode, ...]
    edges: tuple[tuple[str, str, str], ...]
    truncated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "nodes": [n.to_dict() for n in self.nodes],
            "edges": [{"source": s, "derived": d, "kind": k} for s, d, k in self.edges],
            "truncated": self.truncated,
        }

    def node(self, node_id: str) -> LineageNode:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(node_id)

    def tree(self) -> str:
        """The graph as indented text: ancestors above the root, derivatives below it, one line per node."""
        by_id = {n.id: n for n in self.nodes}
        children: dict[str, list[str]] = {}
        parents: dict[str, list[str]] = {}
        for source, derived, _ in self.edges:
            children.setdefault(source, []).append(derived)
            parents.setdefault(derived, []).append(source)

        def line(node_id: str, indent: int, arrow: str) -> str:
            n = by_id[node_id]
            extra = "" if n.status == "current" else f" [{n.status}]"
            size = "" if n.bytes is None else f" {n.bytes} B"
            return f"{'  ' * indent}{arrow}{n.id} ({n.kind}){size}{extra}"

        lines: list[str] = []
        seen: set[str] = set()

        def up(node_id: str, indent: int) -> None:
            for parent in sorted(parents.get(node_id, [])):
                if parent in seen:
                    continue
                seen.add(parent)
                lines.append(line(parent, indent, "^ "))
                up(parent, indent + 1)

        def down(node_id: str, indent: int) -> None:
            for child in sorted(children.get(node_id, [])):
                if child in seen:
                    continue
                seen.add(child)
                lines.append(line(child, indent, "└ "))
                down(child, indent + 1)

        seen.add(self.root)
        up(self.root, 1)
        lines.insert(0, line(self.root, 0, ""))
        down(self.root, 1)
        if self.truncated:
            lines.append("(more beyond the requested depth)")
        return "\n".join(lines)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LineageGraph:
        """The graph :meth:`to_dict` gave."""
        return cls(
            root=str(data["root"]),
            nodes=tuple(LineageNode.from_dict(n) for n in data["nodes"]),
            edges=tuple((str(e["source"]), str(e["derived"]), str(e["kind"])) for e in data["edges"]),
            truncated=bool(data.get("truncated", False)),
        )


@dataclass(slots=True)
class DeletionReport:
    """What a deletion removed, what it kept and why, and what no deletion can take back.

    ``deleted``: ``{"id", "kind", "bytes"}`` per artifact removed and per internal copy freed with it.
    ``kept``: ``{"id", "kind", "reason"}``, reason ``"hold"`` (a hold blocks it), ``"other owner"`` (a
    derivative another principal owns: left in place and reported ``revoked`` from now on) or ``"shared
    bytes"`` (an internal copy of bytes another artifact still holds). ``grants_revoked``: grants of the
    deleted artifacts, revoked at once (links and cursors to them resolve to nothing from now on).
    ``not_erasable``: the disclosure ledger's entries about them — ``{"artifact_id", "recipient", "at",
    "excerpt_hash"}`` — which record bytes that already left and stay in the audit chain.
    """

    root: str
    deleted: list[dict[str, Any]] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)
    grants_revoked: list[str] = field(default_factory=list)
    not_erasable: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "deleted": self.deleted,
            "kept": self.kept,
            "grants_revoked": self.grants_revoked,
            "not_erasable": self.not_erasable,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeletionReport:
        return cls(
            root=str(data["root"]),
            deleted=list(data.get("deleted", [])),
            kept=list(data.get("kept", [])),
            grants_revoked=list(data.get("grants_revoked", [])),
            not_erasable=list(data.get("not_erasable", [])),
        )
