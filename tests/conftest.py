import pytest
from django.conf import settings
from django.db import connection


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
