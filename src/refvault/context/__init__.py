"""The context working set: clear old tool results losslessly so long runs fit the model.

See :class:`WorkingSet` (and :mod:`refvault.context.working_set` for the invariants).
"""

from __future__ import annotations

from refvault.context.working_set import WorkingSet, WorkingSetStats

__all__ = ["WorkingSet", "WorkingSetStats"]
