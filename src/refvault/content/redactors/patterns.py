"""The regular expressions of the two redactors: a few scans each, every one a single pass over the text.

**How a scan stays fast.** CPython's ``re`` skips ahead with a tight C loop only when a pattern starts with
one literal or one character class, and pays a full match attempt (tens of nanoseconds) at every position
that passes it. So:

* the main scans (:data:`PII`, :data:`SECRETS`) start with the *boundary* before a value
  (:data:`PII_BOUNDARY`, :data:`SECRETS_BOUNDARY`), consumed as the match's first character; every
  alternative after it starts with a literal or a class, which the engine tests before entering it, and
  asserts its shape with possessive quantifiers and atomic groups, so nothing backtracks. The alternative
  that matched is named by an empty group at its end (``m.lastgroup``); the candidate starts one character
  after ``m.start()``. Text is scanned as ``"\\n" + text`` so a value at offset 0 has a boundary too;
* e-mail addresses are found from their ``@`` (:data:`EMAIL_AT`, a literal-prefix scan), the local part read
  backwards in Python, instead of trying a local part at every word;
* keys naming a secret are found from their words, in the text lower-cased (:data:`KEYED`, :data:`FLAG`):
  literal words let the engine skip to their first letters, and a word anywhere in a key
  (``clientSecret``, ``DB_PASSWORD``) is found without a boundary.

Number candidates are exact shapes (a card's groups, ``NXX-NXX-XXXX``, a trunk-0 number, four dotted octets),
so a run of small numbers (a matrix, a date, a time) is rejected by the engine at its first digits and never
reaches Python; checksums, ranges and digit counts are checked in Python, on the few that match.

Invariants: every quantifier is bounded or possessive, or its repetition is followed by a literal the engine
scans for, so a scan is linear in the text; no pattern matches a placeholder (``[A-Z0-9_]`` between brackets).
"""

from __future__ import annotations

import re

__all__ = [
    "CLI_PASSWORD",
    "EMAIL_AT",
    "FLAG",
    "FLAG_VALUE",
    "KEYED",
    "KEYED_VALUE",
    "KEY_CHARS",
    "LOCAL_CHARS",
    "PII",
    "PII_BOUNDARY",
    "SCHEME",
    "SECRETS",
    "SECRETS_BOUNDARY",
]


# -- pii.v1 -----------------------------------------------------------------------------------------------------------

PII_BOUNDARY = r"[^A-Za-z0-9_.+\-]"
_END = r"(?![A-Za-z0-9_]|[.+\-][A-Za-z0-9])"
_HEX = "[0-9A-Fa-f]"
_NB = r"\u00a0\u202f"  # no-break spaces (U+00A0, U+202F), which word processors put between digit groups

_IPV6_TAIL = (  # after an IPv6 address's first character: two colons close behind, then "::" or eight groups
    rf"(?={_HEX}{{0,3}}:{_HEX}{{0,4}}:)(?<![0-9A-Fa-f:]:.)(?=[0-9A-Fa-f:.]{{0,40}}::|(?:{_HEX}{{0,4}}:){{6}})"
    r"[0-9A-Fa-f:.]{0,43}+(?![A-Za-z0-9_:])"
)

PII = re.compile(
    PII_BOUNDARY
    + "(?:"
    # Values that start with a digit share the first step (the digit is consumed; a lookbehind reads it).
    + "[0-9](?:"
    # IPv4: four dotted groups of 1-3 digits, not right after "name/" (Chrome/124.0.0.0 is a version).
    + rf"(?<![A-Za-z0-9]/.)[0-9]{{0,2}}+(?:\.[0-9]{{1,3}}+){{3}}{_END}(?P<ipv4>)"
    # Cards: 13-19 digits from an issuer's first digit, plain or in groups of four with one separator (a last
    # group of 1-4, and one of 1-3 after it), or 4-6-5 / 4-6-4 (American Express, Diners). Separators of cards
    # and phone numbers: space, hyphen, dot, or a no-break space (U+00A0, U+202F).
    + rf"|(?<=[2-6])[0-9]{{12,18}}+{_END}(?P<card>)"
    + rf"|(?<=[2-6])[0-9]{{3}}(?P<cs>[ .\-{_NB}])[0-9]{{4}}(?P=cs)[0-9]{{4}}"
    + r"(?:(?P=cs)[0-9]{1,4}+(?:(?P=cs)[0-9]{1,3}+)?)?+"
    + rf"(?!(?P=cs)[0-9]){_END}(?P<card_groups>)"
    + rf"|(?<=3)[0-9]{{3}}(?P<ca>[ .\-{_NB}])[0-9]{{6}}(?P=ca)[0-9]{{4,5}}+(?!(?P=ca)[0-9]){_END}(?P<card_amex>)"
    # North American numbers: NXX-NXX-XXXX with one separator, optionally after "1-".
    + rf"|(?<=[2-9])[0-9]{{2}}(?P<us>[ .\-{_NB}])[0-9]{{3}}(?P=us)[0-9]{{4}}+(?!(?P=us)[0-9]){_END}(?P<phone_us>)"
    + rf"|(?<=1)(?P<u1>[ .\-{_NB}])[2-9][0-9]{{2}}(?P=u1)[0-9]{{3}}(?P=u1)[0-9]{{4}}+(?!(?P=u1)[0-9]){_END}"
    + r"(?P<phone_us1>)"
    # National numbers with a trunk 0: 2-5 groups (020 7946 0958, 030/1234567, 01 23 45 67 89).
    + rf"|(?<=0)[0-9]{{1,7}}+(?:[ .\-/{_NB}][0-9]{{2,8}}+){{1,4}}+{_END}(?P<trunk>)"
    + rf"|{_IPV6_TAIL}(?P<ipv6_digit>)"
    + ")"
    # International numbers: + country code, groups, an optional (0) or (area code); 7+ characters.
    + rf"|\+[1-9](?=[0-9 .\-(){_NB}]{{6}})"
    + rf"(?>[0-9]*(?:(?:[ .\-{_NB}]?\([0-9]{{1,4}}\)[ .\-{_NB}]?|[ .\-{_NB}])[0-9]+)*){_END}"
    + r"(?P<intl>)"
    # National numbers with the area code in parentheses.
    + rf"|\([0-9]{{1,5}}\)(?>[ .\-{_NB}]?[0-9]+(?:[ .\-{_NB}][0-9]+)*){_END}(?P<paren>)"
    # IBAN: country, check digits, groups of four (spaced or not; any case: the check upper-cases it).
    + r"|[A-Za-z]{2}[0-9]{2}(?:[ ]?[A-Za-z0-9]{4}){2,7}+(?:[ ]?[A-Za-z0-9]{1,3})?(?![A-Za-z0-9])(?P<iban>)"
    # IPv6 from "::" or from a hex letter.
    + rf"|::(?={_HEX})(?:{_HEX}{{1,4}}:){{0,6}}+[0-9A-Fa-f.]{{1,15}}+(?![A-Za-z0-9_:])(?P<ipv6>)"
    + rf"|[A-Fa-f]{_IPV6_TAIL}(?P<ipv6_hex>)"
    + ")",
    re.ASCII,
)

LOCAL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?"
EMAIL_AT = re.compile(rf"@(?:{_LABEL}\.)+[A-Za-z]{{2,24}}(?![A-Za-z0-9_\-]|\.[A-Za-z0-9])(?P<email>)", re.ASCII)
"""From an ``@`` to the end of the domain (a TLD of letters); the local part is read backwards."""


# -- secrets.v1 -------------------------------------------------------------------------------------------------------

SECRETS_BOUNDARY = r"[^A-Za-z0-9]"

SECRETS = re.compile(
    SECRETS_BOUNDARY
    + "(?:"
    # A PEM private key: the armour, the body (base64, line breaks, literal \n of JSON, Proc-Type/DEK-Info
    # headers: anything but "--"), then the END armour if it is there (a cut-off key is still a key).
    + r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE[ ]KEY(?:[ ]BLOCK)?-----(?:[A-Za-z0-9+/=\s\\:,.()]|-(?!-))*+"
    + r"(?:-----END[ A-Z0-9]{0,40}PRIVATE[ ]KEY(?:[ ]BLOCK)?-----)?(?P<private_key>)"
    + r"|eyJ[A-Za-z0-9_\-]{8,2048}+\.[A-Za-z0-9_\-]{2,16384}+\.[A-Za-z0-9_\-]{8,2048}+(?![A-Za-z0-9_\-])(?P<jwt>)"
    + r"|A(?:KIA|SIA|BIA|CCA|3T[A-Z0-9])[A-Z0-9]{16}(?![A-Za-z0-9])(?P<aws_access_key>)"
    + r"|AIza[0-9A-Za-z_\-]{35}(?![A-Za-z0-9_\-])(?P<google_api_key>)"
    + r"|g(?:h[pousr]_[A-Za-z0-9]{36,251}+|ithub_pat_[A-Za-z0-9_]{22,251}+)(?![A-Za-z0-9_])(?P<github_token>)"
    + r"|glpat-[A-Za-z0-9_\-]{20,64}+(?![A-Za-z0-9_\-])(?P<gitlab_token>)"
    + r"|xox[abposr]-[A-Za-z0-9\-]{10,250}+(?![A-Za-z0-9_\-])(?P<slack_token>)"
    + r"|[spr]k_live_[A-Za-z0-9]{16,247}+(?![A-Za-z0-9_])(?P<stripe_key>)"
    + r"|sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,250}+(?![A-Za-z0-9_\-])(?P<openai_key>)"
    + r"|npm_[A-Za-z0-9]{36}(?![A-Za-z0-9_])(?P<npm_token>)"
    + r"|hf_[A-Za-z0-9]{34,64}+(?![A-Za-z0-9_])(?P<hf_token>)"
    + r"|(?:Account|SharedAccess)Key=[A-Za-z0-9+/]{40,128}+={0,2}+(?![A-Za-z0-9+/=])(?P<azure_key>)"
    + r"|https://hooks\.slack\.com/services/T[A-Z0-9]{6,12}+/B[A-Z0-9]{6,12}+/[A-Za-z0-9]{20,32}+(?![A-Za-z0-9])"
    + r"(?P<slack_webhook>)"
    # A URL's userinfo password (scheme://user:password@host): up to the last "@" before the path.
    + r"|[A-Za-z][A-Za-z0-9+.\-]{1,31}+://[^\s:/?#@\[\]\"'<>`]{0,256}+:[^\s/?#\"'<>`]{1,256}@(?P<url_credentials>)"
    # curl -u/--user user:password (ends at the colon; the handler reads the password).
    + r"|(?:-user(?:[ \t]++|=)|-u[ \t]*+)['\"]?[^\s:'\"@]{1,128}+:(?=[^\s'\"])(?P<curl_user>)"
    # mysql -p<password> (no space: "-p" alone prompts), on the line of a MySQL client.
    + r"|(?:mysql|mysqldump|mysqladmin|mariadb)(?![A-Za-z0-9_\-])[^\n]{0,200}?[ \t]-p['\"]?(?=[^\s'\"])(?P<mysql_p>)"
    + ")",
    re.ASCII,
)

_KEY_WORDS = (
    r"(?:pass(?:word|wd|phrase)?|secrets?|tokens?|api[_.\-]?keys?|access[_.\-]?keys?|auth|credentials?|private)"
)
_KEY_TAIL = r"[a-z0-9_.\-]{0,128}+"
_VALUE_AHEAD = (
    r"(?=[\"']?[ \t\r]*[:=][ \t\r]*"
    r"(?:\"[^\"\r\n]{8}|'[^'\r\n]{8}|(?:bearer |basic |token )?[^\s\"'`]{8}|[\[{]))"
)
KEYED = re.compile(rf"{_KEY_WORDS}{_KEY_TAIL}{_VALUE_AHEAD}(?P<key>)", re.ASCII)
"""Run over the text lower-cased: a secret word anywhere in a key (``db_password``, ``clientSecret``,
``X-Api-Key``) up to the key's end, then ``=`` or ``:`` and a value of 8+ characters (or a JSON ``[``/``{``,
whose strings the JSON walk judges). The key's start, its class and the value are read in Python."""
FLAG = re.compile(rf"--(?:[a-z0-9]{{1,24}}+[_.\-])?{_KEY_WORDS}{_KEY_TAIL}(?=[ \t]+[^\s\-])(?P<flag>)", re.ASCII)
"""Run over the text lower-cased: a command-line flag naming a secret (``--password VALUE``, ``--db-password``)."""

KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_SCHEME = r"(?:[Bb]earer|[Bb]asic|[Tt]oken|BEARER|BASIC|TOKEN)[ ]+"
# An unquoted value runs to white space, a quote or a backtick; ",", ";", "&" and a closing bracket end it only
# where that clearly ends it: before white space, the end, another of them, or a "key=" / "key:" (a query string,
# a list of settings). "Tr0ub4dor&3xyz" and "a,b" are whole values; "x&scope=read" ends at "&".
_ENDS = r"[,;&)\]}>]"
_UNQUOTED = rf"(?:[^\s\"'`,;&)\]}}>]++|{_ENDS}(?![\s\"'`]|\Z|{_ENDS}|[A-Za-z_][A-Za-z0-9_.\-]{{0,64}}+[=:]))++"
_VALUE = (
    r"(?:\"(?P<qv>[^\"\r\n]++)\"?|'(?P<qv1>[^'\r\n]++)'?"  # quoted: to the closing quote (or the line's end)
    rf"|(?P<s>{_SCHEME})?(?P<v>{_UNQUOTED}))"
)
KEYED_VALUE = re.compile(r"[\"']?[ \t\r]*[:=][ \t\r]*" + _VALUE, re.ASCII)
"""After a key: the separator and the value, to its whole extent (quoted: to the closing quote or the end of the
line; unquoted: see ``_UNQUOTED``). Each group is possessive, so the value is read once."""
FLAG_VALUE = re.compile(r"[ \t]+" + _VALUE, re.ASCII)
SCHEME = re.compile(_SCHEME + "(?=[^ ])", re.ASCII)
"""An HTTP authorization scheme before a credential: the credential is the value, and a credential however
short (8+ characters, as a password)."""
CLI_PASSWORD = re.compile(r"['\"]?(?P<v>[^\s'\"]++)", re.ASCII)
"""A command-line password after ``curl -u user:`` or ``mysql -p``: up to white space or a quote."""
