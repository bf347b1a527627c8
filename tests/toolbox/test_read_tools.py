"""The built-in model read tools (issue 4): describe, list, read, query and load artifacts, through the Toolbox.

Each test dispatches through ``await box.call`` and/or ``box.call_sync`` on the memory and embedded backends.
"""

import base64
import inspect
import json
from datetime import timedelta
from typing import Any

import pytest
from openai.lib._pydantic import to_strict_json_schema

from refvault import Observation, Scope, Toolbox, Vault, read
from refvault.errors import NOT_AN_ID
from refvault.read import records as record_reads
from refvault.read import windows
from refvault.toolbox.ref import finish_ref_schemas
from tests.conftest import Clock
from tests.media import png_bytes
from tests.toolbox.test_offload import dispatch
from tests.toolbox.test_toolbox import untitled

MODES = ("call", "call_sync")
FLAVORS = ("openai", "anthropic", "gemini", "mcp")
BUILTINS = ("describe_artifact", "list_artifacts", "read_artifact", "query_artifact", "load_artifacts")
OTHER = Scope("globex", "bob", "s9")
CANARY = "CANARY-52be1-sealed-机密"
NDJSON = "application/x-ndjson"
PARQUET = "application/vnd.apache.parquet"
MISSING_ID = "art_" + "a" * 26


# -- helpers ---------------------------------------------------------------------------


def ok(observation: Observation) -> dict[str, Any]:
    assert not observation.is_error, observation.content
    answer = json.loads(observation.content)
    assert isinstance(answer, dict)
    return answer


def error(observation: Observation) -> str:
    assert observation.is_error, observation.content
    assert observation.content.startswith("error: ")
    return observation.content.removeprefix("error: ")


def png(width: int = 3, height: int = 2) -> bytes:
    return png_bytes(width, height)


def ndjson(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def incidents(n: int) -> list[dict[str, Any]]:
    return [
        {"event_id": f"evt-{i:04d}", "region": ["eu", "us", "ap"][i % 3], "code": (i * 31) % 97, "ok": i % 4 == 0}
        for i in range(n)
    ]


TEXT = "".join(f"{i:03d} héllo wörld {'x' * (i % 9)}\n" for i in range(120)) + "last line without newline"


def text_id(vault: Vault, scope: Scope, text: str = TEXT, **options: Any) -> str:
    return vault.put(scope, text.encode(), media_type="text/plain", **options).artifact_id


def records_id(vault: Vault, scope: Scope, n: int = 250, **options: Any) -> str:
    return vault.put(scope, ndjson(incidents(n)), media_type=NDJSON, **options).artifact_id


def schema_for(box: Toolbox, flavor: str, name: str, *, strict: bool = False) -> dict[str, Any]:
    for definition in box.schemas(flavor, strict=strict):  # type: ignore[arg-type]
        inner = definition["function"] if flavor == "openai" else definition
        if inner["name"] == name:
            return definition
    raise AssertionError(f"no schema for {name}")


def parameters(definition: dict[str, Any], flavor: str) -> dict[str, Any]:
    if flavor == "openai":
        return definition["function"]["parameters"]  # type: ignore[no-any-return]
    key = {"anthropic": "input_schema", "mcp": "inputSchema", "gemini": "parameters"}[flavor]
    return definition[key]  # type: ignore[no-any-return]


def keys_used(node: Any) -> set[str]:
    if isinstance(node, list):
        return set().union(*(keys_used(item) for item in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    used: set[str] = set()
    for key, value in node.items():
        if key == "properties":
            used.add(key)
            for sub in value.values():
                used |= keys_used(sub)
        else:
            used.add(key)
            used |= keys_used(value)
    return used


def keyword_names(function: Any, *, drop: tuple[str, ...] = ()) -> set[str]:
    """The keyword arguments of a Python read, but the reader's purpose and recipient (the Toolbox sets those)."""
    signature = inspect.signature(function)
    dropped = (*drop, "purpose", "recipient")
    return {p.name for p in signature.parameters.values() if p.kind is p.KEYWORD_ONLY and p.name not in dropped}


# -- schemas ---------------------------------------------------------------------------


@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_builtin_is_described_for_every_flavor(vault: Vault, flavor: str) -> None:
    box = Toolbox(vault)

    @box.tool
    def mine(n: int) -> int:
        """My own tool."""
        return n

    definitions = box.schemas(flavor)  # type: ignore[arg-type]
    names = [(d["function"] if flavor == "openai" else d)["name"] for d in definitions]
    assert names == [*BUILTINS, "mine"]
    for definition in definitions[:5]:
        inner = definition["function"] if flavor == "openai" else definition
        assert len(inner["description"]) > 40
        params = parameters(definition, flavor)
        assert params["type"] == "object"
        assert "ctx" not in params["properties"]
    if flavor == "gemini":
        allowed = {"type", "format", "description", "nullable", "enum", "properties", "required", "items", "anyOf"}
        allowed |= {"minItems", "maxItems", "minimum", "maximum", "pattern"}
        for definition in definitions:
            assert keys_used(definition["parameters"]) <= allowed


def test_the_read_tools_take_the_argument_names_of_the_python_reads(vault: Vault) -> None:
    box = Toolbox(vault)
    read_params = set(parameters(schema_for(box, "openai", "read_artifact"), "openai")["properties"])
    window_names = keyword_names(windows.window)
    grep_names = keyword_names(windows.grep, drop=("max_seconds",))
    assert window_names == {"lines", "byte_range", "max_chars"}
    assert read_params == {"artifact_id", "pattern"} | window_names | grep_names
    query_params = set(parameters(schema_for(box, "openai", "query_artifact"), "openai")["properties"])
    assert query_params == {"artifact_id"} | keyword_names(record_reads.query, drop=("max_seconds", "max_scan"))
    load_params = parameters(schema_for(box, "openai", "load_artifacts"), "openai")
    assert load_params["required"] == ["artifact_ids"]
    assert load_params["properties"]["artifact_ids"]["type"] == "array"


def test_openai_strict_mode_covers_every_builtin_but_the_free_form_query(vault: Vault) -> None:
    box = Toolbox(vault)
    strictness = {d["function"]["name"]: d["function"]["strict"] for d in box.schemas("openai", strict=True)}
    # query_artifact's where/order are free-form objects, which strict mode cannot express: it stays non-strict.
    assert strictness == {name: name != "query_artifact" for name in BUILTINS}
    assert schema_for(box, "openai", "query_artifact", strict=True)["function"]["parameters"] == parameters(
        schema_for(box, "openai", "query_artifact"), "openai"
    )
    for name in BUILTINS:
        direct = to_strict_json_schema(box._tools[name].arguments)  # the argument models are internal
        if name == "query_artifact":
            continue
        strict = schema_for(box, "openai", name, strict=True)["function"]["parameters"]
        assert untitled(finish_ref_schemas(direct, pattern=False)) == strict
        assert strict["additionalProperties"] is False
        assert set(strict["required"]) == set(strict["properties"])


# -- describe_artifact -----------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_describe_a_text_artifact(vault: Vault, scope: Scope, mode: str) -> None:
    box = Toolbox(vault)
    artifact_id = text_id(vault, scope, filename="notes.txt")
    answer = ok(dispatch(box, mode, "describe_artifact", {"artifact_id": artifact_id}, scope=scope))
    assert answer["status"] == "ok"
    assert answer["descriptor"] == vault.describe(scope, artifact_id).to_dict()
    assert "read_artifact" in answer["reads"]
    assert "load_artifacts" in answer["reads"]
    assert "query_artifact" not in answer["reads"]
    assert "héllo" not in json.dumps(answer, ensure_ascii=False)


@pytest.mark.parametrize("mode", MODES)
def test_describe_a_record_artifact_shows_its_schema_once_derived(vault: Vault, scope: Scope, mode: str) -> None:
    box = Toolbox(vault)
    artifact_id = records_id(vault, scope)
    before = ok(dispatch(box, mode, "describe_artifact", {"artifact_id": artifact_id}, scope=scope))
    assert "query_artifact" in before["reads"]
    assert "records" not in before  # describing never derives (that is a query's work)
    ok(dispatch(box, mode, "query_artifact", {"artifact_id": artifact_id, "limit": 1}, scope=scope))
    after = ok(dispatch(box, mode, "describe_artifact", {"artifact_id": artifact_id}, scope=scope))
    assert after["records"]["count"] == 250
    assert list(after["records"]["fields"]) == ["event_id", "region", "code", "ok"]


@pytest.mark.parametrize("mode", MODES)
def test_describe_a_sealed_artifact_gives_metadata_and_no_reads(vault: Vault, scope: Scope, mode: str) -> None:
    box = Toolbox(vault)
    artifact_id = text_id(vault, scope, CANARY * 10, disclosure="sealed")
    answer = ok(dispatch(box, mode, "describe_artifact", {"artifact_id": artifact_id}, scope=scope))
    assert answer["descriptor"]["artifact_id"] == artifact_id
    assert answer["descriptor"]["retrieval"]["disclosure"] == "sealed"
    assert answer["reads"].startswith("none: sealed")
    assert "Ref" in answer["reads"]
    assert CANARY not in json.dumps(answer, ensure_ascii=False)


# -- list_artifacts --------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_list_is_newest_first_capped_with_a_count_of_the_rest(
    vault: Vault, scope: Scope, clock: Clock, mode: str
) -> None:
    box = Toolbox(vault)
    put = []
    for i in range(7):
        put.append(text_id(vault, scope, f"doc {i}\n"))
        clock.advance(seconds=1)
    clock.now -= timedelta(hours=1)  # captured last, but created earliest: newest first goes by created_at
    earliest = text_id(vault, scope, "old\n")
    text_id(vault, OTHER, "not yours\n")

    everything = ok(dispatch(box, mode, "list_artifacts", {"limit": 50}, scope=scope))
    assert [a["artifact_id"] for a in everything["artifacts"]] == [*reversed(put), earliest]
    assert everything["returned"] == everything["total"] == 8
    assert everything["more"] is None
    capped = ok(dispatch(box, mode, "list_artifacts", {"limit": 3}, scope=scope))
    assert [a["artifact_id"] for a in capped["artifacts"]] == list(reversed(put))[:3]
    assert capped["returned"] == 3
    assert capped["total"] == 8
    assert capped["more"].startswith("+5 more")
    default = ok(dispatch(box, mode, "list_artifacts", {}, scope=scope))
    assert default["returned"] == 8
    first = default["artifacts"][0]
    assert set(first) == {"artifact_id", "filename", "media_type", "size", "disclosure", "created_at"}


@pytest.mark.parametrize("mode", MODES)
def test_list_order_is_stable_for_equal_timestamps(vault: Vault, scope: Scope, clock: Clock, mode: str) -> None:
    box = Toolbox(vault)
    put = [text_id(vault, scope, f"same instant {i}\n") for i in range(6)]  # the clock does not move
    assert len({vault.describe(scope, a).to_dict()["created_at"] for a in put}) == 1
    seen = [
        [a["artifact_id"] for a in ok(dispatch(box, mode, "list_artifacts", {"limit": 50}, scope=scope))["artifacts"]]
        for _ in range(3)
    ]
    assert seen[0] == seen[1] == seen[2] == list(reversed(put))  # ties: latest published first
    page = ok(dispatch(box, mode, "list_artifacts", {"limit": 4}, scope=scope))
    assert [a["artifact_id"] for a in page["artifacts"]] == list(reversed(put))[:4]


@pytest.mark.parametrize("limit", [0, 51, -3])
def test_list_refuses_a_limit_out_of_range(vault: Vault, scope: Scope, limit: int) -> None:
    box = Toolbox(vault)
    assert "limit must be between 1 and 50" in error(box.call_sync("list_artifacts", {"limit": limit}, scope=scope))


# -- read_artifact ---------------------------------------------------------------------


WINDOW_CASES: list[dict[str, Any]] = [
    {},
    {"lines": [0, 5]},
    {"lines": [100, None]},
    {"lines": [118, 500]},
    {"byte_range": [3, 17]},
    {"byte_range": [0, 1_000_000]},
    {"lines": [0, 120], "max_chars": 200},
    {"byte_range": [10, 100], "max_chars": 7},
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", range(len(WINDOW_CASES)))
def test_read_artifact_windows_equal_read_window(vault: Vault, scope: Scope, mode: str, case: int) -> None:
    box = Toolbox(vault)
    artifact_id = text_id(vault, scope)
    arguments = WINDOW_CASES[case]
    answer = ok(dispatch(box, mode, "read_artifact", {"artifact_id": artifact_id, **arguments}, scope=scope))
    assert answer == _for_model(read.window(vault, scope, artifact_id, **arguments))


@pytest.mark.parametrize("mode", MODES)
def test_read_artifact_pages_through_a_text_with_next(vault: Vault, scope: Scope, mode: str) -> None:
    box = Toolbox(vault)
    artifact_id = text_id(vault, scope)
    arguments: dict[str, Any] | None = {"lines": [0, 40], "max_chars": 300}
    pieces = []
    while arguments is not None:
        answer = ok(dispatch(box, mode, "read_artifact", {"artifact_id": artifact_id, **arguments}, scope=scope))
        pieces.append(answer["text"])
        arguments = answer["next"]
        if arguments is not None:
            arguments = {**arguments, "max_chars": 300}
    assert "".join(pieces) == TEXT


GREP_CASES: list[dict[str, Any]] = [
    {"pattern": "héllo"},
    {"pattern": "xxxxxxxx"},
    {"pattern": "^0[0-4]", "regex": True},
    {"pattern": "wörld", "max_matches": 2},
    {"pattern": "wörld", "max_matches": 3, "from_line": 50},
    {"pattern": "absent"},
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", range(len(GREP_CASES)))
def test_read_artifact_grep_equals_read_grep(vault: Vault, scope: Scope, mode: str, case: int) -> None:
    box = Toolbox(vault)
    artifact_id = text_id(vault, scope)
    arguments = GREP_CASES[case]
    answer = ok(dispatch(box, mode, "read_artifact", {"artifact_id": artifact_id, **arguments}, scope=scope))
    pattern = arguments["pattern"]
    rest = {k: v for k, v in arguments.items() if k != "pattern"}
    assert answer == _for_model(read.grep(vault, scope, artifact_id, pattern, **rest))
    assert answer["matches"] or answer["scan_complete"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"pattern": "x", "lines": [0, 3]}, "not both"),
        ({"pattern": "x", "byte_range": [0, 3]}, "not both"),
        ({"regex": True}, "pass pattern"),
        ({"from_line": 4}, "pass pattern"),
        ({"lines": [0, 3], "byte_range": [0, 3]}, "not both"),
        ({"lines": [5, 2]}, "greater than start"),
        ({"max_chars": 200_001}, "max_chars"),
        ({"pattern": "(", "regex": True}, "invalid regular expression"),
    ],
)
def test_read_artifact_explains_bad_arguments(
    vault: Vault, scope: Scope, arguments: dict[str, Any], message: str
) -> None:
    box = Toolbox(vault)
    artifact_id = text_id(vault, scope)
    assert message in error(box.call_sync("read_artifact", {"artifact_id": artifact_id, **arguments}, scope=scope))


@pytest.mark.parametrize("mode", MODES)
def test_read_artifact_refuses_binary_pointing_to_by_reference_use(vault: Vault, scope: Scope, mode: str) -> None:
    box = Toolbox(vault)
    artifact_id = vault.put(scope, png(), media_type="image/png").artifact_id
    message = error(dispatch(box, mode, "read_artifact", {"artifact_id": artifact_id}, scope=scope))
    assert "not text" in message
    assert "by reference" in message
    assert "Ref" in message


# -- query_artifact --------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_query_artifact_pages_with_cursors_like_the_unpaged_answer(vault: Vault, scope: Scope, mode: str) -> None:
    box = Toolbox(vault)
    artifact_id = records_id(vault, scope)
    selection: dict[str, Any] = {
        "where": {"or": [{"field": "region", "op": "eq", "value": "eu"}, {"field": "code", "op": "lt", "value": 20}]},
        "fields": ["event_id", "code"],
        "order": [{"field": "code", "direction": "desc"}],
    }
    unpaged = read.query(vault, scope, artifact_id, limit=1000, **selection)
    assert not unpaged["has_more"]
    assert unpaged["returned_records"] > 60
    pages = []
    cursor = None
    while True:
        arguments = {"artifact_id": artifact_id, "limit": 25, **selection}
        if cursor is not None:
            arguments["cursor"] = cursor
        page = ok(dispatch(box, mode, "query_artifact", arguments, scope=scope))
        assert page["scan_complete"] is True
        pages.append(page["records"])
        if not page["has_more"]:
            assert page["next_cursor"] is None
            break
        cursor = page["next_cursor"]
    concatenated = [row for page_rows in pages for row in page_rows]
    assert concatenated == unpaged["records"]
    assert len({row["index"] for row in concatenated}) == len(concatenated)
    assert len(pages) == -(-len(concatenated) // 25)


@pytest.mark.parametrize("mode", MODES)
def test_query_artifact_shows_refvault_errors_helpfully(vault: Vault, scope: Scope, clock: Clock, mode: str) -> None:
    box = Toolbox(vault)
    artifact_id = records_id(vault, scope)

    def query(**arguments: Any) -> Observation:
        return dispatch(box, mode, "query_artifact", {"artifact_id": artifact_id, **arguments}, scope=scope)

    unknown = error(query(where={"field": "nope", "op": "eq", "value": 1}))
    assert "unknown field 'nope'" in unknown
    assert "event_id, region, code, ok" in unknown
    assert "unknown op 'like'" in error(query(where={"field": "code", "op": "like", "value": 1}))
    assert "field 'code'" in error(query(where={"field": "code", "op": "eq", "value": "seven"}))

    first = ok(query(limit=10))
    cursor = first["next_cursor"]
    tampered = cursor[:-6] + ("A" if cursor[-6] != "A" else "B") + cursor[-5:]
    assert error(query(limit=10, cursor=tampered)).startswith("invalid cursor (")
    changed = error(query(limit=10, cursor=cursor, where={"field": "ok", "op": "eq", "value": True}))
    assert changed.startswith("invalid cursor (query)")
    clock.advance(hours=2)
    assert error(query(limit=10, cursor=cursor)).startswith("invalid cursor (expired)")
    text = text_id(vault, scope, "not records\n")
    refused = error(dispatch(box, mode, "query_artifact", {"artifact_id": text}, scope=scope))
    assert "query" in refused or "record" in refused


@pytest.mark.parametrize("mode", MODES)
def test_keys_differing_only_in_case_keep_their_values(vault: Vault, scope: Scope, mode: str) -> None:
    box = Toolbox(vault)
    artifact_id = vault.put(scope, b'{"a": 1, "A": 2}\n{"a": 3, "A": 4}\n', media_type=NDJSON).artifact_id
    observation = dispatch(box, mode, "query_artifact", {"artifact_id": artifact_id}, scope=scope)
    if observation.is_error:  # refusing such records is honest too; silently nulling a field is not
        assert "case" in observation.content
        return
    records = [row["record"] for row in ok(observation)["records"]]
    assert records == [{"a": 1, "A": 2}, {"a": 3, "A": 4}], f"records.py returned {records}"


# -- disclosure, errors, scope ---------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("read_artifact", {}),
        ("read_artifact", {"lines": [0, 2]}),
        ("read_artifact", {"byte_range": [0, 10]}),
        ("read_artifact", {"pattern": "CANARY"}),
        ("query_artifact", {}),
    ],
)
def test_content_tools_refuse_sealed_artifacts_by_reference(
    vault: Vault, scope: Scope, mode: str, tool: str, arguments: dict[str, Any]
) -> None:
    box = Toolbox(vault)
    body = ndjson([{"secret": CANARY, "n": i} for i in range(5)])
    artifact_id = vault.put(scope, body, media_type=NDJSON, disclosure="sealed").artifact_id
    message = error(dispatch(box, mode, tool, {"artifact_id": artifact_id, **arguments}, scope=scope))
    assert artifact_id in message
    assert "sealed" in message
    assert "Ref" in message
    assert CANARY not in message
    assert record_reads.derivation_of(vault, scope, artifact_id) is None  # refused before any derivation


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("describe_artifact", {}),
        ("read_artifact", {}),
        ("read_artifact", {"pattern": "x"}),
        ("query_artifact", {}),
    ],
)
def test_another_scopes_artifact_looks_exactly_like_a_missing_one(
    vault: Vault, scope: Scope, mode: str, tool: str, arguments: dict[str, Any]
) -> None:
    box = Toolbox(vault)
    theirs = records_id(vault, OTHER)
    foreign = error(dispatch(box, mode, tool, {"artifact_id": theirs, **arguments}, scope=scope))
    vault.delete(OTHER, theirs)
    gone = error(dispatch(box, mode, tool, {"artifact_id": theirs, **arguments}, scope=OTHER))
    missing = error(dispatch(box, mode, tool, {"artifact_id": MISSING_ID, **arguments}, scope=scope))
    assert foreign == gone == missing.replace(MISSING_ID, theirs)
    assert "not found" in foreign


@pytest.mark.parametrize("mode", MODES)
def test_load_gives_the_same_entry_for_another_scopes_id_and_a_missing_one(
    vault: Vault, scope: Scope, mode: str
) -> None:
    box = Toolbox(vault)
    theirs = text_id(vault, OTHER, "theirs\n")
    foreign = dispatch(box, mode, "load_artifacts", {"artifact_ids": [theirs]}, scope=scope)
    missing = dispatch(box, mode, "load_artifacts", {"artifact_ids": [MISSING_ID]}, scope=scope)
    assert foreign.content == missing.content.replace(MISSING_ID, theirs)
    assert [dict(p) for p in foreign.parts] == [
        {k: (v.replace(MISSING_ID, theirs) if isinstance(v, str) else v) for k, v in p.items()} for p in missing.parts
    ]
    assert "theirs" not in foreign.content + json.dumps(foreign.parts)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("tool", "target", "arguments"),
    [
        ("read_artifact", "window", {}),
        ("read_artifact", "grep", {"pattern": "x"}),
        ("query_artifact", "query", {}),
        ("describe_artifact", "describe", {}),
        ("list_artifacts", "list", {}),
    ],
)
def test_a_non_refvault_exception_in_a_builtin_shows_only_its_type(
    vault: Vault,
    scope: Scope,
    mode: str,
    tool: str,
    target: str,
    arguments: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    box = Toolbox(vault)
    artifact_id = records_id(vault, scope)

    def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"internal detail {CANARY}")

    if target in ("window", "grep"):
        monkeypatch.setattr(windows, target, explode)
    elif target == "query":
        monkeypatch.setattr(record_reads, "query", explode)
    else:
        monkeypatch.setattr(vault, target, explode)
    if tool != "list_artifacts":
        arguments = {"artifact_id": artifact_id, **arguments}
    observation = dispatch(box, mode, tool, arguments, scope=scope)
    assert observation == Observation("call_1", "error: the tool raised RuntimeError", is_error=True)


# -- load_artifacts --------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_load_several_artifacts_in_the_order_given(vault: Vault, scope: Scope, mode: str) -> None:
    box = Toolbox(vault)
    image = png()
    text = text_id(vault, scope, "alpha\nbeta\n")
    picture = vault.put(scope, image, media_type="image/png", filename="chart.png").artifact_id
    sealed = text_id(vault, scope, CANARY + "\n", disclosure="sealed")
    blob = vault.put(scope, b"\x00\x01binary", media_type="application/octet-stream").artifact_id
    ids = [picture, "not-an-id", text, sealed, picture, MISSING_ID, blob, text]

    observation = dispatch(box, mode, "load_artifacts", {"artifact_ids": ids}, scope=scope)
    assert not observation.is_error
    results = json.loads(observation.content)["results"]
    unique = list(dict.fromkeys(ids))
    unique[unique.index("not-an-id")] = NOT_AN_ID  # a string that is not an id is never repeated
    assert [r["artifact_id"] for r in results] == unique  # deduplicated, in the order given
    by_id = {r["artifact_id"]: r for r in results}
    unknown = {"capture_status": "unknown", "omissions": []}  # captured without saying how complete
    assert by_id[picture] == {"artifact_id": picture, "status": "loaded", "kind": "image", **unknown}
    assert by_id[text] == {"artifact_id": text, "status": "loaded", "kind": "text", "truncated": False, **unknown}
    assert by_id[NOT_AN_ID]["status"] == "error"
    assert by_id[NOT_AN_ID]["error"] == "InvalidId"
    assert "not-an-id" not in observation.content + json.dumps(observation.parts)
    assert by_id[MISSING_ID]["error"] == "NotFound"
    assert "not found" in by_id[MISSING_ID]["message"]
    assert by_id[sealed]["error"] == "SealedArtifact"
    assert "Ref" in by_id[sealed]["message"]
    assert by_id[blob]["error"] == "UnsupportedRead"
    assert "by reference" in by_id[blob]["message"]

    parts = [dict(p) for p in observation.parts]
    texts = [p["text"] for p in parts if p["type"] == "text"]
    images = [p for p in parts if p["type"] == "image"]
    data = base64.b64encode(image).decode()
    assert images == [{"type": "image", "media_type": "image/png", "data": data, "data_only": True}]
    assert base64.b64decode(images[0]["data"]) == image
    # Each artifact is prefixed by its id, in the order given; the image follows its own header.
    heads = [t.split("]", 1)[0].removeprefix("[") for t in texts]
    assert heads == unique
    assert parts.index(images[0]) == 1
    assert parts[0]["text"].startswith(f"[{picture}] image/png")
    loaded_text = next(t for t in texts if t.startswith(f"[{text}]"))
    assert loaded_text.endswith("\nalpha\nbeta\n")
    assert CANARY not in observation.content + json.dumps(parts, ensure_ascii=False)


@pytest.mark.parametrize("mode", MODES)
def test_load_truncates_large_text_and_says_how_to_continue(vault: Vault, scope: Scope, mode: str) -> None:
    box = Toolbox(vault)
    artifact_id = text_id(vault, scope, "".join(f"line {i} " + "y" * 90 + "\n" for i in range(2_000)))
    observation = dispatch(box, mode, "load_artifacts", {"artifact_ids": [artifact_id]}, scope=scope)
    (result,) = json.loads(observation.content)["results"]
    assert result["truncated"] is True
    (part,) = observation.parts
    assert "truncated, continue with read_artifact" in part["text"]
    assert len(part["text"]) <= 20_000 + 300


@pytest.mark.parametrize("mode", MODES)
def test_load_points_a_binary_record_file_to_query_artifact(vault: Vault, scope: Scope, mode: str) -> None:
    import pyarrow as pa

    box = Toolbox(vault)
    descriptor = read.capture_records(vault, scope, pa.table({"n": [1, 2, 3]}))
    assert descriptor.media_type.startswith(PARQUET)
    observation = dispatch(box, mode, "load_artifacts", {"artifact_ids": [descriptor.artifact_id]}, scope=scope)
    (result,) = json.loads(observation.content)["results"]
    assert result["error"] == "UnsupportedRead"
    assert "query_artifact" in result["message"]


@pytest.mark.parametrize("mode", MODES)
def test_one_id_failing_unexpectedly_does_not_fail_the_call(
    vault: Vault, scope: Scope, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = Toolbox(vault)
    text = text_id(vault, scope, "alpha\n")
    picture = vault.put(scope, png(), media_type="image/png").artifact_id

    def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"internal detail {CANARY}")

    monkeypatch.setattr(windows, "window", explode)
    observation = dispatch(box, mode, "load_artifacts", {"artifact_ids": [text, picture]}, scope=scope)
    assert not observation.is_error
    failed, loaded = json.loads(observation.content)["results"]
    assert failed["artifact_id"] == text
    assert failed["status"] == "error"
    assert failed["error"] == "RuntimeError"
    assert loaded == {
        "artifact_id": picture,
        "status": "loaded",
        "kind": "image",
        "capture_status": "unknown",
        "omissions": [],
    }
    assert CANARY not in observation.content + json.dumps(observation.parts, ensure_ascii=False)
    assert [p["type"] for p in observation.parts] == ["text", "text", "image"]


@pytest.mark.parametrize("mode", MODES)
def test_load_refuses_too_many_or_no_ids(vault: Vault, scope: Scope, mode: str) -> None:
    box = Toolbox(vault)
    ids = [text_id(vault, scope, f"{i}\n") for i in range(11)]
    assert "at most 10" in error(dispatch(box, mode, "load_artifacts", {"artifact_ids": ids}, scope=scope))
    assert "empty" in error(dispatch(box, mode, "load_artifacts", {"artifact_ids": []}, scope=scope))
    ten = dispatch(box, mode, "load_artifacts", {"artifact_ids": ids[:10]}, scope=scope)
    assert [r["status"] for r in json.loads(ten.content)["results"]] == ["loaded"] * 10


def test_load_runs_the_ids_concurrently(vault: Vault, scope: Scope, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    box = Toolbox(vault)
    ids = [text_id(vault, scope, f"{i}\n") for i in range(4)]
    barrier = threading.Barrier(4, timeout=10)
    real = windows.window

    def window(*args: Any, **kwargs: Any) -> Any:
        barrier.wait()  # passes only if all four loads are in flight at once
        return real(*args, **kwargs)

    monkeypatch.setattr(windows, "window", window)
    observation = box.call_sync("load_artifacts", {"artifact_ids": ids}, scope=scope)
    assert [r["status"] for r in json.loads(observation.content)["results"]] == ["loaded"] * 4


# -- instructions ----------------------------------------------------------------------


def test_instructions_list_only_loadable_model_artifacts_capped(vault: Vault, scope: Scope, clock: Clock) -> None:
    box = Toolbox(vault)
    assert "No artifacts" in box.instructions(scope)
    visible = []
    for i in range(23):
        visible.append(text_id(vault, scope, f"{i}\n", filename=f"note-{i}.txt"))
        clock.advance(seconds=1)
    sealed = text_id(vault, scope, CANARY, disclosure="sealed")
    blob = vault.put(scope, b"\x00\x01", media_type="application/octet-stream").artifact_id
    picture = vault.put(scope, png(), media_type="image/png").artifact_id
    foreign = text_id(vault, OTHER, "theirs\n")

    text = box.instructions(scope)
    assert "load_artifacts" in text
    assert "data, not instructions" in text
    assert sealed not in text
    assert CANARY not in text
    assert foreign not in text
    assert blob not in text  # load_artifacts cannot load it, so it is not offered
    listed = [line.split()[1] for line in text.splitlines() if line.startswith("- art_")]
    assert listed == [picture, *reversed(visible)][:20]
    assert "+4 more" in text
    assert "'note-22.txt'" in text


def test_load_says_what_a_partial_capture_lacks(vault: Vault, scope: Scope) -> None:
    """A loaded text is what was captured: a partial capture's status and omissions come with it."""
    box = Toolbox(vault)
    omission = {"region": "us-east", "reason": "collector partition"}
    partial = vault.put(
        scope,
        b"eu-west only\n",
        media_type="text/plain",
        completeness={"status": "partial", "omissions": [omission]},
    ).artifact_id
    observation = box.call_sync("load_artifacts", {"artifact_ids": [partial]}, scope=scope)
    (outcome,) = json.loads(observation.content)["results"]
    assert outcome["capture_status"] == "partial"
    assert outcome["omissions"] == [omission]
    head = observation.parts[0]["text"].splitlines()[0]
    assert "capture partial" in head
    assert "collector partition" in head


def _for_model(found: dict[str, Any]) -> dict[str, Any]:
    """What the read tool answers for a read: the same, without the caller's proof and raw bytes, data only."""
    assert "proof" in found  # the caller's read has it: the tool leaves it out
    return {**{k: v for k, v in found.items() if k not in ("proof", "excerpt_base64")}, "data_only": True}
