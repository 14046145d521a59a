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
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.conf import settings
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections, transaction

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
        self._import()
        self._policies()
        self._users(reset_passwords)
        if no_serve:
            self.stdout.write("ready (--no-serve): not starting the server")
            return
        self._serve(addr, interval)

    def _import(self) -> None:
        from runs.importer import paths_import

        root = Path(settings.BASE_DIR) / "fixtures" / "events"
        folders = [str(root / v) for v in ("v1", "v2") if (root / v).is_dir()]
        if not folders:
            self.stdout.write("events: no fixtures/events folder, nothing imported")
            return
        for result in paths_import(folders):
            self.stdout.write(f"events: {result.line()}")

    def _policies(self) -> None:
        path = Path(settings.BASE_DIR) / "fixtures" / "policies.toml"
        if "load_policies" not in get_commands():
            self.stdout.write("policies: the recovery engine has no load_policies command yet; skipped")
            return
        if not path.exists():
            self.stdout.write(f"policies: {path} not found; skipped")
            return
        call_command("load_policies", str(path), stdout=self.stdout)

    @transaction.atomic
    def _users(self, reset: bool) -> None:
        from django.contrib.auth.models import Group, User

        from console.roles import roles_ensure

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
        children: list[subprocess.Popen] = []
        stop = threading.Event()
        if settings.REDIS_URL:
            celery = [sys.executable, "-m", "celery", "-A", "console"]
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
