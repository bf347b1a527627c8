"""Value types: Scope, Descriptor, Principal, and the rules for capture metadata.

Invariants (each tested in ``tests/test_model.py`` or the conformance suite):

* :class:`Scope` ``(tenant, user, session)`` is the read key. It is validated on
  construction, so a Scope that exists is well formed.
* :class:`Descriptor` has exactly ten top-level fields; all other
  detail nests inside them. It is frozen and its nested mappings are read-only:
  a descriptor is a snapshot of trusted service state that callers cannot edit.
* Media types are canonical (``type/subtype`` lowercased, parameters sorted,
  parameter names lowercased). Anything else is :class:`InvalidMetadata`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal

from refvault.errors import InvalidMetadata
from refvault.ids import check_name, is_artifact_id

__all__ = [
    "DESCRIPTOR_FIELDS",
    "Descriptor",
    "Disclosure",
    "Grant",
    "LABEL_MEANINGS",
    "MAX_DERIVED_FROM",
    "MAX_LABELS",
    "Principal",
    "Scope",
    "canonical_media_type",
    "check_derived_from",
    "check_labels",
    "format_time",
    "parse_time",
    "pick",
    "thaw",
]

Disclosure = Literal["model", "sealed"]
DISCLOSURES: tuple[Disclosure, ...] = ("model", "sealed")

DESCRIPTOR_FIELDS = (
    "artifact_id",
    "content_hash",
    "tool_call_id",
    "schema_version",
    "created_at",
    "source_version",
    "completeness",
    "scope",
    "expires_at",
    "retrieval",
)

RESOLVER = "refvault.read.v1"


@dataclass(frozen=True, slots=True)
class Scope:
    """Who may read: ``tenant``, ``user`` and ``session``, each a validated name.

    Reads succeed only when all three match the scope the artifact was captured in.
    """

    tenant: str
    user: str
    session: str

    def __post_init__(self) -> None:
        check_name("tenant", self.tenant)
        check_name("user", self.user)
        check_name("session", self.session)


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: one tenant and user, and the sessions it may act in.

    ``sessions=None`` allows every session of that user.
    """

    tenant: str
    user: str
    sessions: frozenset[str] | None = None

    def __post_init__(self) -> None:
        check_name("tenant", self.tenant)
        check_name("user", self.user)

    def allows(self, scope: Scope) -> bool:
        """True if this principal may act in ``scope``."""
        return (
            scope.tenant == self.tenant
            and scope.user == self.user
            and (self.sessions is None or scope.session in self.sessions)
        )


@dataclass(frozen=True, slots=True)
class Grant:
    """A sharing grant: the owner scope ``owner`` lets ``to`` read one artifact (:meth:`refvault.Vault.share`).

    ``purposes``/``recipients`` (``None``: any) bound what the grantee may read it for and for whom
    (recipients are glob patterns, e.g. ``model:*``); ``disclosure="sealed"`` makes the artifact
    sealed for the grantee (its tools may resolve it by ``Ref``, its model may not read it).
    A grant never crosses tenants: ``to.tenant == owner.tenant``. Trusted state like a manifest:
    the catalog keeps it with a MAC (:mod:`refvault.catalog.macs`).
    """

    grant_id: str
    owner: Scope
    artifact_id: str
    to: Principal
    created_at: datetime
    purposes: frozenset[str] | None = None
    recipients: frozenset[str] | None = None
    disclosure: Disclosure = "model"
    expires_at: datetime | None = None
    revoked_at: datetime | None = None

    @property
    def tenant(self) -> str:
        return self.owner.tenant

    def active(self, now: datetime) -> bool:
        """Not revoked and not past ``expires_at`` at ``now``."""
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (sets as sorted lists, times as :func:`format_time`)."""
        return {
            "grant_id": self.grant_id,
            "tenant": self.owner.tenant,
            "owner": {"user": self.owner.user, "session": self.owner.session},
            "artifact_id": self.artifact_id,
            "to": {
                "user": self.to.user,
                "sessions": None if self.to.sessions is None else sorted(self.to.sessions),
            },
            "purposes": None if self.purposes is None else sorted(self.purposes),
            "recipients": None if self.recipients is None else sorted(self.recipients),
            "disclosure": self.disclosure,
            "created_at": format_time(self.created_at),
            "expires_at": None if self.expires_at is None else format_time(self.expires_at),
            "revoked_at": None if self.revoked_at is None else format_time(self.revoked_at),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Grant:
        """Rebuild a grant from :meth:`to_dict` output (e.g. received over HTTP)."""
        try:
            tenant = data["tenant"]
            to, owner = data["to"], data["owner"]

            def names(value: Any) -> frozenset[str] | None:
                return None if value is None else frozenset(str(v) for v in value)

            def moment(value: Any) -> datetime | None:
                return None if value is None else parse_time(value)

            return cls(
                grant_id=str(data["grant_id"]),
                owner=Scope(tenant, owner["user"], owner["session"]),
                artifact_id=str(data["artifact_id"]),
                to=Principal(tenant, to["user"], names(to["sessions"])),
                purposes=names(data["purposes"]),
                recipients=names(data["recipients"]),
                disclosure=checked_disclosure(data["disclosure"]),
                created_at=parse_time(data["created_at"]),
                expires_at=moment(data["expires_at"]),
                revoked_at=moment(data["revoked_at"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidMetadata(f"malformed grant ({type(exc).__name__})") from None


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """A frozen value (read-only mappings, tuples) as plain JSON-able data (dicts, lists)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


def pick(obj: object, names: tuple[str, ...]) -> dict[str, Any]:
    """``{name: obj.name}`` for each of ``names``, in that order: the JSON projection of a value's plain fields."""
    return {name: getattr(obj, name) for name in names}


def format_time(moment: datetime) -> str:
    """ISO 8601 in UTC with a ``Z`` suffix and microseconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    """Inverse of :func:`format_time` (accepts any ISO 8601 with an offset)."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise InvalidMetadata("timestamps must carry a UTC offset")
    return moment.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Descriptor:
    """The protected descriptor of one artifact: exactly ten top-level fields.

    ``scope`` holds tenant, user, session and the provenance-only ``run_id``;
    ``retrieval`` holds media type, size, filename, disclosure and the selectors
    the read API supports; ``completeness`` holds capture status, coverage,
    record count and omissions. Nested values are read-only.
    """

    artifact_id: str
    content_hash: str
    tool_call_id: str | None
    schema_version: str | None
    created_at: datetime
    source_version: Mapping[str, Any]
    completeness: Mapping[str, Any]
    scope: Mapping[str, Any]
    expires_at: datetime | None
    retrieval: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("source_version", "completeness", "scope", "retrieval"):
            object.__setattr__(self, name, _freeze(getattr(self, name)))

    @property
    def media_type(self) -> str:
        return str(self.retrieval["media_type"])

    @property
    def size(self) -> int:
        return int(self.retrieval["size"])

    @property
    def filename(self) -> str | None:
        name = self.retrieval.get("filename")
        return None if name is None else str(name)

    @property
    def disclosure(self) -> Disclosure:
        return "sealed" if self.retrieval["disclosure"] == "sealed" else "model"

    @property
    def labels(self) -> frozenset[str]:
        """The artifact's labels (``retrieval["labels"]``; none on a descriptor that lists none)."""
        labels = self.retrieval.get("labels")
        return frozenset(labels) if isinstance(labels, tuple) else frozenset()

    @property
    def derived_from(self) -> tuple[str, ...]:
        """The ids of the artifacts this one was derived from (``retrieval["derived_from"]``; often none)."""
        ids = self.retrieval.get("derived_from")
        return ids if isinstance(ids, tuple) else ()

    @property
    def owner(self) -> Scope:
        """The scope whose reads may see this artifact."""
        return Scope(self.scope["tenant"], self.scope["user"], self.scope["session"])

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with exactly the ten top-level fields."""
        return {
            "artifact_id": self.artifact_id,
            "content_hash": self.content_hash,
            "tool_call_id": self.tool_call_id,
            "schema_version": self.schema_version,
            "created_at": format_time(self.created_at),
            "source_version": thaw(self.source_version),
            "completeness": thaw(self.completeness),
            "scope": thaw(self.scope),
            "expires_at": None if self.expires_at is None else format_time(self.expires_at),
            "retrieval": thaw(self.retrieval),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Descriptor:
        """Rebuild a descriptor from :meth:`to_dict` output (e.g. received over HTTP)."""
        if not isinstance(data, Mapping) or set(data) != set(DESCRIPTOR_FIELDS):
            raise InvalidMetadata("a descriptor has exactly the ten fields of DESCRIPTOR_FIELDS")
        try:
            return cls._from_fields(data)
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise InvalidMetadata(f"malformed descriptor ({type(exc).__name__})") from None

    @classmethod
    def _from_fields(cls, data: Mapping[str, Any]) -> Descriptor:
        expires = data["expires_at"]
        retrieval = data["retrieval"]
        if isinstance(retrieval, Mapping):  # labels and provenance as a capture records them (JSON lists), or refused
            for name, check in (("labels", check_labels), ("derived_from", check_derived_from)):
                value = retrieval.get(name)
                if value is not None and not isinstance(value, list | tuple):
                    raise InvalidMetadata(f"retrieval.{name} must be a list")
                check(value)
        return cls(
            artifact_id=data["artifact_id"],
            content_hash=data["content_hash"],
            tool_call_id=data["tool_call_id"],
            schema_version=data["schema_version"],
            created_at=parse_time(data["created_at"]),
            source_version=data["source_version"],
            completeness=data["completeness"],
            scope=data["scope"],
            expires_at=None if expires is None else parse_time(expires),
            retrieval=data["retrieval"],
        )


_MT_NAME = r"[A-Za-z0-9!#$&^_.+\-]{1,127}"
_MEDIA_TYPE = re.compile(rf"({_MT_NAME})/({_MT_NAME})")
_PARAM = re.compile(rf"({_MT_NAME})=(\"[^\"\\\x00-\x1f]*\"|{_MT_NAME})")


def canonical_media_type(value: object) -> str:
    """Return the canonical form of a media type, or raise :class:`InvalidMetadata`.

    ``Text/Plain; Charset=UTF-8`` becomes ``text/plain; charset=UTF-8``; parameters
    are sorted by name so equal types compare equal.
    """
    if not isinstance(value, str) or len(value) > 255:
        raise InvalidMetadata("media type must be a string of at most 255 characters, like 'text/plain'")
    main, *params = [part.strip() for part in value.split(";")]
    match = _MEDIA_TYPE.fullmatch(main)
    if match is None:
        raise InvalidMetadata("media type must look like 'type/subtype', e.g. 'application/json'")
    canonical = f"{match.group(1).lower()}/{match.group(2).lower()}"
    parsed: dict[str, str] = {}
    for param in params:
        pmatch = _PARAM.fullmatch(param)
        if pmatch is None:
            raise InvalidMetadata("media type parameters must look like 'name=value'")
        parsed[pmatch.group(1).lower()] = pmatch.group(2)
    return "; ".join([canonical, *(f"{k}={parsed[k]}" for k in sorted(parsed))])


RECORD_MEDIA_TYPES = (
    "application/x-ndjson",
    "application/json",
    "text/csv",
    "application/vnd.apache.parquet",
)

_TEXT_APPLICATION = frozenset(
    {
        "application/json",
        "application/x-ndjson",
        "application/jsonl",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/javascript",
        "application/sql",
        "application/x-sh",
    }
)


def base_type(media_type: str) -> str:
    """``type/subtype`` without parameters (stored media types are canonical, so already lowercased)."""
    return media_type.split(";", 1)[0].strip()


def is_text(media_type: str) -> bool:
    """True for media types whose bytes are text (read as UTF-8)."""
    main = base_type(media_type)
    return main.startswith("text/") or main in _TEXT_APPLICATION or main.endswith(("+json", "+xml", "+yaml"))


def is_records(media_type: str) -> bool:
    """True for the media types a record query may apply to (a JSON document must still hold an array of objects)."""
    return base_type(media_type) in RECORD_MEDIA_TYPES


def selectors_for(media_type: str) -> list[str]:
    """The selective reads the vault serves for this media type.

    Only what exists is listed: byte ranges for every artifact (``read_range``,
    HTTP ``Range``); line windows and grep for text; record queries for record
    media types. The model's ``read_artifact`` windows text only: binary reaches
    a model through ``load_artifacts`` (images) or a tool's ``Ref``, never as base64.
    """
    selectors = ["byte_range"]
    if is_text(media_type):
        selectors += ["lines", "grep"]
    if is_records(media_type):
        selectors.append("records")
    return selectors


MAX_JSON_DEPTH = 32


def checked_json(name: str, value: object, *, limit: int = 64 * 1024) -> dict[str, Any]:
    """Validate a caller-supplied JSON object field (string keys, bounded size, at most 32 levels deep).

    The depth bound keeps every later consumer of the stored value (JSON
    encoders, response models, other languages' parsers) far from its
    recursion limit, so a stored manifest can always be described again.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidMetadata(f"{name} must be a JSON object (a dict with string keys)")
    try:
        text = json.dumps(value, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidMetadata(f"{name} must be JSON-serialisable: {type(exc).__name__}") from None
    if len(text) > limit:
        raise InvalidMetadata(f"{name} is {len(text)} bytes as JSON; the limit is {limit}")
    loaded: dict[str, Any] = json.loads(text)
    if _depth(loaded) > MAX_JSON_DEPTH:
        raise InvalidMetadata(f"{name} nests deeper than {MAX_JSON_DEPTH} levels")
    return loaded


def _depth(value: object) -> int:
    """How many levels of objects and arrays ``value`` nests (iteratively: no recursion limit to hit)."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


CAPTURE_STATUSES = ("complete", "partial", "unknown")


def checked_completeness(value: object) -> dict[str, Any]:
    """Validate ``completeness``: a status, optional coverage/records, and a list of omissions.

    The default status is ``unknown``: refvault does not claim a capture is
    complete on the caller's behalf. ``complete`` with omissions is refused.
    """
    data = checked_json("completeness", value)
    status = data.setdefault("status", "unknown")
    if status not in CAPTURE_STATUSES:
        raise InvalidMetadata(f"completeness.status must be one of {', '.join(CAPTURE_STATUSES)}")
    omissions = data.setdefault("omissions", [])
    if not isinstance(omissions, list):
        raise InvalidMetadata("completeness.omissions must be a list")
    if status == "complete" and omissions:
        raise InvalidMetadata("completeness.status is 'complete' but omissions are listed; use 'partial'")
    records = data.get("records")
    if records is not None and (not isinstance(records, int) or isinstance(records, bool) or records < 0):
        raise InvalidMetadata("completeness.records must be a non-negative integer")
    return data


_FORBIDDEN_IN_FILENAME = re.compile(r"[\x00-\x1f\x7f/\\]")


def checked_filename(value: object) -> str | None:
    """A display filename: metadata only, never used to build a path."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > 255:
        raise InvalidMetadata("filename must be 1-255 characters")
    if value in {".", ".."} or _FORBIDDEN_IN_FILENAME.search(value):
        raise InvalidMetadata("filename must be a base name without '/', '\\' or control characters")
    return value


_LABEL = re.compile(r"[\x20-\x7e]{1,256}")


def checked_label(name: str, value: object) -> str | None:
    """``tool_call_id``, ``run_id`` or ``schema_version``: printable ASCII, 1-256 characters."""
    if value is None:
        return None
    if not isinstance(value, str) or _LABEL.fullmatch(value) is None:
        raise InvalidMetadata(f"{name} must be 1-256 printable ASCII characters")
    return value


LABEL_MEANINGS: Mapping[str, str] = MappingProxyType(
    {
        "pii": "personal data about a person (names, contact details, identifiers)",
        "secret": "credentials or key material: never for a model",
        "confidential": "business-confidential content: only for the purposes a policy allows",
    }
)
"""The labels with a built-in meaning. Any other well-formed name is allowed too; a policy gives it meaning."""
MAX_LABELS = 32
MAX_DERIVED_FROM = 256
_LABEL_NAME = re.compile(r"[a-z0-9][a-z0-9._:-]{0,63}")


def check_labels(value: object) -> frozenset[str]:
    """Validate an artifact's labels: an iterable of names (not one string), at most :data:`MAX_LABELS` of them.

    A name is lowercase ``[a-z0-9][a-z0-9._:-]{0,63}``. Built-in meanings are those of
    :data:`LABEL_MEANINGS`; any other name is allowed. ``None`` is no labels. A bad value is
    :class:`InvalidMetadata` naming the rule, never repeating the value (it may be anything).
    """
    if value is None:
        return frozenset()
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidMetadata("labels must be a list or set of label names, e.g. ['pii']")
    names: set[str] = set()
    for name in value:
        if not isinstance(name, str) or _LABEL_NAME.fullmatch(name) is None:
            raise InvalidMetadata(
                "a label name is 1-64 characters from a-z 0-9 . _ : -, starting with a lowercase letter or digit"
            )
        names.add(name)
        if len(names) > MAX_LABELS:
            raise InvalidMetadata(f"an artifact carries at most {MAX_LABELS} labels")
    return frozenset(names)


def check_derived_from(value: object) -> tuple[str, ...]:
    """Validate ``derived_from``: artifact ids (at most :data:`MAX_DERIVED_FROM`), kept in order without repeats.

    Provenance only: the ids are not looked up (a source may be another scope's, or deleted since).
    """
    if value is None:
        return ()
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidMetadata("derived_from must be a list of artifact ids")
    ids: list[str] = []
    for item in value:
        if not is_artifact_id(item):
            raise InvalidMetadata("derived_from must hold artifact ids (art_ and 28 base32 characters; older ids: 26)")
        if item not in ids:
            ids.append(item)
        if len(ids) > MAX_DERIVED_FROM:
            raise InvalidMetadata(f"derived_from names at most {MAX_DERIVED_FROM} artifacts")
    return tuple(ids)


def checked_disclosure(value: object) -> Disclosure:
    if value not in DISCLOSURES:
        raise InvalidMetadata("disclosure must be 'model' or 'sealed'")
    return "sealed" if value == "sealed" else "model"


def checked_expiry(value: object, now: datetime) -> datetime | None:
    """``expires_at``: an aware datetime in the future, or None for no deadline."""
    if value is None:
        return None
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidMetadata("expires_at must be a timezone-aware datetime (or None)")
    try:
        moment = value.astimezone(UTC)
    except OverflowError:
        raise InvalidMetadata("expires_at is out of range") from None
    if moment <= now:
        raise InvalidMetadata("expires_at is not in the future")
    return moment
