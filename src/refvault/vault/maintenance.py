"""The vault's maintenance (mixed into :class:`refvault.Vault`): ``verify``, ``gc``, ``rotate_manifest_key``.

* ``verify`` checks every manifest row's MAC and re-hashes every blob (and every grant row's MAC); it reports
  problems by artifact id and never repairs.
* ``gc`` removes expired artifacts, then blobs unreferenced for the grace period, under the catalog's write
  lock, so it never removes a blob a concurrent put is publishing.
* A key rotation never launders an edited row: rows that fail their MAC stay failing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from refvault.blobs.base import BlobKey, BlobStore
from refvault.errors import IntegrityError, InvalidArgument, StorageError, shown_id
from refvault.model import Scope
from refvault.vault.grants import grant_problems
from refvault.vault.reports import GcReport, KeyRotation, Problem, VerifyReport
from refvault.vault.verified import VerifiedBlob

if TYPE_CHECKING:
    from refvault.catalog.base import Catalog

__all__ = ["MAX_GRACE", "Maintenance", "check_grace"]


class Maintenance:
    """The maintenance methods of :class:`refvault.Vault` (mixed in)."""

    if TYPE_CHECKING:
        catalog: Catalog
        blobs: BlobStore
        grace: float
        clock: Callable[[], datetime]
        _closed: bool
        _attach_lock: threading.Lock
        _attachments: dict[str, Any]

        def _apply_retention(self, now: datetime, dry_run: bool) -> list[str]: ...

    def verify(self, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
        """Check every manifest row's MAC, then re-read and re-hash every blob; report problems with artifact ids.

        Every row is checked: one that fails its MAC is a ``manifest`` problem, one
        whose blob key is outside its tenant's namespace a ``misplaced`` one, and the
        blob of every row that can be decoded is looked for in the row's own tenant's
        namespace (``missing``/``corrupt``), whatever the row's namespace column says.
        ``progress(done_bytes, total_bytes)`` is called as blobs are checked. A
        blob that goes missing because its artifacts were deleted and collected
        while ``verify`` ran is not a problem and is not reported.
        """
        if self._closed:
            raise StorageError("this vault is closed")
        by_key: dict[BlobKey, list[str]] = {}
        sizes: dict[BlobKey, int] = {}
        owners: dict[BlobKey, list[tuple[Scope, str]]] = {}
        report = VerifyReport()
        for row in self.catalog.audit():
            report.artifacts += 1
            shown = shown_id(row.artifact_id)
            digest = row.digest if _is_digest(row.digest) else ""
            if row.fault is not None:
                detail = f"artifact {shown} failed verification: {row.fault}"
                report.problems.append(Problem("manifest", digest, detail, (shown,)))
            m = row.manifest
            if m is None or not digest:
                continue
            if row.namespace != m.key.namespace:
                detail = f"artifact {shown} failed verification: its blob key is in another tenant's namespace"
                report.problems.append(Problem("misplaced", digest, detail, (shown,)))
            by_key.setdefault(m.key, []).append(shown)
            owners.setdefault(m.key, []).append((m.scope, m.artifact_id))
            sizes[m.key] = m.size
        for d, source, fault in self.catalog.audit_derivations():  # named by the artifacts of its source
            names = by_key.get(source, []) if source is not None else []
            if fault is not None:
                detail = f"a derivation failed verification: {fault}"
                digest = source.digest if source is not None else ""
                report.problems.append(Problem("manifest", digest, detail, tuple(sorted(set(names))) or ("(derived)",)))
            if d is not None:
                by_key.setdefault(d.key, []).extend(names)
                sizes[d.key] = d.size
        total = sum(sizes.values())
        for key in sorted(by_key):
            ids = tuple(sorted(set(by_key[key])))
            problem = self._check_blob(key, sizes[key], ids or ("(derived)",))
            if problem is not None and (problem.kind != "missing" or self._still_named(key, owners.get(key, []))):
                report.problems.append(problem)
            report.blobs_checked += 1
            report.bytes_checked += sizes[key]
            if progress is not None:
                progress(report.bytes_checked, total)
        report.problems.extend(grant_problems(self.catalog))  # grant rows are trusted state too
        report.grace = self.grace
        _, old = self._unreferenced(self.grace)
        wait = 0.0
        for key in iter(self.blobs.keys()):
            if key in by_key:
                continue
            report.unreferenced += 1
            age = self.blobs.age(key)
            if key not in old or (age is not None and age < self.grace):  # what gc keeps (see _unreferenced)
                report.unreferenced_in_grace += 1
                wait = max(wait, self.grace - (age or 0.0))
        if report.unreferenced_in_grace:
            report.collectable_after = self.clock() + timedelta(seconds=wait)
        return report

    def _unreferenced(self, grace: float) -> tuple[set[BlobKey], set[BlobKey]]:
        """gc's rule, which ``verify`` reports by: (every unreferenced blob, those unreferenced for ``grace``).

        A blob is unreferenced when no artifact or derivation names it (a file without a catalog
        record too); gc removes one whose record is older than ``grace`` and whose stored bytes are too.
        """
        orphans = {key for key in iter(self.blobs.keys()) if not self.catalog.has_blob(key)}
        return set(self.catalog.unreferenced(0)) | orphans, set(self.catalog.unreferenced(grace)) | orphans

    def _still_named(self, key: BlobKey, owners: Sequence[tuple[Scope, str]]) -> bool:
        """Whether a missing blob is still named by a row or a derivation (not deleted and collected meanwhile).

        Asked of the rows themselves, not only of the catalog's blob references, which
        follow the rows' namespace column: a row moved to another tenant still counts.
        """
        if self.catalog.is_referenced(key):
            return True
        for scope, artifact_id in owners:
            try:
                if self.catalog.find(scope, artifact_id) is not None:
                    return True
            except IntegrityError:
                return True  # the row is still there (and reported as a manifest problem)
        return False

    def _check_blob(self, key: BlobKey, size: int, ids: tuple[str, ...]) -> Problem | None:
        try:
            blob = VerifiedBlob(ids[0], key, size, self.catalog, self.blobs)
        except IntegrityError as exc:
            return Problem(exc.kind, key.digest, str(exc), ids)
        try:
            blob.check()
        except IntegrityError as exc:
            return Problem(exc.kind, key.digest, str(exc), ids)
        finally:
            blob.close()
        return None

    def rotate_manifest_key(self, *, drop_retired: bool = False) -> KeyRotation:
        """Make a fresh manifest key current, then MAC every authentic row again with it.

        Rows MAC'd with the old key keep verifying throughout (the old key stays in the
        ring, retired). Rows that fail their MAC are left as they are: a rotation never
        launders an edit. With ``drop_retired``, the retired keys are then removed if no
        authentic row still uses one: from then on a row MAC'd with one fails. The ring
        is rewritten where it is kept (``manifest-keys.json``, ``$REFVAULT_MANIFEST_KEY_FILE``);
        a ring given in ``$REFVAULT_MANIFEST_KEY`` cannot be rotated here (:class:`StorageError`).
        """
        if self._closed:
            raise StorageError("this vault is closed")
        key_id = self.catalog.rotate_manifest_key()
        remacd, failing = self.catalog.remac()
        dropped: tuple[str, ...] | None = ()
        if drop_retired:
            gone = self.catalog.drop_retired_manifest_keys()
            dropped = None if gone is None else tuple(gone)
        return KeyRotation(key_id, remacd, failing, dropped)

    def gc(self, *, grace: float | None = None, dry_run: bool = False) -> GcReport:
        """Remove expired artifacts, then blobs and temporaries unreferenced for ``grace`` seconds.

        Collection runs under the catalog's write lock, so it never removes a
        blob a concurrent put is publishing.
        """
        if self._closed:
            raise StorageError("this vault is closed")
        grace = self.grace if grace is None else grace
        check_grace(grace)
        report = GcReport(dry_run=dry_run, grace=grace)
        now = self.clock()
        if dry_run:  # what delete_expired would remove: rows by their expiry, authentic or not, unless held
            report.expired = [
                row.artifact_id
                for row in self.catalog.audit()
                if row.manifest is not None
                and row.manifest.expires_at is not None
                and row.manifest.expires_at <= now
                and not self.catalog.holds(row.manifest.scope.tenant, [row.artifact_id])
            ]
        else:
            report.expired = self.catalog.delete_expired(now)
        report.expired += [i for i in self._apply_retention(now, dry_run) if i not in report.expired]
        unreferenced, candidates = self._unreferenced(grace)
        gone = self._collect(sorted(candidates), grace, dry_run, report)
        if report.blobs_removed and not dry_run:
            # Collecting a source drops its derivations: collect the derivatives it orphaned now.
            self._collect(sorted(self.catalog.unreferenced(grace)), grace, dry_run, report)
        report.blobs_kept = len(unreferenced - gone)
        report.temporaries_removed = self.blobs.sweep_temp(grace, dry_run=dry_run)
        if not dry_run:
            with self._attach_lock:
                attachments = list(self._attachments.values())
            for attachment in attachments:  # e.g. local copies of collected derivatives
                after_gc = getattr(attachment, "after_gc", None)
                if callable(after_gc):
                    after_gc(self)
        return report

    def _collect(self, candidates: Sequence[BlobKey], grace: float, dry_run: bool, report: GcReport) -> set[BlobKey]:
        """Collect (or, dry, count) the candidates old enough; return those removed, would be, or failed."""
        gone: set[BlobKey] = set()
        for key in candidates:
            if dry_run:
                age = self.blobs.age(key)
                if age is None or age >= grace:
                    report.blobs_removed += 1
                    gone.add(key)
                continue
            try:
                if self.catalog.collect(key, grace, self._remover(key, grace)):
                    report.blobs_removed += 1
                    gone.add(key)
            except StorageError:
                report.failures += 1  # one unremovable blob must not stop collection of the rest
                gone.add(key)
        return gone

    def _remover(self, key: BlobKey, grace: float) -> Callable[[], bool]:
        def remove() -> bool:
            age = self.blobs.age(key)
            if age is not None and age < grace:
                return False
            self.blobs.delete(key)
            return True

        return remove


MAX_GRACE = 100 * 365 * 86400.0


def check_grace(grace: object) -> None:
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 <= grace <= MAX_GRACE:
        raise InvalidArgument("grace must be a number of seconds between 0 and 100 years")


def _is_digest(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
