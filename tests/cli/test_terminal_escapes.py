"""``refvault read`` never lets an artifact drive the terminal: control characters are shown escaped on a
terminal, written as they are when piped; ``cat`` always writes the raw bytes."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from refvault.cli.console import for_terminal

# OSC 52 (sets the clipboard), a colour, a C1 CSI, DEL, a bare carriage return (overwrites the line).
HOSTILE = "ok \x1b]52;c;aGVsbG8=\x07 \x1b[31mred\x9b2J\x7f\rspoof\ttab\r\nnext\n"
ESCAPED = "ok \\x1b]52;c;aGVsbG8=\\x07 \\x1b[31mred\\x9b2J\\x7f\\x0dspoof\ttab\r\nnext\n"


def test_for_terminal_escapes_control_characters_but_keeps_layout() -> None:
    assert for_terminal(HOSTILE) == ESCAPED
    assert for_terminal("plain é 漢字\tand\nlines\r\n") == "plain é 漢字\tand\nlines\r\n"
    assert for_terminal("\x00\x1f\x80") == "\\x00\\x1f\\x80"


def refvault(store: Path, *args: str, **options: object) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFVAULT_")}
    command = [sys.executable, "-m", "refvault.cli", "--store", str(store), *args]
    return subprocess.run(command, env=env, check=True, **options)  # type: ignore[call-overload, no-any-return]


def on_a_terminal(store: Path, *args: str) -> bytes:
    """What the command writes to stdout when stdout is a terminal (a pseudo-terminal without output mangling)."""
    controller, terminal = pty.openpty()
    import termios

    attributes = termios.tcgetattr(terminal)
    attributes[1] &= ~termios.OPOST  # no \n -> \r\n translation: compare the bytes the command wrote
    termios.tcsetattr(terminal, termios.TCSANOW, attributes)
    try:
        refvault(store, *args, stdout=terminal, stderr=subprocess.DEVNULL)
    finally:
        os.close(terminal)
    out = b""
    while True:
        try:
            piece = os.read(controller, 65536)
        except OSError:  # EIO: the terminal side is closed and everything has been read
            break
        if not piece:
            break
        out += piece
    os.close(controller)
    return out


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, str]:
    store = tmp_path / "store"
    put = refvault(store, "put", "-", "-q", "--media-type", "text/plain", input=HOSTILE.encode(), capture_output=True)
    return store, put.stdout.decode().strip()


def test_read_on_a_terminal_shows_escape_sequences_escaped(hostile: tuple[Path, str]) -> None:
    store, artifact_id = hostile
    shown = on_a_terminal(store, "read", artifact_id)
    assert shown == ESCAPED.encode()
    assert b"\x1b" not in shown
    assert b"\x07" not in shown


def test_grep_on_a_terminal_shows_matching_lines_escaped(hostile: tuple[Path, str]) -> None:
    store, artifact_id = hostile
    assert (
        on_a_terminal(store, "read", artifact_id, "--grep", "ok") == b"0: " + ESCAPED.split("\r\n")[0].encode() + b"\n"
    )


def test_read_piped_and_cat_write_the_text_as_it_is(hostile: tuple[Path, str]) -> None:
    store, artifact_id = hostile
    piped = refvault(store, "read", artifact_id, capture_output=True).stdout
    assert piped == HOSTILE.encode()
    assert on_a_terminal(store, "cat", artifact_id) == HOSTILE.encode()
