"""Detecting what undeclared bytes hold: JSON Lines, a JSON array of objects, CSV, UTF-8 text, or binary."""

from __future__ import annotations

import hashlib
import json

import pytest

from refvault import Scope, Vault
from refvault.content.text_kind import SNIFF_BYTES, detect_media_type, sniff_text_media_type
from refvault.model import RECORD_MEDIA_TYPES, is_records, is_text
from refvault.read import records
from tests.media import png_bytes

NDJSON = "application/x-ndjson"
JSON = "application/json"
CSV = "text/csv"
PLAIN = "text/plain; charset=utf-8"
OCTET = "application/octet-stream"


def jsonl(count: int, width: int = 40) -> bytes:
    return b"".join(json.dumps({"id": i, "note": "n" * width}).encode() + b"\n" for i in range(count))


def csv_rows(count: int) -> bytes:
    return b"id,name,score\n" + b"".join(b"%d,item-%d,%d\n" % (i, i, i % 7) for i in range(count))


# -- each kind, and what is not it -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"a": 1}\n{"a": 2}\n', NDJSON),
        (b'{"a": 1}\r\n\r\n{"b": [1, 2]}', NDJSON),  # CRLF, a blank line, no final line end
        (b'\xef\xbb\xbf{"a": 1}\n{"a": 2}\n', NDJSON),  # a UTF-8 byte order mark is skipped
        (b'[{"a": 1}, {"b": 2}]', JSON),
        (b'  [\n  {"a": 1}\n]\n', JSON),
        (b"[]", JSON),
        (b"name,age\nada,36\n", CSV),
        (b'name,quote\r\nada,"said ""hi"", then\nleft"\r\n', CSV),  # RFC 4180 quoting across lines
        (b",a,b\n0,1,2\n", CSV),  # an index column without a name (as pandas writes it)
        (b"hello\n", PLAIN),
        ("naïve café ☕\n".encode(), PLAIN),
        (b"", PLAIN),
        (b"\x1b[31mred\x1b[0m log line\n", PLAIN),  # ANSI colours are text
    ],
)
def test_each_kind_of_text_is_detected(data: bytes, expected: str) -> None:
    assert sniff_text_media_type(data) == expected
    assert detect_media_type(data) == expected


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"a": 1}', PLAIN),  # one JSON object is a document, not a stream of records
        (b'{"a": 1}\n', PLAIN),
        (b'{\n  "a": 1,\n  "b": 2\n}\n', PLAIN),  # a pretty-printed object
        (b'{"a": 1}\n[1, 2]\n', PLAIN),  # a line that is not an object
        (b'{"a": 1}\n{"a": 2\n', PLAIN),  # a line that is not JSON
        (b'{"a": NaN}\n{"a": 1}\n', PLAIN),  # NaN is not JSON
        (b"[1, 2, 3]", PLAIN),  # an array, but not of objects
        (b'[{"a": 1}, 2]', PLAIN),
        (b'[{"a": 1},', PLAIN),  # the whole input, and it does not parse
        (b"a,b\n1,2\n3,4,5\n", PLAIN),  # ragged rows
        (b"a,b\n", PLAIN),  # a header and no data row
        (b"just one column\nof text\n", PLAIN),
        (b'a,b\n"never closed,2\n', PLAIN),
    ],
)
def test_text_that_is_not_records_is_plain_text(data: bytes, expected: str) -> None:
    assert sniff_text_media_type(data) == expected


@pytest.mark.parametrize(
    "data",
    [
        "café, déjà vu\n".encode("latin-1"),  # Latin-1, not UTF-8
        b"text with a \x00 NUL byte\n",
        b"\x01\x02\x03binary\x04",
        bytes(range(256)),
        b"\xed\xa0\x80",  # an encoded surrogate is invalid UTF-8
    ],
)
def test_bytes_that_are_not_utf8_text_are_binary(data: bytes) -> None:
    assert sniff_text_media_type(data) is None
    assert detect_media_type(data) == OCTET


def test_a_png_stays_a_png() -> None:
    image = png_bytes(8, 8)
    assert sniff_text_media_type(image) is None
    assert detect_media_type(image) == "image/png"


def test_markup_is_never_promoted_to_an_active_type() -> None:
    for markup in (b"<!doctype html><script>alert(1)</script>", b'<svg xmlns="http://www.w3.org/2000/svg"/>'):
        assert detect_media_type(markup) == PLAIN


# -- prefixes and bounded work -----------------------------------------------------------------------------------------


def test_a_prefix_ignores_its_cut_last_line() -> None:
    data = jsonl(10)
    cut = data[: len(data) - 7]  # the last line is cut
    assert sniff_text_media_type(cut, complete=False) == NDJSON
    assert sniff_text_media_type(cut, complete=True) == PLAIN  # as a whole input, the cut line is not JSON


def test_a_prefix_needs_two_complete_json_lines() -> None:
    first = b'{"a": 1}\n'
    assert sniff_text_media_type(first + b'{"a": 2', complete=False) == PLAIN
    assert sniff_text_media_type(first + b'{"a": 2}\n{"a"', complete=False) == NDJSON


def test_a_prefix_may_end_inside_a_utf8_character() -> None:
    data = "é".encode() * 10
    assert sniff_text_media_type(data[:-1], complete=False) == PLAIN
    assert sniff_text_media_type(data[:-1], complete=True) is None


def test_a_prefix_of_a_json_array_needs_one_complete_object() -> None:
    array = b"[" + b",".join(b'{"id": %d}' % i for i in range(100)) + b"]"
    assert sniff_text_media_type(array[:40], complete=False) == JSON
    assert sniff_text_media_type(b'[{"id": "' + b"x" * 50, complete=False) == PLAIN
    assert sniff_text_media_type(b'[{"id": 1}, 7, {"id": 2', complete=False) == PLAIN


def test_a_prefix_of_csv_may_end_inside_a_quoted_field() -> None:
    data = b'id,text\n1,"first\nsecond"\n2,"third\nfourth"\n'
    cut = data[: data.index(b"third") + 6]  # inside the second row's quoted field, after its line end
    assert sniff_text_media_type(cut, complete=False) == CSV


def test_input_longer_than_the_sniff_window_is_judged_by_its_prefix() -> None:
    big = jsonl(SNIFF_BYTES // 40 + 100)
    assert len(big) > SNIFF_BYTES
    assert sniff_text_media_type(big) == NDJSON
    # Junk after the window is not looked at, in either direction.
    assert sniff_text_media_type(big + b"\x00\xff not json\n") == NDJSON
    assert sniff_text_media_type(b"x" * SNIFF_BYTES + b"\x00") == PLAIN


def test_large_json_and_csv_are_detected_from_their_prefix() -> None:
    array = b"[" + b",".join(b'{"id": %d, "v": "%s"}' % (i, b"x" * 30) for i in range(5_000)) + b"]"
    assert len(array) > SNIFF_BYTES
    assert sniff_text_media_type(array) == JSON
    table = csv_rows(10_000)
    assert len(table) > SNIFF_BYTES
    assert sniff_text_media_type(table) == CSV


# -- hints, explicit types, stored bytes -------------------------------------------------------------------------------


def test_a_specific_hint_is_kept_and_a_vague_one_gives_way() -> None:
    rows = jsonl(3)
    assert detect_media_type(rows, hint="text/markdown") == "text/markdown"
    assert detect_media_type(b"\x00\x01", hint="image/png") == "image/png"
    assert detect_media_type(rows, hint="text/plain") == NDJSON
    assert detect_media_type(rows, hint=OCTET) == NDJSON
    latin1 = "café\n".encode("latin-1")
    assert detect_media_type(latin1, hint="text/plain") == "text/plain"  # named text stays text
    assert detect_media_type(png_bytes(), hint="text/plain") == "text/plain"
    assert detect_media_type(png_bytes(), hint=OCTET) == "image/png"


def test_every_detected_record_type_is_a_record_and_text_type() -> None:
    for media_type in (NDJSON, JSON, CSV):
        assert media_type in RECORD_MEDIA_TYPES
        assert is_records(media_type)
        assert is_text(media_type)  # a wrong guess still reads as text
    assert is_text(PLAIN)


@pytest.mark.parametrize(
    ("data", "expected_rows"),
    [
        (jsonl(3), 3),
        (b'[{"id": 0}, {"id": 1}]', 2),
        (csv_rows(4), 4),
        (b'\xef\xbb\xbf{"id": 0}\r\n\r\n{"id": 1}\r\n', 2),
        (b"id,name\r\n0,a\r\n\r\n1,b\r\n", 2),
    ],
)
def test_detected_records_are_queryable_and_stored_unchanged(
    memory_vault: Vault, scope: Scope, data: bytes, expected_rows: int
) -> None:
    media_type = detect_media_type(data)
    descriptor = memory_vault.put(scope, data, media_type=media_type)
    assert descriptor.content_hash == "sha256:" + hashlib.sha256(data).hexdigest()
    assert memory_vault.read_bytes(scope, descriptor.artifact_id) == data
    page = records.query(memory_vault, scope, descriptor.artifact_id, limit=10)
    assert page["total_records"] == expected_rows
    assert [row["record"]["id"] for row in page["records"]] == list(range(expected_rows))


def test_a_sniff_never_changes_the_bytes_it_looks_at() -> None:
    data = bytearray(b'\xef\xbb\xbf{"a": 1}\n{"a": 2}\n')
    before = bytes(data)
    assert detect_media_type(data) == NDJSON
    assert sniff_text_media_type(memoryview(data), complete=False) == NDJSON
    assert bytes(data) == before
