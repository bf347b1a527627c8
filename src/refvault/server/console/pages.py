"""The console's routes: sign-in and sign-out, the artifact list, one artifact, a run, the audit log.

Every page runs as its viewer's API key (:mod:`refvault.server.console.signin`) through the vault's own
methods with recipient ``user`` and purpose ``default``: the same scopes, grants and policy as the API.
**Absent, another tenant's, another user's and policy-denied artifacts get one and the same page** (404).
Vault calls run in worker threads (:func:`refvault.server.threads.blocking`). State changes (sign-in, sign-out,
verify, download links) are ``POST`` forms with a CSRF token; everything else is ``GET`` and changes nothing
but the audit log.
"""

# No ``from __future__ import annotations``: FastAPI reads the routes' annotations at runtime.
import json
from collections.abc import Callable
from datetime import UTC, date, timedelta
from typing import Annotated, Any, TypeVar
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from refvault.catalog.audit_log import AuditEntry, DisclosureEntry, chain_hash
from refvault.copies import LineageGraph
from refvault.errors import InvalidArgument, NotFound, PolicyDenied, RefvaultError
from refvault.ids import is_artifact_id
from refvault.model import Descriptor, Grant, Scope
from refvault.server.auth import caller_key_id
from refvault.server.console import signin, views
from refvault.server.console.render import STATIC, page, static_file
from refvault.server.console.signin import Viewer
from refvault.server.schema import PROBLEM_RESPONSE
from refvault.server.service import Service
from refvault.server.threads import blocking
from refvault.toolbox.trail import ToolCall
from refvault.vault.core import Vault

__all__ = ["ConsoleLink", "ConsoleLinkRequest", "api_router", "router"]

router = APIRouter(include_in_schema=False)
api_router = APIRouter(responses={"default": PROBLEM_RESPONSE})

PAGE_SIZE = 50
FILTER_MAX = 255
MAX_SESSIONS = 200  # sessions listed (and scanned by an unfiltered list), most recently used first
_FORM_MAX = 8192
T = TypeVar("T")


class ConsoleLinkRequest(BaseModel):
    """``POST /v1/console/sessions``: where the console should open once the link is followed."""

    model_config = ConfigDict(extra="forbid")

    next: Annotated[str, Field(max_length=1024, description="a path under /console")] = "/console"


class ConsoleLink(BaseModel):
    """A single-use console sign-in link, valid ``expires_in`` seconds."""

    url: str
    expires_in: int


@api_router.post("/console/sessions", status_code=201, response_model=ConsoleLink, tags=["console"])
async def console_link(
    body: ConsoleLinkRequest, request: Request, service: Service, key_id: Annotated[str, Depends(caller_key_id)]
) -> JSONResponse:
    """A single-use link (60 s) that signs a browser into the console as the calling key."""
    token = await blocking(signin.issue_link, service.vault, key_id, body.next)
    url = str(request.base_url).rstrip("/") + "/console/link/" + token
    expires = int(signin.LINK_TTL.total_seconds())
    return JSONResponse({"url": url, "expires_in": expires}, status_code=201, headers={"Cache-Control": "no-store"})


# -- sign-in -------------------------------------------------------------------------


def _cookie(request: Request, response: Response, name: str, value: str, max_age: timedelta) -> None:
    """A console cookie: ``HttpOnly``, ``SameSite=Strict``, path ``/console``, and ``Secure`` over HTTPS."""
    response.set_cookie(
        name,
        value,
        max_age=int(max_age.total_seconds()),
        path="/console",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


async def _form(request: Request) -> dict[str, str]:
    """A urlencoded form body (at most 8 KiB; each field's first value)."""
    body = await request.body()
    if len(body) > _FORM_MAX:
        return {}
    try:
        fields = parse_qs(body.decode("utf-8"), max_num_fields=20)
    except (UnicodeDecodeError, ValueError):
        return {}
    return {name: values[0] for name, values in fields.items()}


async def _login_page(
    request: Request, service: Service, *, error: str | None = None, status: int = 200, next_path: str = ""
) -> Response:
    nonce, token = await blocking(signin.login_token, service.vault)
    response = page("login.html", status=status, error=error, csrf=token, next=signin.checked_next(next_path))
    _cookie(request, response, signin.LOGIN_COOKIE, nonce, timedelta(hours=1))
    return response


@router.get("/console/login")
async def login_form(request: Request, service: Service, next: str = "/console") -> Response:
    return await _login_page(request, service, next_path=next)


@router.post("/console/login")
async def login(request: Request, service: Service) -> Response:
    form = await _form(request)
    pre = request.cookies.get(signin.LOGIN_COOKIE)
    if not await blocking(signin.valid_login_token, service.vault, pre, form.get("csrf")):
        return await _login_page(
            request, service, error="This form expired or was not sent from this console: try again.", status=403
        )
    cookie = await blocking(signin.sign_in_with_key, service.vault, form.get("key", "").strip())
    if cookie is None:
        return await _login_page(
            request, service, error="That API key is not valid here.", status=401, next_path=form.get("next", "")
        )
    response = RedirectResponse(signin.checked_next(form.get("next")), status_code=303)
    _cookie(request, response, signin.COOKIE, cookie, signin.SESSION_TTL)
    response.delete_cookie(signin.LOGIN_COOKIE, path="/console")
    return response


@router.get("/console/link/{token}")
async def follow_link(token: str, request: Request, service: Service) -> Response:
    redeemed = await blocking(signin.redeem_link, service.vault, token)
    if redeemed is None:
        return await _login_page(
            request,
            service,
            error="This sign-in link cannot be used: it was used already, expired, or is not valid here.",
            status=403,
        )
    cookie, next_path = redeemed
    # A page that moves on by itself, not a redirect: a link opened from another site is a cross-site
    # navigation, which would not carry the SameSite=Strict cookie through a redirect; this page's own
    # refresh is same-site, so the next page is signed in.
    response = page("signed_in.html", next=next_path)
    _cookie(request, response, signin.COOKIE, cookie, signin.SESSION_TTL)
    return response


async def _viewer(request: Request, service: Service) -> Viewer | None:
    return await blocking(signin.open_session, service.vault, request.cookies.get(signin.COOKIE))


def _to_login(request: Request) -> Response:
    target = request.url.path + (("?" + request.url.query) if request.url.query else "")
    return RedirectResponse("/console/login?" + urlencode({"next": target}), status_code=303)


async def _checked_form(request: Request, service: Service, viewer: Viewer) -> dict[str, str] | None:
    form = await _form(request)
    if not await blocking(signin.valid_csrf, service.vault, viewer, form.get("csrf")):
        return None
    return form


def _refused() -> Response:
    return page("error.html", status=403, title="Refused", message="This form was not sent from your console session.")


@router.post("/console/logout")
async def logout(request: Request, service: Service) -> Response:
    viewer = await _viewer(request, service)
    if viewer is None:
        return _to_login(request)
    if await _checked_form(request, service, viewer) is None:
        return _refused()
    await blocking(signin.end_session, service.vault, viewer)
    response = RedirectResponse("/console/login", status_code=303)
    response.delete_cookie(signin.COOKIE, path="/console")
    return response


@router.get("/console/static/{name}")
async def static(name: str) -> Response:
    if name not in STATIC:
        return page("error.html", status=404, title="Not found", message="No such file.")
    return static_file(name)


# -- shared ---------------------------------------------------------------------------


def _chrome(service: Service, viewer: Viewer, **context: Any) -> dict[str, Any]:
    """What every signed-in page's frame shows: who is signed in, and the CSRF token of its forms."""
    return {"viewer": viewer.principal, "csrf": signin.csrf_token(service.vault, viewer), **context}


def _sessions(vault: Vault, viewer: Viewer) -> list[str]:
    principal = viewer.principal
    found = vault.catalog.sessions(principal.tenant, principal.user, limit=MAX_SESSIONS)
    if principal.sessions is not None:
        found = [s for s in found if s in principal.sessions]
        found += sorted(principal.sessions - set(found))
    return found


def _absent() -> Response:
    return page(
        "error.html", status=404, title="Not found", message="There is no artifact with this id that you may see."
    )


def _locate(vault: Vault, viewer: Viewer, artifact_id: str, session: str | None) -> tuple[Scope, Descriptor]:
    """The scope the viewer reads the artifact in, and its descriptor; :class:`NotFound` for every refusal alike."""
    if not is_artifact_id(artifact_id):
        raise NotFound("-")
    if session is None:  # the viewer's own artifact: its session
        manifest = vault.catalog.by_ids(viewer.principal.tenant, [artifact_id]).get(artifact_id)
        if manifest is None or manifest.scope.user != viewer.principal.user:
            raise NotFound("-")
        session = manifest.scope.session
    try:
        scope = viewer.scope(session)
        return scope, vault.describe(scope, artifact_id)
    except (InvalidArgument, PolicyDenied, RefvaultError):
        raise NotFound("-") from None


def _quietly(call: Callable[[], T], default: T) -> T:
    """``call()``, or ``default`` when the vault refuses (a grantee sees no grants, no ledger)."""
    try:
        return call()
    except RefvaultError:
        return default


# -- the artifact list ---------------------------------------------------------------


def _day(text: str | None) -> date | None:
    if not text:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise InvalidArgument("dates are YYYY-MM-DD") from None


def _listing(vault: Vault, viewer: Viewer, filters: dict[str, str], page_number: int) -> dict[str, Any]:
    sessions = _sessions(vault, viewer)
    wanted = filters["session"]
    if wanted and wanted not in sessions:
        viewer.scope(wanted)  # InvalidArgument for a session the key does not allow
    found: list[tuple[str, Descriptor]] = []
    for session in [wanted] if wanted else sessions:
        found.extend((session, d) for d in vault.list(viewer.scope(session)))
    since, until = _day(filters["since"]), _day(filters["until"])
    media, label, status = filters["media"].strip().lower(), filters["label"].strip(), filters["status"]

    def keep(descriptor: Descriptor) -> bool:
        created = descriptor.created_at.astimezone(UTC).date()
        shown_status = _status(descriptor)
        return (
            (not media or descriptor.media_type.lower().startswith(media))
            and (not label or label in descriptor.labels)
            and (since is None or created >= since)
            and (until is None or created <= until)
            and (not status or shown_status == status)
        )

    kept = sorted((item for item in found if keep(item[1])), key=lambda item: item[1].created_at, reverse=True)
    start = (page_number - 1) * PAGE_SIZE
    return {
        "sessions": sessions,
        "items": [(s, d, _status(d)) for s, d in kept[start : start + PAGE_SIZE]],
        "total": len(kept),
        "page": page_number,
        "pages": max(1, -(-len(kept) // PAGE_SIZE)),
        "filters": filters,
    }


def _status(descriptor: Descriptor) -> str:
    """What the list's status filter matches: ``sealed``, ``shared``, or the capture's completeness status."""
    if descriptor.disclosure == "sealed":
        return "sealed"
    if descriptor.scope.get("shared"):
        return "shared"
    return str(descriptor.completeness.get("status", "unknown"))


@router.get("/console")
async def artifact_list(
    request: Request,
    service: Service,
    session: str = "",
    media: str = "",
    label: str = "",
    since: str = "",
    until: str = "",
    status: str = "",
    page_number: Annotated[str, Query(alias="page")] = "1",
) -> Response:
    """The key's artifacts. Query parameters are read here, leniently (a bad one is a console page, never the
    API's problem JSON); every filter is at most :data:`FILTER_MAX` characters."""
    viewer = await _viewer(request, service)
    if viewer is None:
        return _to_login(request)
    filters = {"session": session, "media": media, "label": label, "since": since, "until": until, "status": status}
    try:
        if any(len(value) > FILTER_MAX for value in filters.values()):
            raise InvalidArgument(f"a filter is at most {FILTER_MAX} characters")
        listing = await blocking(_listing, service.vault, viewer, filters, min(_whole(page_number, 1), 100_000) or 1)
    except InvalidArgument as exc:
        return page("error.html", status=400, title="Invalid filter", message=str(exc), **_chrome(service, viewer))

    def paged(number: int) -> str:
        return "/console?" + urlencode({**{k: v for k, v in filters.items() if v}, "page": number})

    return page("list.html", paged=paged, **listing, **_chrome(service, viewer))


# -- one artifact ---------------------------------------------------------------------


def _artifact_context(
    vault: Vault, viewer: Viewer, artifact_id: str, session: str | None, params: dict[str, str]
) -> dict[str, Any]:
    scope, descriptor = _locate(vault, viewer, artifact_id, session)
    kind = views.view_kind(descriptor)
    context: dict[str, Any] = {
        "scope": scope,
        "descriptor": descriptor,
        "descriptor_json": json.dumps(descriptor.to_dict(), indent=2, sort_keys=False, default=str),
        "kind": kind,
        "owned": descriptor.owner == scope,
        "grants": _quietly(lambda: vault.grants(scope, descriptor.artifact_id), list[Grant]()),
        "disclosures": _quietly(lambda: vault.disclosures(scope, descriptor.artifact_id), list[DisclosureEntry]()),
        "trail": _quietly(
            lambda: vault.audit(scope, artifact_id=descriptor.artifact_id, limit=100), list[AuditEntry]()
        ),
        "lineage": _lineage_svg(_quietly(lambda: vault.lineage(scope, descriptor.artifact_id, depth=4), None)),
        "view_error": None,
    }
    try:
        if kind == "text":
            context["text"] = views.text_view(vault, scope, descriptor, _whole(params.get("line"), 0))
        elif kind == "json":
            tree = views.json_view(vault, scope, descriptor)
            context["tree"] = tree
            if tree is None:
                context["kind"] = "text"
                context["text"] = views.text_view(vault, scope, descriptor, _whole(params.get("line"), 0))
        elif kind == "records":
            context["where"] = params.get("where", "")
            context["records"] = views.records_view(
                vault, scope, descriptor, where=params.get("where", ""), cursor=params.get("cursor") or None
            )
        elif kind == "hex":
            context["hex"] = views.hex_view(vault, scope, descriptor)
    except InvalidArgument as exc:
        context["view_error"] = str(exc)
    except RefvaultError as exc:
        context["view_error"] = f"{type(exc).__name__}: this view could not be read"
    return context


def _whole(text: str | None, default: int) -> int:
    try:
        value = int(text) if text else default
    except ValueError:
        return default
    return max(value, 0)


def _lineage_svg(graph: LineageGraph | None) -> dict[str, Any] | None:
    """Boxes by depth (ancestors left, copies right) and their edges, laid out here for an inline SVG."""
    if graph is None:
        return None
    columns: dict[int, list[str]] = {}
    for node in graph.nodes:
        columns.setdefault(node.depth, []).append(node.id)
    order = sorted(columns)
    width, height, gap_x, gap_y = 250, 44, 60, 16
    where: dict[str, tuple[int, int]] = {}
    for column, depth in enumerate(order):
        for row, node_id in enumerate(columns[depth]):
            where[node_id] = (10 + column * (width + gap_x), 10 + row * (height + gap_y))
    boxes = [
        {"node": node, "x": where[node.id][0], "y": where[node.id][1], "root": node.id == graph.root}
        for node in graph.nodes
    ]
    lines = [
        {
            "x1": where[s][0] + width,
            "y1": where[s][1] + height // 2,
            "x2": where[d][0],
            "y2": where[d][1] + height // 2,
            "kind": k,
        }
        for s, d, k in graph.edges
        if s in where and d in where
    ]
    tallest = max(len(ids) for ids in columns.values())
    return {
        "boxes": boxes,
        "lines": lines,
        "box_width": width,
        "box_height": height,
        "width": 20 + len(order) * (width + gap_x),
        "height": 20 + tallest * (height + gap_y),
        "truncated": graph.truncated,
        "edges": graph.edges,
    }


@router.get("/console/artifacts/{artifact_id}")
async def artifact_page(
    artifact_id: str,
    request: Request,
    service: Service,
    session: str | None = None,
) -> Response:
    viewer = await _viewer(request, service)
    if viewer is None:
        return _to_login(request)
    params = {k: v for k, v in request.query_params.items() if k in ("line", "where", "cursor")}
    try:
        context = await blocking(_artifact_context, service.vault, viewer, artifact_id, session, params)
    except NotFound:
        return _absent()
    return page("artifact.html", verified=None, **context, **_chrome(service, viewer))


@router.post("/console/artifacts/{artifact_id}/verify")
async def verify(artifact_id: str, request: Request, service: Service, session: str | None = None) -> Response:
    viewer = await _viewer(request, service)
    if viewer is None:
        return _to_login(request)
    if await _checked_form(request, service, viewer) is None:
        return _refused()

    def run() -> tuple[dict[str, Any], dict[str, Any]]:
        context = _artifact_context(service.vault, viewer, artifact_id, session, {})
        try:
            result = service.vault.verify_artifact(context["scope"], context["descriptor"].artifact_id)
            outcome = {"ok": True, "content_hash": result["content_hash"], "size": result["size"]}
        except RefvaultError as exc:
            outcome = {"ok": False, "error": type(exc).__name__}
        return context, outcome

    try:
        context, outcome = await blocking(run)
    except NotFound:
        return _absent()
    return page("artifact.html", verified=outcome, **context, **_chrome(service, viewer))


@router.post("/console/artifacts/{artifact_id}/download")
async def download(artifact_id: str, request: Request, service: Service, session: str | None = None) -> Response:
    """A capability link to the artifact (recipient ``user``, five minutes), followed at once: the download."""
    viewer = await _viewer(request, service)
    if viewer is None:
        return _to_login(request)
    if await _checked_form(request, service, viewer) is None:
        return _refused()

    def issue() -> str:
        scope, descriptor = _locate(service.vault, viewer, artifact_id, session)
        if descriptor.disclosure == "sealed":
            raise NotFound("-")
        return service.vault.link(
            scope, descriptor.artifact_id, recipient="user", purpose="default", expires_in=timedelta(minutes=5)
        )

    try:
        path = await blocking(issue)
    except NotFound:
        return _absent()
    return RedirectResponse(path, status_code=303, headers={"Referrer-Policy": "no-referrer"})


async def _image(artifact_id: str, request: Request, service: Service, session: str | None, thumb: bool) -> Response:
    viewer = await _viewer(request, service)
    if viewer is None:
        return Response(status_code=404)

    def read() -> tuple[bytes, str] | None:
        scope, descriptor = _locate(service.vault, viewer, artifact_id, session)
        if views.view_kind(descriptor) != "image":
            return None
        if thumb:
            made = views.thumbnail_png(service.vault, scope, descriptor)
            return None if made is None else (made, "image/png")
        if descriptor.size > views.IMAGE_MAX_BYTES:
            return None
        kind = descriptor.media_type.split(";")[0].strip().lower()
        return service.vault.read_bytes(scope, descriptor.artifact_id), kind

    try:
        found = await blocking(read)
    except NotFound:
        found = None
    if found is None:
        return _absent()
    data, media_type = found
    headers = {
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox; default-src 'none'",
        "Cache-Control": "private, no-store",
        "Cross-Origin-Resource-Policy": "same-origin",
    }
    return Response(data, media_type=media_type, headers=headers)


@router.get("/console/artifacts/{artifact_id}/thumbnail")
async def thumbnail(artifact_id: str, request: Request, service: Service, session: str | None = None) -> Response:
    return await _image(artifact_id, request, service, session, thumb=True)


@router.get("/console/artifacts/{artifact_id}/full")
async def full_page(artifact_id: str, request: Request, service: Service, session: str | None = None) -> Response:
    """The full image, on a console page of its own (the image itself is :func:`full_image`)."""
    viewer = await _viewer(request, service)
    if viewer is None:
        return _to_login(request)
    try:
        scope, descriptor = await blocking(_locate, service.vault, viewer, artifact_id, session)
    except NotFound:
        return _absent()
    if views.view_kind(descriptor) != "image":
        return _absent()
    return page("image.html", scope=scope, descriptor=descriptor, **_chrome(service, viewer))


@router.get("/console/artifacts/{artifact_id}/image")
async def full_image(artifact_id: str, request: Request, service: Service, session: str | None = None) -> Response:
    return await _image(artifact_id, request, service, session, thumb=False)


# -- runs and the audit log -------------------------------------------------------------


def _run(vault: Vault, viewer: Viewer, session: str) -> dict[str, Any]:
    scope = viewer.scope(session)
    entries: list[AuditEntry] = []
    after = 0
    while len(entries) < 5000:
        page_ = vault.audit(scope, after=after, limit=1000)
        entries.extend(e for e in page_ if e.session == session and e.user == scope.user)
        if len(page_) < 1000:
            break
        after = page_[-1].seq
    steps: list[dict[str, Any]] = []
    for entry in entries:
        call = ToolCall.from_entry(entry)
        if call is not None:
            steps.append({"kind": "tool_call", "entry": entry, "call": call})
        elif entry.action in ("guard_stop", "evidence", "put", "redact", "link", "share", "declassify"):
            steps.append({"kind": entry.action, "entry": entry, "call": None})
    records = vault.catalog.evidence_records(scope.tenant, scope.user, session, limit=1000)
    return {"session": session, "steps": steps, "evidence": records}


@router.get("/console/runs")
async def runs(request: Request, service: Service, session: str = "") -> Response:
    viewer = await _viewer(request, service)
    if viewer is None:
        return _to_login(request)
    sessions = await blocking(_sessions, service.vault, viewer)
    if not session:
        return page("runs.html", sessions=sessions, run=None, **_chrome(service, viewer))
    try:
        run = await blocking(_run, service.vault, viewer, session)
    except (InvalidArgument, RefvaultError):
        return page(
            "error.html",
            status=404,
            title="Not found",
            message="There is no run you may see by that name.",
            **_chrome(service, viewer),
        )
    return page("runs.html", sessions=sessions, run=run, **_chrome(service, viewer))


@router.get("/console/audit")
async def audit(
    request: Request,
    service: Service,
    session: str = "",
    after: str = "0",
) -> Response:
    viewer = await _viewer(request, service)
    if viewer is None:
        return _to_login(request)

    def read() -> dict[str, Any]:
        sessions = _sessions(service.vault, viewer)
        chosen = session or (sessions[0] if sessions else "default")
        scope = viewer.scope(chosen)
        entries = service.vault.audit(scope, after=_whole(after, 0), limit=PAGE_SIZE)
        seq, digest = service.vault.audit_head(scope.tenant)
        key = service.vault.catalog.find_api_key(viewer.key_id)
        admin = key is not None and key.admin
        return {
            "admin": admin,
            "report": service.vault.verify_audit(scope.tenant) if admin else None,  # the whole chain: an admin's
            "intact": [chain_hash(entry) == entry.hash for entry in entries],
            "sessions": sessions,
            "session": chosen,
            "entries": entries,
            "next_after": entries[-1].seq if len(entries) == PAGE_SIZE else None,
            "head": f"{seq}:{digest}",
        }

    try:
        context = await blocking(read)
    except InvalidArgument as exc:
        return page("error.html", status=400, title="Invalid session", message=str(exc), **_chrome(service, viewer))
    return page("audit.html", **context, **_chrome(service, viewer))
