"""One rule for run ids, used by the importer, the HTTP API and the agent client alike."""

import pytest

from reckon_client import new_run_id, open_run
from runs.client import StoreTransport
from runs.run_ids import InvalidRunId, run_id_problem

BAD = ["", "..", ".hidden", "-rf", "run x", "run\nx", "run'x", 'run"x', "run/x", "run%2Fx", "é", "r" * 201]


@pytest.mark.parametrize("value", ["run-q3-recon", "a", "run.2026-09-08:retry_1", "r" * 200, new_run_id()], ids=["plain", "one letter", "dots and colons", "200 letters", "new_run_id"])
def test_a_valid_run_id_passes(value):
    assert run_id_problem(value) is None


@pytest.mark.parametrize("value", BAD)
def test_an_invalid_run_id_is_named_with_the_rule(value):
    assert "ASCII letters, digits, '.', '_', ':' and '-'" in run_id_problem(value)


@pytest.mark.django_db
def test_the_agent_client_refuses_an_invalid_run_id_before_taking_a_lease():
    with pytest.raises(InvalidRunId, match="not valid"):
        open_run("../escape", transport=StoreTransport(), renew=False)
    from runs.models import Run

    assert not Run.objects.exists()
