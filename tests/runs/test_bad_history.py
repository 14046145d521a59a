"""A known-bad history beside the good ones: a forked log must be refused, never folded."""

import pytest

from runs.fold import FoldError, fold
from runs.importer import ImportRejected, log_parse
from tests.golden import FIXTURES

FORKED = FIXTURES / "bad" / "run-forked-history.jsonl"


def test_import_refuses_a_forked_history_naming_the_repeated_line():
    with pytest.raises(ImportRejected, match="line 13: seq 12 where 13 was expected \\(a repeat\\)"):
        log_parse(str(FORKED), FORKED.read_bytes())


def test_the_fold_raises_on_a_forked_history():
    import json

    from runs.fold import Event

    events = [Event(d["seq"], d["type"], d["payload"], d["ts"]) for d in map(json.loads, FORKED.read_text().splitlines())]
    with pytest.raises(FoldError, match="seq 12 does not follow seq 12"):
        fold(events)
