"""``run_eval``: the whole battery, ``trials`` times, on an embedded store, with figures."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import tempfile
import time
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from refvault.errors import InvalidArgument
from refvault.evaluation import absence, disclosure, edge, gate, identity, long_run, miscopy
from refvault.evaluation.report import EvalReport
from refvault.evaluation.world import EvalClock, World
from refvault.ids import namespace_of
from refvault.model import Scope
from refvault.vault import Vault

__all__ = ["DEFAULT_SEED", "DEFAULT_TRIALS", "MAX_TRIALS", "run_eval"]

T = TypeVar("T")

DEFAULT_SEED = 20261106
DEFAULT_TRIALS = 2
MAX_TRIALS = 100


def run_eval(
    *, seed: int = DEFAULT_SEED, store: str | os.PathLike[str] | None = None, trials: int = DEFAULT_TRIALS
) -> EvalReport:
    """Run every probe ``trials`` times against the current build and count the outcomes.

    ``store`` is an embedded store directory (created if missing, kept, and
    never left damaged: each damaged blob is restored, and the eval works in
    tenants of its own); None runs on a fresh temporary store, removed after.
    Counts depend on ``seed`` and ``trials`` only; figures are measured.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidArgument("seed must be an integer")
    if isinstance(trials, bool) or not isinstance(trials, int) or not 1 <= trials <= MAX_TRIALS:
        raise InvalidArgument(f"trials must be an integer from 1 to {MAX_TRIALS}")
    if store is not None and "://" in os.fspath(store):
        raise InvalidArgument("the eval runs on the embedded default: give a store directory")
    started = time.perf_counter()
    with _location(store) as root:
        clock = EvalClock(datetime.now(UTC).replace(microsecond=0))
        with Vault.open(root, clock=clock) as vault:
            world = World(vault, clock, secrets.token_hex(4))
            with _captured_logs(world):
                _run_async(_battery(world, seed, trials))
                context = _run_async(long_run.run(vault, Scope(world.owner.tenant, "ana", "long-run"), seed))
                miscopied = miscopy.run(vault, Scope(world.owner.tenant, world.owner.user, "miscopy"), seed)
            stray = world.stray()
            retained = _retained(world)
        retained["store_on_disk_bytes"] = _disk_usage(root)
    figures: dict[str, Any] = {**world.meters.summary(), "bytes": retained, "working_set": context}
    figures["miscopy"] = miscopied
    return EvalReport(
        seed=seed,
        trials=trials,
        store=None if store is None else str(Path(store).resolve()),
        attempts=world.attempts,
        figures=figures,
        seconds=time.perf_counter() - started,
        stray=stray,
    )


async def _battery(world: World, seed: int, trials: int) -> None:
    for trial in range(trials):
        world.start_trial(seed, trial)
        secrets_ = disclosure.plant(world)
        await edge.run(world)  # first, so the model's list_artifacts shows this trial's secrets
        await disclosure.run(world, secrets_)
        await identity.run(world)
        await absence.run(world)
        await gate.run(world)


def _run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run``, or in a thread of its own when called from inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


@contextmanager
def _location(store: str | os.PathLike[str] | None) -> Iterator[Path]:
    if store is not None:
        yield Path(store)
        return
    with tempfile.TemporaryDirectory(prefix="refvault-eval-") as tmp:
        yield Path(tmp) / "store"


@contextmanager
def _captured_logs(world: World) -> Iterator[None]:
    """Every ``refvault`` log record goes to the log sink (and nowhere else) while the battery runs."""
    logger = logging.getLogger("refvault")
    saved = (logger.level, logger.propagate)
    logger.addHandler(world.log)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(world.log)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


def _retained(world: World) -> dict[str, Any]:
    """Logical bytes (what was captured) against stored bytes (deduplicated blobs, derivatives included)."""
    catalog = world.vault.catalog
    manifests = [m for m in catalog.manifests() if m.scope.tenant in world.tenants]
    namespaces = {namespace_of(tenant) for tenant in world.tenants}
    stored = [record for record in catalog.blob_records() if record.key.namespace in namespaces]
    derived = {d.key for d in catalog.derivations() if d.key.namespace in namespaces}
    return {
        "artifacts": len(manifests),
        "logical_bytes": sum(m.size for m in manifests),
        "stored_bytes": sum(record.size for record in stored),
        "derived_bytes": sum(record.size for record in stored if record.key in derived),
        "blobs": len(stored),
    }


def _disk_usage(root: Path) -> int:
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total
