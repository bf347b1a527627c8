"""Manifest MACs: every artifact row and derivation is authenticated under a key the catalog does not hold.

The manifest (scope, content hash, size, media type, disclosure, expiry, provenance) is trusted
service state: every read is verified against it. So that an edit of the catalog by someone who
lacks the key is caught, each row carries ``mac`` = ``v1:<key id>:<64 hex>``, the HMAC-SHA256 of
:func:`canonical` under the key named by ``<key id>``. Invariants, each tested in
``tests/security/test_manifest_integrity.py``:

* **Every column a reader relies on is covered.** :func:`canonical` encodes, in a fixed order
  behind a domain tag and the encoding version: artifact id, tenant, user, session, content
  hash, size, media type, disclosure, created and expiry (microseconds), filename, tool call id,
  run id, schema version, source version, completeness and idempotency key, then — only when
  the artifact has any — its labels (sorted) and ``derived_from`` ids: a row without either
  encodes exactly as before labels existed, so its MAC keeps verifying. The row's blob
  namespace is not free either: the catalogs require it to equal the tenant's
  (:func:`refvault.ids.namespace_of`). Only ``seq`` (publication order) is not covered. A
  derivation (e.g. the Parquet form of a record artifact, which record queries read) is
  covered the same way: source blob, kind, derived digest and size, info. So is a sharing grant
  (:mod:`refvault.vault.grants`): every column, revocation included (a revoke re-signs the row), so a
  widened, redirected or un-revoked grant fails (``tests/vault/test_grants.py``).
* **Checked where a row becomes a record.** Both catalogs call :meth:`ManifestKeys.fault` on
  every row they return (``find``, ``in_scope``, ``manifests``, an idempotent replay,
  ``derivation``, ``derivations``): a missing, malformed, unknown-key or wrong MAC is an
  :class:`~refvault.errors.IntegrityError` (``kind="manifest"``) naming the artifact id (only a
  well-formed one), never content.
* **The key lives outside the catalog.** An embedded store keeps its ring in
  ``manifest-keys.json`` beside the catalog (0600, never through a symbolic link, created and
  replaced with the same code as the cursor keys: :class:`refvault.keyring.KeyRing`); a
  PostgreSQL store reads it from ``$REFVAULT_MANIFEST_KEY_FILE`` (a ring file in the same
  format) or ``$REFVAULT_MANIFEST_KEY`` (the ring's text), and is refused if neither is set; an
  in-memory store makes a ring per process. The catalog never holds a secret.
* **Rotation.** Exactly one current key signs; every retired key in the ring keeps verifying
  until :meth:`ManifestKeys.drop_retired` removes it (which the catalogs do only when no
  authentic row still uses one). A ring read from a file is re-read when the file changes, so
  every process of a store signs with the newest key.
"""

from __future__ import annotations

import hmac
import json
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from refvault import observe
from refvault.catalog.base import Derivation, Grant, Manifest
from refvault.errors import IntegrityError, InvalidArgument, StorageError, shown_id

if TYPE_CHECKING:
    from refvault.keyring import KeyRing

__all__ = [
    "ENV_KEY",
    "ENV_KEY_FILE",
    "KEY_FILE",
    "MAC_VERSION",
    "ManifestKeys",
    "canonical",
    "derivation_error",
    "grant_error",
    "manifest_error",
    "micros",
]

KEY_FILE = "manifest-keys.json"
"""The embedded store's manifest key ring, beside ``catalog.db``."""
ENV_KEY_FILE = "REFVAULT_MANIFEST_KEY_FILE"
"""Path of the manifest key ring of a scale-out store (a file as written by ``refvault manifest-key new``)."""
ENV_KEY = "REFVAULT_MANIFEST_KEY"
"""The text of the manifest key ring of a scale-out store (instead of a file)."""
MAC_VERSION = "v1"

_DOMAIN = "refvault.manifest"
_DERIVATION_DOMAIN = "refvault.derivation"
_GRANT_DOMAIN = "refvault.grant"
_WHAT = "manifest key"
_MAC = re.compile(r"v1:([0-9A-Za-z_-]{1,32}):([0-9a-f]{64})")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# One encoder, made once (json.dumps with options builds a new one per call); it holds no state between calls.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def micros(moment: datetime) -> int:
    """Microseconds since the Unix epoch: how the catalogs store and MAC a moment (exact integer arithmetic)."""
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def canonical(record: Manifest | Derivation | Grant) -> bytes:
    """The bytes a row's MAC covers (encoding ``v1``): a JSON array in a fixed order, ASCII, no spaces.

    A manifest's every field (labels and ``derived_from`` only when either is non-empty), or a
    derivation's source blob (namespace and digest), kind, derived digest and size, and info.
    Each kind of row has its own domain tag. Raises ``ValueError`` for a record no refvault
    capture produces (e.g. NaN in a JSON field).
    """
    if isinstance(record, Grant):
        return _json(_grant_fields(record))
    if isinstance(record, Derivation):
        derived = [
            _DERIVATION_DOMAIN,
            1,
            record.source.namespace,
            record.source.digest,
            record.kind,
            record.digest,
            record.size,
            record.info,
        ]
        return _json(derived)
    m = record
    fields = [
        _DOMAIN,
        1,
        m.artifact_id,
        m.scope.tenant,
        m.scope.user,
        m.scope.session,
        m.digest,
        m.size,
        m.media_type,
        m.disclosure,
        micros(m.created_at),
        None if m.expires_at is None else micros(m.expires_at),
        m.filename,
        m.tool_call_id,
        m.run_id,
        m.schema_version,
        m.source_version,
        m.completeness,
        m.idempotency_key,
    ]
    if m.labels or m.derived_from:  # appended only when present: a row MAC'd before labels existed still verifies
        fields += [sorted(m.labels), list(m.derived_from)]
    if m.origin is not None:  # appended only when present, after labels and derived_from (a copy has a source)
        fields.append(dict(m.origin))
    return _json(fields)


def _grant_fields(g: Grant) -> list[object]:
    """A sharing grant's every field (:mod:`refvault.vault.grants`), behind its own domain tag."""

    def names(value: frozenset[str] | None) -> list[str] | None:
        return None if value is None else sorted(value)

    def moment(value: datetime | None) -> int | None:
        return None if value is None else micros(value)

    return [
        _GRANT_DOMAIN,
        1,
        g.grant_id,
        g.owner.tenant,
        g.owner.user,
        g.owner.session,
        g.artifact_id,
        g.to.tenant,
        g.to.user,
        names(g.to.sessions),
        names(g.purposes),
        names(g.recipients),
        g.disclosure,
        micros(g.created_at),
        moment(g.expires_at),
        moment(g.revoked_at),
    ]


def _json(fields: list[object]) -> bytes:
    return _ENCODER.encode(fields).encode("ascii")


def _ring_error(source: str, exc: InvalidArgument) -> StorageError:
    return StorageError(f"{source} does not hold a manifest key ring: {exc}")


@dataclass(frozen=True, slots=True)
class _Loaded:
    ring: KeyRing
    secrets: Mapping[str, bytes]


def _loaded(ring: KeyRing) -> _Loaded:
    return _Loaded(ring, {key.key_id: key.secret for key in ring.keys})


class ManifestKeys:
    """The manifest key ring of one store, and the MACs made with it. Thread-safe; never shows a secret.

    Make one with :meth:`ephemeral` (memory stores), :meth:`for_store` (the embedded store's
    file, created if absent), :meth:`from_file` or :meth:`from_environment` (scale-out).
    """

    __slots__ = ("_fixed", "_lock", "_path", "_seen", "_source", "_state")

    def __init__(
        self,
        ring: KeyRing,
        *,
        path: Path | None = None,
        seen: object = None,
        source: str = "memory",
        fixed: bool = False,
    ) -> None:
        """A ring held in memory, or read from ``path`` (whose :func:`_version` was ``seen`` just before reading).

        ``fixed``: the ring comes from somewhere refvault cannot write (an environment variable).
        """
        self._lock = threading.Lock()
        self._state = _loaded(ring)
        self._path = path  # re-read when the file changes, and where rotations are saved
        self._seen = seen
        self._source = source  # where the ring came from, for messages (never its content)
        self._fixed = fixed

    def __repr__(self) -> str:
        return f"ManifestKeys(source={self._source!r}, current={self.current_id!r})"

    # -- making one --

    @classmethod
    def ephemeral(cls) -> ManifestKeys:
        """A fresh ring held in this process only (for ``memory://`` stores and tests)."""
        from refvault.keyring import KeyRing

        return cls(KeyRing.generate(now=datetime.now(UTC), grace=timedelta(0)))

    @classmethod
    def for_store(
        cls, path: Path, *, create: bool = True, signed: Callable[[], tuple[int, int]] | None = None
    ) -> ManifestKeys:
        """The ring in the file ``path`` of an embedded store, created there (0600) if there is none.

        ``signed`` counts the catalog's rows that carry a MAC (artifacts, derivations). A ring is
        created only for a catalog with none (a fresh store, or one written before manifest MACs):
        were the file lost, a new key would make every signed row fail verification, so a missing
        file with signed rows is a :class:`StorageError` saying to restore it. Without ``create``
        (a store opened read-only) nothing is written: a missing file is a :class:`StorageError`.
        """
        from refvault.keyring import KeyRing

        path = Path(path)
        seen = _version(path)
        if not create:
            try:
                ring = KeyRing.load(path, what=_WHAT)
            except FileNotFoundError:
                _refuse_lost_key(path, signed)
                raise StorageError(
                    f"the store has no manifest key file ({path.name}) yet and was opened read-only: "
                    "'refvault migrate' (an open for writing) creates it"
                ) from None
            return cls(ring, path=path, seen=seen, source=str(path))
        if seen is None and not path.is_symlink():
            _refuse_lost_key(path, signed)
        ring = KeyRing.load_or_create(path, now=datetime.now(UTC), grace=timedelta(0), what=_WHAT)
        return cls(ring, path=path, seen=seen, source=str(path))

    @classmethod
    def create_file(cls, path: Path) -> ManifestKeys:
        """A fresh ring written to a new file ``path`` (0600), for ``$REFVAULT_MANIFEST_KEY_FILE``.

        :class:`StorageError` if anything (a file, a symbolic link) is already there: a key
        file is never overwritten, since rows MAC'd with it would fail from then on.
        """
        from refvault.keyring import KeyRing

        path = Path(path)
        if path.is_symlink() or path.exists():
            raise StorageError(f"{path} already exists; refusing to replace a key file")
        now = datetime.now(UTC)
        ring = KeyRing.load_or_create(path, now=now, grace=timedelta(0), what=_WHAT)
        return cls(ring, path=path, seen=None, source=str(path))

    @classmethod
    def from_file(cls, path: Path, *, source: str | None = None) -> ManifestKeys:
        """The ring in an existing file (0600, not a symbolic link); :class:`StorageError` if there is none."""
        from refvault.keyring import KeyRing

        path = Path(path)
        seen = _version(path)
        try:
            ring = KeyRing.load(path, what=_WHAT)
        except FileNotFoundError:
            raise StorageError(
                f"the manifest key file {source or path} does not exist: "
                "create it with `refvault manifest-key new FILE`"
            ) from None
        return cls(ring, path=path, seen=seen, source=source or str(path))

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> ManifestKeys:
        """The ring named by ``$REFVAULT_MANIFEST_KEY_FILE`` or given in ``$REFVAULT_MANIFEST_KEY``.

        A store whose processes share one catalog must share one ring: with neither
        variable set (or both), :class:`StorageError` says what to set.
        """
        from refvault.keyring import KeyRing

        env = os.environ if environ is None else environ
        file, text = env.get(ENV_KEY_FILE), env.get(ENV_KEY)
        if file and text:
            raise StorageError(f"set only one of ${ENV_KEY_FILE} and ${ENV_KEY}")
        if file:
            return cls.from_file(Path(file), source=f"${ENV_KEY_FILE} ({file})")
        if text:
            try:
                ring = KeyRing.from_json(text)
            except InvalidArgument as exc:
                raise _ring_error(f"${ENV_KEY}", exc) from None
            return cls(ring, source=f"${ENV_KEY}", fixed=True)
        raise StorageError(
            "a postgresql:// store needs its manifest key, kept outside the catalog and shared by every process "
            f"of the store: set ${ENV_KEY_FILE} to a key file (create one with `refvault manifest-key new FILE`) "
            f"or ${ENV_KEY} to its text"
        )

    # -- the ring --

    @property
    def current_id(self) -> str:
        """The id of the key that signs new rows."""
        return self._state.ring.current.key_id

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Every key that verifies rows, current and retired."""
        return tuple(self._state.secrets)

    @property
    def source(self) -> str:
        """Where the ring comes from (a path or an environment variable's name), for messages."""
        return self._source

    def refresh(self) -> None:
        """Re-read a file-backed ring if the file changed (another process rotated it)."""
        if self._path is None or _version(self._path) == self._seen:
            return
        from refvault.keyring import KeyRing

        with self._lock:
            seen = _version(self._path)  # taken before reading: a change after it is seen next time
            if seen == self._seen:
                return
            try:
                ring = KeyRing.load(self._path, what=_WHAT)
            except FileNotFoundError:
                raise StorageError(f"the manifest key file {self._source} disappeared") from None
            self._state = _loaded(ring)
            self._seen = seen

    def rotate(self) -> str:
        """Make a fresh key current; the old current key is retired but keeps verifying. Returns the new id.

        A file-backed ring is saved atomically; one from ``$REFVAULT_MANIFEST_KEY`` cannot be, and
        is refused (:class:`StorageError`). Callers hold the catalog's write lock (see
        :meth:`refvault.catalog.sql.SqlCatalog.rotate_manifest_key`).
        """
        from refvault.keyring import CursorKey, KeyRing

        with self._lock:
            self._writable()
            ring = self._state.ring
            now = datetime.now(UTC)
            new = CursorKey.new(now=now)
            while new.key_id in self._state.secrets:
                new = CursorKey.new(now=now)
            retired = [
                CursorKey(key.key_id, key.secret, key.created_at, now) if key is ring.current else key
                for key in ring.keys
            ]
            self._replace(KeyRing([*retired, new], grace=ring.grace))
            return new.key_id

    def drop_retired(self) -> list[str]:
        """Remove every retired key (rows MAC'd with one fail from then on); return their ids."""
        from refvault.keyring import KeyRing

        with self._lock:
            self._writable()
            ring = self._state.ring
            dropped = [key.key_id for key in ring.keys if key is not ring.current]
            if dropped:
                self._replace(KeyRing([ring.current], grace=ring.grace))
            return dropped

    def _writable(self) -> None:
        if self._fixed:
            raise StorageError(
                f"the manifest key ring comes from {self._source} and cannot be rotated here: keep it in a file "
                f"(${ENV_KEY_FILE}) to rotate it with refvault, or rotate it where it is kept and restart"
            )

    def _replace(self, ring: KeyRing) -> None:
        if self._path is not None:
            ring.save(self._path, what=_WHAT)
            self._seen = _version(self._path)
        self._state = _loaded(ring)

    # -- MACs --

    def sign(self, record: Manifest | Derivation | Grant) -> str:
        """The MAC of ``record`` under the current key (the ring re-read first if its file changed)."""
        self.refresh()
        state = self._state
        kid = state.ring.current.key_id
        return f"{MAC_VERSION}:{kid}:{_hmac(state.secrets[kid], canonical(record))}"

    def key_id(self, mac: object) -> str | None:
        """The key id a well-formed MAC names, else None."""
        match = _MAC.fullmatch(mac) if isinstance(mac, str) else None
        return None if match is None else match.group(1)

    def fault(self, record: Manifest | Derivation | Grant, mac: object) -> str | None:
        """Why ``mac`` does not authenticate ``record`` (a short phrase, no values), or None if it does."""
        row = (
            "its derived-data record"
            if isinstance(record, Derivation)
            else "its grant row"
            if isinstance(record, Grant)
            else "its manifest row"
        )
        if mac is None or mac == "":
            return f"{row} has no MAC"
        match = _MAC.fullmatch(mac) if isinstance(mac, str) else None
        if match is None:
            return f"{row}'s MAC is malformed"
        kid, given = match.group(1), match.group(2)
        secret = self._state.secrets.get(kid)
        if secret is None:
            self.refresh()  # signed after a rotation this process has not seen yet
            secret = self._state.secrets.get(kid)
            if secret is None:
                return f"{row} is signed with a key this store does not hold"
        try:
            expected = _hmac(secret, canonical(record))
        except (ValueError, TypeError, RecursionError):
            return f"{row} cannot be encoded"
        if not hmac.compare_digest(expected, given):
            return f"{row} does not match its MAC (altered or forged)"
        return None


def _refuse_lost_key(path: Path, signed: Callable[[], tuple[int, int]] | None) -> None:
    """:class:`StorageError` if the catalog holds rows signed with the missing key file ``path``."""
    artifacts, derived = signed() if signed is not None else (0, 0)
    if artifacts or derived:
        rows = (
            f"{artifacts:,} artifact{'s are' if artifacts != 1 else ' is'}"
            if artifacts
            else (f"{derived:,} derived-data record{'s are' if derived != 1 else ' is'}")
        )
        raise StorageError(
            f"the manifest key file {path.name} is missing but {rows} signed with it: restore it from a backup"
            " of the store, or, if the store's key ring is kept elsewhere, open it with that ring"
            " (Vault.open(..., manifest_keys=ManifestKeys.from_file(PATH)));"
            " a new key would make every signed row fail verification"
        )


def grant_error(problem: str) -> IntegrityError:
    """The error for a grant row that failed authentication (an edited grant is refused, never honoured)."""
    observe.event("integrity_failure", "manifest")
    return IntegrityError(f"a sharing grant failed verification: {problem}", kind="manifest")


def derivation_error(problem: str) -> IntegrityError:
    """The error for a derivation row that failed authentication (:meth:`refvault.Vault.derived` names the artifact)."""
    observe.event("integrity_failure", "manifest")
    return IntegrityError(f"a derivation failed verification: {problem}", kind="manifest")


def manifest_error(artifact_id: object, problem: str) -> IntegrityError:
    """The error for a row that failed authentication: the id (only if well-formed) and the problem, no values."""
    observe.event("integrity_failure", "manifest")
    return IntegrityError(f"artifact {shown_id(artifact_id)} failed verification: {problem}", kind="manifest")


def _hmac(secret: bytes, message: bytes) -> str:
    return hmac.digest(secret, message, "sha256").hex()  # the one-shot C implementation


def _version(path: Path) -> tuple[int, int, int] | None:
    """What changes when the file is replaced or rewritten (inode, mtime, size); None if it is absent."""
    try:
        info = path.stat()
    except OSError:
        return None
    return (info.st_ino, info.st_mtime_ns, info.st_size)
