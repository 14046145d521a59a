"""Intentional repeats: which operation an agent's ask of a call is (docs/agents.md, "Intentional
repeats"). One rule, for ``Run.invoke(..., repeat=...)``, ``@tool(repeat=...)``, the framework
adapters and ``reckon-mcp-proxy``; the operation id's formula is ``identity.repeat_operation_id``.

An agent session counts its asks of each call (signature and operation id). Each ask takes the
lowest repeat index the session does not hold (completed or in flight), so:

- a call asked again after the same call completed is the next operation, and reaches its tool;
- two identical calls in flight at once are two operations with two keys (the agent asked twice);
- a session resumed after a crash that asks the same calls maps them to the same keys whatever
  their timing: identical asks are interchangeable, and an index is held from its ask until the
  session ends unless its call proves it failed or is left uncertain (then it is given back);
- an index whose start the log holds open (uncertain) is never passed over: every ask that lands
  on it shares its key and is told the call is uncertain, never runs it a second time;
- an index whose key the log completed and this session has not done (a resumed session asking
  again, or a new session repeating) is answered from the log with ``"same"``, and passed over to
  the next free operation with ``"new"``.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable, Mapping

from reckon_client.state import open_start

REPEATS = ("new", "same")


def repeat_of(option: str | Mapping[str, str] | None, name: str) -> str | None:
    """The ``repeat`` of tool ``name`` from a framework adapter's ``repeat=`` option: one value for
    every tool, or a mapping by tool name (a tool it does not name: None, the arguments are the
    action). ``check_repeat`` has refused a bad option before."""
    if option is None or isinstance(option, str):
        return option
    return option.get(name)


def check_repeat(option: Any, names: Iterable[str] | None = None) -> None:
    """Refuse a ``repeat=`` option that is not None, "new", "same" or a mapping of tool names to
    those, naming the tool; with ``names``, also a mapping that names a tool not among them."""
    values = option.items() if isinstance(option, Mapping) else [("", option)]
    for name, value in values:
        if value is not None and value not in REPEATS:
            where = f" (tool {name!r})" if name else ""
            raise ValueError(f"repeat must be 'new' or 'same'{where}, got {value!r}")
    if names is not None and isinstance(option, Mapping):
        names = sorted(names)
        unknown = sorted(set(option) - set(names))
        if unknown:
            raise ValueError(f"repeat names tools that are not there: {', '.join(map(repr, unknown))}; the tools are {', '.join(map(repr, names)) or 'none'}")


class SessionRepeats:
    """The repeat indexes one session holds, by (signature, operation id)."""

    def __init__(self) -> None:
        self._taken: dict[tuple[str, str | None], set[int]] = {}
        self._lock = threading.Lock()

    def take(self, slot: tuple[str, str | None], repeat: str, key_at: Callable[[int], str], state: Any) -> tuple[int, Callable[[bool], None]]:
        """The index of this ask of ``slot`` (``key_at(n)``: the key of index n in the run whose
        folded state is ``state``), and the function to call with whether its call completed."""
        with self._lock:
            taken = self._taken.setdefault(slot, set())
            n = 0
            while True:
                key = key_at(n)
                if n in taken:
                    n += 1
                elif open_start(state, key) is not None:
                    break  # left open before: shared, and uncertain
                elif repeat == "new" and key in state.completed_calls:
                    n += 1
                else:
                    taken.add(n)
                    break
            reserved = n in taken

        def settled(completed: bool) -> None:
            with self._lock:
                if completed:
                    taken.add(n)  # an uncertain call retried to completion holds its index too
                elif reserved:
                    taken.discard(n)

        return n, settled
