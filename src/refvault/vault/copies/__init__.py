"""Derived copies under control: redaction derivatives and receipts, lineage, staleness, cascade deletion,
holds, quotas, retention and replay status (the values are in :mod:`refvault.copies`).

Mixed into :class:`refvault.Vault` as :class:`Copies`; everything about a copy of an artifact happens here.

Invariants:

* **A copy is its own artifact.** A redaction gets a new id and its own content hash, ``derived_from`` its
  source, the source's labels minus those its redactor removes, and its origin (transformation, version,
  policy version, counts) in its manifest, under the row's MAC: the receipt cannot be edited without the
  store's manifest key and never claims the source's bytes.
* **Made once.** One redaction per (source, redactor, fields): asking again, or a policy's ``redact``
  action serving it, reuses the live one.
* **Lineage survives deletion.** The ``derived_from`` reverse index and the marks outlive the artifacts they
  name, so a copy whose source was deleted reports ``revoked``, and ``lineage`` still shows it.
* **Status is transitive.** :meth:`Copies.lineage_status` folds the marks of an artifact and every ancestor
  (:func:`refvault.copies.status_of`); ``describe`` (so every selective read) carries it for a copy or a
  marked artifact.
* **A cascade is one transaction.** :meth:`Copies.delete` removes the artifact and every derived artifact of
  the same owner in one catalog transaction with their marks and audit entries: a crash leaves all or none,
  never a live copy of a deleted source. A held artifact (or one with a held copy) is kept and reported.
  Bytes go at the next ``gc``, once nothing references them (deduplication is per tenant).
* **A computation is a copy too.** :meth:`Computations.put_computed` records a computation's output (a
  kernel's ``compute``) with an origin of kind ``computation`` naming its inputs' content hashes.
"""

from __future__ import annotations

from refvault.vault.copies.common import MAX_REASON, redactor_for
from refvault.vault.copies.computed import Computations
from refvault.vault.copies.derivatives import Derivatives
from refvault.vault.copies.graph import LineageWalk
from refvault.vault.copies.lifecycle import Lifecycle

__all__ = ["MAX_REASON", "Copies", "redactor_for"]


class Copies(Derivatives, LineageWalk, Lifecycle, Computations):
    """The derived-copy methods of :class:`refvault.Vault` (see the module docstring)."""
