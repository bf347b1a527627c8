"""The guard applies the tenant's disclosure policy at the LLM edge: content of an artifact whose labels the policy
denies to a request's recipient stops that request (naming the rule), even where the artifact was disclosed to
another model; the same request to an allowed recipient passes."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from refvault.errors import ContextLeak, InvalidArgument
from refvault.guard import LeakGuard
from refvault.policy import Policy, Rule

PII_ID = "art_" + "p" * 26
PLAIN_ID = "art_" + "q" * 26
SEALED_ID = "art_" + "s" * 26
PII_TEXT = (
    "customer record: Jane Roe, jane.roe@example.com, phone 555-0100, lives at 42 Birch Lane, Springfield; "
    "account opened 2019, last contact about the overdue invoice number 7781, flagged for follow-up"
)
PLAIN_TEXT = (
    "weekly build report: the nightly pipeline ran 412 jobs, 3 flaky integration tests were retried, "
    "cache hit rate 91 percent, median duration eleven minutes, no regressions in the benchmark suite"
)
SEALED_TEXT = (
    "deployment secret material: rotate the signing key before friday and never paste the staging token "
    "into a ticket; the vault path is kept by the platform team and audited every quarter by security"
)
POLICY = Policy(
    [
        Rule(id="no-pii-to-gpt", labels={"pii"}, recipients=("model:gpt-*",), action="deny"),
        Rule(id="no-pii-for-ads", labels={"pii"}, purposes={"marketing"}, action="deny"),
    ]
)


def _request(text: str, model: str | None = "gpt-4.1") -> dict[str, Any]:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "summarise this"}, {"role": "tool", "content": text}]
    }
    if model is not None:
        body["model"] = model
    return body


@pytest.fixture
def guard() -> LeakGuard:
    made = LeakGuard(disclosure=POLICY)
    made.watch(PII_ID, PII_TEXT, {"pii"})
    made.watch(PLAIN_ID, PLAIN_TEXT, set())
    made.protect(SEALED_ID, SEALED_TEXT)
    return made


def test_watched_content_stops_only_a_request_to_a_recipient_the_policy_denies(guard: LeakGuard) -> None:
    with pytest.raises(ContextLeak) as caught:
        guard.check(_request(PII_TEXT, "gpt-4.1"))
    (finding,) = caught.value.findings
    assert finding.artifact_id == PII_ID
    assert finding.rule_id == "no-pii-to-gpt"
    assert "no-pii-to-gpt" in str(caught.value)
    assert "Jane" not in str(caught.value)
    allowed = _request(PII_TEXT, "claude-sonnet")
    assert guard.check(allowed) is allowed
    assert guard.scan(_request(PLAIN_TEXT, "gpt-4.1")) == []  # no label, no rule: a watched text passes


def test_the_recipient_given_wins_over_the_requests_model_and_the_purpose_counts(guard: LeakGuard) -> None:
    assert [f.rule_id for f in guard.scan(_request(PII_TEXT, "claude"), recipient="model:gpt-5")] == ["no-pii-to-gpt"]
    assert guard.scan(_request(PII_TEXT, "gpt-4.1"), recipient="user") == []
    assert [f.rule_id for f in guard.scan(_request(PII_TEXT, "claude"), purpose="marketing")] == ["no-pii-for-ads"]
    assert guard.scan(_request(PII_TEXT, None)) == []  # model:unknown matches no rule here
    with pytest.raises(InvalidArgument):
        guard.scan(_request(PII_TEXT), recipient="somebody")


def test_protected_content_stops_every_request_and_names_a_denying_rule(guard: LeakGuard) -> None:
    for model in ("gpt-4.1", "claude-sonnet"):
        with pytest.raises(ContextLeak) as caught:
            guard.check(_request(SEALED_TEXT, model))
        assert [f.artifact_id for f in caught.value.findings] == [SEALED_ID]
        assert caught.value.findings[0].rule_id is None
    guard.label(SEALED_ID, {"pii"})
    assert [f.rule_id for f in guard.scan(_request(SEALED_TEXT, "gpt-4.1"))] == ["no-pii-to-gpt"]


def test_a_text_disclosed_to_one_model_is_no_exemption_toward_a_denied_one() -> None:
    guard = LeakGuard(disclosure=POLICY)
    guard.protect(PII_ID, PII_TEXT)  # a tool read it by reference
    guard.label(PII_ID, {"pii"})
    guard.exempt_disclosed(PII_TEXT, {PII_ID})  # and refvault showed it to the model on purpose
    allowed = _request(PII_TEXT, "claude-sonnet")
    assert guard.check(allowed) is allowed
    with pytest.raises(ContextLeak) as caught:
        guard.check(_request(PII_TEXT, "gpt-4.1"))
    assert [(f.artifact_id, f.rule_id) for f in caught.value.findings] == [(PII_ID, "no-pii-to-gpt")]


def test_the_policy_is_read_at_each_check_when_given_as_a_callable() -> None:
    current: dict[str, Policy | None] = {"policy": None}
    guard = LeakGuard(disclosure=lambda: current["policy"])
    guard.watch(PII_ID, PII_TEXT, {"pii"})
    assert guard.scan(_request(PII_TEXT)) == []
    current["policy"] = POLICY
    assert [f.rule_id for f in guard.scan(_request(PII_TEXT))] == ["no-pii-to-gpt"]
    current["policy"] = None
    assert guard.scan(_request(PII_TEXT)) == []


def test_without_a_policy_watched_content_never_stops_a_request() -> None:
    guard = LeakGuard()
    guard.watch(PII_ID, PII_TEXT, {"pii", "secret"})
    assert guard.scan(_request(PII_TEXT)) == []


def test_redaction_removes_denied_content_and_keeps_allowed_content(caplog: pytest.LogCaptureFixture) -> None:
    guard = LeakGuard(disclosure=POLICY, policy="redact")
    guard.watch(PII_ID, PII_TEXT, {"pii"})
    guard.watch(PLAIN_ID, PLAIN_TEXT, set())
    body = _request(PII_TEXT + "\n" + PLAIN_TEXT, "gpt-4.1")
    with caplog.at_level(logging.WARNING, logger="refvault.guard"):
        redacted = guard.check(body)
    assert isinstance(redacted, dict)
    sent = redacted["messages"][1]["content"]
    assert "jane.roe@example.com" not in sent
    assert f"[refvault:{PII_ID}]" in sent
    assert "nightly pipeline ran 412 jobs" in sent
    assert "no-pii-to-gpt" in caplog.text
    assert "Jane" not in caplog.text
    same = _request(PII_TEXT, "claude-sonnet")
    assert guard.check(same) is same


def test_a_later_protect_makes_a_watched_artifact_protected_for_every_recipient() -> None:
    guard = LeakGuard(disclosure=POLICY)
    guard.watch(PLAIN_ID, PLAIN_TEXT, set())
    assert guard.scan(_request(PLAIN_TEXT)) == []
    guard.protect(PLAIN_ID, PLAIN_TEXT)
    assert [f.artifact_id for f in guard.scan(_request(PLAIN_TEXT))] == [PLAIN_ID]
    guard.watch(PLAIN_ID, PLAIN_TEXT, set())  # watching again does not unprotect
    assert [f.artifact_id for f in guard.scan(_request(PLAIN_TEXT))] == [PLAIN_ID]


def test_a_bad_disclosure_argument_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="disclosure"):
        LeakGuard(disclosure="deny everything")  # type: ignore[arg-type]
