"""API keys of the HTTP service: create, authenticate, revoke, list. No web framework here.

A token is ``rvk_<key_id>_<secret>``: ``key_id`` is ``k_`` plus 16 lowercase
base32 characters (public, names the key in listings and logs), ``secret`` is
52 lowercase base32 characters (256 random bits).

Invariants, each tested in ``tests/test_server_auth.py``:

* **The token is shown once.** The catalog keeps only the SHA-256 of the whole
  token (tokens are 256-bit random, so a fast hash leaves nothing to
  brute-force); :func:`create_key` returns the token and nothing can recover it.
* **One answer for every failure.** :func:`authenticate` returns ``None`` for a
  malformed token, an unknown key id, a wrong secret and a revoked key alike;
  the stored and presented hashes are compared in constant time, and an
  unknown key id is compared against a dummy hash so it costs the same.
* **Scope comes from the key.** The :class:`~refvault.model.Principal` returned
  carries the key's tenant, user and allowed sessions; nothing in a request
  can widen it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from datetime import UTC

from refvault.catalog.base import ApiKey
from refvault.errors import InvalidArgument
from refvault.ids import check_name
from refvault.model import Principal, checked_label
from refvault.vault.vault import Vault

__all__ = ["TOKEN_PATTERN", "authenticate", "create_key", "list_keys", "parse_token", "revoke_key"]

TOKEN_PATTERN = r"rvk_(k_[a-z2-7]{16})_([a-z2-7]{52})"  # noqa: S105 - a shape, not a secret
_TOKEN = re.compile(TOKEN_PATTERN)
_KEY_ID = re.compile(r"k_[a-z2-7]{16}")
_DUMMY_HASH = hashlib.sha256(b"refvault: no such key").hexdigest()


def _b32(n_bytes: int) -> str:
    return base64.b32encode(secrets.token_bytes(n_bytes)).decode("ascii").rstrip("=").lower()


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("ascii")).hexdigest()


def parse_token(token: object) -> str | None:
    """The key id of a well-formed token, else None (the secret is not checked here)."""
    if not isinstance(token, str):
        return None
    match = _TOKEN.fullmatch(token)
    return None if match is None else match.group(1)


def create_key(
    vault: Vault,
    tenant: str,
    user: str,
    *,
    sessions: Iterable[str] | None = None,
    label: str | None = None,
) -> tuple[ApiKey, str]:
    """Store a new key for ``tenant``/``user`` and return it with its token (the only time the token exists).

    ``sessions`` limits the key to those sessions (None: every session of the user).
    """
    check_name("tenant", tenant)
    check_name("user", user)
    allowed: frozenset[str] | None = None
    if sessions is not None:
        if isinstance(sessions, str):
            raise InvalidArgument("sessions must be a list of session names, not one string")
        allowed = frozenset(check_name("session", s) for s in sessions)
        if not allowed:
            raise InvalidArgument("sessions must name at least one session (or be None for all)")
    key_id = "k_" + _b32(10)
    token = f"rvk_{key_id}_{_b32(32)}"
    key = ApiKey(
        key_id=key_id,
        secret_hash=_hash(token),
        tenant=tenant,
        user=user,
        sessions=allowed,
        created_at=vault.clock(),
        label=checked_label("label", label),
    )
    vault.catalog.add_api_key(key)
    return key, token


def authenticate(vault: Vault, token: object) -> Principal | None:
    """The principal of a valid, unrevoked token; None for anything else (one answer for every failure)."""
    key_id = parse_token(token)
    presented = _hash(token) if isinstance(token, str) and key_id is not None else _DUMMY_HASH
    key = vault.catalog.find_api_key(key_id) if key_id is not None else None
    stored = key.secret_hash if key is not None else _DUMMY_HASH
    matches = hmac.compare_digest(presented.encode("ascii"), stored.encode("ascii"))
    if key is None or not matches or key.revoked_at is not None:
        return None
    return Principal(key.tenant, key.user, key.sessions)


def revoke_key(vault: Vault, key_id: str) -> bool:
    """Revoke a key now; False if it is unknown or already revoked. A revoked key never authenticates again."""
    if not isinstance(key_id, str) or _KEY_ID.fullmatch(key_id) is None:
        return False
    return vault.catalog.revoke_api_key(key_id, vault.clock().astimezone(UTC))


def list_keys(vault: Vault, tenant: str | None = None) -> list[ApiKey]:
    """Every key (of ``tenant``), oldest first; secrets are never stored, so none is shown."""
    if tenant is not None:
        check_name("tenant", tenant)
    return vault.catalog.api_keys(tenant)
