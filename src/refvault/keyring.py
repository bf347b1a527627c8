"""Key rings: HMAC keys with rotation and grace, signed opaque tokens, and their private key files.

The types layer: this module imports nothing of refvault's but :mod:`refvault.errors`, so that the
catalog (manifest MACs, :mod:`refvault.catalog.macs`) and the read layer (record cursors,
:mod:`refvault.read.cursors`) share one implementation. Invariants, tested in
``tests/read/test_cursors.py`` and ``tests/security/test_manifest_integrity.py``:

* **Opaque and signed.** A token is ``rvc1.<body>.<mac>``: ``body`` is the unpadded base64url of the
  canonical JSON ``{"exp", "kid", "p"}`` and ``mac`` the unpadded base64url of HMAC-SHA256 under the
  key named by ``kid`` over ``rvc1.<body>``. Both base64 parts must be in canonical form; the
  signature is checked (with :func:`hmac.compare_digest`) before anything in the body but its key id.
* **Rotation with grace.** A :class:`KeyRing` holds exactly one current (signing) key and any number
  of retired ones, which keep verifying until ``retired_at + grace``.
* **Secrets stay secret.** Key material never appears in ``repr``/``str``, in error messages or logs.
* **Safe persistence.** :meth:`KeyRing.load_or_create` keeps a ring in a private (0600) file never
  opened through a symbolic link, published with ``link(2)`` after ``fsync``; :meth:`KeyRing.save`
  replaces it atomically.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import hashlib
import hmac
import json
import math
import os
import re
import secrets
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from refvault.errors import InvalidArgument, InvalidCursor, InvalidType, StorageError

__all__ = ["MAX_TOKEN_CHARS", "TOKEN_PREFIX", "CursorKey", "KeyRing", "b64url", "canonical", "check_json"]

TOKEN_PREFIX = "rvc1"  # noqa: S105 - a format tag, not a secret
MAX_TOKEN_CHARS = 8192
"""Longest token :meth:`KeyRing.open` considers; :meth:`KeyRing.sign` refuses to produce a longer one."""

_MIN_SECRET_BYTES = 32
_MAX_KEY_FILE_BYTES = 1 << 20
_KEY_ID = re.compile(r"[0-9A-Za-z_-]{1,32}")
_B64URL = re.compile(rb"[0-9A-Za-z_-]*")
# The canonical body starts with exp then kid (sort_keys order: "exp" < "kid" < "p").
_BODY_PREFIX = re.compile(rb'\{"exp":(0|[1-9][0-9]{0,15}),"kid":"([0-9A-Za-z_-]{1,32})","p":\{')
_MAC_CHARS = 43  # unpadded base64url of 32 bytes
_FILE_FORMAT = "refvault.cursor-keys"
_FILE_VERSION = 1


# -- small helpers ---------------------------------------------------------------------------------------------


def _aware(value: object, what: str) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise InvalidArgument(f"{what} must be a timezone-aware datetime")
    return value


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: bytes) -> bytes | None:
    """Decode unpadded canonical base64url; None for anything else (bad alphabet, length or trailing bits)."""
    if _B64URL.fullmatch(text) is None or len(text) % 4 == 1:
        return None
    try:
        data = base64.urlsafe_b64decode(text + b"=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    if b64url(data).encode("ascii") != text:
        return None  # non-zero unused bits: another spelling of the same bytes
    return data


def check_json(value: object, *, tuples: bool, depth: int = 0) -> None:
    """Refuse anything that would not survive a JSON round trip unchanged."""
    if depth > 64:
        raise InvalidArgument("cursor data is nested too deeply")
    if value is None or isinstance(value, bool | int | str):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgument("cursor data must not contain NaN or infinity")
        return
    if isinstance(value, list) or (tuples and isinstance(value, tuple)):
        for item in value:
            check_json(item, tuples=tuples, depth=depth + 1)
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidArgument("cursor data object keys must be strings")
            check_json(item, tuples=tuples, depth=depth + 1)
        return
    raise InvalidArgument(f"cursor data must be JSON values, not {type(value).__name__}")


def canonical(value: object) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False, default=_as_dict
    ).encode("ascii")


def _as_dict(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    raise InvalidType(type(value).__name__)


# -- keys ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CursorKey:
    """One HMAC key. ``repr`` and ``str`` show the id and dates, never the secret."""

    key_id: str
    secret: bytes = field(repr=False)
    created_at: datetime
    retired_at: datetime | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.key_id, str) or _KEY_ID.fullmatch(self.key_id) is None:
            raise InvalidArgument("a cursor key id is 1 to 32 characters from A-Z, a-z, 0-9, '-' and '_'")
        if not isinstance(self.secret, bytes) or len(self.secret) < _MIN_SECRET_BYTES:
            raise InvalidArgument(f"a cursor key secret is bytes, at least {_MIN_SECRET_BYTES} of them")
        _aware(self.created_at, "created_at")
        if self.retired_at is not None:
            _aware(self.retired_at, "retired_at")

    @classmethod
    def new(cls, *, now: datetime) -> CursorKey:
        """A fresh random key created at ``now``."""
        return cls(secrets.token_hex(4), secrets.token_bytes(32), _aware(now, "now"))


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat()


def _parse_time(value: object, what: str) -> datetime:
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be an ISO 8601 string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidArgument(f"{what} is not an ISO 8601 date and time") from None
    return _aware(parsed, what)


class KeyRing:
    """The cursor keys of one vault: exactly one current (signing) key plus retired keys still in their grace."""

    __slots__ = ("_by_id", "_current", "_grace", "_keys")

    def __init__(self, keys: Sequence[CursorKey], *, grace: timedelta = timedelta(hours=24)) -> None:
        keys = tuple(keys)
        if not all(isinstance(key, CursorKey) for key in keys):
            raise InvalidArgument("a key ring holds CursorKey objects")
        if not isinstance(grace, timedelta) or grace < timedelta(0):
            raise InvalidArgument("grace must be a non-negative timedelta")
        current = [key for key in keys if key.retired_at is None]
        if len(current) != 1:
            raise InvalidArgument(f"a key ring needs exactly one key that is not retired, not {len(current)}")
        by_id = {key.key_id: key for key in keys}
        if len(by_id) != len(keys):
            raise InvalidArgument("key ids in a key ring must be unique")
        self._keys = keys
        self._by_id = by_id
        self._current = current[0]
        self._grace = grace

    def __repr__(self) -> str:
        retired = [key.key_id for key in self._keys if key is not self._current]
        return f"KeyRing(current={self._current.key_id!r}, retired={retired!r}, grace={self._grace!r})"

    __str__ = __repr__

    @property
    def current(self) -> CursorKey:
        """The signing key."""
        return self._current

    @property
    def keys(self) -> tuple[CursorKey, ...]:
        """Every key, current and retired, in the ring's order."""
        return self._keys

    @property
    def grace(self) -> timedelta:
        """How long a retired key keeps verifying cursors after ``retired_at``."""
        return self._grace

    # -- lifecycle --

    @classmethod
    def generate(cls, *, now: datetime, grace: timedelta = timedelta(hours=24)) -> KeyRing:
        """A ring with one fresh random key."""
        return cls([CursorKey.new(now=now)], grace=grace)

    def rotate(self, *, now: datetime) -> KeyRing:
        """A new ring: a fresh current key, the old current key retired at ``now``, keys past their grace dropped."""
        _aware(now, "now")
        kept = [
            key
            for key in self._keys
            if key is self._current or (key.retired_at is not None and now < key.retired_at + self._grace)
        ]
        new = CursorKey.new(now=now)
        while new.key_id in self._by_id:
            new = CursorKey.new(now=now)
        retired = [
            CursorKey(key.key_id, key.secret, key.created_at, now) if key is self._current else key for key in kept
        ]
        return KeyRing([*retired, new], grace=self._grace)

    # -- persisted form --

    def to_json(self) -> str:
        """The persisted form: JSON with the secrets in base64. Treat the text as a secret."""
        return json.dumps(
            {
                "format": _FILE_FORMAT,
                "version": _FILE_VERSION,
                "grace_seconds": self._grace.total_seconds(),
                "keys": [
                    {
                        "key_id": key.key_id,
                        "secret": base64.b64encode(key.secret).decode("ascii"),
                        "created_at": _iso(key.created_at),
                        "retired_at": None if key.retired_at is None else _iso(key.retired_at),
                    }
                    for key in self._keys
                ],
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> KeyRing:
        """Parse :meth:`to_json` output; :class:`~refvault.errors.InvalidArgument` (naming no secret) if malformed."""
        try:
            data = json.loads(text)
        except (ValueError, TypeError, RecursionError):
            raise InvalidArgument("the cursor key ring is not valid JSON") from None
        if not isinstance(data, dict) or data.get("format") != _FILE_FORMAT:
            raise InvalidArgument("the text is not a refvault cursor key ring")
        version = data.get("version")
        if type(version) is not int or version != _FILE_VERSION:
            raise InvalidArgument("unsupported cursor key ring version")
        grace = data.get("grace_seconds")
        if isinstance(grace, bool) or not isinstance(grace, int | float) or not math.isfinite(grace) or grace < 0:
            raise InvalidArgument("grace_seconds must be a non-negative number")
        items = data.get("keys")
        if not isinstance(items, list) or not items:
            raise InvalidArgument("a cursor key ring lists at least one key")
        keys = []
        for n, item in enumerate(items):
            if not isinstance(item, dict) or set(item) != {"key_id", "secret", "created_at", "retired_at"}:
                raise InvalidArgument(f"key {n} must have exactly key_id, secret, created_at and retired_at")
            raw = item["secret"]
            try:
                secret = base64.b64decode(raw, validate=True) if isinstance(raw, str) else None
            except (binascii.Error, ValueError):
                secret = None
            if secret is None:
                raise InvalidArgument(f"key {n}: the secret is not base64")
            retired = item["retired_at"]
            keys.append(
                CursorKey(
                    item["key_id"],
                    secret,
                    _parse_time(item["created_at"], f"key {n} created_at"),
                    None if retired is None else _parse_time(retired, f"key {n} retired_at"),
                )
            )
        return cls(keys, grace=timedelta(seconds=grace))

    @classmethod
    def load_or_create(
        cls,
        path: Path,
        *,
        now: datetime,
        grace: timedelta = timedelta(hours=24),
        what: str = "cursor key",
    ) -> KeyRing:
        """The ring stored at ``path``, or a new one (with ``grace``) created there (0600) if there is none.

        Concurrent callers all get the same ring. A symbolic link, a non-regular
        file, a file readable by others or a malformed ring raises
        :class:`~refvault.errors.StorageError`. ``what`` names the file in error
        messages (the manifest keys of :mod:`refvault.catalog.macs` use the same files).
        """
        _aware(now, "now")
        path = Path(path)
        for _ in range(5):
            try:
                return _read_ring(path, what)
            except FileNotFoundError:
                pass
            ring = cls.generate(now=now, grace=grace)
            if _publish_new(path, ring.to_json().encode("ascii"), what):
                return ring
            # another process published first: read theirs
        raise StorageError(errno.EAGAIN, f"the {what} file keeps disappearing while it is created")

    @classmethod
    def load(cls, path: Path, *, what: str = "cursor key") -> KeyRing:
        """The ring stored at ``path``, checked as by :meth:`load_or_create`; :class:`FileNotFoundError` if none."""
        return _read_ring(Path(path), what)

    def save(self, path: Path, *, what: str = "cursor key") -> None:
        """Atomically replace the file at ``path`` with this ring (0600); a symlink there is replaced, not followed."""
        path = Path(path)
        temp = _write_temp(path, self.to_json().encode("ascii"), what)
        try:
            os.replace(temp, path)
        except OSError as exc:
            _unlink_quietly(temp)
            raise _storage_error(f"replacing the {what} file", exc) from None
        _fsync_dir(path.parent, what)

    # -- tokens --

    def sign(self, payload: Mapping[str, Any], *, now: datetime, ttl: timedelta) -> str:
        """An opaque token carrying ``payload`` (JSON values only), signed with the current key, valid for ``ttl``."""
        _aware(now, "now")
        if not isinstance(ttl, timedelta) or ttl < timedelta(seconds=1):
            raise InvalidArgument("a cursor ttl must be a timedelta of at least one second")
        if not isinstance(payload, Mapping):
            raise InvalidArgument("a cursor payload is a mapping")
        check_json(payload, tuples=False)
        exp = math.floor((now + ttl).timestamp())
        body = canonical({"exp": exp, "kid": self._current.key_id, "p": dict(payload)})
        signed = f"{TOKEN_PREFIX}.{b64url(body)}"
        token = f"{signed}.{b64url(_mac(self._current.secret, signed))}"
        if len(token) > MAX_TOKEN_CHARS:
            raise InvalidArgument(f"the cursor would be longer than {MAX_TOKEN_CHARS} characters")
        return token

    def open(self, token: object, *, now: datetime) -> dict[str, Any]:
        """The payload of a token this ring signed; :class:`~refvault.errors.InvalidCursor` with the reason if not.

        Checks, in order: shape (``malformed``), key id (``unknown_key``),
        signature (``signature``), key grace (``key_retired``), expiry (``expired``).
        """
        _aware(now, "now")
        if not isinstance(token, str):
            raise InvalidCursor("malformed", "a cursor is a string; pass next_cursor from a previous response")
        if len(token) > MAX_TOKEN_CHARS:
            raise InvalidCursor("malformed", f"a cursor is at most {MAX_TOKEN_CHARS} characters")
        raw = token.encode("utf-8", "surrogatepass")
        parts = raw.split(b".")
        if len(parts) != 3 or parts[0] != TOKEN_PREFIX.encode("ascii"):
            raise InvalidCursor("malformed", "not a refvault cursor; pass next_cursor from a response unchanged")
        body = _unb64url(parts[1])
        given = _unb64url(parts[2]) if len(parts[2]) == _MAC_CHARS else None
        if body is None or given is None:
            raise InvalidCursor("malformed", "the cursor is not correctly encoded; pass it unchanged")
        head = _BODY_PREFIX.match(body)
        if head is None or not body.endswith(b"}"):
            raise InvalidCursor("malformed", "the cursor's content is not in the expected form")
        key = self._by_id.get(head.group(2).decode("ascii"))
        if key is None:
            raise InvalidCursor(
                "unknown_key", "the cursor was signed with a key this vault does not hold; query again without a cursor"
            )
        if not hmac.compare_digest(_mac(key.secret, raw[: len(parts[0]) + 1 + len(parts[1])]), given):
            raise InvalidCursor("signature", "the cursor's signature does not match: it was altered or forged")
        if key.retired_at is not None and now >= key.retired_at + self._grace:
            raise InvalidCursor(
                "key_retired",
                "the cursor was signed with a key retired longer ago than the grace period; "
                "query again without a cursor",
            )
        exp = int(head.group(1))
        if now.timestamp() >= exp:
            when = datetime.fromtimestamp(exp, UTC).isoformat()
            raise InvalidCursor("expired", f"the cursor expired at {when}; query again without a cursor")
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):  # pragma: no cover - a body this ring signed always parses
            raise InvalidCursor("malformed", "the cursor's content is not valid JSON") from None
        if not isinstance(data, dict) or set(data) != {"exp", "kid", "p"} or not isinstance(data["p"], dict):
            raise InvalidCursor("malformed", "the cursor's content is not in the expected form")  # pragma: no cover
        payload: dict[str, Any] = data["p"]
        return payload


def _mac(secret: bytes, signed: str | bytes) -> bytes:
    message = signed.encode("ascii") if isinstance(signed, str) else signed
    return hmac.new(secret, message, hashlib.sha256).digest()


# -- the embedded key file -------------------------------------------------------------------------------------


def _storage_error(action: str, exc: OSError) -> StorageError:
    return StorageError(exc.errno or errno.EIO, f"{action} failed: {exc.strerror or type(exc).__name__}")


def _read_ring(path: Path, what: str = "cursor key") -> KeyRing:
    """Read the ring at ``path``; FileNotFoundError if there is none, StorageError if it is unsafe or malformed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StorageError(errno.ELOOP, f"the {what} file is a symbolic link; refusing to follow it") from None
        raise _storage_error(f"opening the {what} file", exc) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StorageError(f"the {what} path is not a regular file")
        if info.st_mode & 0o077:
            raise StorageError(f"the {what} file is accessible to other users; it must be 0600")
        if info.st_size > _MAX_KEY_FILE_BYTES:
            raise StorageError(f"the {what} file is too large to be a key ring")
        chunks = []
        total = 0
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
            total += len(chunk)
            if total > _MAX_KEY_FILE_BYTES:
                raise StorageError(f"the {what} file is too large to be a key ring")
    except StorageError:
        raise
    except OSError as exc:
        raise _storage_error(f"reading the {what} file", exc) from None
    finally:
        os.close(fd)
    try:
        return KeyRing.from_json(b"".join(chunks).decode("utf-8"))
    except UnicodeDecodeError:
        raise StorageError(f"the {what} file is not UTF-8 text") from None
    except InvalidArgument as exc:
        raise StorageError(f"the {what} file is malformed: {exc}") from None


def _write_temp(path: Path, data: bytes, what: str = "cursor key") -> Path:
    """A fully written, fsynced private temporary next to ``path``."""
    for _ in range(3):
        temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            break
        except FileExistsError:
            continue
        except OSError as exc:
            raise _storage_error(f"creating the {what} file", exc) from None
    else:  # pragma: no cover - three 64-bit name collisions
        raise StorageError(errno.EEXIST, f"cannot create a temporary {what} file")
    try:
        try:
            os.fchmod(fd, 0o600)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        _unlink_quietly(temp)
        raise _storage_error(f"writing the {what} file", exc) from None
    return temp


def _publish_new(path: Path, data: bytes, what: str = "cursor key") -> bool:
    """Publish ``data`` at ``path`` unless something is already there; True if this call created the file."""
    temp = _write_temp(path, data, what)
    try:
        os.link(temp, path)
    except FileExistsError:
        return False
    except OSError as exc:
        raise _storage_error(f"publishing the {what} file", exc) from None
    finally:
        _unlink_quietly(temp)
    _fsync_dir(path.parent, what)
    return True


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _fsync_dir(directory: Path, what: str = "cursor key") -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise _storage_error(f"fsync of the {what} directory", exc) from None
