"""Fixtures of the console's browser tests.

* ``browser`` (session): one headless Debian chromium driven through Debian's chromium-driver, 1280x800, a
  fresh profile, the browser's console log kept (``console_errors`` reads it). Missing binaries fail the
  tests with what to install (``make browser``); nothing is skipped.
* ``page`` (per test): that browser with its cookies gone, its window back at 1280x800, on ``about:blank``,
  any dialog left open dismissed, the storage of the page it was on and its log emptied (``browser.reset``).
* ``console_server`` (per module): the real ``refvault serve`` on a free loopback port
  (``tests.servers.serve``), with its three API keys; the console is at ``<url>/console``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tests.server.console.browser import CHROMEDRIVER, CHROMIUM, DESKTOP, reset
from tests.servers import LiveServer, serve

ARGUMENTS = (
    "--headless=new",
    "--no-sandbox",  # the tests run as root on CI
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.is_file()]
    if missing:
        pytest.fail(
            f"the browser tests need {' and '.join(missing)}: run `make browser`, or install the Debian packages "
            "chromium and chromium-driver (apt-get install -y chromium chromium-driver)",
            pytrace=False,
        )
    home = tmp_path_factory.mktemp("browser")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ARGUMENTS:
        options.add_argument(argument)
    options.add_argument(f"--user-data-dir={home / 'profile'}")
    options.add_argument(f"--window-size={DESKTOP[0]},{DESKTOP[1]}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    options.unhandled_prompt_behavior = "ignore"  # a dialog stays open until no_dialog (or a test) handles it
    # An explicit driver path: Selenium Manager, which would look for (and download) a driver, never runs.
    service = Service(str(CHROMEDRIVER), log_output=str(home / "chromedriver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        driver.set_window_size(*DESKTOP)
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(browser: webdriver.Chrome) -> webdriver.Chrome:
    reset(browser)
    return browser


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with serve(tmp_path_factory.mktemp("console") / "store") as server:
        yield server
