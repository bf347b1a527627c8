"""The README is a front door: short, with the install, the two commands, a quickstart of at most 20 lines, and
links that all lead somewhere; the pages it sends readers to exist, and the licence is there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = ("python", "cli", "http", "mcp", "integrations", "tools", "security", "benchmarks", "architecture")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_at_most_200_lines_with_install_and_the_two_commands() -> None:
    assert README.count("\n") <= 200
    assert "## Install" in README
    assert re.findall(r"^make (\w+)", README, flags=re.MULTILINE) == ["demo", "test"]


def test_the_quickstart_is_at_most_20_lines() -> None:
    section = README[README.index("## Quickstart") :]
    block = section[section.index("```python\n") + len("```python\n") : section.index("\n```")]
    assert 0 < block.count("\n") + 1 <= 20


def test_every_page_the_issue_names_exists_and_every_relative_link_resolves() -> None:
    assert all((ROOT / "docs" / f"{page}.md").is_file() for page in PAGES)
    for document in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in LINK.findall(document.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            assert (document.parent / target).exists(), f"{document.name} links to {target}, which is not there"


def test_the_licence_is_the_apache_license_2() -> None:
    assert "Apache License" in (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Version 2.0" in (ROOT / "LICENSE").read_text(encoding="utf-8")
