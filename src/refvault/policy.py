"""A tenant's disclosure policy: which labels may go to which recipient, for which purpose.

A :class:`Policy` is an ordered list of :class:`Rule` values and a version. Every read
carries a ``purpose`` (why: ``"default"`` unless the caller says) and a ``recipient`` (who
the bytes go to: ``"user"``, ``"export"``, ``"model:<name>"`` or ``"tool:<name>"``).
:func:`decide` evaluates the policy for an artifact's labels:

* A rule **matches** when each of its three conditions holds; a condition that is None
  matches anything:

  - ``labels``: the artifact carries **at least one** of these labels (so a rule on
    ``{"pii", "secret"}`` covers an artifact labelled ``pii`` only; an artifact with no
    labels never matches a rule that names labels);
  - ``purposes``: the read's purpose is one of these;
  - ``recipients``: the recipient matches one of these glob patterns
    (:func:`fnmatch.fnmatchcase`: ``model:*``, ``tool:search-*``; case-sensitive).

* The **first** matching rule decides, with its ``action``; no match allows. So with no
  policy, or an empty one, every read is allowed.
* ``allow`` serves the bytes; ``deny`` refuses them; ``redact`` serves a redaction
  derivative instead (:meth:`refvault.Vault.redact`, made once and reused) with the rule's
  ``redactor`` (default: ``secrets.v1`` for an artifact labelled ``secret``, else ``pii.v1``);
  the derivative's own labels are then decided again, and anything but ``allow`` refuses.
  :attr:`Decision.allowed` is True for ``allow`` only.

A policy also holds the tenant's **retention** rules (:class:`Retention`: the longest an
artifact carrying a label is kept; ``gc`` removes it after that unless it is held) and its
byte **quotas** (:class:`Quotas`: per tenant and per session; a put that would go over is
refused and stores nothing).

The vault stores one policy per tenant (``Vault.set_policy``) and applies it at the one
place a read is authorised (:mod:`refvault.vault.authority`); the guard applies the same
:func:`decide` at the LLM edge. Policies travel as TOML (``refvault policy set FILE``,
:meth:`Policy.from_toml`) and JSON (the HTTP admin API, the stored copy:
:meth:`Policy.to_json` / :meth:`Policy.from_json`); a malformed one is an
:class:`~refvault.errors.InvalidArgument` that names the rule's index (``rules[2]``) and
never repeats a value it was given.

This module sits in the bottom layer: it imports only :mod:`refvault.errors`,
:mod:`refvault.model` and the standard library.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Literal, cast

from refvault.errors import InvalidArgument
from refvault.model import check_labels

__all__ = [
    "ACTIONS",
    "DEFAULT_PURPOSE",
    "DEFAULT_RECIPIENT",
    "MAX_RULES",
    "Action",
    "Decision",
    "Policy",
    "Quotas",
    "Retention",
    "Rule",
    "check_purpose",
    "check_recipient",
    "decide",
]

Action = Literal["allow", "deny", "redact"]
ACTIONS: tuple[Action, ...] = ("allow", "deny", "redact")

DEFAULT_PURPOSE = "default"
"""The purpose of a read that names none."""
DEFAULT_RECIPIENT = "user"
"""The recipient of a read that names none: the caller."""

MAX_RULES = 256
"""The most rules one policy holds."""
MAX_LIST = 64
"""The most labels, purposes or recipient patterns one rule names."""

_PURPOSE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
_NAMED_RECIPIENT = re.compile(r"(model|tool):[A-Za-z0-9._:/@+-]{1,122}")
_PATTERN = re.compile(r"[!-~]{1,128}")  # printable ASCII, no space
_RULE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
_VERSION = re.compile(r"[!-~]{1,64}")

_PURPOSE_RULE = (
    "a purpose is 1-128 characters from A-Z a-z 0-9 . _ : / -, starting with a letter or digit (e.g. 'support')"
)
_RECIPIENT_RULE = (
    "a recipient is 'user', 'export', 'model:<name>' or 'tool:<name>' "
    "(a name is 1-122 characters from A-Z a-z 0-9 . _ : / @ + -)"
)


def check_purpose(value: object) -> str:
    """``value`` if it is a well-formed purpose, else :class:`InvalidArgument` (the value is not repeated)."""
    if not isinstance(value, str) or _PURPOSE.fullmatch(value) is None:
        raise InvalidArgument(_PURPOSE_RULE)
    return value


def check_recipient(value: object) -> str:
    """``value`` if it is a well-formed recipient, else :class:`InvalidArgument` (the value is not repeated)."""
    if not isinstance(value, str) or not (value in ("user", "export") or _NAMED_RECIPIENT.fullmatch(value)):
        raise InvalidArgument(_RECIPIENT_RULE)
    return value


@dataclass(frozen=True, slots=True)
class Decision:
    """What a policy decided for one read: the ``action`` and the id of the deciding rule (None: none matched)."""

    action: Action
    rule_id: str | None = None
    redactor: str | None = None
    """For ``redact``: the redactor the rule names (None: chosen by the artifact's labels)."""

    @property
    def allowed(self) -> bool:
        """Whether the bytes themselves may be served (``redact`` serves a derivative instead, ``deny`` nothing)."""
        return self.action == "allow"


ALLOWED = Decision("allow", None)


def _names(what: str, value: object, check: Any) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidArgument(f"{what} must be a list of strings (omit it to match any)")
    items = list(value)
    if not items:
        raise InvalidArgument(f"{what} must name at least one (omit it to match any)")
    if len(items) > MAX_LIST:
        raise InvalidArgument(f"{what} may name at most {MAX_LIST}")
    return frozenset(check(item) for item in items)


def _check_pattern(value: object) -> str:
    if not isinstance(value, str) or _PATTERN.fullmatch(value) is None:
        raise InvalidArgument(
            "a recipient pattern is 1-128 printable ASCII characters without spaces, e.g. 'model:*' or 'user'"
        )
    return value


def _check_label_name(value: object) -> str:
    return next(iter(check_labels([value])))


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule of a :class:`Policy`: when it matches (None: any) and what it decides.

    ``id``: 1-64 characters from ``A-Z a-z 0-9 . _ : -``, unique in its policy, named by every
    denial it causes. ``labels`` match when the artifact carries at least one of them;
    ``purposes`` when the read's purpose is one of them; ``recipients`` are glob patterns
    (``fnmatchcase``) of which one must match the recipient. Lists and sets are accepted and
    kept as ``frozenset`` (labels, purposes) and a tuple in the given order (recipients).
    """

    id: str
    labels: frozenset[str] | None = None
    purposes: frozenset[str] | None = None
    recipients: tuple[str, ...] | None = None
    action: Action = "deny"
    redactor: str | None = None
    """``pii.v1`` or ``secrets.v1``, for a ``redact`` rule only (None: chosen by the artifact's labels)."""

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or _RULE_ID.fullmatch(self.id) is None:
            raise InvalidArgument(
                "a rule id is 1-64 characters from A-Z a-z 0-9 . _ : -, starting with a letter or digit"
            )
        if self.action not in ACTIONS:
            raise InvalidArgument(f"rule {self.id!r}: action must be one of 'allow', 'deny', 'redact'")
        if self.redactor is not None and (self.action != "redact" or self.redactor not in REDACTOR_NAMES):
            raise InvalidArgument(
                f"rule {self.id!r}: redactor is for a 'redact' rule only, and is one of {', '.join(REDACTOR_NAMES)}"
            )
        try:
            object.__setattr__(self, "labels", _names("labels", self.labels, _check_label_name))
            object.__setattr__(self, "purposes", _names("purposes", self.purposes, check_purpose))
            recipients: object = self.recipients
            if recipients is not None:
                if isinstance(recipients, str | bytes) or not isinstance(recipients, Iterable):
                    raise InvalidArgument("recipients must be a list of glob patterns (omit it to match any)")
                patterns = tuple(_check_pattern(p) for p in recipients)
                if not patterns:
                    raise InvalidArgument("recipients must name at least one pattern (omit it to match any)")
                if len(patterns) > MAX_LIST:
                    raise InvalidArgument(f"recipients may name at most {MAX_LIST} patterns")
                object.__setattr__(self, "recipients", tuple(dict.fromkeys(patterns)))
        except InvalidArgument as exc:
            raise InvalidArgument(f"rule {self.id!r}: {exc}") from None

    def matches(self, labels: frozenset[str], purpose: str, recipient: str) -> bool:
        """Whether this rule applies to a read of an artifact with ``labels``, for ``purpose``, to ``recipient``."""
        if self.labels is not None and self.labels.isdisjoint(labels):
            return False
        if self.purposes is not None and purpose not in self.purposes:
            return False
        return self.recipients is None or any(fnmatchcase(recipient, p) for p in self.recipients)

    def to_dict(self) -> dict[str, Any]:
        """The rule as JSON-able data (sorted labels and purposes; conditions that match any are left out)."""
        out: dict[str, Any] = {"id": self.id}
        if self.labels is not None:
            out["labels"] = sorted(self.labels)
        if self.purposes is not None:
            out["purposes"] = sorted(self.purposes)
        if self.recipients is not None:
            out["recipients"] = list(self.recipients)
        out["action"] = self.action
        if self.redactor is not None:
            out["redactor"] = self.redactor
        return out


_RULE_KEYS = frozenset(("id", "labels", "purposes", "recipients", "action", "redactor"))
REDACTOR_NAMES = ("pii.v1", "secrets.v1")
"""The built-in redactors (:mod:`refvault.content.redactors`)."""
MAX_AGE = 100 * 365 * 86400
"""The longest retention a rule may state: 100 years, in seconds."""


@dataclass(frozen=True, slots=True)
class Retention:
    """Keep an artifact carrying ``label`` at most ``max_age`` seconds (1 s to 100 years) after its capture.

    ``gc`` removes it after that (unless a hold is on it), marked ``expired`` by ``retention:<label>``.
    """

    label: str
    max_age: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "label", _check_label_name(self.label))
        age: object = self.max_age
        if isinstance(age, bool) or not isinstance(age, int) or not 1 <= age <= MAX_AGE:
            raise InvalidArgument("a retention's max_age is a whole number of seconds from 1 to 100 years")

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "max_age": self.max_age}


@dataclass(frozen=True, slots=True)
class Quotas:
    """The most bytes of artifacts a tenant, and one session of it, may hold (None: no limit).

    Each artifact counts its full size, deduplicated bytes included: the quota is on what was captured.
    """

    tenant_bytes: int | None = None
    session_bytes: int | None = None

    def __post_init__(self) -> None:
        for name in ("tenant_bytes", "session_bytes"):
            value: object = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise InvalidArgument(f"quotas.{name} is a whole number of bytes (0 or more)")

    def to_dict(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in (("tenant_bytes", self.tenant_bytes), ("session_bytes", self.session_bytes))
            if v is not None
        }


def _rule_from(index: int, data: object) -> Rule:
    where = f"rules[{index}]"
    if not isinstance(data, Mapping):
        raise InvalidArgument(f"{where} must be a table (an object) with id, action and optional conditions")
    unknown = sorted(str(k) for k in data if k not in _RULE_KEYS)
    if unknown:
        shown = unknown[0] if _RULE_ID.fullmatch(unknown[0]) else "(a key)"
        raise InvalidArgument(f"{where}: unknown key {shown!r}; a rule has id, labels, purposes, recipients, action")
    if "id" not in data or "action" not in data:
        raise InvalidArgument(f"{where}: a rule needs an id and an action ('allow', 'deny' or 'redact')")
    try:
        return Rule(
            id=data["id"],
            labels=data.get("labels"),
            purposes=data.get("purposes"),
            recipients=data.get("recipients"),
            action=data["action"],
            redactor=data.get("redactor"),
        )
    except InvalidArgument as exc:
        raise InvalidArgument(f"{where}: {exc}") from None


@dataclass(frozen=True, slots=True)
class Policy:
    """A tenant's rules, in order (the first that matches decides), and a version string for people and audits.

    ``rules`` may be any sequence of :class:`Rule`; it is kept as a tuple. Rule ids are
    unique. ``version`` is 1-64 printable ASCII characters without spaces (an int is
    accepted and kept as its decimal string).
    """

    rules: tuple[Rule, ...] = field(default_factory=tuple)
    version: str = "1"
    retention: tuple[Retention, ...] = field(default_factory=tuple)
    quotas: Quotas | None = None

    def __post_init__(self) -> None:
        version: object = self.version
        if isinstance(version, int) and not isinstance(version, bool):
            version = str(version)
        if not isinstance(version, str) or _VERSION.fullmatch(version) is None:
            raise InvalidArgument("a policy version is 1-64 printable ASCII characters without spaces, e.g. '1'")
        object.__setattr__(self, "version", version)
        rules: object = self.rules
        if isinstance(rules, str | bytes) or not isinstance(rules, Sequence):
            raise InvalidArgument("rules must be a list of Rule values")
        if len(rules) > MAX_RULES:
            raise InvalidArgument(f"a policy holds at most {MAX_RULES} rules")
        seen: dict[str, int] = {}
        for index, rule in enumerate(rules):
            if not isinstance(rule, Rule):
                raise InvalidArgument(f"rules[{index}] must be a Rule")
            if rule.id in seen:
                raise InvalidArgument(f"rules[{index}]: id {rule.id!r} is already used by rules[{seen[rule.id]}]")
            seen[rule.id] = index
        object.__setattr__(self, "rules", tuple(rules))
        retention: object = self.retention
        if isinstance(retention, str | bytes) or not isinstance(retention, Sequence):
            raise InvalidArgument("retention must be a list of Retention values")
        if not all(isinstance(r, Retention) for r in retention) or len(retention) > MAX_RULES:
            raise InvalidArgument(f"retention holds at most {MAX_RULES} Retention values")
        object.__setattr__(self, "retention", tuple(retention))
        if self.quotas is not None and not isinstance(self.quotas, Quotas):
            raise InvalidArgument("quotas must be a Quotas value")

    def max_age(self, labels: Iterable[str]) -> tuple[int, str] | None:
        """The shortest retention among ``labels`` (seconds, the label), None if no rule covers any."""
        held = set(labels)
        found = [(r.max_age, r.label) for r in self.retention if r.label in held]
        return min(found) if found else None

    # -- deciding ------------------------------------------------------------------------------

    def decide(self, labels: Iterable[str], purpose: str, recipient: str) -> Decision:
        """:func:`decide` with this policy."""
        return decide(self, labels, purpose, recipient)

    # -- as data -------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """``{"version": ..., "rules": [...]}`` (see :meth:`Rule.to_dict`), with ``retention`` and ``quotas`` if set."""
        out: dict[str, Any] = {"version": self.version, "rules": [rule.to_dict() for rule in self.rules]}
        if self.retention:
            out["retention"] = [r.to_dict() for r in self.retention]
        if self.quotas is not None:
            out["quotas"] = self.quotas.to_dict()
        return out

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, no spaces; equal policies give equal text."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: object) -> Policy:
        """A policy from ``{"version": ..., "rules": [{"id", "labels"?, "purposes"?, "recipients"?, "action"}]}``."""
        if not isinstance(data, Mapping):
            raise InvalidArgument("a policy must be a table (an object) with version and rules")
        unknown = [k for k in data if k not in ("version", "rules", "retention", "quotas")]
        if unknown:
            raise InvalidArgument(
                "a policy has the keys version, rules (each a [[rules]] table), retention ([[retention]]) and quotas"
            )
        raw_rules = data.get("rules", [])
        if isinstance(raw_rules, str | bytes) or not isinstance(raw_rules, Sequence):
            raise InvalidArgument("rules must be a list of tables ([[rules]] in TOML)")
        if len(raw_rules) > MAX_RULES:
            raise InvalidArgument(f"a policy holds at most {MAX_RULES} rules")
        rules = tuple(_rule_from(i, r) for i, r in enumerate(raw_rules))
        raw_retention = data.get("retention", [])
        if isinstance(raw_retention, str | bytes) or not isinstance(raw_retention, Sequence):
            raise InvalidArgument("retention must be a list of tables ([[retention]] in TOML) with label and max_age")
        retention = []
        for index, item in enumerate(raw_retention):
            if not isinstance(item, Mapping) or set(item) != {"label", "max_age"}:
                raise InvalidArgument(f"retention[{index}] is a table with exactly label and max_age (seconds)")
            try:
                retention.append(Retention(item["label"], item["max_age"]))
            except InvalidArgument as exc:
                raise InvalidArgument(f"retention[{index}]: {exc}") from None
        raw_quotas = data.get("quotas")
        quotas = None
        if raw_quotas is not None:
            if not isinstance(raw_quotas, Mapping) or not set(raw_quotas) <= {"tenant_bytes", "session_bytes"}:
                raise InvalidArgument("quotas is a table with tenant_bytes and/or session_bytes")
            quotas = Quotas(raw_quotas.get("tenant_bytes"), raw_quotas.get("session_bytes"))
        return cls(rules=rules, version=cast(str, data.get("version", "1")), retention=tuple(retention), quotas=quotas)

    @classmethod
    def from_json(cls, text: str | bytes) -> Policy:
        """A policy from its JSON text (:meth:`to_json` gives it back equal)."""
        if not isinstance(text, str | bytes):
            raise InvalidArgument("a policy's JSON must be text (str or bytes)")
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidArgument(
                f"a policy must be valid JSON (error at position {getattr(exc, 'pos', '?')})"
            ) from None
        return cls.from_dict(data)

    @classmethod
    def from_toml(cls, text: str) -> Policy:
        """A policy from TOML: ``version = "1"`` and one ``[[rules]]`` table per rule, in order."""
        if not isinstance(text, str):
            raise InvalidArgument("a policy's TOML must be text (a str)")
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            found = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
            where = f" at line {found.group(1)}, column {found.group(2)}" if found else ""
            raise InvalidArgument(f"a policy must be valid TOML (a syntax error{where})") from None
        return cls.from_dict(data)

    def to_toml(self) -> str:
        """The policy as TOML that :meth:`from_toml` reads back equal."""
        lines = [f"version = {json.dumps(self.version)}"]
        for rule in self.rules:
            lines += ["", "[[rules]]"]
            for key, value in rule.to_dict().items():
                lines.append(f"{key} = {json.dumps(value)}")
        for retention in self.retention:
            lines += ["", "[[retention]]", f"label = {json.dumps(retention.label)}", f"max_age = {retention.max_age}"]
        if self.quotas is not None and self.quotas.to_dict():
            lines += ["", "[quotas]"] + [f"{k} = {v}" for k, v in self.quotas.to_dict().items()]
        return "\n".join(lines) + "\n"


def decide(policy: Policy | None, labels: Iterable[str], purpose: str, recipient: str) -> Decision:
    """The decision of ``policy`` for a read of an artifact carrying ``labels``, for ``purpose``, to ``recipient``.

    The first rule that matches decides (its action and id); none matching (or no policy)
    is ``Decision("allow", None)``. ``purpose`` and ``recipient`` are taken as given (the
    callers check them with :func:`check_purpose` / :func:`check_recipient`).
    """
    if policy is None or not policy.rules:
        return ALLOWED
    held = labels if isinstance(labels, frozenset) else frozenset(labels)
    for rule in policy.rules:
        if rule.matches(held, purpose, recipient):
            return Decision(rule.action, rule.id, rule.redactor)
    return ALLOWED
