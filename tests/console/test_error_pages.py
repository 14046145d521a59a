"""The console's own errors are pages in its layout with a way back, whatever DEBUG is, and every
dynamic answer carries the security headers (CSP, no-store, nosniff, Referrer-Policy)."""

from __future__ import annotations

import pytest

from tests.console.helpers import client_for


@pytest.mark.parametrize("debug", [True, False])
def test_a_missing_run_shows_the_consoles_404_page_even_with_debug_on(settings, oncall, debug):
    settings.DEBUG = debug
    r = client_for(oncall).get("/runs/run-nobody-made/")
    body = r.content.decode()
    assert r.status_code == 404 and r["Content-Type"].startswith("text/html")
    assert "<h1>Not found</h1>" in body and "run-nobody-made" in body
    assert 'href="/">Back to the console</a>' in body
    assert "Technical details" not in body and "Django tried these URL patterns" not in body


def test_a_bad_parameter_shows_the_400_page_naming_it(oncall, v1_runs):
    r = client_for(oncall).get(f"/runs/{v1_runs[0]}/", {"before": "soon"})
    body = r.content.decode()
    assert r.status_code == 400 and r["Content-Type"].startswith("text/html")
    assert "<h1>Bad request</h1>" in body and "before must be a whole number, got &#x27;soon&#x27;" in body
    assert 'href="/">Back to the console</a>' in body


def test_an_unknown_address_with_debug_off_shows_the_404_page(client, settings):
    settings.DEBUG = False
    r = client.get("/no/such/page/")
    assert r.status_code == 404 and "There is nothing at this address." in r.content.decode()


def test_console_pages_carry_no_store_and_a_strict_policy(compliance, v1_runs):
    c = client_for(compliance)
    for path in ("/decisions/", f"/runs/{v1_runs[0]}/", f"/runs/{v1_runs[0]}/export.jsonl", "/login/"):
        r = c.get(path)
        assert r.status_code == 200, path
        assert "no-store" in r["Cache-Control"], path
        csp = r["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "style-src 'self'" in csp and "unsafe-inline" not in csp, path
        assert r["X-Content-Type-Options"] == "nosniff" and r["Referrer-Policy"] == "same-origin", path


def test_the_layout_links_a_favicon_that_is_served(client, oncall, live_server):
    import urllib.request

    html = client_for(oncall).get("/queue/").content.decode()
    assert '<link rel="icon" href="/static/console/favicon.' in html
    href = html.split('<link rel="icon" href="', 1)[1].split('"', 1)[0]
    with urllib.request.urlopen(live_server.url + href) as r:
        assert r.headers["Content-Type"] == "image/svg+xml" and r.read().startswith(b"<svg")
