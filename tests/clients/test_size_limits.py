"""Issue 31, finding 7, from the agent client: an event over the server's limit raises TooLarge
(an InvalidEvent) naming the limit and its setting, against gunicorn on 127.0.0.1."""

from __future__ import annotations

import pytest
from reckon_client import HttpTransport, InvalidEvent, TooLarge, open_run

from access.tokens import token_create
from runs.store import events_read

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_agent_client_raises_too_large_naming_the_limit(server):
    token = token_create(name="big agent", scopes=["append", "read"])[1]
    run = open_run("run-client-big", transport=HttpTransport(server.url + "/api", token), holder="agent-a", renew=False)
    with pytest.raises(TooLarge) as exc:
        run.append("user_message", content="x" * (300 * 1024))
    assert isinstance(exc.value, InvalidEvent)
    assert exc.value.setting == "RECKON_MAX_EVENT_BYTES" and exc.value.limit == 256 * 1024 and exc.value.seq == 2
    assert "RECKON_MAX_EVENT_BYTES" in str(exc.value) and "262,144" in str(exc.value)
    assert [e.type for e in events_read(run_id="run-client-big")] == ["run_started"]
    run.append("user_message", content="small")  # the run goes on
