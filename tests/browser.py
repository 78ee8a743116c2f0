"""Headless Chromium for the HTML report tests: on PATH, or the test is skipped (CI installs it: .ci/run).

chromium_command(profile)          the browser and its flags, a fresh profile folder per test
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]  # fmt: skip


def chromium_command(profile: Path) -> list[str]:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run installs it)")
    return [found, *CHROMIUM_FLAGS, f"--user-data-dir={profile}"]
