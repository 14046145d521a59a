"""One ``open_run`` for tests that run the same agent code on both transports: the in-process
store (runs.client) and Reckon's HTTP API through the agent client (reckon_client)."""

from __future__ import annotations

import reckon_client

import runs.client


def open_run(run_id=None, *, transport, **kwargs):
    if isinstance(transport, reckon_client.HttpTransport):
        return reckon_client.open_run(run_id, transport=transport, **kwargs)
    return runs.client.open_run(run_id, transport=transport, **kwargs)
