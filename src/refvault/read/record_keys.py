"""The cursor key ring of a vault's record queries, shared by every process of its store.

Part of :mod:`refvault.read.records`; cursors themselves are :mod:`refvault.read.cursors`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from refvault.errors import InvalidCursor
from refvault.read import cursors
from refvault.vault.rings import SharedRing

if TYPE_CHECKING:
    from refvault.vault.core import Vault

__all__ = ["Keys", "checked_cursor", "keys_of", "ring_of", "rotate_cursor_keys"]


class Keys(SharedRing):
    """A vault's cursor key ring (``cursor-keys``), shared by every process of its store (:class:`SharedRing`)."""

    def __init__(self, vault: Vault) -> None:
        super().__init__(vault, "cursor-keys", what="cursor key")


def keys_of(vault: Vault) -> Keys:
    return vault.attachment("refvault.read.cursor_keys", lambda: Keys(vault))


def ring_of(vault: Vault) -> cursors.KeyRing:
    return keys_of(vault).ring(vault.clock())


def checked_cursor(vault: Vault, cursor: object, binding: Mapping[str, str]) -> dict[str, Any]:
    """The position a cursor carries; a key unknown here is looked for once more in the shared ring."""
    try:
        return cursors.check(ring_of(vault), cursor, now=vault.clock(), binding=binding)
    except InvalidCursor as exc:
        if exc.reason != "unknown_key":
            raise
    ring = keys_of(vault).ring(vault.clock(), refresh=True)  # signed after a rotation this process has not seen
    return cursors.check(ring, cursor, now=vault.clock(), binding=binding)


def rotate_cursor_keys(vault: Vault) -> None:
    """Start signing cursors with a fresh key; cursors signed with the old one keep working for the grace period.

    The new ring replaces ``cursor-keys.json`` of an embedded store, or the
    catalog's ``cursor-keys`` setting otherwise; other processes pick it up on
    their next query (within about a second, at once for a cursor it signed).
    """
    keys_of(vault).rotate(vault.clock())
