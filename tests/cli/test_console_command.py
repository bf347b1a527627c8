"""``refvault console`` (serve + a key of its own + a sign-in link) and ``refvault console login``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from click.testing import CliRunner

from refvault import Scope, Vault
from refvault.cli import main
from refvault.keys import list_keys
from tests.servers import free_port, serve, stop_process


def _refvault() -> str:
    return str(Path(sys.executable).with_name("refvault"))


def test_console_login_prints_a_single_use_link(tmp_path: Path) -> None:
    with serve(tmp_path / "store") as server:
        result = CliRunner().invoke(
            main,
            ["console", "login", "--url", server.url, "--next", "/console/audit"],
            env={"REFVAULT_API_KEY": server.token},
        )
        assert result.exit_code == 0, result.output
        link = result.output.strip()
        assert link.startswith(server.url + "/console/link/")
        with httpx.Client(follow_redirects=True) as browser:
            first = browser.get(link)
            assert first.status_code == 200
            assert 'content="0; url=/console/audit"' in first.text
            assert browser.get(server.url + "/console/audit").status_code == 200  # signed in
            assert browser.get(link).status_code == 403  # used


def test_console_login_with_a_bad_key_says_so(tmp_path: Path) -> None:
    with serve(tmp_path / "store") as server:
        result = CliRunner().invoke(main, ["console", "login", "--url", server.url, "--key", "rvk_k_nope_nope"])
        assert result.exit_code != 0
        assert "rvk_k_nope_nope" not in result.output


def _wait_for_link(proc: subprocess.Popen[str], deadline: float) -> str:
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        found = re.search(r"console: (\S+)", line)
        if found:
            return found.group(1)
    raise AssertionError("refvault console printed no link")


def test_console_serves_the_store_signs_in_by_link_and_revokes_its_key(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with Vault.open(store) as vault:
        artifact = vault.put(Scope("acme", "oncall", "incident"), b"hello console", media_type="text/plain")
    port = free_port()
    proc = subprocess.Popen(
        [_refvault(), "--store", str(store), "console", "--port", str(port), "--no-open"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "BROWSER": "false"},
    )
    try:
        link = _wait_for_link(proc, time.monotonic() + 60)
        assert link.startswith(f"http://127.0.0.1:{port}/console/link/")
        with httpx.Client(follow_redirects=True) as browser:
            assert browser.get(link).status_code == 200
            page = browser.get(f"http://127.0.0.1:{port}/console")
            assert artifact.artifact_id in page.text
        with Vault.open(store) as vault:
            [key] = [k for k in list_keys(vault) if k.label == "refvault console"]
            assert key.revoked_at is None
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=20)
        finally:
            stop_process(proc)  # type: ignore[arg-type]
    with Vault.open(store) as vault:
        [key] = [k for k in list_keys(vault) if k.label == "refvault console"]
        assert key.revoked_at is not None  # the console's own key ends with it


def test_console_help_names_both_uses() -> None:
    result = CliRunner().invoke(main, ["console", "--help"])
    assert result.exit_code == 0
    assert "login" in result.output
    assert "--no-open" in result.output
