"""Copies the vault makes and records: origins and receipts, redaction derivatives, staleness and refresh."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from refvault import limits
from refvault.catalog.audit_log import AuditEntry
from refvault.catalog.base import Manifest
from refvault.copies import LineageStatus, Mark, Receipt, receipt_of, status_of
from refvault.errors import Expired, InvalidArgument, NotFound, PolicyDenied, QuotaExceeded
from refvault.model import Descriptor, Scope
from refvault.operations import CaptureMetadata
from refvault.policy import DEFAULT_PURPOSE, DEFAULT_RECIPIENT, REDACTOR_NAMES
from refvault.vault.audit_trail import WRITTEN, entry_of
from refvault.vault.copies.common import (
    MAX_DEPTH,
    REDACTION,
    CopiesHost,
    checked_fields,
    checked_scope,
    reason_hash,
    redactor_for,
)
from refvault.vault.proving import with_integrity

__all__ = ["Derivatives"]


class Derivatives(CopiesHost):
    """Origins, receipts, redactions, lineage status, supersede, revoke and refresh (mixed into the vault)."""

    # -- origins and receipts -----------------------------------------------------------------

    def _tool_origin(self, owner: Scope, sources: Sequence[str], checked: CaptureMetadata) -> dict[str, Any]:
        """The origin of a capture derived from ``sources`` (a tool's output from ``Ref`` inputs): each source's
        content hash as it is now, when ``owner`` may read it (its own, or shared with it); None otherwise (gone,
        another principal's, another tenant's: naming an id never tells its hash)."""
        listed = [{"artifact_id": i, "content_hash": self._readable_hash(owner, i)} for i in sources]
        origin: dict[str, Any] = {
            "kind": "tool_output",
            "transformation": "tool_call",
            "version": "1",
            "sources": listed,
        }
        if checked.tool_call_id is not None:
            origin["tool_call_id"] = checked.tool_call_id
        return origin

    def _readable_hash(self, owner: Scope, artifact_id: str) -> str | None:
        try:
            return "sha256:" + self._authorized(owner, artifact_id, DEFAULT_PURPOSE, DEFAULT_RECIPIENT).digest
        except (NotFound, Expired, PolicyDenied):
            return None

    def _policy_version(self, tenant: str) -> str | None:
        policy = self.policy(tenant)
        if policy is None:
            return None
        return f"{policy.version}:sha256:{hashlib.sha256(policy.to_json().encode('utf-8')).hexdigest()[:16]}"

    def receipt(self, scope: Scope, artifact_id: str) -> Receipt:
        """The protected receipt of a derived artifact of ``scope``'s own (:class:`refvault.copies.Receipt`).

        Built from the origin under the artifact row's MAC: a row edited outside refvault is an
        :class:`~refvault.errors.IntegrityError`. Owner only: a receipt names the sources' content hashes,
        which a grantee of the copy (or a model it is served to) must not learn (the hash of a short source
        gives the source away); anyone else gets :class:`NotFound`, as for an absent id. An artifact captured
        directly has no receipt (:class:`InvalidArgument`). Audited as ``receipt``.
        """
        with self._audited("receipt", scope, artifact_id) as facts:
            manifest = self._authorized(scope, artifact_id, DEFAULT_PURPOSE, DEFAULT_RECIPIENT, facts)
            if manifest.grant_id is not None:
                raise NotFound(artifact_id)
            if manifest.origin is None:
                raise InvalidArgument(
                    f"artifact {manifest.artifact_id} was captured directly, not derived: it has no receipt"
                )
            facts["content_hash"] = "sha256:" + manifest.digest
            return receipt_of(
                manifest.artifact_id, "sha256:" + manifest.digest, manifest.size, manifest.created_at, manifest.origin
            )

    # -- redaction derivatives ----------------------------------------------------------------

    def redact(
        self, scope: Scope, artifact_id: str, *, redactor: str = "pii.v1", fields: Sequence[str] | None = None
    ) -> Descriptor:
        """A redaction derivative of ``scope``'s own artifact: a new artifact, made once and reused.

        ``redactor`` is ``pii.v1`` or ``secrets.v1`` (:mod:`refvault.content.redactors`); ``fields`` (JSON and
        JSONL only) redacts exactly the values at those dotted paths instead of detecting. The derivative has
        its own id and content hash, ``derived_from`` the source, the source's labels minus those the redactor
        removes (``pii`` / ``secret``), and a protected receipt (:meth:`receipt`). Only the owner may redact
        (anyone else: :class:`NotFound`, as for an absent id). Asking again for the same redactor and fields
        returns the live derivative already made. Audited as ``redact``.
        """
        owner = checked_scope(scope)
        with self._audited("redact", owner, artifact_id) as facts:
            if redactor not in REDACTOR_NAMES:
                raise InvalidArgument(f"redactor must be one of {', '.join(REDACTOR_NAMES)}")
            paths = checked_fields(fields)
            source = self._manifest(owner, artifact_id)
            descriptor = self._redaction(owner, source, redactor, paths, facts, owner)
            facts["detail"] = f"redactor={redactor}"
        return descriptor

    def _existing_redaction(self, source: Manifest, redactor: str, paths: tuple[str, ...] | None) -> Manifest | None:
        derived = [d for _, d in self.catalog.derived_ids(source.scope.tenant, [source.artifact_id])]
        if not derived:
            return None
        found = self.catalog.by_ids(source.scope.tenant, derived)
        marks = self.catalog.marks(source.scope.tenant, list(found))
        for m in sorted(found.values(), key=lambda m: m.created_at):
            origin = m.origin or {}
            if (
                m.scope == source.scope
                and origin.get("kind") == REDACTION
                and origin.get("redactor") == redactor
                and origin.get("fields") == (None if paths is None else list(paths))
                and origin.get("sources", [{}])[0].get("content_hash") == "sha256:" + source.digest
                and m.artifact_id not in marks
            ):
                return m
        return None

    def _redaction(
        self,
        owner: Scope,
        source: Manifest,
        redactor: str,
        paths: tuple[str, ...] | None,
        facts: dict[str, Any],
        payer: Scope,
    ) -> Descriptor:
        """The redaction of ``source`` (kept in ``owner``'s scope; made once): when made now, one recomputation and
        its bytes are charged to ``payer``'s run (the caller of ``redact``, or the reader a policy made it for)."""
        existing = self._existing_redaction(source, redactor, paths)
        if existing is not None:
            facts.update(artifact_id=existing.artifact_id, content_hash="sha256:" + existing.digest)
            return existing.descriptor()
        from refvault.content.redactors import REDACTORS, redact_bytes

        if source.size > limits.MAX_REDACT_BYTES:
            raise InvalidArgument(
                f"artifact {source.artifact_id} is {source.size} bytes; redaction takes at most "
                f"{limits.MAX_REDACT_BYTES} bytes"
            )
        self.charge(payer, recomputations=1)  # the run it is made for: a new derivative is computed
        data = self._verified_bytes(source)
        outcome = redact_bytes(data, media_type=source.media_type, redactor=redactor, fields=paths)
        spec = REDACTORS[redactor]
        origin: dict[str, Any] = {
            "kind": REDACTION,
            "transformation": spec.transformation,
            "version": spec.version,
            "redactor": redactor,
            "fields": None if paths is None else list(paths),
            "sources": [{"artifact_id": source.artifact_id, "content_hash": "sha256:" + source.digest}],
            "policy_version": self._policy_version(owner.tenant),
            "counts": {
                "bytes_in": outcome.bytes_in,
                "bytes_out": outcome.bytes_out,
                "records_in": outcome.records_in,
                "records_out": outcome.records_out,
                "matches": dict(sorted(outcome.matches.items())),
                "unparseable_records": outcome.unparseable_records,
            },
            "counts_changed": outcome.records_in != outcome.records_out,
            "coverage_changed": outcome.records_in != outcome.records_out,
        }
        checked = CaptureMetadata(
            media_type=source.media_type,
            disclosure=source.disclosure,
            filename=source.filename,
            run_id=source.run_id,
            schema_version=source.schema_version,
            source_version=source.source_version,
            completeness=source.completeness,
            # a redactor's detectors remove its labels; named fields alone prove nothing about the rest
            labels=source.labels if paths is not None else source.labels - spec.declassifies,
            derived_from=(source.artifact_id,),
            expires_at=source.expires_at,
        )
        return self._capture(owner, outcome.data, checked, origin, facts, payer)

    def _verified_bytes(self, manifest: Manifest) -> bytes:
        """Every byte of an artifact the caller already resolved, verified against its digests. For the vault's own
        transformations (a redaction): no policy decision here, so a ``redact`` rule cannot recurse into itself."""
        from refvault.vault.verified import ArtifactStream, VerifiedBlob

        with ArtifactStream(
            VerifiedBlob(manifest.artifact_id, manifest.key, manifest.size, self.catalog, self.blobs)
        ) as s:
            return s.read()

    def redacted_view(self, manifest: Manifest, redactor: str | None, reader: Scope) -> Manifest:
        """The redaction derivative a policy's ``redact`` action serves for ``manifest`` (made once, in its owner's
        scope), as the reader's view of it (the grant id carried over).

        Made now, it is charged to ``reader``'s run (whose read made it), never to the owner's: a grantee's read
        is neither refused by the owner's budget nor told its limits (``docs/budgets.md``)."""
        name = redactor_for(manifest.labels, redactor)
        with self._audited("redact", manifest.scope, manifest.artifact_id) as facts:
            owned = self.catalog.find(manifest.scope, manifest.artifact_id)
            if owned is None:
                raise NotFound(manifest.artifact_id)
            try:
                descriptor = self._redaction(manifest.scope, owned, name, None, facts, reader)
            except QuotaExceeded:
                if manifest.grant_id is None:
                    raise
                raise NotFound(manifest.artifact_id) from None  # a grantee learns nothing of the owner's quota
            facts["detail"] = f"redactor={name} (policy)"
        derived = self.catalog.find(manifest.scope, descriptor.artifact_id)
        if derived is None:
            raise NotFound(manifest.artifact_id)
        return replace(derived, grant_id=manifest.grant_id)

    # -- lineage --------------------------------------------------------------------------------

    def _ancestry(self, manifest: Manifest) -> tuple[dict[str, Manifest], set[str]]:
        """Every ancestor of ``manifest`` found (by id) and the ids of those that are gone."""
        tenant = manifest.scope.tenant
        found: dict[str, Manifest] = {}
        gone: set[str] = set()
        frontier = [i for i in manifest.derived_from if i != manifest.artifact_id]
        for _ in range(MAX_DEPTH):
            frontier = [i for i in dict.fromkeys(frontier) if i not in found and i not in gone]
            if not frontier:
                break
            got = self.catalog.by_ids(tenant, frontier)
            gone.update(i for i in frontier if i not in got)
            found.update(got)
            frontier = [p for m in got.values() for p in m.derived_from]
        return found, gone

    def _status(self, manifest: Manifest) -> tuple[LineageStatus, Mark | None]:
        """The lineage status of ``manifest`` and its own mark (one read for an artifact captured directly)."""
        tenant = manifest.scope.tenant
        if not manifest.derived_from:
            own = self.catalog.marks(tenant, [manifest.artifact_id]).get(manifest.artifact_id)
            return status_of([None if own is None else own.state]), own
        ancestors, gone = self._ancestry(manifest)
        marks = self.catalog.marks(tenant, [manifest.artifact_id, *ancestors, *gone])
        states: list[str | None] = [m.state for m in marks.values()]
        states += ["deleted" for i in gone if i not in marks]  # gone without a mark: never seen, or pre-lineage
        return status_of(states), marks.get(manifest.artifact_id)

    def with_status(self, manifest: Manifest) -> Descriptor:
        """``manifest``'s descriptor, with ``retrieval.lineage.status`` when it is a copy or has a mark."""
        descriptor = with_integrity(manifest.descriptor(), self.catalog.blob(manifest.key))
        status, own = self._status(manifest)
        if manifest.origin is None and own is None:
            return descriptor
        lineage = dict(descriptor.retrieval.get("lineage", {}))
        lineage["status"] = status
        if own is not None and own.state == "superseded":
            lineage["superseded_by"] = own.by
        return replace(descriptor, retrieval={**descriptor.retrieval, "lineage": lineage})

    def lineage_status(self, scope: Scope, artifact_id: str) -> LineageStatus:
        """``"current"``, ``"stale"`` (it or an ancestor was superseded) or ``"revoked"`` (it or an ancestor was
        revoked, deleted or expired), for an artifact ``scope`` may read."""
        with self._audited("describe", scope, artifact_id) as facts:
            manifest = self._authorized(scope, artifact_id, DEFAULT_PURPOSE, DEFAULT_RECIPIENT, facts)
            return self._status(manifest)[0]

    # -- staleness ------------------------------------------------------------------------------

    def _set_mark(self, scope: Scope, action: str, mark: Mark, facts: dict[str, Any]) -> Mark:
        entry: AuditEntry | None = None
        if self._audit_log is not None:
            self._audit_log.flush()  # the chain keeps this process's order
            entry = entry_of(self.clock(), action, scope, mark.artifact_id, "ok", facts)
        kept = self.catalog.set_mark(mark, audit=entry)
        facts[WRITTEN] = entry is not None
        return kept

    def supersede(self, scope: Scope, old_id: str, new_id: str, *, reason: str) -> None:
        """Mark ``scope``'s artifact ``old_id`` superseded by ``new_id`` (also ``scope``'s): from now on it and every
        copy derived from it report ``stale``, and the evidence gate refuses them unless the decision allows
        stale evidence. An artifact already revoked or deleted keeps that mark. Audited as ``supersede``
        (the reason's SHA-256 only)."""
        owner = checked_scope(scope)
        with self._audited("supersede", owner, old_id) as facts:
            digest = reason_hash(reason)
            old = self._manifest(owner, old_id)
            new = self._manifest(owner, new_id)
            if old.artifact_id == new.artifact_id:
                raise InvalidArgument("an artifact cannot supersede itself")
            facts.update(content_hash="sha256:" + old.digest, detail=f"by {new.artifact_id}")
            mark = Mark(
                owner.tenant,
                old.artifact_id,
                "superseded",
                self.clock(),
                by=new.artifact_id,
                rule="supersede",
                reason_hash=digest,
                content_hash="sha256:" + old.digest,
                size=old.size,
                owner=owner,
            )
            self._set_mark(owner, "supersede", mark, facts)

    def revoke_artifact(self, scope: Scope, artifact_id: str, *, reason: str) -> None:
        """Mark ``scope``'s artifact revoked (its source is no longer valid): it stays readable, but it and every
        copy derived from it report ``revoked`` and the evidence gate refuses them. Audited (reason hash only)."""
        owner = checked_scope(scope)
        with self._audited("revoke_artifact", owner, artifact_id) as facts:
            digest = reason_hash(reason)
            m = self._manifest(owner, artifact_id)
            facts["content_hash"] = "sha256:" + m.digest
            mark = Mark(
                owner.tenant,
                m.artifact_id,
                "revoked",
                self.clock(),
                rule="revoke",
                reason_hash=digest,
                content_hash="sha256:" + m.digest,
                size=m.size,
                owner=owner,
            )
            self._set_mark(owner, "revoke_artifact", mark, facts)

    def refresh(self, scope: Scope, artifact_id: str) -> Descriptor:
        """Recompute a stale redaction derivative from the artifact that superseded its source; its descriptor.

        Only a deterministic transformation can be recomputed: a redaction (a tool's output cannot: call the
        tool again). The old derivative is marked superseded by the new one (the substitution is in the audit
        log as ``refresh``). A derivative that is ``current`` is returned as it is; a ``revoked`` one is an
        :class:`InvalidArgument`.
        """
        owner = checked_scope(scope)
        with self._audited("refresh", owner, artifact_id) as facts:
            stale = self._manifest(owner, artifact_id)
            origin = stale.origin or {}
            if origin.get("kind") != REDACTION:
                raise InvalidArgument(
                    f"artifact {stale.artifact_id} is not a redaction: only a deterministic derivative can be refreshed"
                )
            status, _ = self._status(stale)
            if status == "current":
                return self.with_status(stale)
            if status == "revoked":
                raise InvalidArgument(f"artifact {stale.artifact_id} is revoked (a source was revoked or deleted)")
            source = str(stale.derived_from[0])
            newest = self._newest(owner, source)
            if newest.artifact_id == source:  # the source itself is current: what went stale is further up
                raise InvalidArgument(
                    f"artifact {stale.artifact_id} is stale because an artifact its source derives from was "
                    "superseded; refresh its source first (a tool's output cannot be recomputed: call the tool again)"
                )
            redactor = str(origin.get("redactor"))
            paths = None if origin.get("fields") is None else tuple(origin["fields"])
            fresh = self._redaction(owner, newest, redactor, paths, facts, owner)
            mark = Mark(
                owner.tenant,
                stale.artifact_id,
                "superseded",
                self.clock(),
                by=fresh.artifact_id,
                rule="refresh",
                content_hash="sha256:" + stale.digest,
                size=stale.size,
                owner=owner,
            )
            facts["detail"] = f"refreshed as {fresh.artifact_id}"
            self.catalog.set_mark(mark)
        return fresh

    def _newest(self, owner: Scope, artifact_id: str) -> Manifest:
        """The artifact that finally supersedes ``artifact_id`` (following ``superseded`` marks), in ``owner``."""
        current = artifact_id
        for _ in range(MAX_DEPTH):
            mark = self.catalog.marks(owner.tenant, [current]).get(current)
            if mark is None or mark.state != "superseded" or mark.by is None:
                break
            current = mark.by
        manifest = self.catalog.find(owner, current)
        if manifest is None:
            raise NotFound(artifact_id)
        return manifest
