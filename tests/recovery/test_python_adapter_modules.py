"""The python adapter calls functions only from the modules RECKON_LOOKUP_MODULES lists (issue 31
finding 13): a policy naming ``os.getcwd``, or any module not listed, is refused when it is written
and again when it would be called, before anything is imported. The suite lists ``tests``
(tests/session_env.py); each test here says what it lists."""

from __future__ import annotations

import sys

import pytest

from recovery import adapters
from recovery.adapters import AdapterError, CallRef, Evidence
from recovery.models import ToolPolicy
from recovery.policies import PolicyError
from recovery.policy_changes import policies_load
from recovery.reconcile import call_reconcile
from recovery.selectors import uncertain_call_evidence
from tests.recovery.helpers import crashed_run

pytestmark = pytest.mark.django_db
HERE = __name__  # tests.recovery.test_python_adapter_modules
REF = CallRef("run-py", "c1", "key-1", "read_ledger", {"account": "4020"})
NOT_A_FUNCTION = 42


def listed_lookup(*, call, spec, kind):
    return Evidence("match", observed={"from": "a listed module"})


def _policy(path: str) -> str:
    return f'[tools.read_ledger]\nrisk_class = "read_only"\nstrategy = "reconcile_then_retry"\nlookup = {{ adapter = "python", path = "{path}" }}\n'


def test_a_policy_naming_os_getcwd_is_refused_naming_the_policy_the_path_and_the_setting(settings):
    settings.RECKON_LOOKUP_MODULES = (HERE,)
    with pytest.raises(PolicyError) as refused:
        policies_load(text=_policy("os.getcwd"), by="admin")
    assert str(refused.value) == (
        f"tool 'read_ledger': lookup: python adapter 'os.getcwd': module 'os' is not one RECKON_LOOKUP_MODULES lists (it lists {HERE})"
    )
    assert not ToolPolicy.objects.exists()
    settings.RECKON_LOOKUP_MODULES = ()
    with pytest.raises(PolicyError, match=r"module 'subprocess' is not one RECKON_LOOKUP_MODULES lists \(it lists none\)"):
        policies_load(text=_policy("subprocess:run"), by="admin")


def test_a_module_not_listed_is_refused_at_call_time_before_it_is_imported(settings, capsys):
    settings.RECKON_LOOKUP_MODULES = (HERE,)
    sys.modules.pop("this", None)
    for path in ("os.getcwd", "this.s", "tests.recovery.conftest.correction"):
        with pytest.raises(AdapterError, match="is not one RECKON_LOOKUP_MODULES lists"):
            adapters.lookup(REF, {"adapter": "python", "path": path}, ())
        with pytest.raises(AdapterError, match="is not one RECKON_LOOKUP_MODULES lists"):
            adapters.execute(REF, {"adapter": "python", "path": path})
    assert "this" not in sys.modules and capsys.readouterr().out == ""  # importing `this` prints the Zen


def test_a_stored_policy_naming_a_module_no_longer_listed_is_recorded_as_a_broken_policy(settings):
    settings.RECKON_LOOKUP_MODULES = (HERE,)
    policies_load(text=_policy(f"{HERE}.listed_lookup"), by="admin")
    (call,) = crashed_run("run-py-1", [("c1", "read_ledger", {"account": "4020"})])
    settings.RECKON_LOOKUP_MODULES = ("reckon_lookups",)
    call_reconcile(pk=call.pk)
    (attempt,) = uncertain_call_evidence(pk=call.pk)["attempts"]
    assert attempt["outcome"] == "unavailable"
    assert attempt["error"] == f"broken policy for read_ledger: python adapter '{HERE}.listed_lookup': module '{HERE}' is not one RECKON_LOOKUP_MODULES lists (it lists reckon_lookups)"


def test_a_function_of_a_listed_module_or_a_module_inside_a_listed_package_is_called(settings):
    for listed in ((HERE,), ("tests.recovery",), ("tests",)):
        settings.RECKON_LOOKUP_MODULES = listed
        policies_load(text=_policy(f"{HERE}.listed_lookup"), by="admin")
        assert adapters.lookup(REF, {"adapter": "python", "path": f"{HERE}:listed_lookup"}, ()).observed == {"from": "a listed module"}
    # A listed name is a module, not the start of one: "tests.rec" does not list tests.recovery.
    settings.RECKON_LOOKUP_MODULES = ("tests.rec",)
    with pytest.raises(PolicyError, match="is not one RECKON_LOOKUP_MODULES lists"):
        policies_load(text=_policy(f"{HERE}.listed_lookup"), by="admin")


def test_a_listed_modules_attribute_that_is_not_a_function_is_refused_when_called(settings):
    settings.RECKON_LOOKUP_MODULES = (HERE,)
    with pytest.raises(AdapterError, match=f"python adapter '{HERE}.NOT_A_FUNCTION' is not a function"):
        adapters.lookup(REF, {"adapter": "python", "path": f"{HERE}.NOT_A_FUNCTION"}, ())


def test_a_malformed_module_list_stops_the_settings_naming_the_variable():
    import os
    import subprocess
    from pathlib import Path

    env = {**os.environ, "RECKON_LOOKUP_MODULES": "tests, os/path"}
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "RECKON_LOOKUP_MODULES: 'os/path' is not a dotted module name" in done.stderr
