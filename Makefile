# Reckon: `make demo` and `make test` work on a bare machine with Python 3.11+.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

.PHONY: install client-envs demo test bench bench-load bench-peers run clean

# The server's environment also holds the agent client (clients/python, editable): the tests drive
# it against a live server, and `bench invoke` measures agents through it.
$(VENV)/.installed: pyproject.toml clients/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test,load]' -e ./clients/python
	touch $@

# collectstatic whenever the environment, the settings or a static file in the checkout changed:
# the hashed, compressed files WhiteNoise serves in every mode (demo, tests, production) come from
# the code in this checkout. (Compressing them all takes about 20 s, so an unchanged checkout skips it.)
STATIC_ROOT ?= var/static
STATIC_SOURCES := $(shell find . -path ./.venv -prune -o -path ./var -prune -o -path ./node_modules -prune -o -type f -path '*/static/*' -print)
$(STATIC_ROOT)/staticfiles.json: $(VENV)/.installed reckon/settings.py $(STATIC_SOURCES)
	$(PY) manage.py collectstatic --noinput -v0

install: $(STATIC_ROOT)/staticfiles.json

# Fresh environments holding only the agent client (plain, with each extra), built once per
# version of its sources under var/client-venvs, and the pinned reference MCP servers under
# var/mcp-reference; the client tests use them (tests/clients/venvs.py).
client-envs: install
	$(PY) -m tests.clients.venvs plain mcp langgraph pydantic-ai reference

demo: install
	$(PY) manage.py demo

# On every core (pytest-xdist; tests/session_env.py gives each worker its own database, folder,
# queue and cache keys); the slowest twenty tests are listed after the results: where the time goes.
# worksteal, not load: Schemathesis gives its sixteen API operations one node id, and xdist's load
# scheduling ran one of them (1,392 results of 1,407 collected); work stealing runs all sixteen, and
# a worker that finishes early takes tests from the other's queue. A run in which fewer tests ran
# than were collected fails, naming how many (tests/every_item.py). PYTEST_ARGS="-n 0": one process.
# Compiled modules are kept (in __pycache__, which git ignores) even where the environment says not
# to (PYTHONDONTWRITEBYTECODE): the suite starts some hundreds of Python processes (workers, servers,
# agents, commands), and each would compile Reckon's modules, and each worker rewrite every test
# module's asserts, all over again.
test: export PYTHONDONTWRITEBYTECODE =
test: install
	$(PY) -m pytest -n auto --dist worksteal --durations=20 $(PYTEST_ARGS)

# Production's shape on one machine: web (gunicorn), worker and beat from the Procfile, under honcho.
# Needs DATABASE_URL and REDIS_URL (without REDIS_URL the worker and beat have no broker); migrate first.
run: install
	mkdir -p $${RECKON_VAR_DIR:-var}
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/honcho -f Procfile start

# `manage.py bench` installs the benchmarks' app for itself: production's INSTALLED_APPS and the
# wheel leave it out (reckon/settings.py).
bench: install
	$(PY) manage.py bench all

# A production-shaped load (docs/load.md): needs DATABASE_URL (PostgreSQL) and REDIS_URL;
# BENCH_LOAD_ARGS="--duration 120" to change it.
bench-load: install
	$(PY) manage.py bench load $(BENCH_LOAD_ARGS)

# Reckon against eventsourcing and DBOS on the same PostgreSQL server (docs/benchmarks.md): needs
# DATABASE_URL (PostgreSQL); the peers are the `peers` extra, installed here and nowhere else.
bench-peers: install
	$(VENV)/bin/pip install -q -e '.[peers]'
	$(PY) manage.py bench peers

clean:
	rm -rf $(VENV) var
