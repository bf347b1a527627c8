"""``exempt_disclosed``: a text refvault itself showed the model of a model-disclosed artifact is not a leak of it;
anything else in that text, and the same content anywhere else, still is."""

from __future__ import annotations

import secrets

from refvault.guard import LeakGuard


def _text(n: int = 600) -> str:
    return " ".join(secrets.token_hex(6) for _ in range(n // 13 + 1))[:n]


def _request(*contents: str) -> dict[str, object]:
    return {"messages": [{"role": "tool", "tool_call_id": f"c{i}", "content": c} for i, c in enumerate(contents)]}


def _owners(guard: LeakGuard, request: object) -> set[str]:
    return {finding.artifact_id for finding in guard.scan(request) if finding.artifact_id}


def test_the_exact_text_shown_is_not_flagged_for_the_artifact_it_shows() -> None:
    guard, shown_artifact = LeakGuard(), _text()
    guard.protect("art_aaaaaaaaaaaaaaaaaaaaaaaaaa", shown_artifact)
    preview = '{"offloaded": {"preview": "' + shown_artifact[:300] + '"}}'
    assert _owners(guard, _request(preview)) == {"art_aaaaaaaaaaaaaaaaaaaaaaaaaa"}
    guard.exempt_disclosed(preview, ["art_aaaaaaaaaaaaaaaaaaaaaaaaaa"])
    assert guard.scan(_request(preview)) == []
    assert guard.check(_request(preview)) == _request(preview)


def test_another_artifact_inside_the_shown_text_is_still_flagged() -> None:
    guard, shown_artifact, sealed = LeakGuard(), _text(), _text()
    guard.protect("art_aaaaaaaaaaaaaaaaaaaaaaaaaa", shown_artifact)
    guard.protect("art_ssssssssssssssssssssssssss", sealed)
    preview = shown_artifact[:300] + " and " + sealed[:200]
    guard.exempt_disclosed(preview, ["art_aaaaaaaaaaaaaaaaaaaaaaaaaa"])
    assert _owners(guard, _request(preview)) == {"art_ssssssssssssssssssssssssss"}


def test_the_same_content_elsewhere_is_still_flagged() -> None:
    guard, shown_artifact = LeakGuard(), _text()
    guard.protect("art_aaaaaaaaaaaaaaaaaaaaaaaaaa", shown_artifact)
    preview = "preview: " + shown_artifact[:300]
    guard.exempt_disclosed(preview, ["art_aaaaaaaaaaaaaaaaaaaaaaaaaa"])
    pasted = "a tool pasted: " + shown_artifact[:300]  # not the text refvault showed
    assert _owners(guard, _request(preview, pasted)) == {"art_aaaaaaaaaaaaaaaaaaaaaaaaaa"}
    assert [f.site for f in guard.scan(_request(preview, pasted))] == ["messages[1].content"]


def test_an_empty_exemption_changes_nothing() -> None:
    guard, shown_artifact = LeakGuard(), _text()
    guard.protect("art_aaaaaaaaaaaaaaaaaaaaaaaaaa", shown_artifact)
    guard.exempt_disclosed(shown_artifact, [])
    assert _owners(guard, _request(shown_artifact)) == {"art_aaaaaaaaaaaaaaaaaaaaaaaaaa"}
