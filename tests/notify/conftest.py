"""Real receivers on 127.0.0.1 for the notification tests (tests/notify/helpers.py): an HTTP server
that verifies Standard Webhooks signatures and counts deliveries per webhook-id (and takes PagerDuty
and Slack posts), and an SMTP server (aiosmtpd) that keeps every message's raw bytes; the routes
that send to both. The recovery tests' ledger and policies come from tests/conftest.py."""

from __future__ import annotations

import pytest
from aiosmtpd.controller import Controller

from notify.config import notifications_load
from notify.outbox import routes_forget
from tests.notify.helpers import Mailbox, Receiver, config_text, free_port


@pytest.fixture(autouse=True)
def _routes_cache_clear():
    """The routes are cached per process; a test's routes must not outlive its rolled-back database."""
    routes_forget()
    yield
    routes_forget()


@pytest.fixture
def receiver():
    rec = Receiver()
    yield rec
    rec.server.shutdown()
    rec.server.server_close()


@pytest.fixture
def smtp(settings):
    box = Mailbox()
    port = free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    yield box
    controller.stop()


@pytest.fixture
def routes(receiver, smtp, policies):
    notifications_load(text=config_text(receiver.url), by="admin")
    return receiver
