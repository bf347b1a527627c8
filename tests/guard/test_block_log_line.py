"""An intended block is logged as one clear WARNING line naming ids and sites (never content), with the
``llm.context_leak`` event and the findings as fields for log pipelines."""

from __future__ import annotations

import logging
import random
import string

import pytest

from refvault.errors import ContextLeak
from refvault.guard import EVENT, Finding, LeakGuard
from refvault.guard.findings import event_line
from refvault.ids import new_artifact_id


def secret(seed: int) -> str:
    rng = random.Random(seed)
    return " ".join("".join(rng.choices(string.ascii_lowercase, k=7)) for _ in range(60))


def guard_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "refvault.guard" and r.levelno == logging.WARNING]


def test_a_blocked_request_is_one_line_naming_the_artifact_and_site(caplog: pytest.LogCaptureFixture) -> None:
    guard = LeakGuard()
    artifact_id, text = new_artifact_id(), secret(1)
    guard.protect(artifact_id, text)
    request = {"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": text}]}
    with caplog.at_level(logging.WARNING, logger="refvault.guard"), pytest.raises(ContextLeak):
        guard.check(request)
    (record,) = guard_records(caplog)
    assert record.getMessage() == (
        f"refvault guard: request blocked as intended: it carried protected artifact {artifact_id}"
        " (messages[1].content); nothing was sent"
    )
    assert record.event == EVENT  # type: ignore[attr-defined]
    assert record.policy == "raise"  # type: ignore[attr-defined]
    assert text[:64] not in caplog.text


def test_a_redacted_request_says_what_was_replaced(caplog: pytest.LogCaptureFixture) -> None:
    guard = LeakGuard(policy="redact")
    artifact_id, text = new_artifact_id(), secret(2)
    guard.protect(artifact_id, text)
    with caplog.at_level(logging.WARNING, logger="refvault.guard"):
        guard.check({"messages": [{"role": "user", "content": text}]})
    (record,) = guard_records(caplog)
    assert record.getMessage() == (
        f"refvault guard: request redacted as intended: protected artifact {artifact_id} (messages[0].content)"
        " replaced by markers before it was sent"
    )


def test_the_line_groups_sites_by_artifact_and_bounds_its_length() -> None:
    first, second = new_artifact_id(), new_artifact_id()
    findings = [Finding(f"messages[{i}].content", first, 64, "content") for i in range(5)]
    findings += [Finding("messages[9].content", second, 80, "content"), Finding("tools[0]", None, 200_000, "size")]
    line = event_line(findings, "raise")
    assert line == (
        f"refvault guard: request blocked as intended: it carried protected artifacts {first}"
        " (messages[0].content, messages[1].content, messages[2].content, +2 more),"
        f" {second} (messages[9].content); a 200,000-byte payload over the guard's size limit (tools[0]);"
        " nothing was sent"
    )
    many = [Finding(f"m[{i}]", new_artifact_id(), 64, "content") for i in range(8)]
    assert event_line(many, "raise").count("art_") == 5
    assert "+3 more artifacts" in event_line(many, "raise")
