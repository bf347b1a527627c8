"""API keys of the HTTP service: create, authenticate, revoke, list. No web framework here.

A token is ``rvk_<key_id>_<secret>``: ``key_id`` is ``k_`` plus 16 lowercase
base32 characters (public, names the key in listings and logs), ``secret`` is
52 lowercase base32 characters (256 random bits).

Invariants, each tested in ``tests/server/test_auth.py``:

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
* **A cache never outlives a revocation by more than its TTL.** A
  :class:`KeyCache` (one per server process) remembers the principals of
  tokens that authenticated in the last ``seconds`` (default 2 s), keyed by the
  SHA-256 of the token (it never holds a token). :func:`revoke_key` forgets the
  key in every cache over the same vault object at once; in other processes a
  revocation takes effect within their TTL. Failures are never cached: every
  unknown, wrong or revoked token takes the full path of :func:`authenticate`
  on every request, so they still cost the same as each other.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from datetime import UTC

from refvault.catalog.base import ApiKey
from refvault.errors import InvalidArgument
from refvault.ids import check_name
from refvault.model import Principal, checked_label
from refvault.vault.core import Vault

__all__ = [
    "DEFAULT_CACHE_SECONDS",
    "TOKEN_PATTERN",
    "KeyCache",
    "authenticate",
    "create_key",
    "list_keys",
    "parse_token",
    "revoke_key",
]

TOKEN_PATTERN = r"rvk_(k_[a-z2-7]{16})_([a-z2-7]{52})"  # noqa: S105 - a shape, not a secret
_TOKEN = re.compile(TOKEN_PATTERN)
_KEY_ID = re.compile(r"k_[a-z2-7]{16}")
_DUMMY_HASH = hashlib.sha256(b"refvault: no such key").hexdigest()
_CACHES = "refvault.keys.caches"  # the vault attachment: every KeyCache over that vault (weakly held)

DEFAULT_CACHE_SECONDS = 2.0  # how long a KeyCache trusts a successful authentication
DEFAULT_CACHE_SIZE = 4096  # tokens a KeyCache remembers at most


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
    admin: bool = False,
) -> tuple[ApiKey, str]:
    """Store a new key for ``tenant``/``user`` and return it with its token (the only time the token exists).

    ``sessions`` limits the key to those sessions (None: every session of the user). ``admin`` lets the
    key also administer its own tenant over HTTP (``PUT /v1/policy``); it reads nothing more.
    """
    if not isinstance(admin, bool):
        raise InvalidArgument("admin must be True or False")
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
        admin=admin,
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
    """Revoke a key now; False if it is unknown or already revoked. A revoked key never authenticates again.

    Every :class:`KeyCache` over ``vault`` forgets the key at once; caches in
    other processes (or over other vault objects) stop trusting it within their TTL.
    """
    if not isinstance(key_id, str) or _KEY_ID.fullmatch(key_id) is None:
        return False
    for cache in list(_caches(vault)):
        cache.forget(key_id)  # before and after: no authentication in flight keeps the key
    revoked = vault.catalog.revoke_api_key(key_id, vault.clock().astimezone(UTC))
    for cache in list(_caches(vault)):
        cache.forget(key_id)
    return revoked


def _caches(vault: Vault) -> weakref.WeakSet[KeyCache]:
    """The key caches over ``vault`` (a vault attachment, so it goes with the vault)."""
    caches: weakref.WeakSet[KeyCache] = vault.attachment(_CACHES, weakref.WeakSet)
    return caches


def list_keys(vault: Vault, tenant: str | None = None) -> list[ApiKey]:
    """Every key (of ``tenant``), oldest first; secrets are never stored, so none is shown."""
    if tenant is not None:
        check_name("tenant", tenant)
    return vault.catalog.api_keys(tenant)


class KeyCache:
    """Principals of recently authenticated tokens, for one server process; bounded and short-lived.

    ``cached(token)`` answers from memory only (cheap enough for an event loop):
    the principal of a token that authenticated less than ``seconds`` ago, else
    None (which means "ask :meth:`authenticate`", never "refused").
    ``authenticate(token)`` is :func:`authenticate` (a catalog read on a miss)
    that remembers successes. Entries are keyed by the
    token's SHA-256; failures are never remembered (see the module's
    invariants). ``seconds=0`` turns the cache off. At most ``size`` tokens are
    kept; the oldest go first. Thread-safe.
    """

    def __init__(
        self,
        vault: Vault,
        *,
        seconds: float = DEFAULT_CACHE_SECONDS,
        size: int = DEFAULT_CACHE_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds <= 3600:
            raise InvalidArgument("the API key cache TTL must be between 0 and 3600 seconds")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InvalidArgument("the API key cache size must be a positive number of tokens")
        self._vault = vault
        self._seconds = float(seconds)
        self._size = size
        self._clock = clock
        self._entries: dict[str, tuple[float, str, Principal]] = {}  # token hash -> (expiry, key id, principal)
        self._lock = threading.Lock()
        self._generation = 0  # bumped by forget(): an authentication that overlapped it is not remembered
        _caches(vault).add(self)

    def cached(self, token: object) -> Principal | None:
        """The remembered principal of ``token``, or None if there is none (never a catalog read)."""
        if not self._seconds or not isinstance(token, str) or parse_token(token) is None:
            return None
        digest = _hash(token)
        with self._lock:
            entry = self._entries.get(digest)
            if entry is None:
                return None
            if entry[0] <= self._clock():
                del self._entries[digest]
                return None
            return entry[2]

    def authenticate(self, token: object) -> Principal | None:
        """:func:`authenticate`, answered from the cache when it can be; remembers a success."""
        found = self.cached(token)
        if found is not None:
            return found
        with self._lock:
            generation = self._generation
        principal = authenticate(self._vault, token)
        if principal is None or not self._seconds or not isinstance(token, str):
            return principal
        key_id = parse_token(token)
        assert key_id is not None  # authenticate accepted it
        with self._lock:
            if generation == self._generation:
                if len(self._entries) >= self._size:
                    self._evict()
                self._entries[_hash(token)] = (self._clock() + self._seconds, key_id, principal)
        return principal

    def _evict(self) -> None:
        """Drop expired entries, then the oldest ones until there is room (called with the lock held)."""
        now = self._clock()
        for digest in [d for d, entry in self._entries.items() if entry[0] <= now]:
            del self._entries[digest]
        while len(self._entries) >= self._size:
            del self._entries[next(iter(self._entries))]

    def forget(self, key_id: str) -> None:
        """Stop trusting every token of ``key_id`` (called by :func:`revoke_key`)."""
        with self._lock:
            self._generation += 1
            for digest in [d for d, entry in self._entries.items() if entry[1] == key_id]:
                del self._entries[digest]
