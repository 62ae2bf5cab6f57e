"""Headless Chromium: screenshots and DOM dumps of shop pages (tests, the README picture).

Uses the machine's own browser (Debian package ``chromium``; ``make setup`` installs it when run
as root), found on ``PATH`` as ``chromium``, ``chromium-browser``, ``google-chrome`` or
``chrome``. Each call is one browser process with a private, temporary profile.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_browser() -> str | None:
    """Path of a Chromium-family browser on ``PATH``, or None."""
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def _run(browser: str, args: list[str], timeout_s: float) -> subprocess.CompletedProcess[bytes]:
    with tempfile.TemporaryDirectory(prefix="ragen-webshop-browser-") as profile:
        flags = ["--headless", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--hide-scrollbars",
                 f"--user-data-dir={profile}"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            flags.append("--no-sandbox")  # Chromium refuses to start its sandbox as root
        return subprocess.run([browser, *flags, *args], capture_output=True, timeout=timeout_s, check=False)


def screenshot(url: str, out: str, *, width: int = 1200, height: int = 800, browser: str | None = None,
               timeout_s: float = 90.0) -> None:
    """Save a PNG of ``url`` at ``width`` x ``height`` to ``out``.

    Raises:
        RuntimeError: no browser, or it wrote no file (its last output lines are in the message).
    """
    browser = browser or find_browser()
    if browser is None:
        raise RuntimeError("no Chromium browser found (apt-get install chromium)")
    out = os.path.abspath(out)
    if os.path.exists(out):
        os.unlink(out)
    done = _run(browser, [f"--window-size={width},{height}", f"--screenshot={out}", url], timeout_s)
    if not os.path.exists(out):
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"{browser} wrote no screenshot of {url} (exit {done.returncode}): {' | '.join(tail)}")


def dump_dom(url: str, *, browser: str | None = None, timeout_s: float = 90.0) -> str:
    """The page's DOM after loading, serialised as HTML."""
    browser = browser or find_browser()
    if browser is None:
        raise RuntimeError("no Chromium browser found (apt-get install chromium)")
    return _run(browser, ["--dump-dom", url], timeout_s).stdout.decode(errors="replace")
