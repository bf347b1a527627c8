"""``refvault read``: --from-line and --max-matches, continuation hints given as options, and refused combinations."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import Result

from refvault.limits import MAX_MATCHES
from tests.cli.test_cli import Cli

LINES = 500
TEXT = "".join(f"line {i} {'ERROR' if i % 3 == 0 else 'ok'} é\n" for i in range(LINES))
ERRORS = [i for i in range(LINES) if i % 3 == 0]


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path / "store")


@pytest.fixture
def log_id(tmp_path: Path, cli: Cli) -> str:
    path = tmp_path / "app.log"
    path.write_text(TEXT, encoding="utf-8")
    artifact_id: str = cli.put(path)["artifact_id"]
    return artifact_id


def hint(result: Result) -> list[str] | None:
    """The options after "continue with" on stderr, or None when the read says nothing is left."""
    found = re.search(r"continue with ((?:--[a-z-]+(?: \d+)*\s?)+)", result.stderr)
    return None if found is None else shlex.split(found.group(1))


def test_grep_stopped_at_max_matches_resumes_with_the_from_line_it_names(cli: Cli, log_id: str) -> None:
    seen: list[int] = []
    extra: list[str] = []
    for _ in range(LINES):
        result = cli("read", log_id, "--grep", "ERROR", "--max-matches", "40", *extra)
        assert result.exit_code == 0, result.output
        seen += [int(line.split(":", 1)[0]) for line in result.stdout.splitlines()]
        options = hint(result)
        if options is None:
            assert "complete scan" in result.stderr
            break
        assert "stopped at --max-matches 40" in result.stderr
        assert options[0] == "--from-line"
        assert "{" not in result.stderr  # never the tool's JSON
        extra = options
    assert seen == ERRORS  # every match once, in order


def test_default_match_cap_names_the_option_that_raises_it(cli: Cli, log_id: str) -> None:
    result = cli("read", log_id, "--grep", "line")
    assert len(result.stdout.splitlines()) == 100
    assert "stopped at --max-matches 100" in result.stderr
    assert hint(result) == ["--from-line", "100"]


def test_from_line_starts_the_search_there(cli: Cli, log_id: str) -> None:
    found = cli.json("read", log_id, "--grep", "ERROR", "--from-line", "490")
    assert [m["line"] for m in found["matches"]] == [492, 495, 498]
    assert found["from_line"] == 490


@pytest.mark.parametrize("value", ["0", str(MAX_MATCHES + 1), "-1"])
def test_max_matches_out_of_bounds_is_a_usage_error(cli: Cli, log_id: str, value: str) -> None:
    result = cli("read", log_id, "--grep", "ERROR", "--max-matches", value)
    assert result.exit_code == 2
    assert "--max-matches" in result.stderr
    assert f"1<=x<={MAX_MATCHES}" in result.stderr


def test_window_hints_walk_the_whole_text_with_lines(cli: Cli, log_id: str) -> None:
    text = ""
    options: list[str] | None = ["--lines", "0", str(LINES)]
    while options is not None:
        result = cli("read", log_id, *options, "--max-chars", "1000")
        assert result.exit_code == 0, result.output
        text += result.stdout
        options = hint(result)
        if options is not None:
            assert options[:1] == ["--lines"]
            assert options[-2:] == ["--max-chars", "1000"]
            options = options[:-2]
    assert text == TEXT


def test_window_hints_walk_the_whole_text_from_a_line_to_the_end(cli: Cli, log_id: str) -> None:
    text = ""
    options: list[str] | None = ["--from-line", "0"]
    while options is not None:
        result = cli("read", log_id, *options, "--max-chars", "700")
        text += result.stdout
        options = hint(result)
        if options is not None:
            assert options[0] == "--from-line"
            options = options[:-2]
    assert text == TEXT


def test_a_line_longer_than_max_chars_continues_with_bytes(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "long.txt"
    path.write_text("x" * 50 + "\nshort\n")
    artifact_id = cli.put(path)["artifact_id"]
    result = cli("read", artifact_id, "--max-chars", "20")
    assert result.stdout == "x" * 20
    assert hint(result) == ["--bytes", "20", "31", "--max-chars", "20"]


def test_from_line_without_grep_reads_to_the_end(cli: Cli, log_id: str) -> None:
    result = cli("read", log_id, "--from-line", str(LINES - 2))
    assert result.stdout == "line 498 ERROR é\nline 499 ok é\n"
    assert result.stderr.startswith(f"lines 498-500 of {LINES};")
    assert hint(result) is None


def test_end_before_start_is_answered_in_options(cli: Cli, log_id: str) -> None:
    result = cli("read", log_id, "--lines", "5", "2")
    assert result.exit_code == 2
    assert "--lines 5 2: END must be greater than START" in result.stderr
    assert "--from-line START" in result.stderr
    assert "null" not in result.stderr


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--lines", "0", "1", "--grep", "x"], "--lines cannot be combined with --grep"),
        (["--bytes", "0", "10", "--grep", "x"], "--bytes cannot be combined with --grep"),
        (["--lines", "0", "1", "--from-line", "3"], "--lines and --from-line cannot be combined"),
        (["--lines", "0", "1", "--bytes", "0", "4"], "--lines and --bytes cannot be combined"),
        (["--regex"], "--regex only applies with --grep"),
        (["--max-matches", "5"], "--max-matches only applies with --grep"),
    ],
)
def test_an_option_that_would_be_ignored_is_refused(cli: Cli, log_id: str, args: list[str], named: str) -> None:
    result = cli("read", log_id, *args)
    assert result.exit_code == 2
    assert named in result.stderr
    assert result.stdout == ""


def test_a_regex_grep_is_continued_as_a_regex(cli: Cli, log_id: str) -> None:
    result = cli("read", log_id, "--grep", "ERR.R", "--regex", "--max-matches", "5")
    assert result.exit_code == 0, result.output
    assert "(same --grep --regex)" in result.stderr
    literal = cli("read", log_id, "--grep", "ERROR", "--max-matches", "5")
    assert "(same --grep)" in literal.stderr
