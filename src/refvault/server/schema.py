"""What the OpenAPI schema of the HTTP API says: response models, request models and shared fragments.

**The schema tells the truth.** Every response of every operation is documented (``default`` is
the problem schema), so schemathesis's conformance checks hold; and every limit a request must
respect is stated, from the constant that enforces it (:class:`QueryRequest`,
:class:`CaptureMetadata`, the read parameters), so a request valid by the schema is accepted, apart
from what a schema cannot say (one parameter against another, the clock, the artifact's own
fields, server-issued cursors), which the descriptions say (``tests/server/test_schema.py``,
``tests/security/test_server_http_conformance.py``).

Responses are built directly (``JSONResponse``); these models document them. The request models
are documentation too: requests are checked by the functions that act on them (``Vault.put`` with
``refvault.model``'s checks, ``refvault.read``), and every bound below is those functions' own
constant, so the schema cannot drift from them (``tests/security/test_server_http_conformance.py``
tries each bound and one past it). What a schema cannot say (one field compared with another, a
clock, the artifact's own fields) is in the descriptions. :func:`openapi` adds the models no route
names (the problem, the query body, the capture metadata) as components.
"""

# No ``from __future__ import annotations``: pydantic and FastAPI read these annotations at runtime.
import inspect
from typing import Annotated, Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field

from refvault.ids import ARTIFACT_ID_PATTERN
from refvault.limits import MAX_DEPTH, MAX_LEAVES, MAX_LIMIT, MAX_ORDER, MAX_QUERY_SECONDS
from refvault.model import (  # the private patterns: the schema states the checks that use them
    _FORBIDDEN_IN_FILENAME,
    _LABEL,
    _LABEL_NAME,
    _MT_NAME,
    CAPTURE_STATUSES,
    DISCLOSURES,
    MAX_DERIVED_FROM,
    MAX_LABELS,
    RECORD_MEDIA_TYPES,
)
from refvault.server.problems import PROBLEM_MEDIA_TYPE, Problem

__all__ = [
    "IDEMPOTENCY_PARAMETER",
    "METADATA_FIELDS",
    "METADATA_PARAMETER",
    "NOT_RECORDS",
    "NOT_TEXT",
    "PROBLEM_RESPONSE",
    "QUERY_FIELDS",
    "ArtifactList",
    "CaptureMetadata",
    "Completeness",
    "DeclassifyRequest",
    "DescriptorModel",
    "Health",
    "OrderKey",
    "QueryRequest",
    "RecordField",
    "RecordSetModel",
    "Verification",
    "open_json",
    "openapi",
]

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


class Verification(BaseModel):
    """Every byte was read back and hashed, and matched ``content_hash``."""

    artifact_id: str
    ok: bool
    content_hash: str
    size: int


class Health(BaseModel):
    status: str


# -- what requests may hold (the schema's statement of each limit the server enforces) ---------------


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


QUERY_FIELDS = tuple(QueryRequest.model_fields)
_LABEL_PATTERN = f"^{_LABEL.pattern}$"  # tool_call_id, run_id, schema_version
_FILENAME_PATTERN = "^" + _FORBIDDEN_IN_FILENAME.pattern.replace("[", "[^", 1) + "+$"
_MEDIA_TYPE_PATTERN = rf'^ *{_MT_NAME}/{_MT_NAME} *(; *{_MT_NAME}=("[^"\\\x00-\x1f;]*"|{_MT_NAME}) *)*$'
_NOT_DOTS: dict[str, Any] = {"not": {"enum": [".", ".."]}}
_TIMESTAMP = Field(max_length=64, json_schema_extra={"format": "date-time"})
_LABELS = Annotated[
    list[Annotated[str, Field(pattern=f"^{_LABEL_NAME.pattern}$")]],
    Field(max_length=MAX_LABELS, json_schema_extra={"uniqueItems": True}),
]


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
    labels: _LABELS | None = Field(
        None, description="The artifact's labels (built-in meanings: pii, secret, confidential; any other name too)."
    )
    derived_from: (
        Annotated[list[Annotated[str, Field(pattern=ARTIFACT_ID_PATTERN)]], Field(max_length=MAX_DERIVED_FROM)] | None
    ) = Field(None, description="The ids of the artifacts this capture was derived from (provenance only).")
    supersedes: Annotated[str, Field(pattern=ARTIFACT_ID_PATTERN)] | None = Field(
        None, description="An artifact of the same scope this capture replaces: it and its copies then report stale."
    )


class DeclassifyRequest(BaseModel):
    """``POST /v1/artifacts/{id}/declassify``: the labels to remove (each one the artifact carries) and why.

    Only the artifact's owner may; the audit keeps the reason's SHA-256, never its text.
    """

    model_config = ConfigDict(extra="forbid")

    remove: Annotated[_LABELS, Field(min_length=1)]
    reason: Annotated[str, Field(min_length=1, max_length=1024)]


METADATA_FIELDS = tuple(CaptureMetadata.model_fields)
IDEMPOTENCY_PARAMETER: dict[str, Any] = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "A retry with the same key in the same scope returns the first capture (409 if its bytes differ).",
    # a label (refvault.model.checked_label) as HTTP carries it: a header value loses spaces at either end
    "schema": {"type": "string", "pattern": r"^[\x21-\x7e]([\x20-\x7e]{0,254}[\x21-\x7e])?$"},
}
METADATA_PARAMETER: dict[str, Any] = {
    "name": "Refvault-Metadata",
    "in": "header",
    "required": False,
    "description": inspect.cleandoc(CaptureMetadata.__doc__ or ""),
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CaptureMetadata"}}},
}


_OPEN_OBJECT: dict[str, Any] = {"type": "object", "additionalProperties": True}
_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
PROBLEM_RESPONSE: dict[str, Any] = {
    "description": "A problem",
    "content": {PROBLEM_MEDIA_TYPE: {"schema": _PROBLEM_REF}},
}


NOT_TEXT: dict[str, Any] = {
    **PROBLEM_RESPONSE,
    "description": "unsupported-read: the artifact is not text (text/*, JSON, XML, YAML...): it is used by reference",
}
NOT_RECORDS: dict[str, Any] = {
    **PROBLEM_RESPONSE,
    "description": f"unsupported-read: the artifact is not records ({', '.join(RECORD_MEDIA_TYPES)}), or its bytes"
    " do not parse as records",
}


def open_json(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _OPEN_OBJECT}}}


def openapi(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI schema (built once): its routes, plus the problem, query and metadata models."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in (Problem, QueryRequest, CaptureMetadata, DeclassifyRequest):
        found = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(found.pop("$defs", {}))  # nested models (OrderKey, Completeness) become components too
        schemas[model.__name__] = found
    app.openapi_schema = schema
    return schema
