"""``manage.py demo``: the quickstart. Database, demo data, one user per role, then the console.

Steps, each reported in one line: migrate; import fixtures/events/v1 (and v2 when present); load
fixtures/policies.toml when the recovery engine provides ``load_policies``; create the groups and the
users ``oncall``, ``compliance``, ``manager`` and ``admin`` with random passwords printed once; then
serve http://127.0.0.1:8000 with the reconciliation loop. On the embedded default the loop is a
background thread running one reconcile pass every few seconds; with REDIS_URL it is a Celery worker
and beat, started as child processes and stopped with the server. ``--no-serve`` stops after the data.
"""

from __future__ import annotations

import io
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management import call_command, get_commands
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections, transaction
from django.utils import timezone

from access.roles import roles_ensure
from recovery.models import DemoLedgerEntry
from recovery.outbound import outbound_allow
from reckon_client.identity import idempotency_key, signature
from runs.identity import key_secret_new
from runs.importer import paths_import
from evidence.signing import fingerprint, signing_key_load
from runs.leases import lease_acquire, lease_release
from runs.store import NewEvent, events_append

DEMO_LEDGER = "127.0.0.1:9000"
ROLE_USERS = (("oncall", "oncall"), ("compliance", "compliance"), ("manager", "manager"), ("admin", None))


class Command(BaseCommand):
    help = "Prepare the demo database, data and users, then serve the console with the reconciliation loop."

    def add_arguments(self, parser):
        parser.add_argument("--no-serve", action="store_true", help="prepare data and users only, then exit")
        parser.add_argument("--addr", default="127.0.0.1:8000", help="address:port to serve on (default 127.0.0.1:8000)")
        parser.add_argument("--interval", type=float, default=5.0, help="seconds between reconcile passes (embedded loop)")
        parser.add_argument("--reset-passwords", action="store_true", help="give existing demo users new passwords")

    def handle(self, *args, no_serve, addr, interval, reset_passwords, **options):
        if interval <= 0:
            raise CommandError(f"--interval must be positive, got {interval}")
        call_command("migrate", verbosity=0, interactive=False)
        self.stdout.write("database: migrated")
        # The example ledger (examples/ledger.py on 127.0.0.1:9000), which fixtures/policies.toml's
        # lookups call, runs on this machine: named, as an operator names their own receivers, for
        # the reconciliation loop here and the workers it starts (recovery/outbound.py).
        outbound_allow(DEMO_LEDGER)
        # The key that signs chain checkpoints and evidence bundles (docs/evidence.md): with DEBUG on
        # and none configured, generated into var/signing_key.pem on first use, which is now.
        try:
            self.stdout.write(f"signing key: {fingerprint(signing_key_load())}")
        except ImproperlyConfigured as exc:
            self.stdout.write(f"signing key: none ({exc}); evidence bundles and checkpoints are refused")
        # Setting up writes a decision-log line per recovery event (INFO, JSON on stderr): dozens of
        # them between the lines above and the passwords below. The set-up logs warnings up, unless
        # RECKON_LOG_LEVEL asks for more; the server it then starts logs as configured.
        quiet = "RECKON_LOG_LEVEL" not in os.environ
        log = logging.getLogger("reckon")
        level = log.level
        if quiet:
            log.setLevel(logging.WARNING)
        try:
            self._policies()
            self._import()
            self._users(reset_passwords)
            made = scenarios_create()
            self.stdout.write(f"scenarios: {len(made)} live runs with uncertain calls ({', '.join(made)}); first reconcile pass:")
            if "reconcile" in get_commands():
                call_command("reconcile", once=True, stdout=self.stdout)
        finally:
            log.setLevel(level)
        if no_serve:
            self.stdout.write("ready (--no-serve): not starting the server")
            return
        self._serve(addr, interval)

    def _import(self) -> None:
        root = Path(settings.BASE_DIR) / "fixtures" / "events"
        folders = [str(root / v) for v in ("v1", "v2") if (root / v).is_dir()]
        if not folders:
            self.stdout.write("events: no fixtures/events folder, nothing imported")
            return
        for result in paths_import(folders):
            self.stdout.write(f"events: {result.line()}")

    def _policies(self) -> None:
        # The demo file points the tools at the built-in demo ledger, so reconciliation works offline.
        fixtures = Path(settings.BASE_DIR) / "fixtures"
        path = fixtures / "policies-demo.toml"
        if not path.exists():
            path = fixtures / "policies.toml"
        if "load_policies" not in get_commands():
            self.stdout.write("policies: the recovery engine has no load_policies command yet; skipped")
            return
        if not path.exists():
            self.stdout.write(f"policies: {path} not found; skipped")
            return
        call_command("load_policies", str(path), by="demo", stdout=self.stdout)

    @transaction.atomic
    def _users(self, reset: bool) -> None:
        roles_ensure()
        self.stdout.write("users (passwords are shown once; keep them now):")
        for username, group in ROLE_USERS:
            user = User.objects.filter(username=username).first()
            if user is not None and not reset:
                self.stdout.write(f"  {username:<11} exists, password unchanged (use --reset-passwords for a new one)")
                continue
            password = secrets.token_urlsafe(12)
            if user is None:
                user = User(username=username)
            user.set_password(password)
            if group is None:
                user.is_staff = user.is_superuser = True
            user.save()
            if group:
                user.groups.set([Group.objects.get(name=group)])
            self.stdout.write(f"  {username:<11} {password}   ({group or 'administrator'})")

    def _serve(self, addr: str, interval: float) -> None:
        from runs.metrics_dir import multiproc_dir_clean

        multiproc_dir_clean()  # start-up: the metric files of earlier runs' processes go
        children: list[subprocess.Popen] = []
        stop = threading.Event()
        if settings.REDIS_URL:
            celery = [sys.executable, "-m", "celery", "-A", "reckon"]
            children.append(subprocess.Popen([*celery, "worker", "--loglevel=WARNING", "--concurrency=2"]))
            children.append(subprocess.Popen([*celery, "beat", "--loglevel=WARNING", "--schedule", str(Path(settings.VAR_DIR) / "celerybeat-schedule")]))
            self.stdout.write(f"reconciliation: Celery worker (pid {children[0].pid}) and beat (pid {children[1].pid}) on {settings.REDIS_URL}")
        elif "reconcile" in get_commands():
            threading.Thread(target=_reconcile_loop, args=(stop, interval, self.stderr), name="reckon-reconcile", daemon=True).start()
            self.stdout.write(f"reconciliation: in-process, one pass every {interval:g} s")
        else:
            self.stdout.write("reconciliation: the recovery engine has no reconcile command yet; not running")
        self.stdout.write(f"console: http://{addr}/  (Ctrl-C stops everything)")
        try:
            call_command("runserver", addr, use_reloader=False, use_threading=True)
        finally:
            stop.set()
            for child in children:
                child.send_signal(signal.SIGTERM)
            for child in children:
                try:
                    child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()


def _reconcile_loop(stop: threading.Event, interval: float, err) -> None:
    """One reconcile pass every ``interval`` seconds until the server stops; a failing pass is
    reported and the loop goes on, because the next pass may well succeed (a lookup was down)."""
    while not stop.wait(interval):
        try:
            call_command("reconcile", once=True, verbosity=0, stdout=io.StringIO())
        except Exception as exc:  # keep serving; the console shows the calls as still open
            err.write(f"reconcile pass failed: {type(exc).__name__}: {exc}")
        finally:
            close_old_connections()


# --- demo scenarios ---------------------------------------------------------------------------
#
# The fixtures are history: every call in them is settled. These runs give the console something to
# work on: an agent started a ledger correction and died before recording the result, and the demo
# ledger (policies-demo.toml) holds what the receiver did. Each case is one row of docs/recovery.md's rules.

SCENARIOS = (
    # (run id, minutes ago, arguments, what the demo ledger holds for the key: None = nothing)
    (
        "demo-conflict-c801",
        40,
        {"tenant": "acme", "account": "4020", "amount": "840.00", "currency": "GBP", "period": "2026-Q3", "reference": "C-801"},
        {"tenant": "acme", "account": "4020", "amount": "480.00", "currency": "GBP", "period": "2026-Q3", "reference": "C-801"},
    ),
    ("demo-match-c802", 5, {"tenant": "acme", "account": "4030", "amount": "125.50", "currency": "GBP", "period": "2026-Q3", "reference": "C-802"}, "same"),
    ("demo-absent-c803", 3, {"tenant": "globex", "account": "7100", "amount": "60.00", "currency": "EUR", "period": "2026-Q3", "reference": "C-803"}, None),
    (
        "demo-conflict-c804",
        180,
        {"tenant": "initech", "account": "5500", "amount": "2300.00", "currency": "USD", "period": "2026-Q3", "reference": "C-804"},
        {"tenant": "initech", "account": "5501", "amount": "2300.00", "currency": "USD", "period": "2026-Q3", "reference": "C-804"},
    ),
)


def scenario_run_create(*, run_id: str, tool: str, arguments: dict, started_minutes_ago: float, ledger: dict | str | None = None) -> str:
    """A run whose agent started ``tool`` and died before the completion: an unmatched start.

    ``ledger`` is what the demo ledger holds under the call's key: the same fields ("same"), other
    fields (a conflict), or nothing (authoritative absence).
    """
    t0 = timezone.now() - timedelta(minutes=started_minutes_ago)
    sig = signature(tool, arguments)
    lease = lease_acquire(run_id=run_id, holder="demo-agent")
    if lease.last_seq == 0:
        # The demo plays the agent: it chooses the run's key secret so it knows the key it records.
        secret = key_secret_new()
        key = idempotency_key(run_id, sig, secret)
        events = [
            NewEvent("run_started", {"run_id": run_id, "key_secret": secret}, ts=t0 - timedelta(seconds=9)),
            NewEvent("user_message", {"content": f"Post correction {arguments.get('reference', '')} for tenant {arguments.get('tenant', '')}."}, ts=t0 - timedelta(seconds=6)),
            NewEvent(
                "model_turn",
                {"text": "Posting the correction.", "tool_calls": [{"id": "call_1", "name": tool, "arguments": arguments}], "usage": {"input_tokens": 900, "output_tokens": 60}, "cost_usd": 0.004},
                ts=t0 - timedelta(seconds=3),
            ),
            NewEvent("tool_call_started", {"call_id": "call_1", "name": tool, "arguments": arguments, "idempotency_key": key, "signature": sig, "tenant": arguments.get("tenant", "default")}, ts=t0),
        ]
        events_append(run_id=run_id, epoch=lease.epoch, expected_seq=0, events=events)
        if ledger is not None:
            fields = arguments if ledger == "same" else ledger
            DemoLedgerEntry.objects.get_or_create(idempotency_key=key, defaults={"tool": tool, "fields": fields, "result": {"ledger_id": f"L-{key[:8]}", "status": "posted"}})
    # The agent "dies": its lease goes, and nobody will ever append the completion.
    lease_release(run_id=run_id, epoch=lease.epoch)
    return run_id


def scenarios_create() -> list[str]:
    return [scenario_run_create(run_id=r, tool="post_correction", arguments=a, started_minutes_ago=m, ledger=ledger) for r, m, a, ledger in SCENARIOS]
