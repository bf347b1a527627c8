"""The built-in redactors, the kinds of value each reports, and the outcome of one redaction.

Invariants:

* A kind's placeholder label is fixed (:data:`LABELS`): ``email`` -> ``[EMAIL_n]``, ``high_entropy`` ->
  ``[SECRET_n]``; labels are upper-case ASCII letters, digits and ``_``, so a placeholder never contains
  anything a detector looks for (see :data:`refvault.content.redactors.placeholders.PLACEHOLDER`).
* :data:`REDACTORS` is read-only and names exactly ``pii.v1`` and ``secrets.v1``; a redactor's ``kinds``
  are the only kinds it reports, besides ``field`` (field-path mode, any redactor).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["FIELD_KIND", "LABELS", "PII_KINDS", "REDACTORS", "SECRET_KINDS", "RedactionOutcome", "RedactorSpec"]

PII_KINDS: tuple[str, ...] = ("email", "phone", "ipv4", "ipv6", "card", "iban")
SECRET_KINDS: tuple[str, ...] = (
    "aws_access_key",
    "aws_secret_key",
    "github_token",
    "slack_token",
    "stripe_key",
    "google_api_key",
    "openai_key",
    "gitlab_token",
    "jwt",
    "private_key",
    "npm_token",
    "hf_token",
    "azure_key",
    "slack_webhook",
    "url_credentials",
    "cli_password",
    "high_entropy",
)
FIELD_KIND = "field"
"""The kind every replacement of field-path mode is counted under."""

LABELS: Mapping[str, str] = MappingProxyType(
    {kind: kind.upper() for kind in PII_KINDS + SECRET_KINDS} | {"high_entropy": "SECRET"}
)
"""Placeholder label of each detector kind: ``[LABEL_n]``."""


@dataclass(frozen=True)
class RedactorSpec:
    """One built-in redactor: what it is called, the transformation it records, what it declassifies."""

    name: str
    transformation: str
    version: str
    declassifies: frozenset[str]
    kinds: tuple[str, ...]


REDACTORS: Mapping[str, RedactorSpec] = MappingProxyType(
    {
        "pii.v1": RedactorSpec("pii.v1", "redact:pii", "1", frozenset({"pii"}), PII_KINDS),
        "secrets.v1": RedactorSpec("secrets.v1", "redact:secrets", "1", frozenset({"secret"}), SECRET_KINDS),
    }
)


@dataclass(frozen=True)
class RedactionOutcome:
    """What one :func:`~refvault.content.redactors.redact_bytes` call produced.

    ``bytes_in``/``bytes_out`` are ``len`` of the input and of ``data``. ``records_in``/``records_out``: for
    JSON Lines the non-blank lines (records, parseable or not; every line is kept, so they are equal); for a
    JSON document 1, or the array's length when the top level is an array; None for text. ``matches`` counts
    replacements (occurrences, not distinct values) by kind, only kinds with at least one; ``placeholders``
    counts distinct placeholders issued; ``unparseable_records`` the JSON Lines lines that are not JSON (each
    redacted as text and kept); ``duplicate_key_records`` the records (JSON Lines lines, array items, or the
    document) holding an object with a repeated key (every value of which is redacted, and every pair kept).
    """

    data: bytes
    bytes_in: int
    bytes_out: int
    records_in: int | None
    records_out: int | None
    matches: dict[str, int]
    unparseable_records: int
    placeholders: int
    duplicate_key_records: int = 0
