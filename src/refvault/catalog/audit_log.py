"""The persistent audit log: one hash chain of entries per tenant, and its verification.

Invariants:

* **Never payload.** An entry holds ids, scope names, counts, hashes and fixed words: the action, the
  outcome (``"ok"`` or an error *class* name, never an error message), a short selection summary the vault
  builds itself (``"bytes 0-4096"``, never caller text), and the SHA-256 of disclosed bytes, never the bytes
  (``tests/security/test_audit_chain.py`` plants canaries and searches every stored row for them).
* **One chain per tenant.** Entries of a tenant are numbered ``1..n`` without gaps (``seq``). Each entry's
  ``hash`` is ``SHA-256(prev_hash || canonical(entry))`` where ``canonical`` is a fixed-order compact JSON
  array of every field but ``hash`` (:func:`canonical`), and ``prev_hash`` is the previous entry's hash (32
  zero bytes for the first). The catalog assigns ``seq`` and ``prev_hash`` under the tenant's head row
  (``refvault_audit_heads``), locked for the append, so several processes over one database extend one
  chain and never fork it.
* **What verification proves.** :func:`verify_chain` recomputes every hash in ``seq`` order and names the
  first entry that was edited, deleted, inserted or reordered. The chain carries no secret: someone who can
  write the database can rewrite a whole suffix consistently (or cut the tail and move the head row back).
  Only a head anchored elsewhere (``refvault audit head``, kept outside the store) detects that: given as
  ``anchor``, an entry that is no longer in the chain is a ``cut-tail`` or a ``fork``.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Generic, NamedTuple, TypeVar

from refvault.errors import InvalidArgument, StorageError
from refvault.model import format_time

__all__ = [
    "GENESIS",
    "AuditAppender",
    "AuditEntry",
    "AuditReport",
    "DisclosureEntry",
    "canonical",
    "chain_hash",
    "parse_anchor",
    "seal",
    "verify_chain",
]

Item = TypeVar("Item")

GENESIS = "0" * 64
"""The ``prev_hash`` of a tenant's first entry: 32 zero bytes, in hex."""


def _unencodable(value: object) -> object:
    raise TypeError(f"an audit entry holds only strings, integers and None, not {type(value).__name__}")


# CPython's C encoder, made once: ``JSONEncoder.encode`` would make one per call (entries are many).
_CHUNKS: Callable[[object, int], Iterable[str]] = json.encoder.c_make_encoder(  # type: ignore[attr-defined]
    None, _unencodable, json.encoder.encode_basestring, None, ":", ",", False, False, False
)


def _compact_json(value: object) -> str:
    """Compact JSON (``,``/``:`` separators, UTF-8 text as is): ``json.dumps(value, ensure_ascii=False,
    separators=(",", ":"))`` exactly."""
    return "".join(_CHUNKS(value, 0))


class AuditEntry(NamedTuple):
    """One audited operation, as stored in the tenant's chain (see the module docstring).

    ``at_us`` is the time in microseconds since the epoch (UTC). ``user``/``session`` are the caller's
    (empty strings when the caller gave no valid scope). ``outcome`` is ``"ok"`` or an error class name.
    ``selection`` summarises what a read selected; ``bytes``/``records`` count what it returned;
    ``excerpt_hash`` is the hex SHA-256 of exactly the bytes disclosed; ``content_hash`` the artifact's.
    A draft (not yet appended) has ``seq == 0`` and empty ``prev_hash``/``hash``. A named tuple (cheap to
    make and to hash in bulk); ``hash`` is its last field, so ``entry[:-1]`` is exactly what the hash covers.
    """

    seq: int
    at_us: int
    tenant: str
    user: str
    session: str
    action: str
    outcome: str
    artifact_id: str | None = None
    purpose: str | None = None
    recipient: str | None = None
    grant_id: str | None = None
    rule_id: str | None = None
    selection: str | None = None
    bytes: int | None = None
    records: int | None = None
    excerpt_hash: str | None = None
    content_hash: str | None = None
    detail: str | None = None
    prev_hash: str = ""
    hash: str = ""

    @property
    def at(self) -> datetime:
        return datetime.fromtimestamp(self.at_us / 1_000_000, UTC)

    @property
    def is_disclosure(self) -> bool:
        """Bytes of an artifact left toward a recipient: a successful read that hashed what it returned."""
        return (
            self.outcome == "ok"
            and self.artifact_id is not None
            and self.excerpt_hash is not None
            and self.recipient is not None
        )

    def as_dict(self) -> dict[str, object]:
        return dict(zip(FIELDS, self, strict=True))

    def to_json(self) -> dict[str, object]:
        """Every field, and ``at`` as ISO 8601 text beside ``at_us`` (as the HTTP API and the CLI show it)."""
        return {**self.as_dict(), "at": format_time(self.at)}


FIELDS: tuple[str, ...] = AuditEntry._fields
assert FIELDS[-1] == "hash"
assert FIELDS[-2] == "prev_hash"


@dataclass(frozen=True, slots=True)
class DisclosureEntry:
    """One entry of the disclosure ledger: bytes of an artifact that left toward a recipient.

    ``excerpt_hash`` is the SHA-256 of exactly the bytes disclosed (not the artifact's digest unless the
    whole artifact was disclosed). Deleting the artifact does not erase these copies.
    """

    seq: int
    at: datetime
    artifact_id: str
    action: str
    recipient: str
    purpose: str | None
    selection: str | None
    bytes: int | None
    records: int | None
    excerpt_hash: str
    grant_id: str | None
    user: str
    session: str

    def to_json(self) -> dict[str, object]:
        """The entry as JSON-able data (``at`` as ISO 8601 text), as the HTTP API and the CLI show it."""
        return {
            "seq": self.seq,
            "at": format_time(self.at),
            "artifact_id": self.artifact_id,
            "action": self.action,
            "recipient": self.recipient,
            "purpose": self.purpose,
            "selection": self.selection,
            "bytes": self.bytes,
            "records": self.records,
            "excerpt_hash": self.excerpt_hash,
            "grant_id": self.grant_id,
            "user": self.user,
            "session": self.session,
        }

    @classmethod
    def of(cls, entry: AuditEntry) -> DisclosureEntry:
        assert entry.artifact_id is not None
        assert entry.recipient is not None
        assert entry.excerpt_hash is not None
        return cls(
            seq=entry.seq,
            at=entry.at,
            artifact_id=entry.artifact_id,
            action=entry.action,
            recipient=entry.recipient,
            purpose=entry.purpose,
            selection=entry.selection,
            bytes=entry.bytes,
            records=entry.records,
            excerpt_hash=entry.excerpt_hash,
            grant_id=entry.grant_id,
            user=entry.user,
            session=entry.session,
        )


def canonical(entry: AuditEntry) -> bytes:
    """The bytes an entry's hash covers: a compact JSON array of every field but ``hash``, in field order."""
    return _compact_json(entry[:-1]).encode()


def chain_hash(entry: AuditEntry) -> str:
    """``SHA-256(prev_hash || canonical(entry))`` in hex, from the entry's own ``prev_hash``."""
    try:
        prev = bytes.fromhex(entry.prev_hash)
    except ValueError:
        prev = entry.prev_hash.encode()
    return hashlib.sha256(prev + canonical(entry)).hexdigest()


def seal(draft: AuditEntry, seq: int, prev_hash: str) -> AuditEntry:
    """The entry ``draft`` becomes at position ``seq`` after ``prev_hash`` (what the catalog stores)."""
    fields = (seq, *draft[1:-2], prev_hash)
    digest = hashlib.sha256(bytes.fromhex(prev_hash) + _compact_json(fields).encode()).hexdigest()
    return AuditEntry(*fields, digest)


def seal_all(drafts: Sequence[AuditEntry], head: tuple[int, str]) -> list[AuditEntry]:
    """Seal ``drafts`` (all of one tenant) after the tenant's ``head`` (seq, hash), in order."""
    seq, prev = head
    sealed = []
    for draft in drafts:
        seq += 1
        entry = seal(draft, seq, prev)
        prev = entry.hash
        sealed.append(entry)
    return sealed


@dataclass(frozen=True, slots=True)
class AuditReport:
    """What :func:`verify_chain` found.

    ``ok`` is True when every entry checked; otherwise ``tenant``, ``seq`` and ``kind`` name the first bad entry:
    ``"edited"`` (its content or hash changed), ``"deleted"`` (entry ``seq`` is missing), ``"inserted"``
    (entry ``seq`` does not belong), ``"reordered"`` (entry ``seq`` belongs elsewhere in the chain),
    ``"cut-tail"`` (the chain ends before the anchored head; ``seq`` is the first missing entry), ``"fork"``
    (entry ``seq`` differs from the anchored head's) or ``"head"`` (the tenant's head row was moved back or
    removed: ``seq`` is the first entry it no longer covers). ``entries`` counts the entries checked.
    """

    ok: bool
    entries: int
    tenant: str | None = None
    seq: int | None = None
    kind: str | None = None
    head_seq: int = 0
    head_hash: str = GENESIS

    @property
    def detail(self) -> str:
        if self.ok:
            return f"audit chain ok: {self.entries} entries"
        return f"audit chain of tenant {self.tenant!r} broken at entry {self.seq}: {self.kind}"


def parse_anchor(text: str) -> tuple[int | None, str]:
    """An anchored head as ``refvault audit head`` prints it: ``SEQ:HASH`` (or a bare ``HASH``)."""
    if not isinstance(text, str):
        raise InvalidArgument("an audit head is SEQ:HASH (as 'refvault audit head' prints it), a string")
    seq_text, _, hash_text = text.strip().rpartition(":")
    value = hash_text.lower()
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise InvalidArgument("an audit head is SEQ:HASH (as 'refvault audit head' prints it), HASH 64 hex digits")
    if not seq_text:
        return None, value
    if not seq_text.isdigit():
        raise InvalidArgument("an audit head is SEQ:HASH (as 'refvault audit head' prints it), SEQ a number")
    return int(seq_text), value


def verify_chain(
    tenant: str,
    entries: Iterable[AuditEntry],
    *,
    head: tuple[int, str] | None = None,
    anchor: tuple[int | None, str] | None = None,
) -> AuditReport:
    """Recompute a tenant's chain from ``entries`` (in ``seq`` order) and name the first bad entry.

    ``head`` is the catalog's head row (seq, hash) read *before* the entries (entries after it, appended
    meanwhile, should not be given): the chain must end exactly there. ``anchor`` is a head kept elsewhere
    (``(seq or None, hash)``): it must still be an entry of the chain, else the tail was cut (or rewritten).
    """
    prev = GENESIS
    prevprev: str | None = None
    expected = 1
    sha256 = hashlib.sha256
    fromhex = bytes.fromhex
    encode = _compact_json
    anchor_seen = anchor is None
    rows = iter(entries)
    for entry in rows:
        ok = entry.seq == expected and entry.prev_hash == prev
        if ok:
            digest = sha256(fromhex(prev) + encode(entry[:-1]).encode()).hexdigest()
            ok = digest == entry.hash
        if not ok:
            kind, seq = _classify(entry, expected, prev, prevprev, list(rows))
            return AuditReport(False, expected - 1, tenant, seq, kind)
        if not anchor_seen and anchor is not None and entry.hash == anchor[1]:
            if anchor[0] is not None and anchor[0] != entry.seq:
                return AuditReport(False, expected, tenant, anchor[0], "fork")
            anchor_seen = True
        prevprev, prev = prev, entry.hash
        expected += 1
    last = expected - 1
    if head is not None:
        if head[0] > last:  # the head row says there is more: the tail was cut, the head row left alone
            return AuditReport(False, last, tenant, last + 1, "cut-tail")
        if head[0] == last and head[1] != prev:
            return AuditReport(False, last, tenant, last, "edited")
    if not anchor_seen and anchor is not None:
        anchored_seq = anchor[0]
        if anchored_seq is not None and anchored_seq <= last:
            return AuditReport(False, last, tenant, anchored_seq, "fork")
        return AuditReport(False, last, tenant, last + 1, "cut-tail")
    return AuditReport(True, last, tenant, head_seq=last, head_hash=prev)


def _classify(
    entry: AuditEntry, expected: int, prev: str, prevprev: str | None, rest: list[AuditEntry]
) -> tuple[str, int]:
    """Why ``entry`` (the first that fails) fails: (kind, seq of the entry to blame); see :class:`AuditReport`."""
    if entry.seq > expected:
        return "deleted", expected
    if entry.seq < expected:
        return "reordered", entry.seq
    if entry.prev_hash == prev:
        return "edited", entry.seq
    if prevprev is not None and entry.prev_hash == prevprev:
        return "inserted", entry.seq - 1  # the previous entry does not belong between its neighbours
    if entry.prev_hash in {later.hash for later in rest}:
        return "reordered", entry.seq
    if rest and rest[0].prev_hash == prev:
        return "inserted", entry.seq  # this entry does not belong: the next one follows its predecessor
    if chain_hash(entry._replace(seq=entry.seq + 1)) == entry.hash:
        return "deleted", entry.seq  # renumbered down after an entry was removed
    if chain_hash(entry) == entry.hash:
        return "edited", entry.seq - 1  # this entry is intact: its predecessor was rewritten
    return "edited", entry.seq


class AuditAppender(Generic[Item]):
    """Batches audit entries to the catalog, so a read pays a share of a transaction, not one of its own.

    ``add`` queues an item (the vault queues an operation's raw facts; ``append`` turns a batch of them
    into entries and stores them in one catalog call, one transaction). The thread that queues the
    ``max_batch``-th item appends the batch itself, so under load the readers append, in turns, with no
    second thread competing with them for the interpreter; a background thread appends whatever is
    still queued ``linger`` seconds after it was queued. Batches are appended in the order queued.
    ``flush`` returns once every item queued before it is stored. If an append fails (a full disk, the
    database down), that ``add`` or ``flush`` and every later one raises :class:`StorageError` (the audit
    fails closed) and no new item is queued; the batch is kept, in order, and each later ``add`` or
    ``flush`` tries to append it again first, so audited operations resume, with no entry lost, as soon
    as the catalog can be written again (no restart).
    """

    def __init__(
        self, append: Callable[[Sequence[Item]], object], *, max_batch: int = 1024, linger: float = 0.02
    ) -> None:
        self._append = append
        self._max_batch = max_batch
        self._linger = linger
        self._pid = os.getpid()
        self._reset()
        self._stopping = False
        self._failed: str | None = None

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._appending = threading.Lock()  # one batch at a time, in queue order
        self._queue: list[Item] = []
        self._unwritten: list[Item] = []  # a batch whose append failed: appended again, first, by the next drain
        self._thread: threading.Thread | None = None

    def add(self, entry: Item) -> None:
        if self._pid != os.getpid():
            self._forked()
        if self._failed is not None:
            self._drain()  # append the failed batch again: raises while the catalog still cannot be written
        with self._cond:
            self._check()
            if self._stopping:
                raise StorageError("the audit log is closed")
            self._queue.append(entry)
            full = len(self._queue) >= self._max_batch
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="refvault-audit", daemon=True)
                self._thread.start()
            elif len(self._queue) == 1:
                self._cond.notify_all()  # the timer starts for this batch
        if full:
            self._drain()

    def _forked(self) -> None:
        """In a child after ``fork``: the parent's thread, locks and queue are not ours; start afresh."""
        self._reset()
        self._failed = None  # the parent's failed batch is the parent's to append again
        self._pid = os.getpid()

    def flush(self) -> None:
        """Return once every item queued before the call is stored (appending them now, in this thread)."""
        if self._pid != os.getpid():
            self._forked()
        self._drain()

    def close(self) -> None:
        """Append what is queued, then stop the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        self._drain(raising=False)

    def _check(self) -> None:
        if self._failed is not None:
            raise StorageError(
                f"the audit log could not be written ({self._failed}); audited operations stop until it can be"
            )

    def _drain(self, *, raising: bool = True) -> None:
        """Append everything queued now (after any batch being appended), in this thread."""
        with self._appending:
            with self._cond:
                batch, self._queue = self._unwritten + self._queue, []
                self._unwritten = []
            if batch:
                try:
                    self._append(batch)
                except Exception as exc:
                    with self._cond:
                        self._unwritten, self._failed = batch, _failure(exc)
                else:
                    with self._cond:
                        self._failed = None
        if raising:
            with self._cond:
                self._check()

    def _run(self) -> None:
        """The timer: append what is still queued ``linger`` seconds after the first of it was queued."""
        cond, pid = self._cond, self._pid  # this thread's: a child after fork makes its own (see _forked)
        while True:
            with cond:
                while not self._queue and not self._stopping:
                    cond.wait()
                if self._stopping:
                    return
                cond.wait(self._linger)  # close() wakes it early: it then appends what is queued, and stops
            if pid != os.getpid():
                return
            self._drain(raising=False)


def _failure(exc: Exception) -> str:
    """Why an append failed: a storage error's own message (refvault's, never a value), else the class only."""
    if isinstance(exc, StorageError):
        return (exc.strerror or str(exc))[:300]
    return type(exc).__name__  # the message could hold anything


def by_tenant(entries: Sequence[AuditEntry]) -> Iterator[tuple[str, list[AuditEntry]]]:
    """The entries grouped by tenant, tenants in sorted order (the order head rows are locked in), order kept."""
    groups: dict[str, list[AuditEntry]] = {}
    for entry in entries:
        groups.setdefault(entry.tenant, []).append(entry)
    for tenant in sorted(groups):
        yield tenant, groups[tenant]
