"""Golden states of the fixture logs: the state after every prefix, committed next to each fixture.

``python -m tests.golden --write`` regenerates them; do it only on purpose (a new fixture, or a
deliberate, reviewed change of the fold's meaning), and read the diff. The test in
tests/runs/test_golden.py replays every prefix through the current reader and compares.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "events"


def fixture_logs() -> list[Path]:
    return sorted(FIXTURES.glob("v*/*.jsonl"))


def golden_path(log: Path) -> Path:
    return log.with_name(log.name[: -len(".jsonl")] + ".states.json")


def fixture_states(log: Path) -> dict[str, dict]:
    """The state after each prefix of ``log``, parsed, upcast and folded without a database."""
    from runs.fold import RunState, apply
    from runs.importer import log_parse
    from runs.upcasters import events_upcast

    parsed = log_parse(str(log), log.read_bytes())
    st = RunState()
    states = {}
    for ev in events_upcast(parsed.events, parsed.run_id):
        apply(st, ev)
        states[str(ev.seq)] = json.loads(json.dumps(st.to_dict()))
    return states


def main(argv: list[str]) -> int:
    import os

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reckon.settings")
    django.setup()
    if "--write" not in argv:
        print("usage: python -m tests.golden --write   (regenerates every fixture's golden states)")
        return 2
    for log in fixture_logs():
        path = golden_path(log)
        path.write_text(json.dumps(fixture_states(log), indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {path.relative_to(FIXTURES.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
