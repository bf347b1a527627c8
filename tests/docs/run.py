"""Run a chain of doc blocks as written: python blocks in one child process (``child.py``), sh blocks with bash.

Invariants: every chain runs in its own working directory, with ``REFVAULT_STORE=<that directory>/store``,
no other ``REFVAULT_*`` variable from the test's environment, ``PATH`` starting with ``sys.executable``'s
directory and stdin closed; a ``server`` block also gets ``server_env`` (``REFVAULT_URL``,
``REFVAULT_API_KEY``). Each block has ``BLOCK_SECONDS``. Every process a chain starts is killed when the
chain ends. The outcome of a block says why it failed: its traceback or exit status, and its output.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.docs.blocks import Block
from tests.docs.child import BLOCK_SECONDS
from tests.servers import stop_process

__all__ = ["BLOCK_SECONDS", "Outcome", "block_env", "run_chain"]

CHILD = Path(__file__).with_name("child.py")
OUTPUT_CHARS = 3000  # how much of a failing block's output its report shows (the end of it)
START_SECONDS = 60  # for the child to start (imports) and finish, on top of each block's time


@dataclass(frozen=True)
class Outcome:
    """What became of one block: whether it ran and succeeded, and if not, why (with its output)."""

    ok: bool
    detail: str = ""


def block_env(workdir: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a block runs in (see the module's invariants)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("REFVAULT_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", os.defpath)])
    env["REFVAULT_STORE"] = str(workdir / "store")
    env.update(extra or {})
    return env


def run_chain(chain: Sequence[Block], workdir: Path, harness: Path, server_env: Mapping[str, str]) -> list[Outcome]:
    """Run ``chain`` (blocks of one language, in order) with ``workdir`` as the working directory.

    ``harness`` holds the runner's own files (never the blocks' directory). One outcome per block; after the
    first failure the rest are reported as not run.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    harness.mkdir(parents=True, exist_ok=True)
    if chain[0].language == "python":
        return _run_python(chain, workdir, harness, dict(server_env))
    return _run_sh(chain, workdir, harness, dict(server_env))


def _not_run(failed: Block) -> Outcome:
    return Outcome(False, f"not run: an earlier block of its chain, {failed.where}, failed")


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= OUTPUT_CHARS else "..." + text[-OUTPUT_CHARS:]


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop the process and whatever it left running in its process group."""
    stop_process(proc)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _run_python(chain: Sequence[Block], workdir: Path, harness: Path, server_env: dict[str, str]) -> list[Outcome]:
    payload = harness / "payload.json"
    results = harness / "results.jsonl"
    output = harness / "output.txt"
    blocks = [
        {
            "where": b.where,
            "path": str(b.path),
            "line": b.line,
            "code": b.code,
            "server": b.server,
            "framework": b.framework,
        }
        for b in chain
    ]
    payload.write_text(json.dumps({"blocks": blocks, "server_env": server_env}), encoding="utf-8")
    results.write_text("", encoding="utf-8")
    limit = BLOCK_SECONDS * len(chain) + START_SECONDS
    with output.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(payload), str(results)],
            cwd=workdir,
            env={**block_env(workdir), "PYTHONUNBUFFERED": "1"},  # the output in the order it was written
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            status: int | None = proc.wait(limit)
        except subprocess.TimeoutExpired:
            status = None
        finally:
            _kill_group(proc)
    reported = {}
    for line in results.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        reported[record["index"]] = Outcome(record["ok"], record["detail"])
    text = output.read_text(encoding="utf-8", errors="replace")
    outcomes: list[Outcome] = []
    failed: Block | None = None
    for index, block in enumerate(chain):
        outcome = reported.get(index)
        if outcome is None and failed is not None:
            outcomes.append(_not_run(failed))
            continue
        if outcome is None:
            why = f"did not finish within {limit} s" if status is None else f"the process ended ({status}) first"
            outcome = Outcome(False, f"the block {why}")
        if not outcome.ok:
            shown = _block_output(text, block.where)
            outcome = Outcome(False, outcome.detail.rstrip() + ("\n\noutput:\n" + _tail(shown) if shown else ""))
            failed = failed or block
        outcomes.append(outcome)
    if failed is None and status != 0:  # a script that hangs or fails on its way out fails too
        ending = "did not exit" if status is None else f"exited with status {status}"
        shown = _tail(_block_output(text, chain[-1].where))
        outcomes[-1] = Outcome(False, f"every block ran, but the process then {ending}\n\noutput:\n{shown}")
    return outcomes


def _block_output(text: str, where: str) -> str:
    """What a block printed (the child marks where each block's output starts)."""
    start = text.find(f"----- {where} -----")
    if start < 0:
        return text
    rest = text[start:].split("\n", 1)[1] if "\n" in text[start:] else ""
    end = rest.find("\n----- ")
    return rest if end < 0 else rest[:end]


def _run_sh(chain: Sequence[Block], workdir: Path, harness: Path, server_env: dict[str, str]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    started: list[subprocess.Popen[bytes]] = []
    failed: Block | None = None
    try:
        for block in chain:
            if failed is not None:
                outcomes.append(_not_run(failed))
                continue
            output = harness / f"sh-{block.line}.txt"
            script = "\n" * block.line + block.code  # bash's "line N" is the line in the markdown file
            with output.open("wb") as out:
                proc = subprocess.Popen(
                    ["bash", "-e", "-o", "pipefail", "-c", script, block.where.rsplit(":", 1)[0]],
                    cwd=workdir,
                    env=block_env(workdir, server_env if block.server else None),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                started.append(proc)
                try:
                    status: int | None = proc.wait(BLOCK_SECONDS)
                except subprocess.TimeoutExpired:
                    stop_process(proc)
                    status = None
            if status == 0:
                outcomes.append(Outcome(True))
                continue
            why = f"did not finish within {BLOCK_SECONDS} s" if status is None else f"exited with status {status}"
            shown = _tail(output.read_text(encoding="utf-8", errors="replace"))
            outcomes.append(Outcome(False, f"the block {why}" + ("\n\noutput:\n" + shown if shown else "")))
            failed = block
    finally:
        for proc in started:
            _kill_group(proc)
    return outcomes
