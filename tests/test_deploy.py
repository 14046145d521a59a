"""Deployed the documented way, Django's deployment checklist has nothing to say."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from tests.production import production_env
from tests.production import _check_deploy

ROOT = Path(__file__).resolve().parents[1]


def test_check_deploy_is_clean_with_the_documented_production_variables():
    done = _check_deploy(production_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout, done.stdout
    assert "WARNING" not in done.stdout + done.stderr


def test_check_deploy_names_what_is_missing_without_https():
    done = _check_deploy(production_env(RECKON_HTTPS="false"))
    out = done.stdout + done.stderr
    assert done.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in out, out


def test_a_trusted_origin_without_a_scheme_is_refused_by_name(tmp_path):
    env = {**os.environ, "CSRF_TRUSTED_ORIGINS": "reckon.example.com", "RECKON_VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "reckon.settings"}
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "CSRF_TRUSTED_ORIGINS='reckon.example.com' needs a scheme" in done.stderr


@pytest.mark.parametrize("name", ["RECKON_HTTPS", "RECKON_TLS_PROXY"])
def test_a_production_switch_that_is_not_a_boolean_is_refused_by_name(monkeypatch, name):
    from reckon.env import envbool

    monkeypatch.setenv(name, "sometimes")
    with pytest.raises(ImproperlyConfigured, match=f"{name}='sometimes' is not a boolean"):
        envbool(name, default=False)
