"""Outputs of computations over artifacts, recorded as copies with a receipt (:meth:`Computations.put_computed`).

A computation's output (a kernel's ``compute``: :mod:`refvault.kernel`) is an artifact derived from its
inputs like a redaction is: ``derived_from`` the inputs, and an origin of kind ``computation`` that names the
transformation and each input's content hash as the vault read it, kept under the row's MAC, so
``lineage`` shows the inputs and ``receipt`` describes the computation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Unpack

from refvault.errors import InvalidArgument
from refvault.model import Descriptor, Scope, checked_label
from refvault.operations import CaptureMetadata, CaptureOptions
from refvault.vault.copies.common import CopiesHost, checked_scope

__all__ = ["COMPUTATION", "MAX_COUNTS", "Computations"]

COMPUTATION = "computation"
"""The origin kind of a computation's output (what ``lineage`` shows as its kind)."""
MAX_COUNTS = 32


class Computations(CopiesHost):
    """:meth:`put_computed` (mixed into the vault)."""

    def put_computed(
        self,
        scope: Scope,
        data: object,
        *,
        transformation: str,
        version: str = "1",
        counts: Mapping[str, int] | None = None,
        **metadata: Unpack[CaptureOptions],
    ) -> Descriptor:
        """Capture the output of a computation ``scope`` ran over its own artifacts ``derived_from`` (required).

        Like :meth:`put` with ``derived_from``, but the origin is of kind ``computation`` and names
        ``transformation`` and ``version`` (1-256 printable ASCII characters each, e.g. ``"kernel.compute"``)
        and ``counts`` (at most 32 names with non-negative integers). Every input must be ``scope``'s own
        readable artifact (anything else is :class:`~refvault.errors.NotFound`, or
        :class:`~refvault.errors.Expired`), checked before the first byte is read; its content hash is
        recorded as the vault reads it, and the output is published only if every input still exists
        then. ``metadata`` are :meth:`put`'s keyword arguments (``supersedes`` is refused). Audited as ``put``.
        """
        owner = checked_scope(scope)
        with self._audited("put", owner) as facts:
            checked = CaptureMetadata.of(metadata)
            sources = checked.recorded_derived_from()
            if not sources:
                raise InvalidArgument("derived_from must name at least one input artifact")
            if checked.supersedes is not None:
                raise InvalidArgument("put_computed does not take supersedes")
            name = checked_label("transformation", transformation)
            if name is None or checked_label("version", version) is None:
                raise InvalidArgument("transformation and version are 1-256 printable ASCII characters")
            listed = [
                {"artifact_id": m.artifact_id, "content_hash": "sha256:" + m.digest}
                for m in (self._manifest(owner, source) for source in sources)
            ]
            origin: dict[str, Any] = {
                "kind": COMPUTATION,
                "transformation": name,
                "version": version,
                "sources": listed,
                "policy_version": self._policy_version(owner.tenant),
                "counts": _checked_counts(counts),
            }
            return self._capture(owner, data, checked, origin, facts)


def _checked_counts(counts: object) -> dict[str, int]:
    if counts is None:
        return {}
    if not isinstance(counts, Mapping) or len(counts) > MAX_COUNTS:
        raise InvalidArgument(f"counts is a mapping of at most {MAX_COUNTS} names to non-negative integers")
    out: dict[str, int] = {}
    for key, value in counts.items():
        if checked_label("counts", key) is None or isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgument(f"counts is a mapping of at most {MAX_COUNTS} names to non-negative integers")
        out[key] = value
    return out
