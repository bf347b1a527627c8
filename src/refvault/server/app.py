"""The HTTP API v1: a FastAPI app over one :class:`~refvault.Vault`.

Invariants, where each is enforced, and the tests that hold them
(``tests/test_server.py``, ``tests/test_server_auth.py``, ``tests/test_server_schema.py``):

* **Every request is authenticated first.** ``Authorization: Bearer rvk_…``
  is checked (:func:`refvault.keys.authenticate`, through the process's
  :class:`~refvault.keys.KeyCache`: a revocation made elsewhere takes effect
  within ``auth_cache_seconds``, one made through this app's vault at once)
  before anything else is looked at; every failure is the same 401 body. Tenant and user come from the
  key; ``Refvault-Tenant``/``Refvault-User`` may only repeat them (else 403),
  and ``Refvault-Session`` must be allowed by the key (else 403).
* **Absent and not-yours look the same.** A malformed id, an absent one and
  another scope's artifact are all 404 ``not-found`` bodies that differ only
  by the (well-formed) id the caller sent.
* **Errors are problems.** Every error response is ``application/problem+json``
  with ``type``, ``title``, ``status``, ``detail`` and ``error`` (the
  :class:`~refvault.errors.RefvaultError` class name). Details are the errors'
  own messages, which never contain artifact content; request values
  (headers, metadata, ids that cannot be ids, validation inputs) are never
  echoed, and a traceback never leaves the process.
* **Streaming both ways, bounded memory.** A capture's body is fed to
  ``Vault.put`` chunk by chunk from a worker thread (never held whole);
  ``max_body`` is enforced while streaming (413, nothing published). Content
  is served in verified 1 MiB pieces; a verification failure before the first
  byte is a 500 problem, after it the connection is aborted so the client
  never receives a complete-looking body.
* **The event loop never blocks.** Every vault and catalog call runs in a
  worker thread, one hop per request where possible (a recently checked API key
  is answered from memory). Reads take at most :data:`READ_THREADS` threads
  per process, which the catalog's connection pool covers (no connection is
  opened per request); captures run in threads of their own (below).
* **One tenant cannot stall the others.** Every wait for a piece of a request
  body is bounded (``body_timeout``: 408, ``Connection: close``, nothing
  published), and so is the wait for a request's headers (``refvault serve``'s
  protocol). A key, and a tenant, may have ``uploads_per_key`` and
  ``uploads_per_tenant`` request bodies in progress (captures, query bodies,
  ``/mcp`` messages), counted on the app after authentication; past that, 429
  ``too-many-requests`` with ``Retry-After`` before a byte is read. Captures, whose
  threads wait on the network, take threads from their own limiter sized
  ``CAPTURE_TENANTS`` (8) times ``uploads_per_tenant``: a tenant fills at most its
  cap of them, so eight tenants must each fill theirs before another tenant's
  capture waits; reads and ``/mcp`` never share it. :mod:`refvault.server.limits`
  has the details; ``tests/security/test_server_stalls.py`` attacks a live server.
* **One answer per request, whichever path serves it.** ``GET …/content``
  by a key checked moments ago (in the :class:`~refvault.keys.KeyCache`) with
  an allowed session is served by ``_FastContent`` before FastAPI's routing and
  dependency machinery (the hot read: 4 KiB GETs cost about a third less CPU);
  it sends what the route would, built by the same functions, and leaves every
  other request, including every failing check, to the route
  (``tests/test_server_fast.py`` compares the two byte for byte).
* **The schema tells the truth.** Every response of every operation is
  documented (``default`` is the problem schema), so schemathesis's
  conformance checks hold; and every limit a request must respect is stated,
  from the constant that enforces it (``QueryRequest``, ``CaptureMetadata``,
  the read parameters), so a request valid by the schema is accepted, apart
  from what a schema cannot say (one parameter against another, the clock, the
  artifact's own fields, server-issued cursors), which the descriptions say
  (``tests/test_server_schema.py``, ``tests/security/test_server_http_conformance.py``).
  A 405 lists every method of its path in ``Allow`` (:func:`allowed_methods`).
* **Artifact bytes stay inert in a browser.** Every 200/206 of ``GET …/content``
  carries ``X-Content-Type-Options: nosniff`` and a sandboxing
  ``Content-Security-Policy``; every media type not known to be passive (HTML,
  SVG, XML, JavaScript, PDF, unknown types) is ``Content-Disposition:
  attachment`` (:func:`content_safety_headers`).
* **``/mcp`` answers only its own names.** ``Host`` and ``Origin`` are checked
  against an allow-list there (DNS rebinding; :mod:`refvault.server.mcp`); the
  API under ``/v1`` does not check ``Host``: it needs a bearer key, which a
  rebinding page cannot make a browser send.
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations at runtime,
# and they refer to names local to ``_router``.
import asyncio
import inspect
import json
import os
import re
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from http import HTTPMethod
from importlib.util import find_spec
from typing import Annotated, Any, Literal, TypeVar

import anyio.from_thread
import anyio.to_thread
from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute, Match, Route

from refvault import __version__
from refvault.errors import (
    Expired,
    Forbidden,
    IdempotencyConflict,
    IntegrityError,
    InvalidArgument,
    InvalidCursor,
    InvalidId,
    InvalidMetadata,
    InvalidQuery,
    InvalidScope,
    NotFound,
    RefvaultError,
    RequestTimeout,
    SealedArtifact,
    StorageError,
    TooLarge,
    TooManyRequests,
    Unauthenticated,
    UnsupportedRead,
)
from refvault.ids import is_artifact_id
from refvault.keys import DEFAULT_CACHE_SECONDS, KeyCache
from refvault.model import (  # the private patterns: the schema states the checks that use them
    _FORBIDDEN_IN_FILENAME,
    _LABEL,
    _MT_NAME,
    CAPTURE_STATUSES,
    DISCLOSURES,
    RECORD_MEDIA_TYPES,
    Descriptor,
    Principal,
    Scope,
    base_type,
    parse_time,
)
from refvault.read import grep, query, window
from refvault.read._access import readable
from refvault.read.records import (
    MAX_DEPTH,
    MAX_LEAVES,
    MAX_LIMIT,
    MAX_ORDER,
    MAX_QUERY_SECONDS,
    RecordSet,
    derive,
    derived_records,
)
from refvault.read.windows import MAX_CHARS, MAX_MATCHES, MAX_PATTERN, MAX_SECONDS
from refvault.server import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_MAX_BODY,
    DEFAULT_UPLOADS_PER_KEY,
    DEFAULT_UPLOADS_PER_TENANT,
)
from refvault.server.limits import (
    BODY_TIMEOUT_ENVVAR,
    HEADER_TIMEOUT_ENVVAR,
    UPLOADS_PER_KEY_ENVVAR,
    UPLOADS_PER_TENANT_ENVVAR,
    BodyIdleTimeout,
    Uploads,
    checked_seconds,
    count_from_env,
    key_id,
    seconds_from_env,
)
from refvault.vault.vault import Vault
from refvault.vault.verified import ArtifactStream

__all__ = ["DEFAULT_MAX_BODY", "MAX_JSON_BODY", "PROBLEM_MEDIA_TYPE", "app_from_env", "create_app"]

T = TypeVar("T")

MAX_JSON_BODY = 1 << 20
PROBLEM_MEDIA_TYPE = "application/problem+json"
PIECE = 1 << 20  # bytes read (and verified) per threadpool call when serving content
READ_THREADS = 20  # worker threads per process (and event loop) for everything but captures
MAX_LIST = 1000
PROBLEM_PREFIX = "urn:refvault:problem:"
UNAUTHENTICATED_DETAIL = "a valid API key is required: send 'Authorization: Bearer rvk_...'"

# Environment read by ``app_from_env`` (set by ``refvault serve`` for each worker process).
MAX_BODY_ENVVAR = "REFVAULT_MAX_BODY"
AUTH_CACHE_ENVVAR = "REFVAULT_AUTH_CACHE_SECONDS"
ALLOWED_HOSTS_ENVVAR = "REFVAULT_ALLOWED_HOSTS"  # comma-separated, for /mcp's Host check (refvault.server.mcp)
ALLOWED_ORIGINS_ENVVAR = "REFVAULT_ALLOWED_ORIGINS"  # comma-separated, for /mcp's Origin check

_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._:@+\-]{0,127}$"

# -- problems --------------------------------------------------------------------------------

# Most specific first: the first class an error is an instance of decides.
_PROBLEMS: tuple[tuple[type[RefvaultError], int, str, str], ...] = (
    (Unauthenticated, 401, "unauthenticated", "Unauthenticated"),
    (Forbidden, 403, "scope-not-allowed", "Scope not allowed"),
    (UnsupportedRead, 422, "unsupported-read", "Unsupported read"),
    (InvalidCursor, 400, "invalid-cursor", "Invalid cursor"),
    (InvalidQuery, 400, "invalid-query", "Invalid query"),
    (InvalidMetadata, 400, "invalid-metadata", "Invalid metadata"),
    (InvalidScope, 400, "invalid-scope", "Invalid scope"),
    (InvalidId, 400, "invalid-id", "Invalid id"),
    (InvalidArgument, 400, "invalid-argument", "Invalid argument"),
    (NotFound, 404, "not-found", "Not found"),
    (Expired, 410, "expired", "Expired"),
    (SealedArtifact, 403, "sealed", "Sealed artifact"),
    (IdempotencyConflict, 409, "idempotency-conflict", "Idempotency conflict"),
    (TooLarge, 413, "too-large", "Too large"),
    (TooManyRequests, 429, "too-many-requests", "Too many requests"),
    (RequestTimeout, 408, "request-timeout", "Request timeout"),
    (IntegrityError, 500, "integrity-error", "Integrity error"),
    (StorageError, 503, "storage-unavailable", "Storage unavailable"),
)


class Problem(BaseModel):
    """An error, as ``application/problem+json`` (RFC 9457) plus the refvault error class name."""

    type: str
    title: str
    status: int
    detail: str
    error: str
    reason: str | None = None


def problem(
    status: int,
    slug: str,
    title: str,
    detail: str,
    error: str,
    *,
    reason: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """A problem response; ``detail`` must never hold content or request values."""
    body: dict[str, Any] = {
        "type": PROBLEM_PREFIX + slug,
        "title": title,
        "status": status,
        "detail": detail,
        "error": error,
    }
    if reason is not None:
        body["reason"] = reason
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_MEDIA_TYPE)


def problem_for(exc: RefvaultError) -> JSONResponse:
    """The problem response of a refvault error (unlisted classes are a 500 ``internal-error``)."""
    entry = next((entry for entry in _PROBLEMS if isinstance(exc, entry[0])), None)
    if entry is None:
        return _internal_error()
    _, status, slug, title = entry
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if isinstance(exc, TooManyRequests):
        headers = {"Retry-After": str(exc.retry_after)}
    detail = UNAUTHENTICATED_DETAIL if status == 401 else _message(exc)
    reason = exc.reason if isinstance(exc, InvalidCursor) else None
    return problem(status, slug, title, detail, _public_name(exc), reason=reason, headers=headers)


def _public_name(exc: RefvaultError) -> str:
    """The name of the :mod:`refvault.errors` class ``exc`` is (or derives from), which clients map back."""
    cls = next(c for c in type(exc).__mro__ if c.__module__ == RefvaultError.__module__)
    return cls.__name__


def _message(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def _internal_error() -> JSONResponse:
    return problem(500, "internal-error", "Internal error", "the server failed to handle this request", "InternalError")


class BodyTooLarge(TooLarge):
    """A capture's body went over the server's ``max_body``."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the request body is larger than this server accepts ({limit} bytes)")


# -- response models (for the schema; responses are built directly) ---------------------------


class DescriptorModel(BaseModel):
    """The ten top-level fields of a descriptor (``Descriptor.to_dict``)."""

    model_config = ConfigDict(title="Descriptor")

    artifact_id: str
    content_hash: str
    tool_call_id: str | None
    schema_version: str | None
    created_at: str
    source_version: dict[str, Any]
    completeness: dict[str, Any]
    scope: dict[str, Any]
    expires_at: str | None
    retrieval: dict[str, Any]


class ArtifactList(BaseModel):
    """One page of a scope's artifacts, newest first; ``next_offset`` is null on the last page."""

    items: list[DescriptorModel]
    next_offset: int | None


class RecordField(BaseModel):
    """One field of a record artifact: its name, DuckDB type and the kind of value a query compares it as."""

    name: str
    type: str
    kind: str


class RecordSetModel(BaseModel):
    """What a record artifact holds (``refvault.read.derive``): its record count and fields, in column order."""

    model_config = ConfigDict(title="RecordSet")

    artifact_id: str
    content_hash: str
    source_format: str
    count: int
    fields: list[RecordField]
    derived_hash: str


def record_set_json(records: RecordSet) -> dict[str, Any]:
    """The JSON form of a :class:`~refvault.read.RecordSet` (``refvault.client`` reads it back)."""
    return {
        "artifact_id": records.artifact_id,
        "content_hash": records.content_hash,
        "source_format": records.source_format,
        "count": records.count,
        "fields": [
            {"name": name, "type": sql_type, "kind": records.kind_of(name)} for name, sql_type in records.fields
        ],
        "derived_hash": records.derived_hash,
    }


class Verification(BaseModel):
    """Every byte was read back and hashed, and matched ``content_hash``."""

    artifact_id: str
    ok: bool
    content_hash: str
    size: int


class Health(BaseModel):
    status: str


# -- what requests may hold (the schema's statement of each limit the server enforces) ---------------
#
# These models are documentation: requests are checked by the functions that act on them (``Vault.put``
# with ``refvault.model``'s checks, ``refvault.read``), and every bound below is those functions' own
# constant, so the schema cannot drift from them (``tests/security/test_server_http_conformance.py``
# tries each bound and one past it). What a schema cannot say (one field compared with another, a
# clock, the artifact's own fields) is in the descriptions.


class OrderKey(BaseModel):
    """One sort key: a field of the artifact (not twice in one ``order``) and a direction."""

    model_config = ConfigDict(extra="forbid")

    field: str
    direction: Literal["asc", "desc"] = "asc"


class QueryRequest(BaseModel):
    """The arguments of :func:`refvault.read.query`; every field is optional and null means its default."""

    model_config = ConfigDict(extra="forbid")

    where: dict[str, Any] | None = Field(
        None,
        description=f"A selector over the artifact's fields: a condition, or all/any/not of selectors, at most"
        f" {MAX_DEPTH} levels deep and {MAX_LEAVES} conditions; an unknown field is a 400 invalid-query.",
    )
    fields: Annotated[list[str], Field(min_length=1, json_schema_extra={"uniqueItems": True})] | None = Field(
        None, description="The fields to return (the artifact's own); null: every field."
    )
    order: Annotated[list[OrderKey], Field(max_length=MAX_ORDER)] | None = None
    limit: Annotated[int, Field(ge=1)] | None = Field(
        None, description=f"Records per page; larger values return at most {MAX_LIMIT}."
    )
    record_range: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=2, max_length=2)] | None = Field(
        None, description="[start, end): the records considered, with start <= end."
    )
    cursor: str | None = Field(None, description="The next_cursor of an earlier page of the same query, unchanged.")
    max_seconds: Annotated[float, Field(ge=0, le=MAX_QUERY_SECONDS)] | None = None
    max_scan: Annotated[int, Field(ge=1)] | None = None


_QUERY_FIELDS = tuple(QueryRequest.model_fields)
_LABEL_PATTERN = f"^{_LABEL.pattern}$"  # tool_call_id, run_id, schema_version
_FILENAME_PATTERN = "^" + _FORBIDDEN_IN_FILENAME.pattern.replace("[", "[^", 1) + "+$"
_MEDIA_TYPE_PATTERN = rf'^ *{_MT_NAME}/{_MT_NAME} *(; *{_MT_NAME}=("[^"\\\x00-\x1f;]*"|{_MT_NAME}) *)*$'
_NOT_DOTS: dict[str, Any] = {"not": {"enum": [".", ".."]}}
_TIMESTAMP = Field(max_length=64, json_schema_extra={"format": "date-time"})


class Completeness(BaseModel):
    """How much of the source a capture holds (``refvault.model.checked_completeness``); other keys are kept."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={  # "complete" lists no omissions
            "if": {"properties": {"status": {"const": "complete"}}, "required": ["status"]},
            "then": {"properties": {"omissions": {"maxItems": 0}}},
        },
    )

    status: str = Field("unknown", json_schema_extra={"enum": list(CAPTURE_STATUSES)})
    omissions: list[Any] = Field(default_factory=list)
    records: Annotated[int, Field(ge=0)] | None = None


class CaptureMetadata(BaseModel):
    """``Refvault-Metadata``: a JSON object in ASCII (escape other characters as ``\\uXXXX``); null means the default.

    ``expires_at`` must be in the future and ``created_at`` not; ``source_version`` and ``completeness`` hold at
    most 64 KiB of JSON, nested at most 32 levels.
    """

    model_config = ConfigDict(extra="forbid")

    filename: (
        Annotated[str, Field(min_length=1, max_length=255, pattern=_FILENAME_PATTERN, json_schema_extra=_NOT_DOTS)]
        | None
    ) = None
    tool_call_id: Annotated[str, Field(pattern=_LABEL_PATTERN)] | None = None
    run_id: Annotated[str, Field(pattern=_LABEL_PATTERN)] | None = None
    schema_version: Annotated[str, Field(pattern=_LABEL_PATTERN)] | None = None
    disclosure: Annotated[str, Field(json_schema_extra={"enum": list(DISCLOSURES)})] | None = None
    expires_at: Annotated[str, _TIMESTAMP] | None = None
    created_at: Annotated[str, _TIMESTAMP] | None = None
    source_version: dict[str, Any] | None = None
    completeness: Completeness | None = None
    media_type: Annotated[str, Field(max_length=255, pattern=_MEDIA_TYPE_PATTERN)] | None = Field(
        None, description="Overrides Content-Type."
    )


_METADATA_FIELDS = tuple(CaptureMetadata.model_fields)
_IDEMPOTENCY_PARAMETER: dict[str, Any] = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "A retry with the same key in the same scope returns the first capture (409 if its bytes differ).",
    # a label (refvault.model.checked_label) as HTTP carries it: a header value loses spaces at either end
    "schema": {"type": "string", "pattern": r"^[\x21-\x7e]([\x20-\x7e]{0,254}[\x21-\x7e])?$"},
}
_METADATA_PARAMETER: dict[str, Any] = {
    "name": "Refvault-Metadata",
    "in": "header",
    "required": False,
    "description": inspect.cleandoc(CaptureMetadata.__doc__ or ""),
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CaptureMetadata"}}},
}


_OPEN_OBJECT: dict[str, Any] = {"type": "object", "additionalProperties": True}
_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
_PROBLEM_RESPONSE: dict[str, Any] = {
    "description": "A problem",
    "content": {PROBLEM_MEDIA_TYPE: {"schema": _PROBLEM_REF}},
}


_NOT_TEXT: dict[str, Any] = {
    **_PROBLEM_RESPONSE,
    "description": "unsupported-read: the artifact is not text (text/*, JSON, XML, YAML...): it is used by reference",
}
_NOT_RECORDS: dict[str, Any] = {
    **_PROBLEM_RESPONSE,
    "description": f"unsupported-read: the artifact is not records ({', '.join(RECORD_MEDIA_TYPES)}), or its bytes"
    " do not parse as records",
}


def _open_json(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _OPEN_OBJECT}}}


# -- request parsing ------------------------------------------------------------------------


def session_scope(principal: Principal, session: str) -> Scope:
    """The scope a key acts in: its own tenant and user, and the ``Refvault-Session`` it names.

    :class:`~refvault.errors.InvalidArgument` for a malformed session name,
    :class:`~refvault.errors.Forbidden` for a session the key does not allow.
    Every surface (the API's routes, its content fast path, ``/mcp``) decides
    scope here and nowhere else.
    """
    try:
        scope = Scope(principal.tenant, principal.user, session)
    except InvalidScope:
        raise InvalidArgument("the Refvault-Session header must be a valid session name") from None
    if not principal.allows(scope):
        raise Forbidden("this API key may not act in the session named by Refvault-Session")
    return scope


def _checked_id(artifact_id: str) -> str:
    """The id if it is well formed; else the same NotFound as an absent id (without echoing the string)."""
    if not is_artifact_id(artifact_id):
        raise NotFound("(not an artifact id)")
    return artifact_id


def _reject_constant(name: str) -> Any:
    raise ValueError("non-finite number")


def _loads(text: str | bytes, what: str, error: type[InvalidArgument]) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise error(f"{what} is not valid JSON") from None


def capture_options(metadata: str | None, content_type: str | None) -> dict[str, Any]:
    """``Vault.put`` keyword arguments from the ``Refvault-Metadata`` header and ``Content-Type``."""
    options: dict[str, Any] = {"media_type": content_type or "application/octet-stream"}
    if metadata is None:
        return options
    if not metadata.isascii():
        raise InvalidMetadata("the Refvault-Metadata header must be ASCII JSON (escape other characters as \\uXXXX)")
    fields = _loads(metadata, "the Refvault-Metadata header", InvalidMetadata)
    if not isinstance(fields, dict):
        raise InvalidMetadata("the Refvault-Metadata header must be a JSON object")
    if not set(fields) <= set(_METADATA_FIELDS):
        raise InvalidMetadata(f"Refvault-Metadata accepts only the fields {', '.join(_METADATA_FIELDS)}")
    for name, value in fields.items():
        if value is None and name in ("media_type", "disclosure"):
            continue  # null means the default
        if name in ("expires_at", "created_at") and value is not None:
            value = _timestamp(name, value)
        if name == "completeness" and isinstance(value, dict) and "records" in value:
            value = {**value, "records": _whole(value["records"])}
        options[name] = value
    return options


def _whole(value: object) -> object:
    """``2.0`` as ``2``: JSON Schema's ``integer`` includes integral numbers written with a fraction.

    Every other value is returned unchanged (``2.5`` stays a float, which the read then refuses).
    """
    return int(value) if isinstance(value, float) and value.is_integer() else value


def declared_length(value: str | None) -> int | None:
    """A ``Content-Length`` value as a number (capped at 2**63); None if absent or not ASCII digits."""
    if value is None or not (value.isascii() and value.isdigit()):
        return None
    return int(value) if len(value) <= 19 else 2**63  # int() refuses very long digit strings


def _timestamp(name: str, value: object) -> Any:
    if not isinstance(value, str) or len(value) > 64:
        raise InvalidMetadata(f"{name} must be an ISO 8601 timestamp with a UTC offset")
    try:
        return parse_time(value)
    except (ValueError, OverflowError):
        raise InvalidMetadata(f"{name} must be an ISO 8601 timestamp with a UTC offset") from None


def _pair(text: str | None) -> tuple[int, int | None] | None:
    if text is None:
        return None
    first, _, second = text.partition(",")
    return int(first), (int(second) if second else None)


def query_arguments(body: bytes) -> dict[str, Any]:
    """The keyword arguments of a query request body (``{}`` when empty); null values mean the default."""
    if not body.strip():
        return {}
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidQuery("the query body must be UTF-8 JSON") from None
    arguments = _loads(text, "the query body", InvalidQuery)
    if not isinstance(arguments, dict):
        raise InvalidQuery("the query body must be a JSON object")
    if not set(arguments) <= set(_QUERY_FIELDS):
        raise InvalidQuery(f"the query body accepts only the fields {', '.join(_QUERY_FIELDS)}")
    for name in ("limit", "max_scan"):  # the integer fields (QueryRequest)
        arguments[name] = _whole(arguments.get(name))
    if isinstance(arguments.get("record_range"), list):
        arguments["record_range"] = [_whole(value) for value in arguments["record_range"]]
    return {name: value for name, value in arguments.items() if value is not None}


@dataclass(slots=True)
class _Content:
    """What the content endpoint sends: status, headers, the first verified piece and the stream for the rest."""

    status: int
    headers: dict[str, str]
    first: bytes = b""
    stream: ArtifactStream | None = None
    remaining: int = 0
    problem: JSONResponse | None = None


_RANGE = re.compile(r"bytes=(\d{0,19})-(\d{0,19})")


def byte_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """The single range ``(start, end_exclusive)`` asked for; None for the whole; ``"unsatisfiable"`` for a 416.

    Multi-range, malformed and non-bytes ranges are ignored (the whole
    artifact is sent), as RFC 9110 allows.
    """
    if header is None:
        return None
    match = _RANGE.fullmatch(header.strip().replace(" ", ""))
    if match is None:
        return None
    first, last = match.group(1), match.group(2)
    if not first and not last:
        return None
    if not first:  # suffix: the last n bytes
        n = int(last)
        if n == 0 or size == 0:
            return "unsatisfiable"
        return max(0, size - n), size
    start = int(first)
    if last and int(last) < start:
        return None  # invalid: ignored
    if start >= size:
        return "unsatisfiable"
    end = size if not last else min(int(last) + 1, size)
    return start, end


def _etag_matches(header: str | None, etag: str) -> bool:
    if header is None:
        return False
    for candidate in header.split(","):
        tag = candidate.strip()
        if tag == "*" or tag.removeprefix("W/") == etag:
            return True
    return False


# -- the app ---------------------------------------------------------------------------------


def create_app(
    vault: Vault,
    *,
    max_body: int = DEFAULT_MAX_BODY,
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]] | None = None,
    auth_cache_seconds: float = DEFAULT_CACHE_SECONDS,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    uploads_per_key: int = DEFAULT_UPLOADS_PER_KEY,
    uploads_per_tenant: int = DEFAULT_UPLOADS_PER_TENANT,
) -> FastAPI:
    """The HTTP API v1 over ``vault`` (which the caller keeps and closes), plus ``/mcp`` when available.

    ``max_body`` bounds a capture's body in bytes (413 above it). ``lifespan``
    runs around the app's life (``app_from_env`` closes its vault there).
    ``auth_cache_seconds`` is how long a successful authentication is trusted
    without reading the key again (:class:`~refvault.keys.KeyCache`; 0: never):
    the longest a key revoked by another process (or vault object) keeps working here.
    ``allowed_hosts``/``allowed_origins`` are what ``/mcp`` accepts in ``Host``/``Origin``
    besides loopback names and the address a request arrived at (:func:`refvault.server.mcp.transport_security`).
    ``body_timeout`` is the longest wait, in seconds, for the next piece of a request body (408
    after it); ``uploads_per_key``/``uploads_per_tenant`` cap the request bodies a key/tenant may
    have in progress at once (429 past them; :mod:`refvault.server.limits`).
    """
    if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 0:
        raise InvalidArgument("max_body must be a non-negative number of bytes")
    body_timeout = checked_seconds("body_timeout", body_timeout)
    uploads = Uploads(per_key=uploads_per_key, per_tenant=uploads_per_tenant)
    keys = KeyCache(vault, seconds=auth_cache_seconds)
    mcp = _mcp_app(vault, keys, allowed_hosts, allowed_origins, uploads)

    @asynccontextmanager
    async def life(app: FastAPI) -> AsyncIterator[None]:
        async with _optional(lifespan, app), _optional(_sub_lifespan(mcp), mcp):
            yield

    app = FastAPI(
        title="refvault",
        version=__version__,
        description="Safe artifact references: capture, verified selective reads, scoped by API key.",
        redirect_slashes=False,
        lifespan=life,
    )
    app.include_router(_router(vault, keys, max_body, uploads), prefix="/v1")
    app.add_middleware(_FastContent, vault=vault, keys=keys)  # the hot read, for keys already checked
    app.add_middleware(BodyIdleTimeout, seconds=body_timeout)  # outermost: every route and /mcp
    _install_handlers(app)
    app.openapi = partial(_openapi, app)  # type: ignore[method-assign]
    if mcp is not None:  # at /mcp exactly (what MCP clients call) and below it
        app.router.routes.append(Route("/mcp", endpoint=_Asgi(mcp), include_in_schema=False))
        app.mount("/mcp", mcp)
    app.state.vault = vault
    app.state.uploads = uploads
    app.state.mcp_mounted = mcp is not None
    return app


def _mcp_app(
    vault: Vault, keys: KeyCache, allowed_hosts: Sequence[str], allowed_origins: Sequence[str], uploads: Uploads
) -> Any:
    """The model-facing MCP endpoint from :mod:`refvault.server.mcp`, or None where that module is not installed."""
    if find_spec("refvault.server.mcp") is None:
        return None
    from refvault.server import mcp as mcp_module

    return mcp_module.mcp_app(
        vault, keys.authenticate, allowed_hosts=allowed_hosts, allowed_origins=allowed_origins, uploads=uploads
    )


class _Asgi:
    """An ASGI app as a route endpoint (Starlette treats a plain function as a request handler)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


def _sub_lifespan(sub: Any) -> Callable[[Any], AbstractAsyncContextManager[Any]] | None:
    router = getattr(sub, "router", None)
    context = getattr(router, "lifespan_context", None)
    return context if callable(context) else None


@asynccontextmanager
async def _optional(context: Callable[[Any], AbstractAsyncContextManager[Any]] | None, app: Any) -> AsyncIterator[None]:
    if context is None:
        yield
        return
    async with context(app):
        yield


def app_from_env() -> FastAPI:
    """An app over ``Vault.open()`` configured by the environment (one per worker process); closes it at shutdown.

    ``refvault serve`` sets ``REFVAULT_STORE`` or ``REFVAULT_CATALOG``/``REFVAULT_BLOBS``/
    ``REFVAULT_S3_ENDPOINT``, ``REFVAULT_MAX_BODY`` and ``REFVAULT_AUTH_CACHE_SECONDS`` before starting uvicorn,
    and ``REFVAULT_ALLOWED_HOSTS``/``REFVAULT_ALLOWED_ORIGINS`` (comma-separated entries; empty or unset: none),
    ``REFVAULT_BODY_TIMEOUT``, ``REFVAULT_UPLOADS_PER_KEY`` and ``REFVAULT_UPLOADS_PER_TENANT``. It also checks
    ``REFVAULT_HEADER_TIMEOUT`` (read by the protocol, :class:`refvault.server.limits.HeaderTimeoutProtocol`),
    so a malformed value stops the worker at startup.
    """
    allowed_hosts, allowed_origins = (
        [entry.strip() for entry in os.environ.get(name, "").split(",") if entry.strip()]
        for name in (ALLOWED_HOSTS_ENVVAR, ALLOWED_ORIGINS_ENVVAR)
    )
    raw = os.environ.get(MAX_BODY_ENVVAR)
    try:
        max_body = DEFAULT_MAX_BODY if not raw else int(raw)
    except ValueError:
        raise InvalidArgument(f"{MAX_BODY_ENVVAR} must be a number of bytes") from None
    raw = os.environ.get(AUTH_CACHE_ENVVAR)
    try:
        auth_cache_seconds = DEFAULT_CACHE_SECONDS if not raw else float(raw)
    except ValueError:
        raise InvalidArgument(f"{AUTH_CACHE_ENVVAR} must be a number of seconds") from None
    seconds_from_env(HEADER_TIMEOUT_ENVVAR, DEFAULT_HEADER_TIMEOUT)
    body_timeout = seconds_from_env(BODY_TIMEOUT_ENVVAR, DEFAULT_BODY_TIMEOUT)
    uploads_per_key = count_from_env(UPLOADS_PER_KEY_ENVVAR, DEFAULT_UPLOADS_PER_KEY)
    uploads_per_tenant = count_from_env(UPLOADS_PER_TENANT_ENVVAR, DEFAULT_UPLOADS_PER_TENANT)
    vault = Vault.open()

    @asynccontextmanager
    async def closing(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await run_in_threadpool(vault.close)

    try:
        return create_app(
            vault,
            max_body=max_body,
            lifespan=closing,
            auth_cache_seconds=auth_cache_seconds,
            allowed_hosts=allowed_hosts,
            allowed_origins=allowed_origins,
            body_timeout=body_timeout,
            uploads_per_key=uploads_per_key,
            uploads_per_tenant=uploads_per_tenant,
        )
    except BaseException:
        vault.close()
        raise


_limiters: tuple[Any, anyio.CapacityLimiter] | None = None  # (event loop, its read limiter), the last one asked for


def _read_limiter() -> anyio.CapacityLimiter | None:
    """This event loop's limiter of read threads (one per loop: a limiter belongs to the loop it waits on).

    None (anyio's default limiter) outside asyncio. Kept for the last loop asked
    only: a server runs one loop per process.
    """
    global _limiters
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    if _limiters is None or _limiters[0] is not loop:
        _limiters = (loop, anyio.CapacityLimiter(READ_THREADS))
    return _limiters[1]


async def blocking(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``func(*args, **kwargs)`` in a worker thread, at most :data:`READ_THREADS` at once."""
    return await anyio.to_thread.run_sync(partial(func, *args, **kwargs), limiter=_read_limiter())


def _router(vault: Vault, keys: KeyCache, max_body: int, uploads: Uploads) -> APIRouter:
    router = APIRouter(responses={"default": _PROBLEM_RESPONSE})
    bearer = HTTPBearer(auto_error=False, description="An API key: `rvk_<key_id>_<secret>`")

    async def caller(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
        tenant: Annotated[str | None, Header(alias="Refvault-Tenant")] = None,
        user: Annotated[str | None, Header(alias="Refvault-User")] = None,
    ) -> Principal:
        token = credentials.credentials if credentials is not None else None
        principal = None if token is None else keys.cached(token)  # no thread hop for a recent key
        if principal is None and token is not None:
            principal = await blocking(keys.authenticate, token)
        if principal is None:
            raise Unauthenticated(UNAUTHENTICATED_DETAIL)
        if (tenant is not None and tenant != principal.tenant) or (user is not None and user != principal.user):
            raise Forbidden("Refvault-Tenant and Refvault-User must name the API key's own tenant and user")
        return principal

    async def scope_of(
        principal: Annotated[Principal, Depends(caller)],
        session: Annotated[str, Header(alias="Refvault-Session", pattern=_NAME_PATTERN)],
    ) -> Scope:
        return session_scope(principal, session)

    Caller = Annotated[Scope, Depends(scope_of)]  # noqa: N806 - a type alias

    @router.get("/health", response_model=Health, tags=["service"])
    async def health() -> JSONResponse:
        """Liveness; needs no key."""
        return JSONResponse({"status": "ok"})

    @router.post(
        "/artifacts",
        status_code=201,
        response_model=DescriptorModel,
        tags=["artifacts"],
        responses={408: _PROBLEM_RESPONSE, 429: _PROBLEM_RESPONSE},
        openapi_extra={
            "requestBody": {
                "required": False,
                "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
            },
            "parameters": [_METADATA_PARAMETER, _IDEMPOTENCY_PARAMETER],
        },
    )
    async def capture(
        request: Request,
        scope: Caller,
    ) -> Response:
        """Capture the raw request body (streamed); metadata in ``Refvault-Metadata`` (a JSON object)."""
        options = capture_options(request.headers.get("refvault-metadata"), request.headers.get("content-type"))
        idempotency_key = request.headers.get("idempotency-key")
        if idempotency_key is not None:
            options["idempotency_key"] = idempotency_key
        declared = declared_length(request.headers.get("content-length"))
        if declared is not None and declared > max_body:
            raise BodyTooLarge(max_body)
        pieces = request.stream().__aiter__()

        async def receive() -> bytes | None:
            try:
                return await pieces.__anext__()
            except StopAsyncIteration:
                return None

        with uploads.slot(key_id(request.headers.get("authorization")), scope.tenant):  # 429 past the caps
            try:
                descriptor = await uploads.run_capture(vault.put, scope, _body(receive, max_body), **options)
            except ClientDisconnect:
                return problem(
                    400, "invalid-argument", "Invalid argument", "the request body ended early", "InvalidArgument"
                )
        location = f"/v1/artifacts/{descriptor.artifact_id}"
        return JSONResponse(descriptor.to_dict(), status_code=201, headers={"Location": location})

    @router.get("/artifacts", response_model=ArtifactList, tags=["artifacts"])
    async def list_artifacts(
        scope: Caller,
        limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = 100,
        offset: Annotated[int, Query(ge=0, le=2**63 - 1)] = 0,
    ) -> JSONResponse:
        """The scope's unexpired artifacts, newest first, one page at a time."""
        descriptors = await blocking(vault.list, scope)
        page = descriptors[offset : offset + limit]
        more = offset + limit < len(descriptors)
        items = [d.to_dict() for d in page]
        return JSONResponse({"items": items, "next_offset": offset + limit if more else None})

    @router.get("/artifacts/{artifact_id}", response_model=DescriptorModel, tags=["artifacts"])
    async def describe(artifact_id: str, scope: Caller) -> JSONResponse:
        """The artifact's descriptor."""
        descriptor: Descriptor = await blocking(vault.describe, scope, _checked_id(artifact_id))
        return JSONResponse(descriptor.to_dict())

    @router.get(
        "/artifacts/{artifact_id}/content",
        response_class=Response,
        tags=["artifacts"],
        responses={
            200: {"description": "The verified bytes", "content": {"*/*": {"schema": {}}}},
            206: {"description": "The verified bytes of the range", "content": {"*/*": {"schema": {}}}},
            304: {"description": "Not modified (If-None-Match matched the ETag)"},
            416: _PROBLEM_RESPONSE,
        },
    )
    async def content(
        artifact_id: str,
        scope: Caller,
        range_: Annotated[str | None, Header(alias="Range")] = None,
        if_none_match: Annotated[str | None, Header(alias="If-None-Match")] = None,
        if_range: Annotated[str | None, Header(alias="If-Range")] = None,
    ) -> Response:
        """The verified bytes; one ``Range`` (``bytes=a-b``, ``a-``, ``-n``) gives 206; ``ETag`` is the content hash."""
        plan = await blocking(_plan_content, vault, scope, _checked_id(artifact_id), range_, if_none_match, if_range)
        return _content_response(plan)

    @router.get(
        "/artifacts/{artifact_id}/window",
        tags=["reads"],
        responses={200: _open_json("A text window (refvault.read.window)"), 422: _NOT_TEXT},
    )
    async def text_window(
        artifact_id: str,
        scope: Caller,
        lines: Annotated[
            str | None,
            Query(
                pattern=r"^[0-9]{1,19},[0-9]{0,19}$",
                description="START,END: lines [START, END), zero-based; END empty for 'to the end', else greater"
                " than START. Not with bytes.",
            ),
        ] = None,
        bytes_: Annotated[
            str | None,
            Query(
                alias="bytes",
                pattern=r"^[0-9]{1,19},[1-9][0-9]{0,18}$",
                description="OFFSET,LENGTH: bytes [OFFSET, OFFSET + LENGTH), LENGTH at least 1. Not with lines.",
            ),
        ] = None,
        max_chars: Annotated[int, Query(ge=1, le=MAX_CHARS)] = 20_000,
    ) -> JSONResponse:
        """A window of a text artifact by ``lines`` or ``bytes``, not both (neither: from line 0).

        Model-facing: sealed artifacts are refused.
        """
        line_pair, byte_pair = _pair(lines), _pair(bytes_)
        result = await blocking(
            window,
            vault,
            scope,
            _checked_id(artifact_id),
            lines=None if line_pair is None else list(line_pair),
            byte_range=None if byte_pair is None else list(byte_pair),
            max_chars=max_chars,
        )
        return JSONResponse(result)

    @router.get(
        "/artifacts/{artifact_id}/grep",
        tags=["reads"],
        responses={200: _open_json("Matching lines (refvault.read.grep)"), 422: _NOT_TEXT},
    )
    async def grep_lines(
        artifact_id: str,
        scope: Caller,
        pattern: Annotated[
            str,
            Query(
                min_length=1,
                max_length=MAX_PATTERN,
                description="A literal (no newline: grep matches within one line) or, with regex=true, an RE2"
                " expression.",
            ),
        ],
        regex: bool = False,
        max_matches: Annotated[int, Query(ge=1, le=MAX_MATCHES)] = 100,
        from_line: Annotated[int, Query(ge=0, le=2**63 - 1)] = 0,
        max_seconds: Annotated[float, Query(ge=0, le=MAX_SECONDS)] = 5.0,
    ) -> JSONResponse:
        """Lines of a text artifact containing ``pattern`` (literal, or RE2 with ``regex=true``)."""
        result = await blocking(
            grep,
            vault,
            scope,
            _checked_id(artifact_id),
            pattern,
            regex=regex,
            max_matches=max_matches,
            from_line=from_line,
            max_seconds=max_seconds,
        )
        return JSONResponse(result)

    @router.post(
        "/artifacts/{artifact_id}/query",
        tags=["reads"],
        responses={
            200: _open_json("Selected records (refvault.read.query)"),
            408: _PROBLEM_RESPONSE,
            413: _PROBLEM_RESPONSE,
            422: _NOT_RECORDS,
            429: _PROBLEM_RESPONSE,
        },
        openapi_extra={
            "requestBody": {
                "required": False,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/QueryRequest"}}},
            }
        },
    )
    async def query_records(artifact_id: str, request: Request, scope: Caller) -> JSONResponse:
        """Select records (``where``, ``fields``, ``order``, ``limit``, ``record_range``, ``cursor``...)."""
        with uploads.slot(key_id(request.headers.get("authorization")), scope.tenant):  # while the body arrives
            body = await _bounded_body(request, MAX_JSON_BODY)
        arguments = query_arguments(body)
        result = await blocking(query, vault, scope, _checked_id(artifact_id), **arguments)
        return JSONResponse(result)

    @router.get(
        "/artifacts/{artifact_id}/records",
        response_model=RecordSetModel | None,
        tags=["reads"],
        responses={422: _NOT_RECORDS},
    )
    async def record_set(artifact_id: str, scope: Caller, build: bool = True) -> JSONResponse:
        """The record count and fields of a record artifact (``refvault.read.derive``; sealed ones are refused).

        With ``build=false`` the record form is not built: the answer is ``null``
        unless an earlier read built it (what ``describe_artifact`` shows).
        """
        result = await blocking(_record_set, vault, scope, _checked_id(artifact_id), build)
        return JSONResponse(result)

    @router.get("/artifacts/{artifact_id}/verify", response_model=Verification, tags=["artifacts"])
    async def verify(artifact_id: str, scope: Caller) -> JSONResponse:
        """Read and hash every byte of the artifact (500 ``integrity-error`` on damage)."""
        result = await blocking(vault.verify_artifact, scope, _checked_id(artifact_id))
        return JSONResponse(result)

    @router.delete("/artifacts/{artifact_id}", status_code=204, response_class=Response, tags=["artifacts"])
    async def delete(artifact_id: str, scope: Caller) -> Response:
        """Delete the artifact (its bytes go at the next ``gc``)."""
        await blocking(vault.delete, scope, _checked_id(artifact_id))
        return Response(status_code=204)

    return router


def _body(receive: Callable[[], Coroutine[Any, Any, bytes | None]], limit: int) -> Iterator[bytes]:
    """The request body as a blocking iterator, for a worker thread; raises :class:`BodyTooLarge` past ``limit``."""
    total = 0
    while True:
        piece: bytes | None = anyio.from_thread.run(receive)
        if piece is None:
            return
        total += len(piece)
        if total > limit:
            raise BodyTooLarge(limit)
        if piece:
            yield piece


async def _bounded_body(request: Request, limit: int) -> bytes:
    buffer = bytearray()
    async for piece in request.stream():
        buffer += piece
        if len(buffer) > limit:
            raise BodyTooLarge(limit)
    return bytes(buffer)


def _plan_content(
    vault: Vault,
    scope: Scope,
    artifact_id: str,
    range_header: str | None,
    if_none_match: str | None,
    if_range: str | None,
) -> _Content:
    """Look the artifact up, answer conditionals and ranges, and read (verify) the first piece; in a worker thread.

    One lookup (``Vault.open_artifact``) gives the descriptor and the stream;
    a conditional request looks first (``describe``) so a 304 opens no bytes.
    The returned plan holds the stream only if bytes remain to be sent.
    """
    stream: ArtifactStream | None = None
    if if_none_match is None:
        descriptor, stream = vault.open_artifact(scope, artifact_id)
    else:
        descriptor = vault.describe(scope, artifact_id)
    keep = False
    try:
        plan, start, end = _plan_headers(descriptor, range_header, if_none_match, if_range)
        if plan.status not in (200, 206):
            return plan
        if stream is None:
            stream = vault.stream(scope, artifact_id)
        stream.seek(start)
        plan.first = stream.read(min(PIECE, end - start)) if end > start else b""
        plan.remaining = end - start - len(plan.first)
        if plan.remaining > 0:
            plan.stream, keep = stream, True
        return plan
    finally:
        if stream is not None and not keep:
            stream.close()


def _plan_headers(
    descriptor: Descriptor, range_header: str | None, if_none_match: str | None, if_range: str | None
) -> tuple[_Content, int, int]:
    """The status and headers for ``descriptor``, and the byte range ``[start, end)`` to send (a 304/416 sends none)."""
    size = descriptor.size
    etag = '"' + descriptor.content_hash.removeprefix("sha256:") + '"'
    headers = {"ETag": etag, "Accept-Ranges": "bytes"}
    if _etag_matches(if_none_match, etag):
        return _Content(304, headers), 0, 0
    wanted = byte_range(range_header, size)
    if if_range is not None and if_range.strip() != etag:
        wanted = None  # the client's copy is of other bytes: send the whole artifact
    if wanted == "unsatisfiable":
        response = problem(
            416,
            "range-not-satisfiable",
            "Range not satisfiable",
            f"the requested range is outside the artifact's {size} bytes",
            "InvalidArgument",
            headers={"Content-Range": f"bytes */{size}", **headers},
        )
        return _Content(416, headers, problem=response), 0, 0
    start, end = (0, size) if wanted is None or isinstance(wanted, str) else wanted
    status = 200 if wanted is None else 206
    headers["Content-Type"] = descriptor.media_type
    headers["Content-Length"] = str(end - start)
    headers.update(content_safety_headers(descriptor))
    if status == 206:
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
    return _Content(status, headers), start, end


CONTENT_SECURITY_POLICY = "sandbox; default-src 'none'"
# Media types a browser only displays (no script, no markup, no plugin): served inline; every other type,
# the active ones (HTML, SVG, XML, JavaScript, PDF...) and any type not listed here, is an attachment.
_PASSIVE_TYPES = frozenset(
    {
        "text/plain",
        "text/csv",
        "text/tab-separated-values",
        "text/markdown",
        "application/json",
        "application/x-ndjson",
        "application/jsonl",
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "image/avif",
    }
)
_PASSIVE_PREFIXES = ("audio/", "video/")
_UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def content_safety_headers(descriptor: Descriptor) -> dict[str, str]:
    """The headers that keep an artifact's bytes inert in a browser, on every 200/206 of ``GET …/content``.

    ``X-Content-Type-Options: nosniff`` and a sandboxing ``Content-Security-Policy``
    (no script, no plugin, no subresource, a unique origin) on every artifact; and
    ``Content-Disposition: attachment`` with an ASCII-only file name for every media
    type outside the passive list above (so HTML, SVG, XML, JavaScript and unknown
    types are downloaded, not rendered). Both the route and ``_FastContent`` send
    these through :func:`_plan_headers` (``tests/security/test_server_http_conformance.py``).
    """
    headers = {"X-Content-Type-Options": "nosniff", "Content-Security-Policy": CONTENT_SECURITY_POLICY}
    kind = base_type(descriptor.media_type)
    if kind not in _PASSIVE_TYPES and not kind.startswith(_PASSIVE_PREFIXES):
        headers["Content-Disposition"] = f'attachment; filename="{download_name(descriptor)}"'
    return headers


def download_name(descriptor: Descriptor) -> str:
    """The artifact's file name reduced to ``A-Z a-z 0-9 . _ -`` (no leading dot, at most 128), else its id.

    Safe inside a quoted ``filename=`` parameter: no quote, backslash, separator or control character.
    """
    name = _UNSAFE_IN_NAME.sub("_", descriptor.filename or "").lstrip(".")[:128]
    return name if name.strip("._-") else descriptor.artifact_id


def _content_response(plan: _Content) -> Response:
    if plan.problem is not None:
        return plan.problem
    if plan.stream is None:
        return Response(plan.first, status_code=plan.status, headers=plan.headers)
    return StreamingResponse(
        _rest(plan.stream, plan.first, plan.remaining), status_code=plan.status, headers=plan.headers
    )


_CONTENT_PATH = re.compile(r"/v1/artifacts/([^/]+)/content")
_SESSION = re.compile(_NAME_PATTERN)


class _FastContent:
    """``GET /v1/artifacts/{id}/content`` by a recently authenticated key, without FastAPI's request machinery.

    Taken only when every check the route's dependencies make would pass: the
    bearer token is in the process's :class:`~refvault.keys.KeyCache` (so it
    authenticated moments ago), ``Refvault-Tenant``/``Refvault-User`` are absent
    or the key's own, and ``Refvault-Session`` is a session name the key
    allows. Anything else goes to the route, which answers it (401, 403, 400...)
    exactly as before. The answer is built by the route's own functions
    (``_plan_content``, ``_content_response``, ``problem_for``), so both paths
    send the same bytes; the schema documents the route.
    """

    def __init__(self, app: Any, vault: Vault, keys: KeyCache) -> None:
        self.app = app
        self.vault = vault
        self.keys = keys

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            match = _CONTENT_PATH.fullmatch(scope["path"])
            if match is not None:
                caller = self._scope(scope)
                if caller is not None:
                    try:
                        artifact_id = _checked_id(match.group(1))
                        plan = await blocking(_plan_content, self.vault, caller, artifact_id, *self._conditions(scope))
                        response = _content_response(plan)
                    except RefvaultError as exc:
                        response = problem_for(exc)  # what the app's RefvaultError handler sends
                    except Exception:
                        await _internal_error()(scope, receive, send)  # as the app's last-resort handler ...
                        raise  # ... which also lets the server log it
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)

    def _scope(self, scope: Any) -> Scope | None:
        """The caller's scope if the request passes every check of the route's dependencies, else None."""
        headers = _first_headers(scope, (b"authorization", b"refvault-tenant", b"refvault-user", b"refvault-session"))
        authorization, tenant, user, session = headers
        if authorization is None or session is None or _SESSION.fullmatch(session) is None:
            return None
        kind, _, rest = authorization.partition(" ")  # as fastapi.security.HTTPBearer reads it
        token = rest.strip()
        if kind.lower() != "bearer" or not token:
            return None
        principal = self.keys.cached(token)
        if principal is None or tenant not in (None, principal.tenant) or user not in (None, principal.user):
            return None
        try:
            return session_scope(principal, session)
        except RefvaultError:
            return None

    @staticmethod
    def _conditions(scope: Any) -> tuple[str | None, str | None, str | None]:
        range_, if_none_match, if_range = _first_headers(scope, (b"range", b"if-none-match", b"if-range"))
        return range_, if_none_match, if_range


def _first_headers(scope: Any, names: tuple[bytes, ...]) -> list[str | None]:
    """The first value of each named header (lowercase names), as Starlette's ``headers.get`` gives it."""
    found: list[str | None] = [None] * len(names)
    for name, value in scope["headers"]:
        if name in names:
            index = names.index(name)
            if found[index] is None:
                found[index] = value.decode("latin-1")
    return found


async def _rest(stream: ArtifactStream, first: bytes, remaining: int) -> AsyncIterator[bytes]:
    """Yield the first piece, then verified pieces read off the event loop; closes the stream."""
    try:
        yield first
        while remaining > 0:
            piece = await blocking(stream.read, min(PIECE, remaining))
            if not piece:
                raise IntegrityError("the artifact ended before its recorded size")
            remaining -= len(piece)
            yield piece
    finally:
        await blocking(stream.close)


def _record_set(vault: Vault, scope: Scope, artifact_id: str, build: bool) -> dict[str, Any] | None:
    """``derive``'s record set as JSON; with ``build`` false, None unless the record form already exists."""
    if build:
        return record_set_json(derive(vault, scope, artifact_id))
    readable(vault, scope, artifact_id)
    record_set = derived_records(vault, scope, artifact_id)
    return None if record_set is None else record_set_json(record_set)


# -- handlers and schema --------------------------------------------------------------------


def _install_handlers(app: FastAPI) -> None:
    async def refvault_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RefvaultError)
        return problem_for(exc)

    async def validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return problem(400, "invalid-argument", "Invalid argument", _validation_detail(exc), "InvalidArgument")

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        headers = dict(exc.headers or {})
        if exc.status_code == 404:
            return problem(404, "not-found", "Not found", "no such endpoint", "NotFound", headers=headers)
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(request.app.router.routes, request.scope))
            detail = "this endpoint does not accept that method"
            return problem(405, "method-not-allowed", "Method not allowed", detail, "InvalidArgument", headers=headers)
        if exc.status_code >= 500:
            return _internal_error()
        slug = "invalid-argument"
        return problem(
            exc.status_code, slug, "Invalid request", "the request was refused", "InvalidArgument", headers=headers
        )

    async def unexpected(request: Request, exc: Exception) -> Response:
        return _internal_error()

    app.add_exception_handler(RefvaultError, refvault_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)


def allowed_methods(routes: Iterable[BaseRoute], scope: Any) -> list[str]:
    """Every method some route answers at ``scope``'s path: the ``Allow`` of a 405, whichever route refused.

    Starlette's 405 names the methods of the first route whose path matched (FastAPI makes one route per
    method, so ``/v1/artifacts`` said only ``POST``); this asks every route, nested routers included, for
    every method (``tests/security/test_server_http_conformance.py`` checks each path of the schema).
    """
    return [
        method
        for method in HTTPMethod
        if any(route.matches({**scope, "method": method.value})[0] is Match.FULL for route in routes)
    ]


def _validation_detail(exc: RequestValidationError) -> str:
    """Where and what was wrong, from the validation errors' locations and messages; never their inputs."""
    parts = []
    for error in list(exc.errors())[:5]:
        where = ".".join(str(p) for p in error.get("loc", ()) if not isinstance(p, int))
        if error.get("type") == "missing":
            parts.append(f"{where}: required")
        else:
            parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts) if parts else "invalid request"


def _openapi(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in (Problem, QueryRequest, CaptureMetadata):
        found = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(found.pop("$defs", {}))  # nested models (OrderKey, Completeness) become components too
        schemas[model.__name__] = found
    app.openapi_schema = schema
    return schema
