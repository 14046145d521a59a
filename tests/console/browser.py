"""What the browser tests share: Debian's Chromium (never a downloaded build; the Playwright launch
arguments are the ``browser_type_launch_args`` fixture of tests/conftest.py), screenshots into
test-artifacts/, signing in through the real form (or handed the session it makes), and axe's check
of a page."""

from pathlib import Path

from tests.console.helpers import PASSWORD

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
DOCS = Path(__file__).resolve().parents[2] / "docs"


def artifact(name: str) -> Path:
    """Where the screenshot ``name`` goes, for a screenshot other than the whole page (an element's,
    the first screen's)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / f"{name}.png"


def shot(page, name: str) -> Path:
    """The whole page, into test-artifacts/``name``.png."""
    path = artifact(name)
    page.screenshot(path=str(path), full_page=True)
    return path


def sign_in(page, live_server, username: str, next_url: str = "/queue/"):
    """Through the real form, landing on ``next_url`` (the queue: where an on-call person lands)."""
    page.goto(f"{live_server.url}/login/?next={next_url}")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button:has-text('Sign in')")
    page.wait_for_url(f"{live_server.url}{next_url}")


def signed_in(page, live_server, user, next_url: str = "/queue/"):
    """``user`` signed in by password already, then ``next_url`` opened: for a test whose subject
    comes after signing in. The browser is handed the session the form would have made (Django's
    ``login`` with the password backend, which the test client's ``force_login`` calls), without
    the form's page, its redirect and its password hash (a third of a second); what the form does
    is tested where a test signs in through it (``sign_in``)."""
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user, backend="access.oidc.PasswordBackend")
    cookie = {"name": settings.SESSION_COOKIE_NAME, "value": client.cookies[settings.SESSION_COOKIE_NAME].value, "url": live_server.url}
    page.context.add_cookies([{**cookie, "httpOnly": settings.SESSION_COOKIE_HTTPONLY, "sameSite": settings.SESSION_COOKIE_SAMESITE}])
    page.goto(f"{live_server.url}{next_url}")
    assert page.url == f"{live_server.url}{next_url}", f"not signed in: {page.url}"


# What axe finds that fails a page.
SERIOUS = ("serious", "critical")


def _check(axe, page, name: str, mode: str) -> list[str]:
    if mode == "dark":
        assert page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches")
    # Open every collapsed section so what it hides is checked too.
    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    results = axe.run(page)
    if name in ("call", "overview", "reports"):
        shot(page, f"a11y-{name}-{mode}")
    out = []
    for v in results.response["violations"]:
        if v["impact"] in SERIOUS:
            nodes = "; ".join(n["target"][0] if isinstance(n["target"][0], str) else str(n["target"]) for n in v["nodes"][:5])
            out.append(f"{mode} {name} ({page.url}): {v['impact']} {v['id']}: {v['help']} at {nodes}")
    return out
