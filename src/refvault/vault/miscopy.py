"""Telling a mis-copied artifact id from an unknown one, and finding the id the caller meant.

Every read resolves its id through :func:`refvault.vault.authority.authorize`, which asks
:func:`not_found` for the error of an id that names nothing the caller may read. Invariants
(``tests/vault/test_miscopy.py``, ``tests/security/test_miscopy_scope.py``):

* **Only near misses are searched.** A new id whose check characters agree names nothing: it is
  simply unknown (:class:`~refvault.errors.NotFound`), no search. A mis-copied string
  (:func:`refvault.ids.id_check`) is a :class:`~refvault.errors.MisCopiedId` whatever the search
  finds; a legacy-length id that names nothing is one only if the search finds a neighbour.
* **Only the caller's own scope is searched**, with the visibility of :meth:`refvault.Vault.list`
  for the read's purpose and recipient: the caller's artifacts and those shared with it by a
  grant that covers the read, unexpired and allowed by the tenant's policy, and never a sealed
  one. The answer depends on the caller's scope and the string only, so an absent id and
  another scope's get the same error, and no id the caller could not read is ever suggested.
* **Exactly one.** A suggestion is made only when exactly one such id is within edit distance 2
  (:func:`refvault.ids.id_distance`: each character changed, dropped, doubled or swapped counts
  1); with two or more, none is (``ambiguous``).
* **Bounded.** Only the caller's :data:`SUGGESTION_WINDOW` most recent artifacts (their ids, one
  indexed query) and those shared with it are compared; each comparison is filtered and banded
  (about a microsecond), and only an id within the distance is read and authenticated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from refvault.catalog.base import Catalog, Manifest
from refvault.errors import MisCopiedId, NotFound
from refvault.ids import IdCheck, id_distance
from refvault.model import Scope

__all__ = ["MAX_DISTANCE", "SUGGESTION_WINDOW", "neighbours", "not_found"]

SUGGESTION_WINDOW = 1000
"""How many of the caller's most recent artifacts a mis-copied id is compared with."""

MAX_DISTANCE = 2
"""The largest edit distance at which an id the caller may read counts as the one meant."""


def neighbours(
    catalog: Catalog,
    scope: Scope,
    artifact_id: str,
    *,
    shared: Callable[[], Iterable[Manifest]],
    readable: Callable[[Manifest], bool],
) -> list[str]:
    """The ids ``scope`` may read within :data:`MAX_DISTANCE` of ``artifact_id``: among its own
    :data:`SUGGESTION_WINDOW` most recent artifacts (newest first), then the ``shared`` views (those shared with
    it by a grant that covers the read). Each own id close enough is looked up again (its row authenticated);
    none sealed, and each ``readable`` (unexpired and allowed, as :meth:`refvault.Vault.list` decides). Never
    ``artifact_id`` itself (it names nothing the caller may read, or it would not be searched for)."""
    found: list[str] = []

    def consider(manifest: Manifest | None) -> None:
        if manifest is None or manifest.artifact_id in found or manifest.disclosure == "sealed":
            return
        if readable(manifest):
            found.append(manifest.artifact_id)

    for candidate in catalog.recent_ids(scope, SUGGESTION_WINDOW):
        if candidate != artifact_id and id_distance(artifact_id, candidate) <= MAX_DISTANCE:
            consider(catalog.find(scope, candidate))
    for manifest in shared():
        if manifest.artifact_id != artifact_id and id_distance(artifact_id, manifest.artifact_id) <= MAX_DISTANCE:
            consider(manifest)
    return found


def not_found(
    catalog: Catalog,
    scope: Scope,
    artifact_id: str,
    kind: IdCheck,
    *,
    shared: Callable[[], Iterable[Manifest]],
    readable: Callable[[Manifest], bool],
) -> NotFound:
    """The error for ``artifact_id`` (``kind`` is what :func:`refvault.ids.id_check` says of it) naming nothing
    ``scope`` may read: a :class:`MisCopiedId` (with the id meant, if exactly one is close: :func:`neighbours`)
    or a :class:`NotFound`. See the module docstring."""
    if kind not in ("legacy", "miscopied"):
        return NotFound(artifact_id)
    close = neighbours(catalog, scope, artifact_id, shared=shared, readable=readable)
    if kind == "miscopied" or close:
        return MisCopiedId(artifact_id, close[0] if len(close) == 1 else None, ambiguous=len(close) > 1)
    return NotFound(artifact_id)
