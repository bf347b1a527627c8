"""In-memory catalog: the same contract as the SQL catalog, for tests and ephemeral use.

One lock plays the role of the database write lock; reads take it too, so
every operation sees a consistent state. Rows and derivations carry their MAC like the
SQL catalog's (:mod:`refvault.catalog.macs`, a key made per catalog unless one
is given), checked by :meth:`MemoryCatalog._manifest` and
:meth:`MemoryCatalog._derivation` wherever one is returned.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from refvault.blobs.base import BlobKey
from refvault.budgets import BudgetRow
from refvault.catalog.audit_log import GENESIS, AuditEntry, by_tenant, seal_all
from refvault.catalog.base import (
    ApiKey,
    BlobRecord,
    Derivation,
    Grant,
    Manifest,
    ManifestCheck,
    Publication,
    replay_or_conflict,
)
from refvault.catalog.macs import ManifestKeys, derivation_error, grant_error, manifest_error
from refvault.catalog.memory_budgets import MemoryBudgets
from refvault.copies import Hold, LineageRow, Mark, expired_mark, mark_rank
from refvault.errors import NotFound, RefvaultError, StorageError
from refvault.model import Scope
from refvault.runs import EvidenceRecord

__all__ = ["MemoryCatalog"]


@dataclass(slots=True)
class _Row:
    seq: int
    manifest: Manifest
    mac: str | None


class MemoryCatalog(MemoryBudgets):
    """A :class:`~refvault.catalog.Catalog` held in process memory."""

    def __init__(self, *, manifest_keys: ManifestKeys | None = None) -> None:
        self.manifest_keys = manifest_keys if manifest_keys is not None else ManifestKeys.ephemeral()
        self._lock = threading.RLock()
        self._seq = itertools.count(1)
        self._rows: dict[str, _Row] = {}
        self._blobs: dict[BlobKey, tuple[BlobRecord, float]] = {}
        self._derivations: dict[tuple[BlobKey, str], tuple[Derivation, str | None]] = {}  # with its MAC
        self._api_keys: dict[str, ApiKey] = {}
        self._settings: dict[str, str] = {}
        self._grants: dict[str, tuple[Grant, str | None]] = {}  # grant id -> (grant, its MAC)
        self._audit: dict[str, list[AuditEntry]] = {}  # tenant -> its chain, seq 1..n
        self._lineage: set[tuple[str, str, str]] = set()  # (tenant, source id, derived id)
        self._marks: dict[tuple[str, str], Mark] = {}
        self._holds: dict[tuple[str, str, str], Hold] = {}  # (tenant, artifact id, hold id)
        self._evidence: list[EvidenceRecord] = []  # every run's evidence records, in order
        self._budget_rows: dict[Scope, BudgetRow] = {}  # run budgets (refvault.catalog.memory_budgets)

    def publish(self, items: Sequence[Publication], make_visible: Callable[[], None]) -> list[Manifest | RefvaultError]:
        with self._lock:
            make_visible()
            return [self._publish_one(item) for item in items]

    def _publish_one(self, item: Publication) -> Manifest | RefvaultError:
        m = item.manifest
        for required in item.requires:
            row = self._rows.get(required)
            if row is None or row.manifest.scope.tenant != m.scope.tenant:
                return NotFound(required)
        if m.idempotency_key is not None:
            for row in self._rows.values():
                if row.manifest.scope == m.scope and row.manifest.idempotency_key == m.idempotency_key:
                    existing = self._manifest(row)  # a holder that fails its MAC fails the publication
                    try:
                        replayed = replay_or_conflict(existing, m)
                    except RefvaultError as exc:
                        return exc
                    if replayed is not None:
                        return replayed
                    released = replace(row.manifest, idempotency_key=None)  # expired: the key is free
                    # a new row object, so that a reader never sees the new manifest with the old MAC
                    self._rows[released.artifact_id] = _Row(row.seq, released, self.manifest_keys.sign(released))
                    break
        previous = self._blobs.get(item.blob.key)
        record = _kept(item.blob, None if previous is None else previous[0])
        self._blobs[item.blob.key] = (record, time.time())
        self._rows[m.artifact_id] = _Row(next(self._seq), m, self.manifest_keys.sign(m))
        self._lineage.update((m.scope.tenant, source, m.artifact_id) for source in m.derived_from)
        if item.audit is not None:  # under the lock with the row, as the SQL catalog's publishing transaction
            self._append_audit([item.audit._replace(artifact_id=m.artifact_id)])
        return m

    def _manifest(self, row: _Row) -> Manifest:
        """The row's manifest if its MAC authenticates it, else :class:`IntegrityError` (``kind="manifest"``)."""
        fault = self.manifest_keys.fault(row.manifest, row.mac)
        if fault is not None:
            raise manifest_error(row.manifest.artifact_id, fault)
        return row.manifest

    def find(self, scope: Scope, artifact_id: str) -> Manifest | None:
        with self._lock:
            row = self._rows.get(artifact_id)
        return self._manifest(row) if row is not None and row.manifest.scope == scope else None

    def find_by_key(self, scope: Scope, idempotency_key: str) -> Manifest | None:
        with self._lock:
            rows = [r for r in self._rows.values() if r.manifest.scope == scope]
        row = next((r for r in rows if r.manifest.idempotency_key == idempotency_key), None)
        return None if row is None else self._manifest(row)

    def blob(self, key: BlobKey) -> BlobRecord | None:
        with self._lock:
            entry = self._blobs.get(key)
        return None if entry is None else entry[0]

    def record_chunks(self, key: BlobKey, chunk_size: int, digests: bytes) -> None:
        with self._lock:
            entry = self._blobs.get(key)
            if entry is not None:
                self._blobs[key] = (replace(entry[0], chunk_size=chunk_size, chunk_digests=digests), entry[1])

    def record_merkle(self, key: BlobKey, chunk_size: int, chunk_roots: bytes, root: bytes) -> None:
        with self._lock:
            entry = self._blobs.get(key)
            if entry is not None and entry[0].merkle_root is None and entry[0].chunk_size == chunk_size:
                self._blobs[key] = (replace(entry[0], merkle_root=root, chunk_roots=chunk_roots), entry[1])

    def is_referenced(self, key: BlobKey) -> bool:
        with self._lock:
            return self._referenced(key)

    def has_blob(self, key: BlobKey) -> bool:
        return self.blob(key) is not None

    def in_scope(self, scope: Scope) -> list[Manifest]:
        with self._lock:
            rows = [row for row in self._rows.values() if row.manifest.scope == scope]
        rows.sort(key=lambda row: (row.manifest.created_at, row.seq), reverse=True)
        return [self._manifest(row) for row in rows]

    def recent_ids(self, scope: Scope, limit: int) -> list[str]:
        with self._lock:
            rows = [row for row in self._rows.values() if row.manifest.scope == scope]
        rows.sort(key=lambda row: (row.manifest.created_at, row.seq), reverse=True)
        return [row.manifest.artifact_id for row in rows[:limit]]

    def set_labels(
        self, scope: Scope, artifact_id: str, labels: frozenset[str], *, audit: AuditEntry | None = None
    ) -> Manifest | None:
        with self._lock:
            row = self._rows.get(artifact_id)
            if row is None or row.manifest.scope != scope:
                return None
            relabelled = replace(self._manifest(row), labels=frozenset(labels))
            # a new row object, so that a reader never sees the new manifest with the old MAC
            self._rows[artifact_id] = _Row(row.seq, relabelled, self.manifest_keys.sign(relabelled))
            if audit is not None:
                self._append_audit([audit])
            return relabelled

    def delete_expired(self, now: datetime) -> list[str]:
        with self._lock:
            ids = [
                aid
                for aid, row in self._rows.items()
                if row.manifest.expires_at is not None
                and row.manifest.expires_at <= now
                and not self._held(row.manifest.scope.tenant, aid)
            ]
            for aid in ids:
                m = self._rows.pop(aid).manifest
                self._put_mark(expired_mark(m.scope, aid, now, m.digest, m.size))
            return ids

    def manifests(self) -> Iterator[Manifest]:
        with self._lock:
            return iter([self._manifest(row) for row in sorted(self._rows.values(), key=lambda r: r.seq)])

    def audit(self) -> Iterator[ManifestCheck]:
        with self._lock:
            rows = sorted(self._rows.values(), key=lambda r: r.seq)
        return iter(
            [
                ManifestCheck(
                    row.manifest.artifact_id,
                    row.manifest.scope.tenant,
                    row.manifest.digest,
                    row.manifest.key.namespace,
                    row.manifest,
                    self.manifest_keys.fault(row.manifest, row.mac),
                )
                for row in rows
            ]
        )

    def rotate_manifest_key(self) -> str:
        with self._lock:
            return self.manifest_keys.rotate()

    def remac(self) -> tuple[int, int]:
        keys = self.manifest_keys
        redone = failing = 0
        with self._lock:
            for row in self._rows.values():
                if keys.fault(row.manifest, row.mac) is not None:
                    failing += 1
                elif keys.key_id(row.mac) != keys.current_id:
                    row.mac = keys.sign(row.manifest)
                    redone += 1
            for link, (derivation, mac) in self._derivations.items():
                if keys.fault(derivation, mac) is not None:
                    failing += 1
                elif keys.key_id(mac) != keys.current_id:
                    self._derivations[link] = (derivation, keys.sign(derivation))
                    redone += 1
            for grant_id, (grant, mac) in self._grants.items():
                if keys.fault(grant, mac) is not None:
                    failing += 1
                elif keys.key_id(mac) != keys.current_id:
                    self._grants[grant_id] = (grant, keys.sign(grant))
                    redone += 1
        return redone, failing

    def drop_retired_manifest_keys(self) -> list[str] | None:
        keys = self.manifest_keys
        with self._lock:
            signed: list[tuple[Manifest | Derivation | Grant, str | None]] = [
                (r.manifest, r.mac) for r in self._rows.values()
            ]
            signed += self._derivations.values()
            signed += self._grants.values()
            for record, mac in signed:
                if keys.key_id(mac) != keys.current_id and keys.fault(record, mac) is None:
                    return None
            return keys.drop_retired()

    def blob_records(self) -> Iterator[BlobRecord]:
        with self._lock:
            return iter([record for _, (record, _) in sorted(self._blobs.items())])

    def _referenced(self, key: BlobKey) -> bool:
        return self._by_artifact(key) or any(d.key == key for d, _ in self._derivations.values())

    def _by_artifact(self, key: BlobKey) -> bool:
        return any(row.manifest.key == key for row in self._rows.values())

    def _derivation(self, entry: tuple[Derivation, str | None]) -> Derivation:
        """The derivation if its MAC authenticates it, else :class:`IntegrityError` (``kind="manifest"``)."""
        fault = self.manifest_keys.fault(*entry)
        if fault is not None:
            raise derivation_error(fault)
        return entry[0]

    def derivation(self, source: BlobKey, kind: str) -> Derivation | None:
        with self._lock:
            entry = self._derivations.get((source, kind))
        return None if entry is None else self._derivation(entry)

    def derivations(self) -> Iterator[Derivation]:
        with self._lock:
            return iter([self._derivation(self._derivations[k]) for k in sorted(self._derivations)])

    def audit_derivations(self) -> Iterator[tuple[Derivation | None, BlobKey | None, str | None]]:
        with self._lock:
            entries = [self._derivations[k] for k in sorted(self._derivations)]
        return iter([(d, d.source, self.manifest_keys.fault(d, mac)) for d, mac in entries])

    def publish_derivation(
        self, derivation: Derivation, blob: BlobRecord, make_visible: Callable[[], None]
    ) -> Derivation | None:
        with self._lock:
            existing = self._derivations.get((derivation.source, derivation.kind))
            if existing is not None:
                return self._derivation(existing)
            if not self._by_artifact(derivation.source):
                return None
            make_visible()
            previous = self._blobs.get(blob.key)
            blob = _kept(blob, None if previous is None else previous[0])
            self._blobs[blob.key] = (blob, time.time())
            self._derivations[(derivation.source, derivation.kind)] = (derivation, self.manifest_keys.sign(derivation))
            return derivation

    def unreferenced(self, older_than: float) -> list[BlobKey]:
        cutoff = time.time() - older_than
        with self._lock:
            return [
                key
                for key, (_, touched) in sorted(self._blobs.items())
                if touched < cutoff and not self._referenced(key)
            ]

    def collect(self, key: BlobKey, older_than: float, remove: Callable[[], bool]) -> bool:
        with self._lock:
            if self._referenced(key):
                return False
            entry = self._blobs.get(key)
            if entry is not None and entry[1] >= time.time() - older_than:
                return False
            if not remove():
                return False
            self._blobs.pop(key, None)
            for link in [link for link in self._derivations if link[0] == key]:
                del self._derivations[link]
            return True

    # -- the service's own small records -------------------------------------------

    def add_api_key(self, key: ApiKey) -> None:
        with self._lock:
            if key.key_id in self._api_keys:
                raise StorageError("the catalog failed: an API key with this id already exists")
            self._api_keys[key.key_id] = key

    def find_api_key(self, key_id: str) -> ApiKey | None:
        with self._lock:
            return self._api_keys.get(key_id)

    def revoke_api_key(self, key_id: str, at: datetime) -> bool:
        with self._lock:
            key = self._api_keys.get(key_id)
            if key is None or key.revoked_at is not None:
                return False
            self._api_keys[key_id] = replace(key, revoked_at=at)
            return True

    def api_keys(self, tenant: str | None = None) -> list[ApiKey]:
        with self._lock:
            keys = [key for key in self._api_keys.values() if tenant is None or key.tenant == tenant]
        return sorted(keys, key=lambda key: (key.created_at, key.key_id))

    # -- sharing grants ----------------------------------------------------------------

    def _grant(self, entry: tuple[Grant, str | None]) -> Grant:
        """The grant if its MAC authenticates it, else :class:`IntegrityError` (``kind="manifest"``)."""
        fault = self.manifest_keys.fault(*entry)
        if fault is not None:
            raise grant_error(fault)
        return entry[0]

    def _grants_where(self, match: Callable[[Grant], bool]) -> list[Grant]:
        """The grants whose stored fields ``match``, each then authenticated (as the SQL catalog selects rows
        by their columns and authenticates those), oldest first."""
        with self._lock:
            entries = [entry for entry in self._grants.values() if match(entry[0])]
        found = [self._grant(entry) for entry in entries]
        return sorted(found, key=lambda g: (g.created_at, g.grant_id))

    def add_grant(self, grant: Grant) -> None:
        with self._lock:
            if grant.grant_id in self._grants:
                raise StorageError("the catalog failed: a grant with this id already exists")
            self._grants[grant.grant_id] = (grant, self.manifest_keys.sign(grant))

    def grants_for_artifact(self, owner: Scope, artifact_id: str) -> list[Grant]:
        return self._grants_where(lambda g: g.owner == owner and g.artifact_id == artifact_id)

    def find_grant(self, grantee: Scope, artifact_id: str, now: datetime) -> list[Grant]:
        found = self._grants_where(lambda g: g.artifact_id == artifact_id and _live_for(g, grantee, now))
        return [g for g in found if g.to.allows(grantee) and g.active(now)]

    def revoke_grant(self, owner: Scope, grant_id: str, at: datetime) -> Grant | None:
        with self._lock:
            entry = self._grants.get(grant_id)
            if entry is None or entry[0].owner != owner or entry[0].revoked_at is not None:
                return None
            revoked = replace(self._grant(entry), revoked_at=at)
            self._grants[grant_id] = (revoked, self.manifest_keys.sign(revoked))
            return revoked

    def shared_with(self, grantee: Scope, now: datetime) -> list[Grant]:
        found = self._grants_where(lambda g: _live_for(g, grantee, now))
        return [g for g in reversed(found) if g.to.allows(grantee) and g.active(now)]

    def audit_grants(self) -> Iterator[tuple[str, str | None]]:
        with self._lock:
            entries = sorted(self._grants.values(), key=lambda entry: (entry[0].created_at, entry[0].grant_id))
        return iter([(grant.artifact_id, self.manifest_keys.fault(grant, mac)) for grant, mac in entries])

    def get_setting(self, name: str) -> str | None:
        with self._lock:
            return self._settings.get(name)

    def swap_setting(self, name: str, expected: str | None, value: str) -> bool:
        with self._lock:
            if self._settings.get(name) != expected:
                return False
            self._settings[name] = value
            return True

    # -- the audit log -------------------------------------------------------------

    def append_audit(self, entries: Sequence[AuditEntry]) -> list[AuditEntry]:
        with self._lock:
            return self._append_audit(entries)

    def _append_audit(self, entries: Sequence[AuditEntry]) -> list[AuditEntry]:
        stored: list[AuditEntry] = []
        for tenant, drafts in by_tenant(entries):
            chain = self._audit.setdefault(tenant, [])
            head = (chain[-1].seq, chain[-1].hash) if chain else (0, GENESIS)
            sealed = seal_all(drafts, head)
            chain.extend(sealed)
            stored.extend(sealed)
        return stored

    def audit_entries(
        self, tenant: str, *, after: int = 0, upto: int | None = None, artifact_id: str | None = None
    ) -> Iterator[AuditEntry]:
        with self._lock:
            chain = list(self._audit.get(tenant, ()))
        return iter(
            [
                entry
                for entry in chain
                if entry.seq > after
                and (upto is None or entry.seq <= upto)
                and (artifact_id is None or entry.artifact_id == artifact_id)
            ]
        )

    def audit_head(self, tenant: str) -> tuple[int, str]:
        with self._lock:
            chain = self._audit.get(tenant)
            return (chain[-1].seq, chain[-1].hash) if chain else (0, GENESIS)

    def audit_tenants(self) -> list[str]:
        with self._lock:
            return sorted(self._audit)

    # -- derived copies -------------------------------------------------------------

    def by_ids(self, tenant: str, ids: Sequence[str]) -> dict[str, Manifest]:
        with self._lock:
            rows = [self._rows.get(i) for i in dict.fromkeys(ids)]
        return {
            row.manifest.artifact_id: self._manifest(row)
            for row in rows
            if row is not None and row.manifest.scope.tenant == tenant
        }

    def lineage_rows(self, tenant: str, ids: Sequence[str]) -> dict[str, LineageRow]:
        with self._lock:
            rows = [self._rows.get(i) for i in dict.fromkeys(ids)]
        return {
            m.artifact_id: LineageRow(
                m.artifact_id, m.scope.user, m.scope.session, m.digest, m.size, m.derived_from, m.origin
            )
            for m in (row.manifest for row in rows if row is not None)
            if m.scope.tenant == tenant
        }

    def derived_ids(self, tenant: str, sources: Sequence[str]) -> list[tuple[str, str]]:
        wanted = set(sources)
        with self._lock:
            return sorted((s, d) for t, s, d in self._lineage if t == tenant and s in wanted)

    def marks(self, tenant: str, ids: Sequence[str]) -> dict[str, Mark]:
        with self._lock:
            return {i: self._marks[(tenant, i)] for i in ids if (tenant, i) in self._marks}

    def _put_mark(self, mark: Mark) -> Mark:
        held = self._marks.get((mark.tenant, mark.artifact_id))
        if held is not None and mark_rank(mark.state) < mark_rank(held.state):
            return held
        self._marks[(mark.tenant, mark.artifact_id)] = mark
        return mark

    def set_mark(self, mark: Mark, *, audit: AuditEntry | None = None) -> Mark:
        with self._lock:
            kept = self._put_mark(mark)
            if audit is not None:
                self._append_audit([audit])
            return kept

    def _held(self, tenant: str, artifact_id: str) -> bool:
        return any(t == tenant and a == artifact_id for t, a, _ in self._holds)

    def holds(self, tenant: str, ids: Sequence[str]) -> list[Hold]:
        wanted = set(ids)
        with self._lock:
            found = [h for (t, a, _), h in self._holds.items() if t == tenant and a in wanted]
        return sorted(found, key=lambda h: (h.at, h.hold_id))

    def add_hold(self, hold: Hold, *, audit: AuditEntry | None = None) -> None:
        with self._lock:
            self._holds[(hold.tenant, hold.artifact_id, hold.hold_id)] = hold
            if audit is not None:
                self._append_audit([audit])

    def add_evidence(self, record: EvidenceRecord, *, audit: AuditEntry | None = None) -> EvidenceRecord:
        with self._lock:
            stored = replace(record, seq=len(self._evidence) + 1)
            self._evidence.append(stored)
            if audit is not None:
                self._append_audit([audit])
            return stored

    def evidence_records(self, tenant: str, user: str, session: str, *, limit: int) -> list[EvidenceRecord]:
        with self._lock:
            run = [r for r in self._evidence if (r.tenant, r.user, r.session) == (tenant, user, session)]
        return run[:limit]

    def release_hold(self, tenant: str, artifact_id: str, hold_id: str, *, audit: AuditEntry | None = None) -> bool:
        with self._lock:
            if self._holds.pop((tenant, artifact_id, hold_id), None) is None:
                return False
            if audit is not None:
                self._append_audit([audit])
            return True

    def remove(
        self, removals: Sequence[tuple[Scope, str]], states: Sequence[Mark], audit: Sequence[AuditEntry]
    ) -> list[str]:
        by_id = {m.artifact_id: m for m in states}
        with self._lock:
            deleted: list[str] = []
            for scope, artifact_id in removals:
                row = self._rows.get(artifact_id)
                if row is None or row.manifest.scope != scope or self._held(scope.tenant, artifact_id):
                    continue
                del self._rows[artifact_id]
                deleted.append(artifact_id)
                if artifact_id in by_id:
                    self._put_mark(by_id[artifact_id])
            gone = set(deleted)
            entries = [e for e in audit if e.artifact_id is None or e.artifact_id in gone]
            if deleted and entries:
                self._append_audit(entries)
            return deleted

    def live_grants(self, tenant: str, ids: Sequence[str]) -> list[str]:
        wanted = set(ids)
        with self._lock:
            return sorted(
                gid
                for gid, (g, _) in self._grants.items()
                if g.owner.tenant == tenant and g.artifact_id in wanted and g.revoked_at is None
            )

    def derivations_of_many(self, sources: Sequence[BlobKey]) -> dict[BlobKey, list[Derivation]]:
        wanted = set(sources)
        with self._lock:
            entries = [entry for (key, _), entry in self._derivations.items() if key in wanted]
        found: dict[BlobKey, list[Derivation]] = {}
        for derivation in sorted((self._derivation(e) for e in entries), key=lambda d: d.kind):
            found.setdefault(derivation.source, []).append(derivation)
        return found

    def is_referenced_by_artifact(self, key: BlobKey) -> bool:
        with self._lock:
            return self._by_artifact(key)

    def sessions(self, tenant: str, user: str, *, limit: int) -> list[str]:
        newest: dict[str, int] = {}
        with self._lock:
            for row in self._rows.values():
                owner = row.manifest.scope
                if owner.tenant == tenant and owner.user == user:
                    newest[owner.session] = max(newest.get(owner.session, 0), row.seq)
        return sorted(newest, key=lambda session: newest[session], reverse=True)[:limit]

    def stored_bytes(self, tenant: str, user: str | None = None, session: str | None = None) -> int:
        with self._lock:
            return sum(
                row.manifest.size
                for row in self._rows.values()
                if row.manifest.scope.tenant == tenant
                and (user is None or row.manifest.scope.user == user)
                and (session is None or row.manifest.scope.session == session)
            )

    def close(self) -> None:
        pass


def _live_for(grant: Grant, grantee: Scope, now: datetime) -> bool:
    """What the SQL catalog selects by: the grantee's tenant and user, not revoked, not expired (unauthenticated)."""
    return (
        grant.owner.tenant == grantee.tenant
        and grant.to.user == grantee.user
        and grant.revoked_at is None
        and (grant.expires_at is None or grant.expires_at > now)
    )


def _kept(record: BlobRecord, previous: BlobRecord | None) -> BlobRecord:
    """A re-published blob has the same bytes: keep the chunk digests and Merkle roots already derived."""
    if previous is None:
        return record
    if previous.chunk_digests:
        record = replace(record, chunk_size=previous.chunk_size, chunk_digests=previous.chunk_digests)
    if previous.merkle_root is not None:
        record = replace(record, merkle_root=previous.merkle_root, chunk_roots=previous.chunk_roots)
    return record
