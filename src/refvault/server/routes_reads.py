"""The selective reads of the HTTP API v1: text windows, grep, record queries and record sets; and verify.

Each is :mod:`refvault.read`'s function of the same name over the app's vault, in a worker thread,
with the scope the caller's key allows; the read functions enforce every bound, and the schema
states them from the same constants (:mod:`refvault.server.schema`). Model-facing reads refuse
sealed artifacts. A query body is read whole, within :data:`~refvault.server.inputs.MAX_JSON_BODY`
bytes, while it holds one of its key's and tenant's upload places.
"""

# No ``from __future__ import annotations``: FastAPI reads the routes' annotations at runtime.
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from refvault.limits import (
    DEFAULT_GREP_MATCHES,
    DEFAULT_GREP_SECONDS,
    DEFAULT_WINDOW_CHARS,
    MAX_CHARS,
    MAX_FROM_LINE,
    MAX_MATCHES,
    MAX_PATTERN,
    MAX_SECONDS,
)
from refvault.model import Scope, pick
from refvault.read import grep, query, window
from refvault.read._access import readable
from refvault.read.records import RecordSet, derive, derived_records
from refvault.server.auth import Caller
from refvault.server.inputs import (
    MAX_JSON_BODY,
    Reader,
    ReadFor,
    bounded_body,
    checked_id,
    pair,
    query_arguments,
)
from refvault.server.limits import key_id
from refvault.server.schema import NOT_RECORDS, NOT_TEXT, PROBLEM_RESPONSE, RecordSetModel, Verification, open_json
from refvault.server.service import Service
from refvault.server.threads import blocking
from refvault.vault.core import Vault
from refvault.vault.proving import verified_by

__all__ = ["record_set_json", "router"]

router = APIRouter(responses={"default": PROBLEM_RESPONSE})


@router.get(
    "/artifacts/{artifact_id}/window",
    tags=["reads"],
    responses={200: open_json("A text window (refvault.read.window)"), 422: NOT_TEXT},
)
async def text_window(
    artifact_id: str,
    scope: Caller,
    service: Service,
    read_for: Reader,
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
    max_chars: Annotated[int, Query(ge=1, le=MAX_CHARS)] = DEFAULT_WINDOW_CHARS,
) -> JSONResponse:
    """A window of a text artifact by ``lines`` or ``bytes``, not both (neither: from line 0).

    Model-facing: sealed artifacts are refused.
    """
    line_pair, byte_pair = pair(lines), pair(bytes_)
    result = await blocking(
        window,
        service.vault,
        scope,
        checked_id(artifact_id),
        lines=None if line_pair is None else list(line_pair),
        byte_range=None if byte_pair is None else list(byte_pair),
        max_chars=max_chars,
        **read_for.kwargs(),
    )
    return JSONResponse(result)


@router.get(
    "/artifacts/{artifact_id}/grep",
    tags=["reads"],
    responses={200: open_json("Matching lines (refvault.read.grep)"), 422: NOT_TEXT},
)
async def grep_lines(
    artifact_id: str,
    scope: Caller,
    service: Service,
    read_for: Reader,
    pattern: Annotated[
        str,
        Query(
            min_length=1,
            max_length=MAX_PATTERN,
            description="A literal (no newline: grep matches within one line) or, with regex=true, an RE2 expression.",
        ),
    ],
    regex: bool = False,
    max_matches: Annotated[int, Query(ge=1, le=MAX_MATCHES)] = DEFAULT_GREP_MATCHES,
    from_line: Annotated[int, Query(ge=0, le=MAX_FROM_LINE)] = 0,
    max_seconds: Annotated[float, Query(ge=0, le=MAX_SECONDS)] = DEFAULT_GREP_SECONDS,
) -> JSONResponse:
    """Lines of a text artifact containing ``pattern`` (literal, or RE2 with ``regex=true``)."""
    result = await blocking(
        grep,
        service.vault,
        scope,
        checked_id(artifact_id),
        pattern,
        regex=regex,
        max_matches=max_matches,
        from_line=from_line,
        max_seconds=max_seconds,
        **read_for.kwargs(),
    )
    return JSONResponse(result)


@router.post(
    "/artifacts/{artifact_id}/query",
    tags=["reads"],
    responses={
        200: open_json("Selected records (refvault.read.query)"),
        408: PROBLEM_RESPONSE,
        413: PROBLEM_RESPONSE,
        422: NOT_RECORDS,
        429: PROBLEM_RESPONSE,
    },
    openapi_extra={
        "requestBody": {
            "required": False,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/QueryRequest"}}},
        }
    },
)
async def query_records(
    artifact_id: str, request: Request, scope: Caller, service: Service, read_for: Reader
) -> JSONResponse:
    """Select records (``where``, ``fields``, ``order``, ``limit``, ``record_range``, ``cursor``...)."""
    with service.uploads.slot(key_id(request.headers.get("authorization")), scope.tenant):  # while the body arrives
        body = await bounded_body(request, MAX_JSON_BODY)
    arguments = query_arguments(body)
    result = await blocking(query, service.vault, scope, checked_id(artifact_id), **arguments, **read_for.kwargs())
    return JSONResponse(result)


@router.get(
    "/artifacts/{artifact_id}/records",
    response_model=RecordSetModel | None,
    tags=["reads"],
    responses={422: NOT_RECORDS},
)
async def record_set(
    artifact_id: str, scope: Caller, service: Service, read_for: Reader, build: bool = True
) -> JSONResponse:
    """The record count and fields of a record artifact (``refvault.read.derive``; sealed ones are refused).

    With ``build=false`` the record form is not built: the answer is ``null``
    unless an earlier read built it (what ``describe_artifact`` shows).
    """
    result = await blocking(_record_set, service.vault, scope, checked_id(artifact_id), build, read_for)
    return JSONResponse(result)


@router.get("/artifacts/{artifact_id}/verify", response_model=Verification, tags=["artifacts"])
async def verify(artifact_id: str, scope: Caller, service: Service, read_for: Reader) -> JSONResponse:
    """Read and hash every byte of the artifact (500 ``integrity-error`` on damage)."""
    result = await blocking(service.vault.verify_artifact, scope, checked_id(artifact_id), **read_for.kwargs())
    return JSONResponse(result)


@router.get(
    "/artifacts/{artifact_id}/proof",
    tags=["reads"],
    responses={200: open_json("The inclusion proof of a byte range (refvault.Vault.prove_range)")},
)
async def proof(
    artifact_id: str,
    scope: Caller,
    service: Service,
    read_for: Reader,
    offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
    length: Annotated[int | None, Query(ge=0, le=2**62)] = None,
) -> JSONResponse:
    """``{"artifact_id", "proof", "verified_by"}``: the proof that bytes ``[offset, offset + length)`` (clipped;
    no ``length``: to the end) are in the artifact's Merkle root; check it with ``refvault.verify_excerpt``.
    Authorised like a read of those bytes; its ``head``/``tail`` (up to 4095 stored bytes each side) are charged to
    the run's budget (429 ``budget-exceeded``, no proof) and recorded in the ledger. Reads at most two chunks."""
    checked = checked_id(artifact_id)
    result = await blocking(service.vault.prove_range, scope, checked, offset, length, **read_for.kwargs())
    return JSONResponse({"artifact_id": checked, "proof": result, "verified_by": verified_by("stored bytes")})


def record_set_json(records: RecordSet) -> dict[str, Any]:
    """The JSON form of a :class:`~refvault.read.RecordSet` (``refvault.client`` reads it back)."""
    return {
        **pick(records, ("artifact_id", "content_hash", "source_format", "count")),
        "fields": [
            {"name": name, "type": sql_type, "kind": records.kind_of(name)} for name, sql_type in records.fields
        ],
        "derived_hash": records.derived_hash,
    }


def _record_set(vault: Vault, scope: Scope, artifact_id: str, build: bool, read_for: ReadFor) -> dict[str, Any] | None:
    """``derive``'s record set as JSON; with ``build`` false, None unless the record form already exists."""
    if build:
        return record_set_json(derive(vault, scope, artifact_id, **read_for.kwargs()))
    readable(vault, scope, artifact_id, **read_for.kwargs())
    record_set = derived_records(vault, scope, artifact_id, **read_for.kwargs())
    return None if record_set is None else record_set_json(record_set)
