"""A pytest plugin (``-p tests.every_item`` in pyproject.toml): a run in which fewer tests ran than
were collected fails, naming the difference.

pytest-xdist schedules tests by node id. A plugin that gives several items one node id (Schemathesis
gives one per API operation to the whole schema test) can then have all but one of them dropped by
the scheduler, silently: the run reports "passed" for what did run. Here the controller (or the one
process without xdist) counts each test's setup report, one per test that ran (skipped ones
included), and at the end compares the count with the number of tests collected. A run that passed
with fewer is turned into a failure. A run stopped early (``-x``, ``--maxfail``, an interrupt) or
already failing is left as it is.
"""

from __future__ import annotations

import pytest

_ran = 0


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    global _ran
    if report.when == "setup":
        _ran += 1


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: its collection is every test, its reports only its share
    collected = session.testscollected  # after -k and -m deselection, with xdist or without
    if exitstatus != pytest.ExitCode.OK or session.config.option.collectonly or not collected:
        return
    if _ran != collected:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("=", f"{collected - _ran} of {collected} collected tests never ran (tests.every_item)", red=True, bold=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
