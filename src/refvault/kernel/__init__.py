"""Kernel snapshots: frozen, generation-bound copies of an execution environment's values.

A persistent execution environment (a notebook, a kernel an agent runs code in) hands out
:class:`Handle` values instead of live objects: :meth:`Kernel.snapshot` stores a serialised copy (JSON,
Parquet or ``.npy``, never pickle) as an artifact bound to the kernel's generation, :meth:`Kernel.resolve`
gives back that copy (never the live, possibly mutated object) and refuses handles of a generation a
:meth:`Kernel.reset` ended, unless they were persisted, which then resolve as visibly stale and durable.
:meth:`Kernel.compute` runs a function over handles and records the result's lineage. See
:mod:`refvault.kernel.kernel` for the invariants and ``docs/kernel.md`` for the guide.
"""

from __future__ import annotations

from refvault.kernel.codecs import KINDS, MEDIA_TYPES
from refvault.kernel.handles import HANDLE_TYPE, Handle, ResetReport, Resolved
from refvault.kernel.kernel import TRANSFORMATION, Kernel

__all__ = ["HANDLE_TYPE", "KINDS", "MEDIA_TYPES", "TRANSFORMATION", "Handle", "Kernel", "ResetReport", "Resolved"]
