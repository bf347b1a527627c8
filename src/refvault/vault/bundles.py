"""One tenant as a verified bundle file: :func:`export_tenant` writes it, :func:`import_bundle` reads it back.

The same invariants as :mod:`refvault.vault.transfer` (same ids and bytes, re-verified, re-MAC'd at the
destination, the audit chain carried entry by entry, idempotent), and: **a bundle is verified whole before
anything is published** (every blob's digest and size, the audit chain's hashes, every row of the bundle's
tenant, a complete tar), else :class:`~refvault.errors.IntegrityError` and nothing is imported. A bundle is an
uncompressed tar of ``refvault-bundle.json`` (the rows and digests), ``audit.jsonl`` and ``blobs/<digest>``;
it carries no secret, no MAC and no key ring (a tenant's links and cursors do not work at the destination).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tarfile
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import IO, TYPE_CHECKING, Any

from refvault.blobs.base import BlobKey
from refvault.catalog.audit_log import GENESIS, AuditEntry, chain_hash
from refvault.catalog.base import CHUNK_SIZE, ApiKey, Derivation, Manifest
from refvault.catalog.grant_rows import grant_of, grant_row
from refvault.catalog.macs import micros
from refvault.catalog.rows import api_key_of, api_key_row, artifact_row, decode_manifest, from_us
from refvault.copies import Hold, Mark
from refvault.errors import IntegrityError, InvalidArgument, RefvaultError, StorageError
from refvault.ids import namespace_of
from refvault.model import Grant, Scope
from refvault.vault.authority import policy_setting
from refvault.vault.transfer import (
    _AUDIT,
    _HEX64,
    _LISTING,
    BUNDLE_FORMAT,
    Progress,
    TransferReport,
    _corrupt,
    _Source,
    _StoreSource,
    _Writer,
)

if TYPE_CHECKING:
    from refvault.vault.core import Vault

__all__ = ["BUNDLE_FORMAT", "export_tenant", "import_bundle"]


def _manifest_json(m: Manifest) -> dict[str, Any]:
    row = artifact_row(m, "")
    del row["mac"]
    return row


def _grant_json(g: Grant) -> dict[str, Any]:
    row = grant_row(g, "")
    del row["mac"]
    return row


def _mark_json(mark: Mark) -> dict[str, Any]:
    owner = None if mark.owner is None else [mark.owner.tenant, mark.owner.user, mark.owner.session]
    return {
        "tenant": mark.tenant,
        "artifact_id": mark.artifact_id,
        "state": mark.state,
        "at_us": micros(mark.at),
        "by": mark.by,
        "rule": mark.rule,
        "reason_hash": mark.reason_hash,
        "content_hash": mark.content_hash,
        "size": mark.size,
        "owner": owner,
    }


def _mark_of(data: dict[str, Any]) -> Mark:
    owner = data["owner"]
    return Mark(
        tenant=data["tenant"],
        artifact_id=data["artifact_id"],
        state=data["state"],
        at=from_us(data["at_us"]),
        by=data["by"],
        rule=data["rule"],
        reason_hash=data["reason_hash"],
        content_hash=data["content_hash"],
        size=data["size"],
        owner=None if owner is None else Scope(*owner),
    )


def _hold_json(hold: Hold) -> dict[str, Any]:
    return {
        "tenant": hold.tenant,
        "artifact_id": hold.artifact_id,
        "hold_id": hold.hold_id,
        "reason": hold.reason,
        "at_us": micros(hold.at),
        "user": hold.user,
    }


def _derivation_json(d: Derivation) -> dict[str, Any]:
    return {"source_digest": d.source.digest, "kind": d.kind, "digest": d.digest, "size": d.size, "info": d.info}


class _HashingReader(io.RawIOBase):
    """A file over a source's chunks that checks their digest and size when the last byte is read."""

    def __init__(self, chunks: Iterator[bytes], key: BlobKey, size: int, what: str) -> None:
        self._chunks = chunks
        self._key = key
        self._size = size
        self._what = what
        self._hash = hashlib.sha256()
        self._seen = 0
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while not self._left:
            data = next(self._chunks, None)
            if data is None:
                return 0
            self._hash.update(data)
            self._seen += len(data)
            if self._seen == self._size and self._hash.hexdigest() != self._key.digest:
                raise _corrupt(self._what)
            if self._seen > self._size:
                raise _corrupt(self._what)
            self._left = data
        n = min(len(view), len(self._left))
        view[:n] = self._left[:n]
        self._left = self._left[n:]
        return n


def export_tenant(
    vault: Vault, tenant: str, path: str | os.PathLike[str], *, progress: Progress | None = None
) -> TransferReport:
    """Write every artifact, derivation, grant, mark, hold, API key, policy and audit entry of ``tenant`` to a
    bundle file at ``path`` (an uncompressed tar: ``refvault-bundle.json`` listing every row and digest, then
    ``audit.jsonl``, then one ``blobs/<digest>`` member per blob).

    Every blob is re-verified as it is written: :class:`IntegrityError` naming the artifact if one does not
    match, and then no file is left at ``path``. The file appears only once complete (written beside it, then
    renamed). The bundle holds no key ring and no manifest MAC (see the module docstring).
    """
    if not tenant or not isinstance(tenant, str):
        raise InvalidArgument("give the tenant to export")
    target = Path(path)
    source = _StoreSource(vault, tenant)
    manifests = source.manifests()
    derivations = source.derivations()
    blobs: dict[str, tuple[int, int, bool, str]] = {}
    for m in manifests:
        blobs.setdefault(m.digest, (*source.blob(m.key), f"artifact {m.artifact_id}"))
    for d in derivations:
        blobs.setdefault(d.digest, (*source.blob(d.key), f"derived data ({d.kind}) of a blob"))
    ids = [m.artifact_id for m in manifests]
    marks = [mark for start in range(0, len(ids), 500) for mark in source.marks(tenant, ids[start : start + 500])]
    holds = [hold for start in range(0, len(ids), 500) for hold in source.holds(tenant, ids[start : start + 500])]
    listing = {
        "format": BUNDLE_FORMAT,
        "tenant": tenant,
        "artifacts": [_manifest_json(m) for m in manifests],
        "blobs": [
            {"digest": digest, "size": size, "chunk_size": chunk, "inline": inline}
            for digest, (size, chunk, inline, _) in blobs.items()
        ],
        "derivations": [_derivation_json(d) for d in derivations],
        "grants": [_grant_json(g) for m in manifests for g in source.grants(m)],
        "marks": [_mark_json(mark) for mark in marks],
        "holds": [_hold_json(hold) for hold in holds],
        "api_keys": [api_key_row(key) for key in source.api_keys()],
        "settings": source.settings(),
    }
    report = TransferReport(tenants=[tenant])
    total = sum(size for size, _, _, _ in blobs.values())
    done = 0
    try:
        fd, temp = tempfile.mkstemp(prefix=".refvault-bundle-", dir=target.parent)
    except OSError as exc:
        raise StorageError(exc.errno or 0, f"cannot write the bundle there: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as file, tarfile.open(fileobj=file, mode="w", format=tarfile.PAX_FORMAT) as tar:
            _add_bytes(tar, _LISTING, json.dumps(listing, sort_keys=True).encode())
            with tempfile.TemporaryFile() as audit:
                for entry in source.audit_entries(tenant, 0) if tenant in source.audit_tenants() else ():
                    audit.write(json.dumps(list(entry)).encode() + b"\n")
                    report.audit_entries_copied += 1
                info = tarfile.TarInfo(_AUDIT)
                info.size = audit.tell()
                audit.seek(0)
                tar.addfile(info, audit)
            namespace = namespace_of(tenant)
            for digest, (size, _, _, what) in blobs.items():
                key = BlobKey(namespace, digest)
                info = tarfile.TarInfo(f"blobs/{digest}")
                info.size = size
                reader = _HashingReader(source.chunks(key), key, size, what)
                try:
                    tar.addfile(info, io.BufferedReader(reader, CHUNK_SIZE))
                except IntegrityError as exc:
                    if exc.kind == "missing":
                        raise _corrupt(what, "missing") from None
                    raise
                except OSError as exc:  # tarfile: the source ended early
                    if isinstance(exc, RefvaultError):
                        raise
                    raise _corrupt(what) from None
                done += size
                report.bytes_copied += size
                if progress is not None:
                    progress(done, total)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    report.artifacts_copied = len(manifests)
    report.derivations_copied = len(derivations)
    report.grants_copied = len(listing["grants"])
    report.marks_copied = len(marks)
    report.holds_copied = len(holds)
    report.api_keys_copied = len(listing["api_keys"])
    report.settings_copied = len(listing["settings"])
    return report


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _bad_bundle(problem: str) -> IntegrityError:
    return IntegrityError(f"the bundle failed verification: {problem}; nothing was imported", kind="corrupt")


class _BundleSource(_Source):
    """A bundle file, verified whole (:meth:`check`) before anything is read from it to be published."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        try:
            tar.getmembers()  # reads every header now: a truncated or mangled file fails here
        except (tarfile.TarError, EOFError):
            raise _bad_bundle("it is not a complete tar file") from None
        member = self._member(_LISTING)
        try:
            with self._open(member) as file:
                listing = json.loads(file.read())
            if not isinstance(listing, dict) or listing.get("format") != BUNDLE_FORMAT:
                raise _bad_bundle("it is not a refvault bundle of this version")
            self.tenant: str = listing["tenant"]
            self.namespace = namespace_of(self.tenant)
            self._manifests = [decode_manifest(SimpleNamespace(**row)) for row in listing["artifacts"]]
            self._blobs: dict[str, tuple[int, int, bool]] = {
                b["digest"]: (int(b["size"]), int(b["chunk_size"]), bool(b["inline"])) for b in listing["blobs"]
            }
            self._derivations = [
                Derivation(
                    BlobKey(self.namespace, d["source_digest"]), d["kind"], d["digest"], int(d["size"]), d["info"]
                )
                for d in listing["derivations"]
            ]
            self._grants = [grant_of(SimpleNamespace(**row)) for row in listing["grants"]]
            self._marks = [_mark_of(row) for row in listing["marks"]]
            self._holds = [
                Hold(h["tenant"], h["artifact_id"], h["hold_id"], h["reason"], from_us(h["at_us"]), h["user"])
                for h in listing["holds"]
            ]
            self._keys = [api_key_of(SimpleNamespace(**row)) for row in listing["api_keys"]]  # type: ignore[arg-type]
            self._settings = {str(k): str(v) for k, v in dict(listing["settings"]).items()}
        except IntegrityError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError):
            raise _bad_bundle("its listing cannot be read") from None

    def _member(self, name: str) -> tarfile.TarInfo:
        try:
            member = self.tar.getmember(name)
        except KeyError:
            raise _bad_bundle(f"it has no {name}") from None
        if not member.isfile():
            raise _bad_bundle(f"its {name} is not a file")
        return member

    def _open(self, member: tarfile.TarInfo) -> IO[bytes]:
        file = self.tar.extractfile(member)
        if file is None:
            raise _bad_bundle(f"its {member.name} cannot be read")
        return file

    def check(self) -> None:
        """Verify everything: each row's tenant and blob, each blob's digest and size, the audit chain."""
        tenant = self.tenant
        for m in self._manifests:
            if m.scope.tenant != tenant or m.digest not in self._blobs:
                raise _bad_bundle(f"artifact {m.artifact_id} is not the bundle's or has no blob in it")
            if self._blobs[m.digest][0] != m.size:
                raise _bad_bundle(f"artifact {m.artifact_id}'s size does not match its blob")
        rows: Iterable[Any] = (*self._grants, *self._marks, *self._holds, *self._keys)
        for row in rows:
            owner = row.owner.tenant if isinstance(row, Grant) else row.tenant
            if owner != tenant:
                raise _bad_bundle("a row belongs to another tenant")
        for d in self._derivations:
            if d.digest not in self._blobs or d.source.digest not in self._blobs:
                raise _bad_bundle("a derivation has no blob in it")
        for name in self._settings:
            if name != policy_setting(tenant):
                raise _bad_bundle("it holds a setting that is not the tenant's policy")
        for digest, (size, _, _) in self._blobs.items():
            if _HEX64.fullmatch(digest) is None:
                raise _bad_bundle("it lists a blob whose digest is not 64 hex characters")
            member = self._member(f"blobs/{digest}")
            if member.size != size:
                raise _bad_bundle(f"blob {digest[:16]} has the wrong size")
            hasher = hashlib.sha256()
            with self._open(member) as file:
                while data := file.read(CHUNK_SIZE):
                    hasher.update(data)
            if hasher.hexdigest() != digest:
                raise _bad_bundle(f"blob {digest[:16]} does not match its digest")
        prev, expected = GENESIS, 1
        for entry in self.audit_entries(tenant, 0):
            if entry.tenant != tenant or entry.seq != expected or entry.prev_hash != prev:
                raise _bad_bundle(f"its audit chain breaks at entry {expected}")
            if chain_hash(entry) != entry.hash:
                raise _bad_bundle(f"its audit entry {entry.seq} does not match its hash")
            prev, expected = entry.hash, expected + 1

    def manifests(self) -> list[Manifest]:
        return self._manifests

    def blob(self, key: BlobKey) -> tuple[int, int, bool]:
        found = self._blobs.get(key.digest) if key.namespace == self.namespace else None
        if found is None:
            raise IntegrityError("the bundle has no such blob", kind="missing")
        return found

    def chunks(self, key: BlobKey) -> Iterator[bytes]:
        self.blob(key)
        with self._open(self._member(f"blobs/{key.digest}")) as file:
            while data := file.read(CHUNK_SIZE):
                yield data

    def derivations(self) -> list[Derivation]:
        return self._derivations

    def grants(self, manifest: Manifest) -> list[Grant]:
        return [g for g in self._grants if g.artifact_id == manifest.artifact_id]

    def marks(self, tenant: str, ids: Sequence[str]) -> list[Mark]:
        wanted = set(ids)
        return [m for m in self._marks if m.artifact_id in wanted]

    def holds(self, tenant: str, ids: Sequence[str]) -> list[Hold]:
        wanted = set(ids)
        return [h for h in self._holds if h.artifact_id in wanted]

    def api_keys(self) -> list[ApiKey]:
        return self._keys

    def settings(self) -> dict[str, str]:
        return self._settings

    def audit_tenants(self) -> list[str]:
        return [self.tenant] if self._member(_AUDIT).size else []

    def audit_entries(self, tenant: str, after: int) -> Iterator[AuditEntry]:
        with self._open(self._member(_AUDIT)) as file:
            for line in file:
                try:
                    entry = AuditEntry(*json.loads(line))
                except (ValueError, TypeError):
                    raise _bad_bundle("an audit entry cannot be read") from None
                if entry.seq > after:
                    yield entry


def import_bundle(vault: Vault, path: str | os.PathLike[str], *, progress: Progress | None = None) -> TransferReport:
    """Import a bundle written by :func:`export_tenant` into ``vault``: first verify all of it (every blob's digest
    and size, the audit chain, that every row is the bundle tenant's), then publish, re-MAC'd with ``vault``'s
    manifest key. :class:`IntegrityError` and nothing imported if any check fails. Idempotent (what is there is
    skipped); other tenants of ``vault`` are never touched. Open ``vault`` with ``audit=False``.
    """
    try:
        tar = tarfile.open(path, mode="r:")  # noqa: SIM115 - closed by the with below
    except (tarfile.TarError, EOFError):
        raise _bad_bundle("it is not a tar file") from None
    except FileNotFoundError:
        raise InvalidArgument("no bundle file at the path given") from None
    except OSError as exc:
        raise InvalidArgument(f"cannot read the bundle file: {exc.strerror}") from None
    with tar:
        source = _BundleSource(tar)
        source.check()
        return _Writer(vault, source, progress).run(rings=False)
