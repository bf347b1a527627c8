"""The source tree's shape: modules small enough to read, and nothing pointing outside the repository."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "refvault"
MAX_LINES = 800


def _modules() -> dict[str, str]:
    modules = {str(path.relative_to(SRC)): path.read_text(encoding="utf-8") for path in sorted(SRC.rglob("*.py"))}
    assert len(modules) > 100, "the source tree was not found"
    return modules


def test_no_module_is_over_800_lines() -> None:
    over = {name: text.count("\n") for name, text in _modules().items() if text.count("\n") > MAX_LINES}
    assert not over, f"split these by responsibility: {over}"


def test_no_module_points_to_a_design_file_outside_the_repository() -> None:
    assert [name for name, text in _modules().items() if "DESIGN.md" in text] == []
