"""Sharing grants, the access matrix: principals x doors -> the expected outcome, on every backend.

Every denial to a non-owner is byte-identical to an absent artifact (same class, same message), and the
grant is checked at every use: a revoke between two stream chunks stops the next chunk, a revoke between two
cursor pages stops the next page, and an expiry does the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest

from refvault import Principal, Ref, Scope, Toolbox, Vault, read
from refvault.errors import NotFound, RefvaultError
from refvault.ids import new_artifact_id
from tests.conftest import Clock

OWNER = Scope("acme", "ana", "s1")
TEXT = b"".join(f"line {i}: the quick brown fox\n".encode() for i in range(40))
RECORDS = b"".join(json.dumps({"k": i, "v": f"row {i}"}).encode() + b"\n" for i in range(5))
ABSENT = (NotFound, "artifact <id> not found in this scope")

# principal -> (the scope it reads in, the purpose it reads for)
PRINCIPALS: dict[str, Scope] = {
    "owner": OWNER,
    "grantee within purpose": Scope("acme", "bob", "s7"),
    "grantee with another purpose": Scope("acme", "carol", "s1"),
    "grantee after revoke": Scope("acme", "dave", "s1"),
    "grantee after expiry": Scope("acme", "erin", "s1"),
    "user of the tenant without a grant": Scope("acme", "frank", "s1"),
    "another tenant": Scope("globex", "bob", "s7"),
}
ALLOWED = {"owner", "grantee within purpose"}


class World:
    """One store with a text and a record artifact of OWNER's, shared as the principals' names say."""

    def __init__(self, vault: Vault, clock: Clock) -> None:
        self.vault = vault
        self.text = vault.put(OWNER, TEXT, media_type="text/plain").artifact_id
        self.records = vault.put(OWNER, RECORDS, media_type="application/x-ndjson").artifact_id
        for artifact_id in (self.text, self.records):
            vault.share(OWNER, artifact_id, to=Principal("acme", "bob", frozenset({"s7"})), purposes={"default"})
            vault.share(OWNER, artifact_id, to=Principal("acme", "carol"), purposes={"audit"})
            revoked = vault.share(OWNER, artifact_id, to=Principal("acme", "dave"))
            vault.revoke(OWNER, revoked.grant_id)
            vault.share(OWNER, artifact_id, to=Principal("acme", "erin"), expires_at=clock.now + timedelta(hours=1))
        clock.advance(hours=2)  # erin's grants are past their expiry from here on
        # cursors for the second page, minted by the readers who may mint one (a cursor is bound to its caller);
        # everyone else tries the grantee's: a cursor never authorises anything
        self.cursors: dict[Scope, str] = {}
        for minter in (OWNER, PRINCIPALS["grantee within purpose"]):
            self.cursors[minter] = read.query(vault, minter, self.records, limit=2)["next_cursor"]

    def cursor(self, scope: Scope) -> str:
        return self.cursors.get(scope, self.cursors[PRINCIPALS["grantee within purpose"]])


Door = Callable[[World, Scope, str, str], Any]


def _stream(w: World, s: Scope, text_id: str, records_id: str) -> bytes:
    with w.vault.stream(s, text_id) as stream:
        return stream.read()


def _observed(observation: Any, artifact_id: str) -> str:
    """A Toolbox observation as a door's outcome: raised like the vault would, so a refusal compares with absence."""
    if observation.is_error:  # a bad Ref reads the same for absent and refused: "no artifact ... can be read here"
        refused = "not found" in observation.content or "no artifact" in observation.content
        raise NotFound(artifact_id) if refused else RefvaultError(observation.content)
    return str(observation.content)


def _load(w: World, s: Scope, text_id: str, records_id: str) -> str:
    observation = Toolbox(w.vault).call_sync("load_artifacts", {"artifact_ids": [text_id]}, scope=s)
    (result,) = json.loads(_observed(observation, text_id))["results"]
    if result["status"] != "loaded":
        raise NotFound(text_id) if result.get("error") == "NotFound" else RefvaultError(str(result))
    return observation.joined_text()


def _ref(w: World, s: Scope, text_id: str, records_id: str) -> str:
    box = Toolbox(w.vault)

    @box.tool
    def size(doc: Ref) -> int:
        """The document's size."""
        return len(doc.read())

    return _observed(box.call_sync("size", {"doc": text_id}, scope=s), text_id)


def _link(w: World, s: Scope, text_id: str, records_id: str) -> bytes:
    opened = w.vault.open_link(w.vault.link(s, text_id, recipient="user").removeprefix("/v1/links/"))
    with opened.stream as stream:
        return stream.read(opened.end - opened.start)


DOORS: dict[str, Door] = {
    "describe": lambda w, s, t, r: w.vault.describe(s, t).content_hash,
    "bytes": lambda w, s, t, r: w.vault.read_bytes(s, t),
    "range": lambda w, s, t, r: w.vault.read_range(s, t, 5, 20),
    "stream": _stream,
    "window": lambda w, s, t, r: read.window(w.vault, s, t, lines=[0, 3])["text"],
    "grep": lambda w, s, t, r: [m["line"] for m in read.grep(w.vault, s, t, "line 1")["matches"]],
    "query": lambda w, s, t, r: [x["index"] for x in read.query(w.vault, s, r, limit=2)["records"]],
    "next cursor page": lambda w, s, t, r: [
        x["index"] for x in read.query(w.vault, s, r, limit=2, cursor=w.cursor(s))["records"]
    ],
    "load_artifacts": _load,
    "Ref": _ref,
    "link": _link,
}
EXPECTED_OK: dict[str, Any] = {
    "bytes": TEXT,
    "range": TEXT[5:25],
    "stream": TEXT,
    "window": "".join(TEXT.decode().splitlines(keepends=True)[:3]),
    "grep": [1, *list(range(10, 20))],
    "query": [0, 1],
    "next cursor page": [2, 3],
    "Ref": str(len(TEXT)),
    "link": TEXT,
}


def outcome(door: Door, w: World, scope: Scope, text_id: str, records_id: str) -> tuple[type, Any]:
    try:
        got = door(w, scope, text_id, records_id)
    except RefvaultError as exc:
        return type(exc), str(exc).replace(text_id, "<id>").replace(records_id, "<id>")
    return type(None), got


@pytest.fixture
def world(vault: Vault, clock: Clock) -> World:
    return World(vault, clock)


@pytest.mark.parametrize("principal", sorted(PRINCIPALS))
def test_the_access_matrix(world: World, principal: str) -> None:
    scope = PRINCIPALS[principal]
    for name, door in DOORS.items():
        got = outcome(door, world, scope, world.text, world.records)
        if principal in ALLOWED:
            assert got[0] is type(None), (principal, name, got)
            if name in EXPECTED_OK:
                assert got[1] == EXPECTED_OK[name], (principal, name)
        else:
            absent = outcome(door, world, scope, new_artifact_id(), new_artifact_id())
            assert got == absent == ABSENT, (principal, name)
    listed = {d.artifact_id: d for d in world.vault.list(scope)}
    if principal in ALLOWED:
        assert set(listed) >= {world.text, world.records}
        for artifact_id in (world.text, world.records):
            marked = listed[artifact_id].scope
            assert marked.get("shared", False) is (principal != "owner")
            assert (marked.get("grant_id") is None) is (principal == "owner")
    else:
        assert not {world.text, world.records} & set(listed)


def test_describe_door_shows_the_same_hash_to_owner_and_grantee(world: World) -> None:
    mine = world.vault.describe(OWNER, world.text)
    theirs = world.vault.describe(PRINCIPALS["grantee within purpose"], world.text)
    assert theirs.content_hash == mine.content_hash
    assert theirs.owner == OWNER  # the grantee sees whose artifact it is, marked shared
    assert theirs.scope["shared"] is True
    assert "shared" not in mine.scope


def test_grantee_in_a_session_the_grant_does_not_name_is_refused_like_absent(world: World) -> None:
    elsewhere = Scope("acme", "bob", "s8")  # bob's grant names session s7 only
    for name, door in DOORS.items():
        got = outcome(door, world, elsewhere, world.text, world.records)
        assert got == outcome(door, world, elsewhere, new_artifact_id(), new_artifact_id()) == ABSENT, name


def test_a_purpose_outside_the_grant_is_refused_like_absent(vault: Vault) -> None:
    d = vault.put(OWNER, TEXT, media_type="text/plain")
    bob = Scope("acme", "bob", "s1")
    vault.share(OWNER, d.artifact_id, to=Principal("acme", "bob"), purposes={"support"}, recipients={"model:*"})
    assert vault.read_bytes(bob, d.artifact_id, purpose="support", recipient="model:claude") == TEXT
    for purpose, recipient in [("default", "model:claude"), ("support", "user"), ("support", "tool:grep")]:
        for absent in (d.artifact_id, new_artifact_id()):
            with pytest.raises(NotFound) as caught:
                vault.read_bytes(bob, absent, purpose=purpose, recipient=recipient)
            assert str(caught.value) == f"artifact {absent} not found in this scope"
    listed = [x.artifact_id for x in vault.list(bob, purpose="support", recipient="model:x")]
    assert listed == [d.artifact_id]
    assert vault.list(bob) == []  # the default purpose is outside the grant


BIG = bytes(range(256)) * (10 * 1024)  # 2.5 MiB: three chunks of 1 MiB


def test_revoke_between_two_stream_chunks_stops_the_next_chunk(vault: Vault) -> None:
    d = vault.put(OWNER, BIG)
    bob = Scope("acme", "bob", "s1")
    grant = vault.share(OWNER, d.artifact_id, to=Principal("acme", "bob"))
    with vault.stream(bob, d.artifact_id) as stream:
        first = stream.read(1 << 20)
        assert first == BIG[: 1 << 20]
        vault.revoke(OWNER, grant.grant_id)
        with pytest.raises(NotFound) as caught:
            stream.read(1 << 20)
    assert str(caught.value) == f"artifact {d.artifact_id} not found in this scope"
    with vault.stream(OWNER, d.artifact_id) as stream:  # the owner's stream is unaffected
        assert stream.read() == BIG


def test_grant_expiry_between_two_stream_chunks_stops_the_next_chunk(vault: Vault, clock: Clock) -> None:
    d = vault.put(OWNER, BIG)
    bob = Scope("acme", "bob", "s1")
    vault.share(OWNER, d.artifact_id, to=Principal("acme", "bob"), expires_at=clock.now + timedelta(minutes=5))
    with vault.stream(bob, d.artifact_id) as stream:
        assert stream.read(1 << 20) == BIG[: 1 << 20]
        clock.advance(minutes=6)
        with pytest.raises(NotFound):
            stream.read(1 << 20)


def test_revoke_between_cursor_pages_stops_the_next_page(vault: Vault) -> None:
    d = vault.put(OWNER, RECORDS, media_type="application/x-ndjson")
    bob = Scope("acme", "bob", "s1")
    grant = vault.share(OWNER, d.artifact_id, to=Principal("acme", "bob"))
    page = read.query(vault, bob, d.artifact_id, limit=2)
    assert [r["index"] for r in page["records"]] == [0, 1]
    following = read.query(vault, bob, d.artifact_id, limit=2, cursor=page["next_cursor"])
    assert [r["index"] for r in following["records"]] == [2, 3]  # the cursor works while the grant lives
    vault.revoke(OWNER, grant.grant_id)
    with pytest.raises(NotFound) as caught:
        read.query(vault, bob, d.artifact_id, limit=2, cursor=following["next_cursor"])
    assert str(caught.value) == f"artifact {d.artifact_id} not found in this scope"
    assert [r["index"] for r in read.query(vault, OWNER, d.artifact_id, limit=5)["records"]] == [0, 1, 2, 3, 4]


def test_revoke_between_window_continuations_stops_the_next_window(vault: Vault) -> None:
    d = vault.put(OWNER, TEXT, media_type="text/plain")
    bob = Scope("acme", "bob", "s1")
    grant = vault.share(OWNER, d.artifact_id, to=Principal("acme", "bob"))
    first = read.window(vault, bob, d.artifact_id, lines=[0, 2])
    assert first["next"] is not None
    vault.revoke(OWNER, grant.grant_id)
    with pytest.raises(NotFound):
        read.window(vault, bob, d.artifact_id, **first["next"])


def test_a_sealed_grant_lets_tools_resolve_but_not_the_model_read(vault: Vault) -> None:
    from refvault.errors import SealedArtifact

    d = vault.put(OWNER, TEXT, media_type="text/plain")  # disclosure "model" for its owner
    bob = Scope("acme", "bob", "s1")
    vault.share(OWNER, d.artifact_id, to=Principal("acme", "bob"), disclosure="sealed")
    assert vault.describe(bob, d.artifact_id).disclosure == "sealed"
    assert vault.describe(OWNER, d.artifact_id).disclosure == "model"
    assert vault.read_bytes(bob, d.artifact_id) == TEXT  # what a tool resolving a Ref reads
    for model_read in (
        lambda: read.window(vault, bob, d.artifact_id),
        lambda: read.grep(vault, bob, d.artifact_id, "fox"),
    ):
        with pytest.raises(SealedArtifact):
            model_read()
    assert read.window(vault, OWNER, d.artifact_id, lines=[0, 1])["text"] == "line 0: the quick brown fox\n"


def test_a_model_grant_never_unseals_a_sealed_artifact(vault: Vault) -> None:
    d = vault.put(OWNER, TEXT, media_type="text/plain", disclosure="sealed")
    bob = Scope("acme", "bob", "s1")
    vault.share(OWNER, d.artifact_id, to=Principal("acme", "bob"), disclosure="model")
    assert vault.describe(bob, d.artifact_id).disclosure == "sealed"


def _shared_outcomes(vault: Vault, scope: Scope, artifact_id: str) -> dict[str, tuple[type, Any]]:
    doors: dict[str, Callable[[], Any]] = {
        "describe": lambda: vault.describe(scope, artifact_id),
        "bytes": lambda: vault.read_bytes(scope, artifact_id),
        "delete": lambda: vault.delete(scope, artifact_id),
        "share": lambda: vault.share(scope, artifact_id, to=Principal("acme", "zed")),
        "grants": lambda: vault.grants(scope, artifact_id),
    }
    got: dict[str, tuple[type, Any]] = {}
    for name, call in doors.items():
        try:
            call()
            got[name] = (type(None), "ok")
        except RefvaultError as exc:
            got[name] = (type(exc), str(exc).replace(artifact_id, "<id>"))
    return got


def test_a_grantee_can_neither_delete_nor_reshare_nor_list_grants(vault: Vault) -> None:
    d = vault.put(OWNER, TEXT)
    bob = Scope("acme", "bob", "s1")
    vault.share(OWNER, d.artifact_id, to=Principal("acme", "bob"))
    got = _shared_outcomes(vault, bob, d.artifact_id)
    assert got["describe"][0] is type(None)
    assert got["bytes"][0] is type(None)
    for name in ("delete", "share", "grants"):
        assert got[name] == ABSENT, name
    assert vault.read_bytes(OWNER, d.artifact_id) == TEXT  # not deleted
    assert [g.to.user for g in vault.grants(OWNER, d.artifact_id)] == ["bob"]  # no re-share recorded


# -- over HTTP, through the Client ---------------------------------------------------------------------------------


class _Through(httpx.BaseTransport):
    """Hands each request of a Client to the app's TestClient (the app runs in process, over the backend's vault)."""

    def __init__(self, test_client: Any) -> None:
        self.test_client = test_client

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        answer = self.test_client.request(
            request.method, str(request.url), headers=dict(request.headers), content=request.read()
        )
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)


class Http:
    """An app over the backend's vault, and a Client per principal (each with its own API key)."""

    def __init__(self, vault: Vault, http: Any) -> None:
        from refvault import Client
        from refvault.keys import create_key

        def client(tenant: str, user: str) -> Client:
            return Client("http://testserver", create_key(vault, tenant, user)[1], transport=_Through(http))

        self.ana, self.bob = client("acme", "ana"), client("acme", "bob")
        self.frank, self.globex = client("acme", "frank"), client("globex", "bob")


@pytest.fixture
def http(vault: Vault) -> Any:
    from fastapi.testclient import TestClient

    from refvault.server.app import create_app

    with TestClient(create_app(vault), raise_server_exceptions=False) as test_client:
        yield Http(vault, test_client)


def _http_outcome(call: Callable[[str], Any], artifact_id: str) -> tuple[type, Any]:
    """``call(artifact_id)``'s result, or its error's class and message with the id written ``<id>``."""
    try:
        got = call(artifact_id)
    except RefvaultError as exc:
        return type(exc), str(exc).replace(artifact_id, "<id>")
    return type(None), got


def test_share_read_list_and_revoke_over_http(http: Http, clock: Clock) -> None:
    bob = Scope("acme", "bob", "s7")
    d = http.ana.put(OWNER, TEXT, media_type="text/plain")
    grant = http.ana.share(
        OWNER, d.artifact_id, to=Principal("acme", "bob", frozenset({"s7"})), expires_at=clock.now + timedelta(hours=1)
    )
    assert grant.to == Principal("acme", "bob", frozenset({"s7"}))
    assert grant.expires_at is not None
    assert http.ana.grants(OWNER, d.artifact_id) == [grant]
    assert http.bob.read_bytes(bob, d.artifact_id) == TEXT
    assert http.bob.describe(bob, d.artifact_id).scope["grant_id"] == grant.grant_id
    assert read.window(http.bob, bob, d.artifact_id, lines=[0, 1])["text"] == "line 0: the quick brown fox\n"
    listed = http.bob.list(bob)
    assert [x.artifact_id for x in listed] == [d.artifact_id]
    assert listed[0].scope["shared"] is True
    with http.bob.stream(bob, d.artifact_id) as stream:
        assert stream.read() == TEXT
    revoked = http.ana.revoke(OWNER, grant.grant_id)
    assert revoked.revoked_at is not None
    for door in (
        lambda a: http.bob.read_bytes(bob, a),
        lambda a: http.bob.describe(bob, a),
        lambda a: read.window(http.bob, bob, a, lines=[0, 1]),
    ):
        assert _http_outcome(door, d.artifact_id) == ABSENT
        assert _http_outcome(door, new_artifact_id()) == ABSENT
    assert http.bob.list(bob) == []


def test_only_the_owner_shares_over_http_and_never_across_tenants(http: Http) -> None:
    from refvault.errors import GrantNotFound, InvalidArgument

    d = http.ana.put(OWNER, TEXT)
    frank = Scope("acme", "frank", "s1")
    for artifact_id in (d.artifact_id, new_artifact_id()):
        got = _http_outcome(lambda a: http.frank.share(frank, a, to=Principal("acme", "zed")), artifact_id)
        assert got == ABSENT
        assert _http_outcome(lambda a: http.frank.grants(frank, a), artifact_id) == ABSENT
    with pytest.raises(InvalidArgument, match="a grant never crosses tenants"):
        http.ana.share(OWNER, d.artifact_id, to=Principal("globex", "bob"))
    grant = http.ana.share(OWNER, d.artifact_id, to=Principal("acme", "bob"))
    with pytest.raises(GrantNotFound) as caught:
        http.frank.revoke(frank, grant.grant_id)
    assert str(caught.value) == f"grant {grant.grant_id} not found in this scope"
    assert http.bob.read_bytes(Scope("acme", "bob", "s1"), d.artifact_id) == TEXT  # frank revoked nothing
    globex = Scope("globex", "bob", "s1")
    assert _http_outcome(lambda a: http.globex.read_bytes(globex, a), d.artifact_id) == ABSENT


# -- the Ref door: a grantee's tools resolve the artifact by reference ---------------------------------------------


def test_a_grantees_tool_resolves_a_ref_until_the_grant_is_revoked(vault: Vault) -> None:
    d = vault.put(OWNER, TEXT, media_type="text/plain")
    bob = Scope("acme", "bob", "s1")
    grant = vault.share(OWNER, d.artifact_id, to=Principal("acme", "bob"), disclosure="sealed")
    box = Toolbox(vault)

    @box.tool
    def size(doc: Ref) -> int:
        return len(doc.read())

    assert box.call_sync("size", {"doc": d.artifact_id}, scope=bob).content == str(len(TEXT))  # sealed: Ref-only
    vault.revoke(OWNER, grant.grant_id)
    refused = box.call_sync("size", {"doc": d.artifact_id}, scope=bob)
    absent_id = new_artifact_id()
    absent = box.call_sync("size", {"doc": absent_id}, scope=bob)
    assert refused.is_error
    assert absent.is_error
    assert refused.content.replace(d.artifact_id, "<id>") == absent.content.replace(absent_id, "<id>")
