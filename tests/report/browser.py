"""Headless Chromium for the report tests: Debian's `chromium` driven through `chromium-driver` by
Selenium. No browser is downloaded; `available()` says why one cannot be used."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1400,1000")


def _binary(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
        if found:
            return found
    return None


def available() -> str | None:
    """None when a browser can be driven, else the reason it cannot."""
    import importlib.util

    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (pip install -e '.[test]')"
    if _binary("chromium", "chromium-browser") is None:
        return "no Chromium (apt-get install -y chromium chromium-driver; .ci/run does it)"
    if _binary("chromedriver") is None:
        return "no chromedriver (apt-get install -y chromium-driver)"
    return None


class Browser:
    """One headless Chromium with an empty profile; console messages are collected per page."""

    def __init__(self):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        self.profile = tempfile.mkdtemp(prefix="report-chromium-")
        opts = webdriver.ChromeOptions()
        opts.binary_location = _binary("chromium", "chromium-browser")
        for flag in CHROMIUM_FLAGS:
            opts.add_argument(flag)
        opts.add_argument(f"--user-data-dir={self.profile}")
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(_binary("chromedriver")), options=opts)

    def open(self, path: Path) -> list[dict]:
        """Load a local file, wait until its scripts ran, return the console entries."""
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver.get(path.resolve().as_uri())
        WebDriverWait(self.driver, 60).until(
            lambda d: d.execute_script("return document.readyState") == "complete")
        return self.driver.get_log("browser")

    def close(self) -> None:
        self.driver.quit()
        shutil.rmtree(self.profile, ignore_errors=True)
