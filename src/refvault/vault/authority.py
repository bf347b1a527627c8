"""The one place a read is authorised: who may read an artifact, for which purpose, to which recipient.

Every read method of :class:`~refvault.Vault` (``describe``, ``read_bytes``/``read_range``,
``stream``/``open_artifact``, ``verify_artifact``, ``derived``/``put_derived``/``open_derived``, and
through them every window, grep, record query and cursor page) resolves its artifact with
:func:`authorize`; ``list`` filters with :func:`permitted`. Nothing else in the vault looks an
artifact up for a read. In order:

1. **Owner lookup.** The artifact whose scope is exactly the caller's (tenant, user, session),
   from the catalog (its row's MAC checked there).
2. **Sharing.** Otherwise :func:`_shared` (the grants hook of :mod:`refvault.vault.grants`): the
   manifest as a grantee sees it, when a live grant to the caller covers this purpose and
   recipient; else :class:`~refvault.errors.NotFound`, the same error as an absent id. Every
   ``NotFound`` of a read (this one and those below) goes through
   :func:`refvault.vault.miscopy.not_found`, which makes it a :class:`~refvault.errors.MisCopiedId`
   for an id that looks mis-copied, searching the caller's own scope only.
3. **Expiry.** Past ``expires_at``: :class:`~refvault.errors.Expired` for the owner,
   :class:`~refvault.errors.NotFound` for anyone else (only the owner may learn it existed).
4. **Policy.** :func:`refvault.policy.decide` of the tenant's policy on the manifest's labels,
   the purpose and the recipient. A refusal (``deny``) is :class:`~refvault.errors.PolicyDenied`
   naming the rule id for the owner, and for anyone else :class:`~refvault.errors.NotFound`,
   byte-identical to an absent artifact (same class, same message). ``redact`` serves the
   redaction derivative instead (:meth:`refvault.Vault.redacted_view`: made once, in the
   owner's scope), after deciding again on the derivative's own labels (anything but ``allow``
   refuses as above): the read then returns the derivative's descriptor and bytes, which say
   they are a copy (``retrieval.lineage``).

The audit facts of the read get ``purpose``, ``recipient``, ``rule_id`` (None: no rule matched)
and ``grant_id`` (None: the owner read it) whatever the outcome.

**Policy storage.** A tenant's policy is the catalog setting ``policy:<tenant>`` (its canonical
JSON; an empty text is "no policy"), shared by every process of the store. Each vault caches
what it read per tenant: :meth:`~refvault.Vault.set_policy` through this vault replaces the
cached copy at once; a policy set by another process (or another vault on the same store) is
seen within :data:`POLICY_RECHECK` seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

from refvault import observe
from refvault.catalog.base import Catalog, Manifest
from refvault.errors import Expired, InvalidArgument, NotFound, PolicyDenied, StorageError
from refvault.ids import IdCheck, check_name, id_check, is_artifact_id, lookup_id, namespace_of
from refvault.model import Scope, format_time
from refvault.policy import (
    DEFAULT_PURPOSE,
    DEFAULT_RECIPIENT,
    Decision,
    Policy,
    check_purpose,
    check_recipient,
    decide,
)
from refvault.vault.miscopy import not_found

T = TypeVar("T")

__all__ = [
    "POLICY_RECHECK",
    "PolicyMethods",
    "Vault",
    "authorize",
    "checked_reader",
    "load_policy",
    "permitted",
    "policy_setting",
    "rechecker",
    "store_policy",
]

POLICY_RECHECK = 2.0
"""Seconds a vault keeps a tenant's policy before it looks at the catalog again (another process may set it)."""


class PolicyStore(Protocol):
    """What keeping a tenant's policy needs of a :class:`refvault.Vault`."""

    @property
    def catalog(self) -> Catalog: ...
    @property
    def clock(self) -> Callable[[], datetime]: ...
    def attachment(self, name: str, factory: Callable[[], T]) -> T: ...


class Vault(PolicyStore, Protocol):
    """What the door needs of a :class:`refvault.Vault` (a protocol, so this module need not import the vault)."""

    def redacted_view(self, manifest: Manifest, redactor: str | None, reader: Scope) -> Manifest: ...


# -- the door ------------------------------------------------------------------------------------


def checked_reader(purpose: object, recipient: object) -> tuple[str, str]:
    """``(purpose, recipient)`` checked (:func:`refvault.policy.check_purpose` / ``check_recipient``)."""
    return check_purpose(purpose), check_recipient(recipient)


def authorize(
    vault: Vault,
    scope: Scope,
    artifact_id: str,
    *,
    purpose: str = DEFAULT_PURPOSE,
    recipient: str = DEFAULT_RECIPIENT,
    facts: dict[str, Any] | None = None,
) -> Manifest:
    """The manifest of ``artifact_id`` if ``scope`` may read it for ``purpose``, to ``recipient``; else the error.

    See the module docstring for the order of the checks. ``facts`` (the audit facts of the
    read, when given) get ``purpose``, ``recipient``, ``rule_id`` and ``grant_id``.
    """
    if not isinstance(scope, Scope):
        raise InvalidArgument("scope must be a refvault.Scope(tenant=..., user=..., session=...)")
    kind = id_check(artifact_id)
    artifact_id = lookup_id(artifact_id)
    purpose, recipient = checked_reader(purpose, recipient)
    if facts is not None:
        facts.update(purpose=purpose, recipient=recipient, rule_id=None, grant_id=None)
    try:
        if not is_artifact_id(artifact_id):  # mis-copied: nothing to look up, only the neighbours to search
            raise NotFound(artifact_id)
        return _authorize(vault, scope, artifact_id, purpose, recipient, facts)
    except NotFound:  # absent, or not this caller's: the same answer, from the caller's own scope only
        if kind == "valid":
            raise  # a new id whose check agrees: simply unknown, nothing searched
        raise _not_found(vault, scope, artifact_id, kind, purpose, recipient) from None


def _not_found(vault: Vault, scope: Scope, artifact_id: str, kind: IdCheck, purpose: str, recipient: str) -> NotFound:
    """:func:`refvault.vault.miscopy.not_found`, searching what :meth:`refvault.Vault.list` shows ``scope``."""
    from refvault.vault.grants import shared_manifests

    return not_found(
        vault.catalog,
        scope,
        artifact_id,
        kind,
        shared=lambda: shared_manifests(vault.catalog, scope, vault.clock(), purpose=purpose, recipient=recipient),
        readable=lambda manifest: permitted(vault, scope, manifest, purpose=purpose, recipient=recipient),
    )


def _authorize(
    vault: Vault, scope: Scope, artifact_id: str, purpose: str, recipient: str, facts: dict[str, Any] | None
) -> Manifest:
    manifest = vault.catalog.find(scope, artifact_id)
    owner = manifest is not None
    if manifest is None:
        manifest = _shared(vault, scope, artifact_id, purpose=purpose, recipient=recipient)
        if manifest is None:
            raise NotFound(artifact_id)
        if facts is not None:
            facts["grant_id"] = manifest.grant_id
    decision = _check(vault, scope, manifest, owner, purpose, recipient, facts)
    if decision.action == "redact":  # serve the redaction derivative (made once), if its own labels are allowed
        derivative = vault.redacted_view(manifest, decision.redactor, scope)  # charged to the reader's run
        if _check(vault, scope, derivative, owner, purpose, recipient, None).action != "allow":
            _refuse(manifest, owner, decision)  # named by the id asked for: a refusal says nothing of the copy
        return derivative
    return manifest


def _check(
    vault: Vault,
    scope: Scope,
    manifest: Manifest,
    owner: bool,
    purpose: str,
    recipient: str,
    facts: dict[str, Any] | None,
) -> Decision:
    """Expiry, then policy, for a manifest found for ``scope`` (``owner``: by its own scope): the decision,
    ``allow`` or ``redact`` (anything else raises)."""
    if manifest.expires_at is not None and vault.clock() >= manifest.expires_at:
        if owner:
            raise Expired(manifest.artifact_id, format_time(manifest.expires_at))
        raise NotFound(manifest.artifact_id)
    decision = _decision(vault, manifest, purpose, recipient)
    if facts is not None:
        facts["rule_id"] = decision.rule_id
    if decision.action not in ("allow", "redact"):
        _refuse(manifest, owner, decision)
    return decision


def _refuse(manifest: Manifest, owner: bool, decision: Decision) -> NoReturn:
    observe.event("policy_denial", "rule")
    if owner:
        raise PolicyDenied(manifest.artifact_id, decision.rule_id or "(none)")
    raise NotFound(manifest.artifact_id)


def _decision(vault: PolicyStore, manifest: Manifest, purpose: str, recipient: str) -> Decision:
    labels: frozenset[str] = getattr(manifest, "labels", frozenset())
    return decide(load_policy(vault, manifest.scope.tenant), labels, purpose, recipient)


def _shared(vault: Vault, scope: Scope, artifact_id: str, *, purpose: str, recipient: str) -> Manifest | None:
    """THE GRANTS HOOK: the manifest ``scope`` may read through a sharing grant, or None (then: NotFound).

    Called only when ``scope`` does not own ``artifact_id``. Returns the manifest as the grantee
    sees it (``grant_id`` set: its descriptor marks it shared) when a live grant (not revoked, not
    expired, same tenant) to ``scope`` covers ``purpose`` and ``recipient``; None otherwise, never
    an error for "no grant". Expiry of the artifact and the tenant's policy are checked after it,
    by :func:`authorize`. Filled in by :mod:`refvault.vault.grants`.
    """
    from refvault.vault.grants import usable

    found = usable(vault.catalog, scope, artifact_id, vault.clock(), purpose=purpose, recipient=recipient)
    return None if found is None else found[0]


def rechecker(vault: Vault, scope: Scope, manifest: Manifest, *, purpose: str, recipient: str) -> Callable[[], None]:
    """What a stream calls each time it moves to a new chunk: the read is authorised again, without a lookup for
    the owner (as an open file, an owner's stream keeps reading the version it opened if it is deleted
    meanwhile), and with the grant looked up again for a grantee (a revoke stops the next chunk).
    Expiry and the (cached) policy are checked each time."""
    owner = manifest.grant_id is None

    def again() -> None:
        current = manifest
        if not owner:
            found = _shared(vault, scope, manifest.artifact_id, purpose=purpose, recipient=recipient)
            if found is None and _served_redaction(manifest):
                # a redaction a policy serves for a shared source: the grant is on the source, and the policy
                # must still send this reader the redaction of it (not the source, nor anything else)
                source = _shared(vault, scope, manifest.derived_from[0], purpose=purpose, recipient=recipient)
                if (
                    source is not None
                    and source.scope == manifest.scope
                    and _check(vault, scope, source, owner, purpose, recipient, None).action == "redact"
                ):
                    found = manifest
            if found is None:
                raise NotFound(manifest.artifact_id)
            current = found
        if _check(vault, scope, current, owner, purpose, recipient, None).action != "allow":
            observe.event("policy_denial", "redact")
            raise NotFound(manifest.artifact_id) if not owner else PolicyDenied(manifest.artifact_id, "(redact)")

    return again


def _served_redaction(manifest: Manifest) -> bool:
    """Whether ``manifest`` is a redaction derivative of one source (what a ``redact`` rule serves)."""
    origin = manifest.origin
    return origin is not None and origin.get("kind") == "redaction" and len(manifest.derived_from) == 1


def permitted(vault: PolicyStore, scope: Scope, manifest: Manifest, *, purpose: str, recipient: str) -> bool:
    """Whether ``list`` shows ``manifest`` to ``scope`` for ``purpose`` and ``recipient``: unexpired and allowed."""
    if manifest.expires_at is not None and vault.clock() >= manifest.expires_at:
        return False
    return _decision(vault, manifest, purpose, recipient).allowed


# -- the tenant's policy ---------------------------------------------------------------------------------


def policy_setting(tenant: str) -> str:
    """The catalog setting that holds ``tenant``'s policy: ``policy:<tenant>`` (for a tenant name over 121
    characters, which would not fit a setting's name, ``policy:~<the tenant's 32-hex namespace>``)."""
    check_name("tenant", tenant)
    name = "policy:" + tenant
    return name if len(name) <= 128 else "policy:~" + namespace_of(tenant)


class _PolicyCache:
    """A vault's copies of tenants' policies: ``tenant -> (monotonic time read, stored text, policy)``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: dict[str, tuple[float, str | None, Policy | None]] = {}


def _cache(vault: PolicyStore) -> _PolicyCache:
    return vault.attachment("refvault.policy", _PolicyCache)


def _parse(text: str | None) -> Policy | None:
    if not text:
        return None
    try:
        return Policy.from_json(text)
    except InvalidArgument:
        raise StorageError("the stored policy of this tenant cannot be read: set it again") from None


def load_policy(vault: PolicyStore, tenant: str) -> Policy | None:
    """``tenant``'s policy (None: none set), from this vault's copy if it is under :data:`POLICY_RECHECK` s old."""
    name = policy_setting(tenant)  # checks the tenant's name first
    cache = _cache(vault)
    now = time.monotonic()
    entry = cache.entries.get(tenant)
    if entry is not None and now - entry[0] < POLICY_RECHECK:
        return entry[2]
    text = vault.catalog.get_setting(name)
    policy = entry[2] if entry is not None and entry[1] == text else _parse(text)
    with cache.lock:
        cache.entries[tenant] = (now, text, policy)
    return policy


def store_policy(vault: PolicyStore, tenant: str, policy: Policy | None) -> None:
    """Make ``policy`` (None: none) ``tenant``'s, for every process of the store; this vault sees it at once."""
    if policy is not None and not isinstance(policy, Policy):
        raise InvalidArgument("policy must be a refvault.policy.Policy (or None to remove the tenant's policy)")
    name = policy_setting(tenant)
    text = "" if policy is None else policy.to_json()
    for _ in range(100):
        current = vault.catalog.get_setting(name)
        if current == text or vault.catalog.swap_setting(name, current, text):
            break
    else:  # pragma: no cover - a hundred lost races in a row
        raise StorageError("the tenant's policy is being changed concurrently: try again")
    cache = _cache(vault)
    with cache.lock:
        cache.entries[tenant] = (time.monotonic(), text, policy)


class PolicyMethods:
    """The policy methods of :class:`refvault.Vault` (mixed in): :meth:`set_policy` and :meth:`policy`."""

    if TYPE_CHECKING:
        catalog: Catalog
        clock: Callable[[], datetime]
        _closed: bool

        def attachment(self, name: str, factory: Callable[[], T]) -> T: ...
        def _audited(
            self, action: str, scope: object, artifact_id: object = None
        ) -> AbstractContextManager[dict[str, Any]]: ...

    def set_policy(self, tenant: str, policy: Policy | None, *, by: Scope | None = None) -> None:
        """Make ``policy`` the tenant's disclosure policy (None: remove it), for every process of the store.

        Every later read in the tenant is decided by it (:mod:`refvault.policy`,
        :mod:`refvault.vault.authority`); this vault applies it at once, other processes within
        :data:`~refvault.vault.authority.POLICY_RECHECK` seconds. Audited as ``set_policy``
        (by ``by``, the caller's scope, when known; else by the tenant), with the version and
        the number of rules.
        """
        policy_setting(tenant)  # a tenant's name, checked before anything (the audit included) takes it
        with self._audited("set_policy", by if by is not None else tenant) as facts:
            if by is not None and (not isinstance(by, Scope) or by.tenant != tenant):
                raise InvalidArgument("a policy is set by a caller of its own tenant")
            if policy is not None and not isinstance(policy, Policy):
                raise InvalidArgument("policy must be a refvault.policy.Policy (or None to remove the tenant's policy)")
            facts.update(
                detail="policy removed" if policy is None else "policy set",
                selection="none" if policy is None else f"version={policy.version};rules={len(policy.rules)}",
            )
            store_policy(self, tenant, policy)

    def policy(self, tenant: str) -> Policy | None:
        """The tenant's disclosure policy (None: none is set, so every read is allowed by policy)."""
        if self._closed:
            raise StorageError("this vault is closed")
        return load_policy(self, tenant)
