"""read.window and read.grep: exact, bounded, honest text reads on every backend."""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refvault import Scope, Vault, verify_excerpt
from refvault.catalog.base import CHUNK_SIZE
from refvault.errors import IntegrityError, InvalidArgument, NotFound, SealedArtifact, UnsupportedRead
from refvault.read import grep, window
from refvault.read import windows as windows_module
from tests.conftest import Tamper

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SECRET = "zebra-quokka-7731"  # content that must never appear in an error message


def put(vault: Vault, scope: Scope, data: bytes | str, media_type: str = "text/plain", **options: Any) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return vault.put(scope, raw, media_type=media_type, **options).artifact_id


def shown(data: bytes) -> str:
    """The reference decoding: UTF-8, one U+FFFD per invalid byte."""
    return re.sub("[\udc80-\udcff]", "\ufffd", data.decode("utf-8", "surrogateescape"))


def walk(
    vault: Vault, scope: Scope, artifact_id: str, first: dict[str, Any], max_chars: int
) -> Iterator[dict[str, Any]]:
    """Every window reached from ``first`` by following ``next``."""
    args: dict[str, Any] | None = first
    for _ in range(100_000):
        if args is None:
            return
        response = window(vault, scope, artifact_id, max_chars=max_chars, **args)
        yield response
        args = response["next"]
    raise AssertionError("next never reached the end")


def walked_text(vault: Vault, scope: Scope, artifact_id: str, first: dict[str, Any], max_chars: int) -> str:
    parts = []
    for response in walk(vault, scope, artifact_id, first, max_chars):
        assert len(response["text"]) <= max_chars
        parts.append(response["text"])
    return "".join(parts)


def grep_all(vault: Vault, scope: Scope, artifact_id: str, pattern: str, **options: Any) -> list[dict[str, Any]]:
    """Every match, following ``next`` until the scan completes."""
    matches: list[dict[str, Any]] = []
    from_line = 0
    for _ in range(10_000):
        response = grep(vault, scope, artifact_id, pattern, from_line=from_line, **options)
        matches += response["matches"]
        if response["next"] is None:
            assert response["scan_complete"]
            return matches
        assert response["next"]["from_line"] >= from_line
        from_line = response["next"]["from_line"]
    raise AssertionError("grep never completed")


# -- line windows ------------------------------------------------------------------------


def test_a_line_window_returns_whole_lines_and_says_what_it_covers(vault: Vault, scope: Scope) -> None:
    omissions = [{"reason": "page 3 timed out"}]
    artifact_id = put(vault, scope, "l0\nl1\nl2\nl3\nl4\n", completeness={"status": "partial", "omissions": omissions})
    response = window(vault, scope, artifact_id, lines=[1, 3])
    d = vault.describe(scope, artifact_id)
    proof, verifier = response.pop("proof"), response.pop("verified_by")
    assert (proof["offset"], proof["length"]) == (3, 6)  # the stored bytes of lines 1 and 2
    assert verify_excerpt(b"l1\nl2\n", offset=3, proof=proof, root=d.retrieval["integrity"]["merkle_root"])
    assert verifier["representation"].startswith("stored bytes")
    assert response == {
        "status": "ok",
        "artifact_id": artifact_id,
        "content_hash": d.content_hash,
        "capture_status": "partial",
        "omissions": omissions,
        "media_type": d.media_type,
        "unit": "lines",
        "start": 1,
        "end": 3,
        "returned": 2,
        "total": 5,
        "truncated": False,
        "next": {"lines": [3, 5]},
        "text": "l1\nl2\n",
        "invalid_utf8_bytes": 0,
    }
    json.dumps(response)  # JSON-ready


def test_no_selector_means_every_line_and_nothing_follows(vault: Vault, scope: Scope) -> None:
    artifact_id = put(vault, scope, "a\nb\nc")
    response = window(vault, scope, artifact_id)
    assert (response["unit"], response["start"], response["end"], response["total"]) == ("lines", 0, 3, 3)
    assert response["text"] == "a\nb\nc"
    assert response["next"] is None
    assert response["truncated"] is False


def test_the_last_line_without_a_newline_is_a_line(vault: Vault, scope: Scope) -> None:
    artifact_id = put(vault, scope, "first\nsecond\nlast")
    response = window(vault, scope, artifact_id, lines=[2, None])
    assert (response["text"], response["start"], response["end"], response["total"]) == ("last", 2, 3, 3)
    assert response["next"] is None
    with_newline = put(vault, scope, "first\nsecond\n")
    assert window(vault, scope, with_newline)["total"] == 2


def test_crlf_lines_keep_their_terminators(vault: Vault, scope: Scope) -> None:
    artifact_id = put(vault, scope, "alpha\r\nbeta\r\ngamma\r\n")
    response = window(vault, scope, artifact_id, lines=[1, 2])
    assert response["text"] == "beta\r\n"
    assert response["total"] == 3
    assert walked_text(vault, scope, artifact_id, {"lines": [0, 1]}, 100) == "alpha\r\nbeta\r\ngamma\r\n"


def test_lines_beyond_the_end_return_an_empty_window_at_the_end(vault: Vault, scope: Scope) -> None:
    artifact_id = put(vault, scope, "one\ntwo\n")
    response = window(vault, scope, artifact_id, lines=[5, 9])
    assert (response["start"], response["end"], response["returned"], response["total"]) == (2, 2, 0, 2)
    assert (response["text"], response["next"], response["truncated"]) == ("", None, False)
    past_end = window(vault, scope, artifact_id, lines=[1, 50])
    assert (past_end["end"], past_end["text"], past_end["next"]) == (2, "two\n", None)


def test_an_empty_artifact_has_nothing_to_show(vault: Vault, scope: Scope) -> None:
    artifact_id = put(vault, scope, b"")
    selectors: list[dict[str, Any]] = [{}, {"lines": [0, 10]}, {"byte_range": [0, 10]}]
    for args in selectors:
        response = window(vault, scope, artifact_id, **args)
        assert (response["total"], response["text"], response["next"], response["returned"]) == (0, "", None, 0)
        assert response["truncated"] is False
    found = grep(vault, scope, artifact_id, "x")
    assert (found["matches"], found["total_lines"], found["scan_complete"], found["next"]) == ([], 0, True, None)


def test_max_chars_stops_before_a_line_that_does_not_fit(vault: Vault, scope: Scope) -> None:
    artifact_id = put(vault, scope, "aaaa\nbbbb\ncccc\ndddd\n")
    response = window(vault, scope, artifact_id, lines=[0, 4], max_chars=12)
    assert (response["text"], response["end"], response["truncated"]) == ("aaaa\nbbbb\n", 2, True)
    assert response["next"] == {"lines": [2, 4]}
    to_end = window(vault, scope, artifact_id, lines=[1, None], max_chars=10)
    assert to_end["next"] == {"lines": [3, None]}


def test_a_line_longer_than_max_chars_is_continued_inside_the_line(vault: Vault, scope: Scope) -> None:
    line = "é" * 2500 + "€" * 700 + "𝄞"  # 2-, 3- and 4-byte characters
    text = "short\n" + line + "\nafter\n"
    artifact_id = put(vault, scope, text)
    response = window(vault, scope, artifact_id, lines=[1, 3], max_chars=1000)
    line_start = len(b"short\n")
    assert response["unit"] == "bytes"
    assert response["truncated"] is True
    assert response["text"] == line[:1000]
    assert (response["start"], response["end"]) == (line_start, line_start + 2000)
    assert response["next"] == {"byte_range": [line_start + 2000, len((line + "\n").encode()) - 2000]}
    rest = walked_text(vault, scope, artifact_id, response["next"], 1000)
    assert response["text"] + rest == line + "\nafter\n"
    assert walked_text(vault, scope, artifact_id, {"lines": [0, 2]}, 1000) == text
    assert walked_text(vault, scope, artifact_id, {"lines": [0, 1]}, 7) == text


def test_a_huge_line_across_chunks_reads_back_exactly(vault: Vault, scope: Scope) -> None:
    line = ("x" * 997 + "𝄞€é") * (3 * CHUNK_SIZE // 1000)
    text = "head\n" + line + "\ntail"
    artifact_id = put(vault, scope, text)
    first = window(vault, scope, artifact_id, lines=[1, 2], max_chars=200_000)
    assert first["truncated"]
    assert first["unit"] == "bytes"
    assert first["total"] == len(text.encode())
    assert first["text"] + walked_text(vault, scope, artifact_id, first["next"], 200_000) == line + "\ntail"
    last = window(vault, scope, artifact_id, lines=[2, 3])
    assert (last["text"], last["total"]) == ("tail", 3)


def test_line_numbers_are_exact_across_chunk_boundaries(vault: Vault, scope: Scope) -> None:
    rng = random.Random(7)
    lines = ["".join(rng.choice("abcé€𝄞 ") for _ in range(rng.randrange(0, 300))) + "\n" for _ in range(20_000)]
    artifact_id = put(vault, scope, "".join(lines))
    assert len("".join(lines).encode()) > 2 * CHUNK_SIZE
    for start in (0, 1, 4_321, 9_999, 15_000, 19_990):
        response = window(vault, scope, artifact_id, lines=[start, start + 25], max_chars=200_000)
        assert response["text"] == "".join(lines[start : start + 25])
        assert response["total"] == 20_000


# -- byte windows and UTF-8 ---------------------------------------------------------------

MIXED = "a€bé𝄞c\n€€𝄞d".encode()  # 1-, 2-, 3- and 4-byte characters


def boundaries(data: bytes) -> set[int]:
    out, pos = {0}, 0
    for char in data.decode():
        pos += len(char.encode())
        out.add(pos)
    return out


@pytest.mark.parametrize("offset", range(len(MIXED) + 1))
def test_byte_windows_never_split_a_character(vault: Vault, scope: Scope, offset: int) -> None:
    artifact_id = put(vault, scope, MIXED)
    edges = boundaries(MIXED)
    for length in range(1, 12):
        response = window(vault, scope, artifact_id, byte_range=[offset, length])
        start, end = response["start"], response["end"]
        assert start in edges
        assert end in edges
        assert response["text"] == MIXED[start:end].decode()
        assert start == min(e for e in edges if e >= offset)  # moved forward to a boundary
        if start < len(MIXED):
            boundary_end = max(e for e in edges if e <= offset + length)
            # moved backward, unless the window was too short for the character at its start
            assert end == (boundary_end if boundary_end > start else min(e for e in edges if e > start))
        assert response["returned"] == end - start
        assert response["total"] == len(MIXED)
        assert response["invalid_utf8_bytes"] == 0


def test_byte_window_examples(vault: Vault, scope: Scope) -> None:
    artifact_id = put(vault, scope, "é€𝄞!")  # bytes: é 0-2, € 2-5, 𝄞 5-9, ! 9-10
    cases = {
        (1, 5): (2, 5, "€"),
        (0, 6): (0, 5, "é€"),
        (3, 6): (5, 9, "𝄞"),
        (3, 7): (5, 10, "𝄞!"),
        (6, 1): (9, 10, "!"),
        (0, 1): (0, 2, "é"),
    }
    for (offset, length), (start, end, text) in cases.items():
        response = window(vault, scope, artifact_id, byte_range=[offset, length])
        assert (response["start"], response["end"], response["text"]) == (start, end, text), (offset, length)
    beyond = window(vault, scope, artifact_id, byte_range=[50, 5])
    assert (beyond["start"], beyond["end"], beyond["text"], beyond["next"]) == (10, 10, "", None)


def test_byte_windows_are_capped_by_characters(vault: Vault, scope: Scope) -> None:
    artifact_id = put(vault, scope, "€" * 10)
    response = window(vault, scope, artifact_id, byte_range=[0, 30], max_chars=4)
    assert (response["text"], response["end"], response["truncated"]) == ("€€€€", 12, True)
    assert response["next"] == {"byte_range": [12, 18]}
    whole = window(vault, scope, artifact_id, byte_range=[12, 18], max_chars=6)
    assert (whole["text"], whole["truncated"], whole["next"]) == ("€€€€€€", False, None)
    middle = window(vault, scope, artifact_id, byte_range=[0, 6])
    assert middle["next"] == {"byte_range": [6, 6]}


def test_invalid_utf8_bytes_are_replaced_and_counted(vault: Vault, scope: Scope) -> None:
    data = b"ok \xff\xfe mid \xe2\x82 end \xed\xa0\x80\n\x80x"
    artifact_id = put(vault, scope, data)
    response = window(vault, scope, artifact_id)
    assert response["text"] == "ok \ufffd\ufffd mid \ufffd\ufffd end \ufffd\ufffd\ufffd\n\ufffdx"
    assert response["invalid_utf8_bytes"] == 8
    stray = window(vault, scope, artifact_id, byte_range=[len(data) - 2, 1])  # a lone continuation byte
    assert (stray["start"], stray["text"], stray["invalid_utf8_bytes"]) == (len(data) - 2, "\ufffd", 1)
    at = data.index(b"\xe2")
    truncated_sequence = window(vault, scope, artifact_id, byte_range=[at + 1, 3])  # "\x82 e"
    assert (truncated_sequence["start"], truncated_sequence["text"]) == (at + 1, "\ufffd e")
    assert walked_text(vault, scope, artifact_id, {"byte_range": [0, 3]}, 2) == shown(data)


def test_a_window_cut_inside_a_character_by_max_chars_never_splits_it(vault: Vault, scope: Scope) -> None:
    artifact_id = put(vault, scope, "𝄞" * 5 + "\n")
    response = window(vault, scope, artifact_id, lines=[0, 1], max_chars=3)
    assert response["text"] == "𝄞𝄞𝄞"
    assert response["next"] == {"byte_range": [12, 9]}
    follow = window(vault, scope, artifact_id, **response["next"], max_chars=3)
    assert (follow["text"], follow["next"]) == ("𝄞𝄞\n", None)


ALPHABET = st.sampled_from(["a", "b", " ", "\n", "\r", "é", "€", "𝄞", "\x00"])


@PROPERTY
@given(
    text=st.text(ALPHABET, max_size=400),
    size=st.integers(1, 12),
    max_chars=st.integers(1, 40),
    block=st.sampled_from([1, 3, 64, 1 << 20]),
)
def test_walking_line_windows_reconstructs_the_text(
    vault: Vault, scope: Scope, monkeypatch: pytest.MonkeyPatch, text: str, size: int, max_chars: int, block: int
) -> None:
    monkeypatch.setattr(windows_module, "_BLOCK", block)
    artifact_id = put(vault, scope, text)
    assert walked_text(vault, scope, artifact_id, {"lines": [0, size]}, max_chars) == text
    total = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    assert window(vault, scope, artifact_id, lines=[0, 1])["total"] == total


@PROPERTY
@given(
    data=st.binary(max_size=300) | st.text(ALPHABET, max_size=300).map(str.encode),
    offset=st.integers(0, 40),
    length=st.integers(1, 20),
    max_chars=st.integers(1, 30),
)
def test_walking_byte_windows_reconstructs_the_text(
    vault: Vault, scope: Scope, data: bytes, offset: int, length: int, max_chars: int
) -> None:
    artifact_id = put(vault, scope, data)
    head = window(vault, scope, artifact_id, byte_range=[0, max(1, offset)], max_chars=200_000)
    start = head["end"] if offset else 0
    text = walked_text(vault, scope, artifact_id, {"byte_range": [start, length]}, max_chars)
    assert text == shown(data[start:])
    if offset:
        assert head["text"] + text == shown(data)


# -- refusals and errors ------------------------------------------------------------------


def test_sealed_artifacts_are_refused(vault: Vault, scope: Scope) -> None:
    artifact_id = put(vault, scope, SECRET, disclosure="sealed")
    with pytest.raises(SealedArtifact, match=r"by reference|Ref") as err:
        window(vault, scope, artifact_id)
    assert SECRET not in str(err.value)
    with pytest.raises(SealedArtifact):
        grep(vault, scope, artifact_id, "zebra")


@pytest.mark.parametrize("media_type", ["image/png", "application/octet-stream", "application/vnd.apache.parquet"])
def test_non_text_artifacts_are_refused_with_a_pointer_to_by_reference_use(
    vault: Vault, scope: Scope, media_type: str
) -> None:
    artifact_id = put(vault, scope, SECRET, media_type=media_type)
    reads: list[Callable[[], object]] = [
        lambda: window(vault, scope, artifact_id),
        lambda: grep(vault, scope, artifact_id, "zebra"),
    ]
    for read in reads:
        with pytest.raises(UnsupportedRead, match="not text") as err:
            read()
        message = str(err.value)
        assert "reference" in message
        assert "Ref" in message
        assert artifact_id in message
        assert SECRET not in message
        assert ("read.query" in message) == (media_type == "application/vnd.apache.parquet")


@pytest.mark.parametrize("media_type", ["application/json", "text/csv", "application/x-ndjson", "application/ld+json"])
def test_text_like_media_types_are_readable(vault: Vault, scope: Scope, media_type: str) -> None:
    artifact_id = put(vault, scope, '{"a": 1}\n', media_type=media_type)
    assert window(vault, scope, artifact_id)["text"] == '{"a": 1}\n'


@pytest.mark.parametrize("other", [Scope("acme", "bob", "s1"), Scope("acme", "ana", "s2"), Scope("evil", "ana", "s1")])
def test_another_scope_gets_not_found(vault: Vault, scope: Scope, other: Scope) -> None:
    artifact_id = put(vault, scope, SECRET)
    with pytest.raises(NotFound) as err:
        window(vault, other, artifact_id)
    assert SECRET not in str(err.value)
    with pytest.raises(NotFound):
        window(vault, other, artifact_id, byte_range=[0, 5])
    with pytest.raises(NotFound):
        grep(vault, other, artifact_id, "zebra")


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


@pytest.mark.parametrize("size", [1_000, 2 * CHUNK_SIZE + 77])  # inline in the catalog, and file-backed
def test_tampered_bytes_raise_integrity_error(vault: Vault, tamper: Tamper, scope: Scope, size: int) -> None:
    data = (SECRET + "\n").encode() * (size // (len(SECRET) + 1))
    d = vault.put(scope, data, media_type="text/plain")
    key = vault.catalog.find(scope, d.artifact_id).key  # type: ignore[union-attr]
    last_lines = data.count(b"\n") - 2
    if size < CHUNK_SIZE:
        tamper.set_inline(key, flip(data, 5))
    else:
        tamper.set_bytes(key, flip(data, len(data) - 5))
    reads: list[Callable[[], object]] = [
        lambda: window(vault, scope, d.artifact_id),
        lambda: window(vault, scope, d.artifact_id, lines=[0, 3]),
        # the damaged chunk (chunk 0 of a file-backed blob is intact and verified against its Merkle chunk root)
        lambda: window(vault, scope, d.artifact_id, byte_range=[len(data) - 20, 10]),
        # grep from near the end: a scan that stops at its match cap never reads (or trusts) the damaged chunk
        lambda: grep(vault, scope, d.artifact_id, "quokka", from_line=last_lines),
        lambda: grep(vault, scope, d.artifact_id, "quo+kka", regex=True, from_line=last_lines),
    ]
    for read in reads:
        with pytest.raises(IntegrityError) as err:
            read()
        assert SECRET not in str(err.value)


@pytest.mark.parametrize(
    "args",
    [
        {"lines": "0:10"},
        {"lines": [1]},
        {"lines": [1, 2, 3]},
        {"lines": [-1, 5]},
        {"lines": [5, 5]},
        {"lines": [5, 2]},
        {"lines": [True, 3]},
        {"lines": [1.0, 2]},
        {"lines": [None, 2]},
        {"byte_range": [0, 0]},
        {"byte_range": [-1, 4]},
        {"byte_range": [0, None]},
        {"byte_range": (0, False)},
        {"lines": [0, 1], "byte_range": [0, 1]},
        {"max_chars": 0},
        {"max_chars": 200_001},
        {"max_chars": True},
        {"max_chars": "10"},
    ],
)
def test_window_arguments_are_checked(vault: Vault, scope: Scope, args: dict[str, Any]) -> None:
    artifact_id = put(vault, scope, SECRET)
    with pytest.raises(InvalidArgument) as err:
        window(vault, scope, artifact_id, **args)
    assert SECRET not in str(err.value)
    assert any(word in str(err.value) for word in ("lines", "byte_range", "max_chars"))


def test_window_accepts_tuples_and_the_largest_max_chars(vault: Vault, scope: Scope) -> None:
    artifact_id = put(vault, scope, "a\nb\n")
    assert window(vault, scope, artifact_id, lines=(1, 2), max_chars=200_000)["text"] == "b\n"
    assert window(vault, scope, artifact_id, byte_range=(2, 2), max_chars=1)["text"] == "b"


# -- grep ---------------------------------------------------------------------------------


def test_grep_finds_literal_lines_with_their_numbers(vault: Vault, scope: Scope) -> None:
    text = "alpha error\nbeta\nError gamma\nerror error delta\r\nlast error"
    artifact_id = put(vault, scope, text)
    response = grep(vault, scope, artifact_id, "error")
    assert response["matches"] == [
        {"line": 0, "text": "alpha error", "line_truncated": False},
        {"line": 3, "text": "error error delta", "line_truncated": False},
        {"line": 4, "text": "last error", "line_truncated": False},
    ]
    assert response["status"] == "ok"
    assert (response["pattern"], response["regex"], response["returned"]) == ("error", False, 3)
    assert (response["scanned_lines"], response["total_lines"], response["scan_complete"]) == (5, 5, True)
    assert (response["truncated"], response["next"], response["partial_lines"]) == (False, None, 0)
    assert response["content_hash"] == vault.describe(scope, artifact_id).content_hash
    json.dumps(response)
    assert grep(vault, scope, artifact_id, "a.p")["matches"] == []  # literal: "." is a dot


def test_grep_regex_uses_re2_syntax_and_sees_lines_without_terminators(vault: Vault, scope: Scope) -> None:
    artifact_id = put(vault, scope, "id-123 ok\r\nid-9 ok\nid-456 fail\nnope\n")
    response = grep(vault, scope, artifact_id, r"^id-\d{3} \w+$", regex=True)
    assert [m["line"] for m in response["matches"]] == [0, 2]
    assert response["matches"][0]["text"] == "id-123 ok"
    assert response["regex"] is True
    assert response["scan_complete"] is True


def test_grep_matches_equal_a_plain_python_reference_on_a_large_artifact(vault: Vault, scope: Scope) -> None:
    rng = random.Random(3)
    words = ["alpha", "beta", "gamma", "héllo", "wörld", "€uro", "needle", "𝄞"]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randrange(0, 40))) for _ in range(40_000)]
    artifact_id = put(vault, scope, "\n".join(lines) + "\n")
    assert sum(len(line.encode()) + 1 for line in lines) > 2 * CHUNK_SIZE
    literal = grep_all(vault, scope, artifact_id, "needle wörld", max_matches=1000)
    assert [m["line"] for m in literal] == [i for i, line in enumerate(lines) if "needle wörld" in line]
    regex = grep_all(vault, scope, artifact_id, "^€uro( [a-z]+){2}$", regex=True, max_matches=1000)
    expected = [i for i, line in enumerate(lines) if re.search("^€uro( [a-z]+){2}$", line)]
    assert [m["line"] for m in regex] == expected
    assert expected
    assert all(m["text"] == lines[m["line"]][:500] for m in literal + regex)


def test_a_bad_regex_is_an_invalid_argument_naming_only_the_pattern(vault: Vault, scope: Scope) -> None:
    artifact_id = put(vault, scope, SECRET + "\n")
    for pattern in ["(unclosed", "a{2,1}", "[z-a]", "(?<name>x)\\"]:
        with pytest.raises(InvalidArgument, match="regular expression") as err:
            grep(vault, scope, artifact_id, pattern, regex=True)
        assert pattern in str(err.value)
        assert SECRET not in str(err.value)
    assert grep(vault, scope, artifact_id, "(unclosed")["matches"] == []  # literal: any text is fine


def test_the_match_cap_is_honest_and_next_resumes(vault: Vault, scope: Scope) -> None:
    lines = [f"row {i} {'hit' if i % 3 == 0 else 'miss'}" for i in range(30)]
    artifact_id = put(vault, scope, "\n".join(lines))
    response = grep(vault, scope, artifact_id, "hit", max_matches=4)
    assert [m["line"] for m in response["matches"]] == [0, 3, 6, 9]
    assert (response["truncated"], response["scan_complete"], response["total_lines"]) == (True, False, None)
    assert response["next"] == {"from_line": 10}
    assert response["scanned_lines"] == 10
    resumed = grep(vault, scope, artifact_id, "hit", max_matches=4, from_line=10)
    assert [m["line"] for m in resumed["matches"]] == [12, 15, 18, 21]
    for options in ({}, {"regex": True}):
        paged = grep_all(vault, scope, artifact_id, "hit", max_matches=4, **options)
        assert [m["line"] for m in paged] == list(range(0, 30, 3))
    everything = grep(vault, scope, artifact_id, "hit", max_matches=10)
    assert len(everything["matches"]) == 10
    enough = grep(vault, scope, artifact_id, "hit", max_matches=11)
    assert (enough["truncated"], enough["scan_complete"], enough["total_lines"]) == (False, True, 30)


def test_grep_from_beyond_the_end_scans_nothing(vault: Vault, scope: Scope) -> None:
    artifact_id = put(vault, scope, "a\nb\n")
    response = grep(vault, scope, artifact_id, "a", from_line=7)
    assert (response["matches"], response["scanned_lines"], response["total_lines"]) == ([], 0, 2)
    assert (response["scan_complete"], response["next"]) == (True, None)


def test_match_text_is_capped(vault: Vault, scope: Scope) -> None:
    long_line = "x" * 600 + "needle"
    artifact_id = put(vault, scope, f"short needle\n{long_line}\n")
    [short, long] = grep(vault, scope, artifact_id, "needle")["matches"]
    assert short == {"line": 0, "text": "short needle", "line_truncated": False}
    assert long == {"line": 1, "text": "x" * 500, "line_truncated": True}


def test_grep_shows_invalid_bytes_as_replacement_characters(vault: Vault, scope: Scope) -> None:
    artifact_id = put(vault, scope, b"good\nbad \xff byte\n")
    [match] = grep(vault, scope, artifact_id, "\ufffd")["matches"]
    assert match == {"line": 1, "text": "bad \ufffd byte", "line_truncated": False}


def test_a_pathological_regex_runs_in_linear_time(vault: Vault, scope: Scope) -> None:
    artifact_id = put(vault, scope, "a" * 200_000 + "b\n" + "a" * 200_000 + "\n")
    began = time.monotonic()
    response = grep(vault, scope, artifact_id, "(a+)+$", regex=True)
    assert time.monotonic() - began < 5
    assert [m["line"] for m in response["matches"]] == [1]
    assert response["scan_complete"] is True


@pytest.mark.parametrize(
    ("pattern", "options"),
    [
        ("", {}),
        ("x" * 1001, {}),
        (b"bytes", {}),
        ("two\nlines", {}),
        ("\ud800", {}),
        ("ok", {"max_matches": 0}),
        ("ok", {"max_matches": 1001}),
        ("ok", {"max_matches": True}),
        ("ok", {"from_line": -1}),
        ("ok", {"from_line": 1.5}),
        ("ok", {"max_seconds": -1}),
        ("ok", {"max_seconds": "5"}),
        ("ok", {"max_seconds": float("nan")}),
        ("ok", {"max_seconds": 61}),
        ("ok", {"regex": "yes"}),
    ],
)
def test_grep_arguments_are_checked(vault: Vault, scope: Scope, pattern: Any, options: dict[str, Any]) -> None:
    artifact_id = put(vault, scope, SECRET)
    with pytest.raises(InvalidArgument) as err:
        grep(vault, scope, artifact_id, pattern, **options)
    assert SECRET not in str(err.value)


def test_the_longest_pattern_and_largest_cap_are_accepted(vault: Vault, scope: Scope) -> None:
    artifact_id = put(vault, scope, "x" * 1000 + "\n")
    assert grep(vault, scope, artifact_id, "x" * 1000, max_matches=1000)["returned"] == 1
    assert grep(vault, scope, artifact_id, "x{1000}", regex=True, max_matches=1000)["returned"] == 1


# -- time budget ---------------------------------------------------------------------------


def many_lines(count: int) -> str:
    return "".join(f"line {i:07d} {'needle' if i % 1000 == 0 else 'hay'} {'.' * 40}\n" for i in range(count))


@pytest.mark.parametrize("regex", [False, True])
def test_a_zero_time_budget_scans_nothing_and_says_so(vault: Vault, scope: Scope, regex: bool) -> None:
    artifact_id = put(vault, scope, many_lines(50_000))
    response = grep(vault, scope, artifact_id, "needle", regex=regex, max_seconds=0)
    assert (response["scan_complete"], response["total_lines"], response["matches"]) == (False, None, [])
    assert (response["scanned_lines"], response["next"]) == (0, {"from_line": 0})
    assert response["truncated"] is False  # not the match cap


class TickingClock:
    """A monotonic clock that advances one second each time it is read."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_a_scan_stopped_by_the_budget_resumes_without_loss_or_duplicates(
    vault: Vault, scope: Scope, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = many_lines(120_000)  # about 7 MiB: several 1 MiB batches
    artifact_id = put(vault, scope, text)
    monkeypatch.setattr(windows_module, "_clock", TickingClock())
    first = grep(vault, scope, artifact_id, "needle", max_seconds=2.5, max_matches=1000)  # two batches
    assert first["scan_complete"] is False
    assert first["total_lines"] is None
    assert 0 < first["scanned_lines"] < 120_000
    assert first["next"] == {"from_line": first["scanned_lines"]}
    assert [m["line"] for m in first["matches"]] == list(range(0, first["scanned_lines"], 1000))
    paged = grep_all(vault, scope, artifact_id, "needle", max_seconds=2.5, max_matches=1000)
    assert [m["line"] for m in paged] == list(range(0, 120_000, 1000))


def test_a_slow_regex_is_interrupted_by_the_time_budget(
    vault: Vault, scope: Scope, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(5)
    text = "".join("".join(rng.choice("ab") for _ in range(20)) + "\n" for _ in range(100_000))
    artifact_id = put(vault, scope, text)
    outcomes: list[bool] = []
    regex = windows_module._Scan._regex

    def spy(self: Any, batch: str) -> list[int] | None:
        found = regex(self, batch)
        outcomes.append(found is None)
        return found

    began = time.monotonic()
    full = grep(vault, scope, artifact_id, "(a|b)*a(a|b){20}c", regex=True, max_seconds=60)
    uninterrupted = time.monotonic() - began  # two 1 MiB batches: about a second
    assert (full["scan_complete"], full["total_lines"], full["matches"]) == (True, 100_000, [])
    monkeypatch.setattr(windows_module._Scan, "_regex", spy)
    began = time.monotonic()
    response = grep(vault, scope, artifact_id, "(a|b)*a(a|b){20}c", regex=True, max_seconds=0.1)
    assert time.monotonic() - began < uninterrupted / 2
    assert outcomes == [True]  # DuckDB was interrupted inside the first batch
    assert (response["scan_complete"], response["total_lines"], response["next"]) == (False, None, {"from_line": 0})
    assert (response["scanned_lines"], response["matches"]) == (0, [])


# -- long lines in grep ---------------------------------------------------------------------


def test_literal_grep_searches_all_of_a_long_line(vault: Vault, scope: Scope, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(windows_module, "_BLOCK", 4096)
    monkeypatch.setattr(windows_module, "LONG_LINE_CHARS", 1000)
    long_line = "x" * 4087 + "needle"  # crosses the first 4096-byte block boundary
    long_line += "y" * 20_000 + "late"
    artifact_id = put(vault, scope, f"start\n{long_line}\nneedle after\nlate too\n")
    response = grep(vault, scope, artifact_id, "needle")
    assert response["matches"] == [
        {"line": 1, "text": "x" * 500, "line_truncated": True},
        {"line": 2, "text": "needle after", "line_truncated": False},
    ]
    assert (response["scan_complete"], response["total_lines"], response["partial_lines"]) == (True, 4, 0)
    assert [m["line"] for m in grep(vault, scope, artifact_id, "late")["matches"]] == [1, 3]
    capped = grep(vault, scope, artifact_id, "y", max_matches=1)
    assert (capped["next"], capped["truncated"]) == ({"from_line": 2}, True)


def test_regex_grep_reports_a_long_line_it_saw_only_in_part(
    vault: Vault, scope: Scope, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(windows_module, "_BLOCK", 4096)
    monkeypatch.setattr(windows_module, "LONG_LINE_CHARS", 1000)
    artifact_id = put(vault, scope, "start\n" + "x" * 20_000 + "late\nlate too\n")
    response = grep(vault, scope, artifact_id, "la+te", regex=True)
    assert [m["line"] for m in response["matches"]] == [2]
    assert (response["partial_lines"], response["scan_complete"], response["total_lines"]) == (1, False, 3)
    assert response["next"] is None  # nothing to resume: the line is longer than a regex may see
    early = grep(vault, scope, artifact_id, "^x+", regex=True)
    assert (early["matches"][0]["line"], early["partial_lines"], early["scan_complete"]) == (1, 0, True)
    for anchored in ("x$", "x\\b", "^x+$"):  # true of a cut segment, false of the whole line
        cut = grep(vault, scope, artifact_id, anchored, regex=True)
        assert (cut["matches"], cut["partial_lines"], cut["scan_complete"]) == ([], 1, False), anchored
