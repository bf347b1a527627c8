"""The console in a real browser: headless Debian chromium against the real ``refvault serve``.

Each page is opened as a person would (signing in by key or link, typing in filters and the query box,
following links), checked for what it must show and must not run, and saved to ``build/screenshots/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from refvault import Scope, Vault
from refvault.keys import parse_token
from refvault.server.console import signin
from tests.server.console.browser import at_phone_width, console_errors, no_dialog, shot, wait_for
from tests.server.console.planted import CANARY, IMG, PARAM_IMG, SCRIPT, Planted, plant
from tests.servers import LiveServer, serve

pytestmark = pytest.mark.slow

BULK = 55  # artifacts of session "bulk": two pages of the list


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Planted]]:
    store = tmp_path_factory.mktemp("console-browser") / "store"
    with Vault.open(store) as vault:
        for n in range(BULK):  # older than the planted ones, which the first page of the list shows
            vault.put(Scope("acme", "ana", "bulk"), f"bulk {n}".encode(), media_type="text/plain", filename=f"b{n:02d}")
        planted = plant(vault)
    with serve(store) as server:
        yield server, planted


def _sign_in_with_key(page: WebDriver, server: LiveServer) -> None:
    page.get(server.url + "/console")
    key = wait_for(page, "#key")
    key.send_keys(server.token)
    key.send_keys(Keys.ENTER)
    wait_for(page, "table.artifacts")


def _link(server: LiveServer, next_path: str = "/console") -> str:
    answer = httpx.post(
        server.url + "/v1/console/sessions",
        json={"next": next_path},
        headers={"Authorization": f"Bearer {server.token}"},
    )
    assert answer.status_code == 201
    return str(answer.json()["url"])


def _clean(page: WebDriver) -> None:
    """Nothing ran: no dialog opened, no planted script set its flag, and the page logged no error (a CSP
    violation is one)."""
    no_dialog(page)
    assert page.execute_script("return window.__pwned === undefined")
    assert console_errors(page) == []  # type: ignore[arg-type]


def test_signing_in_with_a_key_shows_the_list(page: WebDriver, site: tuple[LiveServer, Planted]) -> None:
    server, planted = site
    page.get(server.url + "/console")
    assert "/console/login" in page.current_url
    shot(page, "console-login")
    _sign_in_with_key(page, server)
    assert planted.ids["text"] in page.page_source
    assert "acme / ana" in page.find_element(By.CSS_SELECTOR, ".who").text
    _clean(page)
    shot(page, "console-list")


def test_a_single_use_link_signs_in_once(page: WebDriver, site: tuple[LiveServer, Planted]) -> None:
    server, _ = site
    link = _link(server, "/console/runs")
    page.get(link)
    WebDriverWait(page, 5).until(lambda driver: driver.current_url.endswith("/console/runs"))
    assert page.find_element(By.TAG_NAME, "h1").text == "Runs"
    page.delete_all_cookies()
    page.get(link)
    assert "used already" in wait_for(page, ".error").text
    assert all("403" in message for message in console_errors(page))  # type: ignore[arg-type]
    page.get(server.url + "/console")
    assert "/console/login" in page.current_url
    _clean(page)


def test_an_expired_link_is_refused(page: WebDriver, site: tuple[LiveServer, Planted]) -> None:
    server, _ = site
    past = datetime.now(UTC) - timedelta(minutes=5)
    with Vault.open(server.store, clock=lambda: past) as vault:  # a link signed five minutes ago, by the same ring
        token = signin.issue_link(vault, str(parse_token(server.token)), "/console")
    page.get(f"{server.url}/console/link/{token}")
    assert "expired" in wait_for(page, ".error").text
    page.get(server.url + "/console")
    assert "/console/login" in page.current_url


def test_the_list_filters_and_pages(page: WebDriver, site: tuple[LiveServer, Planted]) -> None:
    server, planted = site
    _sign_in_with_key(page, server)
    Select(page.find_element(By.NAME, "session")).select_by_visible_text("bulk")
    page.find_element(By.CSS_SELECTOR, ".filters button").click()
    assert f"{BULK} artifacts" in wait_for(page, ".count").text
    first = {a.text for a in page.find_elements(By.CSS_SELECTOR, "a.id")}
    assert len(first) == 50
    assert planted.ids["text"] not in page.page_source
    page.find_element(By.CSS_SELECTOR, "a[rel=next]").click()
    second = {a.text for a in wait_for(page, "table.artifacts").find_elements(By.CSS_SELECTOR, "a.id")}
    assert len(second) == BULK - 50
    assert not first & second
    page.get(server.url + "/console")
    media = wait_for(page, "input[name=media]")
    media.send_keys("image/")
    media.send_keys(Keys.ENTER)
    wait_for(page, ".count")
    assert planted.ids["image"] in page.page_source
    assert planted.ids["text"] not in page.page_source
    _clean(page)


def test_the_record_table_queries_and_pages(page: WebDriver, site: tuple[LiveServer, Planted]) -> None:
    server, planted = site
    _sign_in_with_key(page, server)
    page.get(f"{server.url}/console/artifacts/{planted.ids['records']}")
    box = wait_for(page, "#where")
    box.send_keys('{"field": "severity", "op": "eq", "value": "high"}')
    page.find_element(By.CSS_SELECTOR, "form.query button").click()
    rows = wait_for(page, "table.records").find_elements(By.CSS_SELECTOR, "tbody tr")
    assert len(rows) == 25
    assert all(row.find_elements(By.TAG_NAME, "td")[1].text == "high" for row in rows)
    shot(page, "console-records")
    page.find_element(By.ID, "next-records").click()
    more = wait_for(page, "table.records").find_elements(By.CSS_SELECTOR, "tbody tr")
    assert len(more) == 5  # 30 "high" records in all
    assert more[0].find_element(By.TAG_NAME, "th").text == "51"
    _clean(page)


def test_an_image_renders_from_its_thumbnail_and_never_as_base64(
    page: WebDriver, site: tuple[LiveServer, Planted]
) -> None:
    import base64

    server, planted = site
    _sign_in_with_key(page, server)
    page.get(f"{server.url}/console/artifacts/{planted.ids['image']}")
    image = wait_for(page, "#thumbnail")
    assert page.execute_script("return arguments[0].complete && arguments[0].naturalWidth", image) > 0
    source = page.page_source
    assert base64.b64encode(planted.image).decode()[:40] not in source
    assert "data:image" not in source
    shot(page, "console-artifact")
    image.click()
    full = wait_for(page, "#full-image")
    assert page.current_url.split("?")[0].endswith("/full")
    assert page.execute_script("return arguments[0].complete && arguments[0].naturalWidth", full) == 120
    _clean(page)


@pytest.mark.parametrize("name", ["text", "json", "svg", "html", "odd_type", "records"])
def test_planted_payloads_stay_inert_and_visible_as_text(
    page: WebDriver, site: tuple[LiveServer, Planted], name: str
) -> None:
    server, planted = site
    _sign_in_with_key(page, server)
    _clean(page)  # the list shows the hostile file name
    assert f"notes{IMG}.txt" in page.find_element(By.TAG_NAME, "main").text
    page.get(f"{server.url}/console/artifacts/{planted.ids[name]}" + ("?line=400" if name == "text" else ""))
    wait_for(page, "h1")
    _clean(page)
    shown = page.find_element(By.TAG_NAME, "main").text
    expected = {
        "text": SCRIPT,
        "json": SCRIPT,
        "svg": "<script>window.__pwned=1",
        "html": "<script>window.__pwned=1",
        "odd_type": PARAM_IMG,
        "records": IMG,
    }[name]
    assert expected in shown
    if name in ("json", "text"):
        for _ in range(8):  # open every branch, outermost first: that runs nothing either
            closed = [
                summary
                for summary in page.find_elements(By.CSS_SELECTOR, ".tree details:not([open]) > summary")
                if summary.is_displayed()
            ]
            for summary in closed:
                summary.click()
        assert not page.find_elements(By.CSS_SELECTOR, ".tree details:not([open])")
        _clean(page)
    shot(page, f"console-inert-{name}")


def test_a_sealed_artifact_never_reaches_the_dom(page: WebDriver, site: tuple[LiveServer, Planted]) -> None:
    server, planted = site
    _sign_in_with_key(page, server)
    assert CANARY not in page.page_source
    page.get(f"{server.url}/console/artifacts/{planted.ids['sealed']}")
    assert "Sealed" in wait_for(page, ".sealed").text
    assert CANARY not in page.page_source
    assert not page.find_elements(By.XPATH, "//button[text()='Download']")
    page.find_element(By.XPATH, "//button[text()='Verify now']").click()
    assert "Verified now" in wait_for(page, "#verified").text
    assert CANARY not in page.page_source
    for path in ("/console/runs?session=s1", "/console/audit?session=s1"):
        page.get(server.url + path)
        wait_for(page, "h1")
        assert CANARY not in page.page_source
    _clean(page)


def test_another_tenants_id_gets_the_absent_page(page: WebDriver, site: tuple[LiveServer, Planted]) -> None:
    server, planted = site
    _sign_in_with_key(page, server)
    page.get(f"{server.url}/console/artifacts/art_{'q' * 28}")
    absent = wait_for(page, "main").text
    for name in ("foreign", "other_user", "denied"):
        page.get(f"{server.url}/console/artifacts/{planted.ids[name]}")
        assert wait_for(page, "main").text == absent
    assert "no artifact with this id" in absent


def test_a_form_without_its_csrf_token_is_refused(page: WebDriver, site: tuple[LiveServer, Planted]) -> None:
    server, planted = site
    _sign_in_with_key(page, server)
    page.get(f"{server.url}/console/artifacts/{planted.ids['text']}")
    wait_for(page, "h1")
    page.execute_script("document.querySelectorAll('input[name=csrf]').forEach(e => e.remove())")
    page.find_element(By.XPATH, "//button[text()='Verify now']").click()
    assert wait_for(page, "h1").text == "Refused"
    page.get(server.url + "/console")
    page.execute_script("document.querySelector('form.signout input[name=csrf]').value = 'rvc1.forged'")
    page.find_element(By.CSS_SELECTOR, "form.signout button").click()
    assert wait_for(page, "h1").text == "Refused"
    page.get(server.url + "/console")
    assert wait_for(page, "h1").text == "Artifacts"  # still signed in: nothing changed


def test_signing_out_ends_the_session(page: WebDriver, site: tuple[LiveServer, Planted]) -> None:
    server, _ = site
    _sign_in_with_key(page, server)
    page.find_element(By.CSS_SELECTOR, "form.signout button").click()
    wait_for(page, "#key")
    page.get(server.url + "/console")
    assert "/console/login" in page.current_url


def test_runs_audit_and_lineage_pages(page: WebDriver, site: tuple[LiveServer, Planted]) -> None:
    server, planted = site
    _sign_in_with_key(page, server)
    page.get(server.url + "/console/runs?session=run-1")
    step = wait_for(page, ".step-tool_call")
    assert "shout" in step.text
    assert planted.ids["run_input"] in step.text
    assert planted.ids["run_output"] in step.text
    shot(page, "console-runs")
    page.get(f"{server.url}/console/artifacts/{planted.ids['run_output']}")
    graph = wait_for(page, "svg.lineage")
    assert planted.ids["run_input"][:34] in graph.text
    _clean(page)
    page.get(server.url + "/console/audit?session=s1")
    assert "each recompute to their recorded hash" in wait_for(page, "#chain").text
    shot(page, "console-audit")
    _clean(page)


def test_the_console_is_usable_by_keyboard_and_at_phone_width(
    page: WebDriver, site: tuple[LiveServer, Planted]
) -> None:
    server, planted = site
    page.get(server.url + "/console/login")
    wait_for(page, "#key")
    assert page.switch_to.active_element.get_attribute("id") == "key"  # autofocus: type at once
    page.switch_to.active_element.send_keys(server.token + Keys.ENTER)
    wait_for(page, "table.artifacts")
    page.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    assert page.switch_to.active_element.text == "Skip to content"
    focused = []
    for _ in range(6):
        page.switch_to.active_element.send_keys(Keys.TAB)
        focused.append(page.switch_to.active_element.text)
    assert {"Artifacts", "Runs", "Audit log"} <= set(focused)
    for path in ("/console", f"/console/artifacts/{planted.ids['text']}", "/console/runs?session=run-1"):
        with at_phone_width(page):
            page.get(server.url + path)
            wait_for(page, "h1")
            overflow = page.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{path} scrolls sideways at phone width by {overflow}px"
            if path == "/console":
                shot(page, "console-list-phone")
    _clean(page)
