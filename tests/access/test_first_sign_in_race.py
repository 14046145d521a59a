"""The same person's first sign-in in two tabs at the same moment: one user, one identity."""

from __future__ import annotations


import pytest

from reckon.oidc_env import oidc_group_map
from tests.helpers import at_once

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_two_first_sign_ins_of_one_person_at_once_make_one_user(settings):
    from django.contrib.auth.models import User

    from access.models import PersonIdentity
    from access.oidc import person_sign_in
    from access.roles import roles_ensure

    roles_ensure()
    settings.RECKON_OIDC_ISSUER = "https://sso.example.com/realms/ops"
    settings.RECKON_OIDC_GROUP_MAP = oidc_group_map("RECKON_OIDC_GROUP_MAP", "ops=oncall")
    claims = {"sub": "f3a9", "preferred_username": "olivia", "email": "olivia@example.com", "groups": ["ops"]}
    tab = lambda: person_sign_in(claims=claims).pk  # noqa: E731
    users, errors = at_once(tab, tab)
    assert errors == []
    assert len(set(users)) == 1 and len(users) == 2
    assert User.objects.count() == 1 and PersonIdentity.objects.count() == 1
