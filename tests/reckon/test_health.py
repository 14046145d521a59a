"""/healthz and /readyz: no credentials, JSON, and a 503 naming what is not ready."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.test import Client

import reckon.health


def test_healthz_answers_without_credentials_or_a_database(client: Client):
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


def test_readyz_is_ready_with_the_database_migrated(db, client: Client):
    r = client.get("/readyz")
    assert r.status_code == 200 and r.json() == {"status": "ready"}


def test_readyz_names_an_unreachable_broker(db, client: Client, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    r = client.get("/readyz")
    assert r.status_code == 503
    (problem,) = r.json()["problems"]
    assert problem.startswith("broker: ")


@pytest.mark.django_db(transaction=True)
def test_readyz_names_unapplied_migrations(client: Client, monkeypatch):
    monkeypatch.setattr(reckon.health, "_migrated", False)
    call_command("migrate", "axes", "zero", verbosity=0)
    try:
        r = client.get("/readyz")
        assert r.status_code == 503
        (problem,) = r.json()["problems"]
        assert problem.startswith("migrations: ") and "axes.0001_initial" in problem and "manage.py migrate" in problem
    finally:
        call_command("migrate", "axes", verbosity=0)
