"""Every name ADK accepts maps to a refvault scope, and no two ADK names share one.

The attack: ``RefvaultArtifactService`` refused names ADK's own services accept (an Agent Engine
app name, a namespaced user id such as ``group/user123``, odd session ids); a naive fix that
replaced the characters refvault cannot hold (``/`` → ``_``) would put ``group/user123`` and
``group_user123`` into one scope. Here: the mapping is injective on look-alike names (hypothesis,
and the escape decodes back to the name), look-alike users and apps keep their artifacts apart
through the real service and a real ADK Runner, the names from the issue work end to end, and
``InputValidationError`` is raised exactly where ADK's ``InMemoryArtifactService`` raises it.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.artifacts import InMemoryArtifactService
from google.adk.artifacts.base_artifact_service import BaseArtifactService
from google.adk.errors.input_validation_error import InputValidationError
from google.adk.models.llm_request import LlmRequest
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from hypothesis import given, settings
from hypothesis import strategies as st

from refvault import Ref, Toolbox, Vault
from refvault.errors import InvalidArgument
from refvault.ids import check_name
from refvault.integrations.adk import RESERVED_PREFIX, RefvaultArtifactService, scope_for, scope_name, tools
from tests.integrations.test_adk import ID, ScriptedLlm, call, responses, say, user_text

AGENT_ENGINE = "projects/123/locations/us-central1/reasoningEngines/456"
LOOK_ALIKE_USERS = [
    "group/user123",
    "group_user123",
    "group%2Fuser123",
    "group+2Fuser123",
    "group\\user123",
    "_adk+e:group+2Fuser123",  # what "group/user123" encodes to, given as a name: must not land in its scope
    "Group/user123",
]
ESCAPED, HASHED = RESERVED_PREFIX + "e:", RESERVED_PREFIX + "h:"
SCOPE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._:@+\-]{0,127}")
KEPT = re.compile(r"[A-Za-z0-9._:@-]")

# Look-alike names: pieces of escapes, separators, the reserved prefix and its forms, non-ASCII, lone surrogates.
PIECES = ["/", "\\", "%", "%2F", "+", "+2F", "2F", "_", ":", ".", "-", "@", " ", "g", "u", "user", "é", "\ud800"]
PIECES += [RESERVED_PREFIX, ESCAPED, HASHED, "_adk", "e:", "h:", "\x00", "Ω", "\u200b"]
look_alikes = st.lists(st.sampled_from(PIECES), max_size=12).map("".join)
any_names = look_alikes | st.text(st.characters(codec=None), max_size=160) | st.text(min_size=100, max_size=300)


def decode(encoded: str) -> str | None:
    """Undo the escape form (``+HH`` per UTF-8 byte); None for the other forms."""
    if not encoded.startswith(ESCAPED):
        return None
    body = encoded[len(ESCAPED) :]
    out = bytearray()
    index = 0
    while index < len(body):
        if body[index] == "+":
            out.append(int(body[index + 1 : index + 3], 16))
            index += 3
        else:
            out += body[index].encode("ascii")
            index += 1
    return out.decode("utf-8", "surrogatepass")


@settings(max_examples=400, deadline=None)
@given(any_names)
def test_each_name_maps_to_a_scope_name_it_can_be_recovered_from(name: str) -> None:
    """Pass-through names are unchanged and never start with the prefix; escapes decode back; the rest is a SHA-256.

    Together: the mapping is injective (up to SHA-256 collisions among names over about 120 characters).
    """
    mapped = scope_name(name)
    assert SCOPE_NAME.fullmatch(mapped)
    check_name("session", mapped)
    if not mapped.startswith(RESERVED_PREFIX):
        assert mapped == name
    elif mapped.startswith(ESCAPED):
        assert decode(mapped) == name
    else:
        assert mapped == HASHED + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
        escaped = sum(1 if KEPT.fullmatch(c) else 3 * len(c.encode("utf-8", "surrogatepass")) for c in name)
        assert len(ESCAPED) + escaped > 128  # no room for the escape form
    if SCOPE_NAME.fullmatch(name) and not name.startswith(RESERVED_PREFIX):
        assert mapped == name  # existing stores keep working: their names read the same


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(look_alikes, look_alikes, look_alikes) | st.tuples(any_names, any_names, any_names),
        min_size=2,
        max_size=8,
        unique=True,
    )
)
def test_different_adk_triples_never_share_a_scope(triples: list[tuple[str, str, str]]) -> None:
    scopes = [scope_for(*triple) for triple in triples]
    assert len(set(scopes)) == len(triples)


def test_the_names_from_the_issue_are_accepted_and_readable() -> None:
    assert scope_for(AGENT_ENGINE, "group/user123", "s1").tenant == (
        "_adk+e:projects+2F123+2Flocations+2Fus-central1+2FreasoningEngines+2F456"
    )
    assert scope_name("group/user123") == "_adk+e:group+2Fuser123"
    assert scope_name("app") == "app"
    assert scope_name("u1@example.com") == "u1@example.com"
    assert scope_name("c8f3a5e2-0b1d-4c1e-9f7a-2d3b4c5d6e7f") == "c8f3a5e2-0b1d-4c1e-9f7a-2d3b4c5d6e7f"


# -- through the real service -------------------------------------------------------------------------------------


def both(vault: Vault) -> tuple[InMemoryArtifactService, RefvaultArtifactService]:
    return InMemoryArtifactService(), RefvaultArtifactService(vault)


async def outcome(call_: Callable[[], Awaitable[Any]]) -> Any:
    try:
        result = await call_()
    except InputValidationError as exc:
        return ("InputValidationError", isinstance(exc, InvalidArgument))
    if isinstance(result, list) and result and not isinstance(result[0], int | str):
        return [v.version for v in result]
    return getattr(result, "version", result)


async def same(reference: BaseArtifactService, ours: BaseArtifactService, method: str, **kwargs: Any) -> Any:
    """Call both services; their answers must agree (versions compared by number); return ours."""
    expected = await outcome(lambda: getattr(reference, method)(**kwargs))
    actual = await outcome(lambda: getattr(ours, method)(**kwargs))
    if isinstance(expected, tuple) and expected[0] == "InputValidationError":
        assert actual == ("InputValidationError", True), (method, kwargs)  # ADK's error, and refvault's
    else:
        assert actual == expected, (method, kwargs)
    return actual


def test_agent_engine_apps_and_namespaced_users_work_as_in_adk() -> None:
    vault = Vault.open("memory://")
    reference, ours = both(vault)
    text = types.Part.from_text(text="quarterly numbers")

    async def scenario() -> None:
        for app, user in [(AGENT_ENGINE, "group/user123"), (AGENT_ENGINE, "u1"), ("app", "group/user123")]:
            at = {"app_name": app, "user_id": user}
            assert (
                await same(reference, ours, "save_artifact", **at, session_id="s 1", filename="a.txt", artifact=text)
                == 0
            )
            assert (
                await same(reference, ours, "save_artifact", **at, session_id="s 1", filename="a.txt", artifact=text)
                == 1
            )
            await same(reference, ours, "save_artifact", **at, filename="user:profile", artifact=text)
            assert await ours.load_artifact(**at, session_id="s 1", filename="a.txt") == text
            await same(reference, ours, "list_artifact_keys", **at, session_id="s 1")
            await same(reference, ours, "list_versions", **at, session_id="s 1", filename="a.txt")
            await same(reference, ours, "list_artifact_versions", **at, session_id="s 1", filename="a.txt")
            assert await ours.list_artifact_keys(**at, session_id="s 1") == ["a.txt", "user:profile"]

    asyncio.run(scenario())
    vault.close()


ODD_SESSIONS = ["user", "user/x", "user\\x", "sess ion", "ünï", "\ud800", "s" * 500, "a/b/c", "x/user", ESCAPED + "s1"]


@pytest.mark.parametrize("session", ODD_SESSIONS)
def test_reads_of_odd_session_ids_answer_as_adk_does(session: str) -> None:
    """ADK answers reads for these session ids with [] and None (and refuses saves under "user…" only)."""
    vault = Vault.open("memory://")
    reference, ours = both(vault)
    at = {"app_name": "app", "user_id": "u1", "session_id": session}

    async def scenario() -> None:
        await same(reference, ours, "save_artifact", **at, filename="user:shared", artifact=types.Part(text="u"))
        assert await same(reference, ours, "load_artifact", **at, filename="a.txt") is None
        assert await same(reference, ours, "get_artifact_version", **at, filename="a.txt") is None
        assert await same(reference, ours, "list_versions", **at, filename="a.txt") == []
        assert await same(reference, ours, "list_artifact_versions", **at, filename="a.txt") == []
        assert await same(reference, ours, "list_artifact_keys", **at) == ["user:shared"]
        await same(reference, ours, "delete_artifact", **at, filename="a.txt")
        saved = await same(reference, ours, "save_artifact", **at, filename="a.txt", artifact=types.Part(text="s"))
        if saved == 0:  # ADK saves under it: so does refvault, in its own scope
            assert await ours.load_artifact(**at, filename="a.txt") == types.Part(text="s")
            assert await same(reference, ours, "list_artifact_keys", **at) == ["a.txt", "user:shared"]

    asyncio.run(scenario())
    vault.close()


def test_look_alike_users_never_see_each_others_artifacts() -> None:
    vault = Vault.open("memory://")
    ours = RefvaultArtifactService(vault)

    async def scenario() -> None:
        for user in LOOK_ALIKE_USERS:
            for session, filename in (("s1", "a.txt"), (None, "user:profile")):
                await ours.save_artifact(
                    app_name=AGENT_ENGINE,
                    user_id=user,
                    session_id=session,
                    filename=filename,
                    artifact=types.Part(text=f"{user}'s {filename}"),
                )
        for user in LOOK_ALIKE_USERS:
            at = {"app_name": AGENT_ENGINE, "user_id": user, "session_id": "s1"}
            assert await ours.list_versions(**at, filename="a.txt") == [0]
            assert await ours.load_artifact(**at, filename="a.txt") == types.Part(text=f"{user}'s a.txt")
            assert await ours.load_artifact(**at, filename="user:profile") == types.Part(text=f"{user}'s user:profile")
        scopes = {scope_for(AGENT_ENGINE, user, "s1") for user in LOOK_ALIKE_USERS}
        assert len(scopes) == len(LOOK_ALIKE_USERS)
        for scope in scopes:
            assert len(vault.list(scope)) == 1

    asyncio.run(scenario())
    vault.close()


def test_names_adks_flat_keys_alias_stay_apart_here() -> None:
    """ADK's in-memory store keys "a/b" + "c" and "a" + "b/c" alike (one flat "a/b/c/..." key); refvault does not."""
    vault = Vault.open("memory://")
    reference, ours = both(vault)
    first = {"app_name": "a/b", "user_id": "c", "session_id": "s"}
    second = {"app_name": "a", "user_id": "b/c", "session_id": "s"}

    async def scenario() -> None:
        for service in (reference, ours):
            await service.save_artifact(**first, filename="f", artifact=types.Part(text="first"))
        assert await reference.load_artifact(**second, filename="f") == types.Part(text="first")  # ADK: shared
        assert await ours.load_artifact(**second, filename="f") is None
        assert await ours.list_artifact_keys(**second) == []
        assert await ours.load_artifact(**first, filename="f") == types.Part(text="first")

    asyncio.run(scenario())
    vault.close()


# -- InputValidationError exactly where ADK raises it -------------------------------------------------------------

BAD_NAMES = [
    "",
    "   ",
    "a\x00b",
    "/abs",
    "\\abs",
    "C:x",
    "c:",
    "..",
    "a/../b",
    "a\\..\\b",
    "x/users/y",
    "x\\Sessions\\y",
]
METHODS: list[tuple[str, dict[str, Any]]] = [
    ("save_artifact", {"filename": "a.txt", "artifact": types.Part(text="x")}),
    ("load_artifact", {"filename": "a.txt"}),
    ("list_artifact_keys", {}),
    ("list_versions", {"filename": "a.txt"}),
    ("list_artifact_versions", {"filename": "a.txt"}),
    ("get_artifact_version", {"filename": "a.txt"}),
    ("delete_artifact", {"filename": "a.txt"}),
]


@pytest.mark.parametrize("field", ["app_name", "user_id", "session_id"])
def test_input_validation_errors_are_raised_exactly_where_adk_raises_them(field: str) -> None:
    vault = Vault.open("memory://")
    reference, ours = both(vault)
    refused = 0

    async def scenario() -> None:
        nonlocal refused
        for bad in [*BAD_NAMES, "user", "user/x", "user\\x"]:
            for method, extra in METHODS:
                at = {"app_name": "app", "user_id": "u1", "session_id": "s1", field: bad, **extra}
                got = await same(reference, ours, method, **at)
                if got == ("InputValidationError", True):
                    refused += 1
                    with pytest.raises(InputValidationError) as caught:
                        await getattr(ours, method)(**at)
                    if len(bad.strip()) > 2 and bad in BAD_NAMES:  # ("user" is named as ADK's reserved value)
                        assert bad not in str(caught.value)  # the name is not echoed

    asyncio.run(scenario())
    vault.close()
    assert refused >= len(BAD_NAMES) * len(METHODS)  # every bad name, every method (save: "user…" sessions too)


def test_filenames_are_labels_as_in_adks_in_memory_service() -> None:
    """A filename is never a path here (as in ADK's in-memory and GCS services): "../x" is a name like any other."""
    vault = Vault.open("memory://")
    reference, ours = both(vault)
    at = {"app_name": "app", "user_id": "u1", "session_id": "s1"}

    async def scenario() -> None:
        for filename in ["../../etc/passwd", "/abs", "C:\\x", "metadata.json", "a/versions/b", "user:../x"]:
            assert (
                await same(reference, ours, "save_artifact", **at, filename=filename, artifact=types.Part(text="x"))
                == 0
            )
            assert await ours.load_artifact(**at, filename=filename) == types.Part(text="x")
        await same(reference, ours, "list_artifact_keys", **at)
        assert await ours.list_artifact_keys(**{**at, "session_id": "s2"}) == ["user:../x"]

    asyncio.run(scenario())
    vault.close()


# -- the tools share the mapping ------------------------------------------------------------------------------------


def test_a_ref_tool_in_an_agent_engine_session_reads_that_sessions_artifacts_only(tmp_path: Path) -> None:
    """The service and the tools share one mapping: an id saved in a session resolves there, not for a look-alike."""
    with Vault.open(tmp_path / "store") as vault:
        box = Toolbox(vault)
        service = RefvaultArtifactService(vault)
        sessions = InMemorySessionService()

        @box.tool
        def count_words(doc: Ref) -> int:
            """Count the words of a document."""
            return len(doc.text().split())

        def script(request: LlmRequest, turn: int) -> list[types.Part]:
            if turn == 0:
                return call("count_words", doc=ID.findall(user_text(request))[-1])
            return say(str(responses(request)[0].response))

        async def run(user: str, artifact_id: str | None) -> tuple[str, str]:
            """Ask the model to count the words of ``artifact_id`` (None: of a doc.txt saved in the new session)."""
            session = (await sessions.create_session(app_name=AGENT_ENGINE, user_id=user)).id
            at = {"app_name": AGENT_ENGINE, "user_id": user, "session_id": session, "filename": "doc.txt"}
            if artifact_id is None:
                await service.save_artifact(**at, artifact=types.Part(text="one two three"))
                info = await service.get_artifact_version(**at)
                assert info is not None
                artifact_id = info.canonical_uri.removeprefix("refvault://")
            agent = LlmAgent(name="a", model=ScriptedLlm(script=script), tools=tools(box, names=["count_words"]))
            runner = Runner(agent=agent, app_name=AGENT_ENGINE, session_service=sessions, artifact_service=service)
            message = types.Content(role="user", parts=[types.Part(text=f"count {artifact_id}")])
            events = [e async for e in runner.run_async(user_id=user, session_id=session, new_message=message)]
            return artifact_id, "".join(
                p.text or "" for e in events if e.content for p in e.content.parts or [] if p.text
            )

        async def scenario() -> None:
            artifact_id, answer = await run("group/user123", None)
            assert answer == "{'result': '3'}"
            for look_alike in ["group_user123", "group%2Fuser123", "_adk+e:group+2Fuser123", "group/user123"]:
                _, answer = await run(look_alike, artifact_id)  # a new session each time: never the saver's
                assert f"no artifact '{artifact_id}' can be read here" in answer
                assert "result" not in answer

        asyncio.run(scenario())
