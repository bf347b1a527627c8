"""Google ADK with the guard: loaders, model-disclosed versions, session state in instructions, stopped results in
later runs, and no sealed service without a guard.

Every test drives a real framework (OpenAI Agents SDK, LangChain, Pydantic AI, Google ADK, the MCP SDK) with a
scripted model: no network, no API key.
"""

from __future__ import annotations

import asyncio
import base64

import pytest
from agents import set_tracing_disabled
from google.adk.sessions import InMemorySessionService
from google.adk.tools.load_artifacts_tool import LoadArtifactsTool
from google.genai import types as genai

from refvault import Scope, Toolbox, Vault
from refvault.errors import InvalidArgument
from refvault.integrations import adk as rv_adk
from tests.integrations.scripted import (
    SCOPE,
    canary,
    drive,
    forms,
    leaky_box,
    once,
    rich_secret,
    sealed,
)

set_tracing_disabled(True)  # nothing may try to export traces over the network


# -- ADK: its own loaders, state and stored events ------------------------------------------------------------------


NOT_LOAD = ["describe_artifact", "list_artifacts", "read_artifact", "query_artifact"]  # ADK's LoadArtifactsTool instead


def _save(service: rv_adk.RefvaultArtifactService, scope: Scope, filename: str, part: genai.Part) -> None:
    async def save() -> None:
        await service.save_artifact(
            app_name=scope.tenant, user_id=scope.user, session_id=scope.session, filename=filename, artifact=part
        )

    asyncio.run(save())


@pytest.mark.parametrize(
    ("how", "kind"), [("load_artifacts_tool", "text"), ("load_artifacts_tool", "png"), ("instruction_template", "text")]
)
def test_adk_loaders_cannot_put_a_sealed_version_in_front_of_the_model(vault: Vault, how: str, kind: str) -> None:
    """A sealed version saved through the artifact service, loaded by ADK itself (its LoadArtifactsTool, or an
    ``{artifact.name}`` instruction template): the guard stops it, though protect_scope ran before the save.

    Found in review: without the service's ``guard=``, nothing taught the guard these bytes and both
    loaders put the sealed text (or image) into the model request."""
    box = Toolbox(vault)
    box.guard.protect_scope(vault, SCOPE)  # at session start, as documented: the secret is saved later
    service = rv_adk.RefvaultArtifactService(vault, disclosure="sealed", guard=box)
    secret = rich_secret()
    if kind == "text":
        part = genai.Part(text=secret)
    else:
        part = genai.Part(inline_data=genai.Blob(mime_type="image/png", data=b"\x89PNG\r\n\x1a\n" + secret.encode()))
    _save(service, SCOPE, "secret", part)
    if how == "load_artifacts_tool":
        plan, instructions = once(("load_artifacts", {"artifact_names": ["secret"]})), "Be brief."
    else:
        plan, instructions = once(), "Answer from this: {artifact.secret}"
    run = drive(
        "adk",
        box,
        SCOPE,
        plan,
        artifacts=service,
        extra_tools=[LoadArtifactsTool()],
        names=NOT_LOAD,
        instructions=instructions,
    )

    assert run.leak is not None, run.error
    for form in forms(secret):
        assert not run.saw(form)
    assert not run.saw(base64.b64encode(part.inline_data.data).decode()[:64] if part.inline_data else secret)
    assert secret not in str(run.leak)


def test_adk_model_disclosed_versions_still_load(vault: Vault) -> None:
    """The guard= of the artifact service protects sealed versions only: model-disclosed ones load as before."""
    box = Toolbox(vault)
    service = rv_adk.RefvaultArtifactService(vault, guard=box.guard)
    notes = "meeting notes: ship on friday " + canary()
    _save(service, SCOPE, "notes.txt", genai.Part(text=notes))
    run = drive(
        "adk",
        box,
        SCOPE,
        once(("load_artifacts", {"artifact_names": ["notes.txt"]})),
        artifacts=service,
        extra_tools=[LoadArtifactsTool()],
        names=NOT_LOAD,
    )

    assert run.error is None, run.error
    assert run.saw(notes)
    assert box.guard.scan(notes) == []


def test_adk_session_state_in_an_instruction_template_is_checked(vault: Vault) -> None:
    """A protected value a tool of the user's own put into session state, templated into the instruction."""
    secret = canary()
    sealed(vault, SCOPE, secret)
    box = Toolbox(vault)
    box.guard.protect_scope(vault, SCOPE)
    run = drive("adk", box, SCOPE, once(), instructions="Context: {notes}", state={"notes": f"the key is {secret}"})

    assert run.leak is not None, run.error
    assert run.seen == []


def test_adk_a_stopped_tool_result_stays_stopped_in_later_runs_of_the_session(vault: Vault) -> None:
    """The stopped result is in the session's events and a later run rebuilds its request from them: stopped again,
    by the same guard, and by a fresh process's guard that ran protect_scope at session start (as documented;
    a fresh guard that did not would let the stored result through: it knows nothing)."""
    secret = rich_secret()
    doc = sealed(vault, SCOPE, secret)
    sessions = InMemorySessionService()
    box = leaky_box(vault)
    first = drive("adk", box, SCOPE, once(("echo", {"doc": doc})), sessions=sessions)
    again = drive("adk", box, SCOPE, once(), sessions=sessions, prompt="and now?")
    restarted = leaky_box(vault)
    restarted.guard.protect_scope(vault, SCOPE)
    later = drive("adk", restarted, SCOPE, once(), sessions=sessions, prompt="and now?")

    for run in (first, again, later):
        assert run.leak is not None, run.error
        for form in forms(secret):
            assert not run.saw(form)
    assert len(first.seen) == 1
    assert again.seen == later.seen == []


def test_a_sealed_adk_service_without_a_guard_is_refused(vault: Vault) -> None:
    """The leak above is closed by construction: a sealed service cannot be made without the guard."""
    with pytest.raises(InvalidArgument, match="guard="):
        rv_adk.RefvaultArtifactService(vault, disclosure="sealed")
    assert rv_adk.RefvaultArtifactService(vault, disclosure="sealed", guard=Toolbox(vault)).guard is not None
