"""The leak guard's kernels: a process that must compile any kernel compiles all of them, saying so once before
and once after; a machine that has compiled them says nothing, whatever guard path a later process takes;
`python -m refvault.guard.warm` compiles every kernel; no writable cache directory still works."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numba
import pytest
from numba.core import event

from refvault.guard import compiling, kernels  # noqa: F401  (kernels: made, so compiling.kernels() holds them)

NOTICE = "refvault: compiling the leak guard's kernels for this machine"
COMPILED = "refvault: compiled the leak guard's kernels in "
INLINED = {"_fmix64", "_filter_word_bits", "_segment_filter_word_bits", "_lower_bound"}  # never compiled alone

# One guard check on a small request carrying a protected excerpt; prints the number of findings and the kernels
# (inlined helpers excepted) that have no compiled signature afterwards.
CHECK = textwrap.dedent(
    """
    from refvault.guard import LeakGuard, compiling

    line = "deploy {} of the payments service failed its health check in zone {}"
    report = " ".join(line.format(i, i % 3) for i in range(40))
    guard = LeakGuard()
    guard.protect("art_report", report)
    findings = guard.scan({"messages": [{"role": "user", "content": "see: " + report[500:900]}]})
    names = [k.py_func.__name__ for k in compiling.kernels() if not k.signatures]
    print(len(findings), [name for name in names if name not in INLINED])
    """
).replace("INLINED", repr(sorted(INLINED)))

# Another path: other parameters, no piece arm, protecting in one batch, a base64 payload in a tool result.
OTHER = textwrap.dedent(
    """
    import base64
    from refvault.guard import LeakGuard

    secret = bytes(range(256)) * 8
    guard = LeakGuard(min_match=32, size_threshold=1 << 20, piece_min=None)
    guard.protect_many([("art_blob", secret), ("art_text", "the quarterly numbers, not yet public " * 20)])
    output = base64.b64encode(secret[:900]).decode()
    print(len(guard.scan({"input": [{"type": "function_call_output", "output": output}]})))
    """
)


def _run(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, check=True, timeout=600)


@pytest.mark.slow
def test_a_fresh_machine_compiles_every_kernel_in_the_first_process_saying_so_before_and_after_and_no_other(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "numba-cache"
    first = _run(cache, "-c", CHECK)
    assert first.stdout.splitlines() == ["1 []"]  # the excerpt is found; every kernel that is not inlined compiled
    before, after = first.stderr.splitlines()  # two lines, nothing else
    assert before.startswith(NOTICE)
    assert "once, about" in before
    assert after.startswith(COMPILED)
    for line in (before, after):
        assert str(cache) in line

    other = _run(cache, "-c", OTHER)  # a different guard path, in a new process: everything is cached
    assert other.stderr == ""
    assert other.stdout.splitlines() == ["1"]

    warmed = _run(cache, "-m", "refvault.guard.warm")
    assert warmed.stderr == ""
    assert warmed.stdout.startswith("refvault: the leak guard's kernels were already compiled; loaded in ")
    assert str(cache) in warmed.stdout


def _compile_event(dispatcher: Any) -> None:
    """What numba broadcasts when it starts compiling ``dispatcher`` (after a cache miss); nothing compiles."""
    with event.trigger_event("numba:compile", data={"dispatcher": dispatcher, "args": (), "return_type": None}):
        pass


@pytest.fixture
def unannounced(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process has not announced a compile yet."""
    monkeypatch.setattr(compiling, "_announced", False)


@pytest.mark.usefixtures("unannounced")
def test_without_logging_configured_the_notice_goes_to_stderr_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(compiling.LOGGER, "propagate", False)  # no handler on the logger or above it
    assert not compiling.LOGGER.hasHandlers()
    kernel = compiling.kernels()[0]
    _compile_event(kernel)
    _compile_event(compiling.kernels()[-1])
    err = capsys.readouterr().err
    assert err == compiling.notice(kernel.stats.cache_path) + "\n"
    assert kernel.stats.cache_path in err


@pytest.mark.usefixtures("unannounced")
def test_with_logging_configured_the_notice_is_one_warning_on_the_guard_logger_and_nothing_on_stderr(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    kernel = compiling.kernels()[0]
    with caplog.at_level(logging.WARNING, logger="refvault.guard"):
        _compile_event(kernel)
        _compile_event(kernel)
    records = [r for r in caplog.records if r.name == "refvault.guard"]
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.WARNING, compiling.notice(kernel.stats.cache_path))
    ]
    assert capsys.readouterr().err == ""


@pytest.mark.usefixtures("unannounced")
def test_compiling_a_function_that_is_not_a_guard_kernel_says_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(compiling.LOGGER, "propagate", False)
    _compile_event(numba.njit(lambda x: x + 1))
    assert capsys.readouterr().err == ""
    assert compiling._announced is False


@pytest.mark.usefixtures("unannounced")
def test_with_no_writable_cache_directory_a_kernel_still_compiles_and_the_notice_says_it_is_not_cached(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real_njit = numba.njit

    def njit_without_locator(*args: Any, **options: Any) -> Any:
        if options.get("cache"):  # what numba raises when no cache directory is writable
            raise RuntimeError("cannot cache function 'double': no locator available for file 'x.py'")
        return real_njit(*args, **options)

    monkeypatch.setattr(numba, "njit", njit_without_locator)
    monkeypatch.setattr(compiling, "_kernels", list(compiling._kernels))
    monkeypatch.setattr(compiling, "_ours", set(compiling._ours))
    monkeypatch.setattr(compiling, "_uncached", set(compiling._uncached))
    monkeypatch.setattr(compiling.LOGGER, "propagate", False)

    @compiling.kernel()
    def double(x: int) -> int:
        return 2 * x

    assert double(21) == 42  # compiled, for real, without a cache
    err = capsys.readouterr().err
    assert err == compiling.notice(None) + "\n"
    assert "no writable cache directory" in err
    assert "NUMBA_CACHE_DIR" in err
    assert double.stats.cache_path is None  # type: ignore[attr-defined]


def test_a_numba_error_other_than_a_missing_cache_directory_is_not_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **options: Any) -> Any:
        raise RuntimeError("something else")

    monkeypatch.setattr(numba, "njit", broken)
    with pytest.raises(RuntimeError, match="something else"):
        compiling.kernel()(lambda x: x)


# -- compile_all: once per process, the work before, the line after ----------------------------------------------------


@pytest.fixture
def said(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """This process has made no guard, compiled nothing and announced nothing yet; the lines it says from now on."""
    monkeypatch.setattr(compiling, "_announced", False)
    monkeypatch.setattr(compiling, "_compiles", 0)
    monkeypatch.setattr(compiling, "_all_state", "todo")
    monkeypatch.setattr(compiling, "_all_seconds", 0.0)
    lines: list[str] = []
    monkeypatch.setattr(compiling, "_say", lines.append)
    return lines


@pytest.mark.usefixtures("said")
def test_compile_all_runs_every_kernel_once_per_process_even_when_the_guard_it_makes_calls_it_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs: list[Any] = []

    def exercise(make_guard: Any) -> None:
        runs.append(make_guard)
        compiling.compile_all(make_guard)  # what the guard made by the run does from its constructor

    monkeypatch.setattr(compiling, "_exercise", exercise)
    compiling.compile_all(object)
    compiling.compile_all(object)
    assert runs == [object]
    assert compiling._all_state == "done"


def test_a_run_that_compiles_says_so_before_the_first_compile_and_once_after(
    monkeypatch: pytest.MonkeyPatch, said: list[str]
) -> None:
    kernel = compiling.kernels()[0]

    def exercise(make_guard: Any) -> None:
        for each in compiling.kernels()[:3]:
            _compile_event(each)

    monkeypatch.setattr(compiling, "_exercise", exercise)
    compiling.compile_all(object)
    before, after = said
    assert before == compiling.notice(kernel.stats.cache_path)
    assert after.startswith(COMPILED)
    assert after.endswith(f"; cached in {kernel.stats.cache_path}")


def test_a_run_that_only_loads_from_the_cache_says_nothing(monkeypatch: pytest.MonkeyPatch, said: list[str]) -> None:
    monkeypatch.setattr(compiling, "_exercise", lambda make_guard: None)
    compiling.compile_all(object)
    assert said == []
    assert compiling._all_state == "done"


@pytest.mark.usefixtures("said")
def test_with_no_writable_cache_directory_a_guard_does_not_compile_every_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs: list[Any] = []
    monkeypatch.setattr(compiling, "_exercise", runs.append)
    monkeypatch.setattr(compiling, "_uncached", {id(compiling.kernels()[0])})
    compiling.compile_all(object, when_uncached=False)  # what a guard's constructor asks
    assert runs == []
    compiling.compile_all(object)  # what `python -m refvault.guard.warm` asks
    assert runs == [object]


@pytest.mark.usefixtures("said")
def test_the_first_guard_made_in_a_process_runs_every_kernel_before_it_is_returned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from refvault.guard import LeakGuard

    runs: list[Any] = []
    monkeypatch.setattr(compiling, "_exercise", runs.append)
    LeakGuard(min_match=32)
    LeakGuard()
    assert runs == [LeakGuard]


@pytest.mark.parametrize(("compiled", "printed"), [(0, True), (12, False)])
def test_warm_prints_its_summary_only_when_nothing_compiled(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], compiled: int, printed: bool
) -> None:
    from refvault.guard import warm as warming

    warmed = warming.Warmed(0.2, compiled, 12, "/cache")
    monkeypatch.setattr(warming, "warm", lambda: warmed)
    assert warming.main() == 0
    assert capsys.readouterr().out == (warmed.summary() + "\n" if printed else "")
