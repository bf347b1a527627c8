"""The vault's side of the persistent audit log and the disclosure ledger (:mod:`refvault.catalog.audit_log`).

* :func:`entry_of` turns one audited operation (the facts an operation filled) into a draft entry: ids,
  scope names, counts, hashes and fixed words, every text clipped to its column; never content, never an
  error message. A read that returned bytes carries ``excerpt_hash`` (SHA-256 of exactly those bytes) and a
  recipient (the caller, ``"user"``, unless the read named one): a *disclosure*.
* :func:`read_entries`, :func:`disclosures` and :func:`verify` are what :class:`~refvault.vault.core.Vault`'s
  ``audit``, ``disclosures`` and ``verify_audit`` run, after flushing the batched entries.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from refvault.catalog.audit_log import (
    AuditAppender,
    AuditEntry,
    AuditReport,
    DisclosureEntry,
    parse_anchor,
    verify_chain,
)
from refvault.errors import InvalidArgument, NotFound, StorageError
from refvault.ids import check_artifact_id, is_artifact_id
from refvault.model import Scope
from refvault.vault.verified import ArtifactStream, VerifiedBlob

if TYPE_CHECKING:
    from refvault.catalog.base import Catalog

__all__ = [
    "AUDIT_PAGE_MAX",
    "SELECTION_CHARS",
    "SYNCHRONOUS_ACTIONS",
    "AuditTrail",
    "LedgerStream",
    "WRITTEN",
    "disclosures",
    "appender_of",
    "engine_read",
    "in_engine_read",
    "entries_of",
    "entry_of",
    "raw_entry",
    "excerpt_of",
    "read_entries",
    "verify",
]

_ENGINE_READ: ContextVar[bool] = ContextVar("refvault_engine_read", default=False)


@contextmanager
def engine_read() -> Iterator[None]:
    """Mark the vault reads a read engine makes while it selects (a window's stream, a grep's scan).

    They are audited as usual but are not disclosures: the engine then audits what it returned (through
    ``Vault.audit_read`` with the excerpt hash of exactly that text), so the ledger records what left, not
    every byte scanned.
    """
    token = _ENGINE_READ.set(True)
    try:
        yield
    finally:
        _ENGINE_READ.reset(token)


def in_engine_read() -> bool:
    """Whether the current vault read is made by a read engine (inside :func:`engine_read`)."""
    return _ENGINE_READ.get()


WRITTEN = "_audit_written"
"""A fact an operation sets when its entry was already appended in its own transaction (put, delete)."""

SYNCHRONOUS_ACTIONS = frozenset(
    {
        "put",
        "delete",
        "share",
        "revoke",
        "declassify",
        "set_policy",
        "rotate_link_keys",
        "redact",
        "supersede",
        "revoke_artifact",
        "expire",
        "refresh",
        "hold",
        "release",
    }
)
"""Actions that change state: their entry is appended before the operation returns. Reads are batched."""

AUDIT_PAGE_MAX = 10_000
SELECTION_CHARS = 256
"""The size of an entry's ``selection`` column: a longer summary is clipped to this many characters."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
_DEFAULT_PURPOSE = "default"
_DEFAULT_RECIPIENT = "user"


def excerpt_of(text: str) -> tuple[str, int]:
    """(hex SHA-256, byte count) of text a read engine returns, as UTF-8 (lone surrogates kept as they were read)."""
    data = text.encode("utf-8", "surrogateescape")
    return hashlib.sha256(data).hexdigest(), len(data)


def _clip(value: object, size: int) -> str | None:
    return value[:size] if isinstance(value, str) else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


_HEX64 = re.compile(r"[0-9a-f]{64}")
_new_entry = tuple.__new__


def _hex(value: object) -> str | None:
    return value if isinstance(value, str) and _HEX64.fullmatch(value) is not None else None


def raw_entry(
    at: datetime, action: str, scope: object, artifact_id: object, outcome: str, facts: dict[str, Any]
) -> RawEntry:
    """What a batched entry is queued as: the operation's facts (copied) and whether an engine read it
    (:func:`engine_read`, decided now, in the caller's context). The entries are made a batch at a time
    (:func:`entries_of`), when the batch is appended."""
    return (at, action, scope, artifact_id, outcome, dict(facts), _ENGINE_READ.get())


RawEntry = tuple[datetime, str, object, object, str, dict[str, Any], bool]


def appender_of(catalog: Catalog) -> Callable[[Sequence[RawEntry]], object]:
    """What a vault's audit appender runs on each batch: make the entries, then chain and store them."""

    def append(raws: Sequence[RawEntry]) -> object:
        return catalog.append_audit(entries_of(raws))

    return append


def entries_of(raws: Sequence[RawEntry]) -> list[AuditEntry]:
    """The draft entries of queued operations (see :func:`raw_entry`), in order; those naming no tenant dropped."""
    return [entry for entry in (entry_of(*raw) for raw in raws) if entry is not None]


def entry_of(
    at: datetime,
    action: str,
    scope: object,
    artifact_id: object,
    outcome: str,
    facts: dict[str, Any],
    engine: bool | None = None,
) -> AuditEntry | None:
    """The draft entry of one operation; None if the caller named no tenant (nothing to chain it to).

    ``engine``: whether a read engine made the read (default: :func:`engine_read`'s current state).
    """
    if isinstance(scope, Scope):
        tenant, user, session = scope.tenant, scope.user, scope.session
    elif isinstance(scope, str) and scope:
        tenant, user, session = scope, "", ""
    else:
        return None
    if not isinstance(tenant, str) or not tenant:
        return None
    named = facts.get("artifact_id", artifact_id)
    selection = facts.get("selection")
    byte_range = facts.get("byte_range")
    if selection is None and isinstance(byte_range, tuple) and len(byte_range) == 2:
        selection = f"bytes {int(byte_range[0])}-{int(byte_range[1])}"
    excerpt = _hex(facts.get("excerpt_hash"))
    if excerpt is not None and (_ENGINE_READ.get() if engine is None else engine):  # scanned, not disclosed
        excerpt = None
        selection = f"engine {selection}" if selection else "engine"
    purpose = facts.get("purpose")
    recipient = facts.get("recipient")
    if excerpt is not None and outcome == "ok":  # a disclosure: toward the caller unless a recipient was named
        purpose = purpose or _DEFAULT_PURPOSE
        recipient = recipient or _DEFAULT_RECIPIENT
    moment = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    return _new_entry(  # positional, in AuditEntry's field order (the cheapest way to make one)
        AuditEntry,
        (
            0,
            (moment - _EPOCH) // _US,
            tenant[:128],
            str(user)[:128],
            str(session)[:128],
            action[:32],
            outcome[:64],
            named if is_artifact_id(named) else None,
            _clip(purpose, 128),
            _clip(recipient, 128),
            _clip(facts.get("grant_id"), 40),
            _clip(facts.get("rule_id"), 128),
            _clip(selection, SELECTION_CHARS),
            _count(facts.get("bytes")),
            _count(facts.get("records")),
            excerpt,
            _clip(facts.get("content_hash"), 71),
            _clip(facts.get("detail"), 128),
            "",
            "",
        ),
    )


def _closing(entries: Iterator[AuditEntry]) -> Generator[AuditEntry, None, None]:
    try:
        yield from entries
    finally:
        close = getattr(entries, "close", None)
        if callable(close):
            close()


def read_entries(
    catalog: Catalog, scope: Scope, *, artifact_id: str | None, after: int, limit: int
) -> list[AuditEntry]:
    """The caller's view of its tenant's chain: its own entries, and every entry about an artifact it owns.

    With ``artifact_id`` (which the caller must own, else :class:`NotFound` as for an absent id): every
    entry about that artifact, whoever acted (a grantee's reads included).
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= AUDIT_PAGE_MAX:
        raise InvalidArgument(f"limit must be an integer between 1 and {AUDIT_PAGE_MAX}")
    if isinstance(after, bool) or not isinstance(after, int) or not 0 <= after < 2**63:
        raise InvalidArgument("after must be a non-negative integer (the last seq already seen)")
    found: list[AuditEntry] = []
    if artifact_id is not None:
        wanted = check_artifact_id(artifact_id)
        if catalog.find(scope, wanted) is None:
            raise NotFound(artifact_id)
        rows = _closing(catalog.audit_entries(scope.tenant, after=after, artifact_id=wanted))
        for entry in rows:
            found.append(entry)
            if len(found) >= limit:
                break
        rows.close()
        return found
    owned = {m.artifact_id for m in catalog.in_scope(scope)}
    rows = _closing(catalog.audit_entries(scope.tenant, after=after))
    for entry in rows:
        if entry.artifact_id in owned:
            found.append(entry)
        elif entry.user == scope.user and entry.session == scope.session:
            found.append(_as_absent(entry))
        else:
            continue
        if len(found) >= limit:
            break
    rows.close()
    return found


def _as_absent(entry: AuditEntry) -> AuditEntry:
    """The caller's own refused read of an artifact it does not own, as it may see it: like a read of an absent
    one (no rule, no grant named), so its audit view tells it no more than the refusal did."""
    if entry.outcome == "ok" or (entry.rule_id is None and entry.grant_id is None):
        return entry
    return entry._replace(rule_id=None, grant_id=None)


def disclosures(catalog: Catalog, scope: Scope, artifact_id: str) -> list[DisclosureEntry]:
    """Every disclosure of an artifact the caller owns or owned before deleting it (else :class:`NotFound`), oldest
    first: deleting an artifact does not take back what was disclosed, and its owner can still see it."""
    wanted = check_artifact_id(artifact_id)
    if catalog.find(scope, wanted) is None:
        mark = catalog.marks(scope.tenant, [wanted]).get(wanted)
        if mark is None or mark.owner != scope:
            raise NotFound(artifact_id)
    return [
        DisclosureEntry.of(entry)
        for entry in catalog.audit_entries(scope.tenant, artifact_id=wanted)
        if entry.is_disclosure
    ]


def verify(catalog: Catalog, tenant: str | None, head: str | None) -> AuditReport:
    """Verify one tenant's chain (or every tenant's); ``head`` is an anchored ``SEQ:HASH`` of ``tenant``."""
    if head is not None and tenant is None:
        raise InvalidArgument("an anchored head belongs to one tenant: give the tenant too")
    if tenant is not None and (not isinstance(tenant, str) or not tenant):
        raise InvalidArgument("tenant must be a non-empty string")
    anchor = parse_anchor(head) if head is not None else None
    tenants = [tenant] if tenant is not None else catalog.audit_tenants()
    total = 0
    last = AuditReport(True, 0, tenant)
    for name in tenants:
        current = catalog.audit_head(name)
        report = verify_chain(name, catalog.audit_entries(name), head=current, anchor=anchor)
        if report.ok:  # every entry chains; the head row must still cover them (it is moved with each append)
            after = catalog.audit_head(name)
            if after[0] < report.head_seq or (after[0] == report.head_seq and after[1] != report.head_hash):
                report = AuditReport(False, report.entries, name, after[0] + 1, "head")
        total += report.entries
        if not report.ok:
            return AuditReport(False, total, name, report.seq, report.kind, report.head_seq, report.head_hash)
        last = report
    return AuditReport(True, total, tenant, head_seq=last.head_seq, head_hash=last.head_hash)


class LedgerStream(ArtifactStream):
    """An :class:`ArtifactStream` that reports, when it closes, exactly what it returned: for the ledger.

    Every byte handed out is hashed as it goes; ``report`` is called once, at close (or when the stream is
    collected), with ``selection`` (``"stream bytes A-B"``, or ``"stream N bytes from A"`` after seeks),
    ``bytes`` and ``excerpt_hash`` (SHA-256 of the bytes returned, in the order returned). A stream that
    returned nothing reports nothing.
    """

    def __init__(
        self, blob: VerifiedBlob, guard: Callable[[], None] | None, report: Callable[[dict[str, Any]], None]
    ) -> None:
        super().__init__(blob, guard=guard)
        self._report: Callable[[dict[str, Any]], None] | None = report
        self._hasher = hashlib.sha256()
        self._first: int | None = None
        self._end = 0
        self._returned = 0
        self._contiguous = True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        start = self.tell()
        filled = super().readinto(buffer)
        if filled:
            self._hasher.update(memoryview(buffer).cast("B")[:filled])
            if self._first is None:
                self._first = start
            elif start != self._end:
                self._contiguous = False
            self._end = start + filled
            self._returned += filled
        return filled

    def close(self) -> None:
        report, self._report = getattr(self, "_report", None), None
        try:
            super().close()
        finally:
            if report is not None and self._returned:
                first = self._first or 0
                selection = (
                    f"stream bytes {first}-{self._end}"
                    if self._contiguous
                    else f"stream {self._returned} bytes from {first}"
                )
                with contextlib.suppress(Exception):  # a stream closed after its vault: nothing to record in
                    report({"selection": selection, "bytes": self._returned, "excerpt_hash": self._hasher.hexdigest()})


class AuditTrail:
    """The audit methods of :class:`refvault.Vault` (mixed in): :meth:`audit`, :meth:`disclosures`,
    :meth:`audit_head`, :meth:`verify_audit`, :meth:`flush_audit`. None of them is itself audited."""

    if TYPE_CHECKING:
        catalog: Catalog
        _audit_log: AuditAppender[RawEntry] | None
        _closed: bool

    def _audit_ready(self, scope: object = None) -> None:
        if scope is not None and not isinstance(scope, Scope):
            raise InvalidArgument("scope must be a refvault.Scope(tenant=..., user=..., session=...)")
        if self._closed:
            raise StorageError("this vault is closed")
        self.flush_audit()

    def flush_audit(self) -> None:
        """Return once every audit entry of an operation that already returned is stored."""
        if self._audit_log is not None:
            self._audit_log.flush()

    def audit(
        self, scope: Scope, *, artifact_id: str | None = None, after: int = 0, limit: int = 100
    ) -> list[AuditEntry]:
        """The audit log as ``scope`` may see it, oldest first: entries with ``seq > after``, at most ``limit``.

        The caller's own entries and every entry about an artifact it owns; with ``artifact_id`` (one it owns,
        else :class:`NotFound`), every entry about that artifact, whoever acted. Never content.
        """
        self._audit_ready(scope)
        return read_entries(self.catalog, scope, artifact_id=artifact_id, after=after, limit=limit)

    def disclosures(self, scope: Scope, artifact_id: str) -> list[DisclosureEntry]:
        """Every time bytes of an artifact ``scope`` owns left toward a recipient (the disclosure ledger), oldest first.

        Each names the recipient, purpose, selection, bytes/records and the SHA-256 of exactly the bytes
        disclosed. Deleting the artifact does not take back these copies.
        """
        self._audit_ready(scope)
        return disclosures(self.catalog, scope, artifact_id)

    def audit_head(self, tenant: str) -> tuple[int, str]:
        """The tenant's chain head (seq, hash): anchor ``f"{seq}:{hash}"`` outside the store to detect a cut tail."""
        self._audit_ready()
        return self.catalog.audit_head(tenant)

    def verify_audit(self, tenant: str | None = None, head: str | None = None) -> AuditReport:
        """Recompute the audit chain of ``tenant`` (or of every tenant) and name the first bad entry.

        ``head`` is a head anchored earlier (``SEQ:HASH``, from :meth:`audit_head`) of ``tenant``: the chain
        must still contain it, else its tail was cut or rewritten (a chain checked on its own cannot tell,
        since it holds no secret).
        """
        self._audit_ready()
        return verify(self.catalog, tenant, head)
