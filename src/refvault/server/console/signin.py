"""Who is looking at the console: sign-in by API key or by a single-use link, session cookies, CSRF tokens.

* **The key decides everything.** A console session acts as the API key that opened it (its tenant, its user,
  the sessions it allows, recipient ``user``): no page reaches anything that key could not. The key is looked
  up again on every request, so revoking it ends its console sessions at once.
* **A sign-in link is single-use and short.** ``POST /v1/console/sessions`` (a bearer key) signs a token
  (:data:`LINK_TTL`, 60 s) with the store's ``console-keys`` ring; following it spends a one-time marker in the
  catalog (``swap_setting``, so two servers of one store agree), then sets the session cookie. A second use, an
  expired, forged or revoked-key link all get the same refusal.
* **The cookie carries no secret of the key.** It is a signed token naming the key id and a random session
  nonce, ``HttpOnly``, ``SameSite=Strict``, ``Path=/console``, valid :data:`SESSION_TTL`; signing out marks the
  nonce ended in the catalog, so a copied cookie stops working too.
* **Every state-changing form carries a CSRF token** bound to the session (or, on the login form, to a
  pre-login cookie) and signed by the same ring; a form without it, or with another session's, is refused
  (403) and changes nothing.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from refvault.errors import InvalidArgument, InvalidCursor, RefvaultError
from refvault.keys import authenticate, parse_token
from refvault.model import Principal, Scope
from refvault.vault.core import Vault
from refvault.vault.rings import SharedRing

__all__ = [
    "COOKIE",
    "LINK_TTL",
    "LOGIN_COOKIE",
    "SESSION_TTL",
    "Viewer",
    "checked_next",
    "csrf_token",
    "end_session",
    "issue_link",
    "login_token",
    "open_session",
    "redeem_link",
    "sign_in_with_key",
    "valid_csrf",
    "valid_login_token",
]

COOKIE = "refvault_console"
LOGIN_COOKIE = "refvault_console_login"
LINK_TTL = timedelta(seconds=60)
SESSION_TTL = timedelta(hours=8)
_LOGIN_TTL = timedelta(hours=1)
_SPENT = "console-link-spent:"  # catalog settings: a link's nonce once used
_ENDED = "console-session-ended:"  # catalog settings: a session's nonce once signed out


@dataclass(frozen=True, slots=True)
class Viewer:
    """A signed-in console user: the key's principal, its key id, and the session's nonce (for CSRF)."""

    principal: Principal
    key_id: str
    nonce: str

    def scope(self, session: str) -> Scope:
        """The scope this viewer acts in for ``session`` (:class:`InvalidArgument` if its key does not allow it)."""
        scope = Scope(self.principal.tenant, self.principal.user, session)
        if not self.principal.allows(scope):
            raise InvalidArgument("this API key may not act in that session")
        return scope


def _ring(vault: Vault) -> SharedRing:
    return vault.attachment(
        "refvault.console.keys", lambda: SharedRing(vault, "console-keys", what="console key", grace=timedelta(0))
    )


def _sign(vault: Vault, payload: dict[str, Any], ttl: timedelta) -> str:
    return _ring(vault).ring(vault.clock()).sign(payload, now=vault.clock(), ttl=ttl)


def _open(vault: Vault, token: object) -> dict[str, Any] | None:
    """The payload of a console token this store signed, or None (every reason alike)."""
    if not isinstance(token, str) or not token or len(token) > 2048:
        return None
    ring = _ring(vault)
    try:
        try:
            return ring.ring(vault.clock()).open(token, now=vault.clock())
        except InvalidCursor as exc:
            if exc.reason != "unknown_key":
                raise
            return ring.ring(vault.clock(), refresh=True).open(token, now=vault.clock())
    except RefvaultError:
        return None


def _principal(vault: Vault, key_id: object) -> Principal | None:
    """The principal of an unrevoked key, looked up now."""
    if not isinstance(key_id, str):
        return None
    key = vault.catalog.find_api_key(key_id)
    if key is None or key.revoked_at is not None:
        return None
    return Principal(key.tenant, key.user, key.sessions)


def checked_next(target: object) -> str:
    """A console path to go to after sign-in: ``/console`` or below it, on this server (anything else: ``/console``)."""
    if not isinstance(target, str) or len(target) > 1024 or not target.isprintable():
        return "/console"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or "\\" in target or target.startswith("//") or "%" in parts.path:
        return "/console"
    segments = parts.path.split("/")
    if (parts.path != "/console" and not parts.path.startswith("/console/")) or {".", ".."} & set(segments):
        return "/console"  # a dot-segment would lead the browser out of /console
    return target


def issue_link(vault: Vault, key_id: str, next_path: object) -> str:
    """A single-use sign-in token for ``key_id`` (already authenticated by the caller), valid :data:`LINK_TTL`."""
    payload = {"k": key_id, "n": secrets.token_urlsafe(18), "x": checked_next(next_path), "use": "link"}
    return _sign(vault, payload, LINK_TTL)


def redeem_link(vault: Vault, token: object) -> tuple[str, str] | None:
    """Spend a sign-in link: ``(session cookie, next path)``, or None if it is not a live, unused link of a live key."""
    payload = _open(vault, token)
    if payload is None or payload.get("use") != "link" or not isinstance(payload.get("n"), str):
        return None
    if _principal(vault, payload.get("k")) is None:
        return None
    if not vault.catalog.swap_setting(_SPENT + payload["n"], None, "1"):
        return None  # used before
    return _session_cookie(vault, str(payload["k"])), checked_next(payload.get("x"))


def sign_in_with_key(vault: Vault, token: object) -> str | None:
    """A session cookie for a valid API key (the login form), or None."""
    if authenticate(vault, token) is None:
        return None
    key_id = parse_token(token)
    return None if key_id is None else _session_cookie(vault, key_id)


def _session_cookie(vault: Vault, key_id: str) -> str:
    return _sign(vault, {"k": key_id, "n": secrets.token_urlsafe(18), "use": "session"}, SESSION_TTL)


def open_session(vault: Vault, cookie: object) -> Viewer | None:
    """The viewer of a live session cookie (signed here, unexpired, not signed out, its key unrevoked), else None."""
    payload = _open(vault, cookie)
    if payload is None or payload.get("use") != "session" or not isinstance(payload.get("n"), str):
        return None
    principal = _principal(vault, payload.get("k"))
    if principal is None or vault.catalog.get_setting(_ENDED + payload["n"]) is not None:
        return None
    return Viewer(principal, str(payload["k"]), payload["n"])


def end_session(vault: Vault, viewer: Viewer) -> None:
    """Sign out: the session's cookie never works again, wherever it was copied."""
    vault.catalog.swap_setting(_ENDED + viewer.nonce, None, "1")


def csrf_token(vault: Vault, viewer: Viewer) -> str:
    """The CSRF token of ``viewer``'s session (valid as long as a session can be)."""
    return _sign(vault, {"n": viewer.nonce, "use": "csrf"}, SESSION_TTL)


def valid_csrf(vault: Vault, viewer: Viewer, token: object) -> bool:
    payload = _open(vault, token)
    return payload is not None and payload.get("use") == "csrf" and payload.get("n") == viewer.nonce


def login_token(vault: Vault) -> tuple[str, str]:
    """``(pre-login cookie, form token)`` for the login form: the form's token names the cookie's nonce."""
    nonce = secrets.token_urlsafe(18)
    return nonce, _sign(vault, {"n": nonce, "use": "login"}, _LOGIN_TTL)


def valid_login_token(vault: Vault, cookie: object, token: object) -> bool:
    payload = _open(vault, token)
    return (
        payload is not None
        and payload.get("use") == "login"
        and isinstance(cookie, str)
        and cookie.isascii()
        and secrets.compare_digest(str(payload.get("n")), cookie)
    )
