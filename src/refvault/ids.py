"""Artifact ids and the names that scope them.

Invariants (tested in ``tests/security/test_fuzz.py`` and ``tests/security/test_isolation.py``):

* An artifact id is ``art_`` plus 26 lowercase base32 characters encoding 128
  bits from :mod:`secrets`. It is minted by the server, never derived from the
  content, a path or any caller string, so it reveals nothing and cannot be
  guessed from the bytes.
* Scope components (tenant, user, session) are 1-128 characters from
  ``[A-Za-z0-9._:@+-]``, starting with a letter, digit or underscore. They never
  reach a filesystem path: storage namespaces are hex digests of the tenant.
* Validation errors never echo the rejected value (it may be content).
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from typing import TypeGuard

from refvault.errors import InvalidId, InvalidScope

__all__ = [
    "ARTIFACT_ID_PATTERN",
    "check_artifact_id",
    "check_name",
    "is_artifact_id",
    "namespace_of",
    "new_artifact_id",
]

ARTIFACT_ID_PATTERN = r"^art_[a-z2-7]{26}$"
_ARTIFACT_ID = re.compile(ARTIFACT_ID_PATTERN)
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._:@+\-]{0,127}")


def new_artifact_id() -> str:
    """Mint a fresh opaque id with 128 bits of entropy."""
    return "art_" + base64.b32encode(secrets.token_bytes(16)).decode("ascii").rstrip("=").lower()


def is_artifact_id(value: object) -> TypeGuard[str]:
    """True if ``value`` is a well-formed artifact id."""
    return isinstance(value, str) and _ARTIFACT_ID.fullmatch(value) is not None


def check_artifact_id(value: object) -> str:
    """Return ``value`` if it is a well-formed artifact id, else raise :class:`InvalidId`."""
    if not is_artifact_id(value):
        raise InvalidId("not a refvault artifact id: expected 'art_' followed by 26 characters a-z, 2-7")
    return value


def check_name(kind: str, value: object) -> str:
    """Return ``value`` if it is a valid tenant/user/session name, else raise :class:`InvalidScope`."""
    if not isinstance(value, str) or _NAME.fullmatch(value) is None:
        raise InvalidScope(
            f"invalid {kind}: use 1-128 characters from A-Z a-z 0-9 . _ : @ + -, "
            "starting with a letter, digit or underscore"
        )
    return value


def namespace_of(tenant: str) -> str:
    """The storage namespace of a tenant: 32 hex characters, safe as a path component.

    Blobs are deduplicated within a namespace only, so identical bytes stored by
    two tenants share nothing.
    """
    return hashlib.sha256(b"refvault.tenant\x00" + tenant.encode("utf-8")).hexdigest()[:32]
