"""The browser harness works against the real ``refvault serve`` before there is a console: each helper is shown
passing where it should and failing where it should."""

from __future__ import annotations

import json
import struct
from urllib.parse import quote

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from tests.server.console.browser import (
    DESKTOP,
    PHONE,
    SCREENSHOTS,
    at_phone_width,
    console_errors,
    no_dialog,
    reset,
    shot,
    wait_for,
)
from tests.servers import LiveServer


def html(body: str) -> str:
    """A ``data:`` URL of an HTML page (the browser goes there itself, so Chromium lets it)."""
    return "data:text/html;charset=utf-8," + quote(f"<!doctype html><title>t</title><body>{body}</body>")


def test_the_browser_reads_the_health_json_of_the_live_server(page: webdriver.Chrome, console_server: LiveServer):
    page.get(console_server.url + "/v1/health")
    shown = json.loads(page.find_element(By.TAG_NAME, "body").text)
    assert shown == httpx.get(console_server.url + "/v1/health").json()
    assert console_errors(page) == []


@pytest.mark.parametrize("call", ["alert('boom')", "confirm('boom?')", "prompt('boom:')"])
def test_no_dialog_fails_while_a_dialog_is_open_and_dismisses_it(page: webdriver.Chrome, call: str):
    page.get(html(f"<script>setTimeout(() => {call}, 0)</script>"))
    WebDriverWait(page, 5).until(expected_conditions.alert_is_present())
    with pytest.raises(AssertionError, match="boom"):
        no_dialog(page)
    no_dialog(page)  # dismissed by the failure above, so the browser goes on
    assert page.execute_script("return 1 + 1") == 2


def test_no_dialog_passes_on_a_page_without_one(page: webdriver.Chrome):
    page.get(html("<p>quiet</p>"))
    no_dialog(page)


def test_an_uncaught_error_and_console_error_show_in_console_errors(page: webdriver.Chrome):
    page.get(html("<script>console.error('logged-oops'); throw new Error('thrown-kaboom')</script>"))
    errors = console_errors(page)
    assert any("thrown-kaboom" in message for message in errors), errors
    assert any("logged-oops" in message for message in errors), errors
    assert console_errors(page) == []  # reading the log empties it


def test_console_errors_keep_a_failed_load_but_not_the_automatic_favicon_request(
    page: webdriver.Chrome, console_server: LiveServer
):
    page.get(console_server.url + "/v1/health")  # a JSON page names no icon: Chromium asks for /favicon.ico
    assert console_errors(page) == []
    page.execute_async_script(  # an icon the page itself names, missing
        "const done = arguments[0], icon = document.createElement('img');"
        "icon.onerror = () => done(); icon.src = '/console-missing.png'; document.body.append(icon);"
    )
    errors = console_errors(page)
    assert any("/console-missing.png" in message and "404" in message for message in errors), errors


def test_console_errors_leave_out_messages_below_severe(page: webdriver.Chrome):
    page.get(html("<script>console.log('just-info'); console.warn('just-a-warning')</script>"))
    assert console_errors(page) == []


def test_shot_saves_a_png_of_the_whole_window_under_build_screenshots(page: webdriver.Chrome):
    page.get(html("<h1 style='color: teal'>harness</h1>"))
    path = shot(page, "harness-shot")
    assert path == SCREENSHOTS / "harness-shot.png"
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    scale = page.execute_script("return window.devicePixelRatio")
    assert (width, height) == (
        round(page.execute_script("return window.innerWidth") * scale),
        round(page.execute_script("return window.innerHeight") * scale),
    )


def test_shot_refuses_a_name_that_is_a_path(page: webdriver.Chrome):
    with pytest.raises(ValueError, match="screenshot name"):
        shot(page, "../outside")


def test_wait_for_returns_an_element_that_appears_late_and_fails_on_one_that_never_does(page: webdriver.Chrome):
    page.get(html("<script>setTimeout(() => document.body.innerHTML = '<p id=late>here</p>', 300)</script>"))
    assert wait_for(page, "#late").text == "here"
    with pytest.raises(AssertionError, match="#never"):
        wait_for(page, "#never", timeout=0.3)


def test_wait_for_does_not_return_an_element_that_stays_hidden(page: webdriver.Chrome):
    page.get(html("<p id=hidden style='display: none'>hidden</p>"))
    with pytest.raises(AssertionError, match="#hidden"):
        wait_for(page, "#hidden", timeout=0.3)


def test_at_phone_width_narrows_the_viewport_then_restores_the_window(page: webdriver.Chrome):
    page.get(html("<p>narrow?</p>"))
    assert page.execute_script("return window.innerWidth") == DESKTOP[0]
    with at_phone_width(page):
        assert page.execute_script("return window.innerWidth") == PHONE[0]
        assert page.execute_script("return matchMedia('(max-width: 400px)').matches") is True
    assert page.get_window_size() == {"width": DESKTOP[0], "height": DESKTOP[1]}


def test_reset_forgets_cookies_and_storage_of_the_server_and_leaves_a_blank_desktop_window(
    page: webdriver.Chrome, console_server: LiveServer
):
    page.get(console_server.url + "/v1/health")
    page.add_cookie({"name": "session", "value": "left-over"})
    page.execute_script("localStorage.setItem('key', 'left-over'); sessionStorage.setItem('key', 'left-over')")
    page.set_window_size(*PHONE)
    page.execute_script("console.error('left-over error')")
    reset(page)
    assert page.current_url == "about:blank"
    assert page.get_window_size() == {"width": DESKTOP[0], "height": DESKTOP[1]}
    assert console_errors(page) == []
    page.get(console_server.url + "/v1/health")
    assert page.get_cookies() == []
    assert page.execute_script("return [localStorage.length, sessionStorage.length]") == [0, 0]
