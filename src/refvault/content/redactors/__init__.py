"""Redaction of text, JSON and JSON Lines artifacts: PII and secrets replaced by typed, consistent placeholders.

::

    from refvault.content.redactors import REDACTORS, redact_bytes
    outcome = redact_bytes(data, media_type="application/x-ndjson", redactor="pii.v1")
    outcome.data, outcome.matches          # b'{"user":"[EMAIL_1]",...}', {"email": 3, "phone": 1}

Pure and in memory: bytes in, bytes and counts out; nothing is stored, logged or fetched. It belongs to the
storage layer and imports only :mod:`refvault.errors` and the standard library.

**Redactors** (:data:`REDACTORS`). ``pii.v1`` finds e-mail addresses, phone numbers (international ``+``
forms, and national forms with separators: 7-15 digits, never a date, a version or a plain run of digits),
IPv4 and IPv6 addresses that name a host (not ``0.0.0.0``, loopback or a version like ``Chrome/124.0.0.0``),
payment card numbers (Luhn-checked, known issuer prefixes and lengths; groups separated by spaces, hyphens,
dots or no-break spaces, as are phone numbers') and IBANs (mod-97 checked, in any letter case).
``secrets.v1`` finds AWS access keys (and secret keys after an AWS-named key), GitHub, GitLab, Slack, Stripe,
Google, OpenAI, npm and Hugging Face tokens, Slack webhook URLs, Azure storage account keys
(``AccountKey=``), JWTs, PEM and PGP private key blocks, the password of a URL's userinfo
(``postgres://user:PASSWORD@host``), of ``curl -u user:PASSWORD`` and of ``mysql -pPASSWORD``, and any value
of 16+ characters with 3.5+ bits of entropy per character (8+ characters for passwords and HTTP credentials)
after a key that names a secret (``password``, ``secret``, ``token``, ``api_key``, ``auth``, ``credential``,
``private``, ...), redacted to its whole extent (``PASSWORD=Tr0ub4dor&3xyz`` entirely). The rules are in
:mod:`~refvault.content.redactors.patterns`, :mod:`~refvault.content.redactors.digits` and
:mod:`~refvault.content.redactors.validators`.

**What this does not find.** Names and postal addresses in free text (they need NER); a phone number written
as a bare run of digits (``6465550123``: without a separator or a ``+`` it cannot be told from an id, an
order number or a timestamp); secrets with no recognisable shape and no key naming them (a password in
prose, a low-entropy value under a generic key); card numbers or IBANs that fail their checksum; values split
across JSON strings or encoded (base64, URL-encoding beyond JSON escapes).

**Why no detection library.** Presidio needs spaCy and a language model (hundreds of MB, installed separately),
and its NER pipeline reads text at a few MB/s per core at best (the larger models far less), an order of
magnitude below one regex pass; detect-secrets runs each plugin's regexes line by line and reports a hashed
secret with its line number, not the span a replacement needs; the ``phonenumbers`` matcher parses and
validates every candidate in Python, slowly. What these tools do for structured values (regex candidates
confirmed by a validator, entropy on keyed values) is what this package does: one combined candidate scan per
redactor, plus one or two scans anchored on a literal (``@``, key words), each a single linear pass over the
artifact, with Python only on candidates (``bench/redaction.py`` measures it against a single ``re.sub``).

**Invariants** (each tested in ``tests/content/test_redactors.py`` unless named):

* **Typed, consistent placeholders.** A detected value becomes ``[KIND_n]`` (``[EMAIL_1]``, ``[CARD_2]``,
  ``[SECRET_1]``): within one call the same value always gets the same placeholder and distinct values
  distinct ones (:mod:`~refvault.content.redactors.placeholders`). ``matches`` counts occurrences by kind,
  ``placeholders`` distinct placeholders.
* **Idempotent.** Placeholders are never detected, and redacting an output again finds nothing
  (``tests/content/test_redaction_properties.py``).
* **Structure is kept.** JSON stays JSON, JSON Lines keeps its line count, each record parseable if it was
  and strict if it was; strings are replaced (values and object keys, keys with the same placeholders; two
  keys made equal get a ``~2`` suffix), and card numbers written as integers; every other number keeps its
  spelling (``1e400``, ``0.10000000000000000555``), an object with a repeated key keeps every pair (each
  value redacted; counted in ``duplicate_key_records``); records with nothing to replace keep their exact
  bytes (:mod:`~refvault.content.redactors.structured`, :mod:`~refvault.content.redactors.jsonvalue`).
* **Field-path mode** (``fields=["user.email", "items.*.card"]``) replaces exactly the values at the paths,
  whatever their type, and runs no detector on records (:mod:`~refvault.content.redactors.fields`).
* **Typed refusals that echo nothing.** Binary media types, text that is not UTF-8, an unknown redactor,
  ``fields`` for text, bad paths, an invalid JSON document and JSON to redact nested over 512 levels raise
  :class:`~refvault.errors.InvalidArgument` whose message holds none of the input.
* **Linear time.** Every pattern is linear in its input and each byte is scanned once per pass; a keyed
  value is read once, to its end, and keys inside a value already judged are not judged again (1 MB of
  ``token:aaaaaaa`` takes a fraction of a second); JSON Lines records without a candidate are parsed (to count
  them) but not walked.
"""

from __future__ import annotations

from collections.abc import Sequence

from refvault.content.redactors.detect import DETECTORS
from refvault.content.redactors.engine import redact_text
from refvault.content.redactors.fields import compile_paths
from refvault.content.redactors.placeholders import Placeholders
from refvault.content.redactors.spec import REDACTORS, RedactionOutcome, RedactorSpec
from refvault.content.redactors.structured import redact_json_document, redact_json_lines
from refvault.errors import InvalidArgument

__all__ = ["REDACTORS", "RedactionOutcome", "RedactorSpec", "redact_bytes"]


def _form(media_type: str) -> str:
    """``"jsonl"``, ``"json"`` or ``"text"``: how bytes of ``media_type`` are redacted."""
    essence = media_type.split(";", 1)[0].strip().lower() if isinstance(media_type, str) else ""
    if "ndjson" in essence or "jsonl" in essence or "json-seq" in essence:
        return "jsonl"
    if essence == "application/json" or (essence.startswith("application/") and essence.endswith("+json")):
        return "json"
    if essence.startswith("text/"):
        return "text"
    raise InvalidArgument(
        "only text (text/*), JSON (application/json) and JSON Lines (application/x-ndjson, application/jsonl) "
        "can be redacted; binary content cannot"
    )


def redact_bytes(
    data: bytes, *, media_type: str, redactor: str, fields: Sequence[str] | None = None
) -> RedactionOutcome:
    """Redact ``data`` (of ``media_type``) with the built-in ``redactor``; see the module docstring.

    Raises :class:`~refvault.errors.InvalidArgument` (nothing of ``data`` in the message) for an unknown
    redactor, a binary media type, non-UTF-8 bytes, ``fields`` on text, invalid paths, or an invalid JSON
    document.
    """
    detector = DETECTORS.get(redactor) if isinstance(redactor, str) else None
    if detector is None:
        raise InvalidArgument(f"unknown redactor; the built-in redactors are {', '.join(sorted(REDACTORS))}")
    form = _form(media_type)
    if fields is not None and form == "text":
        raise InvalidArgument("fields apply to JSON and JSON Lines only, not to text")
    paths = compile_paths(fields) if fields is not None else None
    data = bytes(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument("the content is not valid UTF-8 text, so it cannot be redacted") from None
    placeholders = Placeholders()
    records: int | None
    unparseable = duplicate_keys = 0
    if form == "jsonl":
        result = redact_json_lines(data, text, detector, placeholders, paths)
        out, records, unparseable = result.data, result.records, result.unparseable
        duplicate_keys = result.duplicate_keys
    elif form == "json":
        out, records, duplicate_keys = redact_json_document(data, text, detector, placeholders, paths)
    else:
        redacted = redact_text(text, detector, placeholders)
        out, records = (data if redacted == text else redacted.encode()), None
    return RedactionOutcome(
        data=out,
        bytes_in=len(data),
        bytes_out=len(out),
        records_in=records,
        records_out=records,
        matches=dict(placeholders.matches),
        unparseable_records=unparseable,
        placeholders=placeholders.distinct,
        duplicate_key_records=duplicate_keys,
    )
