"""``GET /v1/artifacts/{id}/content``: the verified bytes, ranges and conditionals, by the route or a fast path.

* **Streaming, bounded memory.** Content is served in verified pieces of :data:`PIECE` bytes; a
  verification failure before the first byte is a 500 problem, after it the connection is aborted
  so the client never receives a complete-looking body.
* **One answer per request, whichever path serves it.** A ``GET …/content`` by a key checked
  moments ago (in the :class:`~refvault.keys.KeyCache`) with an allowed session is served by
  :class:`FastContent` before FastAPI's routing and dependency machinery (the hot read: 4 KiB GETs
  cost about a third less CPU); it sends what the route would, built by the same functions, and
  leaves every other request, including every failing check, to the route
  (``tests/server/test_fast_paths.py`` compares the two byte for byte).
* **Artifact bytes stay inert in a browser.** Every 200/206 carries ``X-Content-Type-Options:
  nosniff`` and a sandboxing ``Content-Security-Policy``; every media type not known to be passive
  (HTML, SVG, XML, JavaScript, PDF, unknown types) is ``Content-Disposition: attachment``
  (:func:`content_safety_headers`).
"""

# No ``from __future__ import annotations``: FastAPI reads the route's annotations at runtime.
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse, Response, StreamingResponse

from refvault.errors import IntegrityError, RefvaultError
from refvault.keys import KeyCache
from refvault.model import Descriptor, Scope, base_type
from refvault.server.auth import NAME_PATTERN, Caller, session_scope
from refvault.server.inputs import Reader, ReadFor, checked_id
from refvault.server.problems import internal_error, problem, problem_for
from refvault.server.schema import PROBLEM_RESPONSE
from refvault.server.service import Service
from refvault.server.threads import blocking
from refvault.vault.core import Vault
from refvault.vault.verified import ArtifactStream

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "PIECE",
    "FastContent",
    "byte_range",
    "content_safety_headers",
    "download_name",
    "verified_pieces",
    "router",
]

PIECE = 1 << 20  # bytes read (and verified) per threadpool call when serving content

router = APIRouter(responses={"default": PROBLEM_RESPONSE})


@router.get(
    "/artifacts/{artifact_id}/content",
    response_class=Response,
    tags=["artifacts"],
    responses={
        200: {"description": "The verified bytes", "content": {"*/*": {"schema": {}}}},
        206: {"description": "The verified bytes of the range", "content": {"*/*": {"schema": {}}}},
        304: {"description": "Not modified (If-None-Match matched the ETag)"},
        416: PROBLEM_RESPONSE,
    },
)
async def content(
    artifact_id: str,
    scope: Caller,
    service: Service,
    read_for: Reader,
    range_: Annotated[str | None, Header(alias="Range")] = None,
    if_none_match: Annotated[str | None, Header(alias="If-None-Match")] = None,
    if_range: Annotated[str | None, Header(alias="If-Range")] = None,
) -> Response:
    """The verified bytes; one ``Range`` (``bytes=a-b``, ``a-``, ``-n``) gives 206; ``ETag`` is the content hash."""
    checked = checked_id(artifact_id)
    plan = await blocking(_plan_content, service.vault, scope, checked, range_, if_none_match, if_range, read_for)
    return _content_response(plan)


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


_DEFAULT_READ = ReadFor()  # purpose "default", recipient "user": what the fast path serves


def _plan_content(
    vault: Vault,
    scope: Scope,
    artifact_id: str,
    range_header: str | None,
    if_none_match: str | None,
    if_range: str | None,
    read_for: ReadFor = _DEFAULT_READ,
) -> _Content:
    """Look the artifact up, answer conditionals and ranges, and read (verify) the first piece; in a worker thread.

    One lookup (``Vault.open_artifact``) gives the descriptor and the stream;
    a conditional request looks first (``describe``) so a 304 opens no bytes.
    The returned plan holds the stream only if bytes remain to be sent.
    """
    stream: ArtifactStream | None = None
    if if_none_match is None:
        descriptor, stream = vault.open_artifact(scope, artifact_id, **read_for.kwargs())
    else:
        descriptor = vault.describe(scope, artifact_id, **read_for.kwargs())
    keep = False
    try:
        plan, start, end = _plan_headers(descriptor, range_header, if_none_match, if_range)
        if plan.status not in (200, 206):
            return plan
        if stream is None:
            stream = vault.stream(scope, artifact_id, **read_for.kwargs())
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
    types are downloaded, not rendered). Both the route and :class:`FastContent` send
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
        verified_pieces(plan.stream, plan.first, plan.remaining), status_code=plan.status, headers=plan.headers
    )


_CONTENT_PATH = re.compile(r"/v1/artifacts/([^/]+)/content")
_CONTENT_ROUTE = "/v1/artifacts/{artifact_id}/content"
_SESSION = re.compile(NAME_PATTERN)


class FastContent:
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
                    scope["refvault.route"] = _CONTENT_ROUTE  # the metrics' route label (refvault.server.metrics)
                    try:
                        artifact_id = checked_id(match.group(1))
                        plan = await blocking(_plan_content, self.vault, caller, artifact_id, *self._conditions(scope))
                        response = _content_response(plan)
                    except RefvaultError as exc:
                        response = problem_for(exc)  # what the app's RefvaultError handler sends
                    except Exception:
                        await internal_error()(scope, receive, send)  # as the app's last-resort handler ...
                        raise  # ... which also lets the server log it
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)

    def _scope(self, scope: Any) -> Scope | None:
        """The caller's scope if the request passes every check of the route's dependencies, else None.

        A read that names a purpose or a recipient is left to the route (the fast path serves the defaults).
        """
        names = (b"authorization", b"refvault-tenant", b"refvault-user", b"refvault-session")
        headers = _first_headers(scope, (*names, b"refvault-purpose", b"refvault-recipient"))
        authorization, tenant, user, session, purpose, recipient = headers
        if purpose is not None or recipient is not None:
            return None
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


async def verified_pieces(stream: ArtifactStream, first: bytes, remaining: int) -> AsyncIterator[bytes]:
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
