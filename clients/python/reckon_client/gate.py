"""One call per idempotency key at a time in a process.

Two calls with the same key in flight at once are the same action asked twice (the same arguments
with no repeat counting, or a host's own operation id sent twice). Without a gate both would read
the log before either recorded its start, and both run; or the second would find the first's open
start and call an action still running "uncertain". With it, the second waits for the first to
end and is then decided by the log, exactly as if it had been asked just after: answered from the
log when the first completed, uncertain when the first was left open, run when the first proved it
failed (the key is free again). Threads wait on an event; asyncio tasks on a future of their own
loop, so a waiting task holds no worker thread (the appends it waits for need them).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Callable


class KeyGate:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Held keys -> the wake-ups of those waiting for them.
        self._held: dict[str, list[Callable[[], None]]] = {}

    def _try_take(self, key: str, wake: Callable[[], None] | None) -> bool:
        """Hold ``key`` if it is free; else register ``wake`` (if any) for its release."""
        with self._lock:
            waiting = self._held.get(key)
            if waiting is None:
                self._held[key] = []
                return True
            if wake is not None:
                waiting.append(wake)
            return False

    def take(self, key: str) -> None:
        """Hold ``key``, waiting (blocking this thread) while another call holds it."""
        if self._try_take(key, None):  # the usual case: nobody else holds it
            return
        while True:
            ended = threading.Event()
            if self._try_take(key, ended.set):
                return
            ended.wait()

    async def atake(self, key: str) -> None:
        """Hold ``key``, awaiting while another call holds it. Cancelled while waiting, it holds nothing."""
        if self._try_take(key, None):
            return
        loop = asyncio.get_running_loop()
        while True:
            ended = loop.create_future()

            def wake(ended: asyncio.Future = ended) -> None:
                try:
                    loop.call_soon_threadsafe(lambda: ended.done() or ended.set_result(None))
                except RuntimeError:  # the waiter's loop is closed: nobody is waiting any more
                    pass

            if self._try_take(key, wake):
                return
            await ended

    def release(self, key: str) -> None:
        """Let ``key`` go; every call waiting for it tries again (one of them gets it)."""
        with self._lock:
            waiting = self._held.pop(key, [])
        for wake in waiting:
            wake()

    def held(self) -> int:
        with self._lock:
            return len(self._held)
