"""The commands that print sensitive values unmasked (``replay --json``, ``uncertain --json``)
leave an access record before they print, naming who ran them and the command; a command that
prints none writes nothing. Each record is chained like every other (``verify_chain`` stays ok)."""

from __future__ import annotations

import io
import json
import sys
import threading

import pytest
from django.core.management import call_command
from django.db import OperationalError, connection, connections, transaction

from access.models import AccessRecord
from access.roles import roles_ensure
from runs.leases import lease_acquire
from runs.store import NewEvent, events_append
from tests.access.seed import SECRET, seed_runs

pytestmark = pytest.mark.django_db


@pytest.fixture
def seeded(db):
    roles_ensure()
    return seed_runs()


def _run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()



class RecordsAtFirstWrite(io.StringIO):
    """Where a command prints: at its first write, it notes which runs the access record already
    names (records after ``before``). A command that prints before it records is caught there."""

    def __init__(self, before: int):
        super().__init__()
        self.before = before
        self.recorded_at_first_write: list[str] | None = None

    def write(self, text):
        if self.recorded_at_first_write is None:
            self.recorded_at_first_write = sorted(AccessRecord.objects.filter(id__gt=self.before).values_list("run_id", flat=True))
        return super().write(text)


def test_uncertain_and_replay_json_write_their_records_before_their_first_character(seeded, monkeypatch):
    before = AccessRecord.objects.order_by("-id").values_list("id", flat=True).first() or 0
    out = RecordsAtFirstWrite(before)
    call_command("uncertain", "--json", "--by", "dana.oncall", stdout=out)
    assert SECRET in out.getvalue() and out.recorded_at_first_write == ["run-acme", "run-globex"]
    before = AccessRecord.objects.order_by("-id").values_list("id", flat=True).first()
    out = RecordsAtFirstWrite(before)
    monkeypatch.setattr(sys, "stdout", out)  # replay prints the document straight to the process's stdout
    call_command("replay", "run-acme", "--json", "--by", "dana.oncall")
    monkeypatch.undo()
    assert SECRET in out.getvalue() and out.recorded_at_first_write == ["run-acme"]


@pytest.mark.postgres
@pytest.mark.parametrize("command", [("uncertain", "--json"), ("replay", "run-acme", "--json")], ids=["uncertain", "replay"])
def test_a_command_whose_access_record_cannot_be_written_prints_nothing(seeded, monkeypatch, command):
    """Another connection holds the access record's table locked against writes; this one gives up
    waiting after a moment, as a write refused by the database would: the command fails, and not
    one character of what it would have shown has been printed."""
    locked, done = threading.Event(), threading.Event()

    def hold():
        try:
            with transaction.atomic(), connection.cursor() as cur:
                cur.execute("LOCK TABLE reckon_access_record IN EXCLUSIVE MODE")
                locked.set()
                done.wait(30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        with connection.cursor() as cur:
            cur.execute("SET LOCAL lock_timeout = '300ms'")  # the test's transaction: gone with it
        out = io.StringIO()
        monkeypatch.setattr(sys, "stdout", out)
        with pytest.raises(OperationalError, match="lock timeout"):
            call_command(*command, stdout=out)
        monkeypatch.undo()
    finally:
        done.set()
        holder.join(30)
    assert out.getvalue() == ""

def test_uncertain_json_records_one_access_per_run_it_shows_before_printing(seeded, capsys):
    before = AccessRecord.objects.count()
    calls = json.loads(_run("uncertain", "--json", "--by", "dana.oncall"))
    assert SECRET in json.dumps(calls)  # unmasked, as the command line's contract says
    records = list(AccessRecord.objects.order_by("id")[before:])
    assert sorted(r.run_id for r in records) == ["run-acme", "run-globex"]
    for r in records:
        assert (r.front_end, r.actor_name, r.why) == ("command", "dana.oncall", "manage.py uncertain --json")
        assert any(p.endswith("arguments.account") for p in r.fields), r.fields
        assert SECRET not in json.dumps(r.fields)  # paths, never the values
    # The plain listing prints no argument and records nothing.
    _run("uncertain")
    assert AccessRecord.objects.count() == before + 2


def test_replay_json_records_the_run_it_prints_and_a_run_without_sensitive_values_records_nothing(seeded, capsys):
    before = AccessRecord.objects.count()
    call_command("replay", "run-acme", "--json")
    printed = capsys.readouterr().out
    assert SECRET in printed
    [record] = AccessRecord.objects.order_by("id")[before:]
    assert (record.front_end, record.run_id, record.why) == ("command", "run-acme", "manage.py replay run-acme --json")
    assert record.actor_name  # the operating system's user, or "manage.py"
    lease = lease_acquire(run_id="run-plain", holder="w", ttl_seconds=60)
    events_append(run_id="run-plain", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "run-plain"})])
    call_command("replay", "run-plain", "--json")
    assert AccessRecord.objects.count() == before + 1
    out = io.StringIO()
    call_command("verify_chain", "run-acme", stdout=out)
    assert "ok" in out.getvalue(), out.getvalue()
