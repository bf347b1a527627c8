"""Run budgets in :class:`~refvault.catalog.sql.SqlCatalog` (mixed in): one row per run, charged atomically.

A reservation is one conditional ``UPDATE ... SET spent_x = spent_x + :x WHERE spent_x + :x <= limit_x``
over every dimension it charges (and the run's generation): the database applies it or not as a whole,
under the row's lock, so concurrent servers never count a run past any limit (PostgreSQL re-checks the
condition on the row it waited for). A release (a negative amount) is not conditional and never takes a
counter below zero. A new row and a restart draw a fresh random generation
(:func:`refvault.budgets.new_generation`), so no reservation made before (even before a clear) matches; a
set without restart keeps the generation and what was spent.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from refvault.budgets import COUNTED, Budget, BudgetRow, new_generation
from refvault.catalog.failures import translated
from refvault.catalog.macs import micros
from refvault.catalog.rows import from_us
from refvault.catalog.schema import budgets
from refvault.model import Scope

__all__ = ["SqlBudgets", "budget_limits", "row_of"]


def _key(scope: Scope) -> Any:
    return sa.and_(
        budgets.c.tenant == scope.tenant, budgets.c.user_name == scope.user, budgets.c.session == scope.session
    )


def budget_limits(budget: Budget) -> dict[str, Any]:
    """The limit columns of ``budget``."""
    values: dict[str, Any] = {f"limit_{name}": getattr(budget, name) for name in COUNTED}
    values["limit_seconds_us"] = None if budget.seconds is None else round(budget.seconds * 1_000_000)
    return values


def row_of(scope: Scope, row: Any) -> BudgetRow:
    """A catalog row as a :class:`BudgetRow`."""
    seconds = row.limit_seconds_us
    budget = Budget(
        **{name: getattr(row, f"limit_{name}") for name in COUNTED},
        seconds=None if seconds is None else seconds / 1_000_000,
    )
    spent = {name: int(getattr(row, f"spent_{name}")) for name in COUNTED}
    return BudgetRow(scope, budget, spent, from_us(int(row.started_us)), int(row.generation))


class SqlBudgets:
    """The run budget rows over the catalog's engine (see the module docstring)."""

    if TYPE_CHECKING:
        _engine: sa.Engine

        def _write(self) -> sa.Connection: ...
        def _read(self) -> sa.Connection: ...

    @translated
    def budget(self, scope: Scope) -> BudgetRow | None:
        with self._read() as conn:
            row = conn.execute(sa.select(budgets).where(_key(scope))).first()
        return None if row is None else row_of(scope, row)

    @translated
    def set_budget(self, scope: Scope, budget: Budget, now: datetime, *, restart: bool = False) -> BudgetRow:
        limits = budget_limits(budget)
        for attempt in (1, 2):
            try:
                with self._write() as conn, conn.begin():
                    row = conn.execute(sa.select(budgets.c.generation).where(_key(scope))).first()
                    if row is not None and not restart:
                        conn.execute(budgets.update().where(_key(scope)).values(**limits))
                    else:
                        fresh = {f"spent_{name}": 0 for name in COUNTED}
                        previous = None if row is None else int(row.generation)
                        fresh.update(generation=new_generation(previous), started_us=micros(now))
                        if row is None:
                            key = {"tenant": scope.tenant, "user_name": scope.user, "session": scope.session}
                            conn.execute(budgets.insert().values(**key, **limits, **fresh))
                        else:
                            conn.execute(budgets.update().where(_key(scope)).values(**limits, **fresh))
                    stored = conn.execute(sa.select(budgets).where(_key(scope))).one()
                return row_of(scope, stored)
            except sa.exc.IntegrityError:  # another server created the row first: update it instead
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    @translated
    def clear_budget(self, scope: Scope) -> bool:
        with self._write() as conn, conn.begin():
            return bool(conn.execute(budgets.delete().where(_key(scope))).rowcount)

    @translated
    def charge_budget(self, scope: Scope, generation: int, amounts: Mapping[str, int]) -> bool:
        changes: dict[str, Any] = {}
        conditions = [_key(scope), budgets.c.generation == generation]
        for name, amount in amounts.items():
            spent = budgets.c[f"spent_{name}"]
            if amount > 0:
                limit = budgets.c[f"limit_{name}"]
                conditions.append(sa.or_(limit.is_(None), spent + amount <= limit))
                changes[spent.name] = spent + amount
            elif amount < 0:
                changes[spent.name] = sa.case((spent + amount < 0, 0), else_=spent + amount)
        if not changes:
            return True
        with self._write() as conn, conn.begin():
            return bool(conn.execute(budgets.update().where(*conditions).values(**changes)).rowcount)
