"""Run one chain of python blocks in turn, in one ``__main__`` namespace, as ``python snippet.py`` would there.

Usage: ``python child.py PAYLOAD RESULTS`` (the docs' block runner, ``run.py``, starts it in the blocks' working
directory). PAYLOAD (JSON) has ``blocks`` (``where``, ``path``, ``line``, ``code``, ``server``, ``framework``)
and ``server_env``. For each block one JSON line goes to RESULTS: ``{"index", "ok", "detail"}``; the last line
for an index is the one that counts.

Invariants: ``sys.path[0]`` is the working directory and ``__name__`` is ``"__main__"``, as for a script there;
no event loop is running; a block's traceback names the markdown file and line; each block has
``BLOCK_SECONDS``; the first failing block ends the chain; ``server_env`` is set only while a ``server`` block
runs; a ``scripted-model`` block gets ``model`` bound first, and fails at the chain's end if ``model`` was
never called or could call none of the snippet's own tools (``models.shortfall``). Only the standard library
is imported until a scripted model is needed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BLOCK_SECONDS = 60


class BlockTimeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise BlockTimeout(f"the block ran for more than {BLOCK_SECONDS} s")


def _models() -> Any:
    """``tests.docs.models`` (the repository is on ``sys.path`` only while it is imported: blocks do not see it)."""
    sys.path.insert(0, str(ROOT))
    try:
        from tests.docs import models
    finally:
        sys.path.remove(str(ROOT))
    return models


def _marker(where: str) -> None:
    print(f"----- {where} -----", flush=True)  # where the block's output starts (stderr goes to the same file)


def _run(block: dict[str, Any], namespace: dict[str, Any], server_env: dict[str, str]) -> dict[str, Any]:
    for name in server_env:
        os.environ.pop(name, None)
    if block["server"]:
        os.environ.update(server_env)
    _marker(block["where"])
    signal.alarm(BLOCK_SECONDS)
    try:
        # Padded so that tracebacks give the line in the markdown file.
        code = compile("\n" * block["line"] + block["code"], block["path"], "exec")
        exec(code, namespace)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            return {"ok": False, "detail": f"the block exited with SystemExit({exc.code!r})"}
    except BaseException as exc:  # everything a block raises is its failure, KeyboardInterrupt included
        frames = exc.__traceback__.tb_next if exc.__traceback__ else None  # not this function's frame
        return {"ok": False, "detail": "".join(traceback.format_exception(type(exc), exc, frames))}
    finally:
        signal.alarm(0)
        sys.stdout.flush()
        sys.stderr.flush()
    return {"ok": True, "detail": ""}


def main(payload_path: str, results_path: str) -> None:
    payload = json.loads(Path(payload_path).read_text(encoding="utf-8"))
    sys.path[0] = os.getcwd()
    module = types.ModuleType("__main__")
    sys.modules["__main__"] = module
    signal.signal(signal.SIGALRM, _alarm)
    drivers: dict[int, Any] = {}
    with open(results_path, "a", encoding="utf-8") as results:

        def report(index: int, outcome: dict[str, Any]) -> None:
            results.write(json.dumps({"index": index, **outcome}) + "\n")
            results.flush()

        for index, block in enumerate(payload["blocks"]):
            if block["framework"]:
                try:
                    if block["framework"] == "openai_agents":  # its client wants a key; the scripted model needs none
                        os.environ.setdefault("OPENAI_API_KEY", "sk-scripted-model-not-used")
                    module.__dict__["model"], drivers[index] = _models().scripted_model(block["framework"])
                except Exception:
                    report(index, {"ok": False, "detail": "no scripted model:\n" + traceback.format_exc()})
                    return
            outcome = _run(block, module.__dict__, payload["server_env"])
            report(index, outcome)
            if not outcome["ok"]:
                return
        for index, driver in drivers.items():
            why = _models().shortfall(driver)
            if why:
                report(index, {"ok": False, "detail": why})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
