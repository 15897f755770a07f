"""A headless Debian Chromium driven by Selenium, for the tests that need a real browser.

:func:`chromium` starts ``/usr/bin/chromium`` through ``/usr/bin/chromedriver``
with a fresh profile and every background service off; it skips (fails in
CI) when either binary is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["CHROMEDRIVER", "CHROMIUM", "chromium"]

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def _missing(reason: str) -> None:
    if os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}:
        pytest.fail(f"{reason} (CI=true, so a missing browser is a failure)", pytrace=False)
    pytest.skip(reason)


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed (pip install 'rocketbox[dev]')")
    for binary in (CHROMIUM, CHROMEDRIVER):
        if not binary.exists():
            _missing(f"{binary} is missing (apt-get install chromium chromium-driver)")
    profile = tempfile.mkdtemp(prefix="rocketbox-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1280,900",
                 f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        driver.set_page_load_timeout(30)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
