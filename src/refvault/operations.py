"""One request type per vault operation, defined once; and the record set a record read answers with.

Every caller of an operation — :class:`~refvault.Vault`, the HTTP
:class:`~refvault.client.Client`, the functions of :mod:`refvault.read`, the
toolbox's read tools, the server's routes and the CLI — builds the same frozen
value, and its ``__post_init__`` checks the arguments with the errors and
messages every one of them gives. A new argument of an operation (a purpose, a
recipient, a budget) is added here, once.

=====================  ===========================================================
:class:`CaptureMetadata`  ``put``'s keyword arguments (what a capture records; typed as :class:`CaptureOptions`)
:class:`WindowRequest`    :func:`refvault.read.window`: lines or bytes of a text artifact
:class:`GrepRequest`      :func:`refvault.read.grep`: lines that contain a pattern
:class:`QueryRequest`     :func:`refvault.read.query`: records, a page at a time
:class:`RecordSetRequest` :func:`refvault.read.derive` (``build``) / ``derived_records``
:class:`ListPage`         one page of a scope's artifacts (``GET /v1/artifacts``)
=====================  ===========================================================

The defaults and ceilings are those of :mod:`refvault.limits`. This module sits
in the bottom layer: it imports only :mod:`refvault.errors`,
:mod:`refvault.model`, :mod:`refvault.limits` and :mod:`refvault.policy`. Every
selective read carries ``purpose`` and ``recipient`` (defaults ``"default"`` and
``"user"``), checked by :func:`refvault.policy.check_purpose` / ``check_recipient``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypedDict, TypeGuard, TypeVar

from refvault import limits
from refvault.errors import InvalidArgument, InvalidMetadata, InvalidQuery, InvalidType
from refvault.ids import is_artifact_id
from refvault.model import (
    Disclosure,
    canonical_media_type,
    check_derived_from,
    check_labels,
    checked_completeness,
    checked_disclosure,
    checked_filename,
    checked_json,
    checked_label,
)
from refvault.policy import DEFAULT_PURPOSE, DEFAULT_RECIPIENT, check_purpose, check_recipient

__all__ = [
    "CaptureMetadata",
    "CaptureOptions",
    "GrepRequest",
    "ListPage",
    "QueryRequest",
    "ReadRequest",
    "RecordSet",
    "RecordSetRequest",
    "Selection",
    "WindowRequest",
    "check_byte_span",
    "field_kind",
    "is_count",
]

T = TypeVar("T")


def is_count(value: object) -> TypeGuard[int]:
    """A non-negative integer (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_byte_span(offset: object, length: object) -> None:
    """The arguments of ``read_range``: a non-negative ``offset`` and ``length`` (``length`` may be None)."""
    if not is_count(offset) or not (length is None or is_count(length)):
        raise InvalidArgument("offset and length must be non-negative integers (length may be None)")


# -- capture -----------------------------------------------------------------------------------


class CaptureOptions(TypedDict, total=False):
    """``put``'s keyword arguments, as every ``put`` types them (``**metadata: Unpack[CaptureOptions]``).

    The same names as :class:`CaptureMetadata`'s fields, which hold their defaults and checks
    (``tests/vault/test_conformance.py`` keeps the two equal): a new capture argument is added to both, here.
    """

    media_type: str
    tool_call_id: str | None
    run_id: str | None
    source_version: dict[str, Any] | None
    completeness: dict[str, Any] | None
    schema_version: str | None
    expires_at: datetime | None
    disclosure: Disclosure
    idempotency_key: str | None
    filename: str | None
    created_at: datetime | None
    labels: Iterable[str] | None
    derived_from: Sequence[str] | None
    supersedes: str | None


@dataclass(frozen=True, slots=True)
class CaptureMetadata:
    """What a capture records besides its bytes: ``put``'s keyword arguments, checked once.

    Every field is checked on construction except the two moments, which are
    checked where the capture happens, against that clock (``expires_at`` must
    be in the vault's future, ``created_at`` not): :meth:`Vault.put
    <refvault.Vault.put>` checks them against its own clock and the client
    sends them for the server to do so. ``source_version`` and ``completeness``
    stay None when not given (a vault records ``{}`` and an ``unknown`` status).
    ``labels`` (:func:`refvault.model.check_labels`) become a frozenset and
    ``derived_from`` (:func:`refvault.model.check_derived_from`) a tuple of ids. ``supersedes`` names an
    artifact of the same scope this capture replaces (marked superseded once the put commits).
    """

    media_type: str = "application/octet-stream"
    tool_call_id: str | None = None
    run_id: str | None = None
    source_version: dict[str, Any] | None = None
    completeness: dict[str, Any] | None = None
    schema_version: str | None = None
    expires_at: datetime | None = None
    disclosure: Disclosure = "model"
    idempotency_key: str | None = None
    filename: str | None = None
    created_at: datetime | None = None
    labels: Iterable[str] | None = None
    derived_from: Sequence[str] | None = None
    supersedes: str | None = None

    def __post_init__(self) -> None:
        if self.supersedes is not None and not is_artifact_id(self.supersedes):
            raise InvalidMetadata("supersedes must be an artifact id (art_ and 26 base32 characters)")
        checked: dict[str, Any] = {
            "labels": check_labels(self.labels),
            "derived_from": check_derived_from(self.derived_from),
            "media_type": canonical_media_type(self.media_type),
            "disclosure": checked_disclosure(self.disclosure),
            "filename": checked_filename(self.filename),
            "tool_call_id": checked_label("tool_call_id", self.tool_call_id),
            "run_id": checked_label("run_id", self.run_id),
            "schema_version": checked_label("schema_version", self.schema_version),
        }
        if self.source_version is not None:
            checked["source_version"] = checked_json("source_version", self.source_version)
        if self.completeness is not None:
            checked["completeness"] = checked_completeness(self.completeness)
        checked["idempotency_key"] = checked_label("idempotency_key", self.idempotency_key)
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @classmethod
    def of(cls, options: CaptureOptions) -> CaptureMetadata:
        """``put``'s keyword arguments, checked; a name ``put`` does not take is an :class:`InvalidType`."""
        unknown = sorted(set(options) - set(cls.__dataclass_fields__))
        if unknown:
            raise InvalidType(f"put() got an unexpected keyword argument {unknown[0]!r}")
        return cls(**options)

    def recorded_source_version(self) -> dict[str, Any]:
        """``source_version`` as a manifest records it (``{}`` when none was given)."""
        return {} if self.source_version is None else self.source_version

    def recorded_labels(self) -> frozenset[str]:
        """``labels`` as a manifest records them (checked: a frozenset of names, empty when none were given)."""
        return frozenset(self.labels or ())

    def recorded_derived_from(self) -> tuple[str, ...]:
        """``derived_from`` as a manifest records it (checked artifact ids in order, empty when none were given)."""
        return tuple(self.derived_from or ())

    def recorded_completeness(self) -> dict[str, Any]:
        """``completeness`` as a manifest records it (status ``unknown`` when none was given)."""
        return checked_completeness(None) if self.completeness is None else self.completeness


# -- selective reads ---------------------------------------------------------------------------


class Selection(Generic[T]):
    """A selective read whose answer is a ``T``: run by the local read engine or by the server.

    The vault contract's ``read_selection`` takes one of these; the type
    parameter says what the read returns.
    """

    __slots__ = ()


def _reader(purpose: object, recipient: object) -> None:
    """Every selective read's ``purpose`` and ``recipient`` (:mod:`refvault.policy`), checked."""
    check_purpose(purpose)
    check_recipient(recipient)


def _pair(name: str, value: object, shape: str) -> tuple[object, object]:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise InvalidArgument(f"{name} must be a list of two numbers {shape}")
    return value[0], value[1]


def _lines_arg(value: object) -> tuple[int, int | None]:
    shape = "[start, end): zero-based, end exclusive or null for 'to the end', e.g. [0, 200]"
    start, end = _pair("lines", value, shape)
    if not is_count(start) or not (end is None or is_count(end)):
        raise InvalidArgument(f"lines must hold non-negative integers {shape}")
    if end is not None and end <= start:
        raise InvalidArgument(f"lines end must be greater than start {shape}")
    return start, end


def _bytes_arg(value: object) -> tuple[int, int]:
    shape = "[offset, length]: zero-based offset and a length of at least 1, e.g. [0, 65536]"
    offset, length = _pair("byte_range", value, shape)
    if not is_count(offset) or not is_count(length) or length == 0:
        raise InvalidArgument(f"byte_range must hold non-negative integers {shape}")
    return offset, length


def _bounded(name: str, value: object, low: int, high: int) -> int:
    if not is_count(value) or not low <= value <= high:
        raise InvalidArgument(f"{name} must be an integer from {low} to {high}")
    return value


@dataclass(frozen=True, slots=True)
class WindowRequest(Selection[dict[str, Any]]):
    """A window of a text artifact: ``lines`` ``[start, end)`` or ``byte_range`` ``[offset, length]``.

    Neither: lines from 0 to the end. At most ``max_chars`` characters
    (1 to :data:`~refvault.limits.MAX_CHARS`) are returned.
    """

    lines: Sequence[int | None] | None = None
    byte_range: Sequence[int] | None = None
    max_chars: int = limits.DEFAULT_WINDOW_CHARS
    purpose: str = DEFAULT_PURPOSE
    recipient: str = DEFAULT_RECIPIENT

    def __post_init__(self) -> None:
        _reader(self.purpose, self.recipient)
        if self.lines is not None and self.byte_range is not None:
            raise InvalidArgument("pass lines or byte_range, not both")
        if self.lines is not None:
            object.__setattr__(self, "lines", _lines_arg(self.lines))
        if self.byte_range is not None:
            object.__setattr__(self, "byte_range", _bytes_arg(self.byte_range))
        _bounded("max_chars", self.max_chars, 1, limits.MAX_CHARS)

    @property
    def line_span(self) -> tuple[int, int | None]:
        """``(start, end)`` of a line window (``end`` None: to the end)."""
        start, end = self.lines if self.lines is not None else (0, None)
        assert start is not None
        return start, end

    @property
    def byte_span(self) -> tuple[int, int] | None:
        """``(offset, length)`` of a byte window, or None for a line window."""
        if self.byte_range is None:
            return None
        offset, length = self.byte_range
        return offset, length


def _pattern(value: object, regex: bool) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= limits.MAX_PATTERN:
        raise InvalidArgument(f"pattern must be a string of 1 to {limits.MAX_PATTERN} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument("pattern must be valid Unicode text (it holds a lone surrogate)") from None
    if not regex and "\n" in value:
        raise InvalidArgument("a literal pattern cannot contain a newline: grep matches within one line")
    return value


def _seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= limits.MAX_SECONDS:
        raise InvalidArgument(f"max_seconds must be a number from 0 to {limits.MAX_SECONDS:g}")
    return float(value)


@dataclass(frozen=True, slots=True)
class GrepRequest(Selection[dict[str, Any]]):
    """Lines of a text artifact that contain ``pattern`` (literal, or RE2 with ``regex``), from ``from_line``.

    At most ``max_matches`` (1 to :data:`~refvault.limits.MAX_MATCHES`) matches,
    within ``max_seconds`` (0 to :data:`~refvault.limits.MAX_SECONDS`).
    """

    pattern: str
    regex: bool = False
    max_matches: int = limits.DEFAULT_GREP_MATCHES
    from_line: int = 0
    max_seconds: float = limits.DEFAULT_GREP_SECONDS
    purpose: str = DEFAULT_PURPOSE
    recipient: str = DEFAULT_RECIPIENT

    def __post_init__(self) -> None:
        _reader(self.purpose, self.recipient)
        if not isinstance(self.regex, bool):
            raise InvalidArgument("regex must be true or false")
        _pattern(self.pattern, self.regex)
        _bounded("max_matches", self.max_matches, 1, limits.MAX_MATCHES)
        _bounded("from_line", self.from_line, 0, limits.MAX_FROM_LINE)
        object.__setattr__(self, "max_seconds", _seconds(self.max_seconds))


@dataclass(frozen=True, slots=True)
class QueryRequest(Selection[dict[str, Any]]):
    """Records of a record artifact: ``where``, ``fields``, ``order``, ``limit``, ``record_range``, ``cursor``.

    The budgets (``max_seconds``, ``max_scan``) are checked on construction;
    the selection itself is checked against the artifact's fields when the
    query runs (unknown fields, ops or value types are
    :class:`~refvault.errors.InvalidQuery`), and is kept as the caller gave it.
    """

    where: object = None
    fields: object = None
    order: object = None
    limit: object = limits.DEFAULT_QUERY_LIMIT
    record_range: object = None
    cursor: object = None
    max_seconds: float = limits.DEFAULT_QUERY_SECONDS
    max_scan: int | None = None
    purpose: str = DEFAULT_PURPOSE
    recipient: str = DEFAULT_RECIPIENT

    def __post_init__(self) -> None:
        _reader(self.purpose, self.recipient)
        seconds = self.max_seconds
        if not (isinstance(seconds, int | float) and 0 <= seconds <= limits.MAX_QUERY_SECONDS):
            raise InvalidArgument(f"max_seconds must be between 0 and {limits.MAX_QUERY_SECONDS:g}")
        scan = self.max_scan
        if scan is not None and (not isinstance(scan, int) or isinstance(scan, bool) or scan < 1):
            raise InvalidArgument("max_scan must be a positive integer (or None)")


@dataclass(frozen=True, slots=True)
class RecordSetRequest(Selection["RecordSet | None"]):
    """What a record artifact's derivative holds; ``build``: make it if it is missing (else None then)."""

    build: bool = True
    purpose: str = DEFAULT_PURPOSE
    recipient: str = DEFAULT_RECIPIENT

    def __post_init__(self) -> None:
        _reader(self.purpose, self.recipient)


# -- listing -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListPage:
    """One page of a scope's artifacts, newest first: ``limit`` artifacts from ``offset``."""

    limit: int = limits.LIST_PAGE
    offset: int = 0

    def __post_init__(self) -> None:
        _bounded("limit", self.limit, 1, limits.MAX_LIST_PAGE)
        _bounded("offset", self.offset, 0, limits.MAX_OFFSET)

    def following(self, total: int) -> int | None:
        """The offset of the next page of a listing of ``total`` artifacts (None after the last page)."""
        return self.offset + self.limit if self.offset + self.limit < total else None


# -- what a record read answers with ---------------------------------------------------------------------

_NUMBER = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT")
_FLOAT = ("FLOAT", "DOUBLE", "REAL", "DECIMAL")
_TEMPORAL = ("DATE", "TIME", "TIMESTAMP", "INTERVAL")


def field_kind(sql_type: str) -> str:
    """``number``, ``string``, ``bool``, ``temporal`` or ``other`` for a DuckDB column type."""
    base = sql_type.split("(", 1)[0].strip().upper()
    if base in _NUMBER or base in _FLOAT:
        return "number"
    if base == "VARCHAR":
        return "string"
    if base == "BOOLEAN":
        return "bool"
    if base.startswith(_TEMPORAL):
        return "temporal"
    return "other"


def shown_name(name: object) -> str:
    """A field name as messages show it: its repr, cut to 80 characters."""
    text = repr(name)
    return text if len(text) <= 80 else text[:77] + "...'"


@dataclass(frozen=True, slots=True)
class RecordSet:
    """What the derivative of a record artifact holds: its fields (name, DuckDB type) and record count."""

    artifact_id: str
    content_hash: str
    source_format: str
    count: int
    fields: tuple[tuple[str, str], ...]
    derived_hash: str

    def kind_of(self, name: str) -> str:
        """``number``, ``string``, ``bool``, ``temporal`` or ``other`` (nested or mixed values)."""
        for field_name, sql_type in self.fields:
            if field_name == name:
                return field_kind(sql_type)
        raise InvalidQuery(f"unknown field {shown_name(name)}; fields are: {self.field_list()}")

    def field_list(self) -> str:
        """The field names, for messages (the first 50, and how many more)."""
        names = [name for name, _ in self.fields]
        listed = ", ".join(names[:50])
        return listed + (f" (+{len(names) - 50} more)" if len(names) > 50 else "")


ReadRequest = WindowRequest | GrepRequest | QueryRequest | RecordSetRequest
"""Every selective read the vault contract's ``read_selection`` runs."""
