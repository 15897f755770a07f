"""The console tests' browser (:func:`support.browser.chromium`), its console errors, and
screenshots: into docs/console/ when ``ROCKETBOX_UPDATE_SCREENSHOTS=1`` (how the README's
pictures are refreshed), otherwise into a temporary folder, so a test run never changes
tracked files.

:func:`console_errors` returns the browser console's SEVERE entries since the
last call.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from tests.support.browser import chromium

__all__ = ["chromium", "console_errors", "screenshot"]

REPO = Path(__file__).resolve().parents[3]
SHOTS = (REPO / "docs" / "console" if os.environ.get("ROCKETBOX_UPDATE_SCREENSHOTS") == "1"
         else Path(tempfile.gettempdir()) / "rocketbox-console-shots")


def console_errors(driver: Any) -> list[str]:
    """The browser console's errors (SEVERE) since the last call."""
    return [entry["message"] for entry in driver.get_log("browser")
            if entry.get("level") == "SEVERE"]


def screenshot(driver: Any, name: str) -> Path:
    """The whole page (up to 2400 px tall) as NAME.png in :data:`SHOTS`."""
    height = int(driver.execute_script(
        "return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)"))
    metrics = {"width": 1280, "height": min(max(height, 600), 2400), "deviceScaleFactor": 1,
               "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    try:
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{name}.png"
        driver.save_screenshot(str(path))
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return path
