"""ContextOS envelopes: the shapes agent frameworks already define for results that reference stored artifacts.

refvault serves these shapes; it does not redefine them. Three functions produce them, and
:func:`schema` loads the JSON Schema (draft 2020-12) of each, shipped inside the package::

    from refvault import envelopes

    envelopes.tool_result_artifacts([descriptor])      # ToolResultEnvelope.artifacts: ["art_..."]
    envelopes.invoke_attachment(descriptor)            # {"artifact_id", "media_type", "sha256", "uri"}
    read = envelopes.verified_read(vault, scope, artifact_id,
                                   read=lambda: refvault.read.query(vault, scope, artifact_id, where=...))
    envelopes.retrieved_evidence(read, decision_time=now, requirement=need)

Invariants (tested in ``tests/test_envelopes.py``):

* **Nothing leaks.** ``tool_result_artifacts`` is a list of artifact ids only; ``invoke_attachment`` has
  exactly four keys. Neither carries labels, scope, filenames or content.
* **One URI form.** An artifact's URI is ``refvault://<artifact_id>``, the form the MCP tools and the
  content projection already mint (:data:`refvault.content.result_parts.URI_SCHEME`).
* **Evidence only after verification.** :func:`retrieved_evidence` takes a :class:`VerifiedRead`, which
  only :func:`verified_read` makes sensibly: it runs the read itself through the vault (every byte of it
  verified against the capture's hashes before it is returned) and binds the response to the descriptor
  of exactly that artifact and content hash. A dict that merely looks like a read is refused.
* **excerpt_hash is of exactly the admitted bytes**: what the read returned (a window's text, grep's
  matched lines joined by ``\\n``, a query page's records as canonical JSON, a byte range's bytes), the
  same bytes the disclosure ledger hashes for that read. It equals ``content_hash`` only when those
  bytes are the whole object.
* **Never pretends.** Freshness is judged by :func:`refvault.evidence.check` against a requirement at
  the caller's ``decision_time``, with the read itself (a window or a byte range is a selection, not a
  scan: the gate says so); without a requirement it is ``"not judged"``.
* **Proofs pass through.** A read result carrying ``proof`` and ``verified_by`` has them copied
  unchanged into the evidence.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal

from refvault.content.result_parts import URI_SCHEME
from refvault.errors import InvalidArgument
from refvault.evidence import Requirement, _moment, _observed, check
from refvault.model import Descriptor, format_time, thaw
from refvault.policy import DEFAULT_PURPOSE, DEFAULT_RECIPIENT

if TYPE_CHECKING:
    from refvault.contract import VaultContract
    from refvault.model import Scope

__all__ = [
    "SCHEMAS",
    "VerifiedRead",
    "invoke_attachment",
    "retrieved_evidence",
    "schema",
    "tool_result_artifacts",
    "uri",
    "verified_read",
]

SCHEMAS = ("tool_result_artifacts", "invoke_attachment", "retrieved_evidence")
NOT_JUDGED = "not judged"
ReadKind = Literal["window", "grep", "query", "range"]


@cache
def _schema_text(name: str) -> str:
    return resources.files("refvault").joinpath("schemas", f"{name}.json").read_text(encoding="utf-8")


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one envelope shape, by name (one of :data:`SCHEMAS`); a fresh copy."""
    if name not in SCHEMAS:
        raise InvalidArgument(f"no envelope schema by that name; the schemas are {', '.join(SCHEMAS)}")
    loaded: dict[str, Any] = json.loads(_schema_text(name))
    return loaded


def _descriptor(value: object) -> Descriptor:
    """A :class:`Descriptor`, or a descriptor dict (its ``to_dict`` / wire form, checked by ``from_dict``)."""
    if isinstance(value, Descriptor):
        return value
    if isinstance(value, Mapping):
        return Descriptor.from_dict(value)
    raise InvalidArgument("pass a refvault Descriptor or a descriptor dict (Descriptor.to_dict())")


def uri(artifact_id: str) -> str:
    """The artifact's URI: ``refvault://<artifact_id>`` (the form MCP resources and content projection use)."""
    return URI_SCHEME + artifact_id


def tool_result_artifacts(descriptors: Iterable[Descriptor | Mapping[str, Any]]) -> list[str]:
    """The value of a ``ToolResultEnvelope.artifacts`` field: the artifact ids of ``descriptors``, in order.

    Opaque strings only (an id given twice is listed once); nothing else of a descriptor leaks into it.
    """
    if isinstance(descriptors, str | bytes | Mapping | Descriptor) or not isinstance(descriptors, Iterable):
        raise InvalidArgument("descriptors must be a list of Descriptors or descriptor dicts")
    return list(dict.fromkeys(_descriptor(d).artifact_id for d in descriptors))


def invoke_attachment(descriptor: Descriptor | Mapping[str, Any]) -> dict[str, str]:
    """An invocation attachment for one artifact: exactly ``artifact_id``, ``media_type``, ``sha256``, ``uri``.

    ``sha256`` is the hex SHA-256 of the whole stored object (the descriptor's ``content_hash`` without its
    ``sha256:`` prefix); ``uri`` is ``refvault://<artifact_id>``.
    """
    d = _descriptor(descriptor)
    algorithm, _, digest = d.content_hash.partition(":")
    if algorithm != "sha256" or not digest:
        raise InvalidArgument(f"artifact {d.artifact_id}: its content_hash is not a sha256: hash")
    return {"artifact_id": d.artifact_id, "media_type": d.media_type, "sha256": digest, "uri": uri(d.artifact_id)}


_ISSUED = object()  # what verified_read hands every VerifiedRead it makes (nothing else has it)


@dataclass(frozen=True, slots=True)
class VerifiedRead:
    """A selective read that went through the vault, bound to the descriptor of what it read (:func:`verified_read`).

    ``kind`` is ``window``, ``grep``, ``query`` or ``range``; ``selection`` says which part was read;
    ``excerpt`` is exactly the bytes the read admitted; ``response`` the read's own JSON response (None for
    a byte range, which returns bytes). Only :func:`verified_read` makes one: built by hand it is
    :class:`~refvault.errors.InvalidArgument`, so evidence is never issued for bytes the vault did not return.
    """

    descriptor: Descriptor
    kind: ReadKind
    selection: Mapping[str, Any]
    excerpt: bytes
    response: Mapping[str, Any] | None = None
    issued_by: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.issued_by is not _ISSUED:
            raise InvalidArgument("a VerifiedRead comes from envelopes.verified_read, which runs the read itself")
        response = self.response
        if response is not None and (
            response.get("artifact_id") != self.descriptor.artifact_id
            or response.get("content_hash") != self.descriptor.content_hash
        ):
            raise InvalidArgument(
                f"the read response is not of artifact {self.descriptor.artifact_id} ({self.descriptor.content_hash})"
            )

    @property
    def excerpt_hash(self) -> str:
        """``sha256:<hex>`` of exactly the admitted bytes (the content hash when they are the whole object)."""
        return "sha256:" + hashlib.sha256(self.excerpt).hexdigest()


def verified_read(
    vault: VaultContract,
    scope: Scope,
    artifact_id: str,
    *,
    read: Callable[[], Mapping[str, Any]] | None = None,
    byte_range: tuple[int, int | None] | None = None,
    purpose: str = DEFAULT_PURPOSE,
    recipient: str = DEFAULT_RECIPIENT,
) -> VerifiedRead:
    """Describe the artifact, then run one selective read of it through the vault, and bind the two.

    Pass ``read``, a call of :func:`refvault.read.window`, :func:`~refvault.read.grep` or
    :func:`~refvault.read.query` of this artifact (run here, after describing it, so nothing cached
    stands in for it), or ``byte_range=(offset, length)`` (``length`` None: to the end; ``(0, None)`` is the
    whole object), which is read with ``vault.read_range``. Every read goes through the vault, which
    verifies each byte against the capture's hashes before returning it
    (:class:`~refvault.errors.IntegrityError` otherwise). A response of another artifact or content hash,
    or one that is not a window, grep or query (a preview, a cached summary), is
    :class:`~refvault.errors.InvalidArgument`.
    """
    if (read is None) == (byte_range is None):
        raise InvalidArgument("pass read (a window, grep or query of the artifact) or byte_range, not both or neither")
    descriptor = vault.describe(scope, artifact_id, purpose=purpose, recipient=recipient)
    if byte_range is not None:
        offset, length = byte_range
        data = vault.read_range(scope, descriptor.artifact_id, offset, length, purpose=purpose, recipient=recipient)
        return VerifiedRead(descriptor, "range", {"offset": offset, "length": len(data)}, data, issued_by=_ISSUED)
    assert read is not None
    response = read()
    if not isinstance(response, Mapping):
        raise InvalidArgument("read must return the response of refvault.read.window, grep or query")
    kind, selection, excerpt = _admitted(response)
    return VerifiedRead(descriptor, kind, selection, excerpt, thaw(response), issued_by=_ISSUED)


def _admitted(response: Mapping[str, Any]) -> tuple[ReadKind, dict[str, Any], bytes]:
    """What kind of read ``response`` is, which part it selected, and exactly the bytes it admitted.

    The bytes are those the disclosure ledger hashes for the same read (:mod:`refvault.read.windows`,
    :mod:`refvault.read.records`).
    """
    if isinstance(response.get("text"), str) and "unit" in response:
        selection = {"unit": response["unit"], "start": response["start"], "end": response["end"]}
        return "window", selection, _utf8(response["text"])
    if isinstance(response.get("matches"), list) and "scan_complete" in response:
        text = "\n".join(str(match["text"]) for match in response["matches"])
        selection = {
            "pattern": response.get("pattern"),
            "regex": response.get("regex"),
            "from_line": response.get("from_line"),
            "lines": [match.get("line") for match in response["matches"]],
        }
        return "grep", selection, _utf8(text)
    if isinstance(response.get("records"), list) and "scan_complete" in response:
        rows = [[row["index"], row["record"]] for row in response["records"]]
        text = json.dumps(rows, sort_keys=True, separators=(",", ":"), default=str)
        indexes = [row[0] for row in rows]
        return "query", {**dict(response.get("selection") or {}), "indexes": indexes}, _utf8(text)
    raise InvalidArgument(
        "not a selective read: evidence rests on a window, grep or query of the artifact "
        "(refvault.read.window / grep / query) or a byte range, never a preview or a cached summary"
    )


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def retrieved_evidence(
    result: VerifiedRead, *, decision_time: datetime, requirement: Requirement | None = None
) -> dict[str, Any]:
    """The ``RetrievedEvidence`` of one verified selective read, for a decision at ``decision_time``.

    Fields: ``evidence_ref`` (``refvault://<artifact_id>#<excerpt_hash>``: this excerpt of this artifact),
    ``artifact_id``, ``source_id`` (``source_version.source_id``, or null), ``content_hash`` (of the whole
    object), ``excerpt_hash`` (of exactly the admitted bytes), ``selection`` (the read's kind and bounds),
    ``observed_at`` (``source_version.observed_at``, else ``created_at``; null when stated but unreadable),
    ``freshness`` (the verdict of :func:`refvault.evidence.check` for ``requirement`` at ``decision_time``
    with this read, or status ``"not judged"`` without a requirement) and ``lineage`` (``derived_from``,
    the lineage ``kind`` and ``transformation`` of a derived copy, and its ``status``). ``proof`` and
    ``verified_by`` are copied unchanged from the read result when it has them.
    """
    if not isinstance(result, VerifiedRead):
        raise InvalidArgument("retrieved_evidence takes a VerifiedRead (envelopes.verified_read), not a bare result")
    at = _moment(decision_time, "decision_time")
    descriptor = result.descriptor
    observed = _observed(descriptor)
    evidence: dict[str, Any] = {
        "evidence_ref": f"{uri(descriptor.artifact_id)}#{result.excerpt_hash}",
        "artifact_id": descriptor.artifact_id,
        "source_id": _source_id(descriptor),
        "content_hash": descriptor.content_hash,
        "excerpt_hash": result.excerpt_hash,
        "selection": {"kind": result.kind, **thaw(result.selection), "bytes": len(result.excerpt)},
        "observed_at": None if observed is None else format_time(observed),
        "freshness": _freshness(result, at, requirement),
        "lineage": _lineage(descriptor),
    }
    response = result.response or {}
    for name in ("proof", "verified_by"):
        if name in response:
            evidence[name] = thaw(response[name])
    return evidence


def _source_id(descriptor: Descriptor) -> str | None:
    source = descriptor.source_version.get("source_id")
    return source if isinstance(source, str) else None


def _freshness(result: VerifiedRead, at: datetime, requirement: Requirement | None) -> dict[str, Any]:
    if requirement is None:
        return {"status": NOT_JUDGED, "decision_time": format_time(at), "requirement": None, "reasons": []}
    if not isinstance(requirement, Requirement):
        raise InvalidArgument("requirement must be a refvault.evidence.Requirement (or None: not judged)")
    descriptor = result.descriptor
    # a byte range is a selection like a window: the gate is shown it as one (never as a scan)
    read = result.response if result.response is not None else _identity(descriptor)
    verdict = check(requirement, descriptor, at=at, read=read)
    return {
        "status": "satisfied" if verdict.satisfied else "not satisfied",
        "decision_time": format_time(at),
        "requirement": requirement.to_dict(),
        "reasons": [reason.to_dict() for reason in verdict.reasons],
    }


def _identity(descriptor: Descriptor) -> dict[str, str]:
    """The identity fields of a read of ``descriptor`` (what a byte range is, to the evidence gate)."""
    return {"artifact_id": descriptor.artifact_id, "content_hash": descriptor.content_hash}


def _lineage(descriptor: Descriptor) -> dict[str, Any]:
    lineage = descriptor.retrieval.get("lineage")
    recorded = thaw(lineage) if isinstance(lineage, Mapping) else {}
    kind, transformation, status = (recorded.get(k) for k in ("kind", "transformation", "status"))
    return {
        "derived_from": list(descriptor.derived_from),
        "kind": kind if isinstance(kind, str) else None,
        "transformation": transformation if isinstance(transformation, str) else None,
        "status": status if isinstance(status, str) else "current",  # no origin and no mark: current
    }
