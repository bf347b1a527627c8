"""Sealed text cannot pass the leak guard after a trivial transform, nor piece by piece over a run.

The attack: a tool reads a sealed artifact by ``Ref`` and returns its text upper-cased, hex-encoded,
base64 of base64, with spaces turned into ``_``, with a zero-width character every 10 characters (or
in full-width letters, percent-encoded, ...), or returns it 20 bytes at a time, one piece per
request. Each got the text past ``guard.check``. Now both sides go through one normalisation (case
and separator fold, NFKC, ignorable characters dropped), outgoing text is also decoded (percent, hex,
base64, nested), and short pieces of one artifact add up over a run. Requests use the request
builders of ``tests/guard/test_guard.py`` (OpenAI chat and responses, Anthropic messages); errors and
events never carry the protected text.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import unicodedata
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest

from refvault import Ref, Scope, Toolbox, Vault
from refvault.blobs.memory import MemoryBlobStore
from refvault.catalog.memory import MemoryCatalog
from refvault.errors import ContextLeak, InvalidArgument
from refvault.guard import LeakGuard, marker
from refvault.guard.requests import normalize_text
from tests.guard.test_guard import TEXT_SITES, json_records, words

ART = "art_runbook"
SCOPE = Scope("acme", "ana", "s1")


def _runbook(seed: int, size: int) -> str:
    """Prose as people write it: capitals, punctuation, numbers; words drawn at random, so every passage is unique."""
    rng = random.Random(seed)
    vocabulary = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(900)
    ]
    sentences: list[str] = []
    while sum(len(s) + 1 for s in sentences) < size:
        chosen = [rng.choice(vocabulary) for _ in range(rng.randint(6, 14))]
        if rng.random() < 0.3:
            chosen.insert(rng.randrange(len(chosen)), str(rng.randrange(10, 99_999)))
        sentence = " ".join(chosen)
        sentences.append(sentence[0].upper() + sentence[1:] + rng.choice([".", ".", ";", ":", "!"]))
    return " ".join(sentences)[:size]


SECRET = _runbook(16, 6000)
EXCERPT = SECRET[1500:1700]  # 200 bytes: the content arm's size, before any transform


def _fullwidth(text: str) -> str:
    return "".join("\u3000" if c == " " else chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def _every_10th(text: str, mark: str) -> str:
    return "".join(c + (mark if i % 10 == 9 else "") for i, c in enumerate(text))


def _b64(data: bytes) -> bytes:
    return base64.b64encode(data)


TRANSFORMS: dict[str, Callable[[str], str]] = {
    "upper": str.upper,
    "hex": lambda t: t.encode().hex(),
    "hex_upper": lambda t: t.encode().hex().upper(),
    "base64_of_base64": lambda t: _b64(_b64(t.encode())).decode(),
    "spaces_to_underscores": lambda t: t.replace(" ", "_"),
    "zero_width_space_every_10": lambda t: _every_10th(t, "\u200b"),
    "zero_width_joiner_every_10": lambda t: _every_10th(t, "\u200d"),
    "word_joiner_and_soft_hyphen": lambda t: _every_10th(_every_10th(t, "\u2060"), "\u00ad"),
    "nfkc_fullwidth": _fullwidth,
    "percent_encoded": lambda t: quote(t, safe=""),
    "percent_every_byte": lambda t: "".join(f"%{b:02X}" for b in t.encode()),
    "upper_with_dashes": lambda t: t.upper().replace(" ", "-"),
    "title_with_dots": lambda t: t.title().replace(" ", "."),
    "swapcase_slashes_zero_width": lambda t: _every_10th(t.swapcase().replace(" ", "/"), "\u200b"),
    "fullwidth_upper_zero_width": lambda t: _every_10th(_fullwidth(t.upper()), "\ufeff"),
    "typographic_spaces_and_dashes": lambda t: t.replace(" ", "\u2014", 10).replace(" ", "\u00a0"),
    "base64_of_hex": lambda t: _b64(t.encode().hex().encode()).decode(),
    "hex_of_base64_upper": lambda t: _b64(t.upper().encode()).hex(),
    "base64_three_deep": lambda t: _b64(_b64(_b64(t.encode()))).decode(),
    "base64_of_percent": lambda t: _b64(quote(t, safe="").encode()).decode(),
}
SHAPES = ["chat.tool", "chat.arguments", "responses.function_call_output", "anthropic.tool_result"]


def _shaped(shape: str, text: str) -> tuple[Any, str]:
    return TEXT_SITES[shape]("tool output follows: " + text + " (end of output)", b"")


@pytest.fixture(scope="module")
def guard() -> LeakGuard:
    g = LeakGuard()
    g.protect(ART, SECRET)
    return g


def _assert_no_secret(*shown: str) -> None:
    """Nothing shown holds 12 bytes of the secret, in any of the transformed spellings either."""
    spellings = [EXCERPT, *(transform(EXCERPT) for transform in TRANSFORMS.values())]
    windows = {s[i : i + 12] for s in spellings for i in range(0, len(s) - 12, 3)}
    for text in shown:
        assert not any(w in text for w in windows), text


# -- every transform, in every request shape -------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_transformed_sealed_text_is_stopped(
    guard: LeakGuard, name: str, shape: str, caplog: pytest.LogCaptureFixture
) -> None:
    request, site = _shaped(shape, TRANSFORMS[name](EXCERPT))
    with caplog.at_level(logging.WARNING, logger="refvault.guard"), pytest.raises(ContextLeak) as caught:
        guard.check(request)
    findings = caught.value.findings
    assert [(f.site, f.artifact_id, f.arm) for f in findings] == [(site, ART, "content")]
    assert findings[0].matched >= guard.min_match
    _assert_no_secret(
        str(caught.value), repr(caught.value), json.dumps([f.to_dict() for f in findings]), repr(guard),
        *(record.getMessage() + repr(record.__dict__) for record in caplog.records),
    )  # fmt: skip


@pytest.mark.parametrize("name", ["upper", "zero_width_space_every_10", "nfkc_fullwidth", "percent_encoded", "hex"])
def test_redact_policy_removes_the_transformed_text(name: str) -> None:
    g = LeakGuard(policy="redact")
    g.protect(ART, SECRET)
    transformed = TRANSFORMS[name](EXCERPT)
    head = "The reformatting tool ran on request of the agent and returned this: "  # longer than w - 1 = 31 bytes
    request, _ = TEXT_SITES["chat.tool"](head + transformed + " -- that was all of what it returned.", b"")
    redacted = g.check(request)
    assert isinstance(redacted, dict)
    text = redacted["messages"][0]["content"]
    assert marker(ART) in text
    assert transformed not in text
    assert text.startswith(head[:32])  # the carrier is kept (but for the up to w - 1 bytes a match's extent may take)
    assert g.scan(redacted) == []


def test_a_transform_of_less_than_min_match_is_not_a_content_finding(guard: LeakGuard) -> None:
    """Normalisation does not lower the bar: fewer than k (33) bytes, upper-cased, are never a content finding.

    (The excerpt is fenced by ``#``, which the secret never holds, so that it is exactly 32 bytes long.)"""
    assert "#" not in SECRET
    request, _ = TEXT_SITES["chat.tool"]("tool output follows: #" + SECRET[3000:3032].upper() + "# (end)", b"")
    assert [f for f in guard.scan(request) if f.arm == "content"] == []


def test_every_format_character_is_dropped_and_compatibility_forms_fold() -> None:
    formats = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf"]
    assert len(formats) > 150
    plain = normalize_text(b"sealed text")
    for c in formats:
        assert normalize_text(f"sea{c}led te{c}xt".encode()) == plain, hex(ord(c))
    for variant in (
        _fullwidth("SEALED TEXT"),
        "SEALED\u00a0TEXT",
        "se\ufe0faled te\U000e0101xt",
        _fullwidth("sealed") + " text",
    ):
        assert normalize_text(variant.encode()) == plain, variant


# -- the same, through a real Toolbox tool that reads the sealed artifact by Ref ---------------------------------------


@pytest.fixture
def box() -> tuple[Toolbox, str]:
    vault = Vault(MemoryBlobStore(), MemoryCatalog())
    art = vault.put(SCOPE, SECRET.encode(), media_type="text/plain", disclosure="sealed").artifact_id
    toolbox = Toolbox(vault)

    @toolbox.tool
    def reformat(doc: Ref, how: str, start: int = 1500, length: int = 200) -> str:
        """Return part of the document, reformatted."""
        text = doc.read().decode()[start : start + length]
        return TRANSFORMS[how](text)

    return toolbox, art


def _chat(*tool_outputs: str) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "summarise the runbook"}]
    for i, output in enumerate(tool_outputs):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "reformat", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": output})
    return {"model": "m", "messages": messages}


def _anthropic(output: str) -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "summarise the runbook"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "reformat", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": output}]},
        ],
    }


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_a_tool_returning_a_transformed_sealed_ref_is_stopped(box: tuple[Toolbox, str], name: str) -> None:
    toolbox, art = box
    output = toolbox.call_sync("reformat", {"doc": art, "how": name}, scope=SCOPE).content
    assert isinstance(output, str)
    assert output == TRANSFORMS[name](EXCERPT)  # the tool did read the sealed text and transform it
    for request in (_chat(output), _anthropic(output)):
        with pytest.raises(ContextLeak) as caught:
            toolbox.guard.check(request)
        assert {f.artifact_id for f in caught.value.findings} == {art}
        _assert_no_secret(str(caught.value))


# -- pieces shorter than min_match, spread over the requests of a run --------------------------------------------------

PIECE = 20
START = 2000


def _piece(i: int) -> str:
    return SECRET[START + PIECE * i : START + PIECE * (i + 1)]


def _piece_request(i: int) -> Any:
    request, _ = TEXT_SITES["chat.tool"](f"part {i}: {_piece(i)}", b"")
    return request


def _sent(g: LeakGuard, requests: list[Any]) -> int:
    """How many of ``requests`` ``g.check`` lets through, in order, until the first it refuses."""
    for n, request in enumerate(requests):
        try:
            g.check(request)
        except ContextLeak as leak:
            assert [(f.artifact_id, f.arm) for f in leak.findings] == [(ART, "pieces")]
            assert leak.findings[0].matched >= g.piece_limit
            _assert_no_secret(str(leak), repr(leak.findings))
            return n
    return len(requests)


def test_six_pieces_of_20_bytes_in_six_requests_are_stopped(guard: LeakGuard) -> None:
    g = LeakGuard()
    g.protect(ART, SECRET)
    requests = [_piece_request(i) for i in range(6)]
    assert all(guard.scan(r) == [] for r in requests)  # each alone is clean, and scan remembers nothing
    sent = _sent(g, requests)
    # 20-byte pieces each verify at least 16 bytes: six reach the limit (96) of a 128-byte stretch; three cannot
    assert 3 <= sent <= 5
    assert _sent(g, requests[sent:]) == 0  # the refused piece was not remembered: it is refused again
    assert _sent(g, requests[:sent] * 3) == 3 * sent  # what was sent, sent again (history), adds nothing


def test_pieces_in_one_request_add_up(guard: LeakGuard) -> None:
    """Six messages of one request, each a 20-byte piece."""
    g = LeakGuard()
    g.protect(ART, SECRET)
    messages = [{"role": "tool", "tool_call_id": f"c{i}", "content": f"part {i}: {_piece(i)}"} for i in range(6)]
    findings = g.scan({"messages": messages})
    assert {(f.artifact_id, f.arm) for f in findings} == {(ART, "pieces")}
    assert {f.site for f in findings} <= {f"messages[{i}].content" for i in range(6)}


def test_transformed_pieces_add_up_too() -> None:
    g = LeakGuard()
    g.protect(ART, SECRET)
    spellings = [str.upper, TRANSFORMS["zero_width_space_every_10"], TRANSFORMS["spaces_to_underscores"]]
    requests = [
        TEXT_SITES["anthropic.tool_result"](f"part {i}: {spellings[i % 3](_piece(i))}", b"")[0] for i in range(6)
    ]
    assert _sent(g, requests) < 6


def test_pieces_split_across_two_runs_do_not_add_up() -> None:
    """A run is one guard, until ``new_run``: three pieces here and three there never meet."""
    first, second = LeakGuard(), LeakGuard()
    for g in (first, second):
        g.protect(ART, SECRET)
    requests = [_piece_request(i) for i in range(6)]
    assert _sent(first, requests[:3]) == 3
    assert _sent(second, requests[3:]) == 3
    again = LeakGuard()
    again.protect(ART, SECRET)
    assert _sent(again, requests[:3]) == 3
    again.new_run()
    assert _sent(again, requests[3:]) == 3


def test_a_tool_leaking_20_bytes_per_call_is_stopped_in_a_chat_loop(box: tuple[Toolbox, str]) -> None:
    """The model calls the tool again and again; every request carries the history of what it returned."""
    toolbox, art = box
    outputs: list[str] = []
    with pytest.raises(ContextLeak) as caught:
        for i in range(6):
            arguments = {"doc": art, "how": "upper", "start": 100 + 20 * i, "length": 20}
            piece = toolbox.call_sync("reformat", arguments, scope=SCOPE)
            assert isinstance(piece.content, str)
            outputs.append(piece.content)
            toolbox.guard.check(_chat(*outputs))
    assert len(outputs) <= 6
    assert {(f.artifact_id, f.arm) for f in caught.value.findings} == {(art, "pieces")}


def test_the_piece_arm_can_be_turned_off_and_its_arguments_are_checked() -> None:
    off = LeakGuard(piece_min=None)
    off.protect(ART, SECRET)
    assert _sent(off, [_piece_request(i) for i in range(6)]) == 6
    assert off.stats()["piece_index_bytes"] == 0
    for bad in (
        {"piece_min": 15},
        {"piece_min": 65},
        {"piece_min": True},
        {"piece_limit": 15},
        {"piece_limit": 129},
        {"piece_limit": "96"},
        {"piece_budget": 0},
        {"piece_budget": 1.5},
    ):
        with pytest.raises(InvalidArgument):
            LeakGuard(**bad)


def test_pieces_scattered_over_an_artifact_do_not_add_up() -> None:
    """The arm counts a passage sent piece by piece; 20 bytes from each of many far-apart places do not add up
    (the limit of what it promises: see the docs)."""
    g = LeakGuard()
    g.protect(ART, SECRET)
    requests = [TEXT_SITES["chat.tool"](f"part {i}: {SECRET[200 * i : 200 * i + 20]}", b"")[0] for i in range(25)]
    assert _sent(g, requests) == 25


# -- clean traffic: the new views and the piece arm add no false flags -------------------------------------------------


def test_the_clean_corpus_through_one_run_gives_no_finding() -> None:
    """The clean corpus of ``tests/guard/test_guard.py`` (prose and JSON records unrelated to the protected ones),
    sent as one run of requests through ``check``: every view and the piece arm, no finding."""
    g = LeakGuard(size_threshold=1 << 30)
    protected = [(f"art_{i}", words(1000 + i, 200_000, "abcdefghijklmnopqrstuvwxyz").encode()) for i in range(20)]
    protected += [
        (f"art_j{i}", json_records(2000 + i, 200_000, ("id", "message", "flag"), "abcdefghijklmnop").encode())
        for i in range(10)
    ]
    g.protect_many(protected)
    chunk = 1 << 18
    prose = words(99, 6 * chunk, "etaoinshrdlucmfwypvbgkjqxz")
    records = json_records(98, 4 * chunk, ("user", "text", "done"), "qrstuvwxyz")
    history: list[dict[str, Any]] = []
    for i, text in enumerate([prose[j : j + chunk] for j in range(0, len(prose), chunk)] + [
        records[j : j + chunk] for j in range(0, len(records), chunk)
    ]):  # fmt: skip
        shown = text.upper() if i % 2 else text.replace(" ", "_")  # transformed clean text is still clean
        history = [*history[-4:], {"role": "tool", "tool_call_id": f"c{i}", "content": shown}]
        assert g.check({"messages": history}) is not None


def test_clean_english_about_the_same_subject_gives_no_finding() -> None:
    """Real English on one subject: the docstrings of Python's ``email`` package protected, those of ``http`` and
    ``urllib`` sent as one run (they share phrasing, not passages)."""
    import email.message
    import email.utils
    import http.cookiejar
    import http.cookies
    import inspect
    import urllib.parse
    import urllib.request

    def docs(*modules: Any) -> list[str]:
        """The docstrings of what each module defines itself (nothing inherited: no copies)."""
        out = [inspect.getdoc(m) or "" for m in modules]
        for module in modules:
            for _, member in inspect.getmembers(module, lambda o: inspect.isclass(o) or inspect.isfunction(o)):
                if getattr(member, "__module__", None) == module.__name__:
                    out.append(member.__doc__ or "")
                    out += [
                        f.__doc__ or ""
                        for f in vars(member).values()
                        if inspect.isfunction(f) and f.__qualname__.startswith(member.__name__ + ".")
                    ]
        return [inspect.cleandoc(d) for d in dict.fromkeys(out) if len(d) >= 40]

    g = LeakGuard()
    g.protect_many((f"art_doc_{i}", d) for i, d in enumerate(docs(email.message, email.utils)))
    traffic = docs(http.cookiejar, http.cookies, urllib.parse, urllib.request)
    assert sum(len(d) for d in traffic) > 30_000
    for i in range(0, len(traffic), 5):
        g.check(
            {
                "messages": [
                    {"role": "tool", "tool_call_id": f"c{j}", "content": d} for j, d in enumerate(traffic[i : i + 5])
                ]
            }
        )
