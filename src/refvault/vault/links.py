"""Capability links: short-lived, HMAC-signed URLs to one artifact (optionally one byte range) for one recipient.

A link lets something without an API key (a browser, a download manager, a remote tool) fetch bytes the
issuer may read. Invariants (``tests/vault/test_links.py``, ``tests/security/test_link_refusals.py``):

* **Signed, bound, short-lived.** The token is a :class:`~refvault.keyring.KeyRing` token (``rvc1.<body>.<mac>``)
  under the store's ``link-keys`` ring (:class:`~refvault.vault.rings.SharedRing`, no grace: rotating the ring
  kills every link signed before). Its body binds the issuer's scope, the artifact id, the byte range (or the
  whole artifact), the recipient and the purpose, and expires after ``expires_in`` (1 s to 24 h; default 5 min).
  The body is signed, not encrypted: it names the scope and the artifact, never content.
* **Re-checked at every use.** Redeeming a link reads through the vault as its issuer with the link's purpose
  and recipient, so the artifact's expiry, the issuer's grant (a revoked or expired grant kills the link) and the
  tenant's policy are checked again, now. A range that no longer fits the artifact is refused.
* **Refused like absent.** A malformed, tampered, expired, key-rotated, revoked or out-of-range link, or one for
  an artifact that is gone, raises the same :class:`~refvault.errors.NotFound` with the same message: the
  caller learns nothing about why.
* **Revocable one by one.** Every link carries a random nonce; :func:`revoke_link` (by a scope of the issuing
  tenant) marks it revoked in the catalog (``swap_setting``, so every process of the store agrees), and every
  redeem looks the marker up (one keyed read): a revoked link is refused like an absent artifact from then on.
  Links made before nonces existed cannot be revoked one by one (rotate the link keys).
* **Audited.** Issuing is audited as ``link``, every use as ``link_use`` (and the read it makes as a read),
  revoking as ``link_revoke``.
* **The artifact id stays no bearer capability**: only a token this store signed opens anything.
"""

from __future__ import annotations

import secrets
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from refvault.errors import InvalidArgument, InvalidCursor, LinkRefused, NotFound, RefvaultError
from refvault.ids import check_artifact_id, is_artifact_id
from refvault.model import Scope
from refvault.vault.rings import RingHost, SharedRing

if TYPE_CHECKING:
    from collections.abc import Callable

    from refvault.model import Descriptor
    from refvault.vault.verified import ArtifactStream

T = TypeVar("T")

__all__ = [
    "DEFAULT_LINK_TTL",
    "LINK_PATH",
    "MAX_LINK_TTL",
    "Link",
    "LinkHost",
    "Linking",
    "OpenedLink",
    "issue_link",
    "open_link",
    "redeem_link",
    "revoke_link",
    "rotate_link_keys",
    "token_of",
]

LINK_PATH = "/v1/links/"
"""Where ``refvault serve`` redeems links: ``GET /v1/links/<token>`` (no API key)."""
DEFAULT_LINK_TTL = timedelta(minutes=5)
MAX_LINK_TTL = timedelta(hours=24)
_REVOKED = "link-revoked:"
"""The catalog setting that marks a link's nonce revoked (value: when the link would have expired, ISO 8601)."""


@dataclass(frozen=True, slots=True)
class Link:
    """What a valid link carries: who issued it, which artifact (and range), for whom and why."""

    scope: Scope
    artifact_id: str
    byte_range: tuple[int, int] | None
    recipient: str
    purpose: str
    nonce: str | None = None  # None: a link made before links were revocable one by one


@dataclass(slots=True)
class OpenedLink:
    """A redeemed link: the artifact's descriptor and a verified stream positioned at ``start``; the caller
    sends ``end - start`` bytes and closes the stream."""

    descriptor: Descriptor
    stream: ArtifactStream
    start: int
    end: int


class LinkHost(RingHost, Protocol):
    """What links need of a vault (a :class:`~refvault.vault.core.Vault` is one)."""

    def attachment(self, name: str, factory: Callable[[], T]) -> T: ...
    def audited(
        self, action: str, scope: Scope, artifact_id: str | None = None
    ) -> AbstractContextManager[dict[str, Any]]: ...
    def describe(self, scope: Scope, artifact_id: str, *, purpose: str = ..., recipient: str = ...) -> Descriptor: ...
    def open_artifact(
        self, scope: Scope, artifact_id: str, *, purpose: str = ..., recipient: str = ...
    ) -> tuple[Descriptor, ArtifactStream]: ...


def _ring(vault: LinkHost) -> SharedRing:
    return vault.attachment(
        "refvault.vault.link_keys", lambda: SharedRing(vault, "link-keys", what="link key", grace=timedelta(0))
    )


def _checked_range(byte_range: object) -> tuple[int, int] | None:
    if byte_range is None:
        return None
    if (
        not isinstance(byte_range, tuple | list)
        or len(byte_range) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in byte_range)
        or byte_range[1] <= byte_range[0]
    ):
        raise InvalidArgument("byte_range must be (start, end) with 0 <= start < end, end exclusive")
    return int(byte_range[0]), int(byte_range[1])


def _checked_ttl(expires_in: object) -> timedelta:
    if not isinstance(expires_in, timedelta) or not timedelta(seconds=1) <= expires_in <= MAX_LINK_TTL:
        raise InvalidArgument("a link's lifetime (expires_in) must be from 1 second to 24 hours")
    return expires_in


def issue_link(
    vault: LinkHost,
    scope: Scope,
    artifact_id: str,
    *,
    recipient: str,
    purpose: str = "default",
    expires_in: timedelta = DEFAULT_LINK_TTL,
    byte_range: tuple[int, int] | None = None,
) -> str:
    """A link token for an artifact ``scope`` may read now toward ``recipient`` for ``purpose``.

    The issuer's access is checked first (``describe`` with the same purpose and recipient: an artifact it
    may not read gets no link); a ``byte_range`` must lie inside the artifact.
    """
    span = _checked_range(byte_range)
    ttl = _checked_ttl(expires_in)
    descriptor = vault.describe(scope, check_artifact_id(artifact_id), purpose=purpose, recipient=recipient)
    if span is not None and span[1] > descriptor.size:
        raise InvalidArgument(f"byte_range ends past the artifact's {descriptor.size} bytes")
    payload = {
        "t": scope.tenant,
        "u": scope.user,
        "s": scope.session,
        "a": descriptor.artifact_id,
        "b": None if span is None else list(span),
        "r": recipient,
        "p": purpose,
        "n": secrets.token_urlsafe(12),  # what revoke_link marks revoked
    }
    with vault.audited("link", scope, descriptor.artifact_id) as facts:
        facts.update(purpose=purpose, recipient=recipient, content_hash=descriptor.content_hash)
        if span is not None:
            facts["byte_range"] = span
        token = _ring(vault).ring(vault.clock()).sign(payload, now=vault.clock(), ttl=ttl)
    return token


def redeem_link(vault: LinkHost, token: object) -> Link:
    """What a link this store signed carries; :class:`NotFound` (one message for every reason) if it is not one."""
    ring = _ring(vault)
    try:
        try:
            payload = ring.ring(vault.clock()).open(token, now=vault.clock())
        except InvalidCursor as exc:
            if exc.reason != "unknown_key":
                raise
            payload = ring.ring(vault.clock(), refresh=True).open(token, now=vault.clock())
        span = payload.get("b")
        artifact_id = payload.get("a")
        nonce = payload.get("n")
        if not is_artifact_id(artifact_id) or not (nonce is None or isinstance(nonce, str)):
            raise InvalidArgument("malformed")
        if nonce is not None and vault.catalog.get_setting(_REVOKED + nonce) is not None:
            raise InvalidArgument("revoked")
        return Link(
            Scope(payload["t"], payload["u"], payload["s"]),
            artifact_id,
            None if span is None else _checked_range(tuple(span)),
            str(payload["r"]),
            str(payload["p"]),
            nonce,
        )
    except (RefvaultError, KeyError, TypeError, ValueError):
        raise LinkRefused from None


def token_of(link: object) -> object:
    """The token of a link given as its token, its path (``/v1/links/<token>``) or its whole URL."""
    if isinstance(link, str) and LINK_PATH in link:
        return link.rsplit(LINK_PATH, 1)[1]
    return link


def revoke_link(vault: LinkHost, scope: Scope, link: object) -> bool:
    """Revoke one link (its token, path or URL) a scope of ``scope``'s tenant issued: every later use is refused.

    True if this call revoked it; False if it was revoked already, or opens nothing anyway (expired, tampered,
    key-rotated). A live link of another tenant raises the same :class:`~refvault.errors.LinkRefused` as a
    malformed one; a link without a nonce (made before links were revocable) raises
    :class:`~refvault.errors.InvalidArgument`. Audited as ``link_revoke``.
    """
    try:
        found = redeem_link(vault, token_of(link))
    except LinkRefused:
        return False  # dead already: nothing to revoke (and nothing said about why)
    if found.scope.tenant != scope.tenant:
        raise LinkRefused
    if found.nonce is None:
        raise InvalidArgument("this link predates per-link revocation: rotate the link keys to revoke it")
    with vault.audited("link_revoke", scope, found.artifact_id) as facts:
        facts.update(purpose=found.purpose, recipient=found.recipient)
        until = (vault.clock() + MAX_LINK_TTL).isoformat()  # no marker is needed past any link's lifetime
        return vault.catalog.swap_setting(_REVOKED + found.nonce, None, until)


def open_link(vault: LinkHost, token: object) -> OpenedLink:
    """Redeem ``token`` and open what it names, re-checked now as its issuer (expiry, grant, policy).

    Every refusal is the same :class:`NotFound`. Audited as ``link_use`` (and the read as a ``read``).
    """
    link = redeem_link(vault, token)
    try:
        with vault.audited("link_use", link.scope, link.artifact_id) as facts:
            facts.update(purpose=link.purpose, recipient=link.recipient)
            descriptor, stream = vault.open_artifact(
                link.scope, link.artifact_id, purpose=link.purpose, recipient=link.recipient
            )
            start, end = (0, descriptor.size) if link.byte_range is None else link.byte_range
            if end > descriptor.size:  # the artifact cannot change, but a link is never trusted
                stream.close()
                raise NotFound(link.artifact_id)
            facts.update(content_hash=descriptor.content_hash, byte_range=(start, end))
    except RefvaultError:
        raise LinkRefused from None
    stream.seek(start)
    return OpenedLink(descriptor, stream, start, end)


def rotate_link_keys(vault: LinkHost) -> None:
    """Sign links with a fresh key; every link signed before stops working at once (no grace)."""
    _ring(vault).rotate(vault.clock())


class Linking:
    """The capability-link methods of :class:`refvault.Vault` (mixed in; the vault is a :class:`LinkHost`)."""

    def link(
        self: LinkHost,
        scope: Scope,
        artifact_id: str,
        *,
        recipient: str,
        purpose: str = "default",
        expires_in: timedelta = DEFAULT_LINK_TTL,
        byte_range: tuple[int, int] | None = None,
    ) -> str:
        """A capability link (the path ``/v1/links/<token>`` on a ``refvault serve`` of this store) to one artifact
        (or ``byte_range``, end exclusive) for ``recipient``, valid ``expires_in`` (1 s to 24 h).

        It needs no API key; it is re-checked at every use against the artifact's expiry, the issuer's grant
        and the tenant's policy, dies when the link keys rotate (:meth:`rotate_link_keys`), and every refusal
        looks the same (:class:`~refvault.errors.LinkRefused`). See :mod:`refvault.vault.links`.
        """
        token = issue_link(
            self,
            scope,
            artifact_id,
            recipient=recipient,
            purpose=purpose,
            expires_in=expires_in,
            byte_range=byte_range,
        )
        return LINK_PATH + token

    def open_link(self: LinkHost, token: str) -> OpenedLink:
        """Redeem a link token (the last part of the link's path): the descriptor and a verified stream at its
        start. :class:`~refvault.errors.LinkRefused` for every link that opens nothing."""
        return open_link(self, token)

    def revoke_link(self: LinkHost, scope: Scope, link: str) -> bool:
        """Revoke one link (its token, ``/v1/links/<token>`` path or URL) issued in ``scope``'s tenant: every later
        use is refused like an absent artifact. True if this call revoked it (see :func:`revoke_link`)."""
        return revoke_link(self, scope, link)

    def rotate_link_keys(self: LinkHost) -> None:
        """Sign links with a fresh key; every link issued before stops working at once."""
        rotate_link_keys(self)
