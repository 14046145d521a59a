"""The reports screen and its CSV files against the known history (tests/reports/history.py):
every figure the screen shows and every CSV cell equals the hand count; who sees which table;
unmasked detail exports recorded; UTC day buckets whatever the reader's time zone."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from html.parser import HTMLParser

import pytest
from django.contrib.auth.models import Group

from access.models import AccessRecord
from console.models import UserPreference
from tests.console.helpers import client_for
from tests.reports.history import DAY0, EXPECTED, history_build

pytestmark = pytest.mark.django_db
PERIOD = "since=2026-11-02&until=2026-11-29"


class Tables(HTMLParser):
    """The cells of every table with an id: {id: [[text, ...], ...]}, a cell with data-seconds giving those."""

    def __init__(self, html: str):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._table = self._row = self._cell = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and a.get("id"):
            self._table = self.tables.setdefault(a["id"], [])
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = [a["data-seconds"]] if "data-seconds" in a else []
            self._fixed = "data-seconds" in a

    def handle_data(self, data):
        if self._cell is not None and not self._fixed:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row and self._table is not None:
                self._table.append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None


def _s(v) -> str:
    """A figure as the screen's data-seconds and the CSV write it."""
    return "" if v is None else str(v)


@pytest.fixture
def history(db, roles):
    history_build()


class Deferred(HTMLParser):
    """The tables the screen loads after the page: {element id: the address its hx-get asks}."""

    def __init__(self, html: str):
        super().__init__()
        self.found: dict[str, str] = {}
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "deferred" in (a.get("class") or "").split() and a.get("hx-get"):
            self.found[a["id"]] = a["hx-get"]


def _screen(client, query: str = PERIOD) -> tuple[str, dict[str, str]]:
    """The screen as a browser ends up with it: the page, and each table it loads after the page
    (hx-get on load) asked for as htmx does, in place of its placeholder. Also the loaded ids."""
    resp = client.get(f"/reports/?{query}")
    assert resp.status_code == 200
    html = resp.content.decode()
    deferred = Deferred(html).found
    for box, url in deferred.items():
        part = client.get(url, headers={"HX-Request": "true"})
        assert part.status_code == 200, url
        assert f'id="{box}"' in part.content.decode() and "aria-busy" not in part.content.decode()  # it replaces its placeholder whole
        html += part.content.decode()
    return html, deferred


def _csv(client, table: str, query: str = PERIOD) -> list[dict]:
    resp = client.get(f"/reports/{table}.csv?{query}")
    assert resp.status_code == 200, resp
    assert resp["Content-Type"] == "text/csv; charset=utf-8"
    return list(csv.DictReader(io.StringIO(b"".join(resp.streaming_content).decode("utf-8"))))


def test_the_screen_shows_every_figure_of_the_hand_count(history, manager):
    html, deferred = _screen(client_for(manager))
    assert set(deferred) == {"deferred-times-by-risk", "deferred-times-by-tool", "deferred-people"}
    assert all(f"?{PERIOD}" in url for url in deferred.values())  # each asks for the page's own period
    body = Tables(html).tables
    assert body["table-volume"][1:] == [[r["tool"], str(r["uncertain"]), str(r["recorded"]), str(r["per_thousand"])] for r in EXPECTED["volume"]]
    assert body["table-outcomes"][1:] == [[r["ended"], r["outcome"] or "—", str(r["calls"])] for r in EXPECTED["outcomes"]]
    for name, key in (("times-by-risk", "risk_class"), ("times-by-tool", "tool")):
        want = [[r[key], str(r["calls"]), str(r["touched"]), _s(r["touch_p50_s"]), _s(r["touch_p90_s"]), _s(r["touch_max_s"]), str(r["resolved"]), _s(r["resolve_p50_s"]), _s(r["resolve_p90_s"]), _s(r["resolve_max_s"])] for r in EXPECTED[name]]
        got = [[c.replace(".0", "") if c.endswith(".0") else c for c in row] for row in body[f"table-{name}"][1:]]
        assert got == [[w if w else "" for w in row] for row in want], name
    assert body["table-deadlines"][1:] == [[r["risk_class"], str(r["within"]), str(r["late"]), str(r["overdue"]), str(r["open_in_time"]), str(r["no_deadline"]), f"{r['missed_pct']}%"] for r in EXPECTED["deadlines"]]
    worst = body["table-worst"][1:]
    assert [(row[0].split(" in ")[0], row[4], float(row[5])) for row in worst] == [(c, s, float(p)) for c, s, p in EXPECTED["worst"]]
    assert body["table-trend"][1:] == [[d.strftime("%Y-%m-%d"), str(o), str(r), str(v)] for d, o, r, v in EXPECTED["trend"]]
    assert body["table-sla"][1:] == [[r["tool"], "45 min" if r["target_s"] else "its deadline", str(r["met"]), str(r["breached"]), str(r["pending"]), f"{r['breach_pct']}%"] for r in EXPECTED["sla"]]
    sla_days = {i: tuple(int(c) for c in row[1:4]) for i, row in enumerate(body["table-sla-trend"][1:]) if row[1:4] != ["0", "0", "0"]}
    assert sla_days == EXPECTED["sla-trend"]
    people = [[row[0], row[1], row[2], row[3], row[4]] for row in body["table-people"][1:]]
    assert people == [[r["person"], str(r["decided"]), str(r["claimed"]), f"{float(r['claimed_wait_p50_s'])}", f"{float(r['claimed_wait_max_s'])}"] for r in EXPECTED["people"]]
    assert '<svg xmlns="http://www.w3.org/2000/svg"' in html and "Uncertain calls per day, 2026-11-02 to 2026-11-29 (UTC days)" in html
    from recovery.models import UncertainCall

    assert f'href="/calls/{UncertainCall.objects.get(call_id="c-p5").id}/"' in html  # the worst are linked to their calls


def test_each_csv_is_the_hand_count(history, manager):
    c = client_for(manager)
    for name in ("volume", "outcomes", "times-by-risk", "times-by-tool", "deadlines", "sla", "people"):
        rows = _csv(c, name)
        want = [{k: _s(v) for k, v in r.items()} for r in EXPECTED[name]]
        got = [{k: (v[:-2] if v.endswith(".0") and k.endswith("_s") else v) for k, v in r.items()} for r in rows]
        assert got == want, name
    worst = _csv(c, "worst")
    assert [(r["call_id"], r["status"], float(r["past_deadline_s"])) for r in worst] == [(a, b, float(p)) for a, b, p in EXPECTED["worst"]]
    assert worst[0]["deadline"] == "2026-11-17T11:00:00Z" and worst[0]["resolved_at"] == ""  # ISO 8601 UTC
    trend = _csv(c, "trend")
    assert [(r["start"], r["opened"], r["resolved"], r["overdue_at_end"]) for r in trend] == [(d.strftime("%Y-%m-%dT%H:%M:%SZ"), str(o), str(r), str(v)) for d, o, r, v in EXPECTED["trend"]]


def test_the_detail_export_is_one_row_per_call_masked_for_a_manager(history, manager):
    rows = _csv(client_for(manager), "calls")
    assert [r["call_id"] for r in rows] == ["c-p1", "c-p2", "c-r1", "c-r2", "c-l1", "c-p3", "c-p4", "c-p5", "c-r3", "c-l2", "c-p6", "c-r4", "c-e2"]
    p1 = rows[0]
    assert p1["started_at"] == "2026-11-02T10:00:00Z" and p1["first_touch_at"] == "2026-11-02T10:10:00Z" and p1["resolved_at"] == "2026-11-02T10:20:00Z"
    assert (p1["ended"], p1["outcome"], p1["resolved_by"], p1["deadline_status"]) == ("by a person", "happened", "ann", "within")
    assert "ACCT-p1-9931" not in "".join(r["arguments"] for r in rows)  # the policy's sensitive field
    assert '"account": "[masked]"' in p1["arguments"]
    assert not AccessRecord.objects.exists()  # nothing unmasked was shown


def test_an_unmasked_detail_export_is_recorded_before_it_is_sent(history, admin_user):
    resp = client_for(admin_user).get(f"/reports/calls.csv?{PERIOD}")
    assert AccessRecord.objects.filter(front_end=AccessRecord.FrontEnd.EXPORT).count() == 13  # before a byte is read
    rows = list(csv.DictReader(io.StringIO(b"".join(resp.streaming_content).decode("utf-8"))))
    assert '"account": "ACCT-p1-9931"' in rows[0]["arguments"]
    records = AccessRecord.objects.filter(front_end=AccessRecord.FrontEnd.EXPORT)
    assert records.count() == 13  # one per run shown with its sensitive values
    assert {r.actor_name for r in records} == {"ada.admin"} and all(r.why.startswith("/reports/calls.csv?") for r in records)


def test_who_sees_the_reports(history, actors):
    for name in ("oncall", "compliance", "outsider"):
        assert client_for(actors[name]).get("/reports/").status_code == 403, name
        assert client_for(actors[name]).get("/reports/volume.csv").status_code == 403, name
    assert client_for(None).get("/reports/").status_code == 302
    for name in ("manager", "admin"):
        html, _ = _screen(client_for(actors[name]), "")
        assert 'id="table-people"' in html, name
        assert 'href="/reports/"' in html  # in the navigation
    for name in ("oncall", "compliance", "outsider"):
        for table in ("times-by-risk", "people"):
            assert client_for(actors[name]).get(f"/reports/{table}/", headers={"HX-Request": "true"}).status_code == 403, (name, table)


def test_the_people_table_is_for_managers_only(history, oncall):
    g = Group.objects.get(name="oncall")
    from access.roles import perm  # noqa: F401 - the permission by its codename
    from django.contrib.auth.models import Permission

    g.permissions.add(Permission.objects.get(codename="view_reports"))
    c = client_for(oncall)
    html, deferred = _screen(c)
    assert set(deferred) == {"deferred-times-by-risk", "deferred-times-by-tool"}
    assert 'id="table-people"' not in html and 'id="table-volume"' in html and 'id="table-times-by-tool"' in html
    assert c.get(f"/reports/people.csv?{PERIOD}").status_code == 403
    assert c.get(f"/reports/people/?{PERIOD}", headers={"HX-Request": "true"}).status_code == 403


@pytest.mark.parametrize(
    "query, words",
    [
        ("days=14", "Period: Select a valid choice"),
        ("since=2026-11-02", "give both since and until"),
        ("since=2026-11-09&until=2026-11-02", "is before the first"),
        ("since=nope&until=2026-11-02", "Or from (UTC date): Enter a valid date"),
        ("risk_class=scary", "Risk class: Select a valid choice"),
        ("team=nobody", "team &#x27;nobody&#x27; does not exist"),
    ],
)
def test_a_bad_period_or_filter_is_named(history, manager, query, words):
    c = client_for(manager)
    resp = c.get(f"/reports/?{query}")
    assert resp.status_code == 400 and words in resp.content.decode(), resp.content.decode()[-800:]
    assert c.get(f"/reports/volume.csv?{query}").status_code == 400
    assert c.get(f"/reports/times-by-tool/?{query}", headers={"HX-Request": "true"}).status_code == 400
    assert c.get("/reports/nothing.csv").status_code == 404
    assert c.get("/reports/volume/").status_code == 404  # the counting tables come with the page


def test_a_table_opened_without_htmx_is_a_page_of_its_own(history, manager):
    """The link beside each loading table (for a reader whose browser did not load it): the same
    rows on a page with the period, a way back to the whole report and the table's CSV."""
    c = client_for(manager)
    page = c.get(f"/reports/times-by-tool/?{PERIOD}")
    assert page.status_code == 200
    html = page.content.decode()
    assert "<h1>Time to first human touch and to resolution, by tool</h1>" in html
    assert "2026-11-02" in html and "2026-11-29" in html and f'href="/reports/?{PERIOD.replace("&", "&amp;")}"' in html
    assert f'href="/reports/times-by-tool.csv?{PERIOD.replace("&", "&amp;")}"' in html
    fragment = c.get(f"/reports/times-by-tool/?{PERIOD}", headers={"HX-Request": "true"}).content.decode()
    assert Tables(html).tables["table-times-by-tool"] == Tables(fragment).tables["table-times-by-tool"]
    assert "<h1>" not in fragment


def test_the_reader_s_time_zone_does_not_move_utc_day_buckets(history, manager, admin_user):
    """Europe/London leaves summer time on 2026-10-25 and New York on 2026-11-01, inside this period:
    the buckets are UTC days whoever reads them."""
    UserPreference.objects.create(user=manager, time_zone="America/New_York")
    query = "since=2026-10-20&until=2026-11-05"
    new_york = _csv(client_for(manager), "trend", query)
    utc = _csv(client_for(admin_user), "trend", query)
    assert new_york == utc
    assert [r["start"] for r in utc] == [(DAY0 - timedelta(days=13) + timedelta(days=i)).strftime("%Y-%m-%dT00:00:00Z") for i in range(17)]
    assert [r["opened"] for r in utc][-4:] == ["1", "1", "1", "1"]  # p1 p2 r1 r2 on Nov 2..5, UTC
    screen = Tables(client_for(manager).get(f"/reports/?{query}").content.decode()).tables["table-trend"]
    assert [row[0] for row in screen[1:]] == [r["start"][:10] for r in utc]
