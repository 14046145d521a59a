"""No input ends in a 500: every console URL (from the URL resolver) and every API operation (from
the OpenAPI document) gets NUL bytes, lone surrogates, oversized numbers and 10 KB strings in each of
its path parameters, query parameters, form fields and JSON fields, signed in as an administrator or
with a token holding every scope. A new endpoint is covered without editing this module. A console
URL gets each hostile value in the names its handling asks the request for (recorded as it runs),
and once in all the names it only carries along as a whole.

One request per (endpoint, parameter, hostile value); each test (the API's one, the console's one per
URL, so the suite's workers share the sweep) collects every failure and reports them together, so
one run shows the whole list."""

from __future__ import annotations

import inspect
import json
import re
from urllib.parse import quote

import pytest
from django.http import QueryDict
from django.test import Client
from django.urls import URLPattern, get_resolver

from access.tokens import token_create
from api.urls import api
from tests.recovery.helpers import _uncertain_call

pytestmark = pytest.mark.django_db

BIG = "18446744073709551617" + "0" * 10
LONG = "A" * 10_240
# (label, percent-encoded text for a URL or form, raw JSON text for a body)
HOSTILE = [
    ("NUL", "a%00b", '"a\\u0000b"'),
    ("lone surrogate", "%ED%A0%80", '"\\ud800"'),
    ("oversized number", BIG, BIG),
    ("10 KB string", LONG, json.dumps(LONG)),
]


@pytest.fixture
def seeded(db):
    call = _uncertain_call("run-hostile", "acme")
    _, secret = token_create(name="every scope", scopes=["append", "read", "decide"])
    return call, secret


def _failures(responses) -> list[str]:
    bad = []
    for where, label, r in responses:
        if r.status_code >= 500:
            bad.append(f"{where} with {label}: {r.status_code}")
        elif label == "NUL" and r.status_code not in (400, 401, 403, 404, 405, 422):
            bad.append(f"{where} with NUL: {r.status_code}, not refused")
    return bad


# --- the API, from its OpenAPI document -------------------------------------------------------------


def _api_operations():
    doc = api.get_openapi_schema()
    components = doc["components"]["schemas"]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            params = [(p["in"], p["name"]) for p in op.get("parameters", []) if p["in"] in ("path", "query")]
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body and "$ref" in body:
                body = components[body["$ref"].rsplit("/", 1)[-1]]
            fields = list((body or {}).get("properties", {}))
            yield method, path, params, fields


def _api_path(path: str, samples: dict, override: tuple[str, str] | None = None) -> str:
    def sub(m):
        name = m.group(1)
        return override[1] if override and override[0] == name else quote(str(samples.get(name, "x")))

    return re.sub(r"\{(\w+)\}", sub, path)


def test_no_api_operation_answers_a_hostile_value_with_a_5xx(seeded):
    call, secret = seeded
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    samples = {"run_id": "run-hostile", "pk": call.pk, "tool": "post_correction"}
    seen = []
    for method, path, params, fields in _api_operations():
        send = getattr(client, method)
        for label, in_url, in_json in HOSTILE:
            for where, name in params:
                if where == "path":
                    url, query = _api_path(path, samples, (name, in_url)), ""
                else:
                    url, query = _api_path(path, samples), f"{name}={in_url}"
                body = "{}" if method != "get" else None
                kwargs = {"content_type": "application/json"} if body else {}
                r = send(url, body, QUERY_STRING=query, **kwargs) if body else send(url, QUERY_STRING=query)
                seen.append((f"{method.upper()} {path} {where} {name}", label, r))
            for name in fields:
                r = send(_api_path(path, samples), '{"%s": %s}' % (name, in_json), content_type="application/json")
                seen.append((f"{method.upper()} {path} body field {name}", label, r))
    assert len(seen) > 100
    assert _failures(seen) == []


# --- the console, from the URL resolver --------------------------------------------------------------


def _console_patterns():
    resolver = get_resolver()
    for top in resolver.url_patterns:
        if getattr(top, "namespace", None) != "console":
            continue
        for p in top.url_patterns:
            if isinstance(p, URLPattern):
                yield str(p.pattern), p.callback


def _console_params() -> list[str]:
    """Every query parameter and form field name the console reads: its forms' fields and the names
    its views read from the request by hand."""
    from console import forms, views

    names = set()
    for _, cls in inspect.getmembers(forms, inspect.isclass):
        names |= set(getattr(cls, "base_fields", {}))
    source = inspect.getsource(views)
    names |= set(re.findall(r'(?:GET|POST)\.get\(\s*"(\w+)"', source)) | set(re.findall(r'_int\(request, "(\w+)"', source))
    return sorted(names)


def _console_path(route: str, samples: dict, override: tuple[str, str] | None = None) -> str:
    def sub(m):
        name = m.group(2)
        return override[1] if override and override[0] == name else quote(str(samples[name]))

    return "/" + re.sub(r"<(\w+):(\w+)>", sub, route)


CONSOLE_ROUTES = [route for route, _ in _console_patterns() if not route.startswith("logout")]


def test_the_console_sweep_finds_the_console_urls():
    # The sweep below is one test per URL (so the suite's workers share it): an empty list of URLs
    # would sweep nothing and pass.
    assert len(CONSOLE_ROUTES) > 20 and "" in CONSOLE_ROUTES


EVERY = "(every name)"


@pytest.fixture
def asked(monkeypatch):
    """The names a request's handling asked request.GET or request.POST for (both are QueryDicts),
    cleared by the caller between requests; EVERY when it took the whole dict (a copy, its items, its
    URL encoding: the page links that carry the filters)."""
    names: set[str] = set()
    inside_whole = [0]  # a whole-dict method (or the parser) reads each key itself: not asked for by name

    def by_key(method):
        def wrapped(self, key, *args, **kwargs):
            if not inside_whole[0]:
                names.add(key)
            return method(self, key, *args, **kwargs)

        return wrapped

    def whole(method, every=True):
        def wrapped(self, *args, **kwargs):
            if every:
                names.add(EVERY)
            inside_whole[0] += 1
            try:
                result = method(self, *args, **kwargs)
                return iter(list(result)) if inspect.isgenerator(result) else result
            finally:
                inside_whole[0] -= 1

        return wrapped

    for name in ("__getitem__", "__contains__", "get", "getlist", "pop", "setdefault"):
        monkeypatch.setattr(QueryDict, name, by_key(getattr(QueryDict, name)))
    for name in ("__iter__", "keys", "items", "values", "lists", "dict", "copy", "urlencode", "__copy__", "__deepcopy__"):
        monkeypatch.setattr(QueryDict, name, whole(getattr(QueryDict, name)))
    # Parsing the query string asks whether each name is already there: nobody's asking yet.
    monkeypatch.setattr(QueryDict, "__init__", whole(QueryDict.__init__, every=False))
    return names


def test_the_sweep_sees_which_names_a_page_reads_and_which_take_the_whole_query(db, asked):
    # The console sweep below sends a hostile value in each name a URL's handling asks for; if the
    # recording stopped seeing what Django's QueryDict is asked, it would send nothing and pass.
    from django.contrib.auth.models import User

    client = Client()
    client.force_login(User.objects.create_superuser("ada.admin", password=None))
    asked.clear()
    assert client.get("/reports/", {"days": "7"}).status_code == 200
    assert {"days", "tenant", "tool", EVERY} <= asked
    asked.clear()
    assert client.get("/queue/").status_code == 200
    assert EVERY in asked


@pytest.mark.parametrize("route", CONSOLE_ROUTES)
def test_no_console_url_answers_a_hostile_value_with_a_5xx(seeded, asked, route):
    # An administrator signed in without a password (force_login): no hashing, the same session.
    # Each hostile value goes into each path parameter, and into each name the URL's handling asks
    # for (found by asking: a plain request, every name at once with a harmless value, and every
    # request of the sweep itself, until no new name turns up). Names it takes only as a whole (the
    # filters a page carries into its links) get each hostile value all at once, beside the others.
    from django.contrib.auth.models import User

    call, _ = seeded
    client = Client()
    client.force_login(User.objects.create_superuser("ada.admin", password=None))
    samples = {"run_id": "run-hostile", "pk": call.pk, "seq": 1, "fmt": "jsonl", "table": "volume"}
    names = set(_console_params())
    plain = _console_path(route, samples)
    seen, read = [], set()

    def send(where, label, url, query=""):
        asked.clear()
        if method == "get":
            r = client.get(url, QUERY_STRING=query)
        else:
            r = client.post(url, query, content_type="application/x-www-form-urlencoded")
        seen.append((f"{method.upper()} /{route} {where}", label, r))
        read.update(asked)

    method = "get"
    send("plain", "nothing", plain)
    if seen[-1][2].status_code == 405:
        method = "post"
        seen.clear()
        read.clear()
        send("plain", "nothing", plain)
    else:
        send("every name", "a harmless value", plain, "&".join(f"{n}=1" for n in sorted(names)))
    for label, in_url, _ in HOSTILE:
        for name in re.findall(r"<\w+:(\w+)>", route):
            send(f"path {name}", label, _console_path(route, samples, (name, in_url)))
    done = set()
    while todo := [(n, h) for n in sorted(read & names) for h in HOSTILE if (n, h[0]) not in done]:
        for name, (label, in_url, _) in todo:
            done.add((name, label))
            send(name, label, plain, f"{name}={in_url}")
    if EVERY in read and (rest := sorted(names - read)):
        for label, in_url, _ in HOSTILE:
            send(f"{len(rest)} names read only as a whole", label, plain, "&".join(f"{n}={in_url}" for n in rest))
    assert _failures(seen) == []


# --- issue 31: finding every JSON value in a text stays bounded on hostile text ----------------------------


def test_masking_a_megabyte_of_brackets_takes_a_few_reads_of_it_and_still_masks_what_it_cannot_read():
    import time

    from recovery.masking import MASK, value_mask

    fields = frozenset({"account"})
    tail = '{"\\u0061ccount": "9911"}'  # an escaped key after what the bounded search reads
    hostile = {
        "unclosed nested arrays": "[" * 900 + "1," * 500_000 + tail,
        "brackets": "[" * 1_000_000 + tail,
        "braces": "{" * 1_000_000 + tail,
        "many small values": "[1] " * 250_000 + tail,
        "nested past the stack": "[" * 5_000 + tail + "]" * 5_000,
    }
    slow, leaked = [], []
    for label, text in hostile.items():
        t0 = time.perf_counter()
        shown = value_mask({"content": text}, fields)["content"]
        if time.perf_counter() - t0 > 1.0:
            slow.append(label)
        if "9911" in shown:
            leaked.append(label)
    assert slow == [] and leaked == []
    # An ordinary text with several JSON values is still read whole.
    assert value_mask({"content": '[1] {"a": 2} ' + tail}, fields)["content"] == '[1] {"a": 2} {"account":"' + MASK + '"}'


# --- the oversized event (issue 31, finding 7) --------------------------------------------------


def test_an_oversized_event_is_refused_with_a_413_naming_the_limit_and_the_run_screen_stays_bounded(seeded):
    from django.conf import settings
    from django.contrib.auth.models import User

    from runs.store import events_read

    _, secret = seeded
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")

    def post(path, body):
        return client.post(path, json.dumps(body), content_type="application/json")

    lease = post("/api/runs/run-oversized/lease", {"holder": "hostile"}).json()
    assert post("/api/runs/run-oversized/events", {"epoch": lease["epoch"], "expected_seq": 0, "events": [{"type": "run_started", "payload": {"run_id": "run-oversized"}}]}).status_code == 201
    limit = settings.RECKON_MAX_EVENT_BYTES
    # The finding's 2.4 MB event, and one just over the event's limit, pass the request body's
    # limit and are refused by the store, naming its limit; a body over its own limit is refused first.
    body_limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    for content, code in (("x" * (body_limit + 1), "too_large"), ("x" * 2_400_000, "event_too_large"), ("x" * (limit + 1), "event_too_large")):
        r = post("/api/runs/run-oversized/events", {"epoch": lease["epoch"], "expected_seq": 1, "events": [{"type": "user_message", "payload": {"content": content}}]})
        assert r.status_code == 413 and r.json()["code"] == code, r.content
    assert "RECKON_MAX_EVENT_BYTES" in r.json()["detail"]
    assert [e.seq for e in events_read(run_id="run-oversized")] == [1]
    # The largest allowed events, many of them: the run screen at a seq stays bounded.
    for seq in range(1, 21):
        r = post("/api/runs/run-oversized/events", {"epoch": lease["epoch"], "expected_seq": seq, "events": [{"type": "user_message", "payload": {"content": "y" * (limit - 20)}}]})
        assert r.status_code == 201, r.content
    console = Client()
    console.force_login(User.objects.create_superuser("ada.oversized", password=None))
    r = console.get("/runs/run-oversized/?at=21&expand=all")
    assert r.status_code == 200 and len(r.content) < 1_000_000, len(r.content)


# --- issue 31: outbound URLs and python adapter paths an administrator might be tricked into ---

INTERNAL_URLS = [
    "http://127.0.0.1:8200/api/openapi.json",  # Reckon's own API
    "http://127.0.0.1:5432/",  # PostgreSQL
    "http://localhost:6379/",  # Redis
    "http://169.254.169.254/latest/meta-data/",  # a cloud's metadata service
    "http://[::1]:8000/",
    "http://admin:pw@ledger.example/",
    "file:///etc/passwd",
]


def test_a_lookup_url_or_channel_url_reaching_an_internal_service_is_refused_by_the_api_and_the_console_with_a_4xx(settings):
    from django.contrib.auth.models import User

    from notify.models import Channel
    from recovery.models import ToolPolicy

    settings.RECKON_OUTBOUND_ALLOW = ()
    client = Client()
    client.force_login(User.objects.create_superuser("ada.admin", password=None))
    seen = []
    for url in INTERNAL_URLS:
        body = json.dumps({"fields": {"risk_class": "idempotent", "strategy": "escalate", "lookup": {"adapter": "http", "url": url}}})
        r = client.patch("/api/policies/hostile_tool", body, content_type="application/json")
        seen.append(("PATCH /api/policies", url, r))
        assert r.status_code == 422 and "tool 'hostile_tool': lookup: url" in r.json()["detail"], (url, r.content)
        r = client.post("/notifications/config/channel/", {"name": "hostile", "kind": "slack", "url": url}, follow=True)
        seen.append(("POST /notifications/config/channel/", url, r))
        assert r.status_code == 200 and b"Channel not saved: channels.hostile: url" in r.content, (url, r.content[:300])
    assert _failures(seen) == []
    assert not ToolPolicy.objects.filter(tool="hostile_tool").exists() and not Channel.objects.filter(name="hostile").exists()


def test_a_python_adapter_path_outside_the_listed_modules_is_refused_by_the_api_with_a_422(settings):
    from django.contrib.auth.models import User

    settings.RECKON_LOOKUP_MODULES = ("tests",)
    client = Client()
    client.force_login(User.objects.create_superuser("ada.admin", password=None))
    for path in ("os.getcwd", "subprocess.run", "builtins.eval", "django.core.management.call_command", "testsuite.x"):
        body = json.dumps({"fields": {"risk_class": "idempotent", "strategy": "escalate", "lookup": {"adapter": "python", "path": path}}})
        r = client.patch("/api/policies/hostile_tool", body, content_type="application/json")
        assert r.status_code == 422 and "is not one RECKON_LOOKUP_MODULES lists" in r.json()["detail"], (path, r.content)
