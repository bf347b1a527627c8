"""Moving content between stores: a whole store (:func:`migrate_store`), or one tenant through a verified
bundle file (:func:`refvault.vault.bundles.export_tenant`, :func:`refvault.vault.bundles.import_bundle`).

Invariants:

* **Same ids, same bytes.** Every artifact keeps its id, scope, content hash, metadata, labels, lineage
  (``derived_from``, ``origin``) and creation time. Blob keys are the same on both sides (a tenant's namespace
  depends on its name only).
* **Re-verified as copied.** Every blob's bytes are hashed while they stream from the source (1 MiB at a
  time: memory stays bounded whatever the size) and compared with the artifact's content hash before the
  copy is sealed; a mismatch (or a missing blob) is an :class:`~refvault.errors.IntegrityError` naming the
  artifact id, and nothing of that artifact is published at the destination. Every row is read through the
  source catalog's authentication (a row that fails its MAC stops the move the same way).
* **Re-MAC'd at the destination.** Artifact, derivation and grant rows are written through the destination
  catalog, which signs them with *its* manifest key: the two stores need not share one.
* **The audit chain is carried entry by entry.** Entries keep their ``seq``, time and fields, so every hash
  is the same and ``verify_audit()`` passes at the destination (an anchored head stays valid). A destination
  chain that is not a prefix of the source's stops the move (:class:`~refvault.errors.IntegrityError`).
* **Resumable and idempotent.** Everything already at the destination is skipped (artifacts by id,
  derivations by source and kind, grants, holds, API keys by id, settings that are equal, audit entries up
  to the destination's head), so running again after a kill completes the move and duplicates nothing.
  Nothing is ever deleted at the source.
* **Bundles are verified before anything is published.** :func:`import_bundle` first reads the whole file:
  every blob's digest and size, the audit chain's hashes and every row must check, or nothing is imported
  (:class:`~refvault.errors.IntegrityError`). A bundle carries no secret and no MAC: it detects damage and
  edits of blobs or audit entries, not a forger who rewrites the bundle's listing consistently; treat a
  bundle like the store it came from.

What moves: artifacts and their blobs, derivations (internal derived data), sharing grants, marks and holds
of the artifacts moved, API keys (hashed secrets: a key keeps authenticating), each tenant's policy, and the
audit chains. :func:`migrate_store` also moves the store-wide key rings of cursors, capability links and
console sign-in links (``cursor-keys``, ``link-keys``, ``console-keys``) so outstanding tokens keep working;
a tenant bundle carries none of them. Not moved: run budgets and evidence records (a run's own counters),
lineage index rows of artifacts deleted before the move, and single-use console links already spent.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from refvault.blobs.base import BlobKey, BlobWriter
from refvault.catalog.audit_log import AuditEntry, chain_hash
from refvault.catalog.base import CHUNK_SIZE, ApiKey, BlobRecord, Derivation, Manifest, Publication
from refvault.copies import Hold, Mark
from refvault.errors import IntegrityError, RefvaultError, StorageError
from refvault.keyring import KeyRing
from refvault.model import Grant
from refvault.vault.authority import policy_setting

if TYPE_CHECKING:
    from refvault.vault.core import Vault

__all__ = ["BUNDLE_FORMAT", "RING_NAMES", "TransferReport", "migrate_store"]

RING_NAMES = ("cursor-keys", "link-keys", "console-keys")
"""The store-wide key rings :func:`migrate_store` moves (an embedded store's ``<name>.json``, else a setting)."""

BUNDLE_FORMAT = "refvault-bundle/1"
_LISTING = "refvault-bundle.json"
_AUDIT = "audit.jsonl"
_BATCH_ITEMS = 64
_BATCH_BYTES = 32 << 20
_AUDIT_BATCH = 1000

_HEX64 = re.compile(r"[0-9a-f]{64}")

Progress = Callable[[int, int], None]


@dataclass(slots=True)
class TransferReport:
    """What one move did. ``*_present`` counts what the destination already held (skipped)."""

    artifacts_copied: int = 0
    artifacts_present: int = 0
    bytes_copied: int = 0
    derivations_copied: int = 0
    grants_copied: int = 0
    holds_copied: int = 0
    marks_copied: int = 0
    api_keys_copied: int = 0
    settings_copied: int = 0
    settings_kept: list[str] = field(default_factory=list)
    """Key rings the destination already held with other keys (kept: its own tokens stay valid)."""
    audit_entries_copied: int = 0
    tenants: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


# -- what a move reads from ------------------------------------------------------------------


class _Source:
    """What a move copies: a store's (optionally one tenant's) content. Subclassed for a store and a bundle."""

    def manifests(self) -> list[Manifest]:
        raise NotImplementedError

    def blob(self, key: BlobKey) -> tuple[int, int, bool]:
        """``(size, chunk_size, inline)`` of a blob the source lists (IntegrityError ``missing`` if none)."""
        raise NotImplementedError

    def chunks(self, key: BlobKey) -> Iterator[bytes]:
        raise NotImplementedError

    def derivations(self) -> list[Derivation]:
        raise NotImplementedError

    def grants(self, manifest: Manifest) -> list[Grant]:
        raise NotImplementedError

    def marks(self, tenant: str, ids: Sequence[str]) -> list[Mark]:
        raise NotImplementedError

    def holds(self, tenant: str, ids: Sequence[str]) -> list[Hold]:
        raise NotImplementedError

    def api_keys(self) -> list[ApiKey]:
        raise NotImplementedError

    def settings(self) -> dict[str, str]:
        raise NotImplementedError

    def rings(self) -> dict[str, str]:
        return {}

    def audit_tenants(self) -> list[str]:
        raise NotImplementedError

    def audit_entries(self, tenant: str, after: int) -> Iterator[AuditEntry]:
        raise NotImplementedError


class _StoreSource(_Source):
    def __init__(self, vault: Vault, tenant: str | None) -> None:
        self.vault = vault
        self.catalog = vault.catalog
        self.tenant = tenant
        self._manifests = [m for m in self.catalog.manifests() if tenant is None or m.scope.tenant == tenant]

    def _tenants(self) -> list[str]:
        if self.tenant is not None:
            return [self.tenant]
        found = {m.scope.tenant for m in self._manifests} | set(self.catalog.audit_tenants())
        return sorted(found | {key.tenant for key in self.catalog.api_keys()})

    def manifests(self) -> list[Manifest]:
        return self._manifests

    def _record(self, key: BlobKey) -> BlobRecord:
        record = self.catalog.blob(key)
        if record is None:
            raise IntegrityError("the source store has no record of a blob", kind="missing")
        return record

    def blob(self, key: BlobKey) -> tuple[int, int, bool]:
        record = self._record(key)
        return record.size, record.chunk_size, record.inline is not None

    def chunks(self, key: BlobKey) -> Iterator[bytes]:
        record = self._record(key)
        if record.inline is not None:
            yield record.inline
            return
        reader = self.vault.blobs.open(key)
        if reader is None:
            raise IntegrityError("the source store's blob is missing", kind="missing")
        try:
            offset = 0
            while True:
                data = reader.read(offset, CHUNK_SIZE)
                if not data:
                    return
                offset += len(data)
                yield data
        finally:
            reader.close()

    def derivations(self) -> list[Derivation]:
        spaces = {m.key.namespace for m in self._manifests}
        return [d for d in self.catalog.derivations() if d.source.namespace in spaces]

    def grants(self, manifest: Manifest) -> list[Grant]:
        return self.catalog.grants_for_artifact(manifest.scope, manifest.artifact_id)

    def marks(self, tenant: str, ids: Sequence[str]) -> list[Mark]:
        return list(self.catalog.marks(tenant, ids).values())

    def holds(self, tenant: str, ids: Sequence[str]) -> list[Hold]:
        return self.catalog.holds(tenant, ids)

    def api_keys(self) -> list[ApiKey]:
        return self.catalog.api_keys(self.tenant)

    def settings(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for tenant in self._tenants():
            name = policy_setting(tenant)
            value = self.catalog.get_setting(name)
            if value is not None:
                found[name] = value
        return found

    def rings(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for name in RING_NAMES:
            text = _ring_text(self.vault, name)
            if text is not None:
                found[name] = text
        return found

    def audit_tenants(self) -> list[str]:
        tenants = self.catalog.audit_tenants()
        return [t for t in tenants if self.tenant is None or t == self.tenant]

    def audit_entries(self, tenant: str, after: int) -> Iterator[AuditEntry]:
        return self.catalog.audit_entries(tenant, after=after)


def _ring_text(vault: Vault, name: str) -> str | None:
    if vault.location is not None:
        path = vault.location / f"{name}.json"
        try:
            return KeyRing.load(path, what=name).to_json()
        except FileNotFoundError:
            return None
    return vault.catalog.get_setting(name)


# -- writing into a destination ------------------------------------------------------------------


@dataclass(slots=True)
class _Pending:
    manifest: Manifest
    record: BlobRecord
    writer: BlobWriter | None


def _publisher(writer: BlobWriter | None, key: BlobKey) -> Callable[[], None]:
    def make_visible() -> None:
        if writer is not None:
            writer.publish(key)

    return make_visible


def _corrupt(what: str, kind: str = "corrupt") -> IntegrityError:
    return IntegrityError(f"{what}: its bytes do not match its content hash; nothing of it was copied", kind=kind)


class _Writer:
    """Copies a :class:`_Source` into a destination vault (see the module docstring)."""

    def __init__(self, destination: Vault, source: _Source, progress: Progress | None) -> None:
        self.dest = destination
        self.catalog = destination.catalog
        self.source = source
        self.progress = progress
        self.report = TransferReport()
        self._done = 0
        self._total = 0
        self._batch: list[_Pending] = []
        self._batch_bytes = 0

    def _advance(self, size: int) -> None:
        self._done += size
        if self.progress is not None:
            self.progress(self._done, self._total)

    def run(self, *, rings: bool) -> TransferReport:
        manifests = self.source.manifests()
        derivations = self.source.derivations()
        self._total = sum(m.size for m in manifests) + sum(d.size for d in derivations)
        self.report.tenants = sorted({m.scope.tenant for m in manifests} | set(self.source.audit_tenants()))
        self._settings(rings=rings)
        self._api_keys()
        self._artifacts(manifests)
        self._derivations(derivations)
        self._authority(manifests)
        self._audit()
        return self.report

    # -- bytes --

    def _copy_bytes(self, key: BlobKey, what: str) -> tuple[BlobRecord, BlobWriter | None]:
        """The destination's record of ``key``: already there, or copied now (verified, sealed, not yet visible)."""
        present = self.catalog.blob(key)
        if present is not None and (present.inline is not None or self.dest.blobs.exists(key)):
            return present, None
        size, chunk_size, inline = self.source.blob(key)
        digest = hashlib.sha256()
        seen = 0
        if inline:
            data = b"".join(self._stream(key, what))
            digest.update(data)
            if digest.hexdigest() != key.digest or len(data) != size:
                raise _corrupt(what)
            return BlobRecord(key, size, chunk_size, b"", inline=data), None
        writer = self.dest.blobs.writer()
        try:
            for data in self._stream(key, what):
                digest.update(data)
                seen += len(data)
                writer.write(data)
            if digest.hexdigest() != key.digest or seen != size:
                raise _corrupt(what)
            writer.seal(key)
        except BaseException:
            writer.abort()
            raise
        return BlobRecord(key, size, chunk_size, b""), writer

    def _stream(self, key: BlobKey, what: str) -> Iterator[bytes]:
        try:
            yield from self.source.chunks(key)
        except IntegrityError as exc:
            raise _corrupt(what, exc.kind) from None

    # -- artifacts --

    def _artifacts(self, manifests: list[Manifest]) -> None:
        for start in range(0, len(manifests), 500):
            chunk = manifests[start : start + 500]
            present: set[str] = set()
            for tenant in {m.scope.tenant for m in chunk}:
                present |= set(self.catalog.by_ids(tenant, [m.artifact_id for m in chunk if m.scope.tenant == tenant]))
            for m in chunk:
                if m.artifact_id in present:
                    self.report.artifacts_present += 1
                    self._advance(m.size)
                    continue
                try:
                    record, writer = self._copy_bytes(m.key, f"artifact {m.artifact_id}")
                except BaseException:
                    with contextlib.suppress(RefvaultError):
                        self._flush()  # what was copied before it is kept
                    raise
                self._batch.append(_Pending(m, record, writer))
                self._batch_bytes += 0 if writer is None else m.size
                if len(self._batch) >= _BATCH_ITEMS or self._batch_bytes >= _BATCH_BYTES:
                    self._flush()
        self._flush()

    def _flush(self) -> None:
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        if not batch:
            return

        def make_visible() -> None:
            for item in batch:
                if item.writer is not None:
                    item.writer.publish(item.record.key)

        try:
            results = self.catalog.publish([Publication(p.manifest, p.record) for p in batch], make_visible)
        except BaseException:
            for item in batch:
                if item.writer is not None:
                    item.writer.abort()
            raise
        for item, result in zip(batch, results, strict=True):
            if isinstance(result, RefvaultError):
                raise result
            if result.artifact_id != item.manifest.artifact_id:
                raise StorageError(
                    f"artifact {item.manifest.artifact_id}: the destination already holds another artifact under its "
                    "idempotency key in the same scope"
                )
            self.report.artifacts_copied += 1
            self.report.bytes_copied += item.manifest.size
            self._advance(item.manifest.size)

    def _derivations(self, derivations: list[Derivation]) -> None:
        for d in derivations:
            if self.catalog.derivation(d.source, d.kind) is not None:
                self._advance(d.size)
                continue
            record, writer = self._copy_bytes(d.key, f"derived data ({d.kind}) of a blob")
            visible = _publisher(writer, d.key)
            try:
                stored = self.catalog.publish_derivation(d, record, visible)
            except BaseException:
                if writer is not None:
                    writer.abort()
                raise
            if stored is not None:
                self.report.derivations_copied += 1
                self.report.bytes_copied += d.size
            self._advance(d.size)

    # -- the small records --

    def _authority(self, manifests: list[Manifest]) -> None:
        by_tenant: dict[str, list[str]] = {}
        for m in manifests:
            by_tenant.setdefault(m.scope.tenant, []).append(m.artifact_id)
            held = {g.grant_id for g in self.catalog.grants_for_artifact(m.scope, m.artifact_id)}
            for grant in self.source.grants(m):
                if grant.grant_id not in held:
                    self.catalog.add_grant(grant)
                    self.report.grants_copied += 1
        for tenant, ids in by_tenant.items():
            for start in range(0, len(ids), 500):
                part = ids[start : start + 500]
                marks = self.catalog.marks(tenant, part)
                for mark in self.source.marks(tenant, part):
                    if marks.get(mark.artifact_id) != mark:
                        self.catalog.set_mark(mark)
                        self.report.marks_copied += 1
                holds = {(h.artifact_id, h.hold_id) for h in self.catalog.holds(tenant, part)}
                for hold in self.source.holds(tenant, part):
                    if (hold.artifact_id, hold.hold_id) not in holds:
                        self.catalog.add_hold(hold)
                        self.report.holds_copied += 1

    def _api_keys(self) -> None:
        for key in self.source.api_keys():
            there = self.catalog.find_api_key(key.key_id)
            if there is None:
                self.catalog.add_api_key(key)
                self.report.api_keys_copied += 1
            elif there.secret_hash != key.secret_hash or there.tenant != key.tenant or there.user != key.user:
                raise StorageError(f"API key {key.key_id}: the destination holds another key under the same id")
            elif key.revoked_at is not None and there.revoked_at is None:
                self.catalog.revoke_api_key(key.key_id, key.revoked_at)

    def _settings(self, *, rings: bool) -> None:
        for name, value in self.source.settings().items():
            current = self.catalog.get_setting(name)
            if current == value:
                continue
            if current is not None or not self.catalog.swap_setting(name, None, value):
                raise StorageError(f"the destination already holds a different {name.split(':')[0]} for a tenant moved")
            self.report.settings_copied += 1
        if not rings:
            return
        for name, text in self.source.rings().items():
            current = _ring_text(self.dest, name)
            if current == text:
                continue
            if current is not None:
                self.report.settings_kept.append(name)
                continue
            if self.dest.location is not None:
                KeyRing.from_json(text).save(self.dest.location / f"{name}.json", what=name)
            elif not self.catalog.swap_setting(name, None, text):
                self.report.settings_kept.append(name)
                continue
            self.report.settings_copied += 1

    def _audit(self) -> None:
        for tenant in self.source.audit_tenants():
            seq, head = self.catalog.audit_head(tenant)
            if seq:
                same = [e for e in self.source.audit_entries(tenant, seq - 1) if e.seq == seq][:1]
                if not same or same[0].hash != head:
                    raise IntegrityError(
                        f"the destination's audit chain of tenant {tenant!r} is not a prefix of the source's; "
                        "nothing more of it was copied",
                        kind="manifest",
                    )
            batch: list[AuditEntry] = []
            for entry in self.source.audit_entries(tenant, seq):
                batch.append(entry)
                if len(batch) >= _AUDIT_BATCH:
                    self._append(tenant, batch)
                    batch = []
            if batch:
                self._append(tenant, batch)

    def _append(self, tenant: str, batch: list[AuditEntry]) -> None:
        for entry in batch:
            if chain_hash(entry) != entry.hash:
                raise IntegrityError(
                    f"the source's audit entry {entry.seq} of tenant {tenant!r} does not match its hash",
                    kind="manifest",
                )
        stored = self.catalog.append_audit(batch)
        if [e.hash for e in stored] != [e.hash for e in batch]:
            raise IntegrityError(
                f"the audit chain of tenant {tenant!r} did not carry over from entry {batch[0].seq}", kind="manifest"
            )
        self.report.audit_entries_copied += len(batch)


# -- the public functions ------------------------------------------------------------------


def migrate_store(
    source: Vault, destination: Vault, *, tenant: str | None = None, progress: Progress | None = None
) -> TransferReport:
    """Copy every artifact, derivation, grant, mark, hold, API key, policy, key ring and audit entry of ``source``
    (of one ``tenant`` if given; then no key ring) into ``destination``, re-verifying every blob as it streams.

    Resumable and idempotent (see the module docstring): run it again after an interruption. ``progress`` is
    called with ``(bytes done, bytes in all)``. Open ``destination`` with ``audit=False`` so that the move itself
    appends nothing to the chains it copies. :class:`IntegrityError` naming the artifact if a blob does not
    match its content hash (nothing of that artifact is published).
    """
    return _Writer(destination, _StoreSource(source, tenant), progress).run(rings=tenant is None)
