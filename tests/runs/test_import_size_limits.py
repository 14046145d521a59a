"""Issue 31, finding 7, for imported logs: the store's size limits apply to every line, in the
first chunk or a later one, and to the run the file makes;
the file is rejected whole, naming the line and the limit, with nothing written."""

import io

import pytest

from runs.importer import log_import_stream
from tests.runs.helpers import good, line, nothing_stored

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def small(settings):
    settings.RECKON_MAX_EVENT_BYTES = 2000
    settings.RECKON_MAX_RUN_BYTES = 20_000
    return settings


def imported(text, name="run-x.jsonl"):
    return log_import_stream(name, io.BytesIO(text.encode()))


@pytest.mark.parametrize("chunked", [False, True], ids=["one chunk", "chunks of 7"])
def test_a_line_over_the_event_limit_rejects_the_file_naming_the_line_and_the_limit(small, chunked):
    if chunked:
        small.RECKON_IMPORT_CHUNK = 7
    text = good(n=20) + line(21, "user_message", {"content": "x" * 2500}) + line(22, "user_message", {"content": "after"})
    result = imported(text)
    assert result.outcome == "rejected"
    assert result.reason.startswith("line 21: ") and "RECKON_MAX_EVENT_BYTES" in result.reason and "2,000" in result.reason, result.reason
    assert nothing_stored()


@pytest.mark.parametrize("chunked", [False, True], ids=["one chunk", "chunks of 7"])
def test_a_file_whose_events_pass_the_run_limit_is_rejected_naming_the_line_and_the_limit(small, chunked):
    if chunked:
        small.RECKON_IMPORT_CHUNK = 7
    text = good(n=1)
    for s in range(2, 30):  # 28 events of about 1,000 bytes: over 20,000 at the 20th or so
        text += line(s, "user_message", {"content": "y" * 1000})
    result = imported(text)
    assert result.outcome == "rejected"
    assert result.reason.startswith("line ") and "RECKON_MAX_RUN_BYTES" in result.reason and "20,000" in result.reason, result.reason
    seq = int(result.reason.split(":")[0].split()[1])
    assert 19 <= seq <= 21
    assert nothing_stored()
