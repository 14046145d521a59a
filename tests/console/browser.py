"""What the console's browser tests share: Debian's Chromium (never a downloaded build; the
Playwright launch arguments are the ``browser_type_launch_args`` fixture of tests/console/conftest.py),
screenshots into test-artifacts/, and signing in through the real form."""

from pathlib import Path

from tests.console.conftest import PASSWORD

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
DOCS = Path(__file__).resolve().parents[2] / "docs"


def shot(page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def sign_in(page, live_server, username: str, next_url: str = "/queue/"):
    """Through the real form, landing on ``next_url`` (the queue: where an on-call person lands)."""
    page.goto(f"{live_server.url}/login/?next={next_url}")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button:has-text('Sign in')")
    page.wait_for_url(f"{live_server.url}{next_url}")
