"""Reckon's agent client: make an agent's tool calls recoverable.

    from reckon_client import open_run, tool

    @tool
    def post_correction(account: str, amount: int, *, idempotency_key: str) -> dict: ...

    with open_run("run-q3-recon", url="http://127.0.0.1:8000", token="...") as run:
        post_correction(account="C-771", amount=840)
        run.finish()

Standard library only; ``reckon_client.aio`` is the async API, ``reckon_client.mcp_proxy`` the MCP
proxy (the ``mcp`` extra).
"""

from reckon_client.errors import (
    BadResponse,
    CallUncertain,
    ClientError,
    FenceError,
    InvalidEvent,
    LeaseHeld,
    ReckonError,
    RunFinished,
    RunNotFound,
    SeqConflict,
    ServerUnavailable,
    StaleEpoch,
    ToolFailed,
    TooLarge,
    WriterRefused,
)
from reckon_client.http import HttpTransport, api_base
from reckon_client.identity import call_key, completion_pair, idempotency_key, refresh_operation_id, signature
from reckon_client.run import OpenCall, Run, RunState, ToolCall, ToolResult, Transport, current_idempotency_key, new_run_id, open_run, tool

__version__ = "0.1.0"

__all__ = [
    "BadResponse",
    "CallUncertain",
    "ClientError",
    "FenceError",
    "HttpTransport",
    "InvalidEvent",
    "LeaseHeld",
    "OpenCall",
    "ReckonError",
    "Run",
    "RunFinished",
    "RunNotFound",
    "RunState",
    "SeqConflict",
    "ServerUnavailable",
    "StaleEpoch",
    "ToolCall",
    "ToolFailed",
    "TooLarge",
    "ToolResult",
    "Transport",
    "WriterRefused",
    "api_base",
    "call_key",
    "completion_pair",
    "current_idempotency_key",
    "idempotency_key",
    "new_run_id",
    "open_run",
    "refresh_operation_id",
    "signature",
    "tool",
]
