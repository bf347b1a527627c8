"""RefvaultArtifactService behaves exactly like ADK's own InMemoryArtifactService.

The same calls go to both services; every result must be identical. Normalised, because they
must differ: ``ArtifactVersion.canonical_uri`` (``memory://…`` there, ``refvault://<artifact id>``
here: checked to have that form) and ``ArtifactVersion.create_time`` (each service's own clock:
checked to be a plausible recent timestamp). Errors are compared by kind: ADK's
``InputValidationError`` (refvault raises a subclass of it), or pydantic's ``ValidationError`` for a
malformed dict part.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from google.adk.artifacts import InMemoryArtifactService, artifact_util
from google.adk.artifacts.base_artifact_service import ArtifactVersion, BaseArtifactService
from google.adk.errors.input_validation_error import InputValidationError
from google.genai import types
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from refvault import Vault
from refvault.errors import InvalidArgument, InvalidMetadata
from refvault.ids import is_artifact_id
from refvault.integrations.adk import AdkInputError, RefvaultArtifactService

Op = tuple[str, dict[str, Any]]


def _normalised(value: Any, started: float) -> Any:
    """What must be equal across the two services (see the module docstring)."""
    if isinstance(value, ArtifactVersion):
        assert value.create_time >= started - 1
        assert value.create_time <= time.time() + 1
        uri = value.canonical_uri
        if uri.startswith("refvault://"):
            assert is_artifact_id(uri.removeprefix("refvault://")), uri
        else:
            assert uri.startswith("memory://"), uri
        return ("version", value.model_dump(exclude={"canonical_uri", "create_time"}))
    if isinstance(value, list):
        return [_normalised(item, started) for item in value]
    return value


async def _outcome(service: BaseArtifactService, op: Op, started: float) -> Any:
    name, kwargs = op
    try:
        result = await getattr(service, name)(**kwargs)
    except InputValidationError:
        return ("error", "InputValidationError")
    except ValidationError:
        return ("error", "ValidationError")
    return ("ok", _normalised(result, started))


async def _run_both(ops: list[Op], vault: Vault) -> list[tuple[Op, Any]]:
    reference = InMemoryArtifactService()
    ours = RefvaultArtifactService(vault)
    started = time.time()
    seen = []
    for op in ops:
        expected = await _outcome(reference, op, started)
        actual = await _outcome(ours, op, started)
        assert actual == expected, f"{op[0]}({op[1]}): refvault {actual!r} != ADK {expected!r}"
        seen.append((op, actual))
    return seen


def run_both(ops: list[Op], vault: Vault | None = None) -> list[tuple[Op, Any]]:
    vault = vault or Vault.open("memory://")
    try:
        return asyncio.run(_run_both(ops, vault))
    finally:
        vault.close()


def at(app: str = "app", user: str = "u1", session: str | None = "s1", **more: Any) -> dict[str, Any]:
    return {"app_name": app, "user_id": user, "session_id": session, **more}


PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


def test_scripted_sequence_matches_in_memory_service(tmp_path: Path) -> None:
    text = types.Part.from_text(text="hello, wörld\n")
    png = types.Part.from_bytes(data=PNG, mime_type="image/png")
    odd_mime = types.Part(inline_data=types.Blob(mime_type="Image/PNG ; Q=1", data=b"\x00\x01", display_name="d"))
    no_mime = types.Part(inline_data=types.Blob(data=b"raw"))
    thought = types.Part(text="thinking", thought=True, thought_signature=b"\x01\x02")
    remote = types.Part(file_data=types.FileData(file_uri="gs://bucket/report.pdf", mime_type="application/pdf"))
    reference = types.Part(
        file_data=types.FileData(file_uri="artifact://apps/app/users/u1/sessions/s1/artifacts/a.txt/versions/0")
    )
    user_reference = types.Part(
        file_data=types.FileData(file_uri="artifact://apps/app/users/u1/artifacts/user:profile/versions/0")
    )
    other_user_reference = types.Part(
        file_data=types.FileData(file_uri="artifact://apps/app/users/u2/artifacts/user:profile/versions/0")
    )
    tombstone = types.Part(inline_data=types.Blob(mime_type="application/octet-stream", data=b""))
    metadata = {"source": "upload", "tags": ["a", "b"], "n": 2, "x": 1.5, "ok": True, "none": None, "d": {"k": "v"}}
    ops: list[Op] = [
        ("list_artifact_keys", at()),
        ("load_artifact", at(filename="a.txt")),
        ("load_artifact", at(filename="a.txt", version=0)),
        ("save_artifact", at(filename="a.txt", artifact=text)),
        ("save_artifact", at(filename="a.txt", artifact=png, custom_metadata=metadata)),
        ("save_artifact", at(filename="a.txt", artifact=odd_mime, custom_metadata={})),
        ("load_artifact", at(filename="a.txt")),
        ("load_artifact", at(filename="a.txt", version=0)),
        ("load_artifact", at(filename="a.txt", version=1)),
        ("load_artifact", at(filename="a.txt", version=2)),
        ("load_artifact", at(filename="a.txt", version=3)),
        ("load_artifact", at(filename="a.txt", version=-1)),
        ("list_versions", at(filename="a.txt")),
        ("list_artifact_versions", at(filename="a.txt")),
        ("get_artifact_version", at(filename="a.txt")),
        ("get_artifact_version", at(filename="a.txt", version=1)),
        ("get_artifact_version", at(filename="a.txt", version=7)),
        ("save_artifact", at(filename="no-mime.bin", artifact=no_mime)),
        ("save_artifact", at(filename="no-data", artifact=types.Part(inline_data=types.Blob(mime_type="image/gif")))),
        ("get_artifact_version", at(filename="no-data")),
        ("load_artifact", at(filename="no-data")),
        ("save_artifact", at(filename="thought", artifact=thought)),
        ("save_artifact", at(filename="remote.pdf", artifact=remote)),
        ("save_artifact", at(filename="ref", artifact=reference)),
        ("load_artifact", at(filename="ref")),
        ("save_artifact", at(filename="user:profile", artifact=text, session=None)),
        ("save_artifact", at(filename="user:profile", artifact=png, session="s2")),
        ("save_artifact", at(filename="uref", artifact=user_reference)),
        ("load_artifact", at(filename="uref")),
        ("save_artifact", at(filename="bad-ref", artifact=other_user_reference)),
        ("load_artifact", at(filename="user:profile", session="s2")),
        ("load_artifact", at(filename="user:profile", session=None, version=0)),
        ("list_artifact_keys", at()),
        ("list_artifact_keys", at(session="s2")),
        ("list_artifact_keys", at(session=None)),
        ("list_artifact_keys", at(session="user")),
        ("list_artifact_keys", at(user="u2")),
        ("list_artifact_keys", at(app="app2")),
        ("load_artifact", at(filename="a.txt", session="s2")),
        ("load_artifact", at(filename="a.txt", user="u2")),
        ("load_artifact", at(filename="a.txt", app="app2")),
        ("load_artifact", at(filename="profile", session="user")),
        ("list_versions", at(filename="user:profile", session="anything")),
        ("list_artifact_versions", at(filename="user:profile", session=None)),
        ("save_artifact", at(filename="a.txt", artifact=tombstone)),
        ("load_artifact", at(filename="a.txt")),
        ("load_artifact", at(filename="a.txt", version=2)),
        ("list_versions", at(filename="a.txt")),
        ("delete_artifact", at(filename="a.txt")),
        ("load_artifact", at(filename="a.txt", version=0)),
        ("list_versions", at(filename="a.txt")),
        ("list_artifact_versions", at(filename="a.txt")),
        ("get_artifact_version", at(filename="a.txt")),
        ("load_artifact", at(filename="ref")),
        ("delete_artifact", at(filename="a.txt")),
        ("save_artifact", at(filename="a.txt", artifact={"text": "from a dict"})),
        ("save_artifact", at(filename="a.txt", artifact={"inlineData": {"mimeType": "text/csv", "data": b"a,b\n"}})),
        ("list_versions", at(filename="a.txt")),
        ("load_artifact", at(filename="a.txt", version=1)),
        ("delete_artifact", at(filename="user:profile", session=None)),
        ("list_artifact_keys", at()),
        ("delete_artifact", at(filename="never-saved")),
        # What ADK refuses, refvault refuses the same way.
        ("save_artifact", at(filename="a.txt", artifact=text, session=None)),
        ("load_artifact", at(filename="a.txt", session=None)),
        ("list_versions", at(filename="a.txt", session=None)),
        ("delete_artifact", at(filename="a.txt", session=None)),
        ("save_artifact", at(filename="a.txt", artifact=text, session="user")),
        ("save_artifact", at(filename="a.txt", artifact=types.Part())),
        ("save_artifact", at(filename="a.txt", artifact={"nonsense": 1})),
        ("save_artifact", at(filename="a.txt", artifact=text, user="")),
        ("save_artifact", at(filename="a.txt", artifact=text, app="..")),
        ("save_artifact", at(filename="a.txt", artifact=text, session="C:drive")),
        ("list_artifact_keys", at(session="")),
        ("load_artifact", at(filename="a.txt", user="/abs")),
        ("get_artifact_version", at(filename="a.txt", session=None)),
    ]
    seen = run_both(ops, Vault.open(tmp_path / "store"))
    outcomes = [outcome for _, outcome in seen]
    assert outcomes[3] == ("ok", 0)
    assert outcomes[4] == ("ok", 1)
    assert outcomes[5] == ("ok", 2)
    assert outcomes[6] == ("ok", odd_mime)  # the exact, non-canonical MIME type and display name came back
    assert outcomes[7] == ("ok", text)
    assert outcomes[8] == ("ok", png)
    assert ("error", "InputValidationError") in outcomes
    loaded_reference = next(o for (name, kw), o in seen if name == "load_artifact" and kw.get("filename") == "ref")
    assert loaded_reference == ("ok", text)  # the artifact:// reference was followed


# -- random sequences ---------------------------------------------------------------------------------------------

# (app, user, session, filename): a few places, the first ones drawn most, so sequences revisit them; the
# rest cover other sessions, users and apps, user-scoped names, odd filenames and what ADK refuses.
# Names that are not refvault scope names are among them (an Agent Engine app name, namespaced and look-alike
# user ids, session ids with spaces, non-ASCII, the reserved prefix, over 128 characters), and session ids
# ADK refuses to save under but answers reads for ("user/x").
AGENT_ENGINE = "projects/123/locations/us-central1/reasoningEngines/456"
LONG_SESSION = "session-" + "é" * 150  # too long to escape within 128 characters: the hashed form
COMMON = [
    ("app", "u1", "s1", "a.txt"),
    ("app", "u1", "s1", "b.bin"),
    ("app", "u1", "s2", "user:profile"),
    (AGENT_ENGINE, "group/user123", "s1", "a.txt"),
]
PLACES = COMMON * 4 + [
    ("app", "u1", None, "user:profile"),
    ("app", "u1", "s2", "a.txt"),
    ("app", "u2", "s1", "a.txt"),
    ("app2", "u1", "s1", "a.txt"),
    ("app", "u1", "s1", "dir/f.txt"),
    ("app", "u1", "s1", "ünï code"),
    ("app", "u1", "s1", ""),
    ("app", "u1", "s1", "user:a.txt"),
    ("app", "u1", "user", "a.txt"),
    ("app", "u1", None, "a.txt"),
    (AGENT_ENGINE, "u1", "s1", "a.txt"),
    (AGENT_ENGINE, "group/user123", None, "user:profile"),
    ("app", "group/user123", "s1", "a.txt"),
    ("app", "group_user123", "s1", "a.txt"),
    ("app", "group%2Fuser123", "s1", "a.txt"),
    ("app", "Ana María", "s1", "a.txt"),
    ("app", "u1", "sess ion", "a.txt"),
    ("app", "u1", "ünï", "b.bin"),
    ("app", "u1", LONG_SESSION, "a.txt"),
    ("app", "u1", "_adk+e:s1", "a.txt"),
    ("app", "u1", "user/x", "a.txt"),
    ("app", "u1", "a/../b", "a.txt"),
    ("app", "u1/users/x", "s1", "a.txt"),
    ("C:app", "u1", "s1", "a.txt"),
]
APPS = ["app", "app2", AGENT_ENGINE]
USERS = ["u1", "u2", "group/user123", "group_user123", "group%2Fuser123"]
SESSIONS = ["s1", "s2", None, "user", "sess ion", "ünï", LONG_SESSION, "_adk+e:s1", "user/x"]


def _adk_path(app: str, user: str, session: str | None, filename: str) -> str:
    """The flat key ADK's InMemoryArtifactService keeps a place under (its ``_artifact_path``)."""
    return f"{app}/{user}/user/{filename}" if filename.startswith("user:") else f"{app}/{user}/{session}/{filename}"


def _adk_accepts(app: str, user: str, session: str | None, filename: str, *, save: bool) -> bool:
    """Whether ADK's in-memory service takes a place (to save to, or to read from)."""
    try:
        artifact_util.validate_path_segment(app, "app_name")
        artifact_util.validate_path_segment(user, "user_id")
        if not filename.startswith("user:"):
            if session is None:
                return False
            artifact_util.validate_path_segment(session, "session_id")
            if save:
                artifact_util._validate_session_id_for_flat_storage(session)
    except InputValidationError:
        return False
    return True


def test_the_name_pools_do_not_alias_in_adks_flat_keys() -> None:
    """ADK's in-memory store joins names with "/", so ("a/b", "c") and ("a", "b/c") share its keys (refvault keeps
    them apart: tests/security/test_adk_names.py). The pools above must not contain such pairs, or the
    differential would compare ADK's aliasing with refvault's isolation."""

    def owner(place: tuple[str, str, str | None, str]) -> tuple[str, str, str | None]:
        return (place[0], place[1], "user" if place[3].startswith("user:") else place[2])

    read = [p for p in set(PLACES) if _adk_accepts(*p, save=False)]
    stored = [p for p in read if _adk_accepts(*p, save=True)]
    for place in read:
        for other in stored:
            assert owner(place) == owner(other) or _adk_path(*place) != _adk_path(*other), (place, other)
    for app in APPS:
        for user in USERS:
            for session in SESSIONS:
                listed = {(app, user, "user"), (app, user, session)}
                prefixes = [f"{app}/{user}/user/"] + ([f"{app}/{user}/{session}/"] if session else [])
                for other in stored:
                    if owner(other) not in listed:
                        assert not any(_adk_path(*other).startswith(prefix) for prefix in prefixes), (other, session)
    assert {owner(p) for p in stored} > {owner(p) for p in COMMON}  # the odd names are stored, not only refused


MIMES = ["image/png", "Image/PNG", "text/plain; charset=UTF-8", "application/x-custom", "not a mime", None]
texts = st.text(max_size=200)
blobs = st.binary(max_size=300)
metadata = st.none() | st.dictionaries(
    st.text(max_size=8),
    st.none() | st.booleans() | st.integers() | st.text(max_size=10) | st.lists(st.integers()),
    max_size=3,
)
parts = st.one_of(
    texts.map(lambda t: types.Part.from_text(text=t)),
    st.builds(lambda d, m: types.Part(inline_data=types.Blob(data=d, mime_type=m)), blobs, st.sampled_from(MIMES)),
    st.just(types.Part(inline_data=types.Blob(mime_type="application/octet-stream", data=b""))),
    st.builds(lambda m: types.Part(inline_data=types.Blob(mime_type=m)), st.sampled_from(MIMES)),
    st.just(types.Part(file_data=types.FileData(file_uri="gs://b/x", mime_type="application/pdf"))),
    st.builds(
        lambda f, v: types.Part(
            file_data=types.FileData(file_uri=f"artifact://apps/app/users/u1/sessions/s1/artifacts/{f}/versions/{v}")
        ),
        st.sampled_from(["a.txt", "b.bin"]),
        st.integers(0, 2),
    ),
    st.builds(lambda t: types.Part(text=t, thought=True), texts),
    st.just(types.Part()),
)
places = st.sampled_from(PLACES).map(
    lambda p: {"app_name": p[0], "user_id": p[1], "session_id": p[2], "filename": p[3]}
)
versions = st.none() | st.integers(-1, 3)


def _local_references(place: dict[str, Any]) -> st.SearchStrategy[types.Part]:
    """artifact:// references within a place's own app, user (and session): ADK follows them on load."""
    base = f"artifact://apps/{place['app_name']}/users/{place['user_id']}"
    scopes = [base] + ([f"{base}/sessions/{place['session_id']}"] if place["session_id"] else [])
    return st.builds(
        lambda where, f, v: types.Part(file_data=types.FileData(file_uri=f"{where}/artifacts/{f}/versions/{v}")),
        st.sampled_from(scopes),
        st.sampled_from(["a.txt", "b.bin", "user:profile"]),
        st.integers(0, 2),
    )


def _op(name: str, extra: dict[str, Any]) -> Any:
    return places.map(lambda place: (name, {**place, **extra}))


saves = places.flatmap(
    lambda p: st.builds(
        lambda a, m: ("save_artifact", {**p, "artifact": a, "custom_metadata": m}),
        parts | _local_references(p),
        metadata,
    )
)
KINDS: dict[str, Any] = {
    "save": saves,
    "load": st.builds(lambda p, v: ("load_artifact", {**p, "version": v}), places, versions),
    "get_version": st.builds(lambda p, v: ("get_artifact_version", {**p, "version": v}), places, versions),
    "list_versions": _op("list_versions", {}),
    "list_artifact_versions": _op("list_artifact_versions", {}),
    "delete": _op("delete_artifact", {}),
    "list_keys": st.builds(
        lambda a, u, s: ("list_artifact_keys", {"app_name": a, "user_id": u, "session_id": s}),
        st.sampled_from(APPS),
        st.sampled_from(USERS),
        st.sampled_from(SESSIONS),
    ),
}
# Weights: saves and loads most, deletes least (a delete wipes what the sequence built).
WEIGHTED = ["save"] * 6 + ["load"] * 4 + ["get_version", "list_versions", "list_artifact_versions", "list_keys"] * 2
operations = st.sampled_from([*WEIGHTED, "delete"]).flatmap(lambda kind: KINDS[kind])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operations, min_size=10, max_size=50))
def test_random_sequences_match_in_memory_service(ops: list[Op]) -> None:
    run_both(ops)


# -- where refvault refuses what ADK's in-memory store would keep ----------------------------------------------


def test_refusals_are_typed_refvault_errors() -> None:
    service = RefvaultArtifactService(Vault.open("memory://"))
    text = types.Part.from_text(text="x")

    async def save(**kwargs: Any) -> int:
        return await service.save_artifact(**{**at(filename="a.txt", artifact=text), **kwargs})

    with pytest.raises(InvalidMetadata, match="custom_metadata must be plain JSON") as bad_metadata:
        asyncio.run(save(custom_metadata={"t": (1, 2), "secret-value": object()}))
    assert "secret-value" not in str(bad_metadata.value)
    with pytest.raises(InvalidMetadata):
        asyncio.run(save(custom_metadata={1: "int key"}))
    # A user id that is not a refvault scope name is accepted, as ADK accepts it (tests/security/test_adk_names.py).
    assert asyncio.run(save(user_id="Ana María")) == 0
    with pytest.raises(InvalidArgument, match="lone surrogate"):
        asyncio.run(save(artifact=types.Part(text="\ud800")))
    with pytest.raises(AdkInputError) as adk_error:
        asyncio.run(save(session_id="../../etc"))
    assert isinstance(adk_error.value, InputValidationError)
    assert isinstance(adk_error.value, InvalidArgument)
    assert "etc" not in str(adk_error.value)
    assert asyncio.run(service.list_artifact_keys(app_name="app", user_id="u1", session_id="s1")) == []
