"""The leak guard's kernels: the first compile in a process is announced once, where it is seen; a machine that
has compiled them says nothing; `python -m refvault.guard.warm` compiles every kernel; no writable cache
directory still works."""

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

# A guard check on a small request carrying one protected excerpt, then every other kernel (warm); prints the
# number of findings, how many kernels have no compiled signature (inlined helpers excepted) and warm's summary.
CHECK = textwrap.dedent(
    """
    from refvault.guard import LeakGuard, compiling
    from refvault.guard.warm import warm

    report = " ".join(f"deploy {i} of the payments service failed its health check in zone {i % 3}" for i in range(40))
    guard = LeakGuard()
    guard.protect("art_report", report)
    findings = guard.scan({"messages": [{"role": "user", "content": "see: " + report[500:900]}]})
    summary = warm().summary()
    inlined = {"_fmix64", "_filter_word_bits", "_segment_filter_word_bits", "_lower_bound"}
    never = [k.py_func.__name__ for k in compiling.kernels() if not k.signatures and k.py_func.__name__ not in inlined]
    print(len(findings), never)
    print(summary)
    """
)


def _run(cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    return subprocess.run(
        [sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, check=True, timeout=600
    )


@pytest.mark.slow
def test_first_guard_check_on_a_fresh_machine_says_it_compiles_once_and_the_next_process_says_nothing(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "numba-cache"
    first = _run(cache)
    assert first.stderr.count(NOTICE) == 1  # once, though the check and then warm compile many kernels
    (line,) = [line for line in first.stderr.splitlines() if NOTICE in line]
    assert str(cache) in line
    assert "once, about" in line
    found, summary = first.stdout.splitlines()
    assert found == "1 []"  # the excerpt is found; warm compiled every kernel that is not inlined
    assert summary.startswith("refvault: compiled the leak guard's kernels")

    second = _run(cache)
    assert NOTICE not in second.stderr
    found, summary = second.stdout.splitlines()
    assert found.startswith("1 ")
    assert summary.startswith("refvault: the leak guard's kernels were already compiled")
    assert str(cache) in summary


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
