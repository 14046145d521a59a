import pytest
from django.db import connection


def pytest_collection_modifyitems(config, items):
    """Tests marked ``postgres`` run only when DATABASE_URL points at PostgreSQL (CI's second pass)."""
    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL: run with DATABASE_URL=postgres://...")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)
