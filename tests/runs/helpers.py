"""What the runs tests (and the API's metrics tests) share: runs written through the fenced append,
a management command in a real process, a snapshot tampered with, SQL run past the append-only
trigger, ``verify_chain`` read as JSON, import lines and logs, and events for the fold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from runs.fold import Event
from runs.leases import lease_acquire
from runs.models import Event as StoredEvent
from runs.models import Run, Snapshot
from runs.snapshot_format import body_digest, state_dumps, state_loads
from runs.snapshot_plan import COMPACT_EVERY
from runs.store import NewEvent, events_append
from runs.synthetic import synthetic_events


def working_run(run_id, n, *, finished=False):
    """A run of ``n`` events written through the fenced append."""
    lease = lease_acquire(run_id=run_id, holder="worker-a", ttl_seconds=600)
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": run_id})])
    if n > 1:
        more(run_id, lease.epoch, 1, n - 1)
    return lease


def more(run_id, epoch, after, k):
    seq = after
    while k > 0:
        batch = min(k, 500)
        events_append(run_id=run_id, epoch=epoch, expected_seq=seq, events=synthetic_events(run_id, seq + 1, batch, compact_every=COMPACT_EVERY, recorded=False))
        seq += batch
        k -= batch
    return seq


ROOT = Path(__file__).resolve().parents[2]
MANAGE = """
import sys
from django.conf import settings
settings.DATABASES["default"]["NAME"] = sys.argv[1]   # the test database, not the configured one
from django.core.management import execute_from_command_line
execute_from_command_line(["manage.py", *sys.argv[2:]])
"""


def manage(*args):
    """Run a management command in a real process against the test database."""
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="reckon.settings", PYTHONPATH=str(ROOT))
    connection.close()  # SQLite: do not hold the file while the child writes
    return subprocess.run(
        [sys.executable, "-c", MANAGE, connection.settings_dict["NAME"], *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def tamper(snap: Snapshot) -> None:
    """A body that differs from the log but carries a valid digest: only a full replay can tell."""
    st = state_loads(snap.body)
    st.completed_calls["k-invented"] = {"posted": "C-999"}
    body = state_dumps(st)
    Snapshot.objects.filter(id=snap.id).update(body=body, digest=body_digest(body))


def _run(run_id="r1", n=6):
    lease = lease_acquire(run_id=run_id, holder="w", ttl_seconds=60)
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": run_id})])
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=1, events=[NewEvent("user_message", {"content": "one"})])  # single, plain
    batch = [NewEvent("user_message", {"content": f"m{i}", "ratio": 1.0 + i, "big": 10**18}) for i in range(n - 3)]
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=2, events=batch)  # a batch
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=n - 1, events=[NewEvent("run_finished", {"outcome": "ok"})])  # single, finishing
    return lease


def _sql(statements):
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("ALTER TABLE reckon_event DISABLE TRIGGER reckon_event_append_only")
        for sql, params in statements:
            cur.execute(sql, params)
        if connection.vendor == "postgresql":
            cur.execute("ALTER TABLE reckon_event ENABLE TRIGGER reckon_event_append_only")


def _verify(*ids, checkpoint=None):
    out = []
    args = ["verify_chain", *ids, "--json"] + (["--checkpoint", str(checkpoint)] if checkpoint else [])

    class W:
        def write(self, s):
            out.append(s)

        def flush(self):
            pass

    old = sys.stdout
    sys.stdout = W()
    try:
        call_command(*args)
        ok = True
    except CommandError:
        ok = False
    finally:
        sys.stdout = old
    return ok, [json.loads(line) for line in "".join(out).splitlines() if line.strip()]


def line(seq, type_, payload, ts="2026-09-08T11:00:00Z", **extra):
    return json.dumps({"seq": seq, "type": type_, "ts": ts, "payload": payload, **extra}) + "\n"


def good(run_id="run-x", n=3):
    text = line(1, "run_started", {"run_id": run_id})
    for s in range(2, n + 1):
        text += line(s, "user_message", {"content": f"m{s}"})
    return text


def nothing_stored(run_id="run-x"):
    return not Run.objects.filter(run_id=run_id).exists() and not StoredEvent.objects.filter(run_id=run_id).exists()


BAD = {
    "not JSON": (good() + "{not json\n", "line 4: not JSON"),
    "not an object": (good() + "[1, 2]\n", "line 4: not a JSON object"),
    "blank line": (good() + "\n" + line(5, "user_message", {"content": "x"}), "line 4: not JSON"),
    "unknown type": (good() + line(4, "teleported", {}), "line 4: unknown event type 'teleported'"),
    "gap": (good() + line(5, "user_message", {"content": "x"}), "line 4: seq 5 where 4 was expected (a gap)"),
    "repeat": (good() + line(3, "user_message", {"content": "x"}), "line 4: seq 3 where 4 was expected (a repeat)"),
    "newer version": (good() + line(4, "user_message", {"content": "x"}, v=5), "line 4: schema version 5 is newer than this reader knows"),
    "non-UTF-8": (good().encode() + b'{"seq": 4, "type": "user_message", "ts": "2026-09-08T11:00:00Z", "payload": {"content": "caf\xe9"}}\n', "line 4: bytes that are not UTF-8"),
    "missing payload field": (good() + line(4, "tool_call_started", {"call_id": "c1"}), "line 4: tool_call_started payload lacks name, arguments"),
    "non-UTC ts": (good() + line(4, "user_message", {"content": "x"}, ts="2026-09-08T13:00:00+02:00"), "line 4: ts '2026-09-08T13:00:00+02:00' is not in UTC"),
    "no run_started": (line(1, "user_message", {"content": "x"}), "line 1: a run log begins with run_started"),
    "run id differs from the file name": (line(1, "run_started", {"run_id": "run-y"}), "names run 'run-y' but the file is named for 'run-x'"),
    "NUL in a payload": (good() + line(4, "user_message", {"content": "a\u0000b"}), "NUL"),
    "unknown line field": (good() + line(4, "user_message", {"content": "x"}, actor="bot"), "line 4: unknown field 'actor'"),
    "seq not an integer": (good() + line("4", "user_message", {"content": "x"}), "line 4: seq '4' is not an integer"),
    "empty file": ("", "no complete events"),
}


RUN = "run-t"  # the fold tests' run


def log(*items):
    """Events from (type, payload) pairs, seq from 1, starting with run_started."""
    evs = [Event(1, "run_started", {"run_id": RUN})]
    for t, p in items:
        evs.append(Event(len(evs) + 1, t, p, "2026-09-08T11:00:00Z"))
    return evs


def started(call_id, name="post_correction", args=None, key=None):
    p = {"call_id": call_id, "name": name, "arguments": args if args is not None else {"amount": "840.00"}}
    if key:
        p["idempotency_key"] = key
    return ("tool_call_started", p)


def completed(call_id, name="post_correction", content="ok", key="k", is_error=False, **extra):
    p = {"call_id": call_id, "name": name, "content": content, "is_error": is_error, **extra}
    if key is not ...:
        p["idempotency_key"] = key
    return ("tool_call_completed", p)
