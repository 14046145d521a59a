"""Text that cannot lie: Unicode's bidirectional controls in anything a person or an agent wrote
are shown as their code points on every page and in the evidence report, never applied."""

from evidence.report import bidi_visible, report_html
from tests.console.helpers import client_for

RLO, PDF = "\u202e", "\u202c"
NOTE = f"account {RLO}1234{PDF}"


def test_a_note_with_an_override_is_shown_as_its_code_points_on_the_call_and_run_screens(oncall, conflict_call):
    client = client_for(oncall)
    assert client.post(f"/calls/{conflict_call.pk}/note/", {"text": NOTE}).status_code == 302
    for url in (f"/calls/{conflict_call.pk}/", f"/runs/{conflict_call.run_id}/"):
        page = client.get(url).content.decode()
        assert RLO not in page and PDF not in page, url
        assert "account &lt;U+202E&gt;1234&lt;U+202C&gt;" in page, url
    # The event itself keeps what was written: the JSON is data.
    from runs.models import Event

    seq = Event.objects.filter(run_id=conflict_call.run_id, type="operator_note").latest("seq").seq
    assert RLO in client.get(f"/runs/{conflict_call.run_id}/events/{seq}.json").content.decode("utf-8")


def test_every_bidi_control_is_named_and_other_text_is_left_alone():
    controls = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
    shown = bidi_visible(f"a{controls}b")
    assert shown.count("&lt;U+") == len(controls) and "&lt;U+061C&gt;" in shown and "&lt;U+2069&gt;" in shown
    plain = "Zürich – 840.00 £ עברית"
    assert bidi_visible(plain) is plain


def test_the_evidence_report_shows_bidi_controls_as_code_points():
    manifest = {"run_id": f"run-{RLO}x"}
    lines = [{"seq": 1, "ts": "2026-01-01T00:00:00Z", "type": "operator_note", "payload": {"text": NOTE}, "hash": "0" * 64}]
    html = report_html(manifest=manifest, lines=lines, access=[], result="verified")
    assert RLO not in html and PDF not in html
    assert "account &lt;U+202E&gt;1234&lt;U+202C&gt;" in html and "run-&lt;U+202E&gt;x" in html
