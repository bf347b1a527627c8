"""The tenant policy as values: rules match labels, purpose and recipient; the first match decides; none allows."""

from __future__ import annotations

import re

import pytest

from refvault.errors import InvalidArgument
from refvault.policy import (
    DEFAULT_PURPOSE,
    DEFAULT_RECIPIENT,
    Decision,
    Policy,
    Rule,
    check_purpose,
    check_recipient,
    decide,
)

NO_SECRETS_TO_MODELS = Rule("no-secrets-to-models", labels=frozenset({"secret"}), recipients=("model:*",))
PII_FOR_SUPPORT = Rule("pii-for-support", labels=frozenset({"pii"}), purposes=frozenset({"support"}), action="allow")
PII_OTHERWISE = Rule("pii-otherwise", labels=frozenset({"pii"}), action="deny")
REDACT_EXPORT = Rule("redact-export", recipients=("export",), action="redact")
POLICY = Policy([NO_SECRETS_TO_MODELS, PII_FOR_SUPPORT, PII_OTHERWISE, REDACT_EXPORT], version="7")


def test_the_defaults_are_the_caller_for_the_default_purpose() -> None:
    assert (DEFAULT_PURPOSE, DEFAULT_RECIPIENT) == ("default", "user")


def test_no_policy_and_an_empty_policy_allow_everything() -> None:
    for policy in (None, Policy()):
        assert decide(policy, {"secret", "pii"}, "default", "model:gpt-4o") == Decision("allow", None)


@pytest.mark.parametrize(
    ("labels", "purpose", "recipient", "expected"),
    [
        ({"secret"}, "default", "model:gpt-4o", Decision("deny", "no-secrets-to-models")),
        ({"secret"}, "default", "tool:search", Decision("allow", None)),  # the pattern is for models only
        ({"secret"}, "default", "user", Decision("allow", None)),
        ({"secret", "pii"}, "support", "model:x", Decision("deny", "no-secrets-to-models")),  # first match wins
        ({"pii"}, "support", "model:x", Decision("allow", "pii-for-support")),  # an allow that decides
        ({"pii"}, "billing", "user", Decision("deny", "pii-otherwise")),
        ({"pii"}, "support", "export", Decision("allow", "pii-for-support")),  # before the redact rule
        (set(), "default", "export", Decision("redact", "redact-export")),  # no labels: only label-free rules
        ({"public"}, "default", "user", Decision("allow", None)),  # no rule matches: allowed
    ],
)
def test_the_first_matching_rule_decides(labels: set[str], purpose: str, recipient: str, expected: Decision) -> None:
    assert decide(POLICY, labels, purpose, recipient) == expected
    assert POLICY.decide(frozenset(labels), purpose, recipient) == expected


def test_a_rule_on_labels_matches_an_artifact_with_any_one_of_them() -> None:
    rule = Rule("either", labels=frozenset({"pii", "secret"}))
    assert rule.matches(frozenset({"pii"}), "p", "user")
    assert rule.matches(frozenset({"secret", "other"}), "p", "user")
    assert not rule.matches(frozenset({"other"}), "p", "user")
    assert not rule.matches(frozenset(), "p", "user")


def test_recipient_patterns_are_case_sensitive_globs() -> None:
    rule = Rule("globs", recipients=("model:claude-*", "tool:search?"))
    assert rule.matches(frozenset(), "p", "model:claude-3")
    assert rule.matches(frozenset(), "p", "tool:search1")
    assert not rule.matches(frozenset(), "p", "model:Claude-3")
    assert not rule.matches(frozenset(), "p", "tool:search12")
    assert not rule.matches(frozenset(), "p", "user")


def test_redact_refuses_until_redaction_derivatives_exist() -> None:
    assert not Decision("redact", "r").allowed
    assert not Decision("deny", "r").allowed
    assert Decision("allow", None).allowed


def test_json_and_toml_round_trip_to_an_equal_policy() -> None:
    assert Policy.from_json(POLICY.to_json()) == POLICY
    assert Policy.from_toml(POLICY.to_toml()) == POLICY
    assert Policy.from_json(POLICY.to_json()).to_json() == POLICY.to_json()  # canonical text


def test_a_hand_written_toml_policy_reads_in_order() -> None:
    text = """
version = "2026-12"

[[rules]]
id = "no-secrets-to-models"
labels = ["secret"]
recipients = ["model:*"]
action = "deny"

[[rules]]
id = "anything-else"
action = "allow"
"""
    policy = Policy.from_toml(text)
    assert policy.version == "2026-12"
    assert [r.id for r in policy.rules] == ["no-secrets-to-models", "anything-else"]
    assert policy.rules[0].labels == frozenset({"secret"})
    assert policy.rules[0].purposes is None
    assert decide(policy, {"secret"}, "default", "model:x") == Decision("deny", "no-secrets-to-models")
    assert decide(policy, {"secret"}, "default", "user") == Decision("allow", "anything-else")


def test_an_integer_version_is_kept_as_text() -> None:
    assert Policy.from_toml("version = 3\n").version == "3"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[rules]]\nid = "a"\naction = "deny"\n[[rules]]\nid = "b"\naction = "maybe"\n', r"rules\[1\].*action"),
        ('[[rules]]\nid = "a"\naction = "deny"\n[[rules]]\nid = "a"\naction = "allow"\n', r"rules\[1\].*rules\[0\]"),
        ('[[rules]]\naction = "deny"\n', r"rules\[0\].*id and an action"),
        ('[[rules]]\nid = "a"\naction = "deny"\nlabel = ["pii"]\n', r"rules\[0\].*unknown key 'label'"),
        ('[[rules]]\nid = "a"\naction = "deny"\nlabels = ["PII"]\n', r"rules\[0\].*label name"),
        ('[[rules]]\nid = "a"\naction = "deny"\nlabels = []\n', r"rules\[0\].*at least one"),
        ('[[rules]]\nid = "a"\naction = "deny"\npurposes = "support"\n', r"rules\[0\].*list of strings"),
        ('[[rules]]\nid = "a"\naction = "deny"\nrecipients = ["model x"]\n', r"rules\[0\].*recipient pattern"),
        ('[[rules]]\nid = "has space"\naction = "deny"\n', r"rules\[0\].*rule id"),
        ('rules = "x"\n', "list of tables"),
        ("extra = 1\n", "has the keys version, rules"),
        ("version = \n", "valid TOML.*line 1"),
    ],
)
def test_a_malformed_policy_names_the_rule_index(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        Policy.from_toml(text)


def test_errors_never_repeat_a_value_they_were_given() -> None:
    canary = "CANARY-9f2e"
    for text in (
        f'[[rules]]\nid = "a"\naction = "{canary}"\n',
        f'[[rules]]\nid = "a"\naction = "deny"\npurposes = ["{canary} x"]\n',
        f'[[rules]]\nid = "a"\naction = "deny"\nrecipients = ["{canary} x"]\n',
        f'[[rules]]\nid = "a"\naction = "deny"\n"{canary} x" = 1\n',
        f'version = "{canary} x"\n',
    ):
        with pytest.raises(InvalidArgument) as caught:
            Policy.from_toml(text)
        assert canary not in str(caught.value)


def test_malformed_json_is_an_invalid_argument() -> None:
    with pytest.raises(InvalidArgument, match="valid JSON"):
        Policy.from_json("{not json")
    with pytest.raises(InvalidArgument, match="rules\\[0\\]"):
        Policy.from_json('{"version": "1", "rules": [7]}')


def test_rules_built_in_python_are_checked_too() -> None:
    with pytest.raises(InvalidArgument, match="action"):
        Rule("a", action="block")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="rules\\[1\\]: id 'a'"):
        Policy([Rule("a"), Rule("a")])
    with pytest.raises(InvalidArgument, match="must be a Rule"):
        Policy(["a"])  # type: ignore[list-item]
    rule = Rule("sets", labels={"pii"}, purposes={"support"}, recipients=["user", "user", "export"])  # type: ignore[arg-type]
    assert rule.labels == frozenset({"pii"})
    assert rule.purposes == frozenset({"support"})
    assert rule.recipients == ("user", "export")


@pytest.mark.parametrize("value", ["default", "support", "billing.v2", "case:42/review", "A" * 128])
def test_well_formed_purposes_pass(value: str) -> None:
    assert check_purpose(value) == value


@pytest.mark.parametrize("value", ["", " support", "sup port", "A" * 129, "-x", "ünïcode", None, 7])
def test_malformed_purposes_are_refused_without_echo(value: object) -> None:
    with pytest.raises(InvalidArgument, match="a purpose is") as caught:
        check_purpose(value)
    assert "sup port" not in str(caught.value)


@pytest.mark.parametrize(
    "value", ["user", "export", "model:gpt-4o", "model:models/gemini-1.5@001", "tool:search_web", "tool:a.b:c"]
)
def test_well_formed_recipients_pass(value: str) -> None:
    assert check_recipient(value) == value


@pytest.mark.parametrize(
    "value", ["", "users", "model:", "tool:", "model:a b", "agent:x", "USER", None, "model:" + "x" * 123]
)
def test_malformed_recipients_are_refused(value: object) -> None:
    with pytest.raises(InvalidArgument, match="a recipient is"):
        check_recipient(value)


def test_retention_and_quotas_round_trip_through_toml_and_json() -> None:
    from refvault.policy import Quotas, Retention

    policy = Policy(
        rules=(Rule(id="r", labels=frozenset({"pii"}), action="redact", redactor="pii.v1"),),
        version="7",
        retention=(Retention("pii", 86400), Retention("secret", 3600)),
        quotas=Quotas(tenant_bytes=10_000, session_bytes=1_000),
    )
    assert Policy.from_toml(policy.to_toml()) == policy
    assert Policy.from_json(policy.to_json()) == policy
    assert policy.max_age({"pii", "secret"}) == (3600, "secret")
    assert policy.max_age({"other"}) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[retention]]\nlabel = "pii"\nmax_age = 0\n', "retention[0]: a retention's max_age"),
        ('[[retention]]\nlabel = "pii"\n', "retention[0] is a table with exactly label and max_age"),
        ("[quotas]\ntenant_bytes = -1\n", "quotas.tenant_bytes is a whole number"),
        ("[quotas]\nother = 1\n", "quotas is a table with tenant_bytes and/or session_bytes"),
        ('[[rules]]\nid = "a"\naction = "deny"\nredactor = "pii.v1"\n', "redactor is for a 'redact' rule only"),
        ('[[rules]]\nid = "a"\naction = "redact"\nredactor = "names.v9"\n', "one of pii.v1, secrets.v1"),
    ],
)
def test_bad_retention_quotas_and_redactors_are_refused_by_name(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        Policy.from_toml(text)
