"""Settings fail loudly: an unexpected environment value names the variable."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from reckon.env import envbool, envint, envstr


def test_a_boolean_that_is_not_one_names_the_variable(monkeypatch):
    monkeypatch.setenv("RECKON_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="RECKON_FLAG='maybe' is not a boolean"):
        envbool("RECKON_FLAG", default=False)
    monkeypatch.setenv("RECKON_FLAG", "off")
    assert envbool("RECKON_FLAG", default=True) is False


def test_an_integer_that_is_not_one_or_too_small_names_the_variable(monkeypatch):
    monkeypatch.setenv("RECKON_N", "ten")
    with pytest.raises(ImproperlyConfigured, match="RECKON_N='ten' is not an integer"):
        envint("RECKON_N", 1)
    monkeypatch.setenv("RECKON_N", "0")
    with pytest.raises(ImproperlyConfigured, match="must be at least 1"):
        envint("RECKON_N", 1, minimum=1)


def test_a_secret_may_come_from_a_file_and_an_unreadable_file_is_named(monkeypatch, tmp_path):
    secret = tmp_path / "key"
    secret.write_text("s3cret\n")
    monkeypatch.delenv("RECKON_SECRET", raising=False)
    monkeypatch.setenv("RECKON_SECRET_FILE", str(secret))
    assert envstr("RECKON_SECRET") == "s3cret"
    monkeypatch.setenv("RECKON_SECRET_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match="RECKON_SECRET_FILE=.* cannot be read"):
        envstr("RECKON_SECRET")


def test_production_without_a_secret_key_refuses_to_start(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "SECRET_KEY_FILE")}
    env.update(DEBUG="false", RECKON_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="reckon.settings")
    out = subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env, capture_output=True, text=True)
    assert out.returncode != 0 and "SECRET_KEY (or SECRET_KEY_FILE) is required when DEBUG is off" in out.stderr
    env["DEBUG"] = "perhaps"
    out = subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env, capture_output=True, text=True)
    assert out.returncode != 0 and "DEBUG='perhaps' is not a boolean" in out.stderr


def test_a_command_with_a_bad_setting_says_so_in_one_line_without_a_traceback(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, DEBUG="perhaps", RECKON_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="reckon.settings")
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "manage.py", "check"], cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr == "configuration error: DEBUG='perhaps' is not a boolean: use one of 1/0, true/false, yes/no, on/off\n"
