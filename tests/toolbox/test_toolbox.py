"""The Toolbox (issue 3): schemas, Ref resolution at dispatch, observations, error classes, concurrency.

Leaks of resolved content through every Python door are in ``tests/security/test_ref_canaries.py``.
"""

import asyncio
import contextvars
import copy
import dataclasses
import hashlib
import json
import threading
import typing
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Annotated, Any, Literal, cast

import pytest
from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from refvault import Artifact, AuditRecord, Observation, Ref, Scope, Toolbox, ToolContext, ToolEvent, Vault
from refvault.errors import UnresolvedRef
from refvault.ids import ARTIFACT_ID_PATTERN, is_artifact_id, new_artifact_id
from refvault.toolbox.ref import REF_DESCRIPTION, finish_ref_schemas

SCOPE = Scope("acme", "ana", "s1")
OTHER_SCOPE = Scope("globex", "ana", "s1")
FLAVORS = ("openai", "anthropic", "gemini", "mcp")
MODES = ("call", "call_sync")
REF_SCHEMA = {"type": "string", "description": REF_DESCRIPTION}
REF_SCHEMA_WITH_PATTERN = {**REF_SCHEMA, "pattern": ARTIFACT_ID_PATTERN}


class Bundle(BaseModel):
    main: Ref
    extras: list[Ref] = []
    note: str = ""


class Report(BaseModel):
    title: str
    pages: int


@dataclasses.dataclass
class Wrapped:
    doc: Ref


class Packet(TypedDict):
    doc: Ref


# -- helpers ---------------------------------------------------------------------------


def dispatch(
    box: Toolbox,
    mode: str,
    name: str,
    arguments: str | Mapping[str, Any],
    *,
    scope: Scope = SCOPE,
    run_id: str | None = "run_1",
    tool_call_id: str | None = "call_1",
) -> Observation:
    """One dispatch through ``await box.call`` or ``box.call_sync``."""
    if mode == "call":
        return asyncio.run(box.call(name, arguments, scope=scope, run_id=run_id, tool_call_id=tool_call_id))
    return box.call_sync(name, arguments, scope=scope, run_id=run_id, tool_call_id=tool_call_id)


def args(**values: Any) -> str:
    return json.dumps(values)


def audit_log(vault: Vault) -> list[AuditRecord]:
    records: list[AuditRecord] = []
    vault.add_audit_sink(records.append)
    return records


def actions(records: list[AuditRecord], action: str) -> list[str]:
    return [str(r.artifact_id) for r in records if r.action == action and r.outcome == "ok"]


def parameters_of(definition: dict[str, Any], flavor: str) -> dict[str, Any]:
    if flavor == "openai":
        return cast(dict[str, Any], definition["function"]["parameters"])
    key = {"anthropic": "input_schema", "mcp": "inputSchema", "gemini": "parameters"}[flavor]
    return cast(dict[str, Any], definition[key])


def schema_of(box: Toolbox, flavor: str, tool: str, *, strict: bool = False) -> dict[str, Any]:
    for definition in box.schemas(flavor, strict=strict):  # type: ignore[arg-type]
        name = definition["function"]["name"] if flavor == "openai" else definition["name"]
        if name == tool:
            return parameters_of(definition, flavor)
    raise AssertionError(f"no schema for {tool}")


def node_at(schema: dict[str, Any], *path: str) -> dict[str, Any]:
    """Walk property names (and ``items``/``additionalProperties``), following $ref and Optional."""
    defs = schema.get("$defs", {})

    def plain(node: dict[str, Any]) -> dict[str, Any]:
        while True:
            if "$ref" in node:
                node = defs[node["$ref"].rsplit("/", 1)[-1]]
            elif "anyOf" in node:
                options = [o for o in node["anyOf"] if o != {"type": "null"}]
                assert len(options) == 1, node
                node = options[0]
            else:
                return node

    node = schema
    for step in path:
        node = plain(node)
        node = node[step] if step in ("items", "additionalProperties") else node["properties"][step]
    return plain(node)


def ref_nodes(node: Any) -> Iterator[dict[str, Any]]:
    """Every schema node that describes a Ref (carries the Ref description)."""
    if isinstance(node, dict):
        if node.get("description") == REF_DESCRIPTION:
            yield node
        for value in node.values():
            yield from ref_nodes(value)
    elif isinstance(node, list):
        for item in node:
            yield from ref_nodes(item)


def all_keys(node: Any, *, skip_names_under: tuple[str, ...] = ("properties", "$defs")) -> set[str]:
    """Every schema keyword used anywhere (property and definition names excluded)."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            found.add(key)
            if key in skip_names_under and isinstance(value, dict):
                for sub in value.values():
                    found |= all_keys(sub)
            else:
                found |= all_keys(value)
    elif isinstance(node, list):
        for item in node:
            found |= all_keys(item)
    return found


def untitled(node: Any) -> Any:
    if isinstance(node, list):
        return [untitled(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        k: ({n: untitled(s) for n, s in v.items()} if k in ("properties", "$defs") else untitled(v))
        for k, v in node.items()
        if k != "title"
    }


class CountingVault:
    """A vault stand-in that records every attribute the toolbox touches on it."""

    def __init__(self, inner: Vault) -> None:
        self._inner = inner
        self.touched: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.touched.append(name)
        return getattr(self._inner, name)


def schema_box(vault: Vault, *, ref_pattern: bool = False) -> Toolbox:
    box = Toolbox(vault, ref_pattern=ref_pattern, read_tools=False)  # the built-in read tools have their own tests

    @box.tool
    def review(
        doc: Ref,
        maybe: typing.Optional[Ref] = None,  # noqa: UP045 - the Optional spelling is what is under test
        either: Ref | None = None,
        many: list[Ref] = [],  # noqa: B006 - never mutated; a default the schema must show
        bundle: Bundle | None = None,
        *,
        ctx: ToolContext,
    ) -> str:
        """Review documents."""
        return "ok"

    @box.tool
    def collate(named: dict[str, Ref], ctx: ToolContext) -> str:
        """Collate named documents."""
        return "ok"

    @box.tool
    def count(n: int, mode: Literal["fast", "slow"] = "fast") -> int:
        """Count without documents."""
        return n

    return box


REVIEW_REFS = [("doc",), ("maybe",), ("either",), ("many", "items"), ("bundle", "main"), ("bundle", "extras", "items")]


# -- schemas ---------------------------------------------------------------------------


@pytest.mark.parametrize("ref_pattern", [False, True])
@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_ref_renders_as_a_described_string(vault: Vault, flavor: str, ref_pattern: bool) -> None:
    expected = REF_SCHEMA_WITH_PATTERN if ref_pattern else REF_SCHEMA
    schema = schema_of(schema_box(vault, ref_pattern=ref_pattern), flavor, "review")
    for path in REVIEW_REFS:
        node = node_at(schema, *path)
        if flavor == "gemini" and path in (("maybe",), ("either",)):
            assert node.pop("nullable") is True  # Gemini's spelling of Optional
        assert node == expected, path
    assert len(list(ref_nodes(schema))) == len(REVIEW_REFS)  # none missing, none invented
    assert schema["required"] == ["doc"]
    text = json.dumps(schema)
    assert "ctx" not in schema["properties"]
    assert "ToolContext" not in text
    assert '"Ref"' not in text  # no $defs entry or title named after the carrier type
    if flavor == "gemini":
        assert "$defs" not in text  # Gemini gets models inlined
        assert "$ref" not in text


def test_gemini_describes_dict_of_refs_values_in_words(vault: Vault) -> None:
    """Gemini's schema subset has no additionalProperties: the object says what its values are."""
    schema = schema_of(schema_box(vault), "gemini", "collate")
    named = schema["properties"]["named"]
    assert named["type"] == "object"
    assert "artifact id" in named["description"]
    assert "additionalProperties" not in json.dumps(schema)


@pytest.mark.parametrize(
    "flavor",
    [
        "openai",
        "anthropic",
        "mcp",
    ],
)
def test_dict_of_refs_renders_its_values_as_described_strings(vault: Vault, flavor: str) -> None:
    schema = schema_of(schema_box(vault), flavor, "collate")
    assert node_at(schema, "named", "additionalProperties") == REF_SCHEMA
    assert schema["required"] == ["named"]
    assert set(schema["properties"]) == {"named"}


@pytest.mark.parametrize("flavor", FLAVORS)
def test_definitions_have_each_flavors_shape(vault: Vault, flavor: str) -> None:
    definitions = schema_box(vault).schemas(flavor)  # type: ignore[arg-type]
    assert len(definitions) == 3
    for definition in definitions:
        if flavor == "openai":
            assert definition["type"] == "function"
            assert set(definition["function"]) == {"name", "description", "parameters"}
            inner = definition["function"]
        else:
            inner = definition
        assert inner["description"].endswith(".")
        assert parameters_of(definition, flavor)["type"] == "object"
    names = [(d["function"] if flavor == "openai" else d)["name"] for d in definitions]
    assert names == ["review", "collate", "count"]


def test_gemini_schemas_use_only_keywords_gemini_accepts(vault: Vault) -> None:
    allowed = {"type", "format", "description", "nullable", "enum", "properties", "required", "items", "anyOf"}
    allowed |= {"minItems", "maxItems", "minimum", "maximum", "pattern"}
    for definition in schema_box(vault, ref_pattern=True).schemas("gemini"):
        used = all_keys(definition["parameters"])
        assert used <= allowed, used - allowed


def test_unknown_flavor_is_refused(vault: Vault) -> None:
    with pytest.raises(ValueError, match="flavor"):
        schema_box(vault).schemas("cohere")  # type: ignore[arg-type]


@pytest.mark.parametrize("ref_pattern", [False, True])
def test_openai_strict_schemas_come_from_the_openai_package(vault: Vault, ref_pattern: bool) -> None:
    box = schema_box(vault, ref_pattern=ref_pattern)
    definitions = box.schemas("openai", strict=True)
    strictness = {d["function"]["name"]: d["function"]["strict"] for d in definitions}
    # dict[str, Ref] is a free-form mapping, which OpenAI strict mode cannot express: collate stays non-strict
    assert strictness == {name: name != "collate" for name in strictness}
    collate = schema_of(box, "openai", "collate", strict=True)
    assert collate == schema_of(box, "openai", "collate")
    review = schema_of(box, "openai", "review", strict=True)
    assert set(review["required"]) == set(review["properties"])  # strict: every property required
    assert review["additionalProperties"] is False
    assert node_at(review, "bundle", "main") == (REF_SCHEMA_WITH_PATTERN if ref_pattern else REF_SCHEMA)
    for path in REVIEW_REFS:
        assert node_at(review, *path) == (REF_SCHEMA_WITH_PATTERN if ref_pattern else REF_SCHEMA), path
    bundle = review["$defs"]["Bundle"]
    assert bundle["additionalProperties"] is False
    assert set(bundle["required"]) == {"main", "extras", "note"}


def test_each_argument_model_passes_openais_own_strict_conversion(vault: Vault) -> None:
    box = schema_box(vault)
    seen = 0
    for name, tool in box._tools.items():  # the argument models are internal; strict conversion needs them
        direct = to_strict_json_schema(tool.arguments)
        if name != "collate":  # collate (dict[str, Ref]) falls back to non-strict; see the test above
            assert untitled(finish_ref_schemas(direct, pattern=False)) == schema_of(box, "openai", name, strict=True)
        assert "ctx" not in direct["properties"]
        for node in ref_nodes(direct):
            assert untitled(finish_ref_schemas(node, pattern=False)) == REF_SCHEMA
        seen += len(list(ref_nodes(direct)))
    assert seen == len(REVIEW_REFS) + 1


def test_a_described_ref_field_still_gets_the_pattern(vault: Vault) -> None:
    box = Toolbox(vault, ref_pattern=True)

    @box.tool
    def summarize(doc: Annotated[Ref, Field(description="The report to summarise")]) -> str:
        return "ok"

    node = schema_of(box, "openai", "summarize")["properties"]["doc"]
    assert node["type"] == "string"
    assert node.get("pattern") == ARTIFACT_ID_PATTERN


# -- resolution ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_ref_reads_inside_its_call_and_nowhere_after(vault: Vault, mode: str) -> None:
    d = vault.put(SCOPE, b"line one\nline two\n", media_type="text/plain")
    box = Toolbox(vault)
    kept: list[Ref] = []

    @box.tool
    def inspect_doc(doc: Ref) -> dict[str, Any]:
        kept.append(doc)
        return {
            "read": doc.read().decode(),
            "text": doc.text(),
            "open": doc.open().read().decode(),
            "id": doc.descriptor.artifact_id,
            "size": doc.descriptor.size,
        }

    obs = dispatch(box, mode, "inspect_doc", args(doc=d.artifact_id))
    body = "line one\nline two\n"
    assert json.loads(obs.content) == {"read": body, "text": body, "open": body, "id": d.artifact_id, "size": 18}
    assert not obs.is_error
    [doc] = kept
    assert isinstance(doc, Ref)
    assert doc.artifact_id == d.artifact_id
    for attempt in (doc.read, doc.text, doc.open, lambda: doc.descriptor):
        with pytest.raises(UnresolvedRef) as caught:
            attempt()
        assert d.artifact_id in str(caught.value)


def test_a_task_that_outlives_its_call_loses_the_ref(vault: Vault) -> None:
    d = vault.put(SCOPE, b"x" * 100)
    box = Toolbox(vault)
    tasks: list[asyncio.Task[int]] = []

    async def main() -> tuple[int, int, BaseException | None]:
        later = asyncio.Event()

        async def read_at_once(doc: Ref) -> int:
            return len(doc.read())

        async def read_later(doc: Ref) -> int:
            await later.wait()
            return len(doc.read())

        @box.tool
        async def spawn(doc: Ref) -> int:
            tasks.append(asyncio.create_task(read_later(doc)))
            return await asyncio.create_task(read_at_once(doc))  # a child task, during the call: fine

        obs = await box.call("spawn", args(doc=d.artifact_id), scope=SCOPE, run_id="run_1")
        later.set()
        [late] = tasks
        try:
            await late
        except UnresolvedRef as exc:
            return int(obs.content), 0, exc
        return int(obs.content), 1, None

    during, late_succeeded, error = asyncio.run(main())
    assert during == 100
    assert late_succeeded == 0
    assert error is not None
    assert d.artifact_id in str(error)


def test_a_thread_carrying_the_calls_context_loses_the_ref_when_the_call_ends(vault: Vault) -> None:
    d = vault.put(SCOPE, b"y" * 64)
    box = Toolbox(vault)
    saved: list[tuple[contextvars.Context, Ref]] = []

    @box.tool
    def remember(doc: Ref) -> int:
        saved.append((contextvars.copy_context(), doc))
        outcome: list[object] = []
        worker = threading.Thread(target=lambda: outcome.append(saved[0][0].run(lambda: len(doc.read()))))
        worker.start()
        worker.join()
        return cast(int, outcome[0])

    assert box.call_sync("remember", args(doc=d.artifact_id), scope=SCOPE).content == "64"
    context, doc = saved[0]
    with pytest.raises(UnresolvedRef):
        context.run(doc.read)


@pytest.mark.parametrize("mode", MODES)
def test_another_run_cannot_read_a_ref_from_an_earlier_run(vault: Vault, mode: str) -> None:
    first = vault.put(SCOPE, b"first run")
    second = vault.put(SCOPE, b"second run bytes")
    box = Toolbox(vault)
    kept: list[Ref] = []

    @box.tool
    def peek(doc: Ref) -> dict[str, Any]:
        own = len(doc.read())
        stale: int | str | None = None
        if kept:
            try:
                stale = len(kept[0].read())
            except UnresolvedRef:
                stale = "unresolved"
        kept.append(doc)
        return {"own": own, "stale": stale}

    one = dispatch(box, mode, "peek", args(doc=first.artifact_id), run_id="run_1")
    two = dispatch(box, mode, "peek", args(doc=second.artifact_id), run_id="run_2")
    assert json.loads(one.content) == {"own": 9, "stale": None}
    assert json.loads(two.content) == {"own": 16, "stale": "unresolved"}


class Nested(BaseModel):
    inner: Bundle
    more: list[Bundle] = []


@pytest.mark.parametrize("mode", MODES)
def test_nested_refs_are_resolved_once_each_in_order_of_first_appearance(vault: Vault, mode: str) -> None:
    a, b, c, d, e, f = (vault.put(SCOPE, bytes([65 + i]) * (10 + i)) for i in range(6))
    records = audit_log(vault)
    box = Toolbox(vault)
    events: list[ToolEvent] = []
    box.add_sink(events.append)

    @box.tool
    def gather(
        docs: list[Ref],
        named: dict[str, Ref],
        pair: tuple[Ref, Ref],
        bundle: Bundle,
        grid: list[list[Ref]],
        deep: Nested,
    ) -> dict[str, Any]:
        return {
            "docs": [len(x.read()) for x in docs],
            "named": {k: len(v.read()) for k, v in named.items()},
            "pair": [len(x.read()) for x in pair],
            "bundle": [len(bundle.main.read())] + [len(x.read()) for x in bundle.extras],
            "grid": [[len(x.read()) for x in row] for row in grid],
            "deep": [len(deep.inner.main.read()), len(deep.more[0].extras[0].read())],
        }

    obs = dispatch(
        box,
        mode,
        "gather",
        {
            "docs": [a.artifact_id, b.artifact_id, a.artifact_id],
            "named": {"x": c.artifact_id, "y": a.artifact_id},
            "pair": [d.artifact_id, b.artifact_id],
            "bundle": {"main": e.artifact_id, "extras": [a.artifact_id]},
            "grid": [[c.artifact_id], []],
            "deep": {"inner": {"main": f.artifact_id}, "more": [{"main": a.artifact_id, "extras": [f.artifact_id]}]},
        },
    )
    assert json.loads(obs.content) == {
        "docs": [10, 11, 10],
        "named": {"x": 12, "y": 10},
        "pair": [13, 11],
        "bundle": [14, 10],
        "grid": [[12], []],
        "deep": [15, 15],
    }
    order = (a.artifact_id, b.artifact_id, c.artifact_id, d.artifact_id, e.artifact_id, f.artifact_id)
    assert [(ev.kind, ev.refs) for ev in events] == [("tool_started", order), ("tool_finished", order)]
    assert actions(records, "describe") == list(order)  # each id resolved once, however often it appears
    assert sorted(actions(records, "read")) == sorted(order)  # and its bytes read once per call


@pytest.mark.parametrize("kind", ["dataclass", "typeddict"])
def test_refs_inside_dataclass_and_typeddict_parameters_are_resolved(vault: Vault, kind: str) -> None:
    d = vault.put(SCOPE, b"z" * 21)
    box = Toolbox(vault)

    @box.tool
    def from_dataclass(w: Wrapped) -> int:
        return len(w.doc.read())

    @box.tool
    def from_typeddict(p: Packet) -> int:
        return len(p["doc"].read())

    name = "from_dataclass" if kind == "dataclass" else "from_typeddict"
    obs = box.call_sync(name, {"w" if kind == "dataclass" else "p": {"doc": d.artifact_id}}, scope=SCOPE)
    assert (obs.is_error, obs.content) == (False, "21")


@pytest.mark.parametrize("mode", MODES)
def test_an_omitted_optional_ref_is_not_an_error(vault: Vault, mode: str) -> None:
    d = vault.put(SCOPE, b"present")
    box = Toolbox(vault)

    @box.tool
    def maybe(doc: Ref | None = None, also: typing.Optional[Ref] = None) -> str:  # noqa: UP045 - under test
        return "|".join("none" if x is None else str(len(x.read())) for x in (doc, also))

    assert dispatch(box, mode, "maybe", "{}").content == "none|none"
    assert dispatch(box, mode, "maybe", args(doc=None, also=None)).content == "none|none"
    assert dispatch(box, mode, "maybe", args(doc=d.artifact_id)).content == "7|none"
    assert dispatch(box, mode, "maybe", args(also=d.artifact_id)).content == "none|7"


def bad_ref_cases(vault: Vault, clock: Any) -> dict[str, str]:
    theirs = vault.put(OTHER_SCOPE, b"another tenant's document")
    short_lived = vault.put(SCOPE, b"expires soon", expires_at=clock.now + timedelta(minutes=1))
    clock.advance(minutes=2)
    return {
        "empty": "",
        "unknown": new_artifact_id(),
        "malformed": "art_NOT-A-VALID-ID",
        "wrong alphabet": "art_" + "0" * 26,
        "path": "../../etc/passwd",
        "other scope": theirs.artifact_id,
        "expired": short_lived.artifact_id,
    }


@pytest.mark.parametrize("mode", MODES)
def test_bad_ids_give_one_recoverable_error_that_names_only_the_id(vault: Vault, clock: Any, mode: str) -> None:
    good = vault.put(SCOPE, b"good document")
    cases = bad_ref_cases(vault, clock)
    box = Toolbox(vault)
    ran: list[str] = []
    events: list[ToolEvent] = []
    box.add_sink(events.append)

    @box.tool
    def summarize(doc: Ref) -> str:
        ran.append(doc.artifact_id)
        return "summary"

    @box.tool
    def compare(docs: list[Ref]) -> str:
        ran.append("compare")
        return "compared"

    shapes: set[str] = set()
    not_ids: set[str] = set()
    for label, bad in cases.items():
        for name, arguments in [("summarize", {"doc": bad}), ("compare", {"docs": [good.artifact_id, bad]})]:
            obs = dispatch(box, mode, name, json.dumps(arguments), tool_call_id=f"call_{label}")
            assert obs.is_error, label
            assert obs.tool_call_id == f"call_{label}"
            assert good.artifact_id not in obs.content, label  # names the bad id and nothing else
            if is_artifact_id(bad):  # unknown, another scope's, expired: named
                assert repr(bad) in obs.content, label
                shapes.add(obs.content.replace(repr(bad), "<id>"))
            else:  # not an id: fixed words, never the string (tests/security/test_bad_ref_echo.py)
                assert bad == "" or bad not in obs.content, label
                not_ids.add(obs.content)
            assert events[-1].kind == "tool_failed"
            assert events[-1].error_type == "BadRef"
    assert len(shapes) == 1, shapes  # one error class, one text pattern: no existence oracle
    assert len(not_ids) == 1, not_ids  # and one fixed text for every string that is not an id
    assert ran == []
    assert dispatch(box, mode, "summarize", args(doc=good.artifact_id)).content == "summary"  # the tool works


def test_a_huge_bad_id_is_not_echoed_and_the_error_is_bounded(vault: Vault) -> None:
    box = Toolbox(vault)

    @box.tool
    def summarize(doc: Ref) -> str:
        return "summary"

    huge = "art_" + "q" * 20_000
    obs = box.call_sync("summarize", args(doc=huge), scope=SCOPE)
    assert obs.is_error
    assert "q" * 10 not in obs.content  # not an id: not repeated, not even in part
    assert "not an artifact id" in obs.content
    assert len(obs.content) < 300


@pytest.mark.parametrize("mode", MODES)
def test_a_tool_without_refs_never_touches_the_vault(vault: Vault, mode: str) -> None:
    d = vault.put(SCOPE, b"used only by the control tool")
    records = audit_log(vault)
    spy = CountingVault(vault)
    box = Toolbox(cast(Vault, spy))

    @box.tool
    def add(x: int, y: int = 1, tags: list[str] = [], *, ctx: ToolContext) -> int:  # noqa: B006
        return x + y + len(tags)

    @box.tool
    async def add_async(x: int, options: dict[str, Any], ctx: ToolContext) -> int:
        return x + len(options)

    assert dispatch(box, mode, "add", args(x=2, y=3, tags=["a"])).content == "6"
    assert dispatch(box, mode, "add_async", args(x=2, options={"doc": d.artifact_id})).content == "3"
    assert spy.touched == []
    assert records == []

    @box.tool
    def control(doc: Ref) -> int:
        return len(doc.read())

    assert dispatch(box, mode, "control", args(doc=d.artifact_id)).content == "29"
    assert "describe" in spy.touched  # the spy does see vault use when there is some
    assert [r.action for r in records] == ["describe", "read"]


@pytest.mark.parametrize("mode", MODES)
def test_sealed_artifacts_are_resolved(vault: Vault, mode: str) -> None:
    sealed = vault.put(SCOPE, b"s3cr3t" * 10, disclosure="sealed")
    box = Toolbox(vault)

    @box.tool
    def digest(doc: Ref) -> dict[str, Any]:
        return {"sha": hashlib.sha256(doc.read()).hexdigest(), "disclosure": doc.descriptor.disclosure}

    obs = dispatch(box, mode, "digest", args(doc=sealed.artifact_id))
    assert json.loads(obs.content) == {"sha": hashlib.sha256(b"s3cr3t" * 10).hexdigest(), "disclosure": "sealed"}


@pytest.mark.parametrize("mode", MODES)
def test_raw_arguments_are_not_rewritten_and_a_retry_resolves_again(vault: Vault, mode: str) -> None:
    d = vault.put(SCOPE, b"retry me")
    records = audit_log(vault)
    box = Toolbox(vault)
    kept: list[Ref] = []

    @box.tool
    def measure(doc: Ref, docs: list[Ref]) -> int:
        kept.append(doc)
        return len(doc.read()) + sum(len(x.read()) for x in docs)

    raw = json.dumps({"doc": d.artifact_id, "docs": [d.artifact_id]})
    raw_before = str(raw)
    mapping: dict[str, Any] = {"doc": d.artifact_id, "docs": [d.artifact_id]}
    mapping_before = copy.deepcopy(mapping)
    first = dispatch(box, mode, "measure", raw, tool_call_id="call_1")
    retry = dispatch(box, mode, "measure", raw, tool_call_id="call_1")
    from_mapping = dispatch(box, mode, "measure", mapping, tool_call_id="call_2")
    assert [first.content, retry.content, from_mapping.content] == ["16", "16", "16"]
    assert raw == raw_before
    assert json.loads(raw) == {"doc": d.artifact_id, "docs": [d.artifact_id]}
    assert mapping == mapping_before
    assert type(mapping["doc"]) is str  # no Ref written into the caller's dict
    assert type(mapping["docs"][0]) is str
    assert actions(records, "describe") == [d.artifact_id] * 3  # every attempt resolved afresh
    assert actions(records, "read") == [d.artifact_id] * 3
    for doc in kept:
        with pytest.raises(UnresolvedRef):
            doc.read()


# -- observations ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_observations_render_strings_dicts_and_models(vault: Vault, mode: str) -> None:
    d = vault.put(SCOPE, b"abc")
    box = Toolbox(vault)
    text = 'not {json} "quoted"\n\tünïcode'

    @box.tool
    def as_text() -> str:
        return text

    @box.tool
    def as_dict(doc: Ref) -> dict[str, Any]:
        return {"size": len(doc.read()), "doc": doc, "nested": [1, None, True]}

    @box.tool
    def as_model() -> Report:
        return Report(title="Q3", pages=12)

    assert dispatch(box, mode, "as_text", "{}").content == text
    obs = dispatch(box, mode, "as_dict", args(doc=d.artifact_id))
    assert json.loads(obs.content) == {"size": 3, "doc": d.artifact_id, "nested": [1, None, True]}
    assert dispatch(box, mode, "as_model", "{}").content == Report(title="Q3", pages=12).model_dump_json()
    assert obs.artifacts == ()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("returned", ["bytes", "bytearray", "artifact"])
def test_returned_bytes_are_captured_and_only_their_summary_is_observed(vault: Vault, mode: str, returned: str) -> None:
    payload = b"\x00\x01 binary payload PAYLOAD-7f3a " * 40
    box = Toolbox(vault)
    events: list[ToolEvent] = []
    box.add_sink(events.append)

    @box.tool
    def render() -> object:
        if returned == "bytes":
            return payload
        if returned == "bytearray":
            return bytearray(payload)
        return Artifact(payload, media_type="text/csv", filename="out.csv", disclosure="sealed")

    obs = dispatch(box, mode, "render", "{}", run_id="run_cap", tool_call_id="call_cap")
    assert not obs.is_error
    [summary] = obs.artifacts
    artifact_id = summary["artifact_id"]
    media_type, disclosure = ("text/csv", "sealed") if returned == "artifact" else ("application/octet-stream", "model")
    assert dict(summary) == {
        "artifact_id": artifact_id,
        "media_type": media_type,
        "size": len(payload),
        "content_hash": "sha256:" + hashlib.sha256(payload).hexdigest(),
        "disclosure": disclosure,
    }
    assert json.loads(obs.content) == {"artifact": dict(summary)}
    assert "PAYLOAD-7f3a" not in obs.content
    assert vault.read_bytes(SCOPE, artifact_id) == payload
    described = vault.describe(SCOPE, artifact_id)
    assert described.tool_call_id == "call_cap"
    if returned == "artifact":
        assert described.filename == "out.csv"
    assert events[-1].kind == "tool_finished"
    assert events[-1].artifacts == (artifact_id,)


@pytest.mark.parametrize("mode", MODES)
def test_a_tool_exception_becomes_an_error_naming_only_its_type(vault: Vault, mode: str) -> None:
    d = vault.put(SCOPE, b"contents the tool might put in its error")
    box = Toolbox(vault)
    events: list[ToolEvent] = []
    box.add_sink(events.append)

    @box.tool
    def explode(doc: Ref) -> str:
        raise KeyError(f"MESSAGE-9c1e {doc.text()}")

    @box.tool
    async def explode_async(doc: Ref) -> str:
        await asyncio.sleep(0)
        raise RuntimeError(f"MESSAGE-9c1e {doc.text()}")

    for name, kind in [("explode", "KeyError"), ("explode_async", "RuntimeError")]:
        obs = dispatch(box, mode, name, args(doc=d.artifact_id), tool_call_id="call_x")
        assert obs == Observation("call_x", f"error: the tool raised {kind}", is_error=True)
        assert events[-1].kind == "tool_failed"
        assert events[-1].error_type == kind
        assert events[-1].refs == (d.artifact_id,)


VALUE = "VALUE-5e2b"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("no_such_tool", json.dumps({"doc": VALUE})),
        ("typed", "{not json " + VALUE),
        ("typed", json.dumps([VALUE])),
        ("typed", json.dumps(VALUE)),
        ("typed", "null"),
        ("typed", ""),
        ("typed", json.dumps({"doc": "art_" + "a" * 26, "count": VALUE})),
        ("typed", json.dumps({"doc": {"nested": VALUE}})),
        ("typed", json.dumps({"doc": [VALUE]})),
        ("typed", json.dumps({"doc": 12345, "mode": VALUE})),
        ("typed", json.dumps({"doc": "art_" + "a" * 26, "extra_key": VALUE})),
        ("typed", json.dumps({"count": 3, "note": VALUE})),
    ],
)
def test_refused_calls_do_not_echo_argument_values(vault: Vault, mode: str, tool: str, arguments: str) -> None:
    box = Toolbox(vault)
    ran: list[int] = []
    events: list[ToolEvent] = []
    box.add_sink(events.append)

    @box.tool
    def typed(doc: Ref, count: int = 1, mode: Literal["fast", "slow"] = "fast", note: str = "") -> str:
        ran.append(count)
        return "ran"

    obs = dispatch(box, mode, tool, arguments, tool_call_id="call_bad")
    assert obs.is_error
    assert obs.tool_call_id == "call_bad"
    assert obs.content.startswith("error: ")
    assert VALUE not in obs.content
    assert VALUE not in repr(events)
    assert ran == []
    assert [e.kind for e in events] == ["tool_failed"]


# -- sync and async tools, both entry points, ToolContext -------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_sync_and_async_tools_through_both_entry_points(vault: Vault, mode: str, kind: str) -> None:
    d = vault.put(SCOPE, b"q" * 33)
    box = Toolbox(vault)
    contexts: list[ToolContext] = []

    def body(doc: Ref, ctx: ToolContext) -> dict[str, Any]:
        contexts.append(ctx)
        made = ctx.vault.put(ctx.scope, b"made by the tool", tool_call_id=ctx.tool_call_id)
        return {"length": len(doc.read()), "made": made.artifact_id}

    def work_sync(doc: Ref, ctx: ToolContext) -> dict[str, Any]:
        return body(doc, ctx)

    async def work_async(doc: Ref, ctx: ToolContext) -> dict[str, Any]:
        await asyncio.sleep(0)
        return body(doc, ctx)

    box.tool(work_sync if kind == "sync" else work_async, name="work")

    assert "ctx" not in schema_of(box, "openai", "work")["properties"]
    obs = dispatch(box, mode, "work", args(doc=d.artifact_id), run_id="run_9", tool_call_id="call_9")
    result = json.loads(obs.content)
    assert result["length"] == 33
    [ctx] = contexts
    assert (ctx.scope, ctx.run_id, ctx.tool_call_id) == (SCOPE, "run_9", "call_9")
    assert ctx.vault.embedded_vault() is vault  # the Toolbox's vault, watched for taint (refvault.toolbox.taint)
    assert vault.read_bytes(SCOPE, result["made"]) == b"made by the tool"
    assert vault.describe(SCOPE, result["made"]).tool_call_id == "call_9"
    assert [(e.kind, e.tool_call_id, e.refs) for e in box.trajectory("run_9")] == [
        ("tool_started", "call_9", (d.artifact_id,)),
        ("tool_finished", "call_9", (d.artifact_id,)),
    ]
    assert box.trajectory("run_other") == []


# -- concurrency -----------------------------------------------------------------------

N = 128


def many_scopes(vault: Vault) -> list[tuple[Scope, str]]:
    """128 distinct scopes (16 tenants, distinct users and sessions), each with its own artifact."""
    planted = []
    for i in range(N):
        scope = Scope(f"tenant{i % 16}", f"user{i}", f"session{i}")
        data = bytes([i % 251]) * (1000 + 7 * i)
        planted.append((scope, vault.put(scope, data).artifact_id))
    return planted


def expected_for(i: int) -> dict[str, Any]:
    data = bytes([i % 251]) * (1000 + 7 * i)
    return {"length": len(data), "sha": hashlib.sha256(data).hexdigest()}


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_128_concurrent_dispatches_over_distinct_scopes_do_not_cross_talk(vault: Vault, kind: str) -> None:
    planted = many_scopes(vault)
    box = Toolbox(vault)

    async def main() -> list[Observation]:
        entered = 0
        everyone_in = asyncio.Event()

        @box.tool
        async def measure_async(doc: Ref, index: int, ctx: ToolContext) -> dict[str, Any]:
            nonlocal entered
            entered += 1
            if entered == N:
                everyone_in.set()
            await everyone_in.wait()  # all 128 frames are open at once before anyone reads
            body = doc.read()
            await asyncio.sleep(0)
            assert doc.read() == body  # still its own bytes after every other call has read
            return {"length": len(body), "sha": hashlib.sha256(body).hexdigest(), "tenant": ctx.scope.tenant}

        @box.tool
        def measure_sync(doc: Ref, index: int, ctx: ToolContext) -> dict[str, Any]:
            body = doc.read()
            return {"length": len(body), "sha": hashlib.sha256(body).hexdigest(), "tenant": ctx.scope.tenant}

        name = f"measure_{kind}"
        calls = [
            box.call(name, args(doc=aid, index=i), scope=scope, run_id=f"run_{i}", tool_call_id=f"call_{i}")
            for i, (scope, aid) in enumerate(planted)
        ]
        return await asyncio.gather(*calls)

    observations = asyncio.run(main())
    for i, obs in enumerate(observations):
        assert obs.tool_call_id == f"call_{i}"
        assert json.loads(obs.content) == {**expected_for(i), "tenant": f"tenant{i % 16}"}, i
        assert [e.refs for e in box.trajectory(f"run_{i}")] == [(planted[i][1],)] * 2


def test_cancelling_one_dispatch_does_not_disturb_the_others(vault: Vault) -> None:
    planted = many_scopes(vault)
    box = Toolbox(vault)
    victim = 17
    victim_refs: list[Ref] = []

    async def main() -> tuple[list[Observation], BaseException | None, list[str]]:
        entered = 0
        everyone_in = asyncio.Event()
        release = asyncio.Event()
        never = asyncio.Event()
        after_cancel = asyncio.Event()
        seen_by_victim: list[str] = []
        late_reads: list[asyncio.Task[int]] = []

        async def late_read(doc: Ref) -> int:
            await after_cancel.wait()
            return len(doc.read())

        @box.tool
        async def measure(doc: Ref, index: int) -> dict[str, Any]:
            nonlocal entered
            entered += 1
            if entered == N:
                everyone_in.set()
            if index == victim:
                victim_refs.append(doc)
                late_reads.append(asyncio.create_task(late_read(doc)))
                seen_by_victim.append(f"read {len(doc.read())}")
                try:
                    await never.wait()
                except asyncio.CancelledError:
                    seen_by_victim.append("cancelled")
                    raise
            await release.wait()
            body = doc.read()
            return {"length": len(body), "sha": hashlib.sha256(body).hexdigest()}

        tasks = [
            asyncio.create_task(
                box.call("measure", args(doc=aid, index=i), scope=scope, run_id=f"run_{i}", tool_call_id=f"call_{i}")
            )
            for i, (scope, aid) in enumerate(planted)
        ]
        await everyone_in.wait()
        tasks[victim].cancel()
        with pytest.raises(asyncio.CancelledError):
            await tasks[victim]
        after_cancel.set()
        late_error: BaseException | None = None
        try:
            await late_reads[0]
        except UnresolvedRef as exc:
            late_error = exc
        release.set()
        others = [t for i, t in enumerate(tasks) if i != victim]
        return list(await asyncio.gather(*others)), late_error, seen_by_victim

    observations, late_error, seen_by_victim = asyncio.run(main())
    assert seen_by_victim == [f"read {1000 + 7 * victim}", "cancelled"]
    assert isinstance(late_error, UnresolvedRef)  # the frame was closed, not merely unset
    [victim_ref] = victim_refs
    with pytest.raises(UnresolvedRef):
        victim_ref.read()
    indices = [i for i in range(N) if i != victim]
    assert len(observations) == N - 1
    for i, obs in zip(indices, observations, strict=True):
        assert obs.tool_call_id == f"call_{i}"
        assert json.loads(obs.content) == expected_for(i), i
    assert box.trajectory(f"run_{victim}")[0].kind == "tool_started"


def test_call_sync_from_many_threads_does_not_cross_talk(vault: Vault) -> None:
    planted = many_scopes(vault)
    box = Toolbox(vault)

    @box.tool
    def measure(doc: Ref) -> dict[str, Any]:
        body = doc.read()
        return {"length": len(body), "sha": hashlib.sha256(body).hexdigest()}

    def one(i: int) -> Observation:
        scope, aid = planted[i]
        return box.call_sync("measure", args(doc=aid), scope=scope, tool_call_id=f"call_{i}")

    with ThreadPoolExecutor(max_workers=32) as pool:
        observations = list(pool.map(one, range(N)))
    for i, obs in enumerate(observations):
        assert json.loads(obs.content) == expected_for(i), i


def test_a_scope_cannot_resolve_anothers_artifact_even_concurrently(vault: Vault) -> None:
    planted = many_scopes(vault)
    box = Toolbox(vault)

    @box.tool
    async def measure(doc: Ref) -> int:
        await asyncio.sleep(0)
        return len(doc.read())

    async def main() -> list[Observation]:
        # every scope asks for its neighbour's artifact
        calls = [
            box.call("measure", args(doc=planted[(i + 1) % N][1]), scope=planted[i][0], tool_call_id=f"call_{i}")
            for i in range(N)
        ]
        return await asyncio.gather(*calls)

    for i, obs in enumerate(asyncio.run(main())):
        assert obs.is_error, i
        assert repr(planted[(i + 1) % N][1]) in obs.content


class Node(BaseModel):
    doc: Ref | None = None
    child: "Node | None" = None


def test_arguments_nested_past_the_depth_limit_are_refused(vault: Vault) -> None:
    from refvault.toolbox.substitute import MAX_DEPTH

    d = vault.put(SCOPE, b"leaf")
    box = Toolbox(vault)

    @box.tool
    def walk(tree: Node) -> str:
        return "walked"

    def nested(levels: int) -> dict[str, Any]:
        node: dict[str, Any] = {"doc": d.artifact_id}
        for _ in range(levels):
            node = {"child": node}
        return node

    assert box.call_sync("walk", {"tree": nested(MAX_DEPTH - 5)}, scope=SCOPE).content == "walked"
    refused = box.call_sync("walk", {"tree": nested(MAX_DEPTH + 5)}, scope=SCOPE)
    assert refused.is_error
    assert f"deeper than {MAX_DEPTH}" in refused.content


def test_a_cycle_in_arguments_is_refused() -> None:
    from refvault.toolbox.ref import DispatchFrame
    from refvault.toolbox.substitute import bind_refs

    class Loop(BaseModel):
        items: list[Any]

    cyclic: list[Any] = []
    cyclic.append(cyclic)
    frame = DispatchFrame(Vault.open("memory://"), SCOPE, None)
    with pytest.raises(ValueError, match="cycle"):
        bind_refs(Loop.model_construct(items=cyclic), frame)


def test_call_sync_runs_an_async_tool_inside_a_running_loop(vault: Vault, scope: Scope) -> None:
    """From a thread that already runs an event loop (a notebook), call_sync still runs an async tool, Refs
    resolved, instead of failing after it recorded the start."""

    box = Toolbox(vault)
    art = vault.put(scope, b"one two three", media_type="text/plain").artifact_id

    @box.tool
    async def words(doc: Ref) -> int:
        await asyncio.sleep(0)
        return len(doc.text().split())

    async def inside() -> Observation:
        return box.call_sync("words", {"doc": art}, scope=scope, run_id="r1")

    observation = asyncio.run(inside())
    assert (observation.is_error, observation.content) == (False, "3")
    assert [event.kind for event in box.trajectory("r1")] == ["tool_started", "tool_finished"]
