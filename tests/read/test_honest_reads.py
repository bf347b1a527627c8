"""Honest bounded reads: a zero time budget never claims absence, byte windows never split UTF-8, an overlong line is
reported unsearched.
"""

from __future__ import annotations

import pytest

from refvault import Scope, Vault, read
from tests.read.record_helpers import NDJSON, _ndjson


def test_a_zero_time_budget_never_claims_absence(vault: Vault) -> None:
    scope = Scope("acme", "ana", "s1")
    artifact_id = vault.put(scope, _ndjson([{"n": i} for i in range(100)]), media_type=NDJSON).artifact_id
    for order in (None, [{"field": "n", "direction": "desc"}]):
        answer = read.query(
            vault, scope, artifact_id, where={"field": "n", "op": "eq", "value": 99}, order=order, max_seconds=0
        )
        assert answer["records"] == []
        assert answer["scan_complete"] is False
        assert answer["status"] == "incomplete"
        assert answer["omissions"], answer


def test_byte_windows_never_split_utf8_and_walk_back_to_the_whole_text(vault: Vault) -> None:
    scope = Scope("acme", "ana", "s1")
    data = "é€𝄞a\n".encode() * 7 + b"\xff\xc3" + "€".encode()
    artifact_id = vault.put(scope, data, media_type="text/plain").artifact_id
    expected = data.decode("utf-8", "surrogateescape").replace("\udcff", "\ufffd").replace("\udcc3", "\ufffd")
    for length in range(1, 9):
        for max_chars in (1, 2, 5):
            window = read.window(vault, scope, artifact_id, byte_range=[0, length], max_chars=max_chars)
            texts = [window["text"]]
            while window["next"] is not None:
                window = read.window(vault, scope, artifact_id, max_chars=max_chars, **window["next"])
                texts.append(window["text"])
            assert "".join(texts) == expected


def test_regex_grep_of_an_overlong_line_is_honest_about_what_it_did_not_search(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    from refvault.read import windows

    monkeypatch.setattr(windows, "LONG_LINE_CHARS", 64)
    monkeypatch.setattr(windows, "_BLOCK", 16)
    scope = Scope("acme", "ana", "s1")
    artifact_id = vault.put(scope, b"short\n" + b"x" * 500 + b"NEEDLE\nend\n", media_type="text/plain").artifact_id
    regex = read.grep(vault, scope, artifact_id, "NEE+DLE", regex=True)
    assert regex["matches"] == []
    assert regex["scan_complete"] is False
    assert regex["partial_lines"] == 1
    literal = read.grep(vault, scope, artifact_id, "NEEDLE")
    assert [m["line"] for m in literal["matches"]] == [1]
    assert literal["scan_complete"] is True
