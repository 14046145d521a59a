"""What tests of more than one package share: the task and broker set-up, the live server and
gunicorn, the signing key, the console's people (Olivia on call, Ada the administrator) and the
demo's conflict, the v1 runs, a read-only API token, the recovery tests' ledger and policies, a
queue table of every kind of call, and Debian's Chromium for every browser test. A package's own
fixtures are in its conftest.py; plain helpers in modules that are neither (tests/*/helpers.py)."""

import gc
import os

import pytest
from django.conf import settings
from django.db import connection

from tests.console.helpers import CONFLICT_ARGS, CONFLICT_LEDGER, FIXTURES, _user

# Playwright's sync API runs an event loop in the test thread; Django refuses ORM calls from a thread
# with a running loop unless told that this is deliberate.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def pytest_configure(config):
    _sqlite_flush_keeps_the_access_record_append_only()
    _postgresql_flush_deletes()


# What ``migrate`` derives from the models and Django's post-migrate handlers create again after
# every flush between transactional tests: kept instead, as any database keeps them, so that the
# handlers find them and write nothing (70 ms a flush on PostgreSQL when they were deleted: 40 s of
# the suite). No test writes either table.
KEPT_BY_FLUSH = frozenset({"django_content_type", "auth_permission"})


def _sqlite_flush_keeps_the_access_record_append_only():
    """Between transactional tests (the live server's, for one) Django empties every table; on SQLite
    that is ``DELETE FROM``, which the access record's triggers refuse (on PostgreSQL it is TRUNCATE,
    which they do not see). The test harness's flush alone lifts the triggers around its DELETE
    and puts them back with the migration's own statements; nothing else in the suite can delete."""
    import importlib

    from django.db.backends.sqlite3.base import DatabaseOperations  # the backend's module first: operations alone imports it back

    migration = importlib.import_module("access.migrations.0002_access_record")
    original = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        tables = [t for t in tables if t not in KEPT_BY_FLUSH]
        sql = original(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        if "reckon_access_record" in tables:
            sql = [*migration.SQLITE_BACKWARD, *sql, *migration.SQLITE_FORWARD]
        return sql

    DatabaseOperations.sql_flush = sql_flush


def _postgresql_flush_deletes():
    """On PostgreSQL, Django empties the tables between transactional tests with one TRUNCATE of
    every table: 90 ms a test (a new file for each table and index), about a fifth of the suite's
    time on PostgreSQL. The few rows a test leaves are deleted instead (2 ms), the tables' own
    triggers (the event log's and the access record's refusal to delete) lifted around the DELETEs
    inside the flush's transaction, so nothing else ever sees them lifted. The foreign keys are
    deferred to the commit, by which every table is empty. A flush that resets sequences still
    truncates."""
    from django.db.backends.postgresql.base import DatabaseOperations  # the backend's module first, as above

    original = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        tables = [t for t in tables if t not in KEPT_BY_FLUSH]
        if reset_sequences or not tables:
            return original(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        with self.connection.cursor() as cur:
            cur.execute("SELECT DISTINCT tgrelid::regclass::text FROM pg_trigger WHERE NOT tgisinternal")
            guarded = [self.quote_name(t) for (t,) in cur.fetchall() if t in tables]
        return [
            *(f"ALTER TABLE {name} DISABLE TRIGGER USER" for name in guarded),
            *(f"DELETE FROM {self.quote_name(table)}" for table in tables),
            *(f"ALTER TABLE {name} ENABLE TRIGGER USER" for name in guarded),
        ]

    DatabaseOperations.sql_flush = sql_flush


def pytest_collection_modifyitems(config, items):
    """Tests marked ``postgres`` run only when DATABASE_URL points at PostgreSQL (CI's second pass);
    tests marked ``broker`` only when REDIS_URL names a Redis broker."""
    skip_pg = pytest.mark.skip(reason="needs PostgreSQL: run with DATABASE_URL=postgres://...")
    skip_broker = pytest.mark.skip(reason="needs a Redis broker: run with REDIS_URL=redis://...")
    for item in items:
        if "postgres" in item.keywords and connection.vendor != "postgresql":
            item.add_marker(skip_pg)
        if "broker" in item.keywords and not settings.REDIS_URL:
            item.add_marker(skip_broker)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """On SQLite, a test must leave the database's write lock free: a connection it leaves holding
    the lock makes every later test of the process wait out its busy timeout ("database is
    locked"), far from the cause. Once a test's fixtures are torn down (its transaction rolled back,
    its tables flushed), a fresh connection tries to take the lock at once; if it cannot, the test
    fails here, naming the connections still open and what holds them, and those are closed so the
    rest of the run goes on. PostgreSQL's connections hold no lock on the whole database."""
    result = yield
    if connection.vendor == "sqlite":
        held = _sqlite_write_lock_holders(connection.settings_dict["NAME"])
        if held:
            pytest.fail(f"{item.nodeid} left the SQLite test database write-locked:\n" + held, pytrace=False)
    return result


def _sqlite_write_lock_holders(path: str) -> str:
    """'' when the write lock on *path* is free; otherwise a description of this process's SQLite
    connections and cursors (each then closed), or of the lock being another process's.

    A connection closed while a cursor still holds one of its statements unfinished stays open
    underneath (SQLite's close_v2), its transaction and lock with it, until that cursor object is
    freed: so the cursors are listed, with what holds them."""
    import inspect
    import sqlite3
    import sys

    def free() -> bool:
        probe = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            probe.close()

    def held_by(obj, seen, depth=2) -> list[str]:
        # Who refers to obj, two levels up: a frame by its function and line, a generator by name.
        out = []
        for r in gc.get_referrers(obj):
            if r is seen or r is lines:
                continue
            if inspect.isframe(r):
                out.append(f"frame {r.f_code.co_qualname} ({r.f_code.co_filename}:{r.f_lineno})")
            elif type(r) is dict and r.get("__name__") in sys.modules and sys.modules[r["__name__"]].__dict__ is r:
                out.append(f"module {r['__name__']}")
            elif depth > 1 and not inspect.isgenerator(r):
                out.append(f"{type(r).__name__} <- {held_by(r, seen, depth - 1)}")
            else:
                out.append(f"{type(r).__name__} {getattr(r, '__qualname__', '')}".rstrip())
        return out

    if free():
        return ""
    gc.collect()
    if free():
        return "held by a connection only the garbage collector freed (a reference cycle)"
    lines: list[str] = []
    found = gc.get_objects()
    for obj in found:
        if isinstance(obj, sqlite3.Cursor):
            lines.append(f"  a cursor, referred to by {held_by(obj, found)}")
            try:
                obj.close()
            except sqlite3.Error as exc:
                lines.append(f"    (could not close it: {exc})")
    for obj in found:
        if not isinstance(obj, sqlite3.Connection):
            continue
        try:
            state = f"in_transaction={obj.in_transaction}"
        except sqlite3.ProgrammingError:
            state = "closed"
        if obj is getattr(connection, "connection", None):
            lines.append(f"  Django's own connection of this thread, {state}")
            connection.close()
            continue
        lines.append(f"  a connection, {state}, referred to by {held_by(obj, found)}")
        try:
            obj.close()
        except sqlite3.Error as exc:
            lines.append(f"    (could not close it: {exc})")
    del found
    if not lines:
        return "  no connection or cursor of this process is open: another process holds it"
    return "\n".join(lines) + ("" if free() else "\n  and the lock is still held after closing them")


@pytest.fixture(autouse=True, scope="session")
def _clients_share_a_request_handler():
    """Every ``django.test.Client`` of a test process sends its requests through one request
    handler (one per CSRF setting), as every request to a server goes through the middleware it
    loaded once. Each client built its own, and its first request loaded the whole middleware
    stack: WhiteNoise's walks every file under STATIC_ROOT, about 0.1 s a client, some 40% of the
    console tests' time. Each client is still new (its own cookies, defaults and session). A
    settings change (``override_settings``, pytest-django's ``settings``) forgets the shared
    handlers, so a test that changes what the middleware reads gets a handler loaded under it."""
    from django.core.signals import setting_changed
    from django.test import Client

    handlers: dict[bool, object] = {}

    def forget(**kwargs) -> None:
        handlers.clear()

    built = Client.__init__

    def init(self, enforce_csrf_checks=False, *args, **kwargs):
        built(self, enforce_csrf_checks, *args, **kwargs)
        self.handler = handlers.setdefault(bool(enforce_csrf_checks), self.handler)

    setting_changed.connect(forget, weak=False, dispatch_uid="tests.clients_share_a_request_handler")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Client, "__init__", init)
        yield
    setting_changed.disconnect(dispatch_uid="tests.clients_share_a_request_handler")


@pytest.fixture(autouse=True)
def _receiver_connections_closed():
    """After each test, the connections this thread keeps alive to receivers (recovery.adapters'
    pool) are closed: the test's receivers are gone, and a socket left open was reported by the
    garbage collector at the worker's exit (``ResourceWarning: unclosed socket``, dozens a run)."""
    yield
    from recovery import adapters

    adapters.connections_close()


@pytest.fixture(autouse=True)
def _tasks_run_in_process(request):
    """Tasks run eagerly in every test, whatever REDIS_URL says, unless the test is marked ``broker``
    and exercises a real worker. Without this, a test run with REDIS_URL set would leave its tasks
    queued in Redis with nobody to run them (and a later worker would run them against nothing)."""
    if "broker" in request.keywords:
        yield
        return
    from reckon.celery import app

    saved = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager, app.conf.task_eager_propagates = True, True
    try:
        yield
    finally:
        app.conf.task_always_eager, app.conf.task_eager_propagates = saved


class QueuedTasks:
    """Tasks sent to an in-memory broker: queued as a real broker would keep them, run on demand."""

    def __init__(self, app):
        self.app = app

    def drain(self) -> list[tuple[str, list, dict]]:
        """Take every queued task off the queue: ``(task name, args, kwargs)`` in sending order."""
        from queue import Empty

        out = []
        with self.app.connection_for_write() as conn:
            q = conn.SimpleQueue(self.app.conf.task_default_queue)
            try:
                while True:
                    try:
                        message = q.get(block=False)
                    except Empty:
                        break
                    args, kwargs, _ = message.decode()
                    out.append((message.headers["task"], list(args), dict(kwargs)))
                    message.ack()
            finally:
                q.close()
        return out

    def run(self, tasks: list[tuple[str, list, dict]]) -> list:
        """Run drained tasks in this process, as a worker would; their return values."""
        return [self.app.tasks[name].apply(args=args, kwargs=kwargs, throw=True).get() for name, args, kwargs in tasks]


def _broker_reset(app) -> None:
    # Celery caches its connection and producer pools on first use; drop its references so the next
    # send connects to whatever broker_url says now. Not closed: kombu keeps pools per broker URL
    # process-wide and would hand the closed one back to the next test on the same URL.
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def queued_tasks():
    """Celery as in production (not eager), on an in-memory broker: ``.delay()`` only queues, and
    nothing runs until the test says so. Never Redis, so no other process can take the tasks."""
    from reckon.celery import app

    saved = app.conf.broker_url, app.conf.task_always_eager
    app.conf.broker_url, app.conf.task_always_eager = "memory://localhost/", False
    _broker_reset(app)
    queued = QueuedTasks(app)
    queued.drain()  # anything an earlier test left behind
    try:
        yield queued
    finally:
        queued.drain()
        app.conf.broker_url, app.conf.task_always_eager = saved
        _broker_reset(app)


@pytest.fixture(scope="session")
def live_server(request):
    """pytest-django's live server, serving /static/ from STATIC_ROOT as WhiteNoise does in gunicorn.

    pytest-django hands the server staticfiles' handler, which looks files up through the finders by
    their source names; pages name the hashed copies `collectstatic` made (`make install` runs it),
    which only STATIC_ROOT holds. Django's own test handler serves STATIC_ROOT."""
    from django.contrib.staticfiles import handlers
    from django.test.testcases import _StaticFilesHandler
    from pytest_django.live_server_helper import LiveServer

    original = handlers.StaticFilesHandler
    handlers.StaticFilesHandler = _StaticFilesHandler
    try:
        server = LiveServer(request.config.getvalue("liveserver") or os.getenv("DJANGO_LIVE_TEST_SERVER_ADDRESS") or "localhost")
    finally:
        handlers.StaticFilesHandler = original
    yield server
    server.stop()


@pytest.fixture(scope="session")
def server(django_db_setup, django_db_blocker):
    """gunicorn (two workers) serving Reckon on a free port of 127.0.0.1 against this process's test
    database: started once per test process (once per xdist worker) and shared by the tests that
    drive the agent client over HTTP. Tests that need a server configured otherwise (production
    settings, a database that goes away) start their own ``tests.api.live.Server``."""
    from tests.api.live import Server

    with django_db_blocker.unblock():
        srv = Server(workers=2)
    yield srv
    srv.stop()


@pytest.fixture(autouse=True, scope="session")
def _signing_key():
    """Evidence bundles and checkpoints are signed, and DEBUG is off in tests, so no key would be
    generated: the suite signs with a throwaway Ed25519 key (tests that pin one set their own)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
    from django.conf import settings

    if not settings.RECKON_SIGNING_KEY:
        settings.RECKON_SIGNING_KEY = Ed25519PrivateKey.generate().private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    yield


# The console's people and the demo's conflict: the console's tests, and the access, recovery and
# read-only tests that act as them.


@pytest.fixture
def roles(db):
    from access.roles import roles_ensure

    roles_ensure()


@pytest.fixture
def oncall(roles):
    return _user("olivia.oncall", "oncall")


@pytest.fixture
def admin_user(roles):
    return _user("ada.admin", is_staff=True, is_superuser=True)


@pytest.fixture
def v1_runs(db):
    """The four v1 reference runs, imported as an operator would."""
    from runs.importer import paths_import

    results = paths_import([str(FIXTURES / "events" / "v1")])
    assert all(r.outcome == "imported" for r in results), [r.line() for r in results]
    return [r.run_id for r in results]


@pytest.fixture
def demo_policies(db):
    from recovery.policy_changes import policies_load

    policies_load(text=(FIXTURES / "policies-demo.toml").read_text(encoding="utf-8"), by="test")


@pytest.fixture
def conflict_call(demo_policies):
    """An escalated conflict: the agent posted 840.00, the ledger holds 480.00 under the same key."""
    from demo.management.commands.demo import scenario_run_create
    from recovery.models import UncertainCall
    from recovery.reconcile import reconcile_pass

    scenario_run_create(run_id="run-conflict", tool="post_correction", arguments=CONFLICT_ARGS, started_minutes_ago=40, ledger=CONFLICT_LEDGER)
    reconcile_pass(due_only=False)
    call = UncertainCall.objects.get(run_id="run-conflict")
    assert call.state == "escalated" and call.last_outcome == "conflict", (call.state, call.last_outcome)
    return call


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    """Debian's Chromium (tests/console/browser.py), never a downloaded browser build; flags keep it
    quiet and offline. Every host but localhost and 127.0.0.1 resolves to nothing, so a page that asks for
    something outside 127.0.0.1 fails at once: the OpenID provider's own sign-in pages ask for a web
    font from fonts.googleapis.com, which held each of them for five seconds (the connection's
    time-out) on a machine without internet, and sent a request out of the test on one with it."""
    from tests.console.browser import CHROMIUM

    offline = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1"
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run", offline],
    }


# The recovery tests' real HTTP ledger and its tool policies: the recovery, notification and
# Procfile tests share them.


@pytest.fixture
def ledger():
    from tests.recovery.helpers import Ledger

    led = Ledger()
    yield led
    led.server.shutdown()
    led.server.server_close()


@pytest.fixture
def policies(ledger, db):
    from recovery.policy_changes import policies_load
    from tests.recovery.helpers import policies_text

    policies_load(text=policies_text(ledger.url), by="dana.oncall")
    return ledger


@pytest.fixture
def calls():
    """60 calls over two days: every 7th a possible duplicate, every 3rd overdue, a few resolved, ties.
    The queue's reads (tests/recovery/test_queue_reads.py) and the overview (tests/console/test_overview_scale.py)."""
    from datetime import timedelta

    from django.utils import timezone

    from recovery.models import UncertainCall
    from tests.recovery.helpers import RISKS, S

    now = timezone.now()
    states = (S.OPEN, S.RECONCILING, S.ESCALATED, S.RESOLVED, S.IN_FLIGHT)
    rows = []
    for i in range(60):
        started = now - timedelta(minutes=67 * (i // 2))  # pairs share a start: the id breaks the tie
        if i == 10:
            started = now - timedelta(hours=6)  # exactly on a chart instant
        state = states[i % 5]
        rows.append(
            UncertainCall(
                run_id=f"run-{i % 6}", call_id=f"c{i}", idempotency_key=f"k{i}", tool=f"tool_{i % 4}", tenant=("acme", "globex")[i % 2],
                start_seq=i + 1, started_at=started, state=state, risk_class=RISKS[i % 4],
                deadline=(now - timedelta(minutes=i)) if i % 3 == 0 else (now + timedelta(hours=1) if i % 3 == 1 else None),
                possible_duplicate=i % 7 == 0, resolution_kind=("automatic" if i % 2 else "person") if state == S.RESOLVED else "",
                escalated_at=started + timedelta(minutes=1) if i % 4 == 1 and state != S.IN_FLIGHT else None,
            )
        )
    UncertainCall.objects.bulk_create(rows)
    # A resolved call's end is its resolving event's time: spread them over the chart's window.
    for n, pk in enumerate(UncertainCall.objects.filter(state=S.RESOLVED).order_by("id").values_list("pk", flat=True)):
        end = now - timedelta(hours=n * 5 % 30, minutes=7)
        UncertainCall.objects.filter(pk=pk).update(updated_at=end, resolved_at=end)
    return now


# A read-only API token: the API's tests, and the snapshot, lookup and read-only tests.


@pytest.fixture
def reader(db):
    from django.test import Client

    from access.tokens import token_create
    from tests.api.helpers import Api

    _, secret = token_create(name="dashboard", scopes=["read"])
    return Api(Client(), secret)
