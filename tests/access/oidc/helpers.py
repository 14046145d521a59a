"""Signing in through the OpenID provider of tests/access/oidc/conftest.py, in a browser."""


def sso_sign_in(page, live_server, login: str, *, expect: str | None = "/queue/"):
    """Through the console's sign-in page and the provider's own sign-in form (any password)."""
    page.goto(f"{live_server.url}/login/")
    page.click("#sso-sign-in")
    page.wait_for_selector("input[name=login]")
    page.fill("input[name=login]", login)
    page.fill("input[name=password]", "any password")
    page.click("button.login-submit")
    if expect:
        page.wait_for_url(f"{live_server.url}{expect}")
