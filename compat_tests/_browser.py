"""Headless Debian chromium driven by selenium: the console's tests and bench/console.py.

``make tools`` installs ``chromium`` and ``chromium-driver`` from apt; a missing
one is an error naming it (the project's own set-up installs both), never a skip.
"""

from __future__ import annotations

import shutil

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def new_driver(page_load_timeout_s: float = 30.0) -> webdriver.Chrome:
    for path, what in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromedriver")):
        if not shutil.which(path):
            raise RuntimeError(f"{what} is not installed ({path}): `make tools` installs it "
                               "from apt")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900",
                "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(page_load_timeout_s)
    return driver
