"""Small valid media for tests, from one source: the generators of ``examples/mcp_upstream.py``."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load_example(filename: str) -> ModuleType:
    """Import ``examples/<filename>`` as a module (the examples are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"example_{Path(filename).stem}", EXAMPLES / filename)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_upstream = load_example("mcp_upstream.py")


def png_bytes(width: int = 4, height: int = 3) -> bytes:
    """A valid RGB PNG of ``width`` x ``height`` pixels."""
    data: bytes = _upstream.png_bytes(width, height)
    return data


def wav_bytes(frames: int = 800) -> bytes:
    """A valid mono 8 kHz 16-bit WAV of ``frames`` samples."""
    data: bytes = _upstream.wav_bytes(frames)
    return data
