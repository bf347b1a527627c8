"""Opening a SQLite catalog that another connection holds locked waits for it instead of failing."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from refvault.catalog.engine import while_locked
from refvault.catalog.sql import SqlCatalog


def _hold_exclusive(path: Path, seconds: float) -> threading.Event:
    """Hold an exclusive lock on ``path`` for ``seconds`` in a thread; the event is set once it is held."""
    held = threading.Event()

    def run() -> None:
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN EXCLUSIVE")
        held.set()
        time.sleep(seconds)
        holder.execute("COMMIT")
        holder.close()

    threading.Thread(target=run, daemon=True).start()
    assert held.wait(5)
    return held


def _impatient_write(path: Path) -> None:
    """A write that SQLite refuses at once while the file is locked (no busy timeout): the case the retry covers."""
    engine = sa.create_engine(f"sqlite:///{path}", connect_args={"timeout": 0}, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS t (x)")
        conn.commit()
    engine.dispose()


def test_an_open_refused_as_locked_is_retried_until_the_lock_is_released(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    sqlite3.connect(path).close()
    _hold_exclusive(path, 0.4)
    started = time.monotonic()
    while_locked(lambda: _impatient_write(path), sqlite=True, patience=10)
    assert time.monotonic() - started >= 0.3
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("t",)]


def test_a_lock_held_past_the_patience_still_fails(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    sqlite3.connect(path).close()
    _hold_exclusive(path, 2.0)
    with pytest.raises(sa.exc.OperationalError, match="locked"):
        while_locked(lambda: _impatient_write(path), sqlite=True, patience=0.2)


def test_only_sqlite_lock_errors_are_retried(tmp_path: Path) -> None:
    calls: list[int] = []

    def broken() -> None:
        calls.append(1)
        sqlite3.connect(":memory:").execute("SELECT * FROM no_such_table")

    def wrapped() -> None:
        try:
            broken()
        except sqlite3.OperationalError as exc:
            raise sa.exc.OperationalError("SELECT", {}, exc) from exc

    with pytest.raises(sa.exc.OperationalError, match="no such table"):
        while_locked(wrapped, sqlite=True, patience=10)
    assert calls == [1]
    path = tmp_path / "db.sqlite"
    sqlite3.connect(path).close()
    _hold_exclusive(path, 1.0)
    with pytest.raises(sa.exc.OperationalError, match="locked"):
        while_locked(lambda: _impatient_write(path), sqlite=False, patience=10)


def test_many_processes_opening_one_fresh_catalog_at_once_all_succeed(tmp_path: Path) -> None:
    import multiprocessing

    context = multiprocessing.get_context("fork")
    path = tmp_path / "catalog.sqlite"
    barrier = context.Barrier(6)
    processes = [context.Process(target=_open_after, args=(path, barrier)) for _ in range(6)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
    assert [process.exitcode for process in processes] == [0] * 6
    SqlCatalog.for_file(path).close()


def _open_after(path: Path, barrier: object) -> None:
    barrier.wait()  # type: ignore[attr-defined]
    SqlCatalog.for_file(path).close()
