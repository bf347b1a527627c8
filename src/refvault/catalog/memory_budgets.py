"""Run budgets in :class:`~refvault.catalog.memory.MemoryCatalog` (mixed in): the SQL catalog's semantics
(:mod:`refvault.catalog.sql_budgets`), each change made whole under the catalog's lock."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from refvault.budgets import COUNTED, Budget, BudgetRow, new_generation
from refvault.model import Scope

__all__ = ["MemoryBudgets"]


class MemoryBudgets:
    """Budget rows held in process memory."""

    if TYPE_CHECKING:
        _lock: threading.RLock

        _budget_rows: dict[Scope, BudgetRow]  # made by the catalog's constructor

    def budget(self, scope: Scope) -> BudgetRow | None:
        with self._lock:
            return self._budget_rows.get(scope)

    def set_budget(self, scope: Scope, budget: Budget, now: datetime, *, restart: bool = False) -> BudgetRow:
        with self._lock:
            table = self._budget_rows
            old = table.get(scope)
            if old is not None and not restart:
                row = replace(old, budget=budget)
            else:
                generation = new_generation(None if old is None else old.generation)
                row = BudgetRow(scope, budget, dict.fromkeys(COUNTED, 0), now, generation)
            table[scope] = row
            return row

    def clear_budget(self, scope: Scope) -> bool:
        with self._lock:
            return self._budget_rows.pop(scope, None) is not None

    def charge_budget(self, scope: Scope, generation: int, amounts: Mapping[str, int]) -> bool:
        with self._lock:
            table = self._budget_rows
            row = table.get(scope)
            if row is None or row.generation != generation:
                return False
            spent = dict(row.spent)
            for name, amount in amounts.items():
                limit = getattr(row.budget, name)
                if amount > 0 and limit is not None and spent[name] + amount > limit:
                    return False
                spent[name] = max(0, spent[name] + amount)
            table[scope] = replace(row, spent=spent)
            return True
