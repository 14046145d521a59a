"""A pytest plugin (``-p tests.multiproc_dir`` in pyproject.toml): the test session's own
Prometheus multiprocess folder.

It must run before pytest-django loads the settings, because the settings export the folder and
prometheus_client reads it once, when first imported; a conftest is too late. A fresh temporary
folder keeps the session's figures away from var/prometheus (a demo's) and from another session
running at the same time; child processes (commands, gunicorn) inherit it, so their figures are
merged into the ones the tests read. Each xdist worker makes a folder of its own inside the
controller's, so one worker's figures never appear in another's. A folder given by the caller is
used as is ("" turns the multiprocess mode off, to run the suite as a single-process deployment would).
"""

from __future__ import annotations

import os
import shutil
import tempfile

_made: str | None = None
if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
    _made = os.environ["PROMETHEUS_MULTIPROC_DIR"] = os.environ["RECKON_TEST_METRICS_DIR"] = tempfile.mkdtemp(prefix="reckon-test-metrics-")
elif os.environ.get("PYTEST_XDIST_WORKER") and os.environ["PROMETHEUS_MULTIPROC_DIR"] == os.environ.get("RECKON_TEST_METRICS_DIR"):
    # A worker of a session whose controller made the folder: a folder of its own inside it.
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix=os.environ["PYTEST_XDIST_WORKER"] + "-", dir=os.environ["RECKON_TEST_METRICS_DIR"])


def pytest_unconfigure(config):
    if _made:
        shutil.rmtree(_made, ignore_errors=True)
