"""Sign-in settings: password sign-in turned off but for the break-glass administrator (django-axes
still guarding it), the single sign-on variables' refusals, and `check --deploy` with them set."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from reckon.oidc_env import oidc_group_map, oidc_settings_check
from tests.console.helpers import PASSWORD, _user
from tests.production import _check_deploy
from tests.production import production_env


@pytest.fixture
def break_glass(settings, db):
    from access.roles import roles_ensure

    roles_ensure()
    settings.RECKON_PASSWORD_SIGN_IN = False
    settings.RECKON_BREAK_GLASS_USER = "ada.admin"
    settings.RECKON_OIDC_ISSUER = "https://sso.example.com/realms/ops"
    return {"olivia": _user("olivia.oncall", "oncall"), "ada": _user("ada.admin", is_staff=True, is_superuser=True)}


def _sign_in(username: str, password: str = PASSWORD):
    c = Client()
    return c, c.post("/login/", {"username": username, "password": password, "next": "/"})


def test_password_sign_in_off_admits_only_the_break_glass_administrator(break_glass):
    _, refused = _sign_in("olivia.oncall")
    assert refused.status_code == 200 and "did not match" in refused.content.decode()
    assert "Break-glass administrator" in refused.content.decode()
    c, admitted = _sign_in("ada.admin")
    assert admitted.status_code == 302 and c.session.get("_auth_user_id") == str(break_glass["ada"].pk)


def test_a_password_session_ends_when_password_sign_in_is_turned_off(break_glass, settings):
    settings.RECKON_PASSWORD_SIGN_IN = True
    c, _ = _sign_in("olivia.oncall")
    assert c.get("/queue/").status_code == 200
    settings.RECKON_PASSWORD_SIGN_IN = False
    assert c.get("/queue/").status_code == 302


def test_the_break_glass_path_keeps_the_sign_in_lockout(break_glass, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _sign_in("ada.admin", "wrong")
    _, locked = _sign_in("ada.admin")
    assert locked.status_code == 429


@pytest.mark.django_db
def test_the_single_sign_on_addresses_are_not_there_while_it_is_not_configured(settings):
    settings.RECKON_OIDC_ISSUER = ""
    assert Client().get("/oidc/start/").status_code == 404
    assert Client().get("/oidc/callback/?code=x&state=y").status_code == 404
    assert "sso-sign-in" not in Client().get("/login/").content.decode()


def test_the_group_map_reads_roles_and_tenants_and_keeps_ldap_names_whole():
    got = oidc_group_map("X", "reckon-oncall=oncall; cn=ops,ou=groups=admin\n acme=tenant:acme; acme=compliance")
    assert got == {"reckon-oncall": ("oncall",), "cn=ops,ou=groups": ("admin",), "acme": ("tenant:acme", "compliance")}


@pytest.mark.parametrize(
    "value, words",
    [("ops=root", "'root', which is not one of oncall, compliance, manager, admin or tenant:NAME"), ("oncall", "is not group=role"), ("x=tenant:", "names no tenant")],
)
def test_a_bad_group_map_is_refused_naming_the_entry(value, words):
    with pytest.raises(ImproperlyConfigured, match="RECKON_OIDC_GROUP_MAP") as err:
        oidc_group_map("RECKON_OIDC_GROUP_MAP", value)
    assert words in str(err.value)


GOOD = dict(issuer="https://sso.example.com/realms/ops", client_id="reckon", scopes="openid email", groups_claim="groups", group_map={"g": ("oncall",)}, password_sign_in=True, break_glass="")


@pytest.mark.parametrize(
    "change, words",
    [
        ({"issuer": "http://sso.example.com"}, "RECKON_OIDC_ISSUER='http://sso.example.com' must use https"),
        ({"issuer": "sso.example.com"}, "is not an issuer URL"),
        ({"client_id": ""}, "RECKON_OIDC_CLIENT_ID is empty"),
        ({"scopes": "email"}, "must include openid"),
        ({"group_map": {"g": ("tenant:acme",)}}, "grants no role"),
        ({"password_sign_in": False}, "needs RECKON_BREAK_GLASS_USER"),
        ({"password_sign_in": False, "break_glass": "ada", "issuer": ""}, "needs RECKON_OIDC_ISSUER"),
    ],
)
def test_a_sign_in_configuration_that_cannot_work_is_refused(change, words):
    oidc_settings_check(**GOOD)
    with pytest.raises(ImproperlyConfigured) as err:
        oidc_settings_check(**{**GOOD, **change})
    assert words in str(err.value)


def test_the_map_names_exactly_the_console_roles_and_the_administrator():
    from access import oidc
    from access.roles import GROUPS
    from reckon import oidc_env

    assert set(oidc_env.ROLES) == set(GROUPS) | {oidc.ADMIN_ROLE} and oidc_env.ADMIN == oidc.ADMIN_ROLE and oidc_env.TENANT == oidc.TENANT_PREFIX


SSO = {
    "RECKON_OIDC_ISSUER": "https://sso.example.com/realms/ops",
    "RECKON_OIDC_CLIENT_ID": "reckon",
    "RECKON_OIDC_CLIENT_SECRET": "s3cret",
    "RECKON_OIDC_GROUP_MAP": "/reckon/oncall=oncall; /reckon/admins=admin; /reckon/acme=tenant:acme",
    "RECKON_PASSWORD_SIGN_IN": "false",
    "RECKON_BREAK_GLASS_USER": "breakglass",
}


def test_check_deploy_is_clean_with_single_sign_on_configured():
    done = _check_deploy(production_env(**SSO))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


def test_a_bad_sign_in_variable_stops_the_start_naming_it():
    done = _check_deploy(production_env(**{**SSO, "RECKON_OIDC_GROUP_MAP": "/reckon/oncall=owner"}))
    assert done.returncode != 0
    assert "RECKON_OIDC_GROUP_MAP: '/reckon/oncall=owner' grants 'owner'" in done.stderr
