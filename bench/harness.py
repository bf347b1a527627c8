"""What the benchmarks share: interleaved repetitions, a scratch directory, machine load, blob paths.

Absolute times on shared machines are noise; each benchmark measures its
figure and its baseline in the same run, interleaved, and reports ratios.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from refvault import Scope, Vault
from refvault.ids import namespace_of

WORK_ROOT = Path(__file__).resolve().parent / ".work"

# A throughput or latency measurement for one repetition (its index is passed in).
Measure = Callable[[int], float]


def interleave(reps: int, contenders: Sequence[Measure], *, warmup: bool = False) -> list[list[float]]:
    """Call each contender once per repetition, rotating the order; return each contender's samples.

    With ``warmup``, a first round (repetition -1) runs and its samples are discarded.
    """
    samples: list[list[float]] = [[] for _ in contenders]
    order = list(range(len(contenders)))
    for rep in range(-1 if warmup else 0, reps):
        shift = rep % len(order)
        for index in order[shift:] + order[:shift]:
            value = contenders[index](rep)
            if rep >= 0:
                samples[index].append(value)
    return samples


@contextlib.contextmanager
def work_dir(prefix: str, keep: bool) -> Iterator[Path]:
    """A fresh directory under bench/.work/ (same disk as the repository), removed unless ``keep``."""
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    path = WORK_ROOT / f"{prefix}-{os.getpid()}-{secrets.token_hex(4)}"
    path.mkdir()
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def blob_path(store: Path, vault: Vault, scope: Scope, artifact_id: str) -> Path:
    """Where the filesystem blob store keeps an artifact's bytes."""
    digest = vault.describe(scope, artifact_id).content_hash.removeprefix("sha256:")
    return store / "blobs" / namespace_of(scope.tenant) / digest[:2] / digest
