"""A GET never writes to the database: not the API, not a console screen, not an agent's resume read.

Sample data includes a snapshot that fails its checks, so every read that would once have repaired
it (discarded it, unpublished its pointer) in the request takes the repair path. Celery runs as
with a real broker (``queued_tasks``: an in-memory broker, not eager), so a repair can only be
queued; the queued task is then run and must settle the snapshot.

Every request runs under ``CaptureQueriesContext`` and no statement may write. Sign-in bookkeeping
happens before, on purpose: ``force_login`` saves the session and ``last_login``, and a token's
first use records ``last_used_at`` (at most once a minute, access.tokens). Nothing is excluded from
the check itself.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import URLPattern, reverse

from api.instance import api
from runs.client import StoreTransport
from runs.models import Snapshot, SnapshotPointer
from runs.selectors import run_state
from runs.snapshots import snapshot_write
from tests.console.helpers import client_for
from tests.helpers import WRITE

pytestmark = pytest.mark.django_db

REPAIR = "runs.tasks.snapshot_repair_task"

# The one write a GET is allowed, and why: an unmasked export hands every sensitive field of a run
# to an administrator, and that disclosure is written to the access record (access.services) before
# the file leaves; a disclosure nobody recorded is worse than a GET that writes. It is matched
# narrowly: that URL, an INSERT into that table and the record's link in the run's chain of access
# records (access.chain: its link, and the run's head row created or moved), nothing else. (API
# reads that show values unmasked are recorded the same way, and so is the reports' export of every
# call of a period, /reports/calls.csv; this test reads the API with a masked
# token, so none may write.)
AUDITED = (
    re.compile(r"^/runs/[^/]+/export\.(jsonl|csv)$|^/reports/calls\.csv"),
    re.compile(r'^\s*(INSERT INTO "?(reckon_access_record|reckon_access_chain|reckon_access_head)"?|UPDATE "?reckon_access_head"?)', re.S),
)


def writes_of(url: str, queries: list[dict]) -> list[str]:
    out = [q["sql"] for q in queries if WRITE.search(q["sql"])]
    if AUDITED[0].match(url):
        out = [sql for sql in out if not AUDITED[1].search(sql)]
    return out


@pytest.fixture(params=["digest", "missing"])
def sample(request, v1_runs, conflict_call):
    """The demo's escalated conflict, the v1 runs, and a bad current snapshot of the conflict's run:
    a body that no longer matches its digest, or a pointer to a snapshot deleted behind our back."""
    run_id = conflict_call.run_id
    snap = snapshot_write(run_id=run_id, state=run_state(run_id=run_id))
    if request.param == "digest":
        Snapshot.objects.filter(id=snap.id).update(body=snap.body.replace('"turns":', '"turns": '))
    else:
        Snapshot.objects.filter(id=snap.id).delete()
    return {"run_id": run_id, "snapshot_id": snap.id, "pk": conflict_call.pk, "tool": conflict_call.tool, "seq": 1, "fmt": "jsonl", "table": "volume", "kind": request.param}


def api_gets(params: dict) -> list[str]:
    """Every GET operation of the OpenAPI document, its path filled in (a new path parameter is a
    KeyError here, so a new endpoint cannot slip past), a few with query strings, and the GETs
    that are not operations (the document, its docs page, /metrics)."""
    paths = [p for p, ops in api.get_openapi_schema()["paths"].items() if "get" in ops]
    assert "/api/runs/{run_id}/state" in paths and len(paths) >= 8, paths
    urls = [p.format(**{k: params[k] for k in re.findall(r"{(\w+)}", p)}) for p in paths]
    run_id = params["run_id"]
    urls += [f"/api/runs/{run_id}/state?at=1", f"/api/runs/{run_id}/events?after=1&limit=2", "/api/runs?finished=false&limit=2", "/api/uncertain-calls?state=escalated"]
    return urls + ["/api/openapi.json", "/api/docs", "/metrics"]


def console_gets(params: dict) -> list[tuple[str, dict]]:
    """Every console URL (from console.urls, through the resolver), filled in; the POST-only ones
    answer 405 and are left out by the caller. Plus the htmx and query variants of the run screens."""
    from console import urls

    out = []
    for p in urls.urlpatterns:
        assert isinstance(p, URLPattern), p
        out.append((reverse(f"console:{p.name}", kwargs={k: params[k] for k in p.pattern.regex.groupindex}), {}))
    run = reverse("console:run", kwargs={"run_id": params["run_id"]})
    out += [(f"{run}?at=1", {}), (f"{run}state/?at=1", {"HTTP_HX_REQUEST": "true"}), (f"{run}?before=2", {"HTTP_HX_REQUEST": "true"})]
    out += [("/queue/?risk_class=irreversible", {}), ("/decisions/?tool=post_correction", {}), ("/reports/calls.csv", {}), ("/reports/?days=90&risk_class=irreversible", {})]
    return out


def test_no_get_writes_and_a_bad_snapshot_is_repaired_by_the_queued_task(sample, reader, admin_user, queued_tasks):  # noqa: F811
    console = client_for(admin_user)  # signs in now: the session row and last_login are written here
    assert reader.get("/api/policies").status_code == 200  # the token's first use records last_used_at here
    requests = [(reader.client, url, reader.headers) for url in api_gets(sample)]
    requests += [(console, url, headers) for url, headers in console_gets(sample)]

    wrote, answered = {}, {}
    for client, url, headers in requests:
        with CaptureQueriesContext(connection) as ctx:
            status = client.get(url, **headers).status_code
        answered[url] = status
        writes = writes_of(url, ctx.captured_queries)
        if writes:
            wrote[url] = writes
    with CaptureQueriesContext(connection) as ctx:  # an agent resuming through the store directly
        assert StoreTransport().opened(sample["run_id"])[0].to_dict() == run_state(run_id=sample["run_id"]).to_dict()
    if writes_of("StoreTransport.opened", ctx.captured_queries):
        wrote["StoreTransport.opened"] = writes_of("StoreTransport.opened", ctx.captured_queries)

    assert not wrote, "GETs that wrote:\n" + "\n".join(f"{u}: {sql}" for u, sql in wrote.items())
    assert not [u for u, s in answered.items() if s >= 500], answered
    screens = [u for u, s in answered.items() if s == 200 and not u.startswith(("/api/", "/metrics"))]
    assert len(screens) >= 8, answered  # the console's screens really answered, not just redirects
    assert answered[f"/api/runs/{sample['run_id']}/state"] == 200

    # The reads left the bad snapshot as they found it, and queued its repair.
    if sample["kind"] == "digest":
        assert Snapshot.objects.get(id=sample["snapshot_id"]).discarded_at is None
    assert SnapshotPointer.objects.filter(run_id=sample["run_id"], snapshot_id=sample["snapshot_id"]).exists()
    tasks = queued_tasks.drain()
    assert tasks and {name for name, _, _ in tasks} == {REPAIR}, tasks
    assert {tuple(args) for _, args, _ in tasks} == {(sample["run_id"], sample["snapshot_id"])}

    # The worker's turn: the first repair settles it, the others find nothing left to do.
    assert queued_tasks.run(tasks)[0] == "miss"
    assert not SnapshotPointer.objects.filter(run_id=sample["run_id"]).exists()
    if sample["kind"] == "digest":
        snap = Snapshot.objects.get(id=sample["snapshot_id"])
        assert snap.discarded_at is not None and snap.discard_reason.startswith("digest")
    assert reader.get(f"/api/runs/{sample['run_id']}/state").status_code == 200
    assert queued_tasks.drain() == []  # nothing left to repair: no new task
