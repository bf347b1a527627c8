"""Signed paging cursors for record queries.

A cursor lets a caller continue a query where the previous page stopped, so
page N costs what page 1 costs. Invariants, each enforced here and tested in
``tests/read/test_cursors.py``:

* **Opaque and signed.** A token is ``rvc1.<body>.<mac>``: ``body`` is the
  unpadded base64url of the canonical JSON ``{"exp", "kid", "p"}`` and ``mac``
  the unpadded base64url of HMAC-SHA256 under the key named by ``kid`` over
  ``rvc1.<body>``. Both base64 parts must be in canonical form, so no two
  strings carry the same token; altering, truncating or extending any byte is
  refused. The signature is checked (with :func:`hmac.compare_digest`) before
  anything in the body but its key id is trusted, and the key id is read from
  the canonical prefix of the body without parsing JSON.
* **Key rotation with grace.** A :class:`KeyRing` holds exactly one current
  (signing) key and any number of retired ones. :meth:`KeyRing.rotate` retires
  the current key; cursors it signed keep verifying until ``retired_at +
  grace`` and are refused after that (``key_retired``, or ``unknown_key`` once
  a later rotation has dropped the key).
* **Bound to what it pages.** :func:`bind` and :func:`check` tie a cursor to
  the artifact (id + content hash), the normalised selection (filter,
  projection, order, record range), the caller (scope digest), an expiry and a
  keyset position. Reusing it for anything else raises
  :class:`~refvault.errors.InvalidCursor` with the reason (``artifact``,
  ``query``, ``caller``); signature and expiry are checked first.
* **The page size is not bound.** The position is a keyset (the index of the
  next record, or the last record returned in the order), never a count of
  records or pages, so the next page is the same whatever ``limit`` it asks
  for: a caller may change ``limit`` from one page to the next, and the walk
  still has no gap and no repeat (``tests/security/test_cursor_binding.py``).
  Every page's ``limit`` is checked and capped as on a first page.
* **Never authorisation.** A valid cursor proves only that this vault issued it
  for that binding. Callers check scope, expiry, disclosure and integrity of
  the artifact on every use, exactly as without a cursor.
* **Secrets stay secret.** Key material never appears in ``repr``/``str``, in
  error messages or in logs (this module logs nothing). Bodies are signed,
  not encrypted: they hold digests of the binding, a position and an expiry,
  nothing the caller could not see anyway.
* **Safe persistence.** :meth:`KeyRing.load_or_create` keeps the embedded ring
  in a private (0600) file that is never opened through a symbolic link. A new
  file is written in full to a temporary created with ``O_CREAT | O_EXCL |
  O_NOFOLLOW``, ``fsync``-ed, then published with ``link(2)``, which fails if
  anything already has the name, and the directory is ``fsync``-ed: readers
  never see a torn file and concurrent creators end with one ring (the losers
  re-read the winner's). :meth:`KeyRing.save` replaces the file atomically
  (temporary, ``fsync``, ``rename``, directory ``fsync``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from refvault.errors import InvalidArgument, InvalidCursor
from refvault.keyring import MAX_TOKEN_CHARS, TOKEN_PREFIX, CursorKey, KeyRing, b64url, canonical, check_json

__all__ = [
    "BINDING_KEYS",
    "MAX_TOKEN_CHARS",
    "TOKEN_PREFIX",
    "CursorKey",
    "KeyRing",
    "bind",
    "check",
    "digest",
]

_BINDING_MESSAGES = {
    "artifact": "the cursor was issued for another artifact or another version of it; query again without a cursor",
    "query": "the cursor was issued for a different selection (where, fields, order or record_range; the limit "
    "may change between pages); repeat the original selection or query again without a cursor",
    "caller": "the cursor was issued to another caller; query again without a cursor",
}
BINDING_KEYS = tuple(_BINDING_MESSAGES)  # check order: artifact, query, caller


def digest(value: object) -> str:
    """SHA-256 (hex) of the canonical JSON of ``value`` (sorted keys, no spaces, ASCII): for selections and scopes.

    Tuples hash like lists; anything that is not a JSON value raises
    :class:`~refvault.errors.InvalidArgument`.
    """
    check_json(value, tuples=True)
    return hashlib.sha256(canonical(value)).hexdigest()


# -- binding ---------------------------------------------------------------------------------------------------


def _binding_digests(binding: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(binding, Mapping) or set(binding) != set(BINDING_KEYS):
        raise InvalidArgument(f"a cursor binding has exactly the keys {', '.join(BINDING_KEYS)}")
    out = {}
    for name in BINDING_KEYS:
        value = binding[name]
        if not isinstance(value, str):
            raise InvalidArgument(f"the cursor binding {name!r} must be a string")
        out[name] = b64url(hashlib.sha256(f"{name}\0{value}".encode("utf-8", "surrogatepass")).digest())
    return out


def bind(
    ring: KeyRing, *, now: datetime, ttl: timedelta, binding: Mapping[str, str], position: Mapping[str, Any]
) -> str:
    """A cursor for ``position`` bound to ``binding``.

    ``binding`` has exactly the keys ``artifact`` (artifact id and content
    hash, e.g. ``f"{artifact_id}@{content_hash}"``), ``query`` (e.g.
    :func:`digest` of the normalised selection) and ``caller`` (e.g.
    :func:`digest` of the scope). The token carries only digests of them.
    """
    if not isinstance(position, Mapping):
        raise InvalidArgument("a cursor position is a mapping")
    return ring.sign({"b": _binding_digests(binding), "pos": dict(position)}, now=now, ttl=ttl)


def check(ring: KeyRing, token: object, *, now: datetime, binding: Mapping[str, str]) -> dict[str, Any]:
    """The position of a cursor made by :func:`bind` for the same ``binding``.

    Raises :class:`~refvault.errors.InvalidCursor`: first for the token
    itself (malformed, unknown_key, signature, key_retired, expired), then
    ``artifact``, ``query``, ``caller`` for the first binding that differs.
    Messages name what changed, never the values. The caller still checks
    scope on every use: a cursor authorises nothing.
    """
    expected = _binding_digests(binding)
    payload = ring.open(token, now=now)
    carried = payload.get("b")
    position = payload.get("pos")
    if (
        set(payload) != {"b", "pos"}
        or not isinstance(carried, dict)
        or set(carried) != set(BINDING_KEYS)
        or not all(isinstance(value, str) for value in carried.values())
        or not isinstance(position, dict)
    ):
        raise InvalidCursor("malformed", "the cursor does not carry a query position")
    for name in BINDING_KEYS:
        if not hmac.compare_digest(carried[name], expected[name]):
            raise InvalidCursor(name, _BINDING_MESSAGES[name])
    return position
