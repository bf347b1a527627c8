"""Helpers of the console's browser tests: screenshots, open dialogs, console errors, waiting, phone width.

The driver comes from the ``browser``/``page`` fixtures in ``conftest.py``: Debian's chromium through Debian's
chromium-driver (``make browser`` installs both), headless, 1280x800.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from selenium.common.exceptions import NoAlertPresentException, TimeoutException, WebDriverException
from selenium.webdriver.chromium.webdriver import ChromiumDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

__all__ = [
    "CHROMEDRIVER",
    "CHROMIUM",
    "DESKTOP",
    "PHONE",
    "SCREENSHOTS",
    "at_phone_width",
    "console_errors",
    "no_dialog",
    "reset",
    "shot",
    "wait_for",
]

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ROOT = Path(__file__).resolve().parents[3]
SCREENSHOTS = ROOT / "build" / "screenshots"  # build/ is in .gitignore
DESKTOP = (1280, 800)
PHONE = (390, 844)

_FAVICON_404 = re.compile(r"https?://[^/\s]+/favicon\.ico - Failed to load resource: .* 404\b")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def reset(driver: ChromiumDriver) -> None:
    """What the ``page`` fixture does before each test: dismiss a dialog left open, empty the storage of the
    page it is on, forget the cookies of every site, go to ``about:blank`` at 1280x800 and empty the log."""
    with contextlib.suppress(NoAlertPresentException):
        driver.switch_to.alert.dismiss()
    if driver.current_url.startswith(("http://", "https://")):
        with contextlib.suppress(WebDriverException):  # a sandboxed document (an artifact's own bytes) has none
            driver.execute_script("localStorage.clear(); sessionStorage.clear();")
    driver.execute_cdp_cmd("Network.clearBrowserCookies", {})  # WebDriver's delete_all_cookies: this site's only
    driver.get("about:blank")
    driver.set_window_size(*DESKTOP)
    driver.get_log("browser")  # type: ignore[no-untyped-call]


def shot(driver: WebDriver, name: str) -> Path:
    """Save what the browser shows as ``build/screenshots/<name>.png`` (replacing one of that name); its path."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"a screenshot name is letters, digits, '.', '_' and '-' (not starting with one): {name!r}")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    if not driver.save_screenshot(str(path)):
        raise AssertionError(f"the browser did not save a screenshot to {path}")
    return path


def no_dialog(driver: WebDriver) -> None:
    """Assert that no JavaScript alert, confirm or prompt is open. One that is gets dismissed, so the browser can
    go on, and the assertion names its text."""
    try:
        alert = driver.switch_to.alert
    except NoAlertPresentException:
        return
    text = alert.text
    alert.dismiss()
    raise AssertionError(f"a JavaScript dialog was open on {driver.current_url}: {text!r}")


def console_errors(driver: ChromiumDriver) -> list[str]:
    """The SEVERE messages of the browser's log since the last call (reading the log empties it): uncaught
    exceptions, ``console.error`` and failed loads, each as Chromium words it (source, position, text).

    Left out: a 404 of ``/favicon.ico`` at a site's root, which Chromium asks for by itself on a page that names
    no icon (a JSON response, say). Every other failed load is kept, an icon the page names elsewhere too."""
    entries: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    return [
        entry["message"] for entry in entries if entry["level"] == "SEVERE" and not _FAVICON_404.match(entry["message"])
    ]


def wait_for(driver: WebDriver, css: str, timeout: float = 5) -> WebElement:
    """The first element matching the CSS selector ``css`` once it is visible; fails after ``timeout`` seconds."""
    try:
        element: WebElement = WebDriverWait(driver, timeout).until(
            expected_conditions.visibility_of_element_located((By.CSS_SELECTOR, css))
        )
    except TimeoutException:
        raise AssertionError(f"no visible {css!r} on {driver.current_url} within {timeout} s") from None
    return element


@contextlib.contextmanager
def at_phone_width(driver: WebDriver) -> Iterator[WebDriver]:
    """Inside the block the window is a phone's, 390x844; afterwards it is back to the size it had."""
    before = driver.get_window_size()
    driver.set_window_size(*PHONE)
    try:
        yield driver
    finally:
        driver.set_window_size(before["width"], before["height"])
