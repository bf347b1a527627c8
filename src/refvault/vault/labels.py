"""Declassification: the checks of removing labels from an artifact (``Vault.declassify`` runs them).

Labels are protected manifest state (:mod:`refvault.catalog.macs` covers them). They are set at
capture and removed only here, by the artifact's owner (``Vault.declassify`` looks the artifact up in
the caller's own scope first, so anyone else gets the same ``NotFound`` as for an absent id). What the
audit keeps of a declassification is fixed text and names: the labels removed and the SHA-256 of the
reason, never the reason itself, which is free text and could carry payload
(``tests/vault/test_labels.py``).
"""

from __future__ import annotations

import hashlib

from refvault.catalog.base import Manifest
from refvault.errors import InvalidArgument, InvalidMetadata
from refvault.model import check_labels

__all__ = ["DECLASSIFY_DETAIL", "MAX_REASON", "checked_removal"]

MAX_REASON = 1024
DECLASSIFY_DETAIL = "labels removed"
"""The audit's ``detail`` of every declassification (a fixed string)."""


def checked_removal(manifest: Manifest, remove: object, reason: object) -> tuple[frozenset[str], str]:
    """The labels ``manifest`` keeps once ``remove`` goes, and the audit's ``selection`` summary of it.

    :class:`InvalidArgument` (nothing changes) unless ``reason`` is 1-:data:`MAX_REASON` characters
    and ``remove`` is a non-empty collection of label names that the artifact all carries. The
    summary is ``removed=<names>;reason_sha256=<hex>``.
    """
    if not isinstance(reason, str) or not 1 <= len(reason) <= MAX_REASON:
        raise InvalidArgument(f"reason must be a string of 1 to {MAX_REASON} characters saying why the labels go")
    if isinstance(remove, str):
        raise InvalidArgument("remove must be a set of label names, e.g. {'pii'}")
    try:
        removed = check_labels(remove)
    except InvalidMetadata as exc:
        raise InvalidArgument(str(exc)) from None
    if not removed:
        raise InvalidArgument("remove must name at least one label")
    missing = sorted(removed - manifest.labels)
    if missing:
        raise InvalidArgument(f"artifact {manifest.artifact_id} does not carry the label {missing[0]!r}")
    digest = hashlib.sha256(reason.encode("utf-8", "surrogatepass")).hexdigest()
    return manifest.labels - removed, f"removed={','.join(sorted(removed))};reason_sha256={digest}"
