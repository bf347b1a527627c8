"""The console's pages over HTTP: what each shows, what none shows, and the headers that keep it inert."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from refvault import Vault
from refvault.keys import create_key
from refvault.server.app import create_app
from refvault.server.console.render import CONSOLE_SECURITY_POLICY
from tests.server.console.client import csrf_of, sign_in
from tests.server.console.planted import CANARY, IMG, PARAM_IMG, RECORDS, SCRIPT, Planted, plant

ABSENT = "art_" + "q" * 28


class Console:
    def __init__(self, vault: Vault, http: TestClient, planted: Planted, responses: list[str]) -> None:
        self.vault, self.http, self.planted, self.responses = vault, http, planted, responses

    def get(self, path: str, **params: str) -> str:
        answer = self.http.get(path, params=params) if params else self.http.get(path)  # keep a path's own query
        self.responses.append(answer.text)
        return answer.text

    def page(self, name: str, **params: str) -> str:
        return self.get(f"/console/artifacts/{self.planted.ids[name]}", **params)


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    responses: list[str] = []
    with Vault.open(tmp_path_factory.mktemp("console") / "store") as vault:
        planted = plant(vault)
        _, key = create_key(vault, "acme", "ana")
        with TestClient(create_app(vault)) as http:
            sign_in(http, key)
            yield Console(vault, http, planted, responses)
    assert not any(CANARY in text for text in responses)  # every response any test read, sealed canary-free


def test_every_page_carries_a_csp_with_no_script_and_no_framing(console: Console) -> None:
    for path in ("/console", "/console/runs", "/console/audit", f"/console/artifacts/{console.planted.ids['text']}"):
        answer = console.http.get(path)
        assert answer.status_code == 200
        csp = answer.headers["content-security-policy"]
        assert csp == CONSOLE_SECURITY_POLICY
        assert "script-src 'none'" in csp
        assert "frame-ancestors 'none'" in csp
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert "<script" not in answer.text.replace("&lt;script", "")


def test_the_list_shows_the_keys_artifacts_and_nothing_else(console: Console) -> None:
    page = console.get("/console")
    ids = console.planted.ids
    for mine in ("text", "json", "records", "image", "sealed", "other_session", "run_input"):
        assert ids[mine] in page
    for hidden in ("denied", "other_user", "foreign"):
        assert ids[hidden] not in page


@pytest.mark.parametrize(
    ("params", "shown", "hidden"),
    [
        ({"session": "s2"}, ["other_session"], ["text", "run_input"]),
        ({"media": "image/"}, ["image", "svg"], ["text", "records"]),
        ({"label": "ops"}, ["text"], ["json", "other_session"]),
        ({"status": "sealed"}, ["sealed"], ["text"]),
        ({"since": "2000-01-01", "until": "2999-12-31"}, ["text", "image"], []),
        ({"until": "2000-01-01"}, [], ["text", "image"]),
    ],
)
def test_the_list_filters(console: Console, params: dict[str, str], shown: list[str], hidden: list[str]) -> None:
    page = console.get("/console", **params)
    for name in shown:
        assert console.planted.ids[name] in page
    for name in hidden:
        assert console.planted.ids[name] not in page


def test_a_malformed_date_filter_is_a_clear_error(console: Console) -> None:
    answer = console.http.get("/console", params={"since": "yesterday"})
    assert answer.status_code == 400
    assert "YYYY-MM-DD" in answer.text


def test_text_shows_numbered_lines_in_windows(console: Console) -> None:
    first = console.page("text")
    assert '<th scope="row">1</th>' in first
    assert "line 200" in first
    assert "line 201" not in first
    assert "line=200" in first  # the next window's link
    second = console.page("text", line="200")
    assert '<th scope="row">201</th>' in second
    assert "line 201" in second


def test_text_payloads_are_escaped(console: Console) -> None:
    page = console.page("text", line="400")
    assert SCRIPT not in page
    assert IMG not in page
    assert "&lt;script&gt;window.__pwned=1;" in page


def test_json_is_a_tree_with_escaped_keys_and_values(console: Console) -> None:
    page = console.page("json")
    assert "<details" in page
    assert "deep" in page
    assert SCRIPT not in page
    assert IMG not in page
    assert "&lt;script&gt;" in page


def test_records_are_a_table_with_a_query_and_cursor_paging(console: Console) -> None:
    page = console.page("records")
    assert page.count('<th scope="row">') == 25
    cursor = re.search(r'id="next-records" href="([^"]+)"', page)
    assert cursor is not None
    following = console.get(cursor.group(1).replace("&amp;", "&"))
    assert '<th scope="row">25</th>' in following
    high = console.page("records", where='{"field": "severity", "op": "eq", "value": "high"}')
    assert high.count('<th scope="row">') == 25
    assert f"of {RECORDS}" in high
    assert '<th scope="row">0</th>' not in high  # record 0 is "low"


def test_a_malformed_query_is_explained_not_run(console: Console) -> None:
    page = console.page("records", where="{not json")
    assert "JSON selector" in page
    assert '<th scope="row">' not in page


def test_images_come_from_a_server_made_thumbnail_and_never_inline(console: Console) -> None:
    from io import BytesIO

    from PIL import Image

    page = console.page("image")
    ids = console.planted.ids
    assert f"/console/artifacts/{ids['image']}/thumbnail" in page
    assert "base64" not in page
    assert "data:image" not in page
    thumb = console.http.get(f"/console/artifacts/{ids['image']}/thumbnail", params={"session": "s1"})
    assert thumb.headers["content-type"] == "image/png"
    assert Image.open(BytesIO(thumb.content)).size == (120, 80)
    full = console.http.get(f"/console/artifacts/{ids['image']}/image", params={"session": "s1"})
    assert full.content == console.planted.image
    assert full.headers["x-content-type-options"] == "nosniff"


def test_svg_and_html_show_as_escaped_source_and_download_as_attachments(console: Console) -> None:
    for name in ("svg", "html"):
        page = console.page(name)
        assert "&lt;script&gt;" in page
        assert "<svg xmlns" not in page
        assert "<h1>hi" not in page
        answer = console.http.post(
            f"/console/artifacts/{console.planted.ids[name]}/download",
            params={"session": "s1"},
            data={"csrf": csrf_of(page)},
            follow_redirects=False,
        )
        assert answer.status_code == 303
        link = console.http.get(answer.headers["location"])
        assert link.headers["content-disposition"].startswith("attachment")
        assert link.headers["x-content-type-options"] == "nosniff"
        assert console.http.get(f"/console/artifacts/{console.planted.ids[name]}/image").status_code == 404


def test_other_bytes_are_hex_with_a_download(console: Console) -> None:
    page = console.page("binary")
    assert "00000000  00 01 02 03" in page
    assert "Download" in page


def test_a_media_type_parameter_payload_is_escaped(console: Console) -> None:
    page = console.page("odd_type")
    assert PARAM_IMG not in page
    assert "&lt;img src=x onerror=alert(document.domain)&gt;" in page
    assert "plain words" in page


def test_a_sealed_artifact_shows_metadata_only(console: Console) -> None:
    ids = console.planted.ids
    page = console.page("sealed")
    assert "Sealed" in page
    assert ids["sealed"] in page
    assert CANARY not in page
    assert "/download" not in page
    token = csrf_of(page)
    refused = console.http.post(
        f"/console/artifacts/{ids['sealed']}/download", data={"csrf": token}, follow_redirects=False
    )
    assert refused.status_code == 404
    assert CANARY not in refused.text


@pytest.mark.parametrize("name", ["foreign", "other_user", "denied"])
def test_foreign_other_users_and_denied_artifacts_look_absent(console: Console, name: str) -> None:
    absent = console.http.get(f"/console/artifacts/{ABSENT}")
    hidden = console.http.get(f"/console/artifacts/{console.planted.ids[name]}")
    assert absent.status_code == hidden.status_code == 404
    assert hidden.text == absent.text
    for session in ("s1", "s2"):
        again = console.http.get(f"/console/artifacts/{console.planted.ids[name]}", params={"session": session})
        assert again.text == absent.text


def test_verify_now_rehashes_the_bytes(console: Console) -> None:
    page = console.page("text")
    answer = console.http.post(
        f"/console/artifacts/{console.planted.ids['text']}/verify",
        params={"session": "s1"},
        data={"csrf": csrf_of(page)},
    )
    assert answer.status_code == 200
    assert "Verified now" in answer.text


def test_verify_now_reports_tampered_bytes(tmp_path: Path) -> None:
    with Vault.open(tmp_path / "store") as vault:
        from refvault import Scope

        descriptor = vault.put(Scope("acme", "ana", "s1"), b"x" * 100_000, media_type="text/plain")
        blob = next(p for p in (tmp_path / "store").rglob("*") if p.is_file() and p.stat().st_size == 100_000)
        blob.write_bytes(b"y" * 100_000)
        _, key = create_key(vault, "acme", "ana")
        with TestClient(create_app(vault)) as http:
            sign_in(http, key)
            page = http.get("/console/runs")
            answer = http.post(f"/console/artifacts/{descriptor.artifact_id}/verify", data={"csrf": csrf_of(page.text)})
            assert "Verification failed: IntegrityError" in answer.text


def test_the_artifact_page_shows_lineage_ledger_and_trail(console: Console) -> None:
    ids = console.planted.ids
    page = console.get(f"/console/artifacts/{ids['run_output']}")
    assert "<svg" in page
    assert ids["run_input"] in page
    source = console.get(f"/console/artifacts/{ids['run_input']}")
    assert "Disclosure ledger" in source
    assert "<td>read</td>" in source or "<td>tool_read</td>" in source or "<td>stream</td>" in source
    assert "<td>put</td>" in source


def test_the_runs_view_lists_tool_calls_with_their_refs(console: Console) -> None:
    ids = console.planted.ids
    page = console.get("/console/runs", session="run-1")
    assert "Tool call <code>shout</code>" in page
    took = page.index("took:")
    assert ids["run_input"] in page[took : took + 400]
    assert ids["run_output"] in page[page.index("produced:") :]


def test_the_audit_page_checks_the_entries_it_shows_and_admins_the_whole_chain(console: Console) -> None:
    page = console.get("/console/audit", session="s1")
    assert "each recompute to their recorded hash" in page
    assert "Chain verified" not in page  # the tenant's whole chain is an admin's
    assert "<td>put</td>" in page
    _, admin = create_key(console.vault, "acme", "ana", admin=True)
    with TestClient(console.http.app) as http:
        sign_in(http, admin)
        assert "Chain verified" in http.get("/console/audit", params={"session": "s1"}).text


def test_a_key_limited_to_one_session_sees_only_that_session(console: Console) -> None:
    _, limited = create_key(console.vault, "acme", "ana", sessions=["s2"])
    ids = console.planted.ids
    with TestClient(console.http.app) as http:
        sign_in(http, limited)
        page = http.get("/console").text
        assert ids["other_session"] in page
        assert ids["text"] not in page
        assert ">s1<" not in page  # not even offered as a filter
        assert http.get(f"/console/artifacts/{ids['text']}").status_code == 404
        assert http.get(f"/console/artifacts/{ids['text']}", params={"session": "s1"}).status_code == 404
        assert http.get("/console/runs", params={"session": "run-1"}).status_code == 404
        assert http.get("/console", params={"session": "s1"}).status_code == 400
