"""Detectors: where in a text the values a redactor replaces are, as non-overlapping ``(start, end, kind)`` spans.

A :class:`Detector` runs its scans (:class:`Pass`: ``pii.v1`` the combined candidate scan and the ``@`` scan;
``secrets.v1`` the combined scan, the key-word scan and the ``--flag`` scan, see
:mod:`~refvault.content.redactors.patterns`), each once over the text, hands each candidate to the check of
the alternative that matched (:mod:`~refvault.content.redactors.digits`,
:mod:`~refvault.content.redactors.validators`), and resolves overlaps. Invariants:

* **Spans never overlap.** Of overlapping detections the one that starts first wins, then the longer, then a
  named kind over the keyed ``high_entropy`` rule; a keyed value holding a named detection (a JWT after
  ``token=``) is left to that detection.
* **The keyed rule reads the key.** In text, ``key=value``, ``key: value``, ``"key": "value"`` and
  ``--key value``; in JSON the enclosing field's name is the key of a string (:meth:`Detector.spans` with
  ``key``). The key's class and the value's length and entropy decide
  (:func:`~refvault.content.redactors.validators.key_class`,
  :func:`~refvault.content.redactors.validators.keyed_value_ok`); after an HTTP scheme (``Bearer``,
  ``Basic``) the credential is the value, judged as a password (8+ characters).
* **A probe finds at least what spans find.** :meth:`Detector.hit_lines` marks every line of raw JSON Lines
  on which :meth:`Detector.spans` of any of its strings would report something, with every value it found
  there (a probe judges less context: a version word before an IPv4 address does not clear it, as the word
  may be the string's key), and every line holding a key that names a secret followed by a value of 8+
  characters, an array or an object. A line left unmarked has nothing to redact, and a string of a marked
  line (without a backslash) that holds none of the line's values has nothing either: no candidate crosses
  a quote, and a quote is a boundary for every scan, so each string is scanned in the raw line as it would be
  alone.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Sequence

from refvault.content.redactors import patterns as p
from refvault.content.redactors.digits import (
    Span,
    card_span,
    intl_phone_span,
    ipv4_span,
    paren_phone_span,
    trunk_phone_span,
)
from refvault.content.redactors.placeholders import PLACEHOLDER
from refvault.content.redactors.validators import (
    IBAN_LENGTHS,
    KeyClass,
    card_ok,
    iban_ok,
    ipv6_ok,
    jwt_ok,
    key_class,
    keyed_value_ok,
    mixed,
)

__all__ = ["DETECTORS", "Detector", "Span"]

# A handler turns one candidate (the scanned text, the candidate's start and end) into spans; with probe=True
# it may stop at "something is here" (a key that names a secret counts, whatever its value).
Handler = Callable[[str, int, int, bool], list[Span]]

_FILE_EXTENSIONS = frozenset(
    {
        "png", "jpg", "jpeg", "gif", "svg", "webp", "ico", "bmp", "css", "js", "mjs", "json", "html", "htm", "txt",
        "log", "md", "pdf", "zip", "gz", "tgz", "tar", "py", "ts", "map", "woff", "woff2", "ttf", "otf", "xml", "csv",
        "yaml", "yml", "toml", "ini", "lock",
    }
)  # fmt: skip
_AWS_SECRET = re.compile(r"[A-Za-z0-9/+]{40}", re.ASCII)
_MASK_CHARS = frozenset("*xX.#-_•")
_REFERENCE = ("${", "{{", "<", "%(", "$(", "[")
_ENV_REFERENCE = re.compile(r"\$[A-Za-z_][A-Za-z0-9_]*|%[A-Za-z_][A-Za-z0-9_]*%", re.ASCII)
_USER_TAIL = re.compile(r"[^\s'\"=]*\Z")
EXAMINED = ""
"""The kind of a span a handler read but reports nothing for (a keyed value judged not secret): the pass
skips candidates inside it, so no region is read twice, and the span is dropped."""
_PII_POSSIBLE = re.compile(r"[0-9@:]")


def _email(scan: str, at: int, end: int, probe: bool) -> list[Span]:
    """The address whose ``@`` is at ``scan[at]`` and whose domain ends at ``end``: read the local part backwards."""
    j, lo = at, max(1, at - 64)
    while j > lo and scan[j - 1] in p.LOCAL_CHARS:
        j -= 1
    if scan[j - 1] in p.LOCAL_CHARS:  # over 64 characters
        return []
    while j < at and scan[j] == ".":
        j += 1
    if j == at or scan[at + 1 : end].rsplit(".", 1)[-1].lower() in _FILE_EXTENSIONS:
        return []
    return [(j, end, "email")]


def _checked(check: Callable[[str, int, int], Span | None]) -> Handler:
    def handler(scan: str, start: int, end: int, probe: bool) -> list[Span]:
        span = check(scan, start, end)
        return [span] if span else []

    return handler


def _iban(scan: str, start: int, end: int, probe: bool) -> list[Span]:
    compact = scan[start:end].replace(" ", "").upper()
    length = IBAN_LENGTHS.get(compact[:2], 0)
    if not length or len(compact) < length or not iban_ok(compact[:length]):
        return []
    if len(compact) > length:  # cut after the country's length, only where a group ends
        seen, stop = 0, start
        while seen < length:
            seen += scan[stop] != " "
            stop += 1
        if scan[stop] != " ":
            return []
        end = stop
    return [(start, end, "iban")]


def _ipv6(scan: str, start: int, end: int, probe: bool) -> list[Span]:
    text = scan[start:end].rstrip(".")
    return [(start, start + len(text), "ipv6")] if ipv6_ok(text) else []


def _plain(kind: str, check: Callable[[str], bool] | None = None) -> Handler:
    def handler(scan: str, start: int, end: int, probe: bool) -> list[Span]:
        return [(start, end, kind)] if check is None or check(scan[start:end]) else []

    return handler


def _keyed(scan: str, start: int, end: int, probe: bool, *, flag: bool = False) -> list[Span]:
    """A key naming a secret at ``scan[start:end]``: the span of its value, if the value is one to redact."""
    key_start, lo = start, max(1, start - 128)
    while key_start > lo and scan[key_start - 1] in p.KEY_CHARS:
        key_start -= 1
    klass = key_class(scan[key_start:end].lstrip("-"))
    if klass is None:
        return []
    if probe:
        return [(start, end, "key")]
    vm = (p.FLAG_VALUE if flag else p.KEYED_VALUE).match(scan, end)
    if vm is None:
        return []
    group = "qv" if vm.group("qv") is not None else "qv1" if vm.group("qv1") is not None else "v"
    vs, ve = vm.span(group)
    scheme = vm.group("s") is not None
    sm = p.SCHEME.match(scan, vs, ve)
    if sm is not None:
        vs, scheme = sm.end(), True
    kind = _keyed_kind("password" if scheme else klass, scan[vs:ve])
    return [(vs, ve, kind or EXAMINED)]  # a value judged and kept is not read again for a key inside it


def _keyed_kind(klass: KeyClass, value: str) -> str | None:
    """``aws_secret_key`` (40 characters after an AWS key), ``high_entropy`` (the keyed rule) or None."""
    if klass == "aws" and _AWS_SECRET.fullmatch(value):
        return "aws_secret_key"
    return "high_entropy" if keyed_value_ok("secret" if klass == "aws" else klass, value) else None


def _flag(scan: str, start: int, end: int, probe: bool) -> list[Span]:
    return _keyed(scan, start, end, probe, flag=True)


def _masked(value: str) -> bool:
    """A value that holds no credential: empty, a mask (``***``, ``xxxx``), a placeholder or a reference."""
    return (
        not value
        or set(value) <= _MASK_CHARS
        or value.startswith(_REFERENCE)
        or _ENV_REFERENCE.fullmatch(value) is not None
        or PLACEHOLDER.search(value) is not None
    )


def _url_credentials(scan: str, start: int, end: int, probe: bool) -> list[Span]:
    """``scheme://user:password@``: the password (between the userinfo's first ``:`` and the last ``@``)."""
    colon = scan.index(":", scan.index("://", start) + 3)
    vs, ve = colon + 1, end - 1
    return [] if _masked(scan[vs:ve]) else [(vs, ve, "url_credentials")]


def _cli_password(scan: str, start: int, end: int, probe: bool) -> list[Span]:
    """The password after ``curl -u user:`` or ``mysql -p`` (``end``): up to white space or a quote."""
    m = p.CLI_PASSWORD.match(scan, end)
    if m is None:
        return []
    vs, ve = m.span("v")
    value = scan[vs:ve]
    tail = _USER_TAIL.search(scan, start, end - 1)
    user = tail.group().removeprefix("-u") if tail else ""
    if _masked(value) or (value.isdigit() and user.isdigit()):  # docker -u 1000:1000 is a uid and a gid
        return [(vs, ve, EXAMINED)]
    return [(vs, ve, "cli_password")]


def _azure_key(scan: str, start: int, end: int, probe: bool) -> list[Span]:
    return [(scan.index("=", start) + 1, end, "azure_key")]


def _digit(text: str) -> bool:
    return any(c.isdigit() for c in text)


def _ipv4(scan: str, start: int, end: int, probe: bool) -> list[Span]:
    span = ipv4_span(scan, start, end, words=not probe)
    return [span] if span else []


_PII_HANDLERS: dict[str, Handler] = {
    "ipv4": _ipv4,
    "card": _checked(card_span),
    "card_groups": _checked(card_span),
    "card_amex": _checked(card_span),
    "phone_us": _plain("phone"),
    "phone_us1": _plain("phone"),
    "trunk": _checked(trunk_phone_span),
    "intl": _checked(intl_phone_span),
    "paren": _checked(paren_phone_span),
    "iban": _iban,
    "ipv6": _ipv6,
    "ipv6_digit": _ipv6,
    "ipv6_hex": _ipv6,
}
_SECRET_HANDLERS: dict[str, Handler] = {
    "private_key": _plain("private_key"),
    "jwt": _plain("jwt", jwt_ok),
    "aws_access_key": _plain("aws_access_key"),
    "google_api_key": _plain("google_api_key"),
    "github_token": _plain("github_token", mixed),
    "gitlab_token": _plain("gitlab_token", lambda t: mixed(t[6:])),
    "slack_token": _plain("slack_token", _digit),
    "stripe_key": _plain("stripe_key", lambda t: mixed(t[8:])),
    "openai_key": _plain("openai_key", lambda t: mixed(t[3:])),
    "npm_token": _plain("npm_token", lambda t: mixed(t[4:])),
    "hf_token": _plain("hf_token", lambda t: mixed(t[3:])),
    "azure_key": _azure_key,
    "slack_webhook": _plain("slack_webhook"),
    "url_credentials": _url_credentials,
    "curl_user": _cli_password,
    "mysql_p": _cli_password,
}


def _resolve(spans: list[Span]) -> list[Span]:
    """Non-overlapping spans: earliest start, then longest, then a named kind over ``high_entropy``."""
    spans.sort(key=lambda s: (s[0], -s[1], s[2] == "high_entropy"))
    out: list[Span] = []
    last = -1
    for span in spans:
        if span[0] >= last:
            out.append(span)
            last = span[1]
        elif span[2] != "high_entropy" and out[-1][2] == "high_entropy":
            out[-1] = span  # a named detection inside a keyed value: the detection, not the keyed rule
            last = span[1]
    return out


class Pass:
    """One scan: a pattern, the handler of each of its alternatives, and how its matches map to candidates."""

    __slots__ = ("handlers", "lower", "pattern", "skip")

    def __init__(self, pattern: re.Pattern[str], handlers: dict[str, Handler], *, skip: int, lower: bool) -> None:
        self.pattern = pattern
        self.handlers = handlers
        self.skip = skip  # 1 where the pattern consumes the boundary before the candidate
        self.lower = lower  # the pattern runs over the text lower-cased (same offsets)


_ASCII_LOWER = {c: c + 32 for c in range(65, 91)}


class _Subjects:
    """The text a pass runs over: the scan itself, or the scan lower-cased (computed once, same offsets)."""

    __slots__ = ("_low", "scan")

    def __init__(self, scan: str) -> None:
        self.scan = scan
        self._low: str | None = None

    def of(self, scan_pass: Pass) -> str:
        if not scan_pass.lower:
            return self.scan
        if self._low is None:
            low = self.scan.lower()
            self._low = low if len(low) == len(self.scan) else self.scan.translate(_ASCII_LOWER)
        return self._low


class Detector:
    """The scans, checks and overlap rule of one redactor."""

    def __init__(self, passes: Sequence[Pass], *, pii: bool) -> None:
        self.passes = tuple(passes)
        self.pii = pii

    def spans(self, text: str, key: str | None = None) -> list[Span]:
        """The non-overlapping spans to replace in ``text``; ``key``: the JSON field holding it (keyed rule)."""
        if self.pii and _PII_POSSIBLE.search(text) is None:
            return []  # every pii.v1 value holds a digit, an @ or a colon
        if not self.pii and len(text) < 8:
            return []  # every secrets.v1 value is 8 characters or more
        scan = "\n" + text
        subjects = _Subjects(scan)
        found: list[Span] = []
        for scan_pass in self.passes:
            handlers, skip, covered = scan_pass.handlers, scan_pass.skip, 0
            for m in scan_pass.pattern.finditer(subjects.of(scan_pass)):
                if m.start() < covered:
                    continue  # inside a value this pass already reported: it would lose to that value
                spans = handlers[m.lastgroup or ""](scan, m.start() + skip, m.end(), False)
                if spans:
                    covered = max(covered, spans[-1][1])
                    found += [span for span in spans if span[2]]
        if key is not None and not self.pii and text:
            self._keyed_field(scan, key, found)
        return _resolve([(s - 1, e - 1, kind) for s, e, kind in found])

    def _keyed_field(self, scan: str, key: str, found: list[Span]) -> None:
        """The whole string under a key naming a secret (after an HTTP scheme), unless a detection is in it."""
        klass = key_class(key)
        if klass is None or found:
            return
        sm = p.SCHEME.match(scan, 1)
        start = sm.end() if sm else 1
        kind = _keyed_kind("password" if sm else klass, scan[start:])
        if kind:
            found.append((start, len(scan), kind))

    def card_number(self, value: int) -> bool:
        """Whether a JSON integer is a payment card number (pii.v1 only)."""
        return self.pii and value > 0 and card_ok(str(value))

    def hit_lines(self, text: str, line_starts: Sequence[int]) -> dict[int, set[str]]:
        """The lines (by index; they start at ``line_starts``) on which something may need redacting, each with
        the values found on it (its *needles*: whatever a string of that line reports contains one of them)."""
        scan = "\n" + text
        subjects = _Subjects(scan)
        lines: dict[int, set[str]] = {}
        for scan_pass in self.passes:
            handlers, skip = scan_pass.handlers, scan_pass.skip
            for m in scan_pass.pattern.finditer(subjects.of(scan_pass)):
                start = m.start() + skip
                spans = handlers[m.lastgroup or ""](scan, start, m.end(), True)
                if spans:
                    line = bisect_right(line_starts, start - 1) - 1
                    lines.setdefault(line, set()).update(scan[s:e] for s, e, _ in spans)
        return lines

    def has_hit(self, text: str) -> bool:
        """Whether :meth:`spans` may report anything in ``text`` (or it holds a key naming a secret)."""
        scan = "\n" + text
        subjects = _Subjects(scan)
        return any(self._first(sp, scan, subjects.of(sp), 0) >= 0 for sp in self.passes)

    @staticmethod
    def _first(scan_pass: Pass, scan: str, subject: str, pos: int) -> int:
        """The text offset of the first hit of ``scan_pass`` at or after scan index ``pos``, or -1."""
        handlers, skip = scan_pass.handlers, scan_pass.skip
        for m in scan_pass.pattern.finditer(subject, pos):
            start = m.start() + skip
            if handlers[m.lastgroup or ""](scan, start, m.end(), True):
                return start - 1
        return -1


DETECTORS: dict[str, Detector] = {
    "pii.v1": Detector(
        [Pass(p.PII, _PII_HANDLERS, skip=1, lower=False), Pass(p.EMAIL_AT, {"email": _email}, skip=0, lower=False)],
        pii=True,
    ),
    "secrets.v1": Detector(
        [
            Pass(p.SECRETS, _SECRET_HANDLERS, skip=1, lower=False),
            Pass(p.KEYED, {"key": _keyed}, skip=0, lower=True),
            Pass(p.FLAG, {"flag": _flag}, skip=0, lower=True),
        ],
        pii=False,
    ),
}
