"""Previews of offloaded results (refvault.read.previews): bounded, honest, type-aware; plus the token estimate.

Descriptors come from a real in-memory vault. The bound checked everywhere is
``len(json.dumps(result)) <= max(max_chars, PREVIEW_SLACK)`` (``TRUNCATION_SLACK``
for :func:`truncation`).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refvault import Scope, Vault
from refvault.errors import InvalidArgument
from refvault.model import Descriptor
from refvault.read import estimate_tokens as exported_estimate
from refvault.read import preview as exported_preview
from refvault.read.previews import (
    JSON_PARSE_LIMIT,
    PREVIEW_SLACK,
    TRUNCATION_SLACK,
    RecordsSummary,
    estimate_tokens,
    preview,
    truncation,
)

SCOPE = Scope("acme", "ana", "s1")
TEXT = "text/plain; charset=utf-8"
ALWAYS = {"artifact_id", "media_type", "size", "disclosure", "kind", "covers", "omits", "preview_partial", "read_more"}
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def vault() -> Iterator[Vault]:
    """One in-memory vault for the module (overrides conftest's per-backend fixture: previews never read storage)."""
    opened = Vault.open("memory://")
    yield opened
    opened.close()


def put(vault: Vault, data: bytes, media_type: str = TEXT, **options: Any) -> Descriptor:
    return vault.put(SCOPE, data, media_type=media_type, **options)


def size_of(result: dict[str, Any]) -> int:
    return len(json.dumps(result, allow_nan=False))


def check_common(result: dict[str, Any], descriptor: Descriptor, max_chars: int) -> None:
    assert set(result) >= ALWAYS
    assert result["artifact_id"] == descriptor.artifact_id
    assert result["size"] == descriptor.size
    assert size_of(result) <= max(max_chars, PREVIEW_SLACK)
    assert result["covers"]
    assert result["omits"]
    assert result["read_more"]
    assert descriptor.artifact_id in result["read_more"]
    if not result["preview_partial"]:
        assert result["omits"] == "nothing"
    else:
        assert result["omits"] != "nothing"


def lines_of(n: int) -> bytes:
    return "".join(f"line {i}: some log text\n" for i in range(n)).encode()


# -- text ------------------------------------------------------------------------------------------


def test_text_head_and_tail_are_whole_lines_with_exact_positions(vault: Vault) -> None:
    data = lines_of(5000)
    descriptor = put(vault, data)
    result = preview(descriptor, data)
    check_common(result, descriptor, 4000)
    assert result["kind"] == "text"
    assert result["lines"] == 5000
    assert result["preview_partial"] is True
    head, tail = result["head"], result["tail"]
    assert head.startswith("line 0: ")
    assert head.endswith("\n")
    assert tail.endswith("line 4999: some log text\n")
    h0, h1 = result["head_lines"]
    t0, t1 = result["tail_lines"]
    assert (h0, t1) == (0, 5000)
    assert 0 < h1 < t0 < 5000
    assert head.splitlines() == [f"line {i}: some log text" for i in range(h1)]
    assert tail.splitlines() == [f"line {i}: some log text" for i in range(t0, 5000)]
    assert data[slice(*result["head_bytes"])].decode() == head
    assert data[slice(*result["tail_bytes"])].decode() == tail
    assert f"lines 0-{h1 - 1} and lines {t0}-4999 of 5000 lines" in result["covers"]
    hb, tb = result["head_bytes"][1], result["tail_bytes"][0]
    assert result["omits"] == f"bytes {hb}-{tb - 1} ({tb - hb} bytes), which hold lines {h1}-{t0 - 1}"
    assert f"lines=[{h1}, {t0}]" in result["read_more"]
    assert "pattern=" in result["read_more"]
    assert "describe_artifact(" in result["read_more"]


@pytest.mark.parametrize("max_chars", [0, 1, 50, 500, 1000, 2048, 2049, 3000, 4000, 10_000, 50_000])
def test_text_bound_for_many_budgets(vault: Vault, max_chars: int) -> None:
    data = lines_of(3000) + ('é中\U0001f600\x00"\\' * 50 + "\n").encode() * 40
    descriptor = put(vault, data)
    result = preview(descriptor, data, max_chars=max_chars)
    check_common(result, descriptor, max_chars)
    if max_chars >= 10_000:
        assert len(json.dumps(result["head"])) > 3000
        assert len(json.dumps(result["tail"])) > 3000


@pytest.mark.parametrize("max_chars", [2500, 4000, 10_000])
def test_text_preview_uses_its_budget(vault: Vault, max_chars: int) -> None:
    data = lines_of(5000)
    descriptor = put(vault, data)
    result = preview(descriptor, data, max_chars=max_chars)
    assert max_chars - 100 < size_of(result) <= max_chars


def test_small_text_is_shown_whole_and_complete(vault: Vault) -> None:
    data = b"alpha\nbeta\ngamma"
    descriptor = put(vault, data)
    result = preview(descriptor, data)
    check_common(result, descriptor, 4000)
    assert result["preview_partial"] is False
    assert result["head"] == "alpha\nbeta\ngamma"
    assert result["lines"] == 3
    assert result["head_lines"] == [0, 3]
    assert "all 3 lines" in result["covers"]


def test_empty_text_artifact(vault: Vault) -> None:
    descriptor = put(vault, b"")
    result = preview(descriptor, b"")
    check_common(result, descriptor, 4000)
    assert result["preview_partial"] is False
    assert result["lines"] == 0
    assert result["head"] == ""
    assert "empty" in result["covers"]


def test_crlf_lines_are_counted_at_newlines_and_kept_verbatim(vault: Vault) -> None:
    data = b"".join(b"row %d\r\n" % i for i in range(2000))
    descriptor = put(vault, data)
    result = preview(descriptor, data, max_chars=3000)
    check_common(result, descriptor, 3000)
    assert result["lines"] == 2000
    assert result["head"].startswith("row 0\r\nrow 1\r\n")
    assert result["head"].endswith("\r\n")
    assert result["tail"].endswith("row 1999\r\n")
    assert result["head"].count("\n") == result["head_lines"][1]


def test_invalid_utf8_is_replaced_not_fatal(vault: Vault) -> None:
    data = b"ok line\n" + b"\xff\xfe\x80 broken \xc3\n" * 500 + b"last \xe4\xb8"
    descriptor = put(vault, data)
    result = preview(descriptor, data, max_chars=1500)
    check_common(result, descriptor, 1500)
    assert result["head"].startswith("ok line\n\ufffd")
    assert result["tail"].endswith("last \ufffd")
    assert result["lines"] == 502


def test_huge_single_line_shows_both_ends_without_splitting_characters(vault: Vault) -> None:
    text = ("é" + "中" * 3 + "x" + "\U0001f600") * 100_000  # 1.3 MB, one line, no newline
    data = text.encode()
    descriptor = put(vault, data)
    result = preview(descriptor, data, max_chars=4000)
    check_common(result, descriptor, 4000)
    assert result["lines"] == 1
    head, tail = result["head"], result["tail"]
    assert head
    assert tail
    assert "\ufffd" not in head
    assert "\ufffd" not in tail
    assert text.startswith(head)
    assert text.endswith(tail)
    assert data[: result["head_bytes"][1]].decode() == head  # strict decode: cut on a character boundary
    assert data[result["tail_bytes"][0] :].decode() == tail
    assert "line 0 (its start only) and line 0 (its end only) of 1 line" in result["covers"]
    assert "byte_range=[" in result["read_more"]


def test_long_first_line_then_short_lines(vault: Vault) -> None:
    data = b"A" * 100_000 + b"\n" + b"short\n" * 10
    descriptor = put(vault, data)
    result = preview(descriptor, data, max_chars=3000)
    check_common(result, descriptor, 3000)
    assert set(result["head"]) == {"A"}
    assert result["tail"] == "short\n" * 10
    assert result["tail_lines"] == [1, 11]
    assert "line 0 (its start only)" in result["covers"]
    assert "lines 1-10" in result["covers"]


def test_prefix_data_says_only_a_prefix_was_examined(vault: Vault) -> None:
    data = lines_of(1000)
    descriptor = put(vault, data)
    prefix = data[:10_000] + b"partial li"
    result = preview(descriptor, prefix, max_chars=4000)
    check_common(result, descriptor, 4000)
    assert result["lines"] is None
    assert "tail" not in result
    assert result["head"].endswith("\n")  # the cut partial line is not presented as whole
    assert "prefix" in result["omits"]
    assert "unknown" in result["covers"]


def test_text_without_data_is_metadata_only(vault: Vault) -> None:
    descriptor = put(vault, b"secret-ish words\n" * 10)
    result = preview(descriptor)
    check_common(result, descriptor, 4000)
    assert "words" not in json.dumps(result)
    assert result["preview_partial"] is True


@FAST
@given(
    body=st.lists(st.text(max_size=300), max_size=60).map("\n".join),
    raw=st.binary(max_size=3000),
    use_raw=st.booleans(),
    max_chars=st.integers(min_value=0, max_value=6000),
)
def test_text_preview_properties(vault: Vault, body: str, raw: bytes, use_raw: bool, max_chars: int) -> None:
    data = raw if use_raw else body.encode("utf-8", "surrogatepass")
    descriptor = put(vault, data)
    result = preview(descriptor, data, max_chars=max_chars)
    check_common(result, descriptor, max_chars)
    expected_lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    assert result["lines"] == expected_lines
    if "head_bytes" in result:
        head_end = result["head_bytes"][1]
        assert result["head"] == data[:head_end].decode("utf-8", "replace")
        tail_start = result["tail_bytes"][0]
        assert result["tail"] == data[tail_start:].decode("utf-8", "replace")
        assert head_end <= tail_start or not result["preview_partial"]
        assert result["preview_partial"] != (head_end >= tail_start)
    elif data:
        assert result["preview_partial"] is True


# -- JSON ------------------------------------------------------------------------------------------


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def test_json_document_shape_and_sample(vault: Vault) -> None:
    document = {
        "items": [{"id": i, "name": f"n{i}", "tags": ["a"], "meta": {"x": 1.5, "y": None}} for i in range(2000)],
        "total": 2000,
        "next": None,
        "ok": True,
    }
    data = json.dumps(document).encode()
    descriptor = put(vault, data, "application/json")
    result = preview(descriptor, data)
    check_common(result, descriptor, 4000)
    assert result["kind"] == "json"
    shape = result["shape"]
    assert shape["type"] == "object"
    assert shape["keys"] == 4
    assert shape["fields"]["total"] == "integer"
    assert shape["fields"]["next"] == "null"
    assert shape["fields"]["ok"] == "boolean"
    items = shape["fields"]["items"]
    assert items["type"] == "array"
    assert items["length"] == 2000
    assert items["items"]["fields"]["meta"]["fields"] == {"x": "number", "y": "null"}
    sample = result["sample"]
    assert len(sample) > 500
    assert compact(document).startswith(sample)
    assert result["preview_partial"] is True
    assert f"first {len(sample)} characters" in result["covers"]
    assert "query_artifact(" not in result["read_more"]  # not an array of objects


def test_small_json_is_complete(vault: Vault) -> None:
    document = {"a": [1, 2, {"b": "c"}], "d": "é"}
    data = json.dumps(document).encode()
    descriptor = put(vault, data, "application/json")
    result = preview(descriptor, data)
    check_common(result, descriptor, 4000)
    assert result["preview_partial"] is False
    assert json.loads(result["sample"]) == document


def test_array_of_objects_mentions_query_artifact(vault: Vault) -> None:
    data = json.dumps([{"id": i} for i in range(5000)]).encode()
    descriptor = put(vault, data, "application/json")
    result = preview(descriptor, data)
    check_common(result, descriptor, 4000)
    assert result["shape"]["length"] == 5000
    assert "query_artifact(" in result["read_more"]


def test_deeply_nested_value_does_not_recurse(vault: Vault) -> None:
    root: list[object] = []
    node = root
    for _ in range(10_000):
        child: list[object] = []
        node.append(child)
        node = child
    descriptor = put(vault, b"[]", "application/json")
    result = preview(descriptor, value=root)
    check_common(result, descriptor, 4000)
    assert result["sample"].startswith("[[[[")
    assert result["preview_partial"] is True
    depth = 0
    shape = result["shape"]
    while isinstance(shape, dict) and "items" in shape:
        shape = shape["items"]
        depth += 1
    assert 1 <= depth <= 20


def test_deeply_nested_json_bytes_fall_back_to_text(vault: Vault) -> None:
    data = b"[" * 10_000 + b"]" * 10_000
    descriptor = put(vault, data, "application/json")
    result = preview(descriptor, data)
    check_common(result, descriptor, 4000)
    assert result["kind"] == "text"
    assert "RecursionError" in result["note"]
    assert result["head"].startswith("[[[[")


def test_invalid_json_bytes_fall_back_to_text(vault: Vault) -> None:
    data = b'{"a": 1, oops\n' * 300
    descriptor = put(vault, data, "application/json")
    result = preview(descriptor, data)
    check_common(result, descriptor, 4000)
    assert result["kind"] == "text"
    assert "JSONDecodeError" in result["note"]
    assert result["lines"] == 300


def test_json_above_parse_limit_is_previewed_as_text(vault: Vault) -> None:
    data = b"[" + b'"abcdefghij",' * (JSON_PARSE_LIMIT // 13 + 10) + b"0]"
    assert len(data) > JSON_PARSE_LIMIT
    descriptor = put(vault, data, "application/json")
    result = preview(descriptor, data)
    check_common(result, descriptor, 4000)
    assert result["kind"] == "text"
    assert str(JSON_PARSE_LIMIT) in result["note"]


class CountingDict(Mapping[str, int]):
    """A huge mapping that counts how many values a preview pulls out of it."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.pulled = 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[str]:
        for i in range(self.n):
            self.pulled += 1
            yield f"k{i}"

    def __getitem__(self, key: str) -> int:
        return int(key[1:])


class CountingList(list[int]):
    pulled = 0

    def __iter__(self) -> Iterator[int]:
        for item in super().__iter__():
            self.pulled += 1
            yield item


def test_wide_json_work_is_bounded_by_the_budget(vault: Vault) -> None:
    descriptor = put(vault, b"{}", "application/json")
    wide = CountingDict(100_000)
    result = preview(descriptor, value=wide)
    check_common(result, descriptor, 4000)
    assert result["shape"]["keys"] == 100_000
    assert result["shape"]["unlisted"] > 99_000
    assert 0 < wide.pulled < 5_000  # visited a budget's worth, not 100k
    long = CountingList(range(1_000_000))
    result = preview(descriptor, value={"values": long})
    check_common(result, descriptor, 4000)
    assert result["shape"]["fields"]["values"]["length"] == 1_000_000
    assert long.pulled < 10_000


def test_wide_json_dict_with_100k_keys(vault: Vault) -> None:
    document = {f"key_{i}": {"v": i} for i in range(100_000)}
    descriptor = put(vault, b"{}", "application/json")
    result = preview(descriptor, value=document)
    check_common(result, descriptor, 4000)
    assert result["shape"]["keys"] == 100_000
    assert compact(document).startswith(result["sample"])


def test_only_containers_are_previewed_from_the_python_value(vault: Vault) -> None:
    text = lines_of(2000)
    as_text = put(vault, text)
    result = preview(as_text, text, value=text.decode())  # a str result: previewed as the text it is
    assert result["kind"] == "text"
    assert result["lines"] == 2000
    result = preview(as_text, value=text.decode())  # a str stands for its bytes when data is absent
    assert result["head"].startswith("line 0: ")

    class Model:
        def __repr__(self) -> str:
            return "Model(...)"

    stored = json.dumps({"title": "t", "rows": list(range(3000))}).encode()
    as_json = put(vault, stored, "application/json")
    result = preview(as_json, stored, value=Model())  # e.g. a pydantic model: the stored JSON is described
    assert result["shape"]["fields"] == {
        "title": "string",
        "rows": {"type": "array", "length": 3000, "items": "integer"},
    }
    assert result["sample"].startswith('{"title":"t","rows":[0,1,2')


def test_json_value_with_non_json_python_objects(vault: Vault) -> None:
    descriptor = put(vault, b"{}", "application/json")
    value = {"when": dt.datetime(2026, 1, 2, 3, 4, 5), "blob": b"\x00\x01", "nan": math.nan, 7: {1, 2}}
    result = preview(descriptor, value=value)
    check_common(result, descriptor, 4000)  # allow_nan=False: every value is real JSON
    assert result["shape"]["fields"]["when"] == "datetime"
    assert '"2026-01-02T03:04:05"' in result["sample"]
    assert "<2 bytes>" in result["sample"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=8) | st.dictionaries(st.text(max_size=20), children, max_size=8),
    max_leaves=200,
)


@FAST
@given(document=json_values, max_chars=st.integers(min_value=0, max_value=5000), as_bytes=st.booleans())
def test_json_preview_properties(vault: Vault, document: object, max_chars: int, as_bytes: bool) -> None:
    data = json.dumps(document).encode()
    descriptor = put(vault, data, "application/json")
    if as_bytes or not isinstance(document, dict | list):  # a str value would stand for raw text
        result = preview(descriptor, data, max_chars=max_chars)
    else:
        result = preview(descriptor, value=document, max_chars=max_chars)
    check_common(result, descriptor, max_chars)
    assert result["kind"] == "json"
    if "sample" in result:
        assert compact(document).startswith(result["sample"])
        assert result["preview_partial"] != (result["sample"] == compact(document))


# -- records ---------------------------------------------------------------------------------------


def summary(count: int = 100_000, rows: int = 10, text: str = "hello ") -> RecordsSummary:
    return RecordsSummary(
        fields=(("id", "BIGINT"), ("service", "VARCHAR"), ("msg", "VARCHAR"), ("score", "DOUBLE")),
        count=count,
        first_rows=tuple({"id": i, "service": "api", "msg": text * 3, "score": i / 2} for i in range(rows)),
    )


def test_records_preview(vault: Vault) -> None:
    descriptor = put(vault, b'{"id": 0}\n', "application/x-ndjson")
    result = preview(descriptor, records=summary())
    check_common(result, descriptor, 4000)
    assert result["kind"] == "records"
    assert result["records"] == 100_000
    assert result["schema"] == {"id": "BIGINT", "service": "VARCHAR", "msg": "VARCHAR", "score": "DOUBLE"}
    assert result["first_rows"][0] == {"id": 0, "service": "api", "msg": "hello " * 3, "score": 0.0}
    shown = len(result["first_rows"])
    assert shown == 10
    assert "records 0-9 of 100000" in result["covers"]
    assert "records 10-99999 (99990 records)" in result["omits"]
    assert "query_artifact(" in result["read_more"]
    assert "where=" in result["read_more"]
    assert "order=" in result["read_more"]
    assert "limit=" in result["read_more"]


def test_records_long_values_are_cut_and_said_so(vault: Vault) -> None:
    descriptor = put(vault, b"x", "application/x-ndjson")
    result = preview(descriptor, records=summary(text="x" * 5000))
    check_common(result, descriptor, 4000)
    msg = result["first_rows"][0]["msg"]
    assert msg.endswith("…")
    assert len(msg) <= result["value_chars"]
    assert "cut" in result["covers"]
    assert "cut" in result["omits"]


def test_records_all_shown_is_complete(vault: Vault) -> None:
    descriptor = put(vault, b"x", "application/x-ndjson")
    result = preview(descriptor, records=summary(count=3, rows=3))
    check_common(result, descriptor, 4000)
    assert result["preview_partial"] is False
    assert len(result["first_rows"]) == 3


def test_records_wide_schema_and_odd_values_stay_bounded(vault: Vault) -> None:
    fields = tuple((f"column_{i}", "VARCHAR") for i in range(500))
    values = [b"\x00" * 9, Decimal("1.5"), math.inf, {"a": [1]}] * 125
    row = {name: value for (name, _), value in zip(fields, values, strict=True)}
    records = RecordsSummary(fields=fields, count=10**9, first_rows=(row,) * 10)
    descriptor = put(vault, b"x", "application/vnd.apache.parquet")
    for max_chars in (0, 100, 1000, 4000, 20_000):
        result = preview(descriptor, records=records, max_chars=max_chars)
        check_common(result, descriptor, max_chars)
        assert result["fields"] == 500
        if max_chars >= 4000:
            assert 0 < len(result["schema"]) < 500
            assert "fields after the first" in result["omits"]
            first = result["first_rows"][0]
            assert first["column_0"] == "<9 bytes>"
            assert first["column_1"] == "1.5"
            assert first["column_2"] == "inf"


# -- binary, sealed, arguments ---------------------------------------------------------------------


def test_binary_preview_has_no_content(vault: Vault) -> None:
    data = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40
    descriptor = put(vault, data, "image/png")
    result = preview(descriptor, data)
    check_common(result, descriptor, 4000)
    assert set(result) == ALWAYS | {"capture_status"}
    assert result["kind"] == "binary"
    assert result["preview_partial"] is True
    rendered = json.dumps(result)
    assert "PNG" not in rendered
    assert base64.b64encode(data[:30]).decode()[:12] not in rendered
    assert "Ref" in result["read_more"]
    assert "describe_artifact(" in result["read_more"]


def test_empty_binary_is_complete(vault: Vault) -> None:
    descriptor = put(vault, b"", "application/octet-stream")
    result = preview(descriptor, b"")
    check_common(result, descriptor, 4000)
    assert result["preview_partial"] is False


def test_sealed_artifacts_never_show_content(vault: Vault) -> None:
    secret = b"password=hunter2\n" * 10
    descriptor = put(vault, secret, disclosure="sealed")
    for result in (
        preview(descriptor, secret),
        preview(descriptor, value={"password": "hunter2"}),
        preview(descriptor, records=RecordsSummary((("password", "VARCHAR"),), 1, ({"password": "hunter2"},))),
    ):
        check_common(result, descriptor, 4000)
        assert "hunter2" not in json.dumps(result)
        assert result["disclosure"] == "sealed"
        assert "sealed" in result["covers"]
        assert "by reference" in result["read_more"]


def test_record_media_types_without_a_summary_point_to_query_artifact(vault: Vault) -> None:
    ndjson = b"".join(b'{"id": %d}\n' % i for i in range(3000))
    text_like = preview(put(vault, ndjson, "application/x-ndjson"), ndjson)
    assert text_like["kind"] == "text"
    assert "query_artifact(" in text_like["read_more"]
    parquet = preview(put(vault, b"PAR1" + b"\x00" * 100, "application/vnd.apache.parquet"), b"PAR1")
    assert parquet["kind"] == "binary"
    assert "query_artifact(" in parquet["read_more"]
    assert "PAR1" not in json.dumps(parquet)
    plain = preview(put(vault, lines_of(3000)), lines_of(3000))
    assert "query_artifact(" not in plain["read_more"]


def test_pathological_media_type_stays_bounded(vault: Vault) -> None:
    media_type = 'text/plain; x="' + "\U0001f600" * 200 + '"'
    data = lines_of(100)
    descriptor = put(vault, data, media_type)
    for max_chars in (0, 4000):
        result = preview(descriptor, data, max_chars=max_chars)
        check_common(result, descriptor, max_chars)
        assert result["media_type"].startswith("text/plain; (parameters omitted")


def test_metadata_alone_fits_the_slack_for_every_kind(vault: Vault) -> None:
    media_type = "application/vnd." + "x" * 100 + '+json; profile="' + "y" * 120 + '"'
    text = put(vault, lines_of(10), media_type)
    cases = [
        preview(text, lines_of(10), max_chars=0),
        preview(text, value={"a": 1}, max_chars=0),
        preview(text, records=summary(count=10**15), max_chars=0),
        preview(put(vault, b"\x00" * 10, "application/octet-stream"), max_chars=0),
        preview(put(vault, b"{" * 100, "application/json"), b"{" * 100, max_chars=0),
        preview(put(vault, b"x", TEXT, disclosure="sealed"), b"x", max_chars=0),
    ]
    for result in cases:
        assert size_of(result) <= PREVIEW_SLACK
        assert result["preview_partial"] is True


def test_argument_errors(vault: Vault) -> None:
    descriptor = put(vault, b"abc")
    with pytest.raises(InvalidArgument, match="prefix"):
        preview(descriptor, b"abcd")
    with pytest.raises(InvalidArgument, match="max_chars"):
        preview(descriptor, b"abc", max_chars=-1)
    with pytest.raises(InvalidArgument, match="max_chars"):
        preview(descriptor, b"abc", max_chars=True)
    with pytest.raises(InvalidArgument, match="RecordsSummary"):
        preview(descriptor, records={"fields": []})  # type: ignore[arg-type]


def test_lazy_exports() -> None:
    assert exported_preview is preview
    assert exported_estimate is estimate_tokens


# -- truncation --------------------------------------------------------------------------------------


def test_truncation_is_bounded_and_says_what_it_omits() -> None:
    text = "x" * 100_000
    result = truncation(text, max_chars=2000, reason="StorageError")
    assert size_of(result) <= 2000
    assert result["status"] == "not_captured"
    assert result["reason"] == "StorageError"
    assert result["preview_partial"] is True
    assert result["total_chars"] == 100_000
    assert result["text"] == "x" * result["shown_chars"]
    assert result["shown_chars"] > 1500
    assert f"characters {result['shown_chars']}-99999" in result["omits"]


def test_truncation_reason_is_sanitised_and_small_text_is_complete() -> None:
    result = truncation("short", max_chars=2000, reason="Bad\nError<script>" + "y" * 500)
    assert result["reason"] == "BadErrorscript" + "y" * 66
    assert result["preview_partial"] is False
    assert result["text"] == "short"
    assert result["omits"] == "nothing"


def test_truncation_with_no_budget_shows_no_text_but_says_how_much() -> None:
    result = truncation("secret " * 1000, max_chars=0, reason="StorageError")
    assert result["text"] == ""
    assert result["shown_chars"] == 0
    assert result["total_chars"] == 7000
    assert result["preview_partial"] is True
    assert size_of(result) <= TRUNCATION_SLACK


def test_truncation_replaces_lone_surrogates() -> None:
    result = truncation("a\ud800b" * 10, max_chars=1000, reason="ValueError")
    assert result["text"] == "a?b" * 10
    assert result["shown_chars"] == 30
    json.dumps(result, ensure_ascii=False).encode("utf-8")  # serialisable as UTF-8


@FAST
@given(text=st.text(max_size=3000), max_chars=st.integers(min_value=0, max_value=4000))
def test_truncation_properties(text: str, max_chars: int) -> None:
    result = truncation(text, max_chars=max_chars, reason="OSError")
    assert size_of(result) <= max(max_chars, TRUNCATION_SLACK)
    assert text.startswith(result["text"])
    assert result["shown_chars"] == len(result["text"])
    assert result["total_chars"] == len(text)
    assert result["preview_partial"] != (result["text"] == text)


# -- token estimate ----------------------------------------------------------------------------------

ENGLISH = (
    "The incident began shortly after midnight, when the payment service started returning errors to a small "
    "fraction of customers. Engineers on call noticed that latency had doubled, but the dashboards did not show "
    "any obvious cause. After an hour of investigation, they found that a configuration change had reduced the "
    "size of the connection pool, so requests queued while waiting for a free connection. Rolling back the change "
    "restored normal behaviour within a few minutes. The team agreed to add an alert on pool saturation and to "
    "review configuration changes with the same care as code changes.\n"
)
CODE = '''def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge overlapping closed intervals and return them sorted by start."""
    if not intervals:
        return []
    ordered = sorted(intervals, key=lambda pair: pair[0])
    merged = [ordered[0]]
    for start, end in ordered[1:]:
        last_start, last_end = merged[-1]
        if start <= last_end:
            merged[-1] = (last_start, max(last_end, end))
        else:
            merged.append((start, end))
    return merged


class RateLimiter:
    def __init__(self, capacity: int, refill_per_second: float) -> None:
        self.capacity = capacity
        self.tokens = float(capacity)
        self.refill_per_second = refill_per_second
'''
JSON_TEXT = (
    '[{"id": 1042, "service": "checkout-api", "severity": "high", "opened_at": "2026-11-29T00:14:03Z", '
    '"latency_ms": 812.5, "tags": ["prod", "eu-west-1"], "resolved": false}, '
    '{"id": 1043, "service": "auth-gateway", "severity": "low", "opened_at": "2026-11-29T01:02:44Z", '
    '"latency_ms": 95.25, "tags": ["canary"], "resolved": true, "owner": null}, '
    '{"id": 1044, "service": "search-indexer", "severity": "critical", "opened_at": "2026-11-29T02:31:10Z", '
    '"latency_ms": 4300.0, "tags": ["prod", "us-east-2", "retry"], "resolved": false}]'
)
CHINESE = (
    "事故发生在午夜之后不久，支付服务开始向一小部分客户返回错误。值班工程师注意到延迟增加了一倍，"  # noqa: RUF001
    "但监控面板没有显示任何明显的原因。经过一个小时的调查，他们发现一次配置变更缩小了连接池的大小，"  # noqa: RUF001
    "因此请求在等待空闲连接时排队。回滚这次变更后，几分钟内服务恢复正常。团队同意为连接池饱和添加告警，"  # noqa: RUF001
    "并像审查代码变更一样认真审查配置变更。"
)
JAPANESE = (
    "障害は深夜0時を少し過ぎた頃に始まり、決済サービスが一部の顧客にエラーを返すようになりました。"
    "当番のエンジニアはレイテンシが倍増していることに気づきましたが、ダッシュボードには明らかな原因が表示されませんでした。"
    "一時間の調査の後、設定変更によって接続プールのサイズが小さくなっていたことが分かりました。"
)

# Token counts of the samples above, measured offline with the cl100k_base and o200k_base encodings
# (bpe-openai 0.1.4, which embeds them; not a dependency of refvault).
MEASURED = {
    "english": (ENGLISH, 107, 106),
    "code": (CODE, 174, 175),
    "json": (JSON_TEXT, 205, 205),
    "chinese": (CHINESE, 159, 113),
    "japanese": (JAPANESE, 155, 108),
}


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_estimate_is_within_the_stated_factor(name: str) -> None:
    text, cl100k, o200k = MEASURED[name]
    estimate = estimate_tokens(text)
    for actual in (cl100k, o200k):
        assert 1.0 * actual <= estimate <= 1.8 * actual, (name, estimate, actual)
    assert estimate_tokens(text.encode()) == estimate


def test_estimate_rule_on_small_cases() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens(b"") == 0
    assert estimate_tokens("   \t  ") == 0
    assert estimate_tokens("\n\n") == 2
    assert estimate_tokens("hello") == 1
    assert estimate_tokens("information") == 2  # 1 + 11 // 6
    assert estimate_tokens("camelCase") == 3  # 1 + 9 // 6, plus one lower-to-upper change
    assert estimate_tokens("1234567") == 3  # 1 + 7 // 3
    assert estimate_tokens(" 7") == 2  # the space before a number is its own token
    assert estimate_tokens("HTTP") == 3  # 1 + two pairs of capitals
    assert estimate_tokens("a, b.") == 4
    assert estimate_tokens("中文") == 3  # 6 bytes of UTF-8 -> ceil(12 / 5)
    assert estimate_tokens(b"\xff\xfe") == 1


def test_estimate_is_linear_across_chunks() -> None:
    block = (ENGLISH + CODE + JSON_TEXT + CHINESE) * 50
    one = estimate_tokens(block)
    many = estimate_tokens(block * 40)  # about 2.5 MB: crosses the 1 MiB chunk boundaries
    assert 40 * one - 120 <= many <= 40 * one + 120
    assert abs(estimate_tokens((block * 40).encode()) - many) <= 20


def test_estimate_grows_with_size_on_random_bytes() -> None:
    data = bytes(range(256)) * 4096
    assert estimate_tokens(data[: len(data) // 2]) < estimate_tokens(data)
    assert estimate_tokens(data) >= len(data) // 5


@FAST
@given(
    text=st.text(max_size=600),
    ascii_text=st.text(st.characters(max_codepoint=127), max_size=600) | st.text(st.sampled_from("aBZ09 _.\n")),
)
def test_estimate_upper_bounds(text: str, ascii_text: str) -> None:
    encoded = text.encode("utf-8", "surrogatepass")
    assert estimate_tokens(encoded) <= len(encoded)
    assert estimate_tokens(text) <= 2 * len(text)
    assert estimate_tokens(ascii_text) <= len(ascii_text)


@FAST
@given(a=st.text(max_size=400), b=st.text(max_size=400))
def test_estimate_is_nearly_additive(a: str, b: str) -> None:
    joined = estimate_tokens(a + b)
    separate = estimate_tokens(a) + estimate_tokens(b)
    assert separate - 3 <= joined <= separate + 1
    assert estimate_tokens((a + b).encode("utf-8", "surrogatepass")) == joined
