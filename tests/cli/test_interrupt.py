"""Ctrl-C: a command stopped by SIGINT exits 130 (128 + SIGINT), not 1 (the code of "not found"), and an
interrupted capture publishes nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from refvault.vault import Vault


def test_sigint_during_put_exits_130_and_publishes_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    Vault.open(store).close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFVAULT_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "refvault.cli", "--store", str(store), "put", "-", "--json"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stdin is not None
    fed = threading.Event()
    stop = threading.Event()

    def feed() -> None:  # a never-ending input, until the command is gone
        chunk = b"x" * 65536
        sent = 0
        try:
            while not stop.is_set():
                process.stdin.write(chunk)  # type: ignore[union-attr]
                sent += len(chunk)
                if sent >= 4 << 20:
                    fed.set()  # the put is well under way: the store is open and bytes are streaming in
        except (BrokenPipeError, ValueError, OSError):
            pass
        finally:
            fed.set()

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        assert fed.wait(timeout=60)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        stop.set()
        if process.poll() is None:
            process.kill()
            process.wait()
        feeder.join(timeout=10)
    assert process.returncode == 130, err
    assert b"interrupted" in err
    assert out == b""
    listed = subprocess.run(
        [sys.executable, "-m", "refvault.cli", "--store", str(store), "ls", "--json"],
        capture_output=True,
        env=env,
        check=True,
    )
    assert json.loads(listed.stdout) == []
    assert list((store / "tmp").iterdir()) == []  # the unfinished temporary is gone too
