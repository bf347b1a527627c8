"""Removing copies, and what keeps them: cascade deletion with an inventory, holds, quotas, retention, replay."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from refvault import limits
from refvault.blobs.base import BlobWriter
from refvault.catalog.audit_log import AuditEntry
from refvault.catalog.base import Manifest
from refvault.copies import DeletionReport, Hold, Mark, expired_mark
from refvault.errors import Expired, Held, InvalidArgument, NotFound, PolicyDenied, QuotaExceeded, shown_id
from refvault.ids import check_artifact_id
from refvault.model import Scope
from refvault.policy import DEFAULT_PURPOSE, DEFAULT_RECIPIENT, Policy
from refvault.vault.audit_trail import WRITTEN, entry_of
from refvault.vault.copies.common import CopiesHost, checked_scope, copy_id, kind_of, reason_hash

__all__ = ["Lifecycle"]


class Lifecycle(CopiesHost):
    """:meth:`delete`, holds, quotas, retention and :meth:`replay_status` (mixed into the vault)."""

    def delete(self, scope: Scope, artifact_id: str, *, cascade: bool = False) -> DeletionReport:
        """Delete ``scope``'s artifact (with ``cascade``, every artifact derived from it that ``scope`` owns too).

        One catalog transaction removes the rows, marks them ``deleted`` and appends their audit entries; a
        crash leaves all of it or none. A copy published while the cascade ran is found after it and removed
        in a further transaction. Grants on the deleted artifacts are revoked at once; links and cursors to
        them resolve to nothing from then on. A held artifact is :class:`~refvault.errors.Held` (without
        ``cascade``) or kept and reported (with it), and so are its ancestors in the cascade, which a kept
        copy still needs. Copies another principal owns are kept and report ``revoked`` from now on. Bytes
        are freed by ``gc`` once nothing references them. The :class:`~refvault.copies.DeletionReport` also
        lists the disclosure ledger's entries about every deleted artifact: those bytes already left.
        """
        owner = checked_scope(scope)
        with self._audited("delete", owner, artifact_id) as facts:
            root = self.catalog.find(owner, check_artifact_id(artifact_id))
            if root is None:
                raise NotFound(artifact_id)
            report = DeletionReport(root=root.artifact_id)
            tree: dict[str, Manifest] = {root.artifact_id: root}
            deleted: list[Manifest] = []
            frontier = [root.artifact_id]
            for _ in range(8):  # a copy published during a round is found by the next one
                doomed = self._cascade_round(owner, root, frontier, tree, report, cascade)
                if not doomed:
                    break
                gone = set(self._remove(owner, root, doomed, cascade))
                if root.artifact_id == doomed[0].artifact_id and root.artifact_id not in gone:
                    raise NotFound(artifact_id)  # deleted by someone else meanwhile
                deleted += [m for m in doomed if m.artifact_id in gone]
                if not cascade:
                    break
                late = self.catalog.derived_ids(owner.tenant, sorted(gone))
                frontier = sorted({c for _, c in late if c not in tree})
                if not frontier:
                    break
                found = self.catalog.by_ids(owner.tenant, frontier)
                frontier = [i for i, m in found.items() if m.scope == owner]
                tree.update((i, found[i]) for i in frontier)
                if not frontier:
                    break
            facts[WRITTEN] = self._audit_log is not None and any(m.artifact_id == root.artifact_id for m in deleted)
            self._report(owner, deleted, report)
            facts["detail"] = f"cascade: {len(deleted)} deleted, {len(report.kept)} kept" if cascade else None
        return report

    def _cascade_round(
        self,
        owner: Scope,
        root: Manifest,
        starts: Sequence[str],
        tree: dict[str, Manifest],
        report: DeletionReport,
        cascade: bool,
    ) -> list[Manifest]:
        """The artifacts of ``owner`` one round deletes: ``starts`` (already in ``tree``) and, with ``cascade``,
        every copy below them ``owner`` owns; held ones, and the ancestors a held copy needs, kept."""
        tenant = owner.tenant
        round_ids = list(starts)
        parents: dict[str, set[str]] = {}
        frontier = list(starts)
        while cascade and frontier and len(tree) <= limits.MAX_LINEAGE_NODES:
            edges = self.catalog.derived_ids(tenant, frontier)
            found = self.catalog.by_ids(tenant, [c for _, c in edges if c not in tree])
            for parent, child in edges:
                parents.setdefault(child, set()).add(parent)
            frontier = []
            for child_id, derived in found.items():
                if derived.scope != owner:
                    report.kept.append({"id": child_id, "kind": kind_of(derived), "reason": "other owner"})
                    continue
                tree[child_id] = derived
                frontier.append(child_id)
                round_ids.append(child_id)
        held = {h.artifact_id for h in self.catalog.holds(tenant, round_ids)}
        if held and not cascade:
            raise Held(f"artifact {shown_id(root.artifact_id)} is under a hold: release it before deleting")
        keep = set(held)
        changed = True
        while changed:  # a kept copy keeps its ancestors in the cascade (it still needs them)
            changed = False
            for child, sources in parents.items():
                if child in keep:
                    for source in sources:
                        if source in tree and source not in keep:
                            keep.add(source)
                            changed = True
        for kept_id in sorted(keep):
            reason = "hold" if kept_id in held else "a held copy derives from it"
            report.kept.append({"id": kept_id, "kind": kind_of(tree[kept_id]), "reason": reason})
        return [tree[i] for i in dict.fromkeys(round_ids) if i not in keep]

    def _remove(self, owner: Scope, root: Manifest, doomed: Sequence[Manifest], cascade: bool) -> list[str]:
        """Delete ``doomed`` in one catalog transaction, with their marks and audit entries; the ids deleted."""
        now = self.clock()
        rule = f"cascade:{root.artifact_id}" if cascade else "delete"
        states = [
            Mark(
                owner.tenant,
                m.artifact_id,
                "deleted",
                now,
                rule=rule,
                content_hash="sha256:" + m.digest,
                size=m.size,
                owner=owner,
            )
            for m in doomed
        ]
        entries: list[AuditEntry] = []
        if self._audit_log is not None:
            self._audit_log.flush()  # the chain keeps this process's order
            for m in doomed:
                detail = None if m.artifact_id == root.artifact_id else f"cascade from {root.artifact_id}"
                entry = entry_of(now, "delete", owner, m.artifact_id, "ok", {"detail": detail})
                if entry is not None:
                    entries.append(entry)
        return self.catalog.remove([(owner, m.artifact_id) for m in doomed], states, entries)

    def _report(self, owner: Scope, deleted: Sequence[Manifest], report: DeletionReport) -> None:
        """Fill in what went with the deleted artifacts: their internal copies, grants and disclosures."""
        copies = self._internal_copies(m.key for m in deleted)
        listed: set[str] = set()
        for m in deleted:
            report.deleted.append({"id": m.artifact_id, "kind": kind_of(m), "bytes": m.size})
            shared = self.catalog.is_referenced_by_artifact(m.key)  # another artifact still holds the bytes
            for kind, digest, size in copies.get(m.key, []):
                copy = copy_id(kind, digest)
                if copy in listed:  # two deleted artifacts with the same bytes share their internal copies
                    continue
                listed.add(copy)
                if shared:
                    report.kept.append({"id": copy, "kind": kind, "reason": "shared bytes"})
                else:
                    report.deleted.append({"id": copy, "kind": kind, "bytes": size})
        now = self.clock()
        for grant_id in self.catalog.live_grants(owner.tenant, sorted(m.artifact_id for m in deleted)):
            if self.catalog.revoke_grant(owner, grant_id, now) is not None:
                report.grants_revoked.append(grant_id)
        for m in deleted:
            report.not_erasable.extend(
                {
                    "artifact_id": d.artifact_id,
                    "recipient": d.recipient,
                    "at": d.to_json()["at"],
                    "excerpt_hash": d.excerpt_hash,
                }
                for d in self.disclosures(owner, m.artifact_id)  # still the owner's to see, after deletion
            )

    def hold(self, scope: Scope, artifact_id: str, *, reason: str) -> Hold:
        """Put a hold on ``scope``'s artifact: until it is released, deletion is :class:`~refvault.errors.Held`,
        and neither its expiry nor a retention rule removes it. Audited (the reason is kept with the hold)."""
        owner = checked_scope(scope)
        with self._audited("hold", owner, artifact_id) as facts:
            reason_hash(reason)
            m = self._manifest(owner, artifact_id)
            made = Hold(owner.tenant, m.artifact_id, "hold_" + secrets.token_hex(8), reason, self.clock(), owner.user)
            entry = None
            if self._audit_log is not None:
                self._audit_log.flush()
                entry = entry_of(made.at, "hold", owner, m.artifact_id, "ok", {"detail": made.hold_id})
            self.catalog.add_hold(made, audit=entry)
            facts[WRITTEN] = entry is not None
            return made

    def release(self, scope: Scope, artifact_id: str, hold_id: str) -> None:
        """Release one hold on ``scope``'s artifact (:class:`NotFound` if there is no such hold). Audited."""
        owner = checked_scope(scope)
        with self._audited("release", owner, artifact_id) as facts:
            m = self._holdable(owner, artifact_id)
            entry = None
            if self._audit_log is not None:
                self._audit_log.flush()
                entry = entry_of(self.clock(), "release", owner, m.artifact_id, "ok", {"detail": str(hold_id)[:40]})
            if not self.catalog.release_hold(owner.tenant, m.artifact_id, str(hold_id), audit=entry):
                raise NotFound(str(hold_id)[:40])
            facts[WRITTEN] = entry is not None

    def holds(self, scope: Scope, artifact_id: str) -> list[Hold]:
        """The holds on ``scope``'s artifact, oldest first."""
        owner = checked_scope(scope)
        m = self._holdable(owner, artifact_id)
        return self.catalog.holds(owner.tenant, [m.artifact_id])

    def _holdable(self, owner: Scope, artifact_id: str) -> Manifest:
        """``owner``'s artifact, past its expiry too: a hold keeps an expired artifact, which must stay releasable."""
        m = self.catalog.find(owner, check_artifact_id(artifact_id))
        if m is None:
            raise NotFound(artifact_id)
        return m

    def _apply_retention(self, now: datetime, dry_run: bool) -> list[str]:
        """Remove (or, dry, list) every artifact older than its labels' retention in its tenant's policy, unless
        held; each marked ``expired`` by ``retention:<label>``. The ids removed."""
        policies: dict[str, Policy | None] = {}
        due: list[tuple[Manifest, str]] = []
        for m in self.catalog.manifests():
            if not m.labels:
                continue
            tenant = m.scope.tenant
            if tenant not in policies:
                policies[tenant] = self.policy(tenant)
            policy = policies[tenant]
            rule = None if policy is None else policy.max_age(m.labels)
            if rule is not None and (now - m.created_at).total_seconds() >= rule[0]:
                due.append((m, rule[1]))
        if dry_run or not due:  # a dry run lists what a real one would remove: held artifacts stay
            return [m.artifact_id for m, _ in due if not self.catalog.holds(m.scope.tenant, [m.artifact_id])]
        removed: list[str] = []
        for m, label in due:
            mark = expired_mark(m.scope, m.artifact_id, now, m.digest, m.size, rule=f"retention:{label}")
            entry = None
            if self._audit_log is not None:
                self._audit_log.flush()
                entry = entry_of(now, "expire", m.scope, m.artifact_id, "ok", {"detail": mark.rule})
            removed += self.catalog.remove([(m.scope, m.artifact_id)], [mark], [] if entry is None else [entry])
        return removed

    def _check_quota(
        self, owner: Scope, size: int, writer: BlobWriter | None = None, idempotency_key: str | None = None
    ) -> None:
        """:class:`QuotaExceeded` (``writer`` aborted: nothing stored) if storing ``size`` more bytes takes the tenant
        or the session over its quota. The message names neither total: any user of the tenant may hit it. A
        retried put whose idempotency key already holds an artifact stores nothing new: never refused."""
        policy = self.policy(owner.tenant)
        quotas = None if policy is None else policy.quotas
        if quotas is None:
            return
        if idempotency_key is not None and self.catalog.find_by_key(owner, idempotency_key) is not None:
            return
        over = None
        if quotas.tenant_bytes is not None and self.catalog.stored_bytes(owner.tenant) + size > quotas.tenant_bytes:
            over = "the tenant's"
        elif quotas.session_bytes is not None:
            used = self.catalog.stored_bytes(owner.tenant, owner.user, owner.session)
            if used + size > quotas.session_bytes:
                over = "this session's"
        if over is not None:
            if writer is not None:
                writer.abort()
            raise QuotaExceeded(f"this put of {size} bytes would go over {over} byte quota; nothing was stored")

    def replay_status(
        self,
        scope: Scope,
        ids: Sequence[str],
        *,
        purpose: str = DEFAULT_PURPOSE,
        recipient: str = DEFAULT_RECIPIENT,
    ) -> dict[str, dict[str, Any]]:
        """For each id, whether a replay could read it now, for ``purpose``, to ``recipient``.

        ``state`` is ``available`` (with ``status``: current/stale/revoked, and ``allowed``: whether the policy
        lets this read through — replay never bypasses it; ``rule_id`` when it does not), ``expired``,
        ``deleted`` or ``revoked`` (with ``at`` and ``rule``: when, and what did it). An id ``scope`` never
        owned and cannot read is ``deleted`` with no time, exactly like an id that never existed.
        """
        owner = checked_scope(scope)
        if isinstance(ids, str) or not isinstance(ids, Sequence) or len(ids) > limits.MAX_REPLAY_IDS:
            raise InvalidArgument(f"ids is a list of at most {limits.MAX_REPLAY_IDS} artifact ids")
        checked = [check_artifact_id(i) for i in ids]
        out: dict[str, dict[str, Any]] = {}
        with self._audited("replay_status", owner) as facts:
            marks = self.catalog.marks(owner.tenant, checked)
            for artifact_id in checked:
                try:
                    m = self._authorized(owner, artifact_id, purpose, recipient)
                except NotFound:
                    mark = marks.get(artifact_id)
                    if mark is not None and mark.state in ("deleted", "expired") and mark.owner == owner:
                        out[artifact_id] = {"state": mark.state, **mark.to_dict()}
                    else:
                        out[artifact_id] = {"state": "deleted", "at": None, "rule": None}
                    continue
                except Expired:
                    out[artifact_id] = {"state": "expired", "at": None, "rule": "expires_at"}
                    continue
                except PolicyDenied as exc:  # replay never bypasses policy
                    out[artifact_id] = {"state": "available", "allowed": False, "rule_id": exc.rule_id}
                    continue
                status, own = self._status(m)
                if own is not None and own.state == "revoked":
                    out[artifact_id] = {"state": "revoked", **own.to_dict(), "allowed": True, "status": status}
                else:
                    out[artifact_id] = {"state": "available", "status": status, "allowed": True}
            facts["records"] = len(checked)
        return out
